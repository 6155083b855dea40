"""Backlogged traced links through the driver's steps, simulated: no kernel, no traffic.

    python -m bench.spansim [--links 50] [--seconds 60] [--step 100] [--frame 1514]
                            [--scale 0.002 | --schedule PATH]

Each link (``lte-drive.down`` at ``--scale``, or a schedule, at random phases) always has a
packet of ``--frame`` bytes to send.  ``Stepper.changes`` sets its class and gate at each
step's start; the link sends as HTB and tbf would let it:

- HTB's tokens are time, charged after a send at the rate in force (a change keeps them),
  at most the class's burst time ahead;
- the gate charges before a send, and a change refills its bucket.

It prints the links' delivered bytes against the capacity from 3 s on (the mean, the least,
the most) and the 95th percentile of 1 s windows' errors, in frames.  It is how the span
rule was found (docs/design.md, "Spans"): before it, it read -21% at 0.002 of the trace,
as the kernel did (-20%); it does not model the driver's lateness or the senders.
"""

from __future__ import annotations

import argparse
import bisect
import random

from ratelimit.driver.steps import Stepper, traced_links
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.shaping import HtbClass, TbfQdisc
from ratelimit.profiles.traced import load_all
from ratelimit.service import make_request
from ratelimit.traces import tracespec

WARM_S = 3.0
WINDOWS = 50  # 1 s windows a link, at random offsets


class Link:
    """One backlogged link's HTB class and gate (times in seconds)."""

    def __init__(self, frame: int):
        self.frame_bits = frame * 8
        self.rate = self.gate = None
        self.buffer_s = self.gate_buffer_s = 0.0
        self.tokens_s = self.gate_tokens_s = 0.0
        self.charged_at = self.gate_charged_at = 0.0
        self.sent: list[float] = []

    def set_class(self, rate_bps: int, burst_bytes: int) -> None:
        self.rate, self.buffer_s = rate_bps, burst_bytes * 8 / rate_bps

    def set_gate(self, rate_bps: int, burst_bytes: int) -> None:
        self.gate, self.gate_buffer_s = rate_bps, burst_bytes * 8 / rate_bps
        self.gate_tokens_s = self.gate_buffer_s  # a change refills the bucket

    def next_send(self, now: float) -> float:
        htb = self.charged_at + max(0.0, -self.tokens_s)
        need = self.frame_bits / self.gate
        if need > self.gate_buffer_s * (1 + 1e-9):
            return float("inf")  # larger than the bucket: never passes
        gate = self.gate_charged_at + max(0.0, need - self.gate_tokens_s)
        return max(now, htb, gate)

    def send(self, t: float) -> None:
        self.tokens_s = max(min(self.tokens_s + t - self.charged_at, self.buffer_s) - self.frame_bits / self.rate,
                            -60.0)
        self.gate_tokens_s = min(self.gate_tokens_s + t - self.gate_charged_at, self.gate_buffer_s) - \
            self.frame_bits / self.gate
        self.charged_at = self.gate_charged_at = t
        self.sent.append(t)


def traced_stepper(links: int, step_ms: int, **source) -> Stepper:
    """The driver's steps for ``links`` traced links (a port each, random phases) of a plan
    started at 0; ``source``: ``make_request``'s trace or schedule options (and others)."""
    req = tracespec.stamped(make_request("veth0", hosts="198.18.1.2", ports=f"10000-{10000 + links - 1}",
                                         direction="dest", phase="random", **source), None, 0)
    return Stepper(traced_links(compile_plan(req), load_all(req)), step_ms)


def simulate(links: int, seconds: float, step_ms: int, frame: int, scale: float = 0.002,
             schedule: str | None = None) -> dict:
    source = dict(schedule=schedule) if schedule else dict(trace_down="lte-drive.down", trace_scale=scale)
    stepper = traced_stepper(links, step_ms, **source)
    traced = stepper.links
    for t in traced:
        t.packet_bytes = float(min(frame, t.gate.burst_bytes))  # as the driver learns them
    sims = [Link(frame) for _ in traced]
    by_class = {t.klass.classid: s for t, s in zip(traced, sims)}
    by_gate = {t.gate.parent: s for t, s in zip(traced, sims)}
    for k in range(int(seconds * 1000 / step_ms)):
        t0, t1 = k * step_ms / 1000, (k + 1) * step_ms / 1000
        for change in stepper.changes(k, resend=k == 0):
            op = change.op
            if type(op) is HtbClass:
                by_class[op.classid].set_class(op.ceil_bps, op.burst_bytes)
            elif type(op) is TbfQdisc:
                by_gate[op.parent].set_gate(op.rate_bps, op.burst_bytes)
        stepper.landed(0.0, 0.0)
        for s in sims:
            while (t := s.next_send(t0)) < t1:
                s.send(t)
    rnd, ratios, errors = random.Random(1), [], []
    for t, s in zip(traced, sims):
        cap = t.capacity

        def capacity(a_s, b_s):
            return cap.bytes_of(cap.units_before(b_s * 1000 - t.offset_ms) - cap.units_before(a_s * 1000 - t.offset_ms))
        got = frame * (len(s.sent) - bisect.bisect_left(s.sent, WARM_S))
        ratios.append(got / capacity(WARM_S, seconds))
        for _ in range(WINDOWS):
            w = rnd.uniform(WARM_S, seconds - 1.0)
            got = frame * (bisect.bisect_left(s.sent, w + 1) - bisect.bisect_left(s.sent, w))
            errors.append(abs(got - capacity(w, w + 1)) / frame)
    errors.sort()
    return {"links": links, "seconds": seconds, "step_ms": step_ms, "frame_bytes": frame,
            "source": schedule or f"lte-drive.down x {scale:g}", "mean_ratio": sum(ratios) / len(ratios),
            "least_ratio": min(ratios), "most_ratio": max(ratios),
            "p95_error_1000ms_frames": errors[int(0.95 * len(errors))]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spansim", description=__doc__.splitlines()[0])
    ap.add_argument("--links", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--step", type=int, default=100, help="ms")
    ap.add_argument("--frame", type=int, default=1514, help="bytes")
    ap.add_argument("--scale", type=float, default=0.002, help="of lte-drive.down")
    ap.add_argument("--schedule", help="a schedule's path instead of the trace")
    a = ap.parse_args(argv)
    if a.seconds <= WARM_S + 1:
        ap.error(f"--seconds: {a.seconds:g} is too short (more than {WARM_S + 1:g})")
    r = simulate(a.links, a.seconds, a.step, a.frame, a.scale, a.schedule)
    print(f"{r['source']}, {r['links']} links, {r['frame_bytes']}-byte frames, {r['step_ms']} ms steps, "
          f"{r['seconds']:g} s: mean {r['mean_ratio'] - 1:+.2%} (least {r['least_ratio'] - 1:+.2%}, most "
          f"{r['most_ratio'] - 1:+.2%}); 1 s windows' error p95 {r['p95_error_1000ms_frames']:.2f} frames")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
