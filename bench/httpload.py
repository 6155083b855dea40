"""The 2000 method's measurements, shared by the dial-up table (``bench/dialup.py``) and
the audience (``bench/audience.py``): persistent connections fetching one 10,000-byte file
``CALLS`` times, from httperf or wrk in the lab's client namespaces.

* **The window** (``run_window``): once the last load is gone (``quiet``) the load starts, and
  once the server holds every user's connection and the ramp is over, the replies the
  server's access log records in the window are counted per connection (``rate_in_window``);
  curl probes in the first client time calls in two parts (``probe_calls``,
  ``probe_times``); the load generators' and the server's CPU, and the machine's
  (``bench.cpu``), and the server's TCP are read at the window's ends, and how late a
  sleeping thread wakes over it (``procfs.WakeMeter``).
* **Whole sessions** (``run_sessions``): httperf's sessions run to their end, read from its
  own totals, as the 2000 figures were; the model's figure for that reading is
  ``totals_ceiling`` (``session_seconds`` for a policed link whose bucket starts full).

CPU: veth delivery runs in the sender's context, so the router's forwarding and shaping
show up as softirq time, charged to whichever process sent the packet.
"""

from __future__ import annotations

import datetime
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import httperf, procfs
from .common import BenchError, established, summarize, tcp_change, tcp_counters, wait_until

URI = "/10000.bin"
FILE_BYTES = 10_000
CALLS = 20  # per session, as in 2000
# the most a load may take to connect after its ramp (a saturated machine's users may never:
# the row counts what they did), and the last load to go (generous: they say it will not)
CONNECT_TIMEOUT_S = 60.0
QUIET_TIMEOUT_S = 120.0
# what each generator sends for a call (the request's time on the uplink counts)
REQUEST = {"httperf": "GET {uri} HTTP/1.1\r\nUser-Agent: httperf/0.9.0\r\nHost: {host}\r\n\r\n",
           "wrk": "GET {uri} HTTP/1.1\r\nHost: {host}:80\r\n\r\n"}


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


def connection_rates(done: list[Completion], start: float, end: float) -> list[float]:
    """Each connection's replies per second in [start, end]: (replies - 1) / (last - first) of
    its replies in the window, for a connection with two replies at least.  A count of replies
    in the window would depend on where the window cuts the calls: wrk starts its connections
    together, so their replies come in waves a call apart, and a 40 s window holds 13 or 14 of
    them (7% apart)."""
    by_conn: dict = {}
    for c in done:
        if start <= c.at <= end and c.port is not None:
            by_conn.setdefault((c.client, c.port), []).append(c.at)
    return [(len(t) - 1) / (t[-1] - t[0]) for t in by_conn.values() if len(t) >= 2 and t[-1] > t[0]]


def rate_in_window(done: list[Completion], start: float, end: float) -> tuple[float, int]:
    """(replies per second, connections counted) in [start, end]: the sum of ``connection_rates``."""
    rates = connection_rates(done, start, end)
    return sum(rates), len(rates)


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


def users_of(argv: list[str]) -> int:
    """The connections a load's command line keeps (``load_argv``'s: httperf's sessions, wrk's ``-c``)."""
    for a in argv:
        if a.startswith("--wsess="):
            return int(a.split("=", 1)[1].split(",")[0])
        if a.startswith("-c") and a[2:].isdigit():
            return int(a[2:])
    raise BenchError(f"{' '.join(argv[:3])} ...: how many connections it keeps is not on its command line")


def connections(lab, clients: set) -> list:
    """The server's established connections on port 80 from the addresses ``clients``."""
    return [peer for peer in established(lab.server.netns, 80) if peer[0] in clients]


def quiet(lab, clients: set, what: str) -> None:
    """Wait until the last load is gone: the server holds no connection from ``clients`` and
    no link toward the clients holds a backlog (a modem's queue takes seconds to drain)."""
    def backlogged() -> int:
        return sum(1 for r in lab.statistics()["links"] if r.get("backlog_bytes"))
    wait_until(lambda: not connections(lab, clients) and not backlogged(), QUIET_TIMEOUT_S,
               f"{what}: the last load's connections to close and its links to drain", every_s=0.5,
               detail=lambda: f"{len(connections(lab, clients))} connections, {backlogged()} links backlogged")


def run_window(lab, generator: str, loads: list[tuple[int, list[str]]], cfg, log: Path, *,
               duration_s: float, probes: int = 0, probe_n: int = 2, probe_timeout_s: float = 60) -> Window:
    """Start ``loads`` (client number, argv) at once; once the server holds every user's
    connection, wait out the ramp (``cfg.ramp_s`` from the start, and half of it at least from
    the last connection: the users' first calls), watch ``cfg.window_s`` (with ``probes`` curl
    probes of ``probe_n`` calls in client 1), stop the load and read the server's access log
    (``duration_s``: the load's own run, for its timeout).  A user that never connects (a
    saturated machine) is left to the row's counts after ``cfg.ramp_s`` + ``CONNECT_TIMEOUT_S``."""
    offset = log.stat().st_size if log.exists() else 0
    server_pids = _server_pids(lab)
    clients = {lab.client(i).address for i, _ in loads}
    users = sum(users_of(argv) for _, argv in loads)
    quiet(lab, clients, f"{generator} x={users}")  # the connections counted below are this load's
    cpu0 = procfs.ticks()
    t_start = time.monotonic()
    procs = [lab.client(i).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, argv in loads]
    try:
        wait_until(lambda: len(connections(lab, clients)) >= users, cfg.ramp_s + CONNECT_TIMEOUT_S,
                   f"{generator}: {users} connections", every_s=0.5)
    except BenchError:
        pass  # the row counts the connections that made their calls
    connected = time.monotonic()
    time.sleep(max(t_start + cfg.ramp_s - connected, cfg.ramp_s / 2))  # the users' first calls: the links' time
    tcp0 = tcp_counters(lab.server.netns)
    start, c0 = time.time(), _cpu_sample(procs, server_pids)
    probing = [probe_calls(lab, lab.url(URI), probe_n) for _ in range(probes)]
    with procfs.WakeMeter() as wake:
        time.sleep(cfg.window_s)  # the window
    end, c1 = time.time(), _cpu_sample(procs, server_pids)
    tcp1 = tcp_counters(lab.server.netns)
    probe = probe_times([p.communicate(timeout=probe_timeout_s)[0] for p in probing])
    outputs = stop_load(procs, generator, duration_s + 60)
    with open(log, "rb") as f:
        f.seek(offset)
        times = [c for c in nginx_completions(f.read().decode("utf-8", "replace"))
                 if not (c.client == lab.client(1).address and c.port in probe[2])]
    return Window(start, end, times, outputs, _cpu_share(c0, c1) | {"wake": wake.summary()},
                  {"machine_busy": procfs.shares(cpu0, c1[0])["machine"]["busy"],
                   "connect_s": round(connected - t_start, 2)},
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
    """(the CPUs' ticks, the load's CPU seconds, the server's, the load's waits for a CPU,
    each load and server process's CPU seconds)."""
    load, server = procfs.process_seconds(p.pid for p in procs), procfs.process_seconds(server_pids)
    return procfs.ticks(), sum(load.values()), sum(server.values()), procfs.waits(p.pid for p in procs), load, server


def _cpu_share(c0: tuple, c1: tuple) -> dict:
    """A row's CPU between two ``_cpu_sample`` s: the machine's busy share, the load
    generators' and the server's processes and softirq (in cores), the hypervisor's steal,
    each CPU's busy share, and how long a load generator waited for a CPU before each of its
    turns on one (mean, ms)."""
    s = procfs.shares(c0[0], c1[0])
    wall = s["window_s"] or 1.0
    return {"machine_busy": s["machine"]["busy"],
            "load_generators": (c1[1] - c0[1]) / wall,
            "server": (c1[2] - c0[2]) / wall,
            "softirq": s["machine"]["softirq"],
            "steal": s["machine"]["steal"],
            "per_cpu_busy": [c["busy"] for c in s["per_cpu"]],
            "per_cpu_softirq": [c["softirq"] for c in s["per_cpu"]],
            "load_each": _each_share(c0[4], c1[4], wall),
            "server_each": _each_share(c0[5], c1[5], wall),
            "load_wait_per_turn_ms": (c1[3][0] - c0[3][0]) / ((c1[3][1] - c0[3][1]) or 1) / 1e6,
            "window_s": s["window_s"]}


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


def response_header_bytes(lab) -> int:
    """The nginx response header for the file on a keep-alive connection."""
    r = lab.client(1).run(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_header}",
                           "-H", "Connection: keep-alive", lab.url(URI)])
    if r.returncode != 0:
        raise BenchError(f"curl through the lab failed: {r.stderr.strip()}")
    return int(r.stdout)


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
    end; ``BenchError`` if a client printed no totals.  Starts once the last load is gone
    (``quiet``): a session's time counts from its start."""
    quiet(lab, {lab.client(i).address for i, _ in loads}, "httperf's sessions")
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
    used = _cpu_share(c0, c1)
    del used["load_generators"]  # the processes end before the second sample
    return Sessions(outputs, reports, used, tcp_change(tcp0, tcp1))


def totals_argv(lab, sessions: int, calls: int, timeout_s: float) -> list[str]:
    """One client's httperf the 2000 way: ``sessions`` sessions started within the first second."""
    return httperf.session_argv(lab.server.address, 80, URI, sessions, calls, rate=sessions, timeout_s=timeout_s)
