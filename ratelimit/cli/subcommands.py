"""The subcommands of ``ratelimit`` that are not an action on an interface: ``profiles``,
``save``, ``restore``, ``follow`` and ``vm`` (each a parser of its own, whose errors are one
line like the main command line's), and those another package registers (``lab``, ``web``).

For example, ``ratelimit lab up`` runs the function that ``ratelimit.lab`` registers as
``lab`` in the entry-point group ``ratelimit.subcommands`` (setup.py), with ``["up"]``.
"""

import argparse
import json
import os

from ..errors import PermissionDenied, UsageError
from ..profiles import catalog
from ..spec.units import format_percent, format_rate, format_time, parse_seconds

PLUGIN_GROUP = "ratelimit.subcommands"
NAMES = ("profiles", "save", "restore", "vm", "lab", "web", "follow", "expire")  # lab, web: registered (REGISTERED)
# the subcommands another package registers, and what each comes with (the line when it is not installed)
REGISTERED = {"lab": "ratelimit's lab package, which ratelimit's setup.py registers",
              "web": "the webui package of ratelimit's checkout"}


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, a ``UsageError`` (exit 2), prefixed by the
    subcommand's name."""

    def error(self, message):  # one line, our exit code, no usage dump
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""  # a subcommand's name
        if message.startswith("unrecognized arguments: "):
            extra = message.split(": ", 1)[1]
            message = (f"{extra}: not an option (see {self.prog} --help)" if extra.startswith("-") else
                       f"{where}'{extra}' is an argument too many (see {self.prog} --help)")
        elif where:
            message = f"{where}{message} (see {self.prog} --help)"
        raise UsageError(message)


def _subparser(name: str, description: str) -> Parser:
    """A subcommand's parser: ``--help`` (and ``-h``, which only the main command line
    gives to --hosts) prints its usage and options."""
    p = Parser(prog=f"ratelimit {name}", add_help=False, description=description)
    p.add_argument("--help", "-h", action="store_true", help="show this help")
    return p


def _profiles_parser() -> Parser:
    p = _subparser("profiles", "List the link profiles: built-in ones and those in the profile path "
                               "(docs/profiles.md).")
    p.add_argument("--json", action="store_true", help="as JSON")
    return p


SAVED = "$RATELIMIT_CONFIG_DIR/links.json, by default /etc/ratelimit/links.json"


def _save_parser() -> Parser:
    p = _subparser("save", "Save the links applied on every interface, resolved, for restore at boot.")
    p.add_argument("file", nargs="?", metavar="FILE", help=f"where to write (default {SAVED})")
    return p


def _restore_parser() -> Parser:
    p = _subparser("restore", "Apply the saved links again (at boot: docs/cli.md, Surviving a reboot).")
    p.add_argument("file", nargs="?", metavar="FILE", help=f"what to read (default {SAVED})")
    p.add_argument("--force", action="store_true",
                   help="replace root/ingress qdiscs and IFB devices ratelimit did not install")
    return p


def _parse_sub(parser: Parser, argv, con):
    """The subcommand's arguments, or None once its help is printed."""
    args = parser.parse_args(argv)
    if args.help:
        con.out(parser.format_help().rstrip("\n"))
        return None
    return args


def _save(argv, con) -> int:
    # start-up time: save and restore load the service (netlink)
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
    # start-up time: save and restore load the service (netlink)
    from . import persist
    args = _parse_sub(_restore_parser(), argv, con)
    if args is None:
        return 0
    if os.geteuid() != 0:
        raise PermissionDenied("restore: needs root (it changes traffic control)")
    return persist.restore(args.file, force=args.force, say=con.out, warn=con.err)


def _expire_parser() -> Parser:
    p = _subparser("expire", "Remove the interface's plan when the end it was applied with (--for) comes, unless "
                             "another apply came first (docs/faults.md). An apply with --for starts it; run it by "
                             "hand after a crash.")
    p.add_argument("--interface", "--if", required=True, help="the interface whose plan to watch")
    p.add_argument("--netns", help="network namespace the interface is in")
    return p


def _expire(argv, con) -> int:
    from .. import service  # the service and its kernel modules: only this subcommand loads them
    from ..kernel import probe  # noqa: F401 - what an apply loads late (pyroute2): now, not when the end comes
    from ..service import expiry
    from ..spec.names import check_target
    args = _parse_sub(_expire_parser(), argv, con)
    if args is None:
        return 0
    interface, netns = check_target(args.interface, args.netns)
    if os.geteuid() != 0:
        raise PermissionDenied("expire: needs root (it changes traffic control)")
    return expiry.watch(netns, interface, service.clean, service.apply, say=con.err)


def _follow_parser() -> Parser:
    p = _subparser("follow", "The trace driver: keep the traced links of the interface's plan following their "
                             "traces, step by step, until the plan is removed (docs/profiles.md, The driver). An "
                             "apply starts it; run it by hand or from a supervisor after --no-follow or a crash.")
    p.add_argument("--interface", "--if", required=True, help="the interface whose plan to follow")
    p.add_argument("--netns", help="network namespace the interface is in")
    p.add_argument("--step", default=None, metavar="TIME", help="time between changes (default 100ms; 10ms-10s)")
    p.add_argument("--reference", action="store_true",
                   help="step each link in Python, as the reference implementation does (the same changes, "
                        "about 20 times the CPU; to compare with, or to rule the array driver out)")
    return p


def _follow(argv, con) -> int:
    from ..driver import follow, loop  # the driver and its kernel modules: only this subcommand loads them
    from ..spec.names import check_target
    args = _parse_sub(_follow_parser(), argv, con)
    if args is None:
        return 0
    interface, netns = check_target(args.interface, args.netns)
    step_ms = follow.DEFAULT_STEP_MS if args.step is None else \
        round(1000 * parse_seconds(args.step, "--step", follow.MIN_STEP_MS / 1000, follow.MAX_STEP_MS / 1000))
    if os.geteuid() != 0:
        raise PermissionDenied("follow: needs root (it changes traffic control)")
    return loop.run(netns, interface, step_ms, say=con.err, reference=args.reference)


def _vm(argv, con) -> int:
    # start-up time: the VM runner, for 'ratelimit vm' only
    from ..kernel.vm import vm_main
    return vm_main(argv)


def run(name, argv, con) -> int:
    """``ratelimit NAME ARGV...``: the exit code."""
    own = {"profiles": _profiles, "save": _save, "restore": _restore, "vm": _vm, "follow": _follow,
           "expire": _expire}.get(name)
    if own is not None:
        return own(argv, con)
    return _registered(name)(argv)


def _registered(name):
    """A subcommand another package registers (entry point group ``ratelimit.subcommands``:
    the lab's ``lab``, the dashboard's ``web``), so ratelimit imports none of them to run;
    ``UsageError`` naming what it comes with when it is not installed."""
    from importlib.metadata import entry_points
    for ep in entry_points(group=PLUGIN_GROUP, name=name):
        return ep.load()
    raise UsageError(f"{name}: not installed (the '{name}' subcommand comes with "
                     f"{REGISTERED.get(name, 'a package that registers it')}: pip install -e .)")


def _profiles(argv, con) -> int:
    args = _parse_sub(_profiles_parser(), argv, con)
    if args is None:
        return 0
    loaded = [catalog.load(str(path)) for path in catalog.available().values()]
    if args.json:
        con.out(json.dumps([p.as_dict() for p in loaded], indent=1))
        return 0

    def side(s):
        parts = [format_rate(s.rate_bps) if s.rate_bps else "unlimited"]
        if s.delay_us:
            parts.append(format_time(s.delay_us) + (f"±{format_time(s.jitter_us)}" if s.jitter_us else ""))
        if s.loss_pct:
            parts.append(f"loss {format_percent(s.loss_pct)}")
        if s.loss_model:
            parts.append(f"loss {s.loss_model.text()}")
        if s.slot:
            parts.append(f"slot {s.slot.text()}")
        if s.queue:
            parts.append(f"queue {s.queue.text()}")
        if s.aqm:
            parts.append(f"aqm {s.aqm.text()}")
        return " ".join(parts)
    head = ("profile", "link", "down", "up")
    rows = [(p.name, p.link.name, side(p.down), side(p.up), p.description) for p in loaded]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    con.out("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  description")
    for r in rows:
        con.out("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1])
    return 0
