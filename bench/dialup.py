"""Benchmark 5: the dial-up table of the 2000 experiments, the 2000 way, in the namespace lab.

x simultaneous users, each one persistent HTTP/1.1 connection fetching the
10,000-byte file 20 times in a row, every connection its own emulated 28.8k
modem (``modem-28k8``: PPP frames with compressed headers over V.42, shaped
per (host, port) -- one connection is one user, as in 2000).  Two load
generators, each in four client namespaces (the 2000 lab had four clients):

* httperf, as in 2000: ``--wsess N,20,0 --burst-length 1`` with the sessions
  started by ``--rate`` over a few seconds, each keeping one connection for its
  20 calls; at most ``PER_HTTPERF`` sessions per process (select() caps a
  process near 1,024 descriptors, and httperf busy-polls: every process keeps a
  core busy whatever its load);
* wrk (epoll): ``-t1 -c N`` per client namespace, N keep-alive connections
  each fetching back to back; it also runs x = 10,000, where httperf would need
  a dozen spinning processes on two cores.

Each client's ephemeral range is ``PORTS`` (every port an emulated link each way), which holds
12,000 users; wrk at ``WIDE_XS`` (15,000 and 20,000) runs in a lab of its own whose ranges are
widened as far as its users need (``ports_for``), a result of its own (``WIDE_NAME``), so the
table's rows keep their lab.

Measurement window: replies (status 200, 10,000 bytes) in the server's access log,
from ``ramp`` after the start (every session connected and past its first call) for
``window`` seconds, the same window for every row; each connection's rate is the
number of its calls between its first and last reply in the window over that time
(``rate_in_window``: counting replies in the window instead would depend on where it
cuts wrk's waves of calls), and the row's rate is their sum.  Theory: a fetch needs at least 10,000 x 8 / 28,800 =
2.78 s, so x users complete at most 0.36 x fetches per second (the published
formula).  The link model's ceiling counts what each call puts on the link:
the request up, the response's frames down (``LinkModel.call_seconds``), at
the rate the PPP frames get; so x users complete at most x / call_seconds.

v0.3's settings (police mode, ``--burst 5``, Ethernet framing) run where the kernel has
act_police: on the host if it has it, else in the full-kernel VM (``--no-vm`` skips it),
measured as the 2000 figures were read, from httperf's own totals (``run_totals``): every
client starts its sessions within the first second, each runs its 20 calls to the end, and
the row's rate is the sum over clients of replies / test duration.  Each session is a new
port, so a policer whose 18,000-byte bucket starts full: the session model
(``session_seconds``) takes the bucket off the session's time on the link.

Where a call's time goes: during each row's window, ``PROBES`` curl processes in the
first client namespace fetch the file ``probe_calls`` times each over one connection
(each its own link, left out of the row's rate) and time each call in two parts:
request to first byte (the request up, the server, and what the link still owes for the
packet before) and first byte to last byte (the response's frames down, which the link
model predicts: ``rest_model_s``).

CPU: the load generators' and the server's processes (utime + stime from
/proc), and the kernel's softirq time over all CPUs.  veth delivery runs in
the sender's context, so the router's forwarding and shaping show up as
softirq time, charged to whichever process sent the packet.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import httperf
from .common import (LINUX_RTO_MIN_MS, RFC_RTO_MIN_MS, SERVER_2000, SERVER_CC, BenchError, MODEM_BPS, Steps, ratio,
                     say, server_congestion_control, server_route, summarize, tcp_change, tcp_counters)
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "dialup"
VM_WORK = True  # v0.3's settings (police mode) where the host lacks act_police
URI = "/10000.bin"
FILE_BYTES = 10_000
CALLS = 20  # per session, as in 2000
CLIENTS = 4  # client namespaces (the 2000 lab's four client machines)
PER_HTTPERF = httperf.FD_SAFE  # sessions per httperf process: below FD_SETSIZE
PORTS = "10000-12999"  # each client's ephemeral range, every port an emulated link
PROFILE = "modem-28k8"
# x -> event-driven server's completed connections/s measured in 2000 (the published benchmark ratelimit v0.3 was written for)
PUBLISHED = {200: 69, 1000: 349, 2000: 697, 3600: 1239}
THEORY_FACTOR = MODEM_BPS / (FILE_BYTES * 8)  # 0.36 completions/s per user
# what each generator sends for a call (the request's time on the uplink counts)
REQUEST = {"httperf": "GET {uri} HTTP/1.1\r\nUser-Agent: httperf/0.9.0\r\nHost: {host}\r\n\r\n",
           "wrk": "GET {uri} HTTP/1.1\r\nHost: {host}:80\r\n\r\n"}


@dataclass(frozen=True)
class Config:
    # (load generator, x, the server's RTO floor in ms: RFC_RTO_MIN_MS, or None for Linux's 200 ms)
    points: tuple[tuple[str, int, int | None], ...]
    ramp_s: float
    window_s: float
    ports: str = PORTS  # each client's ephemeral range (``ports_for``)


TABLE_XS = (200, 1000, 2000, 3600)  # the 2000 table's x
WIDE_NAME = f"{NAME}-wide"  # the rows whose users need more than PORTS: a lab of their own
WIDE_XS = (15_000, 20_000)  # wrk only: a client's share is several httperf processes' (``PER_HTTPERF``)
PROBES = 10  # probe connections per row (curl, in the first client namespace)


def config(quick: bool, clients=None) -> Config:
    """httperf and wrk at each x with the RFC's 1 s RTO floor (httperf only where a
    client's share fits one process: ``PER_HTTPERF``); the default table also has wrk at
    x = 10,000 and one wrk row with Linux's 200 ms floor to show what it costs."""
    if quick:
        xs = tuple(clients or (40,))
        # a 12 s window: with Linux's floor a connection's third call can come 8.5 s after its second
        return Config(tuple((g, x, RFC_RTO_MIN_MS) for g in ("httperf", "wrk") for x in xs) + (("wrk", xs[0], None),),
                      8.0, 12.0, ports_for(max(xs)))
    xs = tuple(clients or TABLE_XS)
    points = (tuple(("httperf", x, RFC_RTO_MIN_MS) for x in xs if shares(x)[0] <= PER_HTTPERF)
              + tuple(("wrk", x, RFC_RTO_MIN_MS) for x in (xs if clients else (*xs, 10_000))))
    if not clients:
        points += (("wrk", xs[1], None),)
    return Config(points, 12.0, 40.0, ports_for(max(xs)))


def wide_config() -> Config:
    """wrk at ``WIDE_XS``, in a lab whose clients' ranges hold the largest one's users."""
    return Config(tuple(("wrk", x, RFC_RTO_MIN_MS) for x in WIDE_XS), 12.0, 40.0, ports_for(max(WIDE_XS)))


def ports_for(x: int) -> str:
    """Each client's ephemeral range for x users: ``PORTS`` where a client's share and the
    probes fit in it, else ``PORTS`` widened at its top by whole 500s as far as they need
    (every port is an emulated link each way, so no further)."""
    lo, hi = (int(p) for p in PORTS.split("-"))
    need = shares(x)[0] + PROBES
    return PORTS if need <= hi - lo + 1 else f"{lo}-{lo + math.ceil(need / 500) * 500 - 1}"


def linux_floor(row: dict) -> bool:
    """A comparison row: the server kept Linux's 200 ms RTO floor."""
    return row.get("server_rto_min_ms") == LINUX_RTO_MIN_MS


def table_rows(doc: dict, generator: str | None = None) -> list[dict]:
    """The table's rows (the server at the RFC's floor), by generator and x."""
    return sorted((r for r in doc.get("rows", []) if not linux_floor(r) and generator in (None, r["generator"])),
                  key=lambda r: (r["generator"], r["x"]))


def theoretical(x: int) -> float:
    """The published ceiling: 0.36 x completed fetches per second."""
    return x * THEORY_FACTOR


_NGINX_LINE = re.compile(r'^(\S+) \S+ \S+ \[(\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "[^"]*" (\d{3}) (\d+)'
                         r'(?: "[^"]*" "[^"]*" (\d+\.\d+) (\d+))?', re.M)


@dataclass(frozen=True)
class Completion:
    """A complete reply in the access log: when it ended and on which connection (the
    lab's log format adds ``$msec`` and ``$remote_port``; the plain combined format has
    the second only, and no port)."""

    at: float
    client: str
    port: int | None


def nginx_completions(text: str) -> list[Completion]:
    """Complete 10,000-byte 200 replies in an nginx access log."""
    out = []
    for m in _NGINX_LINE.finditer(text):
        if m.group(3) == "200" and int(m.group(4)) == FILE_BYTES:
            at = float(m.group(5)) if m.group(5) else \
                datetime.datetime.strptime(m.group(2), "%d/%b/%Y:%H:%M:%S %z").timestamp()
            out.append(Completion(at, m.group(1), int(m.group(6)) if m.group(6) else None))
    return out


def rate_in_window(done: list[Completion], start: float, end: float) -> tuple[float, int]:
    """(replies per second, connections counted) in [start, end]: the sum over connections
    of each one's rate, (replies - 1) / (last - first) of its replies in the window.  A
    count of replies in the window would depend on where the window cuts the calls: wrk
    starts its connections together, so their replies come in waves a call apart, and a
    40 s window holds 13 or 14 of them (7% apart)."""
    by_conn: dict = {}
    for c in done:
        if start <= c.at <= end and c.port is not None:
            by_conn.setdefault((c.client, c.port), []).append(c.at)
    rate, counted = 0.0, 0
    for times in by_conn.values():
        if len(times) >= 2 and times[-1] > times[0]:
            rate += (len(times) - 1) / (times[-1] - times[0])
            counted += 1
    return rate, counted


def shares(x: int, n: int = CLIENTS) -> list[int]:
    """x users over n client namespaces, as evenly as possible."""
    return [x // n + (1 if i < x % n else 0) for i in range(n)]


_PROBE_FORMAT = "%{time_starttransfer} %{time_total} %{local_port}\\n"


def probe_calls(lab, url: str, calls: int) -> subprocess.Popen:
    """One probe connection: ``calls`` fetches of ``url`` by one curl (which keeps its
    connection open between them), each printed as first byte, total and local port."""
    argv = ["curl", "-sS", "-w", _PROBE_FORMAT]
    for _ in range(calls):
        argv += ["-o", "/dev/null", url]
    return lab.client(1).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def probe_times(outputs: list[str]) -> tuple[list[float], list[float], set[int]]:
    """(request to first byte, first to last byte, local ports) of every probe call that
    completed (the first call of each connection, which also connects, left out)."""
    first, rest, ports = [], [], set()
    for out in outputs:
        lines = [line.split() for line in out.splitlines()]
        calls = [(float(a), float(b), int(c)) for a, b, c in (f for f in lines if len(f) == 3)
                 if a.replace(".", "", 1).isdigit()]
        ports.update(c for _, _, c in calls)
        for start, total, _ in calls[1:]:
            first.append(start)
            rest.append(total - start)
    return first, rest, ports


def load_argv(generator: str, server: str, users: int, duration_s: float, ramp_s: float,
              calls: int = CALLS) -> list[str]:
    """One client namespace's load: ``users`` persistent connections, all started within
    half the ramp (httperf: ``users`` sessions of ``calls`` calls at ``--rate`` users / (ramp / 2))."""
    if generator == "httperf":
        return httperf.session_argv(server, 80, URI, users, calls, rate=max(1.0, users / (ramp_s / 2)),
                                    timeout_s=duration_s + 60)
    return ["wrk", "-t1", f"-c{users}", f"-d{duration_s:.0f}s", "--timeout", "60s", f"http://{server}{URI}"]


# ---------------------------------------------------------------- CPU


def _proc_cpu_each(pids) -> dict[int, float]:
    """Each of these processes' user + system seconds, its reaped children's included (a
    process gone: left out)."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            out[pid] = sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            continue
    return out


def _waits(pids) -> tuple[int, int]:
    """These processes' time waiting for a CPU while runnable (ns) and their turns on one
    (``/proc/PID/schedstat``: on-CPU ns, run delay ns, turns)."""
    delay = turns = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                _, d, n = (int(v) for v in f.read().split())
        except (OSError, ValueError):
            continue
        delay, turns = delay + d, turns + n
    return delay, turns


def _per_cpu() -> list[tuple[int, int, int]]:
    """Each CPU's (all ticks, idle ticks, softirq ticks) since boot."""
    out = []
    with open("/proc/stat") as f:
        for line in f:
            name, *parts = line.split()
            if name.startswith("cpu") and name != "cpu":
                v = [int(x) for x in parts]
                out.append((sum(v), v[3] + v[4], v[6]))
    return out


def _cpu_totals() -> tuple[float, float, float]:
    """(all CPU seconds, idle seconds, softirq seconds) since boot, over every CPU."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return sum(parts) / tick, (parts[3] + parts[4]) / tick, parts[6] / tick


# ---------------------------------------------------------------- one row


@dataclass
class Window:
    """What one steady-state window saw: the load's complete replies at the server (the
    probes' left out) and the window's bounds, each load process's output, CPU and the
    server's TCP over the window, and the probes' call times."""

    start: float
    end: float
    completions: list[Completion]
    outputs: list[str]
    cpu: dict
    cpu_run: dict
    tcp: dict
    probe: tuple[list[float], list[float], set[int]]


def run_window(lab, generator: str, loads: list[tuple[int, list[str]]], cfg: Config, log: Path, *,
               duration_s: float, probes: int = 0, probe_n: int = 2, probe_timeout_s: float = 60) -> Window:
    """Start ``loads`` (client number, argv) at once, wait ``cfg.ramp_s``, watch
    ``cfg.window_s`` (with ``probes`` curl probes of ``probe_n`` calls in client 1), stop the
    load and read the server's access log (``duration_s``: the load's own run, for its timeout)."""
    offset = log.stat().st_size if log.exists() else 0
    server_pids = _server_pids(lab)
    cpu0 = _cpu_totals()
    procs = [lab.client(i).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, argv in loads]
    time.sleep(cfg.ramp_s)
    tcp0 = tcp_counters(lab.server.netns)
    start, c0 = time.time(), _cpu_sample(procs, server_pids)
    probing = [probe_calls(lab, lab.url(URI), probe_n) for _ in range(probes)]
    time.sleep(cfg.window_s)
    end, c1 = time.time(), _cpu_sample(procs, server_pids)
    tcp1 = tcp_counters(lab.server.netns)
    probe = probe_times([p.communicate(timeout=probe_timeout_s)[0] for p in probing])
    outputs = stop_load(procs, generator, duration_s + 60)
    with open(log, "rb") as f:
        f.seek(offset)
        times = [c for c in nginx_completions(f.read().decode("utf-8", "replace"))
                 if not (c.client == lab.client(1).address and c.port in probe[2])]
    return Window(start, end, times, outputs, _cpu_share(c0, c1),
                  {"machine_busy": 1 - (c1[0][1] - cpu0[1]) / ((c1[0][0] - cpu0[0]) or 1)},
                  tcp_change(tcp0, tcp1), probe)


def stop_load(procs: list[subprocess.Popen], generator: str, timeout_s: float) -> list[str]:
    """Each load process's output, once it has ended (httperf is interrupted: it prints its
    report then; wrk ends on its own)."""
    outputs = []
    for p in procs:
        if generator == "httperf":
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outputs.append(out)
    return outputs


def run_point(lab, model, generator: str, x: int, rto_min_ms: int, cfg: Config, log: Path,
              header_bytes: int) -> dict:
    """One (generator, x): start the load in every client namespace, count completions at
    the server over the window, stop the load, read each generator's own totals."""
    users = shares(x)
    session_s = CALLS * model.call_seconds(FILE_BYTES)
    duration = cfg.ramp_s + cfg.window_s + 5
    if generator == "httperf":  # sessions end after 20 calls: the window must fit in them
        duration = max(duration, session_s + cfg.ramp_s)
    probe_n = max(2, int(cfg.window_s / session_s * CALLS) - 1)
    w = run_window(lab, generator, [(i + 1, load_argv(generator, lab.server.address, n, duration, cfg.ramp_s))
                                    for i, n in enumerate(users) if n], cfg, log, duration_s=duration,
                   probes=PROBES, probe_n=probe_n, probe_timeout_s=probe_n * session_s / CALLS * 3 + 60)
    rate, counted = rate_in_window(w.completions, w.start, w.end)
    if counted < x / 2:  # a machine that saturates leaves some with one call or none: the row says how many
        raise BenchError(f"{generator} x={x}: only {counted} connections finished two calls in the window "
                         "(is the server's access log in the lab's format, with $msec and $remote_port?)")
    request = request_bytes(generator, lab)
    call_s = model.call_seconds(FILE_BYTES, header=header_bytes, request=request)
    ceiling = x / call_s
    row = {"generator": generator, "x": x, "users_per_client": users, "completed_per_s": rate,
           "connections_counted": counted, "window_s": w.end - w.start, "theoretical": theoretical(x),
           "ratio_to_theoretical": ratio(rate, theoretical(x)),
           "model_call_s": call_s, "model_ceiling": ceiling, "ratio_to_model": ratio(rate, ceiling),
           "request_bytes": request, "server_rto_min_ms": rto_min_ms,
           "published": PUBLISHED.get(x) if generator == "httperf" else None,
           "cpu": w.cpu, "cpu_run": w.cpu_run, **w.tcp, "probe": probe_summary(w, model, header_bytes, probe_n)}
    row.update(generator_totals(generator, w.outputs))
    return row


def probe_summary(w: Window, model, header_bytes: int, probe_n: int) -> dict:
    """A row's probe calls: request to first byte and first to last byte, and the latter's model."""
    first, rest, _ = w.probe
    return {"calls_per_connection": probe_n, "first_byte_s": summarize(first), "rest_s": summarize(rest),
            "rest_model_s": model.transfer_seconds(header_bytes + FILE_BYTES)
            - (model.down_delay_us / 1e6 if model.delay_stage else 0.0)}


def request_bytes(generator: str, lab) -> int:
    """What ``generator`` sends for one call to the lab's server (its time on the uplink counts)."""
    return len(REQUEST[generator].format(uri=URI, host=lab.server.address))


def _cpu_sample(procs, server_pids) -> tuple:
    """(CPU totals, the load's CPU seconds, the server's CPU seconds, each CPU's (all, idle,
    softirq), the load's waits for a CPU, each load and server process's CPU seconds)."""
    load, server = _proc_cpu_each(p.pid for p in procs), _proc_cpu_each(server_pids)
    return (_cpu_totals(), sum(load.values()), sum(server.values()), _per_cpu(),
            _waits(p.pid for p in procs), load, server)


def _cpu_share(c0: tuple, c1: tuple) -> dict:
    """A row's CPU between two ``_cpu_sample`` s: the machine's busy share, the load
    generators' and the server's processes and softirq (in cores), each CPU's busy share, and
    how long a load generator waited for a CPU before each of its turns on one (mean, ms)."""
    wall = (c1[0][0] - c0[0][0]) or 1.0
    cores = os.cpu_count() or 1
    return {"machine_busy": 1 - (c1[0][1] - c0[0][1]) / wall,
            "load_generators": (c1[1] - c0[1]) / wall * cores,
            "server": (c1[2] - c0[2]) / wall * cores,
            "softirq": (c1[0][2] - c0[0][2]) / wall,
            "per_cpu_busy": [1 - (b[1] - a[1]) / ((b[0] - a[0]) or 1) for a, b in zip(c0[3], c1[3])],
            "per_cpu_softirq": [(b[2] - a[2]) / ((b[0] - a[0]) or 1) for a, b in zip(c0[3], c1[3])],
            "load_each": _each_share(c0[5], c1[5], wall / cores),
            "server_each": _each_share(c0[6], c1[6], wall / cores),
            "load_wait_per_turn_ms": (c1[4][0] - c0[4][0]) / ((c1[4][1] - c0[4][1]) or 1) / 1e6,
            "window_s": c1[0][0] - c0[0][0]}


def _each_share(s0: dict[int, float], s1: dict[int, float], wall_s: float) -> list[float]:
    """Each process's CPU between two samples, in cores, busiest first (one present in both)."""
    return sorted(((s1[p] - s0[p]) / wall_s for p in s1 if p in s0), reverse=True)


def generator_totals(generator: str, outputs: list[str]) -> dict:
    """What the load generators say: errors and sessions lost (httperf), errors and the whole run's rate (wrk)."""
    if generator == "httperf":
        rep = httperf.combine([httperf.parse(o) for o in outputs])
        errors = rep.get("errors", {}).get("total")
        return {"errors": errors, "sessions_total": rep.get("sessions_total"),
                "sessions_ok": rep.get("sessions_ok"), "generator_report": rep}
    errors, whole = 0, 0.0
    for o in outputs:
        m = re.search(r"Requests/sec:\s+([\d.]+)", o)  # over wrk's whole run, its ramp included
        whole = whole + float(m.group(1)) if m and whole is not None else None
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", o)
        if m:
            errors += sum(int(v) for v in m.groups())
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", o)
        if m:
            errors += int(m.group(1))
    return {"errors": errors, "whole_run_per_s": whole, "generator_report": {"tail": [o[-400:] for o in outputs]}}


def _server_pids(lab) -> list[int]:
    from ratelimit.kernel.netns import netns_pids
    return netns_pids(lab.server.netns)


def _header_bytes(lab) -> int:
    """The nginx response header for the file on a keep-alive connection."""
    r = lab.client(1).run(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_header}",
                           "-H", "Connection: keep-alive", lab.url(URI)])
    if r.returncode != 0:
        raise BenchError(f"curl through the lab failed: {r.stderr.strip()}")
    return int(r.stdout)


# ---------------------------------------------------------------- the table


V03_X = (200,)  # the VM emulates its CPUs in software: the smallest row of the 2000 table
V03_SERVER = {"cc": SERVER_2000.congestion_control, "initcwnd": SERVER_2000.initcwnd_segments}  # RFC 2581's IW
# (RTO floor, server stack): today's server, and one whose TCP starts as 2000's did with Linux's floor
V03_STACKS = ((RFC_RTO_MIN_MS, None), (None, V03_SERVER))


def session_seconds(model, burst_bytes: int, *, header: int, request: int) -> float:
    """A session's 20 calls on a policed link whose bucket starts full: the calls' time on
    the link, less what the bucket lets through at once."""
    return CALLS * model.call_seconds(FILE_BYTES, header=header, request=request) - burst_bytes * 8 / model.down_bps


def totals_ceiling(users: list[int], session_s: float) -> float:
    """The model's replies/s read the 2000 way: per client, its sessions' calls over the
    test's duration (n sessions started 1/n s apart, the last lasting ``session_s``)."""
    return sum(n * CALLS / ((n - 1) / n + session_s) for n in users if n)


@dataclass
class Sessions:
    """What sessions run whole said: each load process's output and report, CPU and the
    server's TCP over the run."""

    outputs: list[str]
    reports: list[dict]
    cpu: dict
    tcp: dict


def run_sessions(lab, loads: list[tuple[int, list[str]]], timeout_s: float) -> Sessions:
    """Start ``loads`` (client number, httperf argv) at once and let every session run to its
    end; ``BenchError`` if a client printed no totals."""
    server_pids = _server_pids(lab)
    tcp0, c0 = tcp_counters(lab.server.netns), _cpu_sample([], server_pids)
    procs = [lab.client(i).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, argv in loads]
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=timeout_s + 60)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outputs.append(p.communicate()[0])
    tcp1, c1 = tcp_counters(lab.server.netns), _cpu_sample([], server_pids)
    reports = [httperf.parse(o) for o in outputs]
    if any("duration_s" not in r or not r.get("replies") for r in reports):
        raise BenchError(f"httperf: a client printed no totals: {[o[-300:] for o in outputs]}")
    cpu = _cpu_share(c0, c1)
    del cpu["load_generators"]  # the processes end before the second sample
    return Sessions(outputs, reports, cpu, tcp_change(tcp0, tcp1))


def totals_argv(lab, sessions: int, calls: int, timeout_s: float) -> list[str]:
    """One client's httperf the 2000 way: ``sessions`` sessions started within the first second."""
    return httperf.session_argv(lab.server.address, 80, URI, sessions, calls, rate=sessions, timeout_s=timeout_s)


def run_totals(lab, model, x: int, rto_min_ms: int, header_bytes: int, burst_bytes: int) -> dict:
    """x users the 2000 way, read as the 2000 figures were: each client's httperf starts
    its sessions within the first second (``--rate`` = its sessions) and runs every one
    to its end; the row's rate is the sum over clients of httperf's replies / test duration."""
    users = shares(x)
    request = request_bytes("httperf", lab)
    session_s = session_seconds(model, burst_bytes, header=header_bytes, request=request)
    timeout_s = session_s * 3 + 60
    run = run_sessions(lab, [(i + 1, totals_argv(lab, n, CALLS, timeout_s)) for i, n in enumerate(users) if n],
                       timeout_s)
    rate = sum(r["replies"] / r["duration_s"] for r in run.reports)
    ceiling = totals_ceiling(users, session_s)
    row = {"generator": "httperf", "window": "httperf totals", "x": x, "users_per_client": users,
           "completed_per_s": rate, "theoretical": theoretical(x), "ratio_to_theoretical": ratio(rate, theoretical(x)),
           "model_session_s": session_s, "model_ceiling": ceiling, "ratio_to_model": ratio(rate, ceiling),
           "burst_bytes": burst_bytes, "request_bytes": request, "server_rto_min_ms": rto_min_ms,
           "published": PUBLISHED.get(x), "cpu": run.cpu, **run.tcp}
    row.update(generator_totals("httperf", run.outputs))
    # one persistent connection a session: httperf's connection time is the session's
    row["session_s"] = row["generator_report"].get("conn_time_ms", {}).get("avg", math.nan) / 1000
    return row


def measure(quick: bool, *, clients=None, outdir=None, cfg: Config | None = None) -> dict:
    """The table: modem-28k8 in shape mode, per (host, port), every row in the same window
    (``cfg``: instead of ``config(quick, clients)``).  A lab whose clients' ranges are wider
    than ``PORTS`` is a result of its own, ``WIDE_NAME``: the table's rows keep their lab."""
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.link import LinkSpec
    cfg = cfg or config(quick, clients)
    bandwidth = _bandwidth(max(x for _, x, _ in cfg.points))
    netem = probe(["netem"])["netem"]
    doc = new_result(NAME if cfg.ports == PORTS else WIDE_NAME, quick)
    doc["config"] = {"points": [list(p) for p in cfg.points], "ramp_s": cfg.ramp_s, "window_s": cfg.window_s,
                     "calls": CALLS, "clients": CLIENTS, "per_httperf": PER_HTTPERF, "ports": cfg.ports,
                     "uri": URI, "profile": PROFILE, "mode": "shape", "per": "port", "bandwidth": bandwidth,
                     "delay_stage": netem}
    link = LinkSpec(profile=PROFILE, mode="shape", per="port", no_delay=not netem, bandwidth=bandwidth)
    with _lab(link, doc, cfg.ports) as (lab, model, header):
        log = Path(lab.info["dir"]) / "nginx" / "access.log"
        burst_bytes = lab.info["link"]["summary"]["down"]["burst_bytes"]
        steps = Steps(NAME, len(cfg.points))
        for generator, x, floor in cfg.points:
            rto_min_ms = server_route(lab, floor)
            row = run_point(lab, model, generator, x, rto_min_ms, cfg, log, header)
            if generator == "httperf":  # the 2000 reading beside the window: sessions run whole, httperf's totals
                time.sleep(2 if quick else 5)
                row["totals"] = _second_reading(run_totals(lab, model, x, rto_min_ms, header, burst_bytes))
            doc["rows"].append(row)
            steps(f"{generator} x={x:,} (RTO floor {rto_min_ms} ms): "
                  f"{row['completed_per_s']:.1f} replies/s = {100 * row['ratio_to_model']:.1f}% "
                  f"of the link model's {row['model_ceiling']:.1f}, {100 * row['ratio_to_theoretical']:.1f}% of 0.36x; "
                  f"errors {row['errors']}; server retransmitted {100 * (row['retransmitted'] or 0):.1f}% of "
                  f"segments ({row['server_tcp']['TcpExtTCPTimeouts']} timeouts); "
                  f"machine {100 * row['cpu']['machine_busy']:.0f}% busy; probes: first byte after "
                  f"{1000 * row['probe']['first_byte_s'].get('p50', math.nan):.0f} ms (p50), the rest "
                  f"{row['probe']['rest_s'].get('p50', math.nan):.3f} s (model {row['probe']['rest_model_s']:.3f} s)"
                  + _second_text(row))
            if outdir:
                save(doc, outdir)
            time.sleep(2 if quick else 5)  # let the connections close
    return doc


def _second_reading(totals: dict) -> dict:
    """What a dial-up row keeps of its httperf-totals run (``run_totals``)."""
    keep = ("completed_per_s", "model_ceiling", "ratio_to_model", "ratio_to_theoretical", "session_s",
            "model_session_s", "errors", "sessions_total", "sessions_ok", "retransmitted", "server_tcp")
    return {k: totals.get(k) for k in keep}


def _second_text(row: dict) -> str:
    t = row.get("totals")
    if t:
        return (f"; read as in 2000 (httperf's totals, sessions whole): {t['completed_per_s']:.1f} replies/s = "
                f"{100 * t['ratio_to_model']:.1f}% of the model's {t['model_ceiling']:.1f}, sessions "
                f"{t['session_s']:.2f} s (model {t['model_session_s']:.2f} s), errors {t['errors']}")
    if row.get("whole_run_per_s") is not None:
        return f"; wrk's whole run: {row['whole_run_per_s']:.1f} replies/s"
    return ""


def _published_share(x: int) -> str:
    """The 2000 figure at ``x`` as a share of 0.36 x, as " (2000: N%)"; empty where there is none."""
    return f" (2000: {100 * PUBLISHED[x] / theoretical(x):.1f}%)" if x in PUBLISHED else ""


def measure_v03(quick: bool, *, outdir=None) -> dict:
    """v0.3's settings -- police mode, ``--burst 5``, Ethernet framing, no delay, as the
    2000 routers ran them -- read from httperf's totals, with today's server TCP and a 2000 one."""
    from ratelimit.lab.link import LinkSpec
    from ratelimit.service import V03_BURST
    xs = (40,) if quick else V03_X
    bandwidth = _bandwidth(max(xs))
    doc = new_result(f"{NAME}-v03", quick)
    doc["config"] = {"xs": list(xs), "calls": CALLS, "clients": CLIENTS, "ports": PORTS, "uri": URI,
                     "profile": None, "mode": "police", "per": "port", "burst": V03_BURST, "bandwidth": bandwidth,
                     "delay_stage": False, "window": "httperf totals"}
    link = LinkSpec(rate=str(MODEM_BPS), mode="police", per="port", burst=V03_BURST, bandwidth=bandwidth)
    with _lab(link, doc) as (lab, model, header):
        burst_bytes = lab.info["link"]["summary"]["down"]["burst_bytes"]
        steps = Steps(f"{NAME}-v03", len(xs) * len(V03_STACKS))
        for x in xs:
            for floor, stack in V03_STACKS:
                rto_min_ms = server_route(lab, floor, initcwnd=stack and stack["initcwnd"])
                cc = server_congestion_control(lab, stack["cc"] if stack else SERVER_CC)
                row = run_totals(lab, model, x, rto_min_ms, header, burst_bytes)
                row["server_tcp_start"] = f"{cc}, initial window {stack['initcwnd'] if stack else 10}"
                doc["rows"].append(row)
                steps(f"httperf x={x:,} ({row['server_tcp_start']}, RTO floor {rto_min_ms} ms): "
                      f"{row['completed_per_s']:.1f} replies/s (httperf's totals) = "
                      f"{100 * row['ratio_to_theoretical']:.1f}% of 0.36x{_published_share(x)}, "
                      f"{100 * row['ratio_to_model']:.1f}% "
                      f"of the model's {row['model_ceiling']:.1f}; sessions {row['session_s']:.2f} s (model "
                      f"{row['model_session_s']:.2f} s); errors {row['errors']}; server retransmitted "
                      f"{100 * (row['retransmitted'] or 0):.1f}% of segments "
                      f"({row['server_tcp']['TcpExtTCPTimeouts']} timeouts)")
                if outdir:
                    save(doc, outdir)
                time.sleep(2 if quick else 5)
    return doc


def _bandwidth(x: int) -> str:
    """The router's --bandwidth for x modems at once, with room (v0.3's 100 Mbit at least)."""
    return bandwidth_for(x * MODEM_BPS)


def bandwidth_for(line_bps: float) -> str:
    """The router's --bandwidth for links whose line rates sum to ``line_bps``, with a fifth
    more for room (v0.3's 100 Mbit at least)."""
    return f"{max(100, math.ceil(line_bps * 1.2 / 1e6))}mbit"


@contextlib.contextmanager
def _lab(link, doc: dict, ports: str = PORTS):
    """The four-client lab with nginx behind ``link``: (lab, its link model, the response header's bytes)."""
    with nginx_lab(f"bd{os.getpid()}", link, doc, clients=CLIENTS, ports=ports, part=NAME) as (lab, header):
        yield lab, lab.link_model(), header


@contextlib.contextmanager
def nginx_lab(name: str, link, doc: dict, *, clients: int, ports: str, part: str):
    """A lab of ``clients`` client namespaces with nginx behind ``link``, removed afterwards
    (also when the run is killed: ``sandbox``): (lab, the response header's bytes)."""
    from ratelimit.lab.core import Lab
    lab = Lab.up(name, clients=clients, link=link, server="nginx", ports=ports, say=lambda m: say(part, m))
    track_topology(lab)
    try:
        doc["config"]["server_congestion_control"] = server_congestion_control(lab)
        header = doc["config"]["header_bytes"] = _header_bytes(lab)
        yield lab, header
    finally:
        lab.down()
        untrack_topology(lab)


def main(args) -> int:
    from .results import RESULTS_DIR
    from .sandbox import host_has, in_vm, load_modules, run_vm_part
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        say(NAME, f"wrote {save(measure_v03(args.quick, outdir=outdir), outdir)}")
        return 0
    doc = measure(args.quick, clients=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if not (args.quick or args.clients):
        say(NAME, f"wrote {save(measure(False, outdir=outdir, cfg=wide_config()), outdir)}")
    if host_has("police"):
        say(NAME, f"wrote {save(measure_v03(args.quick, outdir=outdir), outdir)}")
    elif args.vm:
        rc = run_vm_part(NAME, ["--quick"] if args.quick else [], outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0

