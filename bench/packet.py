"""Benchmark 2: per-packet cost of classification vs the number of flows installed.

A one-client namespace lab (``topology``): a sender in the server namespace
sends 18-byte UDP payloads (64-byte frames) as fast as the kernel takes them
(``blast``) through the router to the client, where a bound socket keeps the
port open; the client interface's received-packet counter over the run gives
the forwarding rate.  Sender, router and receiver share this machine's
CPUs, and in a veth path the router's work runs in the sender's system call,
so the rate falls as the router spends more per packet.

What is on the router's client-facing interface (``lan0``) egress:

- ``none``: nothing (plain forwarding, the reference);
- ``hashed``: ratelimit's plan, the u32 hash tree (``compile_plan``);
- ``flat``: the same exact (host, port) filters in one list, the way tcconfig
  installs them: all in u32 root tables, 4,095 per priority (the node-id limit
  of one u32 table), so a packet is compared with each filter in turn;
- ``shaped``: ratelimit's shape-mode plan (groups of HTB qdiscs, a class and a
  byte queue per link; 65,536 becomes 64,512, the most one device takes), every
  link at 10 Gbit/s so none limits: classification plus the per-link classes.

``hashed`` and ``flat`` send every flow to one 10 Gbit/s HTB class and carry no
policer (act_police is missing on the host kernel), so what differs between them
is the classification alone.  Targets: ``hit``, a flow in the middle of the list
(the flat list matches it after about N/2 filters), and ``miss``, a port of
the same host outside the limited set (the flat list tries every filter).
Each figure is the best of ``trials`` runs of ``seconds`` seconds (other work
on the machine only ever lowers a rate).  Reported: packets/s and the ratio to
the same layout and target with one flow.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass

from ratelimit.lab import topology
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.filters import U32Filter
from ratelimit.plan.ops import HtbQdisc
from ratelimit.plan.script import tc_batch
from ratelimit.plan.shaping import HtbClass

from . import blast
from .common import BenchError, client_hosts, flows_request, ratio, run, say, shape_flows, split_flows, Steps
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "packet"
VM_WORK = False
PAYLOAD = 18  # bytes: 18 + 8 UDP + 20 IP + 14 Ethernet = 60, a minimum frame
FLAT_PRIO = 10
U32_NODES = 4095
MISS_PORT = 20000
FAST_BPS = 10_000_000_000  # the class never limits


@dataclass(frozen=True)
class Config:
    flows: tuple[int, ...]
    seconds: float
    trials: int


def config(quick: bool, flows=None) -> Config:
    if quick:
        return Config(tuple(flows or (1, 1024)), 1.0, 1)
    return Config(tuple(flows or (1, 1024, 65536)), 3.0, 3)


def request_for(n: int, client: str, router: str, interface: str, mode: str = "police"):
    """The request for ``n`` flows, the real client among the hosts: in the
    middle of the host list, so its middle port is in the middle of the flat list.
    Police mode without a rate (no policer); shape mode with every link at 10 Gbit/s."""
    if mode == "shape":
        n = shape_flows(n)
    nhosts, nports = split_flows(n)
    req = flows_request(n, mode, interface=interface, netns=router, rate_bps=FAST_BPS if mode == "shape" else None,
                        bandwidth_bps=FAST_BPS, hosts=hosts_around(client, nhosts))
    hit_port = req.only.ports[0][0] + nports // 2
    return req, hit_port


def hosts_around(client: str, n: int) -> list:
    """``n`` benchmark hosts (``client_hosts``) with the lab's ``client`` in the middle of them."""
    from ipaddress import ip_address
    others = [h for h in client_hosts(n + 1) if str(h) != client][:n - 1]
    middle = len(others) // 2 + len(others) % 2
    return others[:middle] + [ip_address(client)] + others[middle:]


def flat_ops(plan) -> list:
    """The plan's qdisc and classes, then its exact filters as one flat list in
    request order (host by host, ports ascending), 4,095 per u32 priority."""
    leaf = {op.handle: op for op in plan.ops if type(op) is U32Filter and op.link is None and op.ht}
    by_flow = {(f.host, f.port): leaf[f.handle] for f in plan.flows}
    req = plan.request
    order = [(h, p) for h in req.only.hosts for lo, hi in req.only.ports for p in range(lo, hi + 1)]
    out = [op for op in plan.ops if isinstance(op, (HtbQdisc, HtbClass))]
    for i, key in enumerate(order):
        op = by_flow[key]
        out.append(U32Filter(op.dev, op.parent, FLAT_PRIO + i // U32_NODES, op.protocol, 0, 0,
                             i % U32_NODES + 1, op.keys, classid=op.classid, police=op.police))
    return out


def rx_packets(netns: str, dev: str) -> int:
    import json
    r = run(["ip", "-n", netns, "-s", "-j", "link", "show", "dev", dev])
    return int(json.loads(r.stdout)[0]["stats64"]["rx"]["packets"])


def class_packets(netns: str, dev: str, classid: str = "52:1") -> int | None:
    r = run(["tc", "-n", netns, "-s", "class", "show", "dev", dev], check=False)
    m = re.search(rf"class htb {re.escape(classid)} .*?\n\s*Sent \d+ bytes (\d+) pkt", r.stdout)
    return int(m.group(1)) if m else None


def _blast_once(topo, client_addr: str, port: int, seconds: float) -> dict:
    cmd, kind = blast.argv(client_addr, port, PAYLOAD, seconds)
    before = rx_packets(topo.clients[0], topo.client_if)
    r = run(topo.argv("server", cmd), timeout=seconds + 60)
    after = rx_packets(topo.clients[0], topo.client_if)
    sent, errors, elapsed = blast.parse(r.stdout.strip().splitlines()[-1])
    received = after - before
    return {"sent": sent, "errors": errors, "elapsed_s": elapsed, "received": received,
            "pps": received / elapsed if elapsed > 0 else 0.0, "sender": kind}


def _install(topo, ops, how: str) -> float:
    t0 = time.perf_counter()
    if how == "executor":
        from ratelimit.kernel.executor import Executor
        with Executor(topo.router) as ex:
            ex.apply(ops)
    else:
        run(["tc", "-n", topo.router, "-batch", "-"], input=tc_batch(ops), timeout=3600)
    return time.perf_counter() - t0


def _clear(topo) -> None:
    run(["tc", "-n", topo.router, "qdisc", "del", "dev", topo.router_client_if, "root"], check=False)


def measure(quick: bool, *, flows=None, outdir=None) -> dict:
    cfg = config(quick, flows)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "payload_bytes": PAYLOAD}
    cases = [("none", 0)] + [(layout, n) for n in cfg.flows for layout in ("hashed", "flat", "shaped")]
    steps = Steps(NAME, len(cases) * 2)
    name = f"b{os.getpid()}pkt"
    topo = topology.Topology.create(name, 1, replace=True)
    track_topology(topo)
    socks = []
    try:
        client_addr = topo.client_addrs[0]
        dev = topo.router_client_if
        for layout, n in cases:
            if layout == "none":
                targets = {"hit": 10000, "miss": MISS_PORT}
                install_s = 0.0
            else:
                req, hit_port = request_for(n, client_addr, topo.router, dev,
                                            "shape" if layout == "shaped" else "police")
                plan = compile_plan(req)
                ops = flat_ops(plan) if layout == "flat" else plan.ops
                install_s = _install(topo, ops, "tc-batch" if layout == "flat" else "executor")
                targets = {"hit": hit_port, "miss": MISS_PORT}
            for target, port in targets.items():
                s = topo.socket("c1", socket.AF_INET, socket.SOCK_DGRAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.bind(("0.0.0.0", port))
                socks.append(s)
                before = class_packets(topo.router, dev) if layout != "none" else None
                trials = [_blast_once(topo, client_addr, port, cfg.seconds) for _ in range(cfg.trials)]
                after = class_packets(topo.router, dev) if layout != "none" else None
                best = max(trials, key=lambda t: t["pps"])
                received = sum(t["received"] for t in trials)
                classified = (after - before) if before is not None and after is not None else None
                row = {"layout": layout, "flows": n, "links": len(plan.flows) if layout != "none" else 0,
                       "target": target, "port": port, "pps": best["pps"],
                       "trials": trials, "install_s": install_s, "sender": best["sender"],
                       "classified_packets": classified, "received_packets": received}
                if layout != "none" and classified is not None:
                    # hits must land in the pool class, misses must not
                    row["classified_ok"] = (classified >= 0.95 * received) if target == "hit" else (classified == 0)
                doc["rows"].append(row)
                steps(f"{layout} {n:,} flows {target}: {best['pps']:,.0f} packets/s "
                      f"(sent {best['sent']:,}, received {best['received']:,}, {best['sender']} sender)")
                s.close()
                socks.remove(s)
            _clear(topo)
        _derive(doc)
        if any(r.get("classified_ok") is False for r in doc["rows"]):
            doc["notes"].append("some packets were not classified as expected (see classified_ok)")
    finally:
        for s in socks:
            s.close()
        topo.destroy()
        untrack_topology(topo)
    return doc


def _derive(doc: dict) -> None:
    """Each row's ratio to the same layout and target with one flow, and to no qdisc."""
    rows = doc["rows"]
    base = {(r["layout"], r["target"]): r["pps"] for r in rows if r["flows"] == 1}
    bare = {r["target"]: r["pps"] for r in rows if r["layout"] == "none"}
    for r in rows:
        r["ratio_to_1flow"] = ratio(r["pps"], base.get((r["layout"], r["target"])))
        r["ratio_to_bare"] = ratio(r["pps"], bare.get(r["target"]))


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    if blast.compiled() is None:
        say(NAME, "no C compiler: using the Python sender (ratios are flattened)")
    doc = measure(args.quick, flows=args.flows, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if not doc["rows"]:
        raise BenchError("no measurements")
    return 0
