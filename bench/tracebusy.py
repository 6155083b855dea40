"""Benchmark part: the trace driver beside the shaping it drives (``bench trace``'s *beside* rows).

``shaped_load``'s three namespaces (a sender, the router, a sink; the router's sink-facing
veth with ``queues`` tx queues).  The router's plan gives K per-port links of the sink
address a traced class each, following a trace at ``scale`` from its own phase,
with the driver (``ratelimit follow``) at ``step_ms``.  ``pace.c`` sends every link
full-size datagrams at ``LOAD`` times its trace's mean capacity: a link is backlogged
while its trace is below its mean and idle above it, and the router forwards and shapes
about the trace's whole capacity.  Over one window, after a warm-up:

- the machine's CPU from ``/proc/stat``, and each CPU's: softirq is the router's
  forwarding and shaping (and the sink's drops), system the senders' sends and the
  driver's netlink work, user the driver's Python;
- the driver's own CPU (``/proc/PID/stat``: user + system), the steps it missed and the
  rounds it made a second;
- the packets the links' classes delivered a second.

Whichever of the two is near its limit -- the driver at a core, or the machine busy --
is what limits the router.  Needs root and a C compiler.
"""

from __future__ import annotations

import time

from ratelimit import service
from ratelimit.driver import follow
from ratelimit.driver.steps import traced_links
from ratelimit.kernel.counters import FlowTable
from ratelimit.kernel.executor import Executor
from ratelimit.plan.compile import compile_plan
from ratelimit.profiles.traced import load_all
from ratelimit.state import records

from . import blast, procfs
from .common import BenchError, wait_until
from .shaped_load import FIRST_PORT, FRAME_BYTES, PACE, Path3, SINK, finish_senders, read, start_senders

LOAD = 1.0  # offered / each link's mean capacity


def measure_row(links: int, queues: int, scale: float, trace: str, queue: str, *, step_ms: int = 100,
                warm_s: float = 8.0, window_s: float = 20.0) -> dict:
    """One *beside* row (see the module's docstring): ``links`` following ``trace`` at
    ``scale``, each link's queue ``queue``."""
    sender_exe = blast.compiled(PACE)
    if sender_exe is None:
        raise BenchError("pace.c: no C compiler (apt-get install gcc)")
    with Path3(queues) as path:
        req = service.make_request("lan", netns=path.router, hosts=SINK,
                                   ports=f"{FIRST_PORT}-{FIRST_PORT + links - 1}", direction="dest", trace_down=trace,
                                   trace_scale=str(scale), queue=queue, bandwidth="100gbit", queues=str(queues))
        t0 = time.monotonic()
        service.apply(req, follow=False)
        setup_s = time.monotonic() - t0
        try:
            req = records.load(path.router, "lan").request
            plan = compile_plan(req)
            traced = traced_links(plan, load_all(req))
            mean_bytes_s = sum(link.capacity.bytes(0, 60_000) for link in traced) / 60  # over a minute
            pps = LOAD * mean_bytes_s / FRAME_BYTES
            pid = follow.start(path.router, "lan", step_ms)
            table = FlowTable.of(plan)
            run_s = warm_s + window_s + 30  # the links' first packets take seconds at 40,000
            senders = start_senders(path, sender_exe, links, pps, run_s)
            try:
                with Executor(path.router) as ex:
                    wait_until(lambda: sum(1 for p in read(ex, table)[1]["packets"][:links] if p) > 0.99 * links,
                               60, f"{links:,} links' first packets", every_s=0.5)
                    time.sleep(warm_s)
                    c0, d0, s0, (t_0, b0) = procfs.ticks(), procfs.times_s(pid)[:2], \
                        follow.read_status(path.router, "lan"), read(ex, table)
                    time.sleep(window_s)  # the window
                    c1, d1, s1, (t_1, b1) = procfs.ticks(), procfs.times_s(pid)[:2], \
                        follow.read_status(path.router, "lan"), read(ex, table)
            finally:
                outs = finish_senders(senders, run_s)
        finally:
            follow.stop(path.router, "lan")
            service.clean("lan", path.router)
    span = t_1 - t_0
    used = procfs.shares(c0, c1)
    sent = [o.split() for o, _ in outs]
    return {"kind": "beside", "links": links, "queues": queues, "scale": scale, "step_ms": step_ms,
            "setup_s": round(setup_s, 1), "window_s": round(span, 2), "offered_pps": round(pps),
            "delivered_pps": round(sum(b1["packets"][i] - b0["packets"][i] for i in range(links)) / span),
            "cpu": used, "driver_cpu": round((sum(d1) - sum(d0)) / span, 4),
            "driver_user": round((d1[0] - d0[0]) / span, 4), "driver_system": round((d1[1] - d0[1]) / span, 4),
            "stepper": s1.get("stepper"), "missed_per_s": round((s1["missed"] - s0["missed"]) / span, 2),
            "rounds_per_s": round((s1["rounds"] - s0["rounds"]) / span, 2), "round_ms": s1.get("round_ms"),
            "sender_errors": sum(int(s[1]) for s in sent), "sender_late_wakeups": sum(int(s[3]) for s in sent)}
