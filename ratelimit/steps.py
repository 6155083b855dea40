"""A traced plan's steps, pure: each traced link's rate in each step, and the changes that set it.

Time is the plan's: 0 is the earliest of its traced cohorts' starts (``TraceSpec.started_ms``,
wall clock; a cohort kept from an earlier apply keeps its own, ``offset_ms`` later or
earlier than a new one) and step ``k`` is the window ``[k x step_ms, (k + 1) x step_ms)``.  In step ``k`` a traced
link's class gets the window's average capacity (``capacity``; from the link's phase,
``phases``), as the HTB rate that passes it (``gate.class_rate_bps``), and its gate shuts
when the window has none (``gate``).  ``Stepper.changes(k)`` gives the ``Change``
operations that take the kernel there from the step before: only what differs, or every
traced link's class and gate (``resend``: after a start, a restart or a new plan, when what
the kernel holds is not known).

A link is found in the plan, never in the kernel: its class and gate are the plan's
operations for it (``compile``), so a plan built in other handles (make-before-break) is
followed in those.
"""

import dataclasses
from dataclasses import dataclass

from . import gate
from .capacity import ScheduleCapacity, TraceCapacity
from .compile import link_flows, link_rates
from .phases import identity, link_phase_ms
from .plan import Change, HtbClass, TbfQdisc
from .tracespec import SIDES
from .validate import check


@dataclass
class Traced:
    """One traced link in one direction: its class and gate as the plan builds them, what it
    follows (``capacity``: phase and scale included), and what the kernel was last told."""

    cohort: str
    host: object
    port: int | None
    direction: str  # "dest" (down) or "source" (up)
    klass: HtbClass
    gate: TbfQdisc
    capacity: object  # capacity.TraceCapacity or ScheduleCapacity
    source: object  # tracespec.Source
    phase_ms: int
    rates: object  # rate -> (guaranteed, ceil, burst) of its class (``compile.link_rates``)
    layer: object
    offset_ms: int = 0  # its cohort's start after the plan's first
    rate_bps: int | None = None  # the class rate last set (None: not known)
    shut: bool | None = None  # the gate as last set (None: not known)

    def window_bps(self, t0_ms: float, t1_ms: float) -> int:
        """The class rate for the plan's window (0: no capacity, the gate shuts)."""
        t0_ms, t1_ms = t0_ms - self.offset_ms, t1_ms - self.offset_ms
        return gate.class_rate_bps(self.source, self.capacity.rate_bps(t0_ms, t1_ms), self.layer)

    def klass_at(self, rate_bps: int) -> HtbClass:
        guaranteed, ceil, burst = self.rates(rate_bps)
        return dataclasses.replace(self.klass, rate_bps=guaranteed, ceil_bps=ceil, burst_bytes=burst)


def traced_links(plan, loaded) -> list[Traced]:
    """Every traced link of ``plan`` in every direction it has, in plan order; ``loaded``
    maps a source's path to its ``tracefile.Trace`` or ``schedulefile.Schedule``."""
    req = plan.request
    if req.mode != "shape" or not any(c.trace is not None for c in req.cohorts):
        return []
    lay = check(req)
    cohorts = {c.name: c for c in req.cohorts}
    first = min((c.trace.started_ms or 0 for c in req.cohorts if c.trace is not None), default=0)
    classes = {(op.dev, op.classid): op for op in plan.ops if type(op) is HtbClass}
    gates = {(op.dev, op.parent): op for op in plan.ops if type(op) is TbfQdisc}
    out = []
    for flow in link_flows(req):
        c = cohorts[flow.cohort]
        src = gate.traced(c, flow.direction)
        if src is None:
            continue
        spec = c.trace
        link = identity(c.name, flow.host if flow.host is not None else "others", flow.port)
        phase = link_phase_ms(spec.phase, spec.seed, link, spec.period_ms)
        followed = loaded[src.path]
        if src.kind == "trace":
            capacity = TraceCapacity(followed, spec.scale, phase % src.period_ms, src.loop)
        else:
            capacity = ScheduleCapacity(followed, SIDES[flow.direction], phase % src.period_ms, spec.scale)
        params = c.down if flow.direction == "dest" else c.up
        out.append(Traced(c.name, flow.host, flow.port, flow.direction, classes[flow.dev, flow.classid],
                          gates[flow.dev, flow.classid], capacity, src, phase,
                          _rates(req, lay, c, params), c.link, (spec.started_ms or 0) - first))
    return out


def _rates(req, lay, c, params):
    return lambda rate_bps: link_rates(req, lay, c, params, rate_bps)


class Stepper:
    """The changes of each step for the traced links of one plan (``traced_links``)."""

    def __init__(self, links: list[Traced], step_ms: int):
        if step_ms <= 0:
            raise ValueError(f"step {step_ms!r} ms is not positive")
        self.links, self.step_ms = links, step_ms

    def window(self, k: int) -> tuple[int, int]:
        return k * self.step_ms, (k + 1) * self.step_ms

    def changes(self, k: int, resend: bool = False) -> tuple:
        """The operations that set every traced link to step ``k``: gates shut first, then
        the classes' new rates, then the gates that open (a class has its rate before it
        sends again).  ``resend``: every link's class and gate, whatever was set before."""
        t0, t1 = self.window(k)
        shuts, classes, opens = [], [], []
        for link in self.links:
            rate = link.window_bps(t0, t1)
            if rate == 0:
                if resend or link.shut is not True:
                    shuts.append(Change(gate.shut(link.gate)))
                    link.shut = True
                continue
            if resend or rate != link.rate_bps:
                classes.append(Change(link.klass_at(rate)))
                link.rate_bps = rate
            if resend or link.shut is not False:
                opens.append(Change(link.gate))
                link.shut = False
        return tuple(shuts + classes + opens)

    def forget(self) -> None:
        """What the kernel holds is no longer known (a change failed part way)."""
        for link in self.links:
            link.rate_bps = link.shut = None

    def shut_count(self) -> int:
        return sum(1 for link in self.links if link.shut)
