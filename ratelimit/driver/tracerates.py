"""Each traced link's (and cell's) capacity over a window of the clock, read-only: what the dashboard and
``/metrics`` draw beside the rate a link delivered over the same window.

The capacity is the class rate the trace gives the window on average (``steps.Traced.window_bps``,
the rate ``--stats`` shows as ``trace_bps`` for one step): what a backlogged sender of
full-size packets gets through the link, in the bytes its class meters and its counters count
(docs/profiles.md, "Which bytes a traced link meters").  It is a reference only while the
link is backlogged: a link whose sender sends less delivers less.  The driver's state is
not consulted: a link whose driver died keeps the rate it was left at while its capacity
here goes on following the trace, and the two part (which is what a reader should see).
"""

from array import array

from ..plan.compile import compiled
from ..profiles.traced import load_all
from .cells import capacity_bps, traced_cells
from .steps import traced_links

NAN = float("nan")


class TraceRates:
    """The traced links of a record's request ``req`` (stamped with its start), in the order
    of ``keys`` (``readout.LinkTable.keys``: (direction, host as text or None, port, dev));
    reads the trace files once (StateError if one changed since it was applied)."""

    def __init__(self, req, keys):
        loaded = load_all(req)
        self.started_ms = req.traced_start_ms
        plan = compiled(req)
        by_key = {(link.direction, None if link.host is None else str(link.host), link.port): link
                  for link in traced_links(plan, loaded)}
        self.cells = traced_cells(plan, loaded)
        self.rows = tuple(by_key.get(k[:3]) for k in keys)  # None: a link with a static rate
        self.traced = bytes(link is not None for link in self.rows)  # a mask for compress()

    def __len__(self) -> int:
        return len(self.rows)

    def window_bps(self, t0_s: float, t1_s: float) -> array:
        """Each link's average capacity over [t0_s, t1_s) of the wall clock, bit/s (NaN for a
        link with a static rate, or all NaN when the record has no start time)."""
        if self.started_ms is None or t1_s <= t0_s:
            return array("d", [NAN] * len(self.rows))
        a, b = t0_s * 1000 - self.started_ms, t1_s * 1000 - self.started_ms
        return array("d", (NAN if link is None else float(link.window_bps(a, b)) for link in self.rows))

    def cells_bps(self, t0_s: float, t1_s: float) -> dict:
        """Each traced cell's average capacity over [t0_s, t1_s) of the wall clock, bit/s, by
        (cell, direction); {} without traced cells or a start time."""
        if self.started_ms is None or t1_s <= t0_s:
            return {}
        return capacity_bps(self.cells, t0_s * 1000 - self.started_ms, t1_s * 1000 - self.started_ms)
