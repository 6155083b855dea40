"""A traced cell's steps, pure: the class its users share follows a trace or a schedule.

A traced cell (``spec.model.Cell.trace``) is one class under its tree's pool, held to its
capacity, with a gate between it and its users' group (``plan.groups.cell_group``).  In
step ``k`` (the window ``[k x step_ms, (k + 1) x step_ms)`` of the plan's time, as
``steps``) its class gets the window's average capacity as rate and ceiling, and its gate
shuts while a window has none, as a link's does (``plan.gate``: an HTB class at a few bit/s
would owe a minute for one packet).  Its users' own classes and queues never change: each
keeps its cap, and they share what the cell's class lets through by HTB's turns.

A cell carries many packets a window, so none of a link's rules for its few packets
(``steps``: held rises, spans, payments) is needed: a backlogged class holds no tokens
when its rate changes.  A gated one does: while its gate is shut, and in the window it
opens in, its class has one frame of burst, so it does not burst 10 ms of its rate when
the gate opens.  Why: docs/design.md, "Cells".

For example, a cell following a square wave of 8 and 4 Mbit/s a second each has its class
at 8 Mbit/s for the first ten steps of 100 ms, then at 4 Mbit/s for ten.
"""

from dataclasses import dataclass

from ..plan import gate
from ..plan.groups import cell_rates
from ..plan.ops import Change
from ..plan.compile import compiled
from ..plan.shaping import HtbClass, TbfQdisc
from ..plan.validate import checked_layout
from ..profiles.traced import load_all
from ..traces.capacity import ScheduleCapacity, TraceCapacity
from ..traces.tracespec import SIDES
from .steps import window_bps


@dataclass
class TracedCell:
    """One traced cell in one direction: its class and gate as the plan builds them, what it
    follows, and what the kernel was last told."""

    cell: str
    direction: str  # "dest" (down) or "source" (up)
    klass: HtbClass
    gate: TbfQdisc
    capacity: object  # capacity.TraceCapacity or ScheduleCapacity
    source: object  # tracespec.Source
    layer: object
    offset_ms: int = 0  # its start after the plan's first
    sent: tuple | None = None  # the class's (rate, burst) last set (None: not known)
    gate_bps: int | None = None  # OPEN_BPS or SHUT_BPS as last set (None: not known)
    edge: tuple = (None, 0)  # (its time, the capacity's units before it) of the last window's end

    def __post_init__(self):
        self.to_class = gate.class_rate_of(self.source, self.layer)

    def klass_at(self, rate_bps: int, burst_bytes: int) -> HtbClass:
        return self.klass.with_rates(rate_bps, rate_bps, burst_bytes)


def traced_cells(plan, loaded) -> list[TracedCell]:
    """Every traced cell of ``plan`` in every direction it follows a trace, in plan order;
    ``loaded`` maps a source's path to its trace or schedule (``steps.traced_links``)."""
    req = plan.request
    if req.mode != "shape":
        return []
    lay = checked_layout(req)
    first = req.traced_start_ms or 0
    classes = {(op.dev, op.classid): op for op in plan.ops if type(op) is HtbClass}
    gates = {(op.dev, op.parent): op for op in plan.ops if type(op) is TbfQdisc}
    devices = {flow.direction: flow.dev for flow in plan.flows}
    out = []
    for k, span in enumerate(lay.spans):
        c = span.cohort
        if c.cell is None or c.cell.trace is None or span.group_span != k:
            continue
        spec = c.cell.trace
        for direction in ("dest", "source"):
            src = c.cell.traced(direction)
            if src is None or direction not in devices:
                continue
            followed = loaded[src.path]
            if src.kind == "trace":
                capacity = TraceCapacity(followed, spec.scale, 0, src.loop)
            else:
                capacity = ScheduleCapacity(followed, SIDES[direction], 0, spec.scale)
            group = lay.group_class_of(span, 0)
            dev = devices[direction]
            out.append(TracedCell(c.cell.name, direction, classes[dev, group], gates[dev, group], capacity, src,
                                  c.link, (spec.started_ms or 0) - first))
    return out


class CellSteps:
    """The changes of each step for the traced cells of one plan (``traced_cells``)."""

    def __init__(self, cells: list[TracedCell], step_ms: int):
        self.cells, self.step_ms = cells, step_ms
        self.reopened: frozenset[str] = frozenset()  # the devices where the last ``changes`` opens a shut gate

    def changes(self, k: int, resend: bool = False) -> tuple:
        """The operations that set every traced cell to step ``k``: the gates that shut, the
        classes' new rates, then the gates that open.  ``resend``: all of them."""
        closing, classes, opening = [], [], []
        reopened = set()
        for cell in self.cells:
            rate = window_bps(cell, k * self.step_ms, (k + 1) * self.step_ms)
            shut = rate == 0
            frame = cell.klass.quantum_bytes
            if shut:  # the rate it had, and a frame of burst: it saves nothing up while its gate is shut
                sent = ((cell.sent or (cell.klass.rate_bps,))[0], frame)
            elif cell.gate_bps == gate.SHUT_BPS:  # the window it opens in: still a frame, the class's burst after it
                sent = (rate, frame)
            else:
                sent = (rate, cell_rates(rate, frame)[2])
            if resend or sent != cell.sent:
                classes.append(Change.of(cell.klass_at(*sent)))
                cell.sent = sent
            gate_bps = gate.SHUT_BPS if shut else gate.OPEN_BPS
            if resend or gate_bps != cell.gate_bps:
                if cell.gate_bps == gate.SHUT_BPS:
                    reopened.add(cell.gate.dev)
                (closing if shut else opening).append(Change.of(gate.shut(cell.gate) if shut else cell.gate))
                cell.gate_bps = gate_bps
        self.reopened = frozenset(reopened)
        return tuple(closing + classes + opening)

    def forget(self) -> None:
        """What the kernel holds is no longer known (a change failed part way)."""
        for cell in self.cells:
            cell.sent = cell.gate_bps = None

    def shut_count(self) -> int:
        return sum(1 for cell in self.cells if cell.gate_bps == gate.SHUT_BPS)



def capacity_bps(cells: list[TracedCell], t0_ms: float, t1_ms: float) -> dict:
    """Each traced cell's capacity over the plan's window ``[t0_ms, t1_ms)``, as its class
    rate, by (cell, direction): what the read-outs put beside what its users delivered."""
    return {(cell.cell, cell.direction): window_bps(cell, t0_ms, t1_ms) for cell in cells}


def now_bps(req, now_ms: float, step_ms: int) -> dict:
    """``capacity_bps`` of ``req``'s traced cells (a record's request) in the step of
    ``now_ms``: what ``--stats`` shows beside their users' sums.  Reads the trace files
    (StateError if one changed)."""
    if req.traced_start_ms is None:
        return {}
    loaded = load_all(req)
    k = max(0, int((now_ms - req.traced_start_ms) // step_ms))
    return capacity_bps(traced_cells(compiled(req), loaded), k * step_ms, (k + 1) * step_ms)
