"""Benchmark: the device's qdisc hash, the groups in a bucket of their own against slot order.

The kernel finds a qdisc by its handle for every class, filter and qdisc message, walking
the handle's bucket of the device's 16-bucket hash (docs/design.md, "The qdisc hash").
Two copies of one K-link shape plan (a link per port, a bfifo queue each), side by side:
*bucketed*, as ratelimit numbers qdiscs now (``Request.numbering``: the groups' qdiscs
in a bucket the links' queues leave alone), and *slot order*, as it numbered them before.
For each K:

- **install**: our executor installing the whole plan on a fresh namespace, ``installs``
  times each, alternately (A, B, A, B, ...); the median of each;
- **changes**: both plans installed on two namespaces, then ``rounds`` rounds of a change
  of every link's class to a new rate (the messages the trace driver sends each step),
  alternately; each round's wall time and CPU (``common.Clock``: user + system of the
  sending thread, where the kernel handles the messages), the median round of each.

Shape mode on the host; no traffic.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from ratelimit import service
from ratelimit.kernel.executor import Executor
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.layout import LINK_MINOR_BASE, SLOT_ORDER, TOP_BUCKET
from ratelimit.plan.ops import Change
from ratelimit.plan.shaping import HtbClass

from .common import DEV, Clock, median, ratio, say, Steps
from .results import new_result, save
from .sandbox import Netns

NAME = "qdisc-hash"
VM_WORK = False
FIRST_PORT = 10000
RATE_BPS = 1_000_000
SIDES = (("bucketed", TOP_BUCKET), ("slot order", SLOT_ORDER))


@dataclass(frozen=True)
class Config:
    links: tuple
    installs: int
    rounds: int


def config(quick: bool, links=None) -> Config:
    cfg = Config((2_000,), 2, 6) if quick else Config((1_000, 10_000, 40_000), 3, 20)
    return dataclasses.replace(cfg, links=tuple(links)) if links else cfg


def plan(k: int, netns: str, numbering: int):
    """K per-port links of one host, in ``numbering`` (``layout.TOP_BUCKET`` or ``SLOT_ORDER``)."""
    req = service.make_request(DEV, netns=netns, hosts="198.18.1.2", ports=f"{FIRST_PORT}-{FIRST_PORT + k - 1}",
                               mode="shape", direction="dest", rate=f"{RATE_BPS}bit")
    return compile_plan(dataclasses.replace(req, numbering=numbering))


def installs(k: int, n: int) -> dict:
    times: dict[str, list] = {name: [] for name, _ in SIDES}
    for i in range(n):
        for name, numbering in SIDES if i % 2 == 0 else SIDES[::-1]:
            with Netns("qh") as box:
                ops = plan(k, box.name, numbering).ops
                t0 = time.perf_counter()
                with Executor(box.name) as ex:
                    ex.apply(ops)
                times[name].append(time.perf_counter() - t0)
    return {name: median(v) for name, v in times.items()}


def rounds(k: int, n: int) -> dict:
    out: dict[str, list] = {name: [] for name, _ in SIDES}
    with Netns("qha") as a, Netns("qhb") as b:
        boxes = {"bucketed": a.name, "slot order": b.name}
        links = {}
        for name, numbering in SIDES:
            p = plan(k, boxes[name], numbering)
            with Executor(boxes[name]) as ex:
                ex.apply(p.ops)
            links[name] = [op for op in p.ops if type(op) is HtbClass and op.classid & 0xFFFF >= LINK_MINOR_BASE]
        for i in range(n):
            rate = RATE_BPS + 8 * (i + 1)
            for name, _ in SIDES if i % 2 == 0 else SIDES[::-1]:
                ops = [Change(op.with_rates(rate, rate, op.burst_bytes)) for op in links[name]]
                with Executor(boxes[name]) as ex, Clock() as c:
                    ex.apply(ops)
                out[name].append((c.wall, c.cpu))
    return {name: {"round_s": median([w for w, _ in v]), "cpu_s": median([c for _, c in v]),
                   "best_s": min(w for w, _ in v)} for name, v in out.items()}


def measure(quick: bool, links=None) -> dict:
    cfg = config(quick, links)
    doc = new_result(NAME, quick)
    doc["config"] = {"links": list(cfg.links), "installs": cfg.installs, "rounds": cfg.rounds, "rate_bps": RATE_BPS}
    steps = Steps(NAME, 2 * len(cfg.links))
    rows = []
    for k in cfg.links:
        inst = installs(k, cfg.installs)
        steps(f"{k:,} links: installed in {inst['bucketed']:.2f} s bucketed, {inst['slot order']:.2f} s in slot order")
        chg = rounds(k, cfg.rounds)
        row = {"links": k, "install_s": inst, "changes": chg,
               "install_ratio": ratio(inst["slot order"], inst["bucketed"]),
               "round_ratio": ratio(chg["slot order"]["round_s"], chg["bucketed"]["round_s"]),
               "cpu_ratio": ratio(chg["slot order"]["cpu_s"], chg["bucketed"]["cpu_s"])}
        rows.append(row)
        steps(f"{k:,} links: a round of class changes {chg['bucketed']['round_s'] * 1e3:.1f} ms bucketed, "
              f"{chg['slot order']['round_s'] * 1e3:.1f} ms in slot order ({row['round_ratio']:.2f}x; CPU "
              f"{row['cpu_ratio']:.2f}x)")
    doc["rows"] = rows
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    doc = measure(args.quick, links=args.flows)
    say(NAME, f"wrote {save(doc, args.out or RESULTS_DIR)}")
    return 0
