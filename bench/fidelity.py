"""Benchmark 4: link fidelity -- what an emulated link really delivers.

A namespace lab (``ratelimit.lab.core.Lab``: clients, router, nginx server,
client ephemeral ports 10000-10599 all limited) with the ``modem-28k8``
profile, a link per (client, port), and K concurrent downloads of the
1,000,000-byte file, at most 500 per client namespace (``downloader``),
measured over a window after a warm-up that starts once the server holds every
download's connection (a row that cannot read one is a ``BenchError``, not a 0):

* link: the frame bytes each busy link sent (the router's class counters,
  which meter PPP frames through the size table) over the rate the frames get
  (93.3% of 28,800 bit/s) -- what the emulated link delivers;
* goodput: the full segments each connection had delivered (the server's
  ``delivered`` count: acknowledged cumulatively or selectively, each once, so a
  byte counts when it reaches the client, in order or not) over the link
  model's capacity for a bulk TCP flow (1,460 payload bytes per 1,468-byte
  frame at that rate) -- what TCP makes of the link; the server's TCP counters
  (``nstat``) say how much of the difference it spent on retransmissions;
* queue: each link's backlog halfway through the window, as seconds at the
  frames' rate, against the profile's queue.

Shape mode runs on the host; police mode (drops instead of queueing) needs
act_police and runs in the full-kernel VM, with fewer links (software
emulation).  In the VM also: the latency classes (netem) -- for each profile,
the fastest of five TCP handshakes from a limited client port (the emulated delay
is fixed; everything else only adds to it), measured / configured round trip;
beside it, a second method without the handshake's process wakeups: the fastest
one-way delays of small datagrams each way, read at the kernel's receive timestamp.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

from . import procfs
from .common import (MODEM_BPS, BenchError, congestion_control, delivered, established, ratio, say,
                     server_congestion_control, Steps, summarize, tcp_change, tcp_counters, wait_until)
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "fidelity"
VM_WORK = True
PER_CLIENT = 500
PORTS = f"10000-{10000 + PER_CLIENT + 99}"  # 600 ports per client: every link its own, some to spare
PATH = "/1000000.bin"
# The clients: the link model's (a 1990s stack: Windows 95/98 and NT advertised an 8,192-byte
# receive window, dslreports.com/tweaks/TweakMatrix; no timestamps) and today's (Linux's
# autotuned receive buffer, which lets TCP fill a modem's queue and lose packets).
CLIENTS = {"1990s": 8192, "today": 0}  # kind -> SO_RCVBUF bytes (0: the kernel's default)
# Today's clients lose packets: bytes held out of order at the window's start count when the
# hole fills, so their window starts after the first loss recoveries (a longer warm-up).
WARMUP_FACTOR = {"1990s": 1, "today": 4}
BANDWIDTH = "1gbit"
PROFILE = "modem-28k8"
LATENCY_PROFILES = ("lan-0ms", "regional-50ms", "national-100ms", "international-200ms",
                    "intercontinental-400ms", "modem-28k8")
PROBES = 10  # datagrams each way per latency class
# the most a row waits for every download to connect (a download is a Python process: under
# software emulation one took more than the old fixed warm-up, 10 s, to connect), and for
# the last row's connections to close; generous: they say when it will not happen
CONNECT_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Config:
    mode: str
    links: tuple[int, ...]
    warmup_s: float
    window_s: float
    latency: tuple[str, ...]
    rtt_count: int


def config(quick: bool, place: str, links=None) -> Config:
    if place == "vm":  # police mode needs act_police; few links: software emulation
        # a full window even when quick: a link's bucket can add its burst to any window
        # (4 packets: 18% of a 10 s window at 28.8k, 6% of 30 s)
        return Config("police", tuple(links or ((20,) if quick else (100,))), 10 if quick else 20,
                      30, LATENCY_PROFILES[:3] if quick else LATENCY_PROFILES, 5)
    return Config("shape", tuple(links or ((50,) if quick else (100, 1000, 4000))), 10 if quick else 20,
                  10 if quick else 30, (), 0)


def _lab(name: str, clients: int, mode: str):
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.core import Lab
    from ratelimit.lab.link import LinkSpec
    # --bandwidth well above every link at once (4,000 modems carry about 130 Mbit/s of frames):
    # the pool must not be what limits a link here
    link = LinkSpec(profile=PROFILE, mode=mode, per="port", no_delay=not probe(["netem"])["netem"],
                    bandwidth=BANDWIDTH)
    lab = Lab.up(name, clients=clients, link=link, server="nginx", ports=PORTS,
                 say=lambda m: say(NAME, m))
    track_topology(lab)
    server_congestion_control(lab)
    for c in lab.clients:  # a port in TIME_WAIT may be reused after 1 s (the next K)
        c.run(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"], check=False)
    return lab


def _connected(lab, addresses: set, procs: list, k: int) -> list:
    """The server's established connections from ``addresses`` once there are ``k`` of them
    (empty until then); BenchError if a downloader has ended before."""
    for p in procs:
        if p.poll() is not None:
            _, err = p.communicate()
            raise BenchError(f"a downloader exited {p.returncode} before its downloads had connected: "
                             f"{' '.join(err.split())[-300:]}")
    peers = [peer for peer in established(lab.server.netns, 80) if peer[0] in addresses]
    return peers if len(peers) >= k else []


def downloads(lab, k: int, warmup: float, window: float, rcvbuf: int) -> dict:
    """K concurrent downloads through ``lab``; per-link goodput / the link model's capacity.
    The warm-up starts once the server holds every download's connection (a process starts
    slowly in an emulated machine), the window after it."""
    import sys
    nclients = min(len(lab.clients), math.ceil(k / PER_CLIENT))
    shares = [k // nclients + (1 if i < k % nclients else 0) for i in range(nclients)]
    addresses = {lab.client(i + 1).address for i in range(nclients)}
    # the last row's connections gone first: the server's count below is this row's
    wait_until(lambda: not [p for p in established(lab.server.netns, 80) if p[0] in addresses], DRAIN_TIMEOUT_S,
               "the last row's connections to the server to close",
               detail=lambda: f"{len(established(lab.server.netns, 80))} still established")
    procs = []
    for i, share in enumerate(shares):
        # the downloads run until the window is over (``--until-eof``: stdin closes), a bound beyond it
        argv = [sys.executable, "-m", "bench.downloader", "--server", lab.server.address, "--path", PATH,
                "--conns", str(share), "--seconds", str(CONNECT_TIMEOUT_S + warmup + window + 120), "--until-eof",
                "--rcvbuf", str(rcvbuf), "--spread", str(min(5.0, max(1.0, share / 200)))]
        env = {**os.environ, "PYTHONPATH": str(_repo())}
        procs.append(lab.client(i + 1).popen(argv, stdin=-1, stdout=-1, stderr=-1, text=True, env=env))
    try:
        t_start = time.monotonic()
        wait_until(lambda: _connected(lab, addresses, procs, k), CONNECT_TIMEOUT_S,
                   f"{k} downloads to connect to the server", every_s=0.2,
                   detail=lambda: f"{len(_connected(lab, addresses, procs, 0))} connected")
        connect_s = time.monotonic() - t_start
        row = _measured(lab, k, nclients, procs, warmup, window)
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise
    return {**row, "connect_s": round(connect_s, 2)}


def _measured(lab, k: int, nclients: int, procs: list, warmup: float, window: float) -> dict:
    """The row of ``downloads``: the warm-up (TCP's start over the modems: the links' time, so
    a fixed one), the window, the downloaders' reports once they are told to stop."""
    time.sleep(warmup)
    cpu0 = procfs.ticks()
    tcp0 = tcp_counters(lab.server.netns)
    model = lab.link_model()
    rate_bps = model.layer.carried_bps(model.down_bps)  # the frames' rate
    segment = model.mss_bytes + 40
    capacity = model.mss_bytes / model.layer.frame_bytes(segment) * rate_bps  # bulk payload, bits/s
    down = lab.info["link"]["summary"]["down"]
    queue_s = down["queue_bytes"] * 8 / rate_bps if down.get("queue_bytes") else None  # police: no queue
    sent0, got0, t0 = _link_bytes(lab), delivered(lab.server.netns), time.monotonic()
    time.sleep(window / 2)  # the window's first half
    backlog = _backlogs(lab, rate_bps)
    time.sleep(max(0.0, window / 2 - 1))  # and its second
    sent1, got1, t1 = _link_bytes(lab), delivered(lab.server.netns), time.monotonic()
    carried = [(sent1.get(key, 0) - n) * 8 / (t1 - t0) / rate_bps for key, n in sent0.items()
               if sent1.get(key, 0) > n]
    ratios = [(got1[key] - n) * model.mss_bytes * 8 / (t1 - t0) / capacity for key, n in got0.items() if key in got1]
    if not ratios:  # a 0 here would read as a link that delivers nothing
        raise BenchError(f"{k} links: no download's connection was read at both ends of the window "
                         f"(the server had {len(got0)} and {len(got1)})")
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)  # its stdin closes: it stops and reports
        if p.returncode != 0:
            raise BenchError(f"downloader exited {p.returncode}: {' '.join(err.split())[-300:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    cpu1 = procfs.ticks()
    tcp1 = tcp_counters(lab.server.netns)
    cpu_busy = procfs.shares(cpu0, cpu1)["machine"]["busy"] if sum(cpu1[0]) > sum(cpu0[0]) else None
    failed = sum(o["failed"] for o in outs)
    return {"links": k, "clients": nclients, "measured_links": len(ratios), "failed": failed,
            "connections_seen": [len(got0), len(got1)],
            "errors": sorted({e for o in outs for e in o["errors"]})[:5],
            "finished_early": sum(o["finished"] for o in outs),
            "goodput_ratio": summarize(ratios), "aggregate_ratio": sum(ratios) / k if k else None,
            "carried_ratio": summarize(carried), "busy_links": len(carried),
            "capacity_bps": capacity, "frame_rate_bps": rate_bps, "queue_s": queue_s,
            "burst_bytes": down.get("burst_bytes"), "burst": down.get("burst"),
            "window_s": window, "warmup_s": warmup, "cpu_busy": cpu_busy,
            "backlog": backlog, **tcp_change(tcp0, tcp1),
            "ratios": [round(r, 4) for r in ratios]}


def _link_bytes(lab) -> dict:
    """Frame bytes each link toward the clients has sent (the router's class counters)."""
    rows = lab.statistics()["links"]
    return {(r["host"], r["port"]): r.get("bytes") or 0 for r in rows if r["direction"] == "dest"}


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
    """Measured / configured round trip per latency profile: the fastest of ``count`` TCP
    handshakes, for the emulated delay is fixed and everything else (a busy CPU, the VM's
    software emulation) only adds to it; the median is kept beside it.  The second method:
    the fastest one-way delays of ``PROBES`` datagrams each way, added up (``probe_rtt_s``)."""
    from ratelimit.profiles import catalog
    from ratelimit.lab.link import LinkSpec
    rows = []
    for name in profiles_:
        prof = catalog.load(name)
        configured = (prof.down.delay_us + prof.up.delay_us) / 1e6
        lab.apply(LinkSpec(profile=name, mode=mode, per="port"))
        times = lab.handshakes(count=count)
        measured, median = times[0], times[len(times) // 2]
        down, up = lab.one_way_delays(count=PROBES)
        if not down or not up:
            way = "server to client" if not down else "client to server"
            raise BenchError(f"latency {name}: none of {PROBES} datagrams crossed the link ({way})")
        probed = down[0] + up[0]
        rows.append({"profile": name, "configured_rtt_s": configured, "measured_rtt_s": measured,
                     "median_rtt_s": median, "samples_s": times, "ratio": ratio(measured, configured),
                     "excess_ms": (measured - configured) * 1000, "probe_rtt_s": probed,
                     "probe_excess_ms": (probed - configured) * 1000, "probes_down_s": down, "probes_up_s": up})
        steps(f"latency {name}: fastest handshake of {count} {measured * 1000:.1f} ms (median "
              f"{median * 1000:.1f} ms), datagrams' fastest one-way delays {down[0] * 1000:.1f} + "
              f"{up[0] * 1000:.1f} ms, configured RTT {configured * 1000:.0f} ms")
    return rows


def measure(quick: bool, place: str, *, links=None, outdir=None) -> dict:
    cfg = config(quick, place, links)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "profile": PROFILE, "rate_bps": MODEM_BPS, "file": PATH, "clients": CLIENTS,
                     "per_client": PER_CLIENT, "ports": PORTS, "per": "port"}
    steps = Steps(NAME, len(cfg.links) * len(CLIENTS) + len(cfg.latency))
    clients = max(1, math.ceil(max(cfg.links) / PER_CLIENT))
    name = f"bf{os.getpid()}"
    lab = _lab(name, clients, cfg.mode)
    doc["config"]["server_congestion_control"] = congestion_control(lab.server.netns)
    try:
        for k, (kind, rcvbuf) in ((k, c) for k in cfg.links for c in CLIENTS.items()):
            row = {"mode": cfg.mode, "client": kind, "rcvbuf": rcvbuf,
                   **downloads(lab, k, cfg.warmup_s * WARMUP_FACTOR[kind], cfg.window_s, rcvbuf)}
            doc["rows"].append(row)
            g, c, b = row["goodput_ratio"], row["carried_ratio"], row["backlog"]
            steps(f"{cfg.mode} {k:,} links, {kind} clients: frames sent / link rate mean {c.get('mean', 0):.3f}, "
                  f"p5 {c.get('p5', 0):.3f}; goodput / model capacity mean {g.get('mean', 0):.3f}, "
                  f"p5 {g.get('p5', 0):.3f}, p95 {g.get('p95', 0):.3f}; queueing p95 "
                  f"{b.get('queue_delay_s_p95') or 0:.2f} s of {row['queue_s'] or 0:.2f} s; retransmitted "
                  f"{100 * (row['retransmitted'] or 0):.1f}% ({row['failed']} failed, CPU "
                  f"{100 * (row['cpu_busy'] or 0):.0f}% busy)")
            if outdir:
                save(doc, outdir)
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
