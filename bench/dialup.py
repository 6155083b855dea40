"""Benchmark 5: the dial-up table of the 2000 experiments, in the namespace lab.

x simultaneous clients, each fetching the 10,000-byte file again and again,
every fetch a new connection through its own 28,800 bit/s link (the router
limits every client port, 10000-12999, each way: shape mode on the host).
The load is httperf in closed-loop sessions (``httperf.session_argv``): x
sessions over ceil(x / 900) client namespaces, one httperf each (select()
caps a process near 1,024 descriptors), all sessions started within about two
seconds.  httperf polls its descriptors in a busy loop, so every process costs
CPU whatever its load: as few as select() allows (x = 3,600: four, as the
four client machines of 2000).  After a ramp, completed fetches are counted on the server side over
a fixed window -- nginx's access log (status 200, 10,000 bytes), or the
prefork server's own log -- so the rate does not depend on how httperf ends.

Servers: the lab's nginx (event-driven, like the 2000 "event-driven" column)
and ``prefork``, a process-per-connection server capped at 256 workers that
holds a worker until its client has the whole reply (Apache 1.3's lingering
close), like the "process-per-connection" column.

Theory: a fetch needs at least 10,000 x 8 / 28,800 = 2.78 s, so x clients
complete at most 0.36 x fetches per second (the published formula).  The
lab's links pass their first 3,600 bytes at once (burst = 1 packet = 1 s at
the rate; ratelimit cannot go below rate/8 bytes), so a fetch whose port has
idled for a second takes about 2.0 s (``measure.expected_seconds``) and the
ceiling here is about x / 2.0 s.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import httperf
from .common import BenchError, MODEM_BPS, Steps, ratio, say
from .sandbox import host_has, track_topology, untrack_topology
from .results import new_result, save

NAME = "dialup"
VM_WORK = False
URI = "/10000.bin"
FILE_BYTES = 10_000
PER_CLIENT = 900  # sessions per httperf process: below FD_SETSIZE, and few spinning processes
# httperf closes each connection itself once the reply is in, so every fetch
# leaves its client port in TIME_WAIT, reusable after 1 s (tcp_tw_reuse=1);
# 900 sessions fetching every 2 s need about 900 + 450 x 2 ports: give 3,000
PORTS = "10000-12999"
PREFORK_PORT = 8080
# x -> (event-driven, process-per-connection) completed connections/s, measured in 2000 (MISSION.md)
PUBLISHED = {200: (69, 37), 1000: (349, 60), 2000: (697, 66), 3600: (1239, 55)}
THEORY_FACTOR = MODEM_BPS / (FILE_BYTES * 8)  # 0.36 completions/s per client


@dataclass(frozen=True)
class Config:
    clients: tuple[int, ...]
    ramp_s: float
    window_s: float
    workers: int
    servers: tuple[str, ...] = ("nginx", "prefork")


def config(quick: bool, clients=None) -> Config:
    if quick:
        return Config(tuple(clients or (200,)), 6.0, 10.0, 64)
    return Config(tuple(clients or (200, 1000, 2000, 3600)), 12.0, 60.0, 256)


def theoretical(x: int) -> float:
    """The published ceiling: 0.36 x completed fetches per second."""
    return x * THEORY_FACTOR


def link_ceiling(x: int, burst_pkts: int = 1) -> float:
    """The ceiling on these links (first burst bytes pass at once)."""
    from ratelimit.lab.measure import expected_seconds
    return x / expected_seconds(FILE_BYTES, MODEM_BPS, burst_pkts)


_NGINX_TIME = re.compile(r'\[(\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "[^"]*" (\d{3}) (\d+)')


def nginx_completions(text: str) -> list[float]:
    """Times (epoch s) of complete 10,000-byte 200 replies in an nginx access log."""
    out = []
    for m in _NGINX_TIME.finditer(text):
        if m.group(2) == "200" and int(m.group(3)) == FILE_BYTES:
            out.append(datetime.datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S %z").timestamp())
    return out


def prefork_completions(text: str) -> list[float]:
    """Times of 200 replies carrying the whole file in the prefork server's log."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] == "200" and int(f[2]) >= FILE_BYTES:
            out.append(float(f[0]))
    return out


def rate_in_window(times: list[float], start: float, end: float, resolution_s: float = 1.0) -> tuple[float, float]:
    """(completions per second, seconds counted) within [start, end], on whole
    ``resolution_s`` boundaries so that 1-second log stamps count fairly."""
    lo = math.ceil(start / resolution_s) * resolution_s
    hi = math.floor(end / resolution_s) * resolution_s
    if hi <= lo:
        return 0.0, 0.0
    n = sum(1 for t in times if lo <= t < hi)
    return n / (hi - lo), hi - lo


def _cpu() -> tuple[float, float]:
    with open("/proc/stat") as f:
        parts = [float(x) for x in f.readline().split()[1:]]
    return sum(parts), parts[3] + (parts[4] if len(parts) > 4 else 0)


def _start_prefork(lab, workers: int, log: Path) -> subprocess.Popen:
    log.write_text("")
    from .common import REPO
    p = lab.server.popen([sys.executable, "-m", "bench.prefork", "--bind", lab.server.address,
                          "--port", str(PREFORK_PORT), "--workers", str(workers), "--log", str(log)],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise BenchError(f"prefork server exited {p.returncode}: {p.stderr.read()[-300:]}")
        try:
            s = lab.topo.socket("server")
            s.settimeout(1)
            s.connect((lab.server.address, PREFORK_PORT))
            s.close()
            time.sleep(0.5)
            log.write_text("")  # forget the probe
            return p
        except OSError:
            time.sleep(0.2)
    p.terminate()
    raise BenchError("prefork server did not start listening within 30 s")


def run_point(lab, server: str, x: int, cfg: Config, log: Path) -> dict:
    """One x: start the httperfs, count completions over the window, stop them."""
    nclients = math.ceil(x / PER_CLIENT)
    if nclients > len(lab.clients):
        raise BenchError(f"{x} clients need {nclients} client namespaces; the lab has {len(lab.clients)}")
    shares = [x // nclients + (1 if i < x % nclients else 0) for i in range(nclients)]
    calls = math.ceil((cfg.ramp_s + cfg.window_s + 60) / 1.9)
    port = 80 if server == "nginx" else PREFORK_PORT
    offset = log.stat().st_size if log.exists() else 0
    procs = []
    for i, share in enumerate(shares):
        argv = httperf.session_argv(lab.server.address, port, URI, share, calls, rate=max(1.0, share / 2),
                                    timeout_s=cfg.ramp_s + cfg.window_s + 120)
        procs.append(lab.client(i + 1).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    time.sleep(cfg.ramp_s)
    start = time.time()
    c0 = _cpu()
    time.sleep(cfg.window_s)
    end = time.time()
    c1 = _cpu()
    for p in procs:  # httperf prints its report when interrupted
        try:
            p.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
    reports, raw = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        raw.append(out[-3000:])
        reports.append(httperf.parse(out))
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    times = nginx_completions(text) if server == "nginx" else prefork_completions(text)
    rate, counted = rate_in_window(times, start, end, 1.0 if server == "nginx" else 0.001)
    busy = 1 - (c1[1] - c0[1]) / (c1[0] - c0[0]) if c1[0] > c0[0] else None
    pub = PUBLISHED.get(x)
    combined = httperf.combine(reports)
    return {"server": server, "x": x, "clients": nclients, "sessions_per_client": shares, "calls": calls,
            "completed_per_s": rate, "counted_s": counted, "completions": len(times),
            "theoretical": theoretical(x), "link_ceiling": link_ceiling(x),
            "ratio_to_theoretical": ratio(rate, theoretical(x)),
            "published_event": pub[0] if pub else None, "published_process": pub[1] if pub else None,
            "cpu_busy": busy, "httperf": combined, "httperf_tail": raw[0][-1500:] if raw else "",
            "workers": cfg.workers if server == "prefork" else None}


def measure(quick: bool, *, clients=None, outdir=None) -> dict:
    cfg = config(quick, clients)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "per_client": PER_CLIENT, "ports": PORTS, "uri": URI,
                     "rate_bps": MODEM_BPS, "burst_pkts": 1}
    from ratelimit.lab.core import Lab
    from ratelimit.lab.link import LinkSpec
    mode = "police" if host_has("police") else "shape"
    doc["config"]["mode"] = mode
    nclients = max(1, math.ceil(max(cfg.clients) / PER_CLIENT))
    steps = Steps(NAME, len(cfg.servers) * len(cfg.clients))
    lab = Lab.up(f"bd{os.getpid()}", clients=nclients, link=LinkSpec(rate=str(MODEM_BPS), mode=mode, burst=1),
                 server="nginx", ports=PORTS, say=lambda m: say(NAME, m))
    track_topology(lab)
    try:
        for c in lab.clients:
            c.run(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"], check=False)
        for server in cfg.servers:
            prefork = None
            if server == "nginx":
                log = Path(lab.info["dir"]) / "nginx" / "access.log"
            else:
                log = Path(lab.info["dir"]) / "prefork.log"
                prefork = _start_prefork(lab, cfg.workers, log)
            try:
                for x in cfg.clients:
                    row = run_point(lab, server, x, cfg, log)
                    doc["rows"].append(row)
                    h = row["httperf"]
                    steps(f"{server} x={x:,}: {row['completed_per_s']:.1f} completed/s (theory 0.36x = "
                          f"{row['theoretical']:.0f}; published {row['published_event'] if server == 'nginx' else row['published_process']}); "
                          f"httperf errors {h.get('errors', {}).get('total', '?')}, CPU {100 * (row['cpu_busy'] or 0):.0f}% busy")
                    if outdir:
                        save(doc, outdir)
                    time.sleep(2 if quick else 5)  # let interrupted connections drain
            finally:
                if prefork is not None:
                    prefork.terminate()
                    try:
                        prefork.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        prefork.kill()
    finally:
        lab.down()
        untrack_topology(lab)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, clients=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
