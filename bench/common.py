"""What every benchmark shares: results files, progress, statistics, flow sets,
throwaway namespaces, timed commands and the hand-off to the full-kernel VM.

Namespaces made here are called ``rlb-<pid>-<tag>`` (``rlb-`` is not the
``rl-`` of the namespace lab, so neither ever removes the other's); every one
is deleted when its ``with`` block ends, and any left at exit (an exception,
Ctrl-C, SIGTERM) are deleted by an ``atexit`` hook.  Benchmark traffic only
flows between namespaces made by the benchmark, on 198.18.0.0/15 addresses.
"""

from __future__ import annotations

import atexit
import datetime
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from ipaddress import IPv4Address, ip_address
from pathlib import Path

from ratelimit.compile import MAX_SHAPE_FLOWS
from ratelimit.model import LinkParams, Request

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
NS_PREFIX = "rlb-"
DEV, PEER = "rb0", "rb1"  # the device a plan goes on, and its veth peer
FIRST_PORT = 10000
PORTS_PER_HOST = 1024
MODEM_BPS = 28_800
MODULES = ("sch_htb", "sch_netem", "sch_ingress", "cls_u32", "act_police", "act_mirred", "ifb")


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


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.1f} ms"


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
    HTB class per flow, at most ``MAX_SHAPE_FLOWS``), in whole hosts of
    ``PORTS_PER_HOST`` ports: 65,536 becomes 64,512 (63 x 1,024)."""
    if n <= MAX_SHAPE_FLOWS:
        return n
    return (MAX_SHAPE_FLOWS // PORTS_PER_HOST) * PORTS_PER_HOST


def flows_request(n: int, mode: str, *, interface: str = DEV, netns: str | None = None,
                  rate_bps: int | None = MODEM_BPS, direction: str = "dest",
                  first_port: int = FIRST_PORT, bandwidth_bps: int = 100_000_000,
                  burst_pkts: int = 5, hosts: Sequence[IPv4Address] | None = None) -> Request:
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
    return Request(interface=interface, hosts=tuple(hosts), ports=((first_port, first_port + nports - 1),),
                   down=link, up=link, mode=mode, direction=direction, netns=netns,
                   bandwidth_bps=bandwidth_bps, burst_pkts=burst_pkts)


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


# ---------------------------------------------------------------- namespaces

_LIVE: set[str] = set()
_counter = 0


def _delete_ns(name: str) -> None:
    """Kill what runs in ``name`` and delete it (quietly; it may be gone)."""
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    _LIVE.discard(name)


_TOPOLOGIES: list = []


def track_topology(topo) -> None:
    """Remember an ``nstopo`` topology (or ``lab_core.Lab``) to remove at exit."""
    _TOPOLOGIES.append(topo)


def untrack_topology(topo) -> None:
    if topo in _TOPOLOGIES:
        _TOPOLOGIES.remove(topo)


def cleanup_all() -> None:
    """Delete every namespace and topology this process made that still exists."""
    for name in sorted(_LIVE):
        _delete_ns(name)
    while _TOPOLOGIES:
        topo = _TOPOLOGIES.pop()
        try:
            (getattr(topo, "down", None) or topo.destroy)()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def leftovers() -> list[str]:
    """Namespaces named like a benchmark's whose process is gone."""
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.startswith(NS_PREFIX):
            pid = n[len(NS_PREFIX):].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                out.append(n)
    return sorted(out)


def remove_leftovers() -> list[str]:
    """Delete namespaces left by benchmark processes that died (by name only)."""
    found = leftovers()
    for n in found:
        _delete_ns(n)
    return found


atexit.register(cleanup_all)


def _on_term(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so ``with`` blocks and atexit clean up."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, _on_term)
        except (ValueError, OSError):
            pass


def ns_name(tag: str) -> str:
    global _counter
    _counter += 1
    return f"{NS_PREFIX}{os.getpid()}-{_counter}{'-' + tag if tag else ''}"[:60]


class Netns:
    """A throwaway namespace with a veth pair ``rb0``/``rb1`` (both ends inside
    and up, no addresses): the device a plan is installed on.  Deleted on exit."""

    def __init__(self, tag: str = "", *, veth: bool = True):
        self.name = ns_name(tag)
        self.veth = veth

    def __enter__(self) -> "Netns":
        if os.geteuid() != 0:
            raise BenchError("benchmarks need root (network namespaces)")
        run(["ip", "netns", "add", self.name])
        _LIVE.add(self.name)
        try:
            lines = ["link set lo up"]
            if self.veth:
                lines += [f"link add {DEV} type veth peer name {PEER}", f"link set {DEV} up",
                          f"link set {PEER} up"]
            run(["ip", "-n", self.name, "-batch", "-"], input="\n".join(lines) + "\n")
        except BaseException:
            _delete_ns(self.name)
            raise
        return self

    def __exit__(self, *exc) -> None:
        # an explicit root qdisc delete first: the kernel's namespace cleanup is
        # asynchronous and would otherwise tear down 60,000 classes during the
        # next measurement
        if self.veth:
            subprocess.run(["tc", "-n", self.name, "qdisc", "del", "dev", DEV, "root"],
                           capture_output=True, check=False)
        _delete_ns(self.name)

    def tc(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return run(["tc", "-n", self.name, *args], **kw)


# ---------------------------------------------------------------- results


def machine() -> dict:
    """Where a result was measured."""
    def first_line(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=10)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return ""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal"))) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    return {"kernel": platform.release(), "cpus": os.cpu_count(), "cpu": cpu, "mem_bytes": mem,
            "loadavg": loadavg(),
            "python": platform.python_version(), "tc": first_line(["tc", "-V"]),
            "in_vm": os.environ.get("RATELIMIT_IN_VM") == "1"}


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def where() -> str:
    return "vm" if os.environ.get("RATELIMIT_IN_VM") == "1" else "host"


def result_path(name: str, place: str, quick: bool, outdir: Path | str = RESULTS_DIR) -> Path:
    return Path(outdir) / f"{name}-{place}{'-quick' if quick else ''}.json"


def new_result(name: str, quick: bool, command: Sequence[str] | None = None) -> dict:
    return {"benchmark": name, "where": where(), "quick": quick,
            "command": " ".join(command or ["python", "-m", "bench", *sys.argv[1:]]),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": machine(), "rows": [], "notes": []}


def save(doc: dict, outdir: Path | str = RESULTS_DIR) -> Path:
    """Write ``doc`` to its results file (atomically) and return the path."""
    doc["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    path = result_path(doc["benchmark"], doc["where"], doc["quick"], outdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def load_results(outdir: Path | str = RESULTS_DIR, *, quick: bool | None = None) -> dict:
    """``{(name, where): doc}`` from ``outdir``.  With ``quick=None`` a full run's
    file wins over a quick one's; True/False take only that kind."""
    out: dict = {}
    for path in sorted(Path(outdir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or "benchmark" not in doc:
            continue
        if quick is not None and bool(doc.get("quick")) != quick:
            continue
        key = (doc["benchmark"], doc.get("where", "host"))
        if key in out and not out[key].get("quick") and doc.get("quick"):
            continue
        out[key] = doc
    return out


# ---------------------------------------------------------------- the VM


def in_vm() -> bool:
    return os.environ.get("RATELIMIT_IN_VM") == "1"


def load_modules(modules: Iterable[str] = MODULES) -> None:
    """In the VM: load the traffic-control modules (a no-op where built in)."""
    for m in modules:
        subprocess.run(["modprobe", "-q", m], capture_output=True, check=False)


def host_has(*features: str) -> bool:
    """True if the running kernel takes every one of ``features`` (probe names)."""
    from ratelimit.probe import probe
    try:
        return all(probe(list(features)).values())
    except Exception:  # noqa: BLE001 - a probe that cannot run means "no"
        return False


def run_vm_part(part: str, args: Sequence[str], *, outdir: Path | str = RESULTS_DIR,
                timeout_s: float = 3600, memory: str = "2G") -> int:
    """Run ``python -m bench PART ARGS --in-vm`` in the full-kernel VM, results
    written to ``outdir`` (shared read-write); returns its exit status."""
    from ratelimit import vm
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "bench", part, *args, "--in-vm", "--out", str(outdir)]
    say(part, f"booting the stock kernel in a VM (software emulation, about 20 s): {' '.join(argv[1:])}")
    res = vm.run_vm(argv, cwd=str(REPO), rwdirs=[str(outdir)], env={"PYTHONPATH": str(REPO)},
                    timeout_s=timeout_s, memory=memory, cpus=os.cpu_count() or 1,
                    on_output=lambda line: print(f"[vm] {line}", file=sys.stderr, flush=True),
                    announce=False)
    say(part, f"VM finished: exit {res.exit_code}, guest kernel {res.guest_release}, "
              f"boot+shutdown {res.boot_s:.0f} s, benchmark {res.command_s:.0f} s")
    return res.exit_code
