"""Benchmark: what cells cost and how they share, side by side with the same links without
cells, in one run (``python -m bench cells``).

- ``setup``: ``SETUP_CELLS`` cells of ``CELL_LINKS`` per-port links each (a cohort each,
  its own cell) against one cohort of the same links without cells: our executor
  installing on a fresh namespace, alternately (A, B, A, B, ...), the medians.  64,000
  links in 250 cells, not 65,536 in 256: shape mode holds at most 65,024.
- ``load``: U users in C cells, behind the router of ``shaped_load``'s three namespaces
  (paced UDP senders, one per CPU; a sink that drops at its IP input).  Each user is a
  per-port link; each cell's capacity gives its users a fair share ``SHARE_BPS``, below
  their own caps (twice that), and each user is offered 1.5 times the share.  Beside it,
  the same links without cells, each capped at the share: the same packets delivered, so
  the CPU per packet compares the layouts.  Over one window: each cell's utilisation
  (delivered / capacity), Jain's index of its users' rates, each user's rate as a share of
  the fair share, the machine's CPU per delivered packet (busy and softirq) and, as a
  second reading of the shaping's work, how often HTB found a user's class over its
  limit per packet (its overlimits counter).

Needs root and a C compiler (``pace.c``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from ipaddress import ip_address

from ratelimit.kernel.counters import FlowTable
from ratelimit.kernel.executor import Executor
from ratelimit.plan.compile import compile_plan
from ratelimit.spec.model import Cell, Cohort, LinkParams, Request

from . import blast, procfs
from .common import DEV, BenchError, client_hosts, median, percentile, ratio, say, Steps
from .results import new_result, save
from .sandbox import Netns
from .shaped_load import (FIRST_PORT, FRAME_BYTES, PACE, POOL_BPS, SINK, Path3, backlogged_window, finish_senders,
                          start_senders)

NAME = "cells"
VM_WORK = False
CELL_LINKS = 256  # per cell in the setup row: one group's worth
SETUP_CELLS = 250
SHARE_BPS = 20_000  # each user's fair share in the load rows
OFFERED = 1.5  # each user's offered load / its fair share


@dataclass(frozen=True)
class Config:
    loads: tuple  # ((users, cells), ...)
    setup_cells: int
    repeats: int
    warm_s: float
    window_s: float


def config(quick: bool) -> Config:
    if quick:
        return Config(((1000, 10),), 16, 2, 3.0, 8.0)
    return Config(((1000, 10), (20_000, 100)), SETUP_CELLS, 3, 6.0, 30.0)


def requests(users: int, cells: int, *, netns: str | None = None, interface: str = "lan",
             share_bps: int = SHARE_BPS) -> tuple[Request, Request]:
    """(``users`` per-port links of one sink address in ``cells`` cells, each cell its own
    cohort of consecutive ports with a capacity of ``share_bps`` per user and the users
    capped at twice that; the same links without cells, each capped at ``share_bps``)."""
    if users % cells:
        raise BenchError(f"{users} users do not split evenly into {cells} cells")
    per = users // cells
    host = (ip_address(SINK),)
    device = dict(mode="shape", direction="dest", netns=netns, bandwidth_bps=POOL_BPS)
    capped = LinkParams(rate_bps=2 * share_bps)
    with_cells = tuple(Cohort(f"cell{k:03d}", host, ((FIRST_PORT + k * per, FIRST_PORT + (k + 1) * per - 1),), capped,
                              capped, "port", cell=Cell(f"c{k:03d}", per * share_bps))
                       for k in range(cells))
    alone = LinkParams(rate_bps=share_bps)
    without = (Cohort("all", host, ((FIRST_PORT, FIRST_PORT + users - 1),), alone, alone, "port"),)
    return Request(interface, with_cells, **device), Request(interface, without, **device)


def setup_requests(cells: int) -> tuple[Request, Request]:
    """(``cells`` cells of ``CELL_LINKS`` per-port links, each a host's ports and its own
    cohort; the same links as one cohort without cells), at a modem's rate."""
    hosts = client_hosts(cells)
    ports = ((FIRST_PORT, FIRST_PORT + CELL_LINKS - 1),)
    side = LinkParams(rate_bps=28_800)
    device = dict(mode="shape", direction="dest")
    with_cells = tuple(Cohort(f"cell{k:03d}", (h,), ports, side, side, "port", cell=Cell(f"c{k:03d}", 1_000_000))
                       for k, h in enumerate(hosts))
    return (Request(DEV, with_cells, **device),
            Request(DEV, (Cohort("all", tuple(hosts), ports, side, side, "port"),), **device))


def _install_s(req: Request) -> float:
    plan = compile_plan(req)
    with Netns("cel") as ns:
        t0 = time.perf_counter()
        with Executor(ns.name) as ex:
            ex.apply(plan.ops)
        return time.perf_counter() - t0


def setup_row(cells: int, repeats: int, steps: Steps) -> dict:
    a, b = setup_requests(cells)
    times = {"cells": [], "none": []}
    for i in range(repeats):
        for key, req in (("cells", a), ("none", b)):
            times[key].append(_install_s(req))
        steps(f"setup #{i + 1}: {a.link_count():,} links in {cells} cells {times['cells'][-1]:.2f} s, "
              f"without cells {times['none'][-1]:.2f} s")
    ta, tb = median(times["cells"]), median(times["none"])
    return {"what": "setup", "links": a.link_count(), "cells": cells, "cells_s": ta, "none_s": tb,
            "ratio": ratio(ta, tb), "cells_runs": times["cells"], "none_runs": times["none"]}


def load_side(req_of, users: int, cfg: Config) -> dict:
    """One side of a load row: the plan installed in fresh namespaces, every user offered
    ``OFFERED`` times the fair share, read over one window."""
    sender = blast.compiled(PACE)
    if sender is None:
        raise BenchError("pace.c: no C compiler (apt-get install gcc)")
    with Path3(1) as path:
        req = req_of(path.router)
        plan = compile_plan(req)
        with Executor(path.router) as ex:
            ex.apply(plan.ops)
        table = FlowTable.of(plan)
        pps = users * OFFERED * SHARE_BPS / 8 / FRAME_BYTES
        run_s = cfg.warm_s + cfg.window_s + 2
        senders = start_senders(path, sender, users, pps, run_s)
        try:
            (c0, t0, b0), (c1, t1, b1) = backlogged_window(path, table, users, cfg.warm_s, cfg.window_s)
        finally:
            finish_senders(senders, run_s)
    window = t1 - t0
    bps = [(b1["bytes"][i] - b0["bytes"][i]) * 8 / window for i in range(users)]
    delivered = sum(b1["packets"][i] - b0["packets"][i] for i in range(users)) / window
    throttled = sum(b1["overlimits"][i] - b0["overlimits"][i] for i in range(users)) / window
    used = procfs.shares(c0, c1)
    cpus = os.cpu_count() or 1
    out = {"window_s": round(window, 2), "delivered_pps": round(delivered), "offered_pps": round(pps),
           "share": _spread([b / SHARE_BPS for b in bps]), "cpu": used["machine"],
           "cpu_us_per_packet": used["machine"]["busy"] * cpus * 1e6 / max(delivered, 1),
           "softirq_us_per_packet": used["machine"]["softirq"] * cpus * 1e6 / max(delivered, 1),
           # the second method: how often HTB found a user's class over its limit, per packet
           "user_overlimits_per_packet": throttled / max(delivered, 1)}
    if any(c.cell for c in req.cohorts):
        per = users // len(req.cohorts)
        cells = [bps[k * per:(k + 1) * per] for k in range(len(req.cohorts))]
        out["utilisation"] = _spread([sum(c) / (per * SHARE_BPS) for c in cells])
        out["jain"] = _spread([sum(c) ** 2 / (len(c) * sum(x * x for x in c)) for c in cells])
    return out


def _spread(xs: list) -> dict:
    xs = sorted(xs)
    return {"min": xs[0], "p5": percentile(xs, 5), "p50": percentile(xs, 50), "mean": sum(xs) / len(xs), "max": xs[-1]}


def load_row(users: int, cells: int, cfg: Config, steps: Steps) -> dict:
    row = {"what": "load", "users": users, "cells": cells, "share_bps": SHARE_BPS, "offered": OFFERED}
    for key, pick in (("with_cells", 0), ("without", 1)):
        row[key] = load_side(lambda ns: requests(users, cells, netns=ns)[pick], users, cfg)
        side = row[key]
        steps(f"{users:,} users {'in ' + str(cells) + ' cells' if pick == 0 else 'without cells'}: share of the "
              f"fair share p5 {side['share']['p5']:.3f} mean {side['share']['mean']:.3f}"
              + (f", utilisation min {side['utilisation']['min']:.3f}, Jain min {side['jain']['min']:.4f}"
                 if pick == 0 else "")
              + f"; {side['cpu_us_per_packet']:.1f} us CPU per packet ({side['softirq_us_per_packet']:.1f} softirq)")
    row["cpu_ratio"] = ratio(row["with_cells"]["cpu_us_per_packet"], row["without"]["cpu_us_per_packet"])
    return row


def measure(quick: bool, *, outdir=None) -> dict:
    cfg = config(quick)
    doc = new_result(NAME, quick)
    doc["config"] = {"loads": [list(x) for x in cfg.loads], "setup_cells": cfg.setup_cells,
                     "cell_links": CELL_LINKS, "repeats": cfg.repeats, "share_bps": SHARE_BPS, "offered": OFFERED,
                     "frame_bytes": FRAME_BYTES, "warm_s": cfg.warm_s, "window_s": cfg.window_s,
                     "cpus": os.cpu_count()}
    steps = Steps(NAME, cfg.repeats + 2 * len(cfg.loads))
    doc["rows"].append(setup_row(cfg.setup_cells, cfg.repeats, steps))
    for users, cells in cfg.loads:
        doc["rows"].append(load_row(users, cells, cfg, steps))
        if outdir:
            save(doc, outdir)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
