"""Where the dashboard's numbers come from: a poller over ``readout.Poller``.

``StatsSource`` reads the cumulative kernel counters of every watched (namespace,
interface) once per ``interval``, through a reader with ``readout.counters``' signature and
result (by default a ``readout.Poller``, which keeps its netlink readers open).  It turns
them into rates, shares of rate, queueing delays and link states (``digest``), publishes a
new ``snapshot.Snapshot`` per target, and keeps the last ``history`` seconds of series
(``history.History``).

A read that takes longer than half the interval is followed by a pause as long as the
read, so polling keeps at most about half a core busy.  Tests inject a fake ``reader``
and call ``poll_once()`` themselves; the app needs only the public methods below, so a
wholly fake source works too.

>>> def reader(interface, netns):  # a readout.Counters: here, nothing applied
...     return readout.Counters(interface, netns, 1.0)
>>> src = StatsSource([(None, "eth0")], reader)
>>> src.poll_once(), src.snapshot(None, "eth0").aggregate["links"]
(1, 0)
"""

import logging
import threading
import time
from array import array
from collections import deque

from ratelimit.errors import RatelimitError
from ratelimit.service import readout
from ratelimit.spec.names import target_name

from .digest import COUNTERS, GAUGES, by_cohort, cells, cohort_totals, digest, distribution, totals, tracking
from .history import History
from .snapshot import aggregate, LinkRows, Snapshot, target_key

log = logging.getLogger("webui.stats")

SHARE_WINDOW_S = 5.0  # rate_share is measured over this long (at least one interval)


class StatsSource:
    """Polls ``reader(interface, netns)`` for each target; see the module doc."""

    def __init__(self, targets, reader=None, *, interval: float = 1.0, history: float = 300.0,
                 link_values: int = 4_000_000, active_seconds: float = 10.0, share_window: float = SHARE_WINDOW_S):
        self._own_reader = None
        if reader is None:
            reader = self._own_reader = readout.Poller(repair=True)  # as --list, docs/webui.md
        self._targets = [target_key(netns, interface) for netns, interface in targets]
        if not self._targets:
            raise ValueError("no targets to watch")
        self.reader = reader
        self.interval = float(interval)
        self.history_seconds = float(history)
        self.link_values = int(link_values)
        self.active_seconds = float(active_seconds)
        self.share_window = max(float(share_window), self.interval)
        samples = max(2, int(round(self.history_seconds / self.interval)) + 1)
        self._snap: dict = {t: Snapshot.empty(*t) for t in self._targets}
        self._last_change: dict = {t: [] for t in self._targets}
        self._bytes_seen: dict = {t: deque() for t in self._targets}  # (time, bytes column), the share window
        self._hist = History(self._targets, samples, self.link_values)
        self._cond = threading.Condition()
        self._seq = 0
        self._rows_ids = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        self._logged: dict = {}

    # ------------------------------------------------------------ reading side

    def targets(self) -> list:
        return list(self._targets)

    @property
    def seq(self) -> int:
        return self._seq

    def snapshot(self, netns, interface) -> Snapshot | None:
        return self._snap.get(target_key(netns, interface))

    def wait(self, after_seq: int, timeout: float) -> int:
        """Block until a poll round newer than ``after_seq`` finished (or timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after_seq or self._stop.is_set(), timeout)
            return self._seq

    def history(self, netns, interface) -> dict:
        """Aggregate and distribution series, oldest first: {"time": [...], name: [...]}."""
        return self._hist.series(target_key(netns, interface))

    def link_history(self, netns, interface, row: int, layout_id: int) -> dict | None:
        """One link's throughput, drop-rate and trace-capacity series (None where the link has
        a static rate), or None if the layout moved on."""
        return self._hist.link_series(target_key(netns, interface), row, layout_id)

    def link_history_samples(self, netns, interface) -> int:
        return self._hist.link_samples(target_key(netns, interface))

    # ------------------------------------------------------------ polling side

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="webui-stats", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._own_reader is not None and (self._thread is None or not self._thread.is_alive()):
            self._own_reader.close()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """Poll now (after a change was applied) instead of at the next tick."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # never let the poller die; the cause goes to the log
                log.exception("statistics poll failed")
            took = time.monotonic() - started
            # A read slower than half the interval (tens of thousands of links) is followed by a
            # pause as long as itself: the poller never keeps more than about half a core busy.
            self._wake.wait(max(self.interval - took, took if took > self.interval / 2 else 0.0))
            self._wake.clear()

    def poll_once(self) -> int:
        """Read every target once, publish the snapshots, return the new round number."""
        seq = self._seq + 1
        for target in self._targets:
            self._snap[target] = self._poll_target(target, seq)
        with self._cond:
            self._seq = seq
            self._cond.notify_all()
        return seq

    def _poll_target(self, target, seq) -> Snapshot:
        netns, interface = target
        prev = self._snap[target]
        started = time.monotonic()
        try:
            stats = self.reader(interface, netns)
        except RatelimitError as err:
            return prev.failed(seq, str(err), time.monotonic() - started)
        except Exception as err:
            if self._logged.get(target) != repr(err):  # each new failure once, not every second
                self._logged[target] = repr(err)
                log.exception("reading statistics of %s failed", target_name(netns, interface))
            return prev.failed(seq, "internal error reading statistics (see the server log)",
                               time.monotonic() - started)
        return self._digest(target, prev, stats, seq, started)

    def _rows(self, target, prev: Snapshot, stats) -> tuple[LinkRows, bool]:
        """The rows of this read, and whether they are the previous read's."""
        keys, applied = stats.keys, stats.applied
        old = prev.layout
        if old.id and applied == prev.applied and (keys is old.source_keys or keys == old.source_keys):
            return old, True
        self._rows_ids += 1
        rows = LinkRows.read(self._rows_ids, stats)
        self._last_change[target] = [float("-inf")] * len(keys)
        self._bytes_seen[target].clear()
        return rows, False

    def _digest(self, target, prev: Snapshot, stats, seq: int, started: float) -> Snapshot:
        netns, interface = target
        now = float(stats.time or time.time())
        applied = stats.applied
        rows, same = self._rows(target, prev, stats)
        counters = stats.counters
        if len(rows) and not counters:
            raise ValueError("a reading with links but no counters")
        if not len(rows):
            counters = {name: array("q") for name in COUNTERS + GAUGES}
        dt = now - prev.time if same and prev.time is not None else 0.0
        have_rates = same and dt > 0
        seen = self._bytes_seen[target]
        while len(seen) >= 2 and now - seen[1][0] >= self.share_window:
            seen.popleft()  # keep the newest sample at least a window old
        base_t, base_bytes = seen[0] if seen and have_rates else (now, None)
        rates = stats.trace_rates
        capacity = rates.window_bps if rates is not None and len(rates) == len(rows) else None
        cols, pps = digest(counters, prev.columns if have_rates else None, dt, rows.rates,
                           self._last_change[target], now, self.active_seconds, base_bytes, now - base_t,
                           capacity)
        seen.append((now, counters["bytes"]))
        sums = totals(cols, rows.rates)
        agg = aggregate(cols, rows, sums, have_rates, pps)
        dist = distribution(cols, rows.rates)
        refresh = time.monotonic() - started  # the kernel read and the arithmetic above
        snap = Snapshot(netns, interface, seq, now, applied, None, rows, cols, agg, dist, sums, refresh,
                        cohorts=by_cohort(cols, rows.rates, rows.cohorts), driver=stats.driver,
                        tracking=tracking(cols, rows.rates),
                        cohort_totals=cohort_totals(cols, rows.cohort_runs),
                        cells=cells(cols, rows.cohort_runs, applied,
                                    rates.cells_bps(now - dt, now) if rates is not None and have_rates else None))
        self._hist.record(target, snap, have_rates)
        return snap
