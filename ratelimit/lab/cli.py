"""``ratelimit lab``: a client-router-server lab on this machine, in network namespaces.

    ratelimit lab demo                        the first command to run (about 10 s)
    ratelimit lab up [--clients N] [--profile P | --mix M | --scenario S] [--mode shape|police] [--per host|port]
                     [--burst B] [--queue Q] [--rate R] [--delay T] [--no-delay]
                     [--server auto|nginx|builtin|none] [--server-tcp linux|rfc6298|2000]
                     [--ports LOW-HIGH] [--vm] [-- CMD]
    ratelimit lab status [--json]             hosts, addresses, the link, live counters
    ratelimit lab exec HOST -- CMD            HOST: client1..N, router, server
    ratelimit lab apply PROFILE | --mix M | --scenario S    change the link, live
    ratelimit lab clean                       remove the link emulation, keep the lab
    ratelimit lab down [--all]                remove everything the lab made (also after a crash)

Every command takes ``--name NAME`` (default ``lab``) so several labs can
coexist.  ``core.Lab`` does the work; this module parses and prints (the
demo is ``demo.py``).  Kernels without netem (or police) get a one-line explanation and the
ways out: ``--no-delay`` / ``--mode shape`` here, or ``--vm`` to run the whole
lab command inside the full-kernel VM (``ratelimit.kernel.vm``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from ..errors import RatelimitError, UsageError
from ..kernel.vm import in_vm
from ..service.progress import terminal
from ..spec.units import format_rate, parse_burst, parse_queue, parse_rate_bps
from ..traces.tracespec import add_options as add_trace_options
from . import docroot, servertcp, store
from .audience import check
from .core import Lab
from .demo import DEMO_NAME, demo
from .link import GRANULARITIES, MODES, LinkSpec
from .provision import DEFAULT_PORTS, SERVERS
from .store import DEFAULT_NAME
from .vmrun import in_vm_cmd, run_in_vm, say

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        if message.startswith("unrecognized arguments: "):
            message = f"{message.split(': ', 1)[1]}: not an option of `{self.prog}` (see {self.prog} --help)"
        raise UsageError(f"{self.prog}: {message}")


def _name_opt(p, default=None):
    p.add_argument("--name", default=default, metavar="NAME",
                   help=f"lab name: a-z, 0-9, _ (default {DEFAULT_NAME}, or the only lab that is up)")


def _server_tcp_opt(p) -> None:
    p.add_argument("--server-tcp", default=servertcp.DEFAULT, metavar="|".join(servertcp.STARTS),
                   help=f"how the server's TCP starts (default {servertcp.DEFAULT}): {servertcp.choices_text()} "
                        "(docs/lab.md)")


def _link_opts(p, *, up: bool):
    p.add_argument("--mix", metavar="PROFILE:SHARE,...",
                   help="an audience: the clients split between profiles by largest remainder, in order, e.g. "
                        "modem-28k8:60%%,modem-56k:30%%,isdn-64k:10%% (docs/lab.md)")
    p.add_argument("--scenario", metavar="FILE|NAME",
                   help="an audience: a scenario file's cohorts (or a shipped one: "
                        "ratelimit --scenario), selecting clients by address (client i is 198.18.0.(i+1))")
    p.add_argument("--mode", default="shape", choices=MODES,
                   help="shape: queue like the real link (default); police: drop above the rate (v0.3)")
    p.add_argument("--per", default=None, choices=GRANULARITIES,
                   help="host: each client is one link shared by all its connections, as behind one modem "
                        "(default); port: one link per connection (host, port), as v0.3's benchmark clients "
                        "(with --mix: each cohort's; a scenario names its own)")
    p.add_argument("--burst", metavar="BURST",
                   help="bytes (1600b), a time at the rate (20ms) or v0.3's N (rate x N / 8 bytes); "
                        "default: the profile's, else the mode's (docs/profiles.md)")
    p.add_argument("--rate", metavar="RATE", help="override the profile's rate, e.g. 200kbit")
    p.add_argument("--queue", metavar="QUEUE",
                   help="override each link's queue (shape mode): packets (10p), bytes (64kb) or a time at the "
                        "rate (1s)")
    p.add_argument("--delay", metavar="TIME", help="override the profile's one-way delay, e.g. 50ms")
    p.add_argument("--bandwidth", metavar="RATE",
                   help="the router's pool for all links together (default: what their rates add up to, at least "
                        "100mbit; below that, busy links get a share each, not their rates)")
    p.add_argument("--no-delay", action="store_true",
                   help="leave out the profile's delay, jitter and loss (for kernels without sch_netem)")
    add_trace_options(p)  # the router's trace driver starts with the link


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ratelimit lab", description="A client-router-server lab in network namespaces.",
                epilog="Details: docs/lab.md")
    _debug_opt(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    up = sub.add_parser("up", help="bring a lab up", description="Bring a lab up; with -- CMD, run CMD "
                        "with the lab up and take it down afterwards.")
    _name_opt(up, DEFAULT_NAME)
    up.add_argument("--clients", default=None, metavar="N",
                    help="client namespaces (default 1, or as many as --scenario's addresses need; at most 253)")
    up.add_argument("--profile", metavar="PROFILE",
                    help="link profile to apply (see `ratelimit profiles`); default: none, links unimpaired")
    up.add_argument("--server", default="auto", choices=SERVERS,
                    help="web server: nginx, builtin (Python), auto: nginx if installed (default)")
    _server_tcp_opt(up)
    up.add_argument("--ports", default=DEFAULT_PORTS, metavar="LOW-HIGH",
                    help=f"the clients' ephemeral ports, all limited by the router (default {DEFAULT_PORTS})")
    _link_opts(up, up=True)
    up.add_argument("--vm", action="store_true",
                    help="run in the full-kernel VM (netem, police); the lab lives as long as CMD "
                         "(default CMD: lab status)")

    st = sub.add_parser("status", help="hosts, addresses, the link and live counters")
    _name_opt(st)
    st.add_argument("--json", action="store_true", help="as JSON")

    ex = sub.add_parser("exec", help="run a command on a lab host", usage="ratelimit lab exec [--name NAME] HOST -- CMD ...")
    _name_opt(ex)
    ex.add_argument("host", metavar="HOST", help="client1..N, router or server")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD")

    ap = sub.add_parser("apply", help="change the link, live")
    _name_opt(ap)
    ap.add_argument("profile", nargs="?", metavar="PROFILE", help="link profile (or give --rate/--delay)")
    _link_opts(ap, up=False)

    cl = sub.add_parser("clean", help="remove the link emulation, keep the lab")
    _name_opt(cl)

    dn = sub.add_parser("down", help="remove the lab and everything it made (also after a crash)")
    _name_opt(dn)
    dn.add_argument("--all", action="store_true", help="every lab on this machine")

    de = sub.add_parser("demo", help="the first command to run: a 10,000-byte download over a 28.8k modem")
    de.add_argument("--name", default=DEMO_NAME, metavar="NAME", help=f"lab name (default {DEMO_NAME})")
    de.add_argument("--vm", action="store_true",
                    help="run in the full-kernel VM, with the modem's delay (a minute or more)")
    _server_tcp_opt(de)
    for sp in (up, st, ap, cl, dn, de):
        _debug_opt(sp)
    return p


# ---------------------------------------------------------------- output helpers


def _progress():
    """Percent of the apply on one terminal line, or None when stderr is not a terminal."""
    return terminal(sys.stderr, "lab: applying", every_s=0.2)


def _link_text(link: dict | None) -> str:
    if not link:
        return "none (links unimpaired; change with: ratelimit lab apply PROFILE)"
    if link.get("mix") or link.get("scenario"):
        cohorts = link["summary"]["cohorts"]
        parts = [f"mix {link['mix']}" if link.get("mix") else f"scenario {link['scenario']}", link["mode"],
                 f"{len(cohorts)} cohort(s): " + ", ".join(
                     f"{c['name']} ({c['profile'] or 'custom'}, per {c['per']})" for c in cohorts)]
    else:
        parts = [link.get("profile") or "custom", link["mode"], f"per {link.get('per', 'port')}"]
    if link.get("burst"):
        parts.append(f"burst {link['burst']}")
    if link.get("rate"):
        parts.append(f"rate {link['rate']}")
    if link.get("delay"):
        parts.append(f"delay {link['delay']}")
    if link.get("no_delay"):
        parts.append("delay/loss left out")
    return ", ".join(parts)


def _tcp_text(server: dict) -> str:
    tcp = server.get("tcp")
    return servertcp.describe(tcp) if tcp and "rto_min_ms" in tcp else "not recorded"


def _pick_name(name: str | None) -> str:
    """``--name``, else ``lab``, else the only lab that is up."""
    if name:
        return name
    labs = store.list_labs()
    if DEFAULT_NAME in labs or len(labs) != 1:
        return DEFAULT_NAME
    return labs[0]


def _link_spec(args, profile) -> LinkSpec:
    if args.burst is not None:
        parse_burst(args.burst, "--burst")  # a bad value is one line before anything is made
    if args.queue is not None:
        parse_queue(args.queue, "--queue")
    if args.bandwidth is not None:
        parse_rate_bps(args.bandwidth, "--bandwidth")
    spec = LinkSpec(profile=profile, mode=args.mode, per=args.per or "host", burst=args.burst, rate=args.rate,
                    delay=args.delay, no_delay=args.no_delay, queue=args.queue, mix=args.mix,
                    scenario=args.scenario, bandwidth=args.bandwidth, trace_down=args.trace_down,
                    trace_up=args.trace_up, schedule=args.schedule, trace_scale=args.trace_scale,
                    phase=args.phase, phase_seed=args.phase_seed)
    if spec.audience:
        check(spec)
        if spec.scenario is not None and args.per is not None:
            raise UsageError("--per: a scenario names each cohort's granularity (per = \"host\" or \"port\")")
    return spec


# ---------------------------------------------------------------- commands


def lab_main(argv: list[str]) -> int:
    """``ratelimit lab ...``; returns the exit status, raises ``RatelimitError`` on errors."""
    argv = list(argv)
    cmd_after: list[str] = []
    if argv[:1] == ["up"] and "--" in argv:
        i = argv.index("--")
        argv, cmd_after = argv[:i], argv[i + 1:]
    if not argv or argv[0] in ("-h", "--help", "help"):
        build_parser().print_help()
        return 0
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help of a subcommand
        return int(e.code or 0)
    return COMMANDS[args.command](args, argv, cmd_after)


def _debug_opt(parser) -> None:
    parser.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)  # read by the CLI


def _up(args, argv, cmd_after) -> int:
    servertcp.check(args.server_tcp)  # a bad value is one line, also before the VM boots
    if args.vm and not in_vm():
        inner = [a for a in argv if a != "--vm"]
        if not cmd_after:
            say("lab up --vm: the lab lives inside the VM only while a command runs; without -- CMD "
                 "it shows `lab status` and goes down")
            cmd_after = in_vm_cmd(["status", "--name", args.name])
        return run_in_vm([*inner, "--", *cmd_after])
    link = _link_spec(args, args.profile)
    lab = Lab.up(args.name, clients=args.clients, link=link, server=args.server, ports=args.ports,
                 server_tcp=args.server_tcp, say=say, progress=_progress())
    _print_up(lab)
    if not cmd_after:
        return 0
    say(f"lab: running {' '.join(cmd_after)} (lab '{lab.name}' goes down when it exits)")
    try:
        return subprocess.run(cmd_after, env={**os.environ, **lab.env()}, check=False).returncode
    except FileNotFoundError as err:
        raise UsageError(f"lab up -- CMD: {err.strerror}: {cmd_after[0]}") from None
    finally:
        lab.down()
        say(f"lab '{lab.name}' is down")


def _print_up(lab: Lab) -> None:
    info = lab.info
    print(f"lab '{lab.name}' is up: {len(lab.clients)} client(s), ports {info['ports']}, "
          f"server TCP: {_tcp_text(info['server'])}, link: {_link_text(info.get('link'))}")
    for h in lab.hosts.values():
        extra = ""
        if h is lab.server and info["server"]["kind"] == "none":
            extra = "no web server (--server none): start yours with ratelimit lab exec server -- CMD"
        elif h is lab.server:
            pid = info["server"].get("pid")
            extra = f"{info['server']['kind']} on {lab.url('/')}" + (f" (pid {pid})" if pid else "")
        elif h is lab.router:
            extra = f"limits {lab.topo.router_client_if} toward the clients"
        elif _audience(info.get("link")):
            extra = _cohort_text((info["link"]["clients"]).get(h.name))
        print(f"  {h.name:<9} {h.address:<13} {h.netns:<24} {extra}".rstrip())
    flag = f" --name {lab.name}" if lab.name != DEFAULT_NAME else ""
    print(f"try:  ratelimit lab exec{flag} client1 -- curl -o /dev/null -w '%{{time_total}} s\\n' "
          f"http://server/{docroot.EXPERIMENT_FILE}")
    print(f"then: ratelimit lab status{flag} | lab apply{flag} PROFILE | lab down{flag}")


def _audience(link: dict | None) -> bool:
    """An applied mix or scenario, whose clients are in different cohorts."""
    return bool(link and (link.get("mix") or link.get("scenario")) and link.get("clients"))


def _cohort_text(entry: dict | None) -> str:
    """A client's cohort and profile, as a status line shows them."""
    if not entry:
        return "no cohort (unimpaired)"
    return entry["cohort"] if entry["cohort"] == entry["profile"] else \
        f"{entry['cohort']} ({entry['profile'] or 'custom link'})"


def _status(args, argv, cmd_after) -> int:
    name = _pick_name(args.name)
    lab = Lab.open(name)
    data = lab.status()
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    age = time.time() - (data.get("created") or time.time())
    server = data["server"]
    print(f"lab '{name}': up {_duration(age)}, {len(lab.clients)} client(s), ports {data['ports']}, "
          f"{server['kind']} server (pid {server.get('pid') or '?'}) at {data['url'].rsplit('/', 1)[0]}/")
    print(f"link: {_link_text(data['link'])}")
    print(f"server TCP: {_tcp_text(server)}")
    cohorts = _audience(data["link"])
    print(f"  {'HOST':<9} {'ADDRESS':<13} {'IPV6':<18} {'NAMESPACE':<24}" + (" COHORT" if cohorts else ""))
    for h in data["hosts"]:
        cohort = ""
        if cohorts and "cohort" in h:
            cohort = _cohort_text(data["link"]["clients"].get(h["name"]))
        print(f"  {h['name']:<9} {h['address']:<13} {h['address6']:<18} {h['netns']:<24} {cohort}".rstrip())
    if data["totals"]:
        print(f"  {'CLIENT':<9} {'DIR':<5} {'LINKS':>6} {'ACTIVE':>6} {'BYTES':>12} {'PACKETS':>9} "
              f"{'DROPS':>7} {'OVERLIM':>8} {'BACKLOG':>8} {'RATE':<10}" + (" COHORT" if cohorts else ""))
        for t in data["totals"]:
            d = "down" if t["direction"] == "dest" else "up"
            rate = format_rate(t["rate_bps"]) if t.get("rate_bps") else "-"
            print(f"  {t['client']:<9} {d:<5} {t['links']:>6} {t['active']:>6} {t['bytes']:>12,} "
                  f"{t['packets']:>9,} {t['drops']:>7,} {t['overlimits']:>8,} {t['backlog_bytes']:>8,} {rate:<10}"
                  + (f" {t.get('cohort') or '-'}" if cohorts else "").rstrip())
    return 0


def _duration(s: float) -> str:
    s = int(s)
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def _exec(args, argv, cmd_after) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    lab = Lab.open(_pick_name(args.name))
    return lab.exec(args.host, cmd)


def _apply(args, argv, cmd_after) -> int:
    if args.profile is None and args.rate is None and args.delay is None and args.mix is None \
            and args.scenario is None and args.trace_down is None and args.trace_up is None and args.schedule is None:
        raise UsageError("lab apply: no PROFILE given (e.g. ratelimit lab apply modem-28k8; "
                         "see ratelimit profiles), nor --mix/--scenario/--rate/--delay/--trace-down/--schedule")
    lab = Lab.open(_pick_name(args.name))
    lab.apply(_link_spec(args, args.profile), say=say, progress=_progress())
    print(f"lab '{lab.name}': link: {_link_text(lab.info['link'])}")
    return 0


def _clean(args, argv, cmd_after) -> int:
    lab = Lab.open(_pick_name(args.name))
    removed = lab.clean()
    print(f"lab '{lab.name}': " + ("link emulation removed; links unimpaired" if removed
                                   else "no link emulation was applied"))
    return 0


def _down(args, argv, cmd_after) -> int:
    names = store.list_labs() if args.all else [_pick_name(args.name)]
    if args.all and args.name:
        raise UsageError("lab down: give --name NAME or --all, not both")
    for name in names:
        r = store.down(name)
        if not (r["namespaces"] or r["paths"]):
            print(f"lab '{name}': nothing to remove")
            continue
        print(f"lab '{name}' is down: removed {len(r['namespaces'])} namespace(s)"
              + (f", stopped {r['processes']} process(es)" if r["processes"] else "")
              + (f", {len(r['paths'])} file(s)/directories" if r["paths"] else ""))
    if args.all and not names:
        print("no labs on this machine")
    return 0


def _demo(args, argv, cmd_after) -> int:
    return demo(args)


COMMANDS = {"up": _up, "status": _status, "exec": _exec, "apply": _apply, "clean": _clean,
            "down": _down, "demo": _demo}


def _cli() -> int:
    """``python -m ratelimit.lab``: what ``ratelimit lab`` does, for the VM and tests."""
    argv = sys.argv[1:]
    try:
        return lab_main(argv)
    except RatelimitError as err:
        if "--debug" in argv:
            raise
        print(f"ratelimit: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("ratelimit: interrupted", file=sys.stderr)
        return 130

