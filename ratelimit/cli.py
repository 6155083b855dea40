"""The ``ratelimit`` command line, compatible with ratelimit v0.3.

v0.3 options keep their names, aliases and defaults (``-h`` is --hosts, so
help is ``--help``), and the spellings Getopt::Long took (``-interface``,
``-rate=28800``: ``getopt``); positional ``clean``, ``list``,
``stats``/``statistics`` act like the options.  New: ``--profile``, ``--mode``,
netem impairments, ``--netns``, ``--dry-run``, ``--json``, ``--force``,
``--debug`` and the subcommands ``profiles``, ``save``, ``restore``, ``vm``,
``lab`` and ``web``.

Over 400 lines on purpose: one parser and the dispatch every action goes through, kept
together so that an option and what reads it are side by side; the work itself is in
``service``, ``readout``, ``targets`` and the subcommands' own modules.
"""

import argparse
import json
import os
import sys
import time
import traceback

from . import __version__
from . import scenario as scenarios
from .errors import PermissionDenied, RatelimitError, UsageError
from .model import GRANULARITIES
from .getopt import long_options
from .summary import describe, summary
from .layout import oversubscribed

EXIT_INTERNAL = 70
SUBCOMMANDS = ("profiles", "save", "restore", "vm", "lab", "web", "follow")  # web: registered by the webui package
PLUGIN_GROUP = "ratelimit.subcommands"
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


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, our exit code, no usage dump
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""  # a subcommand's name
        if message.startswith("unrecognized arguments: "):
            extra = message.split(": ", 1)[1]
            message = (f"{extra}: not an option (see {self.prog} --help)" if extra.startswith("-") else
                       f"{where}'{extra}' is an argument too many (see {self.prog} --help)")
        elif where:
            message = f"{where}{message} (see {self.prog} --help)"
        raise UsageError(message)


def _subparser(name: str, description: str) -> _Parser:
    """A subcommand's parser: ``--help`` (and ``-h``, which only the main command line
    gives to --hosts) prints its usage and options."""
    p = _Parser(prog=f"ratelimit {name}", add_help=False, description=description)
    p.add_argument("--help", "-h", action="store_true", help="show this help")
    return p


def _profiles_parser() -> _Parser:
    p = _subparser("profiles", "List the link profiles: built-in ones and those in the profile path "
                               "(docs/profiles.md).")
    p.add_argument("--json", action="store_true", help="as JSON")
    return p


SAVED = "$RATELIMIT_CONFIG_DIR/links.json, by default /etc/ratelimit/links.json"


def _save_parser() -> _Parser:
    p = _subparser("save", "Save the links applied on every interface, resolved, for restore at boot.")
    p.add_argument("file", nargs="?", metavar="FILE", help=f"where to write (default {SAVED})")
    return p


def _restore_parser() -> _Parser:
    p = _subparser("restore", "Apply the saved links again (at boot: README, Surviving a reboot).")
    p.add_argument("file", nargs="?", metavar="FILE", help=f"what to read (default {SAVED})")
    p.add_argument("--force", action="store_true",
                   help="replace root/ingress qdiscs and IFB devices ratelimit did not install")
    return p


def _parse_sub(parser: _Parser, argv, con):
    """The subcommand's arguments, or None once its help is printed."""
    args = parser.parse_args(argv)
    if args.help:
        con.out(parser.format_help().rstrip("\n"))
        return None
    return args


class _Default(str):
    """A default value, told apart from the same text typed (--container chooses the device)."""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ratelimit", add_help=False, usage=USAGE, allow_abbrev=True,
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
                       ("delay-correlation", "jitter correlation, e.g. 25%%"), ("loss", "random loss, e.g. 0.5%%"),
                       ("loss-correlation", "loss correlation"), ("duplicate", "duplicated packets, e.g. 1%%"),
                       ("duplicate-correlation", "duplicate correlation"), ("corrupt", "corrupted packets"),
                       ("corrupt-correlation", "corrupt correlation"), ("reorder", "reordered packets (needs a delay)"),
                       ("reorder-correlation", "reorder correlation")):
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
                   "(see README, Scenarios); device options (--mode, --bandwidth, ...) and link options apply "
                   "to every cohort")
    g.add_argument("--mix", metavar="PROFILE:SHARE,...", help="split --hosts (a link per host; with --per port, "
                   "their (host, port) links) between profiles by share, e.g. modem-28k8:60%%,modem-56k:30%%,isdn-64k:10%%")
    g.add_argument("--link", help="link layer over the profile's: ethernet, ppp-vj (modem), ppp-sync-vj (ISDN) "
                                   "or atm (DSL)")
    from .tracespec import add_options
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
        from .progress import terminal
        return terminal(self.stderr, "applying:")


def main(argv=None, console: Console | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    con = console or Console()
    if not (argv and argv[0] in SUBCOMMANDS):
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
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0], argv[1:], con)
    args = build_parser().parse_args(argv)
    if args.help:
        con.out(build_parser().format_help())
        return 0
    action = None
    if args.action:
        if args.action not in ACTIONS:
            raise UsageError(f"'{args.action}' is not an action (clean, list, stats, statistics) "
                             f"or subcommand ({', '.join(SUBCOMMANDS)})")
        action = ACTIONS[args.action]
    for flag in ("clean", "list", "stats"):
        if getattr(args, flag):
            action = action or flag
    if args.container is not None:
        return _container(args, action, con)
    named = ()
    if action is None and args.hosts is not None:
        from . import containers, ctrun
        if any(h.lower().startswith(containers.HOST_PREFIX) for h in containers.host_items(args.hosts)):
            with ctrun.turn():  # container:NAME on a router's own interface: its one network's address
                args.hosts, named = containers.expand_hosts(args.hosts, server=None, network=args.network,
                                                            engine=args.engine)
            return _run(args, action, con, named=named)
    if (args.engine is not None or args.network is not None) and (action is not None or args.scenario is None):
        raise UsageError(ENGINE_NETWORK_ALONE)
    return _run(args, action, con)


ENGINE_NETWORK_ALONE = "--engine/--network: they go with --container, or container:NAME in --hosts or a scenario's hosts"


def _run(args, action, con, target=None, named=()) -> int:
    """One action (None: apply) on ``args.interface`` in ``args.netns``; ``target``: the
    ``targets.Target`` of --container, for the record; ``named``: hosts given as
    container:NAME, for the record."""
    echo = con.out if args.verbose else None
    notice = con.notice
    from . import service
    if action == "clean":
        if args.dry_run:
            return _dry_clean(args, con)
        removed = service.clean(args.interface, args.netns, force=args.force, echo=echo, notice=notice)
        con.out(f"{args.interface}: removed what ratelimit installed" if removed
                else f"{args.interface}: nothing installed by ratelimit")
        return 0
    if action in ("list", "stats"):
        from .readout import statistics
        data = statistics(args.interface, args.netns, notice=notice)
        _strangers(data, con)
        if args.json:
            con.out(_as_json(data, action))
        else:
            con.out(render_table(data, counters=action == "stats"))
        return 0
    per = args.per or ("host" if args.mix is not None else "port")
    asks = None if args.scenario is None else scenarios.load(args.scenario)
    if asks is not None:
        from .targets import scenario_hosts
        asks = scenario_hosts(asks, target, network=args.network, engine=args.engine)
        if target is None and (args.engine or args.network) and not any(a.named for a in asks):
            raise UsageError(ENGINE_NETWORK_ALONE)
    req = service.make_request(
        args.interface, hosts=args.hosts, ports=args.ports, profile=args.profile, netns=args.netns,
        mode=args.mode, direction=args.direction, rate=args.rate, burst=args.burst,
        bandwidth=args.bandwidth, mtu=args.mtu, avpkt=args.avpkt, mpu=args.mpu, queue=args.queue,
        per=per, link=args.link, mix=args.mix, servers=args.servers, server_ports=args.server_ports,
        queues=args.queues, scenario=asks,
        **{name: getattr(args, name) for name in service.IMPAIRMENTS}, **_traces(args))
    if target is not None or named:
        req = service.for_container(req, None if target is None else target.container,
                                    named if target is None else target.named,
                                    server_side=target is not None and target.server_side)
    if args.dry_run:
        from .script import script
        ops, how = service.preview(req)
        text = script(ops, req.netns)  # refuses a name tc -batch cannot carry before anything is printed
        con.out(f"# ratelimit {__version__} plan for {req.interface}: {describe(summary(req))}")
        con.out(f"# {how}")
        warning = oversubscribed(req)
        if warning:
            con.out(f"# warning: {warning}")
        for line in traced_lines(req):
            con.out(f"# {line}")
        if req.server_side:  # set only for a container target (for_container)
            from .names import shell_word
            con.out(f"# then the container's own device sends single segments: nsenter "
                    f"--net=/proc/{target.pid}/ns/net ip link set dev {shell_word(target.wired.inside)} gso_max_segs 1")
        con.out(text.rstrip("\n"))
        return 0
    started = time.monotonic()
    if target is not None:
        from .targets import recorded_use
        was_server = recorded_use(target.interface) == "server"  # the veth held a server's links
    plan = service.apply(req, force=args.force, progress=con.progress(), echo=echo, notice=notice,
                         on_wait=lambda: con.err(f"ratelimit: waiting for another run on {req.interface}"),
                         follow=not args.no_follow)
    sent = f"{len(plan.ops)} operations" if plan.changed is None else \
        f"{_HOW[plan.how]} ({len(plan.changed)} operations)"
    if target is not None and (req.server_side or was_server):
        from .containers import single_segments  # a server's device sends single segments; a user's as it did
        single_segments(target.pid, target.wired.inside_index, on=req.server_side)
    con.out(f"{req.interface}: {describe(summary(req))}; {sent} in {time.monotonic() - started:.2f} s")
    return 0


def _traces(args) -> dict:
    """The trace options as ``service.make_request`` takes them."""
    from .tracespec import KEYS
    return {key: getattr(args, key) for key in KEYS}


def traced_lines(req) -> list[str]:
    """What a traced plan's links follow, for --dry-run: per traced cohort its traces and
    phases, and that a driver sets the classes and gates the script builds."""
    lines = []
    for c in req.cohorts:
        if c.trace is not None:
            stages = any(s is not None and s.netem for s in (c.trace.down, c.trace.up))
            lines.append(f"cohort {c.name}: {c.trace.text()}; a driver ('ratelimit follow') changes its classes' "
                         "rates and shuts and opens their tbf gates every step"
                         f"{', and sets the delay and loss of the netem stages under the gates' if stages else ''}"
                         ", from the apply on")
    return lines


def _as_json(data: dict, action: str) -> str:
    """--list --json (the links without their counters) or --stats --json, as one line."""
    if action == "list":
        for row in data["links"]:
            for key in ("bytes", "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts"):
                row.pop(key, None)
    return json.dumps(data, separators=(",", ":"))  # compact: the C encoder (indent is Python's)


def _container(args, action, con) -> int:
    """--container: the links on the container's host-side veth, as the server of --hosts or
    as one user; clean, --list and --stats also look at its own interface (where records
    of 0.4 and earlier put a server's)."""
    from .targets import both_targets, container_target
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
                _run(args, "clean", con)
                if t.server_side:
                    from .containers import single_segments
                    single_segments(t.pid, t.wired.inside_index, on=False)
            return 0
        from .readout import statistics
        datas = [statistics(t.interface, t.netns, notice=con.notice) for t in found]
        shown = [d for d in datas if d["applied"]] or datas[:1]
        for t, data in zip(found, datas):
            if data not in shown:
                continue
            _strangers(data, con)
            data["container"] = {"use": t.use, "interface": t.interface}
            if args.json:
                con.out(_as_json(data, action))
            else:
                where = "its own interface" if t.netns else "its host-side veth"
                con.out(f"# {args.container}: {where}, {t.interface}")
                con.out(render_table(data, counters=action == "stats"))
        return 0


def _strangers(data: dict, con) -> None:
    """A notice for each container named in the hosts that has other addresses now, or is
    not running (``ctlife.strangers``)."""
    from .ctlife import strangers
    for line in strangers(data["applied"]):
        con.notice(line)


_HOW = {"in place": "changed in place", "make-before-break": "built beside the old plan, then the old removed"}


def render_table(data: dict, counters: bool) -> str:
    from .units import format_rate
    applied = data["applied"]
    if not applied:
        return f"{data['interface']}: nothing installed by ratelimit"
    head = f"{applied['interface']}: {describe(applied)}"
    driver = data.get("driver")
    if driver:
        head += "\n" + (f"trace driver: following (pid {driver['pid']}, a step every {driver['step_ms']} ms, at step "
                        f"{driver['step']}; {driver['shut']} of {driver['links']} traced links shut)"
                        if driver["running"] else f"trace driver: NOT RUNNING: {driver['notice']}")
    cols = ["direction", "host", "port", "rate"]
    if counters:
        cols += ["bytes", "packets", "drops", "overlimits", "backlog"]
    rows = []
    for link in data["links"]:
        rate = format_rate(link["rate_bps"]) if link["rate_bps"] else "unlimited"
        if link.get("trace"):
            now = link.get("trace_bps")
            rate = f"follows {link['trace']}" + ("" if now is None else f" (now {format_rate(now) if now else 'shut'})")
        row = [link["direction"], link["host"] or "others", "all" if link["port"] is None else str(link["port"]), rate]
        if counters:
            row += [str(link["bytes"]), str(link["packets"]), str(link["drops"]), str(link["overlimits"]),
                    f"{link['backlog_bytes']}b/{link['backlog_pkts']}p"]
        rows.append(row)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _dry_clean(args, con) -> int:
    from . import state
    from .compile import compile_plan
    from .names import check_target
    from .script import script
    check_target(args.interface, args.netns)
    record = state.load(args.netns, args.interface)
    if record is None or record.request is None:
        con.out(f"# {args.interface}: nothing recorded as installed by ratelimit")
        return 0
    con.out(script(compile_plan(record.request).teardown(), args.netns).rstrip("\n"))
    return 0


def _save(argv, con) -> int:
    from . import persist
    args = _parse_sub(_save_parser(), argv, con)
    if args is None:
        return 0
    path = args.file
    if os.geteuid() != 0:
        raise PermissionDenied("save: needs root (it reads what is applied on every interface)")
    written, count = persist.save(path, say=con.out, warn=con.err)
    con.out(f"saved {count} link configuration(s) to {written}")
    return 0


def _restore(argv, con) -> int:
    from . import persist
    args = _parse_sub(_restore_parser(), argv, con)
    if args is None:
        return 0
    if os.geteuid() != 0:
        raise PermissionDenied("restore: needs root (it changes traffic control)")
    return persist.restore(args.file, force=args.force, say=con.out, warn=con.err)


def _follow_parser() -> _Parser:
    p = _subparser("follow", "The trace driver: keep the traced links of the interface's plan following their "
                             "traces, step by step, until the plan is removed (docs/profiles.md, The driver). An "
                             "apply starts it; run it by hand or from a supervisor after --no-follow or a crash.")
    p.add_argument("--interface", "--if", required=True, help="the interface whose plan to follow")
    p.add_argument("--netns", help="network namespace the interface is in")
    p.add_argument("--step", default=None, metavar="TIME", help="time between changes (default 100ms; 10ms-10s)")
    return p


def _follow(argv, con) -> int:
    from . import follow
    from .names import check_target
    from .units import parse_seconds
    args = _parse_sub(_follow_parser(), argv, con)
    if args is None:
        return 0
    interface, netns = check_target(args.interface, args.netns)
    step_ms = follow.DEFAULT_STEP_MS if args.step is None else \
        round(1000 * parse_seconds(args.step, "--step", follow.MIN_STEP_MS / 1000, follow.MAX_STEP_MS / 1000))
    if os.geteuid() != 0:
        raise PermissionDenied("follow: needs root (it changes traffic control)")
    return follow.run(netns, interface, step_ms, say=con.err)


def _vm(argv, con) -> int:
    from .kernel.vm import vm_main
    return vm_main(argv)


def _lab(argv, con) -> int:
    from .lab.cli import lab_main
    return lab_main(argv)


def _subcommand(name, argv, con) -> int:
    own = {"profiles": _profiles, "save": _save, "restore": _restore, "vm": _vm, "lab": _lab,
           "follow": _follow}.get(name)
    if own is not None:
        return own(argv, con)
    return _registered(name)(argv)


def _registered(name):
    """A subcommand another package registers (entry point group ``ratelimit.subcommands``;
    the dashboard's ``web`` is one), so ratelimit needs none of them to run."""
    from importlib.metadata import entry_points
    for ep in entry_points(group=PLUGIN_GROUP, name=name):
        return ep.load()
    raise UsageError(f"{name}: not installed (the '{name}' subcommand comes with the webui package of "
                     f"ratelimit's checkout: pip install -e .)")


def _profiles(argv, con) -> int:
    from . import profiles
    from .units import format_percent, format_rate, format_time
    args = _parse_sub(_profiles_parser(), argv, con)
    if args is None:
        return 0
    loaded = [profiles.load(str(path)) for path in profiles.available().values()]
    if args.json:
        con.out(json.dumps([p.as_dict() for p in loaded], indent=1))
        return 0

    def side(s):
        parts = [format_rate(s.rate_bps) if s.rate_bps else "unlimited"]
        if s.delay_us:
            parts.append(format_time(s.delay_us) + (f"±{format_time(s.jitter_us)}" if s.jitter_us else ""))
        if s.loss_pct:
            parts.append(f"loss {format_percent(s.loss_pct)}")
        if s.queue:
            parts.append(f"queue {s.queue.text()}")
        return " ".join(parts)
    head = ("profile", "link", "down", "up")
    rows = [(p.name, p.link.name, side(p.down), side(p.up), p.description) for p in loaded]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    con.out("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  description")
    for r in rows:
        con.out("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1])
    return 0


def run() -> None:
    sys.exit(main())
