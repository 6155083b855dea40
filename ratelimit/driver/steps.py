"""A traced plan's steps, pure: each traced link's rate in each step, and the changes that set it.

Time is the plan's: 0 is its start (``Request.traced_start_ms``, wall clock; a cohort kept
from an earlier apply keeps its own start, ``Traced.offset_ms`` after a new one's) and step
``k`` is the window ``[k x step_ms, (k + 1) x step_ms)``.  In step ``k`` a traced link's
class gets the window's average capacity (``capacity``; from the link's phase, ``phases``),
as the HTB rate that passes it (``gate.class_rate_bps``), and its gate shuts when the window
has none (``gate``).  ``Stepper.changes(k)`` gives the ``Change`` operations that take the
kernel there from the step before: only what differs, or every traced link's class and gate
(``resend``: after a start, a restart or a new plan, when what the kernel holds is not known).

Four rules keep a backlogged link at its capacity across changes:

* **A rise is held by the gate**: when the next window's rate is ``RISE`` times this one's
  or more, and HTB's debt at the rise would be more than what a gate lets out as it is set
  (``CHANGE_GAIN``), its class already gets the coming rate and its gate passes this
  window's; the gate opens when the rise comes.
* **A packet longer than a window is charged its span**: the class rate is the one at which
  a packet is charged the time the coming windows take to carry it (``_span_bps``).
* **A change is paid for**: what a change lets out beyond the capacity (or short of it) is
  counted in ``Traced.ahead_bytes`` and paid back from the class rates, at most ``PAYBACK``
  of a window's rate.
* **In the link's own packets**: both count in the link's packets, learnt from its class's
  counters (``Stepper.learn``), else in full frames.

Why, and what each costs: docs/design.md, "Held rises", "Spans", "Paid changes" and "In
the link's own packets".  For example, a link of full-size packets at 1 Mbit/s whose next
window is at 10 Mbit/s gets its class at 10 Mbit/s and its gate at 1 Mbit/s, and its gate
opens in the next step.

A link is found in the plan, never in the kernel: its class and gate are the plan's
operations for it (``compile``), so a plan built in other handles (make-before-break) is
followed in those.
"""

import dataclasses
import itertools
from dataclasses import dataclass

from ..plan import gate
from ..plan.compile import compiled, link_flows
from ..plan.groups import link_rates_of
from ..plan.ops import Change
from ..plan.shaping import HtbClass, NetemQdisc, TbfQdisc
from ..plan.validate import checked_layout
from ..profiles.traced import load_all
from ..traces.capacity import ScheduleCapacity, TraceCapacity
from ..traces.phases import identity, link_phase_ms
from ..traces.tracespec import SIDES

RISE = 2.0  # a coming window this many times this one's rate, or more, is a rise the gate holds
SPAN_WINDOWS = 20  # the windows a packet's span is looked for in (docs/design.md, "Spans")
CHANGE_GAIN = 0.5  # of a packet times 1 - r / r_old: what a change of rate lets out beyond the capacity
SHUT_GAIN = 1.0  # of a full frame: what a gate lets out as it shuts
PAYBACK = 0.5  # the most of a window's rate a class gives (or gets) to pay back what a change let out
PAY_LEAST = 1 / 16  # of a packet: less is left owing (each payment is a change, and a change that lands late owes again)
LEARN_PACKETS = 8  # the fewest packets a link sends between two readings for ``learn`` to take their size


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
    rates: object  # rate -> (guaranteed, ceil, burst) of its class (``groups.link_rates_of``)
    layer: object
    offset_ms: int = 0  # its cohort's start after the plan's first
    rate_bps: int | None = None  # the class rate last set (None: not known)
    gate_bps: int | None = None  # the gate's rate as last set: OPEN_BPS, SHUT_BPS or a held rate (None: not known)
    ahead_bytes: float = 0.0  # what changes let out beyond the capacity (below 0: short of it), not yet paid back
    counted: int | None = None  # the window whose coming change is counted in ``ahead_bytes``
    coming: list = dataclasses.field(default_factory=list)  # the rates of windows ``coming_k``, ``coming_k`` + 1, ...
    coming_k: int = 0
    stage: NetemQdisc | None = None  # its delay stage under the gate, as the plan builds it (``compile._stage``)
    stage_sent: object = None  # the LinkParams last set on the stage (None: not known)
    edge: tuple = (None, 0)  # (the link's time, the capacity's units before it) of the last window's end
    packet_bytes: float | None = None  # its packets as its class meters them (``Stepper.learn``; None: full frames)
    seen: tuple | None = None  # its class's (bytes, packets) at the last reading

    def __post_init__(self):
        self.to_class = gate.class_rate_of(self.source, self.layer)

    @property
    def shut(self) -> bool:
        return self.gate_bps == gate.SHUT_BPS

    def gain(self, ahead_bytes: float) -> None:
        """Count what a change lets out beyond the capacity (below 0: short of it), at most
        two frames either way."""
        most, ahead = 2 * self.gate.burst_bytes, self.ahead_bytes + ahead_bytes
        self.ahead_bytes = most if ahead > most else -most if ahead < -most else ahead

    def delivering_bps(self) -> int | None:
        """The rate the link passes as last set: its gate's when shut or held, else its class's."""
        return _passing_bps(self.rate_bps, self.gate_bps)

    def rates_from(self, k: int, count: int, step_ms: int) -> list[int]:
        """The class rates of windows ``k`` .. ``k + count - 1``."""
        return self.upcoming(k, count, step_ms)[:count]

    def upcoming(self, k: int, count: int, step_ms: int) -> list[int]:
        """The class rates of windows from ``k``, at least ``count`` of them (the list kept,
        so that each window is computed once while the steps follow each other)."""
        rates, skip = self.coming, k - self.coming_k
        if skip < 0:
            rates.clear()
        elif skip:
            del rates[:skip]
        self.coming_k = k
        for i in range(k + len(rates), k + count):
            rates.append(self.window_bps(i * step_ms, (i + 1) * step_ms))
        return rates

    def window_bps(self, t0_ms: float, t1_ms: float) -> int:
        """``window_bps`` of this link."""
        return window_bps(self, t0_ms, t1_ms)

    @property
    def staged(self) -> bool:
        """Whether its delay stage follows a schedule (a trace's keeps the link's own delay)."""
        return self.stage is not None and self.source.kind == "schedule"

    def stage_at(self, t_ms: float) -> NetemQdisc | None:
        """A schedule's delay stage at the plan's time ``t_ms``: the step's delay and loss over
        the link's own (None: not ``staged``)."""
        if not self.staged:
            return None
        side = self.capacity.at(t_ms - self.offset_ms).side(SIDES[self.direction])
        params = self.stage.params.merged(  # None: the link's own; a loss model or a percentage: the one loss
            delay_us=side.delay_us, loss_model=side.loss_model, loss_pct=None if side.loss_model else side.loss_pct)
        return dataclasses.replace(self.stage, params=params)

    def gate_at(self, rate_bps: int) -> TbfQdisc:
        return dataclasses.replace(self.gate, rate_bps=rate_bps)

    def klass_at(self, rate_bps: int) -> HtbClass:
        guaranteed, ceil, burst = self.rates(rate_bps)
        return self.klass.with_rates(guaranteed, ceil, burst)


def window_bps(follower, t0_ms: float, t1_ms: float) -> int:
    """The class rate for the plan's window of a ``follower`` (a traced link or cell: its
    ``capacity``, ``offset_ms``, ``to_class`` and ``edge``); 0: no capacity, the gate shuts.
    The capacity's units before the window's end are kept in ``edge`` for the next one."""
    t0_ms, t1_ms = t0_ms - follower.offset_ms, t1_ms - follower.offset_ms
    cap, (edge_ms, units) = follower.capacity, follower.edge
    u0 = units if edge_ms == t0_ms else cap.units_before(t0_ms)
    u1 = cap.units_before(t1_ms)
    follower.edge = (t1_ms, u1)
    return follower.to_class(cap.bytes_of(u1 - u0) * 8000 / (t1_ms - t0_ms))


def _span_bps(rates, packet: float, step_ms: int) -> int:
    """The class rate that charges a packet the time the capacity takes to carry it from the
    middle of window ``rates[0]`` on (each window's at its rate ``rates[i]``; the average of
    them all when they carry less).

    >>> _span_bps([40_000, 40_000, 400_000], 1514, 100)  # 150 ms at 40 kbit/s, then 15 ms at 400
    73282
    """
    need, t_ms = packet * 8000, 0.0  # bit-ms still to carry, and the time they took
    for i, r in enumerate(rates):
        width = step_ms / 2 if i == 0 else step_ms
        if r * width >= need:
            return max(8, round(packet * 8000 / (t_ms + need / r)))
        need, t_ms = need - r * width, t_ms + width
    return max(8, round((packet * 8000 - need) / t_ms))


def _held(gate_bps: int | None) -> bool:
    """Whether a gate set at ``gate_bps`` holds a rise (a rate of its own, not open or shut)."""
    return gate_bps not in (None, gate.OPEN_BPS, gate.SHUT_BPS)


def _passing_bps(rate_bps: int | None, gate_bps: int | None) -> int | None:
    """What a link passes with its class at ``rate_bps`` and its gate at ``gate_bps``
    (None: not known)."""
    if gate_bps is None or rate_bps is None and gate_bps == gate.OPEN_BPS:
        return None
    if gate_bps == gate.SHUT_BPS:
        return 0
    return gate_bps if gate_bps != gate.OPEN_BPS else rate_bps


def traced_links(plan, loaded) -> list[Traced]:
    """Every traced link of ``plan`` in every direction it has, in plan order; ``loaded``
    maps a source's path to its ``tracefile.Trace`` or ``schedulefile.Schedule``."""
    req = plan.request
    if req.mode != "shape" or not any(c.trace is not None for c in req.cohorts):
        return []
    lay = checked_layout(req)
    cohorts = {c.name: c for c in req.cohorts}
    first = req.traced_start_ms or 0  # 0: a request not applied yet (its cohorts have no start)
    classes = {(op.dev, op.classid): op for op in plan.ops if type(op) is HtbClass}
    gates = {(op.dev, op.parent): op for op in plan.ops if type(op) is TbfQdisc}
    stages = {(op.dev, op.parent): op for op in plan.ops if type(op) is NetemQdisc}
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
        params = c.side(flow.direction)
        out.append(Traced(c.name, flow.host, flow.port, flow.direction, classes[flow.dev, flow.classid],
                          gates[flow.dev, flow.classid], capacity, src, phase,
                          link_rates_of(req, lay, c, params, traced=True), c.link, (spec.started_ms or 0) - first,
                          stage=stages.get((flow.dev, gates[flow.dev, flow.classid].handle | 1))))
    return out


class Stepper:
    """The changes of each step for the traced links of one plan (``traced_links``)."""

    def __init__(self, links: list[Traced], step_ms: int):
        if step_ms <= 0:
            raise ValueError(f"step {step_ms!r} ms is not positive")
        self.links, self.step_ms = links, step_ms
        self._staged = [link for link in links if link.staged]
        self._windows = None  # the windows of the links that follow a trace, all at once
        if any(type(link.capacity) is TraceCapacity for link in links):
            from ..traces.windows import TraceWindows  # numpy: only a driver of traces pays for its import
            self._windows = TraceWindows(links, step_ms)
        self._sent: list = []
        self.learnt = 0  # links whose packets ``learn`` knows
        self.reopened: frozenset[str] = frozenset()  # the devices where the last ``changes`` opens a shut gate

    def window(self, k: int) -> tuple[int, int]:
        return k * self.step_ms, (k + 1) * self.step_ms

    def changes(self, k: int, resend: bool = False) -> tuple:
        """The operations that set every traced link to step ``k``: the gates that shut or
        hold first, then the classes' new rates, then the gates that open (a class has its
        rate before it sends again; a held link never runs at its class's rate early).
        ``resend``: every link's class and gate, whatever was set before."""
        step_ms, step_s = self.step_ms, self.step_ms / 1000
        OPEN, SHUT = gate.OPEN_BPS, gate.SHUT_BPS
        closing, classes, opening = [], [], []
        sent = self._sent = []
        reopened = set()
        rows = self._windows.rows(k, SPAN_WINDOWS) if self._windows else itertools.repeat(None)
        for link, rates in zip(self.links, rows):
            was_rate, was_gate = link.rate_bps, link.gate_bps
            if rates is None:
                rates = link.upcoming(k, SPAN_WINDOWS, step_ms)
            rate = rates[0]
            if rate == 0:
                klass, gate_bps = None, SHUT
                link.ahead_bytes = 0.0  # an outage: nothing owed is worth keeping
            else:
                frame = link.gate.burst_bytes
                packet = link.packet_bytes or frame
                nxt = rates[1]
                if packet * 8000 > rate * step_ms:  # a packet takes longer than the window: its span's rate
                    klass, gate_bps = _span_bps(rates, packet, step_ms), OPEN
                elif nxt >= RISE * rate and CHANGE_GAIN * packet * (nxt / rate - 1) > frame - packet:
                    klass, gate_bps = nxt, rate
                    if not resend and _held(was_gate) and \
                            rate / RISE <= was_gate <= rate * RISE:  # held already: its gate stays, the difference is owed
                        gate_bps = was_gate
                        link.gain((was_gate - rate) * step_s / 8)
                    else:  # the gate's bucket refills: a frame at once, one packet of it due
                        link.gain(frame - packet)
                else:
                    if _held(was_gate):  # a held rise: the gate opens now
                        link.gain(CHANGE_GAIN * packet * (1 - was_gate / rate))
                    if nxt != rate and k != link.counted:  # the change after this window, paid before it
                        link.gain(SHUT_GAIN * frame if nxt == 0 else CHANGE_GAIN * packet * (1 - nxt / rate))
                        link.counted = k
                    most = PAYBACK * rate
                    pay = link.ahead_bytes * 8 / step_s if abs(link.ahead_bytes) >= PAY_LEAST * packet else 0.0
                    pay = -most if pay < -most else most if pay > most else pay
                    klass, gate_bps = round(rate - pay), OPEN
                    link.ahead_bytes -= pay * step_s / 8
            last = None  # the list that holds the link's last operation of the step
            if klass is not None and (resend or klass != was_rate):
                classes.append(Change.of(link.klass_at(klass)))
                link.rate_bps, last = klass, classes
            if resend or gate_bps != was_gate:
                if was_gate == SHUT:
                    reopened.add(link.gate.dev)
                last = opening if gate_bps == OPEN else closing
                last.append(Change.of(link.gate_at(gate_bps)))
                link.gate_bps = gate_bps
            before = _passing_bps(was_rate, was_gate) if last is not None else None
            if before is not None and before != (after := _passing_bps(link.rate_bps, link.gate_bps)):
                sent.append((link, before, after, last, len(last) - 1))  # it passes ``after`` once ``last`` landed
        stages = stage_changes(self._staged, k, self.step_ms, resend)
        ops = stages + closing + classes + opening
        at = {id(closing): len(stages), id(classes): len(stages) + len(closing),
              id(opening): len(stages) + len(closing) + len(classes)}
        self._sent = [(link, old, new, at[id(where)] + i, len(ops)) for link, old, new, where, i in sent]
        self.reopened = frozenset(reopened)
        return tuple(ops)

    @property
    def reopens(self) -> bool:
        """Whether the last ``changes`` opens a shut gate (an outage ends): the driver sends
        it on time, and kicks the devices of ``reopened`` once it landed (``plan.gate``)."""
        return bool(self.reopened)

    def learn(self, nbytes, npackets) -> None:
        """Each link's packets from its class's counters (``nbytes[i]``, ``npackets[i]``: of
        ``links[i]``): the bytes over the packets it sent since the last reading, when it sent
        ``LEARN_PACKETS`` or more (at most a full frame: a gate passes no larger packet)."""
        learnt = 0
        for link, b, n in zip(self.links, nbytes, npackets):
            if link.seen is not None:
                db, dn = b - link.seen[0], n - link.seen[1]
                if dn >= LEARN_PACKETS and db > 0:
                    link.packet_bytes = min(float(link.gate.burst_bytes), db / dn)
                elif dn < 0 or db < 0:  # counters of another class (a plan changed under us): start again
                    link.packet_bytes = None
            link.seen = (b, n)
            learnt += link.packet_bytes is not None
        self.learnt = learnt

    def take_sent(self) -> list:
        """What the last ``changes`` changes in what the links pass, for ``landed`` (taken
        before the next step is made)."""
        sent, self._sent = self._sent, []
        return sent

    def landed(self, first_ms: float, round_ms: float, sent: list | None = None) -> None:
        """The changes of the last ``changes`` (or those ``take_sent`` took) went out from
        ``first_ms`` after their window began (below 0: before) over ``round_ms``: each link
        owes (or is owed) what it sent at its old rate instead of its new one until its change
        landed, taken at its place in the round."""
        for link, old, new, at, count in self.take_sent() if sent is None else sent:
            link.gain((first_ms + round_ms * (at + 1) / count) / 1000 * (old - new) / 8)

    def forget(self) -> None:
        """What the kernel holds is no longer known (a change failed part way)."""
        for link in self.links:
            link.rate_bps = link.gate_bps = None
            link.stage_sent = None
            link.ahead_bytes = 0.0
            link.counted = None
            link.coming = []

    def shut_count(self) -> int:
        return sum(1 for link in self.links if link.shut)

    def held_count(self) -> int:
        return sum(1 for link in self.links if _held(link.gate_bps))


def stage_changes(staged: list, k: int, step_ms: int, resend: bool) -> list:
    """The delay stages of ``staged`` links (``Traced.staged``) that change in step ``k``: a
    schedule's delay and loss, in force at the window's middle (a step's edge is met within
    half a window)."""
    out = []
    for link in staged:
        stage = link.stage_at((k + 0.5) * step_ms)
        if stage is not None and (resend or stage.params != link.stage_sent):
            out.append(Change(stage))
            link.stage_sent = stage.params
    return out


def now_bps(req, now_ms: float, step_ms: int) -> dict:
    """The capacity of each traced link of ``req`` (a record's request) in the step of
    ``now_ms``, as a class rate (the class itself may differ: a held rise, a payment, a
    span), by (direction, host as text or None, port): what ``--stats`` shows as the
    trace's rate now beside the driver's state.  Reads the trace files (StateError if one
    changed)."""
    loaded = load_all(req)
    if req.traced_start_ms is None:
        return {}
    k = max(0, int((now_ms - req.traced_start_ms) // step_ms))
    return {(link.direction, None if link.host is None else str(link.host), link.port):
            link.rates_from(k, 1, step_ms)[0] for link in traced_links(compiled(req), loaded)}
