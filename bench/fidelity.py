"""Benchmark 4: link fidelity -- what an emulated link really delivers.

Goodput.  A namespace lab (``lab_core.Lab``: clients, router, nginx server,
client ephemeral ports 10000-10599 all limited, 28,800 bit/s each way per
(client, port), burst 1 packet) and K concurrent downloads of the 1,000,000-
byte file, at most 500 per client namespace (``downloader``).  Each connection
is its own emulated link.  Bytes received per connection are counted over a
window after a warm-up; goodput / configured (28,800 bit/s) is summarised over
the links: mean, p5, p50, p95.  The router counts whole frames (Ethernet + IP
+ TCP headers), so the most a full-size TCP segment can carry is 1,448 payload
bytes per 1,514 counted: 0.956 of the configured rate.  Halfway through the
window the router's statistics (``service.statistics``) give each link's
backlog, i.e. how long a packet queues on it, and the server's TCP counters
over the window (``nstat``) how much it retransmitted.  The downloaders keep
the kernel's default receive buffer (``--rcvbuf`` in ``downloader`` can set a
small one).

Shape mode runs on the host; police mode (drops instead of queueing) needs
act_police and runs in the full-kernel VM, with fewer links (software
emulation).  In the VM also: the latency classes (netem) -- for each profile,
the median TCP handshake time from a limited client port, measured / configured
round trip.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

from .common import BenchError, MODEM_BPS, Steps, ratio, say, summarize
from .sandbox import host_has, track_topology, untrack_topology
from .results import new_result, save

NAME = "fidelity"
VM_WORK = True
PER_CLIENT = 500
PORTS = f"10000-{10000 + PER_CLIENT + 99}"  # 600 ports per client: every link its own, some to spare
PATH = "/1000000.bin"
RCVBUF = 0  # the client kernel's default (autotuned) receive buffer
TCP_COUNTERS = ("TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes")
IDEAL = 1448 / 1514  # payload per counted byte of a full-size segment with timestamps
LATENCY_PROFILES = ("lan-0ms", "regional-50ms", "national-100ms", "international-200ms",
                    "intercontinental-400ms", "modem-28k8")


@dataclass(frozen=True)
class Config:
    mode: str
    links: tuple[int, ...]
    warmup_s: float
    window_s: float
    latency: tuple[str, ...]
    rtt_count: int


def config(quick: bool, place: str, links=None) -> Config:
    if place == "vm":
        return Config("police", tuple(links or ((20,) if quick else (100,))), 6 if quick else 15,
                      10 if quick else 30, LATENCY_PROFILES[:3] if quick else LATENCY_PROFILES,
                      3 if quick else 5)
    mode = "police" if host_has("police") else "shape"
    return Config(mode, tuple(links or ((50,) if quick else (100, 1000, 4000, 10000))), 6 if quick else 15,
                  10 if quick else 30, (), 0)


def _cpu_times() -> tuple[float, float]:
    with open("/proc/stat") as f:
        parts = [float(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts), idle


def _lab(name: str, clients: int, mode: str, rate: str | None = str(MODEM_BPS), profile=None):
    from ratelimit.lab.core import Lab
    from ratelimit.lab.link import LinkSpec
    link = LinkSpec(profile=profile, mode=mode, burst=1, rate=rate)
    lab = Lab.up(name, clients=clients, link=link, server="nginx", ports=PORTS,
                 say=lambda m: say(NAME, m))
    track_topology(lab)
    for c in lab.clients:  # a port in TIME_WAIT may be reused after 1 s (the next K)
        c.run(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"], check=False)
    return lab


def downloads(lab, k: int, warmup: float, window: float, rate_bps: int) -> dict:
    """K concurrent downloads through ``lab``; per-link goodput / configured."""
    import sys
    nclients = min(len(lab.clients), math.ceil(k / PER_CLIENT))
    shares = [k // nclients + (1 if i < k % nclients else 0) for i in range(nclients)]
    procs = []
    for i, share in enumerate(shares):
        argv = [sys.executable, "-m", "bench.downloader", "--server", lab.server.address, "--path", PATH,
                "--conns", str(share), "--warmup", str(warmup), "--window", str(window),
                "--rcvbuf", str(RCVBUF), "--spread", str(min(5.0, max(1.0, share / 200)))]
        env = {**os.environ, "PYTHONPATH": str(_repo())}
        procs.append(lab.client(i + 1).popen(argv, stdout=-1, stderr=-1, text=True, env=env))
    time.sleep(warmup)
    total0, idle0 = _cpu_times()
    tcp0 = tcp_counters(lab.server.netns)
    time.sleep(window / 2)
    backlog = _backlogs(lab, rate_bps)
    time.sleep(max(0.0, window / 2 - 1))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=window + 120)
        except Exception:
            p.kill()
            raise
        if p.returncode != 0:
            raise BenchError(f"downloader exited {p.returncode}: {' '.join(err.split())[-300:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    total1, idle1 = _cpu_times()
    tcp1 = tcp_counters(lab.server.netns)
    tcp = {k: tcp1.get(k, 0) - tcp0.get(k, 0) for k in TCP_COUNTERS}
    cpu_busy = 1 - (idle1 - idle0) / (total1 - total0) if total1 > total0 else None
    links = [(port, nbytes * 8 / o["window_s"] / rate_bps) for o in outs for port, nbytes in o["links"]]
    ratios = [r for _, r in links]
    failed = sum(o["failed"] for o in outs)
    return {"links": k, "clients": nclients, "measured_links": len(ratios), "failed": failed,
            "errors": sorted({e for o in outs for e in o["errors"]})[:5],
            "finished_early": sum(o["finished"] for o in outs),
            "goodput_ratio": summarize(ratios), "aggregate_ratio": sum(ratios) / k if k else None,
            "ideal_ratio": IDEAL, "window_s": window, "warmup_s": warmup, "cpu_busy": cpu_busy,
            "backlog": backlog, "server_tcp": tcp,
            "retransmitted": ratio(tcp.get("TcpRetransSegs"), tcp.get("TcpOutSegs")),
            "ratios": [round(r, 4) for r in ratios]}


def tcp_counters(netns: str) -> dict:
    """The server's TCP counters (``nstat -az``): segments sent, retransmitted, timeouts."""
    from .common import run
    r = run(["ip", "netns", "exec", netns, "nstat", "-az", *TCP_COUNTERS], check=False)
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1].isdigit():
            out[f[0]] = int(f[1])
    return out


def _backlogs(lab, rate_bps: int) -> dict:
    """Per-link backlog toward the clients (dest), as bytes and seconds of queue."""
    try:
        stats = lab.statistics()
    except Exception as e:  # noqa: BLE001 - statistics are a bonus; say why they are missing
        return {"error": str(e)}
    rows = [r for r in stats["links"] if r["direction"] == "dest" and r.get("bytes")]
    b = [r.get("backlog_bytes") or 0 for r in rows]
    drops = sum(r.get("drops") or 0 for r in rows)
    s = summarize(b)
    return {"active_links": len(rows), "backlog_bytes": s, "drops": drops,
            "queue_delay_s_p50": (s.get("p50", 0) * 8 / rate_bps) if rows else None,
            "queue_delay_s_p95": (s.get("p95", 0) * 8 / rate_bps) if rows else None}


def _repo():
    from .common import REPO
    return REPO


def latency(lab, profiles_: tuple[str, ...], count: int, mode: str, steps) -> list[dict]:
    """Measured / configured round trip per latency profile (median TCP handshake)."""
    from ratelimit import profiles
    from ratelimit.lab.link import LinkSpec
    rows = []
    for name in profiles_:
        prof = profiles.load(name)
        configured = (prof.down.delay_us + prof.up.delay_us) / 1e6
        lab.apply(LinkSpec(profile=name, mode=mode, burst=1))
        times = sorted(lab.download("/index.html").connect_s for _ in range(count))
        measured = times[len(times) // 2]
        rows.append({"profile": name, "configured_rtt_s": configured, "measured_rtt_s": measured,
                     "samples_s": times, "ratio": ratio(measured, configured),
                     "excess_ms": (measured - configured) * 1000})
        steps(f"latency {name}: handshake {measured * 1000:.1f} ms, configured RTT {configured * 1000:.0f} ms")
    return rows


def measure(quick: bool, place: str, *, links=None, outdir=None) -> dict:
    cfg = config(quick, place, links)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "rate_bps": MODEM_BPS, "file": PATH, "rcvbuf": RCVBUF,
                     "per_client": PER_CLIENT, "ports": PORTS, "ideal_ratio": IDEAL}
    steps = Steps(NAME, len(cfg.links) + len(cfg.latency))
    clients = max(1, math.ceil(max(cfg.links) / PER_CLIENT))
    name = f"bf{os.getpid()}"
    lab = _lab(name, clients, cfg.mode)
    try:
        for k in cfg.links:
            row = {"mode": cfg.mode, **downloads(lab, k, cfg.warmup_s, cfg.window_s, MODEM_BPS)}
            doc["rows"].append(row)
            g = row["goodput_ratio"]
            steps(f"{cfg.mode} {k:,} links: goodput/configured mean {g.get('mean', 0):.3f}, "
                  f"p5 {g.get('p5', 0):.3f}, p95 {g.get('p95', 0):.3f} "
                  f"({row['failed']} failed, CPU {100 * (row['cpu_busy'] or 0):.0f}% busy)")
            if outdir:
                save(doc, outdir)
            time.sleep(2)  # let closed connections drain
        if cfg.latency:
            doc["latency"] = latency(lab, cfg.latency, cfg.rtt_count, cfg.mode, steps)
    finally:
        lab.down()
        untrack_topology(lab)
    if place == "vm":
        doc["notes"].append("measured in the full-kernel VM under software emulation (TCG)")
    return doc


def main(args) -> int:
    from .sandbox import in_vm, load_modules, run_vm_part
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        save(measure(args.quick, "vm", links=args.clients, outdir=outdir), outdir)
        return 0
    doc = measure(args.quick, "host", links=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if args.vm and doc["config"]["mode"] != "police":
        rc = run_vm_part(NAME, ["--quick"] if args.quick else [], outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0
