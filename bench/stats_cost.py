"""Benchmark 3: time to read every flow's counters with N flows installed.

A plan of N flows (as in ``setup``) is installed on a veth in a throwaway
namespace; then, alternately, ratelimit's ``Executor(netns).stats(plan)``
(socket opening included; it returns one row per flow, counters mapped to
(host, port)) and the ``tc -s`` dump that holds the same counters (shape mode:
``tc -s class show``, one HTB class per flow; police mode: ``tc -s filter
show``, one policer per flow) are timed.  tc only prints text: mapping it to
flows would cost more, so the comparison favours tc.

Shape mode runs on the host; police mode in the full-kernel VM (software
emulation: compare ratios).  Reported: the best (least disturbed) of
``repeats`` runs, and the median.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ratelimit.compile import compile_plan

from .common import BenchError, Clock, DEV, Steps, flows_request, fmt_time, median, ratio, run, say, shape_flows
from .sandbox import Netns, host_has
from .results import new_result, save

NAME = "stats"
VM_WORK = True


@dataclass(frozen=True)
class Config:
    modes: tuple[str, ...]
    flows: tuple[int, ...]
    repeats: int


def config(quick: bool, place: str, flows=None) -> Config:
    if place == "vm":
        return Config(("police",), tuple(flows or ((256, 1024) if quick else (256, 1024, 4096, 16384, 65536))),
                      3 if quick else 5)
    modes = ("shape", "police") if host_has("police") else ("shape",)
    return Config(modes, tuple(flows or ((256, 1024) if quick else (256, 1024, 4096, 16384))), 3 if quick else 7)


def _ours(ns: Netns, plan) -> tuple[Clock, int]:
    from ratelimit.kernel.executor import Executor
    with Clock() as c:
        with Executor(ns.name) as ex:
            rows = ex.stats(plan)
    return c, len(rows)


def _tc(ns: Netns, what: str) -> tuple[Clock, int]:
    with Clock() as c:
        r = run(["tc", "-n", ns.name, "-s", what, "show", "dev", DEV], timeout=600)
    return c, len(r.stdout)


def measure(quick: bool, place: str, *, flows=None, outdir=None) -> dict:
    cfg = config(quick, place, flows)
    doc = new_result(NAME, quick)
    doc["config"] = cfg.__dict__
    steps = Steps(NAME, len(cfg.modes) * len(cfg.flows))
    for mode in cfg.modes:
        tc_what = "class" if mode == "shape" else "filter"
        for n_req in cfg.flows:
            n = shape_flows(n_req) if mode == "shape" else n_req
            plan = compile_plan(flows_request(n, mode))
            ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
            with Netns("stats") as ns:
                from ratelimit.kernel.executor import Executor
                with Executor(ns.name) as ex:
                    t0 = time.perf_counter()
                    ex.apply(plan.ops)
                    install_s = time.perf_counter() - t0
                out_bytes = 0
                for r in range(cfg.repeats):
                    for which in (("ours", "tc") if r % 2 == 0 else ("tc", "ours")):
                        if which == "ours":
                            c, rows = _ours(ns, plan)
                            ours.append(c.wall)
                            ours_cpu.append(c.cpu)
                        else:
                            c, out_bytes = _tc(ns, tc_what)
                            theirs.append(c.wall)
                            theirs_cpu.append(c.cpu)
                    if rows != len(plan.flows):
                        raise BenchError(f"Executor.stats returned {rows} rows for {len(plan.flows)} flows")
            common = {"mode": mode, "flows": n, "requested_flows": n_req, "install_s": install_s}
            doc["rows"].append({**common, "tool": "ratelimit", "seconds": min(ours), "median_s": median(ours),
                                "samples": ours, "cpu_s": min(ours_cpu), "cpu_samples": ours_cpu,
                                "rows": len(plan.flows)})
            doc["rows"].append({**common, "tool": f"tc -s {tc_what} show", "seconds": min(theirs),
                                "median_s": median(theirs), "samples": theirs, "cpu_s": min(theirs_cpu),
                                "cpu_samples": theirs_cpu, "output_bytes": out_bytes})
            steps(f"{mode} {n:,} flows: ratelimit {fmt_time(min(ours))}, tc -s {tc_what} show {fmt_time(min(theirs))} "
                  f"(tc / ours = {ratio(min(theirs), min(ours)):.2f}; best of {cfg.repeats})")
            if outdir:
                save(doc, outdir)
    if place == "vm":
        doc["notes"].append("police mode measured in the full-kernel VM under software emulation (TCG): "
                            "compare ratios, not seconds")
    return doc


def main(args) -> int:
    from .sandbox import in_vm, load_modules, run_vm_part
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        save(measure(args.quick, "vm", flows=args.flows, outdir=outdir), outdir)
        return 0
    doc = measure(args.quick, "host", flows=args.flows, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if args.vm and "police" not in doc["config"]["modes"]:
        fwd = (["--quick"] if args.quick else []) + (["--flows", *map(str, args.flows)] if args.flows else [])
        rc = run_vm_part(NAME, fwd, outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0
