"""The ``ratelimit`` command line, compatible with ratelimit v0.3.

v0.3 options keep their names, aliases and defaults (``-h`` is --hosts, so
help is ``--help``), and the spellings Getopt::Long took (``-interface``,
``-rate=28800``: ``longopts``); positional ``clean``, ``list``,
``stats``/``statistics`` act like the options.  New: ``--profile``, ``--mode``,
netem impairments, ``--netns``, ``--dry-run``, ``--json``, ``--force``,
``--debug`` and the subcommands ``profiles``, ``save``, ``restore``, ``vm``,
``lab`` and ``web``.

The parser and the dispatch every action goes through are kept together, so that an
option and what reads it are side by side; the work itself is in ``service``, ``readout``
and ``targets``, what --list and --stats print in ``listing``, and the subcommands in
``subcommands``.
"""

import argparse
import sys
import time
import traceback

from .. import __version__
from ..errors import RatelimitError, UsageError
from ..profiles import scenario as scenarios
from ..spec.model import GRANULARITIES
from ..spec.summary import describe, summary
from ..traces.tracespec import add_options
from . import subcommands
from .listing import as_json, render_table, strangers
from .longopts import long_options
from .subcommands import Parser

EXIT_INTERNAL = 70
ACTIONS = {"clean": "clean", "list": "list", "stats": "stats", "statistics": "stats"}

USAGE = """\
ratelimit [options]                      apply limits (needs --hosts and --ports)
       ratelimit [options] clean|list|stats      remove, list or count what is installed
       ratelimit profiles [--json]               list link profiles
       ratelimit save [FILE]                     save the applied links (default /etc/ratelimit/links.json)
       ratelimit restore [FILE] [--force]        apply the saved links again (at boot)
       ratelimit lab up|status|exec|apply|clean|down|demo ...  namespace lab
       ratelimit web [--listen ADDR:PORT] ...    live dashboard (ratelimit web --help)
       ratelimit vm [--memory 1G] -- COMMAND     run COMMAND in a full-kernel VM
       ratelimit follow --interface IF [--netns NS] [--step 100ms]  the trace driver
"""


class _Default(str):
    """A default value, told apart from the same text typed (--container chooses the device)."""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ratelimit", add_help=False, usage=USAGE, allow_abbrev=True,
                description="Emulate slow or distant links per (host, port) on a Linux router.")
    a = p.add_argument
    g = p.add_argument_group("actions (v0.3)")
    g.add_argument("--help", action="store_true", help="show this help")
    g.add_argument("--clean", action="store_true", help="remove what ratelimit installed on the interface")
    g.add_argument("--list", action="store_true", help="list what is installed, per (host, port, direction)")
    g.add_argument("--stat", "--statistics", "--stats", dest="stats", action="store_true",
                   help="the same with counters (bytes, packets, drops, overlimits, backlog)")
    g.add_argument("--verbose", "-v", action=argparse.BooleanOptionalAction, default=False,
                   help="print every traffic-control operation as it is made")
    g.add_argument("--noverbose", dest="verbose", action="store_false", help=argparse.SUPPRESS)
    g = p.add_argument_group("staged applies (a fleet's two-phase commit: docs/fleet.md)")
    g.add_argument("--stage", action="store_true", help="build the plan beside the installed one and check it; "
                   "traffic stays on the installed plan until --commit")
    g.add_argument("--commit", action="store_true", help="switch to the staged plan, then remove the old one")
    g.add_argument("--abort", action="store_true", help="remove the staged plan")
    g = p.add_argument_group("link selection and shape (v0.3)")
    g.add_argument("--interface", "--if", default=_Default("eth0"), help="interface to rate-limit (default eth0)")
    g.add_argument("--bandwidth", "--bw", default="100mbit", help="bandwidth of the device (default 100mbit)")
    g.add_argument("--hosts", "-h", help="hosts to limit, comma-separated names or addresses")
    g.add_argument("--ports", "-p", help="port ranges, e.g. 1024-2048,3000,5000-6000; with --per host, all (the "
                   "default there): every packet of each host, one match on its address")
    g.add_argument("--rate", "-r", help="bits per second per (host, port) (default 28800, or the profile's)")
    g.add_argument("--burst", "-b", help="burst: a bare number N is v0.3's rate x N / 8 bytes; or bytes (1600b, "
                   "3kb), or a time at the rate (20ms). Default: the profile's, else the mode's (police "
                   "without a profile: 5, as in v0.3)")
    g.add_argument("--direction", "-d", default="both",
                   help="source, dest[ination] or both (default both)")
    g.add_argument("--mtu", default="1514", help="maximum transfer unit (default 1514)")
    g.add_argument("--avpkt", default="1200", help="average packet size (default 1200)")
    g.add_argument("--mpu", default=None, help="minimum policing unit: the least a packet is charged "
                   "(default 64 with Ethernet framing, none with other link layers)")
    g = p.add_argument_group("additions")
    g.add_argument("--profile", help="link profile name or TOML file (see 'ratelimit profiles')")
    g.add_argument("--mode", choices=("police", "shape"),
                   help="shape: queue and send at the rate, as the link does (default with --profile); "
                        "police: drop above the rate (v0.3, the default without a profile)")
    for name, what in (("delay", "one-way delay, e.g. 200ms"), ("jitter", "delay variation, e.g. 10ms"),
                       ("delay-correlation", "jitter correlation, e.g. 25%%"),
                       ("loss", "random loss, e.g. 0.5%%, or a burst loss model, e.g. 'gemodel p=1%% r=25%%' "
                                "(docs/faults.md)"),
                       ("loss-correlation", "loss correlation"), ("duplicate", "duplicated packets, e.g. 1%%"),
                       ("duplicate-correlation", "duplicate correlation"), ("corrupt", "corrupted packets"),
                       ("corrupt-correlation", "corrupt correlation"), ("reorder", "reordered packets (needs a delay)"),
                       ("reorder-correlation", "reorder correlation"),
                       ("slot", "packets held and let out together, as a bursty MAC: 'min=2ms max=8ms packets=32 "
                                "bytes=64kb', or 'distribution=pareto delay=5ms jitter=2ms' (docs/faults.md)"),
                       ("aqm", "each link's queue managed (shape mode): fq_codel, codel, pie or cake, with the "
                               "kernel's parameters, e.g. 'fq_codel target=5ms ecn=on'; droptail: drop only when "
                               "full, the default (docs/faults.md)")):
        g.add_argument(f"--{name}", help=what)
    g.add_argument("--queue", help="each link's queue (shape mode): packets (10, 10p), bytes (3250b) or a time "
                   "at the rate (1s); default: the profile's, else the larger of 10 packets and 200 ms")
    g.add_argument("--queues", default="1", metavar="N|auto",
                   help="shape mode: spread the links over N tx queues of the interface, each with its own tree "
                        "(auto: all it has; default 1)")
    g.add_argument("--per", default=None, choices=GRANULARITIES,
                   help="link granularity: a link per (host, port) as in v0.3, one per host shared by "
                        "all its connections, or one shared by every selected host (an office behind one "
                        "line) (default port; host with --mix)")
    g.add_argument("--servers", metavar="PREFIXES", help="only the flows to and from these servers: addresses, "
                   "prefixes or ranges, comma-separated (default: any server)")
    g.add_argument("--server-ports", metavar="PORTS", help="only the flows to and from these server ports "
                   "(ranges like 80,443; needs --ports)")
    g.add_argument("--scenario", metavar="FILE", help="an audience: several cohorts of links from a TOML file "
                   "(see docs/profiles.md, Scenarios); device options (--mode, --bandwidth, ...) and link options apply "
                   "to every cohort")
    g.add_argument("--mix", metavar="PROFILE:SHARE,...", help="split --hosts (a link per host; with --per port, "
                   "their (host, port) links) between profiles by share, e.g. modem-28k8:60%%,modem-56k:30%%,isdn-64k:10%%")
    g.add_argument("--link", help="link layer over the profile's: ethernet, ppp-vj (modem), ppp-sync-vj (ISDN) "
                                   "or atm (DSL)")
    g.add_argument("--cell", metavar="DOWN[/UP]", help="the links also share this capacity, each still capped by its "
                   "own rate: a cell tower of phones, a DSLAM's backhaul (shape mode; docs/cells.md)")
    g.add_argument("--for", dest="lasting", metavar="DURATION",
                   help="the plan ends by itself after this long (90s, 10m, 2h; at most 30 days): a process of "
                        "ratelimit's then puts back the plan before it, or removes it; not restored after a reboot "
                        "once ended (docs/faults.md)")
    g.add_argument("--blackhole", action="store_true", default=None,
                   help="the links drop every packet, as links that went away: a change in place, undone by "
                        "applying without it (shape mode; docs/faults.md)")
    g.add_argument("--reject", action="store_true", default=None,
                   help="the links' flows are refused, as by a host that is gone: a TCP reset, ICMP port "
                        "unreachable for the rest (nftables); undone by applying without it (docs/faults.md)")
    add_options(g)
    g.add_argument("--no-follow", action="store_true", help="with traces: do not start the trace driver (a "
                   "supervisor runs 'ratelimit follow')")
    g.add_argument("--netns", help="network namespace the interface is in")
    g.add_argument("--container", metavar="NAME|ID", help="a Docker or Podman container: with --hosts (or a "
                   "scenario) it is the server and its links go on its host-side veth, facing it; without, it is "
                   "one user on a slow link, one link for all its traffic on that veth (docs/containers.md)")
    g.add_argument("--engine", choices=("docker", "podman"), help="the engine of --container and of "
                   "container:NAME hosts (default: whichever has it)")
    g.add_argument("--network", metavar="NAME", help="the network of --container to use, when it is on several")
    g.add_argument("--dry-run", action="store_true", help="print the shell/tc -batch script instead of applying")
    g.add_argument("--json", action="store_true", help="--list/--stats as JSON")
    g.add_argument("--force", action="store_true", help="replace root/ingress qdiscs and the IFB device ratelimit "
                   "did not install (put back if the apply fails); with clean: remove them")
    g.add_argument("--debug", action="store_true", help="show tracebacks")
    g.add_argument("--version", action="version", version=f"ratelimit {__version__}")
    a("action", nargs="?", help=argparse.SUPPRESS)
    return p


class Console:
    """Streams and terminal facts, injectable for tests."""

    def __init__(self, stdout=None, stderr=None):
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr

    def out(self, text=""):
        print(text, file=self.stdout)

    def err(self, text):
        print(text, file=self.stderr)

    def notice(self, text):
        """Something the user should know that is not an error (a killed run was repaired)."""
        self.err(f"ratelimit: {text}")

    def progress(self):
        """A progress callback drawing one line on a terminal, or None when piped."""
        # start-up time: the service package loads netlink; --help and --dry-run do without
        from ..service.progress import terminal
        return terminal(self.stderr, "applying:")


def main(argv=None, console: Console | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    con = console or Console()
    if not (argv and argv[0] in subcommands.NAMES):
        argv = long_options(argv, build_parser())  # v0.3's -interface, -rate=28800, ...
    debug = "--debug" in argv
    try:
        return _dispatch(argv, con)
    except RatelimitError as err:
        if debug:
            traceback.print_exc(file=con.stderr)
        con.err(f"ratelimit: {err}")
        return err.exit_code
    except KeyboardInterrupt:
        con.err("ratelimit: interrupted")
        return 130
    except BrokenPipeError:  # output piped into head(1) and the like
        return 0
    except Exception as err:  # a bug: say so in one line, traceback on --debug
        if debug:
            traceback.print_exc(file=con.stderr)
        con.err(f"ratelimit: internal error: {type(err).__name__}: {err} (run with --debug for details)")
        return EXIT_INTERNAL


def _dispatch(argv, con) -> int:
    if argv and argv[0] in subcommands.NAMES:
        return subcommands.run(argv[0], argv[1:], con)
    args = build_parser().parse_args(argv)
    if args.help:
        con.out(build_parser().format_help())
        return 0
    action = None
    if args.action:
        if args.action not in ACTIONS:
            raise UsageError(f"'{args.action}' is not an action (clean, list, stats, statistics) "
                             f"or subcommand ({', '.join(subcommands.NAMES)})")
        action = ACTIONS[args.action]
    for flag in ("clean", "list", "stats", "commit", "abort"):
        if getattr(args, flag):
            action = action or flag
    if args.stage and (action is not None or args.force):
        raise UsageError("--stage: it stages an apply; leave out --force and the actions "
                         f"({'--force' if args.force else '--' + action})")
    if args.container is not None:
        return _container(args, action, con)
    named = ()
    if action is None and args.hosts is not None:
        # a part not every run has: hosts named container:NAME
        from ..containers import lookup, attach
        if any(h.lower().startswith(lookup.HOST_PREFIX) for h in lookup.host_items(args.hosts)):
            with attach.turn():  # container:NAME on a router's own interface: its one network's address
                args.hosts, named = lookup.expand_hosts(args.hosts, server=None, network=args.network,
                                                            engine=args.engine)
            return _run(args, action, con, named=named)
    if (args.engine is not None or args.network is not None) and (action is not None or args.scenario is None):
        raise UsageError(ENGINE_NETWORK_ALONE)
    return _run(args, action, con)


ENGINE_NETWORK_ALONE = "--engine/--network: they go with --container, or container:NAME in --hosts or a scenario's hosts"


def _run(args, action, con, target=None, named=()) -> int:
    """One action (None: apply) on ``args.interface`` in ``args.netns``; ``target``: the
    ``targets.ContainerTarget`` of --container, for the record and its device; ``named``: hosts
    given as container:NAME, for the record."""
    echo = con.out if args.verbose else None
    notice = con.notice
    from .. import service  # with the kernel's netlink (pyroute2): not for --help, profiles or vm
    from ..service.request import FIELDS, Options
    from ..containers.targets import recorded_server
    if action == "clean":
        if args.dry_run:
            from .dryrun import dry_clean  # start-up time: for --dry-run only
            return dry_clean(args, con)
        server = recorded_server(args.interface, args.netns)
        removed = service.clean(args.interface, args.netns, force=args.force, echo=echo, notice=notice)
        con.out(f"{args.interface}: removed what ratelimit installed" if removed
                else f"{args.interface}: nothing installed by ratelimit")
        if server is not None:
            _whole_packets(server, target, con)
        return 0
    if action in ("commit", "abort"):
        return _commit_or_abort(args, action, con, echo)
    if action in ("list", "stats"):
        # start-up time: the read-outs load netlink (not for --help or --dry-run)
        from ..service.readout import statistics
        data = statistics(args.interface, args.netns, notice=notice, repair=True)  # a killed run's, as apply would
        strangers(data, con)
        if args.json:
            con.out(as_json(data, action))
        else:
            con.out(render_table(data, counters=action == "stats"))
        return 0
    asks = None if args.scenario is None else scenarios.load(args.scenario)
    if asks is not None:
        # a part not every run has: a scenario's container:NAME hosts
        from ..containers.targets import scenario_hosts
        asks = scenario_hosts(asks, target, network=args.network, engine=args.engine)
        if target is None and (args.engine or args.network) and not any(a.named for a in asks):
            raise UsageError(ENGINE_NETWORK_ALONE)
    options = {name: getattr(args, name) for name in FIELDS if name != "scenario" and hasattr(args, name)}
    req = service.request_of(Options(**options, scenario=asks))
    if target is not None or named:
        req = service.for_container(req, None if target is None else target.container,
                                    named if target is None else target.named,
                                    server_side=target is not None and target.server_side)
    if args.dry_run:
        from .dryrun import print_plan  # start-up time: the script, for --dry-run only
        return print_plan(req, con, stage=args.stage, target=target)
    started = time.monotonic()
    if args.stage:
        from ..service.staging import stage  # a part not every run has
        plan = stage(req, progress=con.progress(), echo=echo, notice=notice,
                     on_wait=lambda: con.err(f"ratelimit: waiting for another run on {req.interface}"))
        sent = "already staged (nothing sent)" if plan.how == "already staged" else \
            f"staged ({len(plan.changed)} operations in {time.monotonic() - started:.2f} s)"
        con.out(f"{req.interface}: {describe(summary(req))}; {sent}; traffic stays on the installed plan until: "
                f"ratelimit --commit --interface {req.interface}{_ns(req.netns)}")
        return 0
    server = recorded_server(req.interface, req.netns)  # a container server's links, which this apply replaces
    plan = service.apply(req, force=args.force, progress=con.progress(), echo=echo, notice=notice,
                         on_wait=lambda: con.err(f"ratelimit: waiting for another run on {req.interface}"),
                         follow=not args.no_follow)
    sent = f"{len(plan.ops)} operations" if plan.changed is None else \
        f"{_HOW[plan.how]} ({len(plan.changed)} operations)"
    if req.server_side:  # a server's device sends single segments (set only for a container target)
        from ..containers.lookup import single_segments
        single_segments(target.pid, target.wired.inside_index)
    elif server is not None:
        _whole_packets(server, target, con)
    con.out(f"{req.interface}: {describe(summary(req))}; {sent} in {time.monotonic() - started:.2f} s")
    return 0


def _commit_or_abort(args, action, con, echo) -> int:
    """--commit or --abort of the plan staged on ``args.interface``."""
    from ..service import staging  # start-up time: with the kernel's netlink (pyroute2)
    if action == "abort":
        req = staging.abort(args.interface, args.netns, notice=con.notice)
        con.out(f"{args.interface}: nothing was staged" if req is None else
                f"{args.interface}: removed the staged plan ({describe(summary(req))}); the installed plan is unchanged")
        return 0
    started = time.monotonic()
    plan = staging.commit(args.interface, args.netns, progress=con.progress(), echo=echo, notice=con.notice,
                          follow=not args.no_follow)
    con.out(f"{args.interface}: {describe(summary(plan.request))}; committed ({len(plan.changed)} operations) "
            f"in {time.monotonic() - started:.2f} s")
    return 0


def _ns(netns) -> str:
    return f" --netns {netns}" if netns else ""


def _whole_packets(server, target, con) -> None:
    """The container whose server links were on the interface (``server``, its recorded
    request) has them no more: its device hands its qdisc whole packets again, as before
    they came.  A --container run (``target``: the same container) holds the containers'
    turn and knows the device; otherwise the record's note of the container finds it."""
    if target is not None:
        # a part not every run has: a container's device
        from ..containers.lookup import single_segments
        single_segments(target.pid, target.wired.inside_index, on=False)
    else:
        # a part not every run has: a container's device
        from ..containers.life import recorded_single_segments
        recorded_single_segments(server, on=False, notice=con.notice)


def _container(args, action, con) -> int:
    """--container: the links on the container's host-side veth, as the server of --hosts or
    as one user; clean, --list and --stats also look at its own interface (where records
    of 0.4 and earlier put a server's)."""
    # a part not every run has: --container
    from ..containers.targets import both_targets, container_target
    if not isinstance(args.interface, _Default) or args.netns is not None:
        raise UsageError("--container: it says which device; leave out --interface and --netns")
    if action is None:
        use = "server" if args.hosts is not None or args.scenario is not None else "user"
        with container_target(args.container, hosts=args.hosts, network=args.network, engine=args.engine,
                              use=use, notice=con.notice) as target:
            args.interface, args.netns = target.interface, target.netns
            if use == "user" or args.hosts is not None:
                args.hosts = target.hosts
            args.per = args.per or "host"
            return _run(args, None, con, target)
    if action == "clean" and args.dry_run:
        raise UsageError("--dry-run: clean with --container removes what is recorded; run it without --dry-run")
    with both_targets(args.container, network=args.network, engine=args.engine, notice=con.notice) as found:
        if action == "clean":
            for t in found:
                args.interface, args.netns = t.interface, t.netns
                _run(args, "clean", con, t)
            return 0
        # start-up time: the read-outs load netlink (not for --help or --dry-run)
        from ..service.readout import statistics
        datas = [statistics(t.interface, t.netns, notice=con.notice, repair=True) for t in found]
        shown = [d for d in datas if d["applied"]] or datas[:1]
        for t, data in zip(found, datas):
            if data not in shown:
                continue
            strangers(data, con)
            data["container"] = {"use": t.use, "interface": t.interface}
            if args.json:
                con.out(as_json(data, action))
            else:
                where = "its own interface" if t.netns else "its host-side veth"
                con.out(f"# {args.container}: {where}, {t.interface}")
                con.out(render_table(data, counters=action == "stats"))
        return 0


_HOW = {"in place": "changed in place", "make-before-break": "built beside the old plan, then the old removed"}


def run() -> None:
    sys.exit(main())
