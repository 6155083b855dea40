"""Which parts of Linux traffic control the running kernel really accepts.

``probe()`` creates each qdisc, classifier, action and link kind for real in a
throwaway network namespace (``rlprobe-<pid>-<random>``), notes whether the
kernel took it, and deletes the namespace again, whatever happens.  Asking the
kernel is the only reliable test: a kernel may have a feature built in, as a
module that loads on demand, or not at all, and ``/proc/config.gz`` or
``lsmod`` tell neither reliably.  Results are cached per process.

``missing_message(feature)`` is the one line to show a person when a feature is
absent: the module to load, the package that has it, or the full-kernel VM.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from ratelimit.errors import KernelMissing, NotFoundError, PermissionDenied


@dataclass(frozen=True)
class Feature:
    """One probed feature: its family, the kernel module that provides it,
    and the ``tc``/``ip`` arguments that create it inside the probe namespace."""

    name: str
    family: str  # "qdisc", "classifier", "action" or "link"
    module: str  # kernel module name; "" when it is always built in
    args: tuple[str, ...]  # what to create (see _attempt)


def _q(name, module, *args):
    return Feature(name, "qdisc", module, args or (name,))


def _c(name, *args):
    return Feature(name, "classifier", "cls_" + name, args)


def _a(name, *args):
    return Feature(name, "action", "act_" + name, args)


def _l(name, module, *args):
    return Feature(name, "link", module, args)


# The probe device is ``rlp0`` (a veth whose peer is ``rlp1``).  Classifiers are
# added under an ingress (or clsact) qdisc; actions are created stand-alone
# with ``tc actions add``, which loads the same module a filter's action would.
FEATURES: dict[str, Feature] = {f.name: f for f in (
    _q("htb", "sch_htb"),
    _q("tbf", "sch_tbf", "tbf", "rate", "1mbit", "burst", "10kb", "latency", "50ms"),
    _q("netem", "sch_netem", "netem", "delay", "1ms"),
    _q("sfq", "sch_sfq"),
    _q("fq_codel", "sch_fq_codel"),
    _q("fq", "sch_fq"),
    _q("codel", "sch_codel"),
    _q("prio", "sch_prio"),
    _q("hfsc", "sch_hfsc", "hfsc", "default", "1"),
    _q("drr", "sch_drr"),
    _q("cake", "sch_cake"),
    _q("red", "sch_red", "red", "limit", "400000", "min", "30000", "max", "90000",
       "avpkt", "1000", "burst", "55", "bandwidth", "10mbit"),
    _q("pfifo", ""),
    _q("bfifo", ""),
    _q("ingress", "sch_ingress"),
    _q("clsact", "sch_ingress"),
    _c("u32", "u32", "match", "ip", "dst", "198.18.0.1/32", "flowid", ":1"),
    _c("bpf", "bpf", "bytecode", "1,6 0 0 4294967295,", "flowid", ":1"),
    _c("flower", "flower", "dst_ip", "198.18.0.1", "flowid", ":1"),
    _c("matchall", "matchall", "classid", ":1"),
    _c("basic", "basic", "classid", ":1"),
    _c("fw", "handle", "1", "fw", "classid", ":1"),
    _c("flow", "flow", "hash", "keys", "src", "divisor", "64", "baseclass", "1:1"),
    _a("police", "police", "rate", "1mbit", "burst", "10kb", "drop"),
    _a("gact", "gact", "drop"),
    _a("mirred", "mirred", "egress", "redirect", "dev", "rlp1"),
    _a("skbedit", "skbedit", "mark", "1"),
    _a("pedit", "pedit", "munge", "ip", "tos", "set", "0x10"),
    _a("nat", "nat", "egress", "198.18.0.1", "198.18.0.2"),
    _a("csum", "csum", "ip4h"),
    _l("veth", "veth", "type", "veth", "peer", "name", "rlpp"),
    _l("ifb", "ifb", "type", "ifb"),
    _l("dummy", "dummy", "type", "dummy"),
    _l("bridge", "bridge", "type", "bridge"),
    _l("macvlan", "macvlan", "link", "rlp0", "type", "macvlan"),
    _l("vlan", "8021q", "link", "rlp0", "type", "vlan", "id", "5"),
)}

# feature -> kernel module ("" = built into every kernel that has tc at all)
MODULES: dict[str, str] = {name: f.module for name, f in FEATURES.items()}

# What a stock distribution kernel (Debian, Ubuntu, Fedora) accepts: the default
# needs of a ``@pytest.mark.kernel`` test, and what ``ratelimit vm`` provides.
FULL_KERNEL: tuple[str, ...] = (
    "htb", "tbf", "netem", "sfq", "fq_codel", "prio", "ingress", "clsact",
    "u32", "matchall", "basic", "fw", "flower",
    "police", "gact", "mirred", "skbedit", "pedit",
    "veth", "ifb", "dummy", "bridge",
)

_CACHE: dict[str, bool] = {}


def module_for(feature: str) -> str:
    """The kernel module that provides ``feature`` (e.g. ``netem`` -> ``sch_netem``)."""
    try:
        return FEATURES[feature].module
    except KeyError:
        raise KernelMissing(f"unknown kernel feature {feature!r} "
                            f"(known: {', '.join(sorted(FEATURES))})", feature) from None


def missing_message(feature: str) -> str:
    """One line for the person at the terminal when ``feature`` is missing."""
    f = FEATURES.get(feature)
    if f is None:
        return f"this kernel lacks {feature!r}; run inside the full-kernel VM: ratelimit vm -- COMMAND"
    what = f"{f.family} {f.name}" if f.family != "link" else f"link type {f.name}"
    if not f.module:
        return (f"this kernel lacks {what}, which every kernel with traffic control builds in; "
                f"use a stock distribution kernel, or run inside the full-kernel VM: ratelimit vm -- COMMAND")
    return (f"this kernel lacks {what} (module {f.module}): try `modprobe {f.module}`; "
            f"on Debian/Ubuntu install linux-modules-extra-$(uname -r) or the stock kernel "
            f"(linux-image-amd64); or run inside the full-kernel VM: ratelimit vm -- COMMAND")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)


def _check_tools() -> None:
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NotFoundError(f"the {tool!r} command is missing: apt-get install iproute2")
    if os.geteuid() != 0:
        raise PermissionDenied("probing the kernel's traffic control needs root "
                               "(it creates a throwaway network namespace)")


class _ProbeNamespace:
    """The throwaway namespace with a veth pair ``rlp0``/``rlp1`` in it."""

    def __init__(self) -> None:
        self.name = f"rlprobe-{os.getpid()}-{secrets.token_hex(3)}"
        self.filter_parent: str | None = None  # set once a filter parent qdisc exists
        self._parent_kind = ""
        self.base_link = False
        self._prio = 0
        self._index = 0

    def __enter__(self) -> _ProbeNamespace:
        r = _run(["ip", "netns", "add", self.name])
        if r.returncode != 0:
            raise PermissionDenied(f"cannot create probe namespace {self.name}: {r.stderr.strip()}")
        try:
            r = _run(["ip", "-n", self.name, "link", "add", "rlp0", "type", "veth",
                      "peer", "name", "rlp1"])
            if r.returncode == 0:
                self.base_link = True
                for dev in ("rlp0", "rlp1"):
                    _run(["ip", "-n", self.name, "link", "set", dev, "up"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        _run(["ip", "netns", "delete", self.name])

    def ip(self, *args: str) -> bool:
        return _run(["ip", "-n", self.name, *args]).returncode == 0

    def tc(self, *args: str) -> bool:
        return _run(["tc", "-n", self.name, *args]).returncode == 0

    def attempt(self, f: Feature) -> bool:
        if f.family == "link":
            ok = self.ip("link", "add", "rlpx", *f.args)
            if ok:
                self.ip("link", "delete", "rlpx")
            return ok
        if not self.base_link:
            return False
        if f.family == "qdisc":
            if f.name in ("ingress", "clsact"):
                if self.filter_parent is not None:  # the classifiers' parent is in the way
                    self.tc("qdisc", "del", "dev", "rlp0", self._parent_kind)
                    self.filter_parent = None
                ok = self.tc("qdisc", "add", "dev", "rlp0", f.name)
                if ok:
                    self.tc("qdisc", "del", "dev", "rlp0", f.name)
                return ok
            ok = self.tc("qdisc", "add", "dev", "rlp0", "root", "handle", "1:", *f.args)
            if ok:
                self.tc("qdisc", "del", "dev", "rlp0", "root")
            return ok
        if f.family == "classifier":
            parent = self._filter_parent()
            if parent is None:
                return False
            self._prio += 1
            prio = str(self._prio)
            ok = self.tc("filter", "add", "dev", "rlp0", "parent", parent, "protocol", "ip",
                         "prio", prio, *f.args)
            if ok:
                self.tc("filter", "del", "dev", "rlp0", "parent", parent, "prio", prio)
            return ok
        if f.family == "action":
            self._index += 1
            index = str(self._index)
            ok = self.tc("actions", "add", "action", *f.args, "index", index)
            if ok:
                self.tc("actions", "delete", "action", f.name, "index", index)
            return ok
        raise AssertionError(f.family)

    def _filter_parent(self) -> str | None:
        if self.filter_parent is None:
            for kind in ("ingress", "clsact"):
                if self.tc("qdisc", "add", "dev", "rlp0", kind):
                    self.filter_parent, self._parent_kind = "ffff:", kind
                    break
        return self.filter_parent


def probe(features: Iterable[str] | None = None) -> dict[str, bool]:
    """Return ``{feature: accepted}`` for ``features`` (all of ``FEATURES`` if None).

    Needs root.  Probes only what this process has not probed before, in one
    throwaway namespace that is deleted before returning.
    """
    names = list(FEATURES) if features is None else list(features)
    for name in names:
        module_for(name)  # raises on an unknown name
    todo = [n for n in names if n not in _CACHE]
    if todo:
        _check_tools()
        with _ProbeNamespace() as ns:
            order = {"link": 3, "qdisc": 0, "classifier": 1, "action": 2}
            for name in sorted(todo, key=lambda n: order[FEATURES[n].family]):
                _CACHE[name] = ns.attempt(FEATURES[name])
    return {n: _CACHE[n] for n in names}


def missing(features: Iterable[str]) -> list[str]:
    """The subset of ``features`` the running kernel lacks, in the order given."""
    have = probe(features)
    return [n for n, ok in have.items() if not ok]


def require(features: Iterable[str]) -> None:
    """Raise ``KernelMissing`` (naming the first missing feature's module) unless
    the kernel has every one of ``features``."""
    lacking = missing(features)
    if lacking:
        msg = missing_message(lacking[0])
        if len(lacking) > 1:
            msg += f" (also missing: {', '.join(lacking[1:])})"
        raise KernelMissing(msg, lacking[0])


def clear_cache() -> None:
    """Forget cached results (after ``modprobe``, say)."""
    _CACHE.clear()


def _main() -> int:
    import sys
    names = sys.argv[1:] or None
    try:
        result = probe(names)
    except KernelMissing as e:
        print(f"ratelimit: {e}", file=sys.stderr)
        return e.exit_code
    except (PermissionDenied, NotFoundError) as e:
        print(f"ratelimit: {e}", file=sys.stderr)
        return e.exit_code
    for name, ok in result.items():
        print(f"{FEATURES[name].family:<10} {name:<9} {'yes' if ok else 'no':<4} {FEATURES[name].module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
