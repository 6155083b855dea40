"""apply / clean / preview: the changes the CLI, the web UI and the lab share (a request
is made in ``request``; reading what is installed is ``readout``).

``apply`` leaves the interface with the new plan whole or exactly as it was
(``recovery``).  Over installed links of the same selectors it changes them in place;
over others it builds the new plan beside the old before removing it (``diff``).
Nothing is deleted before the kernel is checked against what ratelimit recorded
(``fingerprint``).
"""

import contextlib
import dataclasses
import os
import time

from ..errors import ConflictError, FieldError, KernelMissing, PermissionDenied, StateError, as_root
from ..plan import diff, layout, placement, reject
from ..plan.compile import compile_plan, compiled, ifb_name
from ..spec.model import Request
from ..spec.names import check_target
from ..state import recovery, records
from ..state.recovery import describe_request
from ..state.installed import Installed, check_interface, executor, find_installed
from ..traces import tracespec
from . import expiry
from ..driver import follow as driver  # "follow" is apply's argument
from ..kernel import nft
from ..kernel.distfile import check_tables
from ..kernel.offload import advice


def check_queues(ex, req: Request) -> None:
    """The interface sends on a tx queue for each tree (its active queues, which its
    channels may set below the ones it was made with; the IFB device ratelimit makes gets
    them): a link pinned to a queue it does not send on would wrap to another queue's tree."""
    if req.queues == 1 or req.direction == "source":
        return
    have = ex.links.tx_queues(req.interface)
    if have < req.queues:
        raise FieldError("--queues", req.queues, f"is more than {req.interface} sends on ({have} tx queues); "
                         f"use --queues {have} or auto, or give it more (ethtool -L {req.interface}; a veth "
                         f"made with ip link add ... numtxqueues {req.queues})")


def require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionDenied(f"changing traffic control needs root (run it with {as_root()})")


def check_kernel(plan) -> None:
    """Refuse, before anything is sent, a plan this machine cannot apply: a slot's table tc
    would not find (``distfile.check_tables``, a FieldError), a part the kernel lacks
    (``KernelMissing``)."""
    from ..kernel.probe import missing_message, plan_lacks  # start-up time: the probe loads pyroute2
    check_tables(plan.ops)
    lacking = plan_lacks(plan.features())
    if lacking:
        raise KernelMissing(missing_message(lacking[0]), lacking[0])


def refuse_foreign(plan, foreign: dict, installed: Installed) -> None:
    """ConflictError for a part the new plan would replace that ratelimit did not install."""
    dev = plan.request.interface
    mine = foreign.get(dev, set())
    root = (installed.picture.get(dev) or {}).get("root")
    if "root" in mine:
        raise ConflictError(f"--interface: {dev} has a root qdisc ratelimit did not install "
                            f"({root[0]} {root[1] >> 16:x}:); use --force to replace it")
    if "ingress" in mine and plan.has_ingress():
        raise ConflictError(f"--interface: {dev} has an ingress qdisc ratelimit did not install; "
                            "use --force to replace it")
    ifb = ifb_name(dev)
    if ifb in foreign and ifb in plan.devices():
        raise ConflictError(f"--interface: device {ifb} exists but ratelimit did not make it; "
                            "use --force to replace it")


def refuse_staged(installed: Installed, interface: str, netns) -> None:
    """ConflictError when a plan is staged on the interface: a commit or an abort says what
    becomes of it, never an apply over it."""
    if installed.staged is None:
        return
    ns = f" --netns {netns}" if netns else ""
    raise ConflictError(f"--interface: {interface} has a staged plan ({describe_request(installed.staged)}); "
                        f"commit it (ratelimit --commit --interface {interface}{ns}) or abort it (--abort) first")


def apply(req: Request, *, force: bool = False, progress=None, echo=None, on_wait=None, lock_timeout=None,
          notice=None, follow: bool = True, only_if=None):
    """Install ``req``; returns the plan installed (``how``: "built", "in place" or
    "make-before-break", with ``changed`` the operations sent for the last two; its
    ``request.generation`` may differ from ``req``'s: see ``placement.over``).  The interface ends
    up with the new plan whole, or as it was (``recovery.Transaction``): on a refused step, an
    exception, SIGINT or SIGTERM.
    ``lock_timeout``: seconds to wait for another run on the interface (default: as long as
    it takes).  ``notice(message)`` hears about links whose rates add up to more than
    ``--bandwidth``, repairs of a killed run, and devices that merge received frames,
    which the links would meter as one (default: stderr).  A plan with traces records when
    they start (``tracespec.stamped``) and, with ``follow``, has its driver started unless
    one runs (``follow.start``).  A plan that lasts (``Request.lasting_ms``) records its end
    and the plan it replaces, and has its watcher started (``expiry``).  ``only_if(request)``:
    apply only if it holds of the installed request (None: nothing installed), asked under
    the interface's lock; else return None (``expiry``: the plan whose end came)."""
    plan = compile_plan(req)
    require_root()
    warning = layout.oversubscribed(req)
    if warning:
        (notice or recovery.notice_to_stderr)(warning)
    with executor(req.netns) as ex, records.lock(req.netns, req.interface, on_wait, lock_timeout):
        check_interface(ex, req, req.netns)
        check_queues(ex, req)
        recovery.repair(ex, req.netns, req.interface, notice)
        installed = find_installed(ex, req.netns, req.interface, force=force)
        if only_if is not None and not only_if(installed.request):
            return None
        refuse_staged(installed, req.interface, req.netns)
        now_ms = int(time.time() * 1000)
        plan = dataclasses.replace(plan, request=expiry.stamped(tracespec.stamped(req, installed.request, now_ms),
                                                                now_ms, installed.request))
        foreign = installed.foreign(req.interface)
        if not force:
            refuse_foreign(plan, foreign, installed)
        check_kernel(plan)
        if installed.stale:
            records.forget(req.netns, req.interface)
        captured = None
        if force and foreign:
            captured = ex.capture(foreign)  # sent back if this apply does not complete
        removal = recovery.teardown_of(foreign) if force else ()
        changes = undo = switch = None
        if installed.plan is not None:
            removal = installed.plan.teardown() + removal
            if not (force and foreign):
                plan, changes, switch = placement.over(installed.plan, plan)
                undo = None if changes is None else diff.in_place(plan, installed.plan)
        change = recovery.Transaction(ex, req.netns, req.interface, old=installed.plan, new=plan, captured=captured)
        with rejects(plan.request, installed.request, echo):
            change.run(removal, progress=progress, echo=echo, changes=changes, undo=undo, switch=switch)
        merging = ex.merging()
    if merging:
        (notice or recovery.notice_to_stderr)(advice(merging))
    if follow:
        if driver.traced(plan.request):
            driver.start(req.netns, req.interface)
    if plan.request.expires_ms is not None:
        expiry.start(req.netns, req.interface)
    if changes is not None:
        return dataclasses.replace(plan, changed=changes, how="in place")
    if switch is not None:
        return dataclasses.replace(plan, changed=switch.ops(), how="make-before-break")
    return plan


def preview(req: Request, *, stage: bool = False) -> tuple[tuple, str]:
    """What ``apply`` would send for ``req`` (for --dry-run), without the lock or root:
    (operations, how) -- the changes in place over the plan ratelimit recorded on the
    interface when its selectors are the same, else the plan's operations after the
    installed plan's teardown.  ``stage``: what ``staging.stage`` would build.  The record
    is taken as written (apply checks it against the kernel first)."""
    plan = compile_plan(req)
    try:
        record = records.load(req.netns, req.interface)
    except StateError:
        record = None
    known = record is not None and record.request is not None and not record.problem
    if stage:
        return _stage_preview(compiled(record.request) if known else None, plan)
    if not known:
        return plan.ops, "a new plan"
    old = compiled(record.request)
    plan, changes, switch = placement.over(old, plan)
    if changes is not None:
        return changes, f"changes in place of the installed plan ({len(changes)} operations)"
    if switch is not None:
        return switch.ops(), (f"the new plan built beside the installed one, then the old removed "
                              f"(make-before-break: {len(switch.adds)} operations, then {len(switch.removal)} removals)")
    return old.teardown() + plan.ops, "the installed plan removed, then the new plan (other link layer or layout)"


def not_beside(req: Request, old) -> ConflictError:
    """The refusal of a stage whose plan cannot stand beside the installed plan ``old``."""
    return ConflictError(f"--stage: {describe_request(req)} cannot be built beside the plan installed on "
                         f"{req.interface} ({describe_request(old.request)}): other devices, direction, tx queues or "
                         "link layer, or together more links than the handles hold; apply it without --stage (the "
                         "old plan is removed first), or clean first")


def _stage_preview(old, plan) -> tuple[tuple, str]:
    placed = placement.staged(old, plan)
    if placed is None:
        raise not_beside(plan.request, old)
    switch = diff.staging(old, placed)
    return switch.build, (f"staged: built beside {'the installed plan' if old else 'no plan'}, where no packet reaches "
                          f"it ({len(switch.build)} operations); --commit then sends {len(switch.commit.ops())}")


def clean(interface: str, netns: str | None = None, *, force: bool = False, echo=None, lock_timeout=None,
          notice=None, only_if=None) -> bool:
    """Remove what ratelimit installed on ``interface``; True if there was something.
    ``force``: remove the root and ingress qdiscs and the IFB device whoever made them.
    ``only_if(request)``: remove only if it holds of the installed request (None when there
    is none), asked under the interface's lock (``expiry``: the plan whose end came)."""
    interface, netns = check_target(interface, netns)
    require_root()
    with executor(netns) as ex, records.lock(netns, interface, timeout=lock_timeout):
        check_interface(ex, interface, netns)
        recovery.repair(ex, netns, interface, notice)
        installed = find_installed(ex, netns, interface, force=force)
        if only_if is not None and not only_if(None if installed.plan is None else installed.plan.request):
            return False
        foreign = installed.foreign(interface)
        plans = [p for p in (installed.plan, installed.staged_plan) if p is not None]
        if not plans and not force:
            if installed.stale:
                records.forget(netns, interface)
            root = (installed.picture.get(interface) or {}).get("root")
            if "root" in foreign.get(interface, ()):
                raise ConflictError(f"--interface: {interface} has a root qdisc ratelimit did not install "
                                    f"({root[0]} {root[1] >> 16:x}:); left alone (use --force to remove it)")
            return False
        teardown = recovery.union(*(p.teardown() for p in plans))  # a staged plan's too
        if force:
            teardown = teardown + recovery.teardown_of(foreign)
        if not teardown:
            records.forget(netns, interface)
            return False
        for op in teardown:
            if echo:
                echo(op.lines()[0])
        recovery.remove(ex, netns, interface, teardown, old=installed.plan, forced=force)
        _drop_rejects(netns, interface, echo)  # also one a killed run left beside a plan without a reject
        _stop_driver(netns, interface)
        return True


@contextlib.contextmanager
def rejects(req: Request, old: Request | None, echo=None):
    """The reject table of ``req`` (``plan.reject``) in place of the interface's, around the
    change of its links: checked first (a refusal changes nothing), loaded in one nft
    transaction, and the table before it put back if the change does not complete.  Neither
    ``req`` nor the installed ``old`` rejecting: nothing to do (no nft is run)."""
    table = reject.table_name(req.interface)
    rules = reject.ruleset(req)
    if rules is None and not (old is not None and reject.rejected(old)):
        yield
        return
    before = nft.listed(req.netns, table)
    if rules is None and before is None:
        yield
        return
    if rules is not None:
        nft.check(req.netns, rules)
    if echo:
        echo(f"nft -f - (table inet {table}: {'the reject rules' if rules else 'removed'})")
    nft.load(req.netns, rules or reject.removal(req.interface))
    try:
        yield
    except BaseException:
        nft.load(req.netns, reject.removal(req.interface) + (before or ""))
        raise


def _drop_rejects(netns, interface: str, echo=None) -> None:
    """The interface's reject table removed, if it has one."""
    if nft.listed(netns, reject.table_name(interface)) is not None:
        if echo:
            echo(f"nft delete table inet {reject.table_name(interface)}")
        nft.load(netns, reject.removal(interface))


def _stop_driver(netns, interface) -> None:
    """The interface's trace driver stops with the plan it follows (it would on its next
    step, finding no record; this makes it so before clean returns)."""
    driver.stop(netns, interface)


