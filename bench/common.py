"""What every benchmark shares: progress lines, statistics, flow sets and timed commands.

Namespaces and the VM hand-off are ``sandbox``'s; results files are ``results``'.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, ip_address
from pathlib import Path

from ratelimit.errors import RatelimitError
from ratelimit.lab import servertcp
from ratelimit.plan.layout import MAX_SHAPE_LINKS
from ratelimit.spec.model import LinkParams, Request

REPO = Path(__file__).resolve().parent.parent
DEV, PEER = "rb0", "rb1"  # the device a plan goes on, and its veth peer
FIRST_PORT = 10000
PORTS_PER_HOST = 1024
MODEM_BPS = 28_800
MIN_CPU_S = 0.02  # CPU times below this are too coarse (scheduler ticks) to compare


class BenchError(Exception):
    """A benchmark could not run; the message says why, for the terminal."""


# ---------------------------------------------------------------- output


def say(part: str, text: str) -> None:
    """One progress line on stderr: ``bench setup: ...``."""
    print(f"bench {part}: {text}", file=sys.stderr, flush=True)


class Steps:
    """Numbered progress lines for a known number of steps: ``[3/12] ...``."""

    def __init__(self, part: str, total: int):
        self.part, self.total, self.done, self.t0 = part, max(1, total), 0, time.monotonic()

    def __call__(self, text: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.t0
        say(self.part, f"[{self.done}/{self.total} {elapsed:5.0f}s] {text}")


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 100:
        return f"{s:,.0f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 0.001:
        return f"{s * 1000:.1f} ms"
    return f"{s * 1e6:.0f} µs"


# ---------------------------------------------------------------- statistics


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile, interpolating linearly between order statistics
    (numpy's default): p0 is the minimum, p100 the maximum."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile {pct} is not within 0-100")
    xs = sorted(values)
    pos = (len(xs) - 1) * pct / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def summarize(values: Sequence[float]) -> dict:
    """n, mean, p5, p50, p95, min and max of ``values`` (empty: n=0 only)."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "mean": sum(values) / len(values), "p5": percentile(values, 5),
            "p50": percentile(values, 50), "p95": percentile(values, 95),
            "min": min(values), "max": max(values)}


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when either is missing or ``den`` is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def extrapolate_linear(n0: int, t0: float, n: int) -> float:
    """Time for ``n`` items from ``t0`` for ``n0``, assuming a constant cost per item."""
    if n0 <= 0:
        raise ValueError("extrapolate from at least one item")
    return t0 * n / n0


def fit_power(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares fit of ``t = a * n ** b`` to (n, t) points (log-log line);
    returns (a, b).  Needs two points with different n."""
    pts = [(math.log(n), math.log(t)) for n, t in points if n > 0 and t > 0]
    if len({x for x, _ in pts}) < 2:
        raise ValueError("a power fit needs two sizes")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - b * mx), b


# ---------------------------------------------------------------- flow sets


def client_hosts(count: int) -> tuple[IPv4Address, ...]:
    """``count`` client addresses in 198.18.0.0/15, differing in the last octet
    first (the key of the first u32 hash level): 198.18.0.2 .. 198.18.0.254,
    then 198.18.1.2 ...; at most 253 per /24."""
    if not 1 <= count <= 253 * 256:
        raise BenchError(f"hosts: {count} is not a number of hosts (1-{253 * 256})")
    return tuple(ip_address(f"198.18.{i // 253}.{2 + i % 253}") for i in range(count))


def split_flows(n: int, per_host: int = PORTS_PER_HOST) -> tuple[int, int]:
    """(hosts, ports per host) with hosts x ports = ``n``: one host while ``n`` fits
    in ``per_host`` ports, else ``per_host`` ports on each of n / per_host hosts."""
    if n < 1:
        raise BenchError(f"flows: {n} is not a number of flows (at least 1)")
    if n <= per_host:
        return 1, n
    if n % per_host:
        raise BenchError(f"flows: {n} is not a multiple of {per_host} (ports per host)")
    return n // per_host, per_host


def shape_flows(n: int) -> int:
    """The largest flow count not above ``n`` that shape mode takes (it has one
    HTB class per flow, at most ``MAX_SHAPE_LINKS``), in whole hosts of
    ``PORTS_PER_HOST`` ports: 65,536 becomes 64,512 (63 x 1,024)."""
    if n <= MAX_SHAPE_LINKS:
        return n
    return (MAX_SHAPE_LINKS // PORTS_PER_HOST) * PORTS_PER_HOST


def flows_request(n: int, mode: str, *, interface: str = DEV, netns: str | None = None,
                  rate_bps: int | None = MODEM_BPS, direction: str = "dest",
                  first_port: int = FIRST_PORT, bandwidth_bps: int = 100_000_000,
                  burst=None, hosts: Sequence[IPv4Address] | None = None) -> Request:
    """A request for ``n`` (host, port) flows in one direction: ``split_flows(n)``
    hosts from ``client_hosts`` (or ``hosts``), ports from ``first_port`` up."""
    nhosts, nports = split_flows(n)
    if hosts is None:
        hosts = client_hosts(nhosts)
    elif len(hosts) * nports != n:
        nports = n // len(hosts)
        if nports * len(hosts) != n:
            raise BenchError(f"flows: {n} flows do not split evenly over {len(hosts)} hosts")
    if first_port + nports - 1 > 65535:
        raise BenchError(f"ports: {first_port}+{nports} runs past 65535")
    link = LinkParams(rate_bps=rate_bps)
    return Request.single(interface, tuple(hosts), ((first_port, first_port + nports - 1),), link, link,
                          mode=mode, direction=direction, netns=netns, bandwidth_bps=bandwidth_bps, burst=burst)


# ---------------------------------------------------------------- commands


def need_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"{name} is missing: apt-get install {package}")
    return path


def run(argv: Sequence[str], *, input: str | None = None, timeout: float | None = 600,
        check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` with captured text output; raise ``BenchError`` on failure."""
    try:
        r = subprocess.run(list(argv), input=input, text=True, capture_output=True, timeout=timeout,
                           env=None if env is None else {**os.environ, **env}, check=False)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(argv[:6])} ... did not finish within {timeout:g} s") from None
    if check and r.returncode != 0:
        tail = " ".join(r.stderr.split())[-400:]
        raise BenchError(f"{' '.join(argv[:6])} ... exited {r.returncode}: {tail}")
    return r


def wait_until(ready: Callable[[], object], timeout_s: float, what: str, *, every_s: float = 0.05,
               detail: Callable[[], object] | None = None):
    """Call ``ready()`` every ``every_s`` seconds until it returns something true, and return
    that.  After ``timeout_s`` raise ``BenchError`` with one line: ``what``, the time waited
    and, if given, ``detail()`` (what there was instead).

    The timeout is generous: it says when the event will not come, not how long it should
    take.  Tests and benchmarks use it to start a measurement when what it measures is ready
    (every download connected, the driver's first step sent), not after a fixed sleep.

    >>> wait_until(lambda: [3], 1, "a list")
    [3]
    """
    t0 = time.monotonic()
    while True:
        got = ready()
        if got:
            return got
        if time.monotonic() - t0 >= timeout_s:
            more = f" ({detail()})" if detail is not None else ""
            raise BenchError(f"{what}: not within {timeout_s:g} s{more}")
        time.sleep(every_s)


def timed(fn: Callable, *args, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def _cpu_now() -> float:
    import resource
    me = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Clock:
    """Wall time and CPU time (user + system, this thread and the children it
    waited for) of a ``with`` block.  The kernel handles netlink requests in
    the sender's system call, so the kernel's work counts as CPU time too;
    other work on the machine and waiting for locks do not.

        with Clock() as c: ...
        c.wall, c.cpu
    """

    def __enter__(self) -> "Clock":
        self._cpu0 = _cpu_now()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._t0
        self.cpu = _cpu_now() - self._cpu0


# ---------------------------------------------------------------- TCP of the lab's server
# the facts and the kernel steps are ratelimit.lab.servertcp's (``ratelimit lab up --server-tcp``)

SERVER_CC = servertcp.STOCK_CONGESTION_CONTROL  # Linux's default congestion control (this machine's default is bbr)
LINUX_RTO_MIN_MS = servertcp.LINUX_RTO_MIN_MS  # TCP_RTO_MIN
RFC_RTO_MIN_MS = servertcp.RFC_RTO_MIN_MS  # RFC 6298 (2.4): the timeout is rounded up to 1 s
SERVER_2000 = servertcp.STARTS["2000"]  # how a 2000 server's TCP started: Reno, an initial window of 2


def server_congestion_control(lab, cc: str = SERVER_CC) -> str | None:
    """Set ``cc`` as the lab server's congestion control where the host allows it in a
    namespace (``net.ipv4.tcp_allowed_congestion_control``); return the one in effect
    (results record it: retransmissions and call times depend on it).  Where it is not
    allowed the benchmark says so and runs on with the one in effect."""
    try:
        servertcp.set_congestion_control(lab.server.netns, cc)
    except RatelimitError as err:
        say("bench", f"the server runs {congestion_control(lab.server.netns)}: {err}")
    return congestion_control(lab.server.netns)


def server_route(lab, rto_min_ms: int | None, *, initcwnd: int | None = None) -> int:
    """Give the lab server's default routes (IPv4 and IPv6) a minimum retransmission timeout
    of ``rto_min_ms`` (``ip route change ... rto_min``), or Linux's own for None, and an
    initial congestion window of ``initcwnd`` segments (None: Linux's 10); return the
    floor in effect (results record it).  Why it matters behind a modem: ``servertcp``."""
    rto_min_ms = rto_min_ms or LINUX_RTO_MIN_MS
    try:
        servertcp.set_routes(lab.server.netns, rto_min_ms, initcwnd or servertcp.LINUX_INITCWND_SEGMENTS)
    except RatelimitError as err:
        raise BenchError(str(err)) from None
    return rto_min_ms


def congestion_control(netns: str) -> str | None:
    try:
        return servertcp.congestion_control(netns) or None
    except RatelimitError:
        return None


TCP_COUNTERS = ("TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes")


def tcp_counters(netns: str, names: Sequence[str] = TCP_COUNTERS) -> dict:
    """A namespace's TCP counters ``names`` (``nstat -az``); by default a server's: segments
    sent, retransmitted, timeouts and loss probes."""
    r = run(["ip", "netns", "exec", netns, "nstat", "-az", *names], check=False)
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            out[f[0]] = int(f[1])
    return out


def tcp_change(before: dict, after: dict) -> dict:
    """A row's server TCP fields from two ``tcp_counters`` readings: each counter's change and the
    share of sent segments that were retransmissions."""
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in TCP_COUNTERS}
    return {"server_tcp": delta, "retransmitted": ratio(delta["TcpRetransSegs"], delta["TcpOutSegs"])}


def established(netns: str, port: int | None = None) -> list[tuple[str, int]]:
    """The peers (address, port) of a namespace's established TCP connections; ``port``: only
    those whose local port it is (a server's)."""
    argv = ["ip", "netns", "exec", netns, "ss", "-tnH", "state", "established"]
    if port is not None:
        argv.append(f"( sport = :{port} )")
    out = []
    for line in run(argv).stdout.splitlines():
        f = line.split()
        if f:
            addr, _, peer_port = f[-1].rpartition(":")
            if peer_port.isdigit():
                out.append((addr.strip("[]"), int(peer_port)))
    return out


def listening(netns: str, port: int) -> bool:
    """Whether a TCP socket listens on ``port`` in the namespace (a server that has started)."""
    return bool(run(["ip", "netns", "exec", netns, "ss", "-ltnH", f"( sport = :{port} )"]).stdout.strip())


def delivered(netns: str) -> dict:
    """Segments each server connection has had delivered (``ss``'s ``delivered``: cumulatively
    or selectively acknowledged, each once), by the client's (address, port).  Counted
    at the sender, a byte counts when it reaches the client, in order or not."""
    out, key = {}, None
    for line in run(["ip", "netns", "exec", netns, "ss", "-tinH", "state", "established"]).stdout.splitlines():
        if not line.startswith((" ", "\t")):
            peer = line.split()[-1]
            addr, _, port = peer.rpartition(":")
            key = (addr.strip("[]"), int(port)) if port.isdigit() else None
        elif key is not None:
            m = re.search(r"\bdelivered:(\d+)", line)
            if m:
                out[key] = int(m.group(1))
    return out
