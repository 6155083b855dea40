"""Benchmark: the router alone, with K busy links that every one stays backlogged.

Three namespaces of their own (``rlb-<pid>-...``): a sender, the router, a sink.  The
router's sink-facing veth has ``queues`` tx queues; ratelimit's shape-mode plan on it
gives K per-port links of one sink address (ports 10000 and up) a plain HTB class each
at ``rate_bps`` (no link-layer size table, a byte fifo), with ``--bandwidth`` far above
their sum.  Paced UDP senders (``pace.c``, one per CPU, each for its share of the
ports) offer every link ``LOAD`` times its rate in full-size datagrams, so every class
is always waiting for tokens: HTB's hard case, without nginx or TCP in the way.  The
sink address is assigned to nobody and the sink namespace does not forward, so the
sink drops each packet at its IP input (no socket, no ICMP).

After ``warm_s`` seconds, one window of ``window_s`` seconds is scored:
- each link's share: its class's bytes over the window x 8 / window / rate.  A link's
  count is whole packets, so a share moves in steps of one packet over the window
  (``step``: about 1.4% at 30 s for 1,514-byte frames at 28.8 kbit/s);
- the machine's CPU from ``/proc/stat`` (busy, softirq, system, user) and per CPU;
- the CPU time per delivered packet (busy CPU-seconds / delivered packets): what the
  router's layout costs, the senders' and the sink's own work included;
- with ``perf`` installed, its top symbols over ``perf_s`` seconds after the window
  (the load still on; the window itself runs without perf).

Rows: every K with every queue count, one after the other in one run.  Needs root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, fields, replace
from ipaddress import ip_address
from pathlib import Path

from ratelimit.kernel.counters import FlowTable
from ratelimit.kernel.executor import Executor
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.layout import group_links_of
from ratelimit.spec.model import Burst, LinkParams, Request

from . import blast, procfs
from .common import BenchError, percentile, run, say, Steps, wait_until
from .results import new_result, save
from .sandbox import _LIVE, _delete_ns, ns_name

NAME = "shaped-load"
VM_WORK = False
PACE = Path(__file__).with_name("pace.c")
FIRST_PORT = 10000
PAYLOAD_BYTES = 1472  # a 1,514-byte frame on the router's veth: what HTB meters without a size table
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14
LOAD = 1.05  # offered / rate: every link stays backlogged
SINK = "198.18.33.3"  # the links' address: on the sink's subnet, assigned to nobody
POOL_BPS = 100_000_000_000  # --bandwidth: never the limit


@dataclass(frozen=True)
class Config:
    links: tuple = (10_000, 20_000, 40_000)
    queues: tuple = (1, 2)
    rate_bps: int = 28_800
    warm_s: float = 8.0
    window_s: float = 30.0
    perf_s: float = 5.0


def config(quick: bool, links=None, queues=None) -> Config:
    cfg = Config(links=(2_000,), queues=(1,), warm_s=3.0, window_s=10.0, perf_s=0.0) if quick else Config()
    cfg = replace(cfg, links=tuple(links)) if links else cfg
    return replace(cfg, queues=tuple(queues)) if queues else cfg


# ---------------------------------------------------------------- the namespaces


class Path3:
    """sender --wan-- router --lan-- sink, the router's lan with ``queues`` tx queues."""

    def __init__(self, queues: int):
        self.queues = queues
        self.sender, self.router, self.sink = ns_name("snd"), ns_name("rtr"), ns_name("snk")

    def __enter__(self) -> "Path3":
        for ns in (self.sender, self.router, self.sink):
            run(["ip", "netns", "add", ns])
            _LIVE.add(ns)
        try:
            q = self.queues
            run(["ip", "link", "add", "s0", "netns", self.sender, "type", "veth", "peer", "name", "wan",
                 "netns", self.router])
            run(["ip", "link", "add", "lan", "netns", self.router, "numtxqueues", str(q), "numrxqueues", str(q),
                 "type", "veth", "peer", "name", "k0", "netns", self.sink, "numtxqueues", str(q),
                 "numrxqueues", str(q)])
            for ns, dev, addr in ((self.sender, "s0", "198.18.32.1/24"), (self.router, "wan", "198.18.32.2/24"),
                                  (self.router, "lan", "198.18.33.1/24"), (self.sink, "k0", "198.18.33.2/24")):
                run(["ip", "-n", ns, "-batch", "-"],
                    input=f"addr add {addr} dev {dev}\nlink set {dev} up\nlink set lo up\n")
            run(["ip", "-n", self.sender, "route", "add", "default", "via", "198.18.32.2"])
            run(["ip", "netns", "exec", self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            mac = json.loads(run(["ip", "-n", self.sink, "-j", "link", "show", "k0"]).stdout)[0]["address"]
            run(["ip", "-n", self.router, "neigh", "replace", SINK, "lladdr", mac, "dev", "lan", "nud", "permanent"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        # the root qdisc first: namespace deletion is asynchronous and would tear down
        # 40,000 classes during the next row
        subprocess.run(["tc", "-n", self.router, "qdisc", "del", "dev", "lan", "root"], capture_output=True,
                       check=False)
        for ns in (self.sender, self.router, self.sink):
            _delete_ns(ns)


# ---------------------------------------------------------------- one row


def request(k: int, queues: int, rate_bps: int, netns: str, burst: Burst | None = None) -> Request:
    link = LinkParams(rate_bps=rate_bps, burst=burst)
    req = Request.single("lan", (ip_address(SINK),), ((FIRST_PORT, FIRST_PORT + k - 1),), link, link,
                         mode="shape", direction="dest", netns=netns, bandwidth_bps=POOL_BPS)
    if queues == 1:
        return req
    if "queues" not in {f.name for f in fields(Request)}:
        raise BenchError("queues: this checkout has no multi-queue layout (Request.queues)")
    return replace(req, queues=queues)


def perf_top(seconds: float, n: int = 12) -> list | None:
    """perf's top symbols (self time, all CPUs) over ``seconds``, or None without perf."""
    if not seconds or shutil.which("perf") is None:
        return None
    data = f"/tmp/rlb-{os.getpid()}-perf.data"
    try:
        run(["perf", "record", "-a", "-g", "-o", data, "--", "sleep", f"{seconds:g}"], timeout=seconds + 60)
        rep = run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio", "-g", "none"],
                  timeout=300).stdout
    finally:
        Path(data).unlink(missing_ok=True)
    out = []
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[kH.]\]\s+(\S+)", line)
        if m:
            out.append((m.group(2), float(m.group(1))))
        if len(out) == n:
            break
    return out


def start_senders(path: Path3, sender_exe: str, k: int, pps: float, run_s: float) -> list:
    """pace.c, one process per CPU, each for its share of the ``k`` ports from FIRST_PORT,
    ``pps`` full-size datagrams a second in all, for ``run_s`` seconds."""
    cpus, out = os.cpu_count() or 1, []
    for i in range(cpus):
        first, last = k * i // cpus, k * (i + 1) // cpus
        if last > first:
            out.append(subprocess.Popen(
                ["ip", "netns", "exec", path.sender, sender_exe, SINK, str(FIRST_PORT + first), str(last - first),
                 str(PAYLOAD_BYTES), f"{pps * (last - first) / k:.3f}", f"{run_s:g}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return out


def finish_senders(senders: list, run_s: float) -> list:
    """Each sender's (stdout, stderr) once it has ended; BenchError if one failed."""
    outs = [p.communicate(timeout=run_s + 60) for p in senders]
    for p, (_, err) in zip(senders, outs):
        if p.returncode != 0:
            raise BenchError(f"pace exited {p.returncode}: {err.strip()[-300:]}")
    return outs


def backlogged_window(path: Path3, table: FlowTable, k: int, warm_s: float, window_s: float) -> tuple:
    """Once the senders are on (each of the ``k`` links has sent a packet: they are
    processes, started when the machine gets to them) and after the warm-up (the links'
    buckets drain at their rate), the machine's ticks and the links' counters at each end
    of a window of ``window_s``: ((ticks, time, counters), (ticks, time, counters))."""
    with Executor(path.router) as ex:
        wait_until(lambda: all(read(ex, table)[1]["packets"][:k]), 120, f"{k:,} links' first packets", every_s=0.5)
        time.sleep(warm_s)
        c0, (t0, b0) = procfs.ticks(), read(ex, table)
        time.sleep(window_s)  # the window
        c1, (t1, b1) = procfs.ticks(), read(ex, table)
    return (c0, t0, b0), (c1, t1, b1)


def read(ex: Executor, table: FlowTable) -> tuple[float, dict]:
    """Every link's counters and when they were read: the middle of the dump, which takes
    a few tenths of a second at 40,000 links (a window timed from the dumps' starts would be
    off by the difference of their lengths)."""
    t0 = time.monotonic()
    counts = ex.counters(table)
    return (t0 + time.monotonic()) / 2, counts


def measure_row(k: int, queues: int, cfg: Config, *, group_links: int | None = None,
                burst: Burst | None = None) -> dict:
    """One row; ``group_links`` and ``burst`` (each link's, else shape mode's default) for
    trying other layouts beside it."""
    sender_exe = blast.compiled(PACE)
    if sender_exe is None:
        raise BenchError("pace.c: no C compiler (apt-get install gcc)")
    with Path3(queues) as path:
        req = request(k, queues, cfg.rate_bps, path.router, burst)
        req = req if group_links is None else replace(req, group_links=group_links)
        plan = compile_plan(req)
        t0 = time.perf_counter()
        with Executor(path.router) as ex:
            ex.apply(plan.ops)
        setup_s = time.perf_counter() - t0
        table = FlowTable.of(plan)  # one flow per link: its class
        pps = k * LOAD * cfg.rate_bps / 8 / FRAME_BYTES
        run_s = cfg.warm_s + cfg.window_s + cfg.perf_s + 2
        senders = start_senders(path, sender_exe, k, pps, run_s)
        try:
            (c0, t_0, b0), (c1, t_1, b1) = backlogged_window(path, table, k, cfg.warm_s, cfg.window_s)
            top = perf_top(cfg.perf_s)
        finally:
            outs = finish_senders(senders, run_s)
    window = t_1 - t_0
    if table.rows != k:
        raise BenchError(f"the plan has {table.rows} flows for {k} links")
    shares = sorted((b1["bytes"][i] - b0["bytes"][i]) * 8 / window / cfg.rate_bps for i in range(k))
    delivered = sum(b1["packets"][i] - b0["packets"][i] for i in range(k)) / window
    used = procfs.shares(c0, c1)
    if used["machine"]["user"] > 0.05:  # the router's work is softirq and system time; pace.c sleeps
        say(NAME, f"warning: {used['machine']['user']:.0%} user time in the window: something else ran")
    sent = [o.split() for o, _ in outs]
    return {"links": k, "queues": queues, "group_links": group_links_of(req), "rate_bps": cfg.rate_bps,
            "burst": req.burst_of(req.only.down).text(), "setup_s": round(setup_s, 2),
            "window_s": round(window, 2), "step": round(FRAME_BYTES * 8 / window / cfg.rate_bps, 4),
            "share_mean": sum(shares) / k, "share_p5": percentile(shares, 5), "share_p50": percentile(shares, 50),
            "share_min": shares[0], "delivered_pps": round(delivered),
            "offered_pps": round(pps), "cpu": used,
            "cpu_us_per_packet": used["machine"]["busy"] * (os.cpu_count() or 1) * 1e6 / max(delivered, 1),
            "sender_errors": sum(int(s[1]) for s in sent), "sender_late_wakeups": sum(int(s[3]) for s in sent),
            "perf_top": top}


def softirq_us_per_packet(row: dict, cpus: int) -> float:
    """The machine's softirq time per delivered packet: the router's receiving, forwarding
    and shaping, and the sink's IP input, which drops them (the senders' UDP sends are their
    system time). The sink's part is the same in every row, so a ratio of two rows' readings
    is less than the ratio of the router's own parts."""
    return row["cpu"]["machine"]["softirq"] * cpus * 1e6 / max(row["delivered_pps"], 1)


def measure(quick: bool, *, links=None, queues=None) -> dict:
    cfg = config(quick, links, queues)
    doc = new_result(NAME, quick)
    doc["config"] = {"links": list(cfg.links), "queues": list(cfg.queues), "rate_bps": cfg.rate_bps,
                     "load": LOAD, "frame_bytes": FRAME_BYTES, "warm_s": cfg.warm_s, "window_s": cfg.window_s,
                     "perf_s": cfg.perf_s, "cpus": os.cpu_count()}
    rows = []
    steps = Steps(NAME, len(cfg.links) * len(cfg.queues))
    for k in cfg.links:
        for q in cfg.queues:
            steps(f"{k:,} links, {q} queue{'s' if q > 1 else ''}")
            row = measure_row(k, q, cfg)
            rows.append(row)
            say(NAME, f"{k:,} links, {q} queue{'s' if q > 1 else ''}: mean {row['share_mean']:.2%} "
                      f"p5 {row['share_p5']:.2%}, "
                      f"busy {row['cpu']['machine']['busy']:.0%} softirq {row['cpu']['machine']['softirq']:.0%}, "
                      f"{row['cpu_us_per_packet']:.1f} us CPU per packet, "
                      f"{softirq_us_per_packet(row, os.cpu_count() or 1):.1f} us of it softirq")
    doc["rows"] = rows
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    doc = measure(args.quick, links=args.flows, queues=getattr(args, "queues", None))
    say(NAME, f"wrote {save(doc, args.out or RESULTS_DIR)}")
    return 0
