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

**A rise is held by the gate.**  HTB charges a packet after sending it, in time at the
rate in force, and a change keeps what a class owes: a class that sent a packet at a low
rate may not send again for that packet's time at that rate, whatever its new rate (and
the debt it shows in a dump is that of its last packet, not what is left of it).  At a
10:1 rise that costs a link up to nine packets at the new rate (measured: 3.6% of the
bytes of a 2 s / 2 s square wave on 100 links).  So a link with a window ``RISE`` times
this one's rate or more coming within the time one of its packets takes at this rate (at most
``LOOKAHEAD`` windows) is *held*: its class already gets the highest rate coming, and its
gate, a token bucket that charges a packet before it sends it, passes this window's rate;
when the rise comes the gate opens and the class owes only a packet's time at the new
rate.  A token bucket refills its bucket, one frame, whenever it is changed, so a gate set
to hold lets out a frame at once, of which the link was due one of its own packets: the
rest (nothing for full-size packets, measured: it comes out even with HTB's debt) is
counted and paid back after the hold.  So a rise is held only where HTB's debt would be the
larger (``CHANGE_GAIN`` of a packet times ``peak / rate - 1``): every rise of ``RISE`` or
more for full-size packets, a rise of 14 times or more for 202-byte ones; a rise not held is
paid for as a change (below).  A held
link's gate keeps its rate while the windows' rates stay within ``RISE`` of it: changing it
would refill its bucket each step (up to a frame beyond the rate each time), so what it
passes beyond or short of each window's rate is counted and paid back like a change.  A
smaller rise is not held but paid for as a change (below): on a cellular trace whose steps
vary by some 12%, holding every rise of 25% held a third of the links at any moment and
changed their gates every other step (docs/traces-notes.md, section 5).

**A change is paid for.**  HTB sends a packet at the start of the time it charges for it,
so a backlogged link runs between none and one packet ahead of its capacity.  When its rate
changes from ``r_old`` to ``r`` the packet in hand is charged at ``r_old``, so the lead
moves by what is left of it times ``1 - r / r_old``: about ``CHANGE_GAIN`` of a packet
times that, on average (a 10:1 fall: 0.45 packet more than the capacity).  A held rise
gains the same way as the gate opens (the packet the bucket was saving up for goes at
once: ``1 - r_held / r``), and a gate that shuts lets out the frame its bucket holds
(``SHUT_GAIN``).  The driver counts each (``Traced.ahead_bytes``) in the window before the
change when it can (a fall, a shut) or in the window of it (an opening), and pays it back
from the class rates of that window and the next, by at most ``PAYBACK`` of each; less
than ``PAY_LEAST`` is left owing until it adds up.  A change that lands late (or early) is
paid for too: the driver says when its round began and how long it took
(``Stepper.landed``), each change is taken to land at its place in the round, and a link
that ran at its old rate for that long is owed (or owes) the difference.

**In the link's own packets.**  What is in hand at a change, and what HTB owes at a rise,
is one of the link's packets, not a full frame: a link of 200-byte datagrams is at most
200 bytes ahead, and a gate that holds it lets out a frame of 1,514 bytes, seven of them,
at once.  The driver learns each link's packets from its class's counters (``learn``:
bytes over packets since the last reading) and counts in them; a link it has not learnt
yet (or that sent too few packets to tell) counts in full frames, which is exact for the
full-size packets a backlogged download sends (docs/traces-notes.md, section 9).

A link is found in the plan, never in the kernel: its class and gate are the plan's
operations for it (``compile``), so a plan built in other handles (make-before-break) is
followed in those.
"""

import dataclasses
import itertools
from dataclasses import dataclass

RISE = 2.0  # a coming window this many times this one's rate, or more, is a rise the gate holds
LOOKAHEAD = 10  # the most windows a link looks ahead for a rise
CHANGE_GAIN = 0.5  # of a packet times 1 - r / r_old: what a change of rate lets out beyond the capacity
SHUT_GAIN = 1.0  # of a full frame: what a gate lets out as it shuts
PAYBACK = 0.5  # the most of a window's rate a class gives (or gets) to pay back what a change let out
PAY_LEAST = 1 / 16  # of a packet: less is left owing (each payment is a change, and a change that lands late owes again)
LEARN_PACKETS = 8  # the fewest packets a link sends between two readings for ``learn`` to take their size

from ..plan import gate
from ..traces.capacity import ScheduleCapacity, TraceCapacity
from ..plan.compile import link_flows, link_rates_of
from ..traces.phases import identity, link_phase_ms
from ..plan.ops import Change, HtbClass, NetemQdisc, TbfQdisc
from ..traces.tracespec import SIDES
from ..plan.validate import checked_layout


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
    rates: object  # rate -> (guaranteed, ceil, burst) of its class (``compile.link_rates_of``)
    layer: object
    offset_ms: int = 0  # its cohort's start after the plan's first
    rate_bps: int | None = None  # the class rate last set (None: not known)
    gate_bps: int | None = None  # the gate's rate as last set: OPEN_BPS, SHUT_BPS or a held rate (None: not known)
    ahead_bytes: float = 0.0  # what changes let out beyond the capacity (below 0: short of it), not yet paid back
    counted: int | None = None  # the window whose coming change is counted in ``ahead_bytes``
    coming: list = dataclasses.field(default_factory=list)  # the rates of windows ``coming_k``, ``coming_k`` + 1, ...
    coming_k: int = 0
    stage: NetemQdisc | None = None  # its delay stage under the gate, as the plan builds it (``compile._stage``)
    stage_sent: tuple | None = None  # (delay_us, loss_pct) last set on the stage (None: not known)
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
        """The class rate for the plan's window (0: no capacity, the gate shuts).  The
        capacity's units before its end are kept for the next window's start."""
        t0_ms, t1_ms = t0_ms - self.offset_ms, t1_ms - self.offset_ms
        cap, (edge_ms, units) = self.capacity, self.edge
        u0 = units if edge_ms == t0_ms else cap.units_before(t0_ms)
        u1 = cap.units_before(t1_ms)
        self.edge = (t1_ms, u1)
        return self.to_class(cap.bytes_of(u1 - u0) * 8000 / (t1_ms - t0_ms))

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
        own = self.stage.params
        params = dataclasses.replace(own, delay_us=own.delay_us if side.delay_us is None else side.delay_us,
                                     loss_pct=own.loss_pct if side.loss_pct is None else side.loss_pct)
        return dataclasses.replace(self.stage, params=params)

    def gate_at(self, rate_bps: int) -> TbfQdisc:
        return dataclasses.replace(self.gate, rate_bps=rate_bps)

    def klass_at(self, rate_bps: int) -> HtbClass:
        guaranteed, ceil, burst = self.rates(rate_bps)
        return self.klass.with_rates(guaranteed, ceil, burst)


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
    first = min((c.trace.started_ms or 0 for c in req.cohorts if c.trace is not None), default=0)
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
        self.reopens = False  # whether the last ``changes`` opens a shut gate (an outage ends)

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
        reopens = False
        rows = self._windows.rows(k, 1 + LOOKAHEAD) if self._windows else itertools.repeat(None)
        for link, rates in zip(self.links, rows):
            was_rate, was_gate = link.rate_bps, link.gate_bps
            if rates is None:
                rates = link.upcoming(k, 1 + LOOKAHEAD, step_ms)
            rate = rates[0]
            if rate == 0:
                klass, gate_bps = None, SHUT
                link.ahead_bytes = 0.0  # an outage: nothing owed is worth keeping
            else:
                frame = link.gate.burst_bytes
                packet = link.packet_bytes or frame
                ahead = min(LOOKAHEAD, -(-int(packet) * 8000 // (rate * step_ms)))
                nxt, peak = rates[1], max(rates[1:1 + ahead])
                if peak >= RISE * rate and CHANGE_GAIN * packet * (peak / rate - 1) > frame - packet:
                    klass, gate_bps = peak, rate
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
                reopens = reopens or was_gate == SHUT
                last = opening if gate_bps == OPEN else closing
                last.append(Change.of(link.gate_at(gate_bps)))
                link.gate_bps = gate_bps
            before = _passing_bps(was_rate, was_gate) if last is not None else None
            if before is not None and before != (after := _passing_bps(link.rate_bps, link.gate_bps)):
                sent.append((link, before, after, last, len(last) - 1))  # it passes ``after`` once ``last`` landed
        stages = self._stages(k, resend)
        ops = stages + closing + classes + opening
        at = {id(closing): len(stages), id(classes): len(stages) + len(closing),
              id(opening): len(stages) + len(closing) + len(classes)}
        self._sent = [(link, old, new, at[id(where)] + i, len(ops)) for link, old, new, where, i in sent]
        self.reopens = reopens
        return tuple(ops)

    def _stages(self, k: int, resend: bool) -> list:
        """The delay stages that change in step ``k`` (a schedule's delay and loss, in force
        at the window's middle: a step's edge is met within half a window)."""
        out = []
        for link in self._staged:
            stage = link.stage_at((k + 0.5) * self.step_ms)
            if stage is not None and (resend or (stage.params.delay_us, stage.params.loss_pct) != link.stage_sent):
                out.append(Change(stage))
                link.stage_sent = (stage.params.delay_us, stage.params.loss_pct)
        return out

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


def now_bps(req, now_ms: float, step_ms: int) -> dict:
    """The class rate each traced link of ``req`` (a record's request) should have in the step
    of ``now_ms``, by (direction, host as text or None, port): what ``--stats`` shows as the
    trace's rate now beside the driver's state.  Reads the trace files (StateError if one
    changed)."""
    from ..plan.compile import compiled
    from ..profiles.traced import load_all
    loaded = load_all(req)
    starts = [c.trace.started_ms for c in req.cohorts if c.trace is not None]
    if None in starts:
        return {}
    k = max(0, int((now_ms - min(starts)) // step_ms))
    return {(link.direction, None if link.host is None else str(link.host), link.port):
            link.rates_from(k, 1, step_ms)[0] for link in traced_links(compiled(req), loaded)}
