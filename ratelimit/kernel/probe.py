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

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ..errors import KernelMissing, NotFoundError, PermissionDenied
from . import netns


@dataclass(frozen=True)
class Feature:
    """One probed feature: its family, the kernel module that provides it,
    and the ``tc``/``ip`` arguments that create it inside the probe namespace."""

    name: str
    family: str  # "qdisc", "classifier", "action" or "link"
    module: str  # kernel module name; "" when it is always built in
    args: tuple[str, ...] = ()  # tc arguments that create it (see attempt)
    link: tuple = ()  # for links: pyroute2's link("add", ...) keywords, as (key, value) pairs


def _q(name, module, *args):
    return Feature(name, "qdisc", module, args or (name,))


def _c(name, *args):
    return Feature(name, "classifier", "cls_" + name, args)


def _a(name, *args):
    return Feature(name, "action", "act_" + name, args)


def _l(name, module, **link):
    return Feature(name, "link", module, link=tuple(link.items()))


# The probe device is ``rlp0`` (a veth whose peer is ``rlp1``).  Qdiscs, classifiers
# and actions are tried with ``tc`` itself (what the kernel accepts from tc is
# the question); classifiers are added under an ingress (or clsact) qdisc;
# actions are created stand-alone with ``tc actions add``, which loads the same
# module a filter's action would.  Namespace and links go through pyroute2.
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
    _q("pie", "sch_pie"),
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
    _l("veth", "veth", kind="veth", peer="rlpp"),
    _l("ifb", "ifb", kind="ifb"),
    _l("dummy", "dummy", kind="dummy"),
    _l("bridge", "bridge", kind="bridge"),
    _l("macvlan", "macvlan", kind="macvlan", link="rlp0"),
    _l("vlan", "8021q", kind="vlan", link="rlp0", vlan_id=5),
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
    if shutil.which("tc") is None:
        raise NotFoundError("the 'tc' command is missing: apt-get install iproute2")
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
        try:
            netns.create(self.name)
        except OSError as e:
            raise PermissionDenied(f"cannot create probe namespace {self.name}: {e.strerror or e}") from None
        try:
            self.ipr = IPRoute(netns=self.name, flags=0)
            self.base_link = self.add_link("rlp0", kind="veth", peer="rlp1")
            if self.base_link:
                for dev in ("rlp0", "rlp1"):
                    self.ipr.link("set", index=self.ipr.link_lookup(ifname=dev)[0], state="up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        ipr = getattr(self, "ipr", None)
        if ipr is not None:
            ipr.close()
        netns.delete_namespaces([self.name], kill=False)

    def add_link(self, name: str, **kw) -> bool:
        """Create link ``name``; False if the kernel refuses its kind."""
        if "link" in kw:
            kw["link"] = self.ipr.link_lookup(ifname=kw["link"])[0]
        try:
            self.ipr.link("add", ifname=name, **kw)
        except NetlinkError:
            return False
        return True

    def tc(self, *args: str) -> bool:
        return _run(["tc", "-n", self.name, *args]).returncode == 0

    def attempt(self, f: Feature) -> bool:
        if f.family == "link":
            ok = self.add_link("rlpx", **dict(f.link))
            if ok:
                self.ipr.link("del", ifname="rlpx")
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


def _probe_all(todo: list[str]) -> None:
    with _ProbeNamespace() as ns:
        order = {"link": 3, "qdisc": 0, "classifier": 1, "action": 2}
        for name in sorted(todo, key=lambda n: order[FEATURES[n].family]):
            _CACHE[name] = ns.attempt(FEATURES[name])


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
        netns.off_loop(_probe_all, todo)
    return {n: _CACHE[n] for n in names}


def missing(features: Iterable[str]) -> list[str]:
    """The subset of ``features`` the running kernel lacks, in the order given."""
    have = probe(features)
    return [n for n, ok in have.items() if not ok]


def plan_lacks(features: Iterable[str]) -> list[str]:
    """What a plan needs (``Plan.features()``) that the running kernel lacks, in ``FEATURES``'
    order: every part the probe knows is checked, so an apply names a missing module
    before it changes anything (about 0.1 s for a dozen parts, once per process)."""
    wanted = set(features)
    return missing([name for name in FEATURES if name in wanted])


def require(features: Iterable[str]) -> None:
    """Raise ``KernelMissing`` (naming the first missing feature's module) unless
    the kernel has every one of ``features``."""
    lacking = missing(features)
    if lacking:
        msg = missing_message(lacking[0])
        if len(lacking) > 1:
            msg += f" (also missing: {', '.join(lacking[1:])})"
        raise KernelMissing(msg, lacking[0])


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
