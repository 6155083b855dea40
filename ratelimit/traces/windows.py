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
        self.groups = [_Group(members, step_ms) for members in groups.values()]  # by trace
        self.indexes = frozenset(i for g in self.groups for i in g.indexes)
        self._size = len(links)

    def rows(self, k: int, count: int) -> list:
        """For each of the links, the class rates of its windows ``k`` .. ``k + count - 1``
        (a list), or None where it follows a schedule."""
        out = [None] * self._size
        for g in self.groups:
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
        return self.class_rates(np.diff(self.units_before(edges[None, :] + self.base), axis=1))

    def class_rates(self, units):
        """The class rates of windows of ``units`` opportunities (links x windows)."""
        bps = units * PACKET_BYTES * self.scale * 8000 / self.step_ms  # as Traced.window_bps, in its order
        klass = np.maximum(1, np.rint(bps * self.metered / self.carried))
        return np.where(bps <= 0, 0, klass).astype(np.int64)


class Ring:
    """Every link's class rates of the ``count`` windows from the newest step's, kept in a
    ring (window ``j`` in row ``j % count``): a step that follows the last one works out
    one window a link, a trace's links in one pass (``_Group``), a schedule's with
    ``Traced.window_bps``.  The same integers as ``TraceWindows.rows`` and
    ``Traced.upcoming`` (tests/test_vector.py).

    >>> ring = Ring(links, 100, 20)  # doctest: +SKIP
    >>> ring.at(7); ring.column(7)  # every link's rate in window 7  # doctest: +SKIP
    """

    def __init__(self, links, step_ms: int, count: int):
        self.windows, self.step_ms, self.count = TraceWindows(links, step_ms), step_ms, count
        self.rates = np.zeros((count, len(links)), dtype=np.int64)  # window j's in row j % count
        self._scheduled = [(i, link) for i, link in enumerate(links) if i not in self.windows.indexes]
        self._groups = [(np.array(g.indexes, dtype=np.intp), g) for g in self.windows.groups]
        self._units = [None] * len(self._groups)  # each group's units before its newest window's end
        self.first = None  # the first window held (None: none)

    def at(self, k: int) -> None:
        """Hold windows ``k`` .. ``k + count - 1``."""
        count = self.count
        if self.first is None or not self.first <= k < self.first + count:
            self._fill(k, k + count, fresh=True)
        elif k > self.first:
            self._fill(self.first + count, k + count, fresh=False)
        self.first = k

    def _fill(self, j0: int, j1: int, fresh: bool) -> None:
        cols = np.arange(j0, j1) % self.count
        for n, (rows, g) in enumerate(self._groups):
            edges = np.arange(j0 + (0 if fresh else 1), j1 + 1, dtype=np.int64) * self.step_ms
            units = g.units_before(edges[None, :] + g.base)
            if not fresh:
                units = np.concatenate((self._units[n][:, None], units), axis=1)
            self.rates[cols[:, None], rows[None, :]] = g.class_rates(np.diff(units, axis=1)).T
            self._units[n] = units[:, -1]
        for i, link in self._scheduled:
            self.rates[cols, i] = [link.window_bps(j * self.step_ms, (j + 1) * self.step_ms) for j in range(j0, j1)]

    def column(self, j: int):
        """Every link's rate in window ``j`` (held: ``at``)."""
        return self.rates[j % self.count]
