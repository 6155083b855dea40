"""The class rates of many traced links' coming windows at once: pure (numpy).

``steps.Traced.upcoming`` gives one link's rates for windows ``k`` .. ``k + count - 1``,
a bisection of its trace and a few float operations per window in Python.  A driver of
thousands of links steps them all every 100 ms, so ``TraceWindows`` does the same for
every link that follows a trace, in one pass of array operations per trace: the same
integers (the same operations in the same order on the same doubles, rounded half to even
as Python's ``round``), which tests/test_tracewindows.py checks against ``upcoming``.
Links that follow a schedule are left to ``upcoming`` (their windows are few and cheap).

The link's time ``t`` of the plan's window edge ``e`` is ``e - offset_ms``, the trace's
time ``u = t + phase_ms``; the opportunities before ``u`` are those of the whole periods
before it and those of the period below it (``capacity.TraceCapacity.units_before``).
Every edge is a whole millisecond here (the step, the phases and the cohorts' starts are).
"""

import numpy as np

from .capacity import TraceCapacity
from .tracefile import PACKET_BYTES


class TraceWindows:
    """The trace-following links among ``links`` (``steps.Traced``), by trace."""

    def __init__(self, links, step_ms: int):
        groups: dict = {}
        for i, link in enumerate(links):
            cap = link.capacity
            if type(cap) is TraceCapacity:
                groups.setdefault((id(cap.trace), cap.loop), []).append((i, link))
        self._groups = [_Group(members, step_ms) for members in groups.values()]
        self.indexes = frozenset(i for g in self._groups for i in g.indexes)
        self._size = len(links)

    def rows(self, k: int, count: int) -> list:
        """For each of the links, the class rates of its windows ``k`` .. ``k + count - 1``
        (a list), or None where it follows a schedule."""
        out = [None] * self._size
        for g in self._groups:
            for i, row in zip(g.indexes, g.rates(k, count).tolist()):
                out[i] = row
        return out


class _Group:
    """Links that follow one trace, looping or not."""

    def __init__(self, members, step_ms: int):
        first = members[0][1].capacity
        self.indexes = [i for i, _ in members]
        self.stamps = np.frombuffer(first.trace.timestamps_ms, dtype=np.int64)
        self.period, self.count, self.loop = first.trace.period_ms, len(self.stamps), first.loop
        self.step_ms = step_ms
        links = [link for _, link in members]
        self.base = np.array([link.capacity.phase_ms - link.offset_ms for link in links], dtype=np.int64)[:, None]
        self.scale = np.array([link.capacity.scale for link in links], dtype=np.float64)[:, None]
        factors = [TraceCapacity.class_rate_factors(link.layer) for link in links]
        self.metered = np.array([m for m, _ in factors], dtype=np.float64)[:, None]
        self.carried = np.array([c for _, c in factors], dtype=np.float64)[:, None]

    def units_before(self, u):
        """``TraceCapacity.units_before`` of every trace time in ``u`` (int64, whole ms)."""
        whole = np.maximum(u - 1, 0) // self.period  # periods before u: u - whole x period in (0, period]
        units = whole * self.count + np.searchsorted(self.stamps, u - whole * self.period, side="left")
        if not self.loop:
            units = np.where(u > self.period, self.count, units)
        return np.where(u <= 0, 0, units)

    def rates(self, k: int, count: int):
        """The class rates (int64, links x ``count``) of windows ``k`` .. ``k + count - 1``."""
        edges = np.arange(k, k + count + 1, dtype=np.int64) * self.step_ms
        units = np.diff(self.units_before(edges[None, :] + self.base), axis=1)
        bps = units * PACKET_BYTES * self.scale * 8000 / self.step_ms  # as Traced.window_bps, in its order
        klass = np.maximum(1, np.rint(bps * self.metered / self.carried))
        return np.where(bps <= 0, 0, klass).astype(np.int64)
