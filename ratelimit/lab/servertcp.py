"""How the lab's server starts a TCP connection: its retransmission floor, initial window and
congestion control, as one of three named starts (``ratelimit lab up --server-tcp``).

Behind a 28.8k modem a 1,460-byte segment takes 0.44 s to arrive, while the handshake's small
packets measure a round trip of tens of ms.  TCP sets its retransmission timeout from that
round trip, so with Linux's 200 ms floor the timer fires before the first full segment is
acknowledged and the segment is sent twice; with RFC 6298's 1 s floor it is not.

A start is set in the server namespace only: the rto_min and initcwnd metrics of its default
routes, IPv4 and IPv6 (``ip route change``: iproute2 locks rto_min, which the kernel needs
before it uses the metric), and ``net.ipv4.tcp_congestion_control``, a per-namespace sysctl.
What ``apply`` returns is read back from the kernel (``ip -j route show``, /proc/sys in the namespace).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import ApplyError, FieldError, KernelMissing
from ..kernel import netns as kernel_netns

FIELD = "--server-tcp"
FAMILIES = ("-4", "-6")
CC_KEY = "net.ipv4.tcp_congestion_control"
ALLOWED_KEY = "net.ipv4.tcp_allowed_congestion_control"
AVAILABLE_KEY = "net.ipv4.tcp_available_congestion_control"
TIMEOUT_S = 30

# TCP_RTO_MIN (include/net/tcp.h): what a route without an rto_min metric gets in a new
# namespace (whose net.ipv4.tcp_rto_min_us, where the kernel has it, starts at the same 200 ms)
LINUX_RTO_MIN_MS = 200
LINUX_INITCWND_SEGMENTS = 10  # TCP_INIT_CWND (include/net/tcp.h): RFC 6928's initial window
RFC_RTO_MIN_MS = 1000  # RFC 6298 (2.4), as RFC 2988 (2.4) before it: "rounded up to 1 second"
RFC2581_INITCWND_SEGMENTS = 2  # RFC 2581 (3.1): IW <= 2 segments (RFC 2414's larger one was experimental)
STOCK_CONGESTION_CONTROL = "cubic"  # a stock kernel's CONFIG_DEFAULT_TCP_CONG


@dataclass(frozen=True)
class Start:
    """One way the server's TCP starts; ``congestion_control`` None is the kernel's default for
    a new namespace, which is the host's ``net.ipv4.tcp_congestion_control`` (cubic on a stock
    kernel): naming cubic would fail where the host allows namespaces only its own default."""

    name: str
    rto_min_ms: int
    initcwnd_segments: int
    congestion_control: str | None


STARTS = {s.name: s for s in (
    # Linux's own: no route metrics, the namespace's default congestion control
    Start("linux", LINUX_RTO_MIN_MS, LINUX_INITCWND_SEGMENTS, None),
    # RFC 6298 (June 2011), 2.4: "Whenever RTO is computed, if it is less than 1 second, then the
    # RTO SHOULD be rounded up to 1 second"; Linux's initial window and congestion control
    Start("rfc6298", RFC_RTO_MIN_MS, LINUX_INITCWND_SEGMENTS, None),
    # a server of 2000: RFC 2988 (November 2000), 2.4, the same 1 s floor; RFC 2581 (April 1999),
    # 3.1, an initial window of at most 2 segments; Linux's reno: RFC 2581's slow start and
    # congestion avoidance, as the v0.3 rows of the dial-up benchmark run it
    Start("2000", RFC_RTO_MIN_MS, RFC2581_INITCWND_SEGMENTS, "reno"),
)}
DEFAULT = "linux"  # what lab up did before --server-tcp
HOST_CC_TEXT = "the host's congestion control"


def check(value) -> Start:
    """The start named ``value`` (``"2000"`` may be given as the number); a ``FieldError`` otherwise."""
    plain = isinstance(value, (str, int)) and not isinstance(value, bool)
    start = STARTS.get(str(value)) if plain else None
    if start is None:
        raise FieldError(FIELD, f"'{value}'" if isinstance(value, str) else repr(value),
                         f"is not one of {', '.join(STARTS)}")
    return start


def apply(netns: str, value) -> dict:
    """Give the server namespace ``netns`` the start ``value``; return what is in effect, read
    back from the kernel (``in_effect``).  A congestion control the namespace may not use is a
    ``KernelMissing`` saying how to allow it; nothing else is run in its place."""
    start = check(value)
    try:
        set_congestion_control(netns, start.congestion_control or host_congestion_control())
    except KernelMissing as err:
        raise KernelMissing(f"{FIELD} {start.name}: {err}", err.feature) from None
    set_routes(netns, start.rto_min_ms, start.initcwnd_segments)
    got = in_effect(netns, start.name)
    want = (start.rto_min_ms, start.initcwnd_segments)
    if (got["rto_min_ms"], got["initcwnd_segments"]) != want:
        raise ApplyError(f"{FIELD} {start.name}: the server's default routes show an RTO floor of "
                         f"{got['rto_min_ms']} ms and an initial window of {got['initcwnd_segments']}, "
                         f"not {want[0]} ms and {want[1]}")
    return got


def in_effect(netns: str, name: str) -> dict:
    """The start in effect in ``netns``, from its default routes and its congestion control."""
    metrics = {_metrics(r) for family in FAMILIES for r in default_routes(netns, family)}
    if len(metrics) != 1:
        raise ApplyError(f"{FIELD} {name}: the server's default routes (IPv4 and IPv6) "
                         + ("are missing" if not metrics else f"disagree: {sorted(metrics)}"))
    rto_min_ms, initcwnd = metrics.pop()
    return {"name": name, "rto_min_ms": rto_min_ms, "initcwnd_segments": initcwnd,
            "congestion_control": congestion_control(netns)}


def choices_text() -> str:
    """The starts for ``--help``: ``linux: RTO floor 200 ms, initial window 10, ...; ...``."""
    return "; ".join(f"{s.name}: RTO floor {ms_text(s.rto_min_ms)}, initial window {s.initcwnd_segments}, "
                     f"{s.congestion_control or HOST_CC_TEXT}" for s in STARTS.values())


def describe(tcp: dict) -> str:
    """``rfc6298 (RTO floor 1 s, initial window 10, cubic)``."""
    return (f"{tcp['name']} (RTO floor {ms_text(tcp['rto_min_ms'])}, initial window "
            f"{tcp['initcwnd_segments']}, {tcp['congestion_control']})")


def ms_text(ms: int) -> str:
    """``200 ms``, ``1 s``."""
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms} ms"


# ---------------------------------------------------------------- routes


def set_routes(netns: str, rto_min_ms: int, initcwnd_segments: int) -> None:
    """Give ``netns``'s default routes (IPv4 and IPv6) these metrics; Linux's own values are
    left out of the route (no metric), so changing back to them clears it."""
    for family in FAMILIES:
        for route in default_routes(netns, family):
            if _metrics(route) == (rto_min_ms, initcwnd_segments):
                continue
            argv = ["route", "change", "default", "via", route["gateway"], "dev", route["dev"]]
            if rto_min_ms != LINUX_RTO_MIN_MS:
                argv += ["rto_min", f"{rto_min_ms}ms"]
            if initcwnd_segments != LINUX_INITCWND_SEGMENTS:
                argv += ["initcwnd", str(initcwnd_segments)]
            _ip(netns, family, *argv)


def default_routes(netns: str, family: str) -> list[dict]:
    """``ip -j route show default`` in ``netns`` for one family (``-4``, ``-6``)."""
    return json.loads(_ip(netns, family, "-j", "route", "show", "default") or "[]")


def _metrics(route: dict) -> tuple[int, int]:
    """(rto_min ms, initcwnd segments) of a route from ``ip -j``, Linux's own where it has none."""
    shown: dict = {}
    for m in route.get("metrics", []):
        shown.update(m)
    return shown.get("rto_min", LINUX_RTO_MIN_MS), shown.get("initcwnd", LINUX_INITCWND_SEGMENTS)


def _ip(netns: str, family: str, *argv: str) -> str:
    return _run(["ip", "-n", netns, family, *argv])


# ---------------------------------------------------------------- congestion control


def set_congestion_control(netns: str, cc: str) -> None:
    """Make ``cc`` the congestion control of new connections in ``netns``; a ``KernelMissing``
    naming what to change when the kernel does not have it or the namespace may not use it."""
    if congestion_control(netns) == cc:
        return
    try:
        kernel_netns.set_sysctl(netns, CC_KEY, cc)
    except OSError:
        pass  # a refusal shows in what is read back
    if congestion_control(netns) == cc:
        return
    available = kernel_netns.get_sysctl(netns, AVAILABLE_KEY).split()
    if cc not in available:
        raise KernelMissing(f"this kernel has no congestion control {cc} "
                            f"({AVAILABLE_KEY}: {' '.join(available)}); load it: modprobe tcp_{cc}",
                            f"tcp_{cc}")
    allowed = kernel_netns.get_sysctl(netns, ALLOWED_KEY).split()
    raise KernelMissing(f"congestion control {cc} is not allowed in network namespaces "
                        f"here ({ALLOWED_KEY}: {' '.join(allowed)}); allow it on the host: "
                        f"sysctl -w {ALLOWED_KEY}=\"{' '.join([*allowed, cc])}\"", f"tcp_{cc}")


def congestion_control(netns: str) -> str:
    """``net.ipv4.tcp_congestion_control`` in ``netns``."""
    return kernel_netns.get_sysctl(netns, CC_KEY)


def host_congestion_control() -> str:
    """The congestion control where this process runs (the host): the one a new namespace starts with."""
    return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()


def _run(cmd: list[str], *, check: bool = True) -> str:
    """``cmd``'s output; an ``ApplyError`` with its message when it fails (unless ``check`` is False)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if check and r.returncode != 0:
        raise ApplyError(f"{FIELD}: {' '.join(cmd)} failed: {' '.join(r.stderr.split()) or r.returncode}")
    return r.stdout
