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
at x = 200 as above and with sessions arriving all the time (``httperf-arrivals``).

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
from .common import (LINUX_RTO_MIN_MS, RFC_RTO_MIN_MS, SERVER_CC, TCP_COUNTERS, BenchError, MODEM_BPS, Steps, ratio,
                     say, server_congestion_control, server_route, summarize, tcp_counters)
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "dialup"
VM_WORK = True  # v0.3's settings (police mode) where the host lacks act_police
URI = "/10000.bin"
FILE_BYTES = 10_000
CALLS = 20  # per session, as in 2000
CLIENTS = 4  # client namespaces (the 2000 lab's four client machines)
PER_HTTPERF = 900  # sessions per httperf process: below FD_SETSIZE
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


def config(quick: bool, clients=None) -> Config:
    """httperf and wrk at each x with the RFC's 1 s RTO floor, wrk also at x = 10,000, and
    one wrk row with Linux's 200 ms floor to show what it costs."""
    if quick:
        xs = tuple(clients or (40,))
        # a 12 s window: with Linux's floor a connection's third call can come 8.5 s after its second
        return Config(tuple((g, x, RFC_RTO_MIN_MS) for g in ("httperf", "wrk") for x in xs) + (("wrk", xs[0], None),),
                      8.0, 12.0)
    xs = tuple(clients or (200, 1000, 2000, 3600))
    return Config(tuple(("httperf", x, RFC_RTO_MIN_MS) for x in xs)
                  + tuple(("wrk", x, RFC_RTO_MIN_MS) for x in (*xs, 10_000))
                  + (("wrk", xs[min(1, len(xs) - 1)], None),), 12.0, 40.0)


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


PROBES = 10  # probe connections per row (curl, in the first client namespace)
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
              session_s: float = 0.0) -> list[str]:
    """One client namespace's load: ``users`` persistent connections -- all started within
    half the ramp, or (``httperf-arrivals``) sessions arriving all the time at the rate
    that keeps ``users`` of them going (each lasting ``session_s``)."""
    if generator == "httperf-arrivals":
        rate = users / session_s
        return ["httperf", "--server", server, "--port", "80", "--uri", URI,
                f"--wsess={math.ceil(rate * duration_s)},{CALLS},0", "--burst-length", "1", "--rate", f"{rate:.3f}",
                "--timeout", f"{duration_s + 60:g}"]
    if generator == "httperf":
        if users > PER_HTTPERF:
            raise BenchError(f"httperf: {users} sessions in one process exceed {PER_HTTPERF} (select() limit)")
        return ["httperf", "--server", server, "--port", "80", "--uri", URI, f"--wsess={users},{CALLS},0",
                "--burst-length", "1", "--rate", f"{max(1.0, users / (ramp_s / 2)):g}",
                "--timeout", f"{duration_s + 60:g}"]
    return ["wrk", "-t1", f"-c{users}", f"-d{duration_s:.0f}s", "--timeout", "60s", f"http://{server}{URI}"]


# ---------------------------------------------------------------- CPU


def _proc_cpu_s(pids) -> float:
    """User + system seconds of these processes and their reaped children."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += sum(int(v) for v in fields[11:15])
        except (OSError, ValueError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _cpu_totals() -> tuple[float, float, float]:
    """(all CPU seconds, idle seconds, softirq seconds) since boot, over every CPU."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return sum(parts) / tick, (parts[3] + parts[4]) / tick, parts[6] / tick


# ---------------------------------------------------------------- one row


def run_point(lab, model, generator: str, x: int, rto_min_ms: int, cfg: Config, log: Path,
              header_bytes: int) -> dict:
    """One (generator, x): start the load in every client namespace, count completions at
    the server over the window, stop the load, read each generator's own totals."""
    users = shares(x)
    session_s = CALLS * model.call_seconds(FILE_BYTES)
    ramp = cfg.ramp_s
    if generator == "httperf-arrivals":  # steady once the first sessions end
        ramp = max(ramp, session_s + 5)
    duration = ramp + cfg.window_s + 5
    if generator == "httperf":  # sessions end after 20 calls: the window must fit in them
        duration = max(duration, session_s + cfg.ramp_s)
    offset = log.stat().st_size if log.exists() else 0
    server_pids = _server_pids(lab)
    cpu0 = _cpu_totals()
    procs = [lab.client(i + 1).popen(load_argv(generator, lab.server.address, n, duration, cfg.ramp_s, session_s),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, n in enumerate(users) if n]
    time.sleep(ramp)
    tcp0 = tcp_counters(lab.server.netns)
    start, c0 = time.time(), (_cpu_totals(), _proc_cpu_s(p.pid for p in procs), _proc_cpu_s(server_pids))
    probe_n = max(2, int(cfg.window_s / session_s * CALLS) - 1)
    probes = [probe_calls(lab, lab.url(URI), probe_n) for _ in range(PROBES)]
    time.sleep(cfg.window_s)
    end, c1 = time.time(), (_cpu_totals(), _proc_cpu_s(p.pid for p in procs), _proc_cpu_s(server_pids))
    tcp1 = tcp_counters(lab.server.netns)
    first, rest, probe_ports = probe_times([p.communicate(timeout=probe_n * session_s / CALLS * 3 + 60)[0]
                                            for p in probes])
    outputs = []
    for p in procs:
        if generator.startswith("httperf"):  # it prints its report when interrupted
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        try:
            out, _ = p.communicate(timeout=duration + 60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outputs.append(out)
    with open(log, "rb") as f:
        f.seek(offset)
        times = [c for c in nginx_completions(f.read().decode("utf-8", "replace"))
                 if not (c.client == lab.client(1).address and c.port in probe_ports)]
    if generator == "httperf-arrivals":  # connections come and go: their replies in the window
        counted = sum(1 for c in times if start <= c.at <= end)
        rate = counted / (end - start)
    else:
        rate, counted = rate_in_window(times, start, end)
    if generator != "httperf-arrivals" and counted < x * 0.95:
        raise BenchError(f"{generator} x={x}: only {counted} connections finished two calls in the window "
                         "(is the server's access log in the lab's format, with $msec and $remote_port?)")
    wall = (c1[0][0] - c0[0][0]) or 1.0
    request = len(REQUEST[generator.split("-")[0]].format(uri=URI, host=lab.server.address))
    call_s = model.call_seconds(FILE_BYTES, header=header_bytes, request=request)
    ceiling = x / call_s
    row = {"generator": generator, "x": x, "users_per_client": users, "completed_per_s": rate,
           "connections_counted": counted, "window_s": end - start, "theoretical": theoretical(x),
           "ratio_to_theoretical": ratio(rate, theoretical(x)),
           "model_call_s": call_s, "model_ceiling": ceiling, "ratio_to_model": ratio(rate, ceiling),
           "request_bytes": request, "server_rto_min_ms": rto_min_ms,
           "published": PUBLISHED.get(x) if generator.startswith("httperf") else None,
           "cpu": {"machine_busy": 1 - (c1[0][1] - c0[0][1]) / wall,
                   "load_generators": (c1[1] - c0[1]) / (c1[0][0] - c0[0][0]) * (os.cpu_count() or 1),
                   "server": (c1[2] - c0[2]) / (c1[0][0] - c0[0][0]) * (os.cpu_count() or 1),
                   "softirq": (c1[0][2] - c0[0][2]) / wall,
                   "window_s": c1[0][0] - c0[0][0]},
           "cpu_run": {"machine_busy": 1 - (c1[0][1] - cpu0[1]) / ((c1[0][0] - cpu0[0]) or 1)},
           "server_tcp": {k: tcp1.get(k, 0) - tcp0.get(k, 0) for k in TCP_COUNTERS},
           "probe": {"calls_per_connection": probe_n, "first_byte_s": summarize(first), "rest_s": summarize(rest),
                     "rest_model_s": model.transfer_seconds(header_bytes + FILE_BYTES)
                     - (model.down_delay_us / 1e6 if model.delay_stage else 0.0)}}
    row["retransmitted"] = ratio(row["server_tcp"]["TcpRetransSegs"], row["server_tcp"]["TcpOutSegs"])
    row.update(_generator_totals(generator, outputs, x))
    return row


def _generator_totals(generator: str, outputs: list[str], x: int) -> dict:
    """What the load generators say: errors and sessions lost (httperf), errors (wrk)."""
    if generator.startswith("httperf"):
        rep = httperf.combine([httperf.parse(o) for o in outputs])
        errors = rep.get("errors", {}).get("total")
        return {"errors": errors, "sessions_total": rep.get("sessions_total"),
                "sessions_ok": rep.get("sessions_ok"), "generator_report": rep}
    errors = 0
    for o in outputs:
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", o)
        if m:
            errors += sum(int(v) for v in m.groups())
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", o)
        if m:
            errors += int(m.group(1))
    return {"errors": errors, "generator_report": {"tail": [o[-400:] for o in outputs]}}


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
V03_SERVER = {"cc": "reno", "initcwnd": 2}  # how a 2000 server's TCP started (RFC 2581's initial window)


def v03_config(quick: bool) -> Config:
    """v0.3's settings in the VM: httperf at x = 200 as the table runs it (``measure`` adds
    the rows with sessions arriving all the time)."""
    xs = (40,) if quick else V03_X
    return Config(tuple(("httperf", x, RFC_RTO_MIN_MS) for x in xs), 8.0 if quick else 12.0, 8.0 if quick else 40.0)


def measure(quick: bool, *, clients=None, outdir=None, v03: bool = False) -> dict:
    """The table (``v03``: with v0.3's settings -- police mode, ``--burst 5``, Ethernet
    framing, no delay, as the 2000 routers ran it)."""
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.core import Lab
    from ratelimit.lab.link import LinkSpec
    cfg = v03_config(quick) if v03 else config(quick, clients)
    biggest = max(x for _, x, _ in cfg.points)
    bandwidth = f"{max(100, math.ceil(biggest * MODEM_BPS * 1.2 / 1e6))}mbit"  # every modem at once, and room
    netem = probe(["netem"])["netem"]
    doc = new_result(f"{NAME}-v03" if v03 else NAME, quick)
    doc["config"] = {"points": [list(p) for p in cfg.points], "ramp_s": cfg.ramp_s, "window_s": cfg.window_s,
                     "calls": CALLS, "clients": CLIENTS, "per_httperf": PER_HTTPERF, "ports": PORTS,
                     "uri": URI, "profile": None if v03 else PROFILE, "mode": "police" if v03 else "shape",
                     "per": "port", "bandwidth": bandwidth, "delay_stage": netem and not v03, "v03": v03}
    if v03:
        link = LinkSpec(rate="28800", mode="police", per="port", burst="5", bandwidth=bandwidth)
    else:
        link = LinkSpec(profile=PROFILE, mode="shape", per="port", no_delay=not netem, bandwidth=bandwidth)
    lab = Lab.up(f"bd{os.getpid()}", clients=CLIENTS, link=link, server="nginx", ports=PORTS,
                 say=lambda m: say(NAME, m))
    track_topology(lab)
    try:
        doc["config"]["server_congestion_control"] = server_congestion_control(lab)
        header = doc["config"]["header_bytes"] = _header_bytes(lab)
        model = lab.link_model()
        log = Path(lab.info["dir"]) / "nginx" / "access.log"
        points = [(g, x, floor, None) for g, x, floor in cfg.points]
        if v03:  # sessions arriving all the time, with today's server and with one whose TCP
            # starts as 2000's did (Reno, two segments, Linux's floor)
            points += [("httperf-arrivals", cfg.points[0][1], RFC_RTO_MIN_MS, None),
                       ("httperf-arrivals", cfg.points[0][1], None, V03_SERVER)]
        steps = Steps(NAME, len(points))
        for generator, x, floor, stack in points:
            rto_min_ms = server_route(lab, floor, initcwnd=stack and stack["initcwnd"])
            cc = server_congestion_control(lab, stack["cc"] if stack else SERVER_CC)
            row = run_point(lab, model, generator, x, rto_min_ms, cfg, log, header)
            row["server_tcp_start"] = f"{cc}, initial window {stack['initcwnd'] if stack else 10}"
            doc["rows"].append(row)
            steps(f"{generator} x={x:,} (RTO floor {rto_min_ms} ms; {row['server_tcp_start']}): "
                  f"{row['completed_per_s']:.1f} replies/s = {100 * row['ratio_to_model']:.1f}% "
                  f"of the link model's {row['model_ceiling']:.1f}, {100 * row['ratio_to_theoretical']:.1f}% of 0.36x; "
                  f"errors {row['errors']}; server retransmitted {100 * (row['retransmitted'] or 0):.1f}% of "
                  f"segments ({row['server_tcp']['TcpExtTCPTimeouts']} timeouts); "
                  f"machine {100 * row['cpu']['machine_busy']:.0f}% busy; probes: first byte after "
                  f"{1000 * row['probe']['first_byte_s'].get('p50', math.nan):.0f} ms (p50), the rest "
                  f"{row['probe']['rest_s'].get('p50', math.nan):.3f} s (model {row['probe']['rest_model_s']:.3f} s)")
            if outdir:
                save(doc, outdir)
            time.sleep(2 if quick else 5)  # let the connections close
    finally:
        lab.down()
        untrack_topology(lab)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    from .sandbox import host_has, in_vm, load_modules, run_vm_part
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        say(NAME, f"wrote {save(measure(args.quick, outdir=outdir, v03=True), outdir)}")
        return 0
    doc = measure(args.quick, clients=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if host_has("police"):
        say(NAME, f"wrote {save(measure(args.quick, outdir=outdir, v03=True), outdir)}")
    elif args.vm:
        rc = run_vm_part(NAME, ["--quick"] if args.quick else [], outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0

