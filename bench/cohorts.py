"""Benchmark: what cohorts cost, measured side by side in one run.

Three comparisons, each of two plans of the same size installed alternately (A, B, A,
B, ...) so a busy moment of the machine falls on both:

- ``setup``: a 64,512-link plan of one profile against the same flows as 16 cohorts of
  4,032 links (63 hosts x 64 ports each), each cohort its own rate and link layer
  (Ethernet, PPP with compressed headers, synchronous PPP, ATM cells, DOCSIS): the
  cohorts' own groups, per-class overheads and one size table for the device.
- ``whole hosts``: 10,000 hosts with one link each, every packet of a host (``per host``,
  no ports: one exact filter on its address), against 10,000 per-port links (the
  benchmarks' usual 1,024 ports per host).
- ``packet``: the per-packet cost through the router (``bench packet``'s method: a
  one-client lab, 64-byte UDP frames as fast as the sender goes, the client's received
  count over the run, the best of ``trials``) with 16 cohorts of 4,032 links against one
  cohort of 64,512, every link at 10 Gbit/s so none limits; the target flow is in the
  middle of the host list.

Install times are our executor's (``Executor.apply``, socket included) on a fresh
namespace each time; each side's figure is the median of its runs.  Shape mode, on the
host (no netem: the cohorts carry no delay).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace

from ratelimit.lab import topology
from ratelimit.plan.compile import compile_plan
from ratelimit.spec import linklayer
from ratelimit.spec.model import Cohort, LinkParams, Request

from . import packet
from .common import DEV, client_hosts, Clock, median, ratio, say, Steps
from .results import new_result, save
from .sandbox import Netns, track_topology, untrack_topology

NAME = "cohorts"
VM_WORK = False
COHORTS = 16
PORTS = 64  # per host in the cohort plans: 4,032 links = 63 hosts x 64 ports
FIRST_PORT = 10000
LAYERS = (("ethernet", None), ("ppp-vj", None), ("ppp-sync-vj", None), ("atm", None), ("ethernet", 18))  # cycled
# over the cohorts; the last is cable's DOCSIS framing (profiles/cable.toml)
FAST_BPS = packet.FAST_BPS


@dataclass(frozen=True)
class Config:
    links_per_cohort: int  # a multiple of PORTS
    whole_hosts: int
    repeats: int  # installs per side
    seconds: float  # per blast
    trials: int


def config(quick: bool) -> Config:
    if quick:
        return Config(links_per_cohort=4 * PORTS, whole_hosts=1024, repeats=2, seconds=0.5, trials=1)
    return Config(links_per_cohort=63 * PORTS, whole_hosts=10_000, repeats=5, seconds=2.0, trials=3)


def cohort_requests(links_per_cohort: int, *, netns: str | None = None, interface: str = DEV,
                    hosts=None, rate_bps: int | None = None, layers: bool = True) -> tuple[Request, Request]:
    """(one cohort, ``COHORTS`` cohorts) over the same flows: ``COHORTS`` x ``links_per_cohort``
    links of ``PORTS`` ports per host.  The cohorts differ in rate (28.8 kbit/s doubling)
    and, with ``layers``, cycle through ``LAYERS``; ``rate_bps`` gives every link that rate."""
    per = links_per_cohort // PORTS
    hosts = tuple(hosts or client_hosts(per * COHORTS))
    ports = ((FIRST_PORT, FIRST_PORT + PORTS - 1),)
    device = dict(mode="shape", direction="dest", netns=netns, bandwidth_bps=FAST_BPS)
    cohorts = []
    for k in range(COHORTS):
        side = LinkParams(rate_bps=rate_bps or 28_800 << (k % 8))
        layer = linklayer.layer(*LAYERS[k % len(LAYERS)]) if layers else linklayer.ETHERNET
        cohorts.append(Cohort(f"c{k:02d}", hosts[k * per:(k + 1) * per], ports, side, side, "port", layer))
    one = Request(interface, (replace(cohorts[0], name="all", hosts=hosts),), **device)
    return one, Request(interface, tuple(cohorts), **device)


def whole_host_requests(n: int, *, interface: str = DEV) -> tuple[Request, Request]:
    """(``n`` whole hosts, ``n`` per-port links), both at a modem's rate."""
    side = LinkParams(rate_bps=28_800)
    device = dict(mode="shape", direction="dest")
    whole = Request(interface, (Cohort("hosts", client_hosts(n), None, side, side, "host"),), **device)
    nhosts = -(-n // 1024)
    ports = Request(interface, (Cohort("ports", client_hosts(nhosts), ((FIRST_PORT, FIRST_PORT + n // nhosts - 1),),
                                       side, side, "port"),), **device)
    return whole, ports


def _install_s(req: Request) -> float:
    from ratelimit.kernel.executor import Executor
    plan = compile_plan(req)
    with Netns("coh") as ns:
        with Clock() as c:
            with Executor(ns.name) as ex:
                ex.apply(plan.ops)
    return c.wall


def _side_by_side(a: Request, b: Request, repeats: int, steps: Steps, what: str) -> dict:
    times = {"a": [], "b": []}
    for i in range(repeats):
        for key, req in (("a", a), ("b", b)):
            times[key].append(_install_s(req))
        steps(f"{what} #{i + 1}: {times['a'][-1]:.2f} s against {times['b'][-1]:.2f} s")
    ta, tb = median(times["a"]), median(times["b"])
    return {"a_s": ta, "b_s": tb, "ratio": ratio(ta, tb), "a_runs": times["a"], "b_runs": times["b"],
            "a_links": a.link_count(), "b_links": b.link_count()}


def _packet_rows(cfg: Config, steps: Steps) -> list[dict]:
    name = f"b{os.getpid()}coh"
    topo = topology.Topology.create(name, 1, replace=True)
    track_topology(topo)
    rows = []
    try:
        client = topo.client_addrs[0]
        hosts = packet.hosts_around(client, cfg.links_per_cohort // PORTS * COHORTS)
        one, many = cohort_requests(cfg.links_per_cohort, netns=topo.router, interface=topo.router_client_if,
                                    hosts=hosts, rate_bps=FAST_BPS, layers=False)
        port = FIRST_PORT + PORTS // 2
        s = topo.socket("c1", socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("0.0.0.0", port))
        try:
            best = {"one": 0.0, "many": 0.0}
            for trial in range(cfg.trials):
                for key, req in (("one", one), ("many", many)):
                    packet._install(topo, compile_plan(req).ops, "executor")
                    got = packet._blast_once(topo, client, port, cfg.seconds)
                    packet._clear(topo)
                    best[key] = max(best[key], got["pps"])
                    steps(f"packet {key} (trial {trial + 1}): {got['pps']:,.0f} packets/s")
        finally:
            s.close()
        rows.append({"what": "packet", "one_pps": best["one"], "many_pps": best["many"],
                     "ratio": ratio(best["many"], best["one"]), "links": one.link_count()})
    finally:
        topo.destroy()
        untrack_topology(topo)
    return rows


def measure(quick: bool, *, outdir=None) -> dict:
    cfg = config(quick)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "cohorts": COHORTS, "ports_per_host": PORTS, "layers": LAYERS}
    steps = Steps(NAME, 2 * cfg.repeats + 2 * cfg.trials)
    one, many = cohort_requests(cfg.links_per_cohort)
    row = _side_by_side(many, one, cfg.repeats, steps, f"setup {COHORTS} cohorts / one, {one.link_count():,} links")
    doc["rows"].append({"what": "setup", "cohorts": COHORTS, **row})
    whole, ports = whole_host_requests(cfg.whole_hosts)
    row = _side_by_side(whole, ports, cfg.repeats, steps, f"setup {cfg.whole_hosts:,} whole hosts / per-port links")
    doc["rows"].append({"what": "whole hosts", **row})
    doc["rows"] += _packet_rows(cfg, steps)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, outdir=outdir)
    for r in doc["rows"]:
        say(NAME, f"{r['what']}: ratio {r['ratio']:.3f}")
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
