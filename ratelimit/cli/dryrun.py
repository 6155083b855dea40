"""What ``--dry-run`` prints: the shell and ``tc -batch`` script of an apply, a stage or a
clean, with comment lines saying what it is (the plan, how it goes over the installed one,
warnings, what a trace driver does)."""

from .. import __version__
from ..errors import StateError
from ..plan import reject
from ..plan.compile import compile_plan
from ..plan.layout import oversubscribed
from ..plan.script import script
from ..spec.names import check_target, shell_word
from ..spec.summary import describe, summary
from ..state import records
from ..state.recovery import union


def print_plan(req, con, *, stage: bool = False, target=None) -> int:
    """The script of applying (or, with ``stage``, staging) ``req``; ``target``: the
    ``targets.ContainerTarget`` of --container."""
    from .. import service  # start-up time: the service reads the record (no netlink for a dry run)
    ops, how = service.preview(req, stage=stage)
    text = script(ops, req.netns)  # refuses a name tc -batch cannot carry before anything is printed
    con.out(f"# ratelimit {__version__} plan for {req.interface}: {describe(summary(req))}")
    con.out(f"# {how}")
    warning = oversubscribed(req)
    if warning:
        con.out(f"# warning: {warning}")
    for line in traced_lines(req):
        con.out(f"# {line}")
    if req.server_side:  # set only for a container target (for_container)
        con.out(f"# then the container's own device sends single segments: nsenter "
                f"--net=/proc/{target.pid}/ns/net ip link set dev {shell_word(target.wired.inside)} gso_max_segs 1")
    con.out(text.rstrip("\n"))
    rules = reject.ruleset(req)
    if rules is None and _recorded_reject(req.netns, req.interface):
        rules = reject.removal(req.interface)
    if rules is not None:
        con.out(nft_block(rules, req.netns))
    return 0


def nft_block(rules: str, netns: str | None) -> str:
    """The shell lines that load a reject's nftables rules (``plan.reject``)."""
    run = f"ip netns exec {shell_word(netns)} nft" if netns else "nft"
    return f"{run} -f - <<'EOF'\n{rules}EOF"


def _recorded_reject(netns, interface) -> bool:
    try:
        record = records.load(netns, interface)
    except StateError:  # an unreadable record: apply says why
        return False
    return bool(record and record.request and reject.rejected(record.request))


def traced_lines(req) -> list[str]:
    """What a traced plan's links and cells follow, for --dry-run: per traced cohort its
    traces and phases, per traced cell its traces, and that a driver sets the classes and
    gates the script builds."""
    lines = []
    cells = {c.cell.name: c.cell for c in req.cohorts if c.cell is not None and c.cell.trace is not None}
    for name, cell in cells.items():
        lines.append(f"cell {name}: {cell.trace.text()}; a driver ('ratelimit follow') changes the cell's class "
                     "every step, and shuts and opens its tbf gate, from the apply on")
    for c in req.cohorts:
        if c.trace is not None:
            stages = any(s is not None and s.netem for s in (c.trace.down, c.trace.up))
            lines.append(f"cohort {c.name}: {c.trace.text()}; a driver ('ratelimit follow') changes its classes' "
                         "rates and shuts and opens their tbf gates every step"
                         f"{', and sets the delay and loss of the netem stages under the gates' if stages else ''}"
                         ", from the apply on")
    return lines


def dry_clean(args, con) -> int:
    """The script of ``--clean``: the recorded plan's teardown, and a staged plan's."""
    check_target(args.interface, args.netns)
    record = records.load(args.netns, args.interface)
    plans = [compile_plan(r) for r in (record.request, record.staged) if r is not None] if record else []
    if not plans:
        con.out(f"# {args.interface}: nothing recorded as installed by ratelimit")
        return 0
    con.out(script(union(*(p.teardown() for p in plans)), args.netns).rstrip("\n"))
    if any(reject.rejected(p.request) for p in plans):
        con.out(nft_block(reject.removal(args.interface), args.netns))
    return 0
