"""Where the dashboard's numbers come from: a poller over ``readout.Poller``.

``StatsSource`` reads the cumulative kernel counters of every watched
(namespace, interface) once per ``interval`` (``readout.counters``' columns,
through a ``readout.Poller`` that keeps its netlink readers open), turns them
into rates, shares of rate, queueing delays and link states (``digest``), and
keeps the last ``history`` seconds: aggregate samples and distributions for
every target, and per-link throughput and drop rates for as many samples as
``link_values`` allows (65,536 links x 60 samples x 2 series is 7.9 M floats,
~31 MB; the default budget keeps 5 minutes for up to ~6,600 links and
proportionally less above).

A read that takes longer than half the interval is followed by a pause as
long as the read, so polling keeps at most about half a core busy.

Readers never lock the hot path: each poll builds a new immutable
``Snapshot`` per target and swaps it in.  Tests inject a fake ``reader`` (a
function with ``readout.counters``' signature and result; ``reading()``
builds one from rows) and call ``poll_once()`` themselves; the app only needs
the public methods below, so a wholly fake source works too.

Over 400 lines: the poller, the snapshots it swaps in and the history it keeps
under its lock are one mechanism; the arithmetic on the columns is ``digest``'s.
"""

import logging
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field

from ratelimit.errors import RatelimitError
from ratelimit.spec.names import target_name

from .digest import COLUMNS, COUNTERS, GAUGES, LinkRates, by_cohort, digest, distribution, empty_columns, totals, \
    tracking
from .digest import STATES as STATE_NAMES

log = logging.getLogger("webui.stats")

AGGREGATE_SERIES = ("throughput_bps", "throughput_bps_down", "throughput_bps_up",
                    "packets_per_s", "drops_per_s", "backlog_bytes", "active_links")
_PER_DIRECTION = ("rate_share_p5", "rate_share_p50", "rate_share_p95",
                  "queue_delay_ms_p5", "queue_delay_ms_p50", "queue_delay_ms_p95",
                  "idle_links", "busy_links", "at_rate_links", "starved_links", "dropping_links")
# per direction: rate_share_p50_dest, ..., starved_links_source (None while a direction has no links)
DISTRIBUTION_SERIES = tuple(f"{name}_{d}" for d in ("dest", "source") for name in _PER_DIRECTION)
SHARE_WINDOW_S = 5.0  # rate_share is measured over this long (at least one interval)


ALL_PORTS = 0  # a per-host link's port in the keys: it carries all its host's ports (null in JSON)
OTHERS = "others"  # the default cohort's link in the keys: every host no cohort names


def port_text(port: int) -> str:
    """A link's port as shown: the number, or ``all`` for a per-host link."""
    return "all" if port == ALL_PORTS else str(port)


def reading(interface: str, netns, when: float, applied: dict | None, rows: list) -> dict:
    """A reader's result (``readout.counters``' shape) from one dict per link (tests, benchmarks)."""
    return {"interface": interface, "netns": netns, "time": when, "applied": applied,
            "keys": tuple((r["direction"], None if r["host"] is None else str(r["host"]), r["port"], r.get("dev", interface)) for r in rows),
            "rate_bps": tuple(r.get("rate_bps") for r in rows),
            "cohorts": tuple((r.get("cohort"), r.get("profile")) for r in rows),
            "counters": {name: array("q", [int(r.get(name) or 0) for r in rows]) for name in COUNTERS + GAUGES}}


@dataclass(frozen=True)
class Layout:
    """The links of one applied configuration, in the kernel's row order."""

    id: int
    keys: tuple  # ((direction, host, port, dev), ...), port ALL_PORTS for a per-host link
    rate_bps: tuple  # configured rate per link (None: no rate limit)
    index: dict = field(compare=False, repr=False)  # (direction, host, port) -> row
    rates: LinkRates | None = field(default=None, compare=False, repr=False)
    source_keys: tuple = field(default=(), compare=False, repr=False)  # the reader's keys object
    orders: dict = field(default_factory=dict, compare=False, repr=False)  # sorts by key, for queries
    cohorts: tuple = field(default=(), compare=False, repr=False)  # (cohort, profile) per link, or ()

    def cohort(self, i: int) -> tuple:
        """Link ``i``'s (cohort, profile); ("", "") where the reader gave none."""
        return self.cohorts[i] if self.cohorts else ("", "")

    def __len__(self):
        return len(self.keys)


EMPTY_LAYOUT = Layout(0, (), (), {}, LinkRates((), None))


@dataclass(frozen=True)
class Snapshot:
    """One target after one poll; nothing in it changes after it is published."""

    netns: str | None
    interface: str
    seq: int  # the source's poll round that made it
    time: float | None  # the kernel read's wall-clock time
    applied: dict | None  # summary.summary() of what is installed, or None
    error: str | None  # one line when the last read failed
    layout: Layout
    columns: dict  # name -> array, one entry per link (see digest.COLUMNS)
    aggregate: dict
    distribution: dict
    totals: dict  # per direction: sums of the counters and gauges (digest.totals)
    refresh_s: float  # how long the read took
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # orders computed for queries
    cohorts: dict = field(default_factory=dict)  # per cohort: its glance and distribution (digest.cohorts)
    driver: dict | None = None  # a traced plan's driver (follow.report), else None
    tracking: dict = field(default_factory=dict)  # per direction: how traced links track (digest.tracking)

    @property
    def name(self) -> str:
        return target_name(self.netns, self.interface)

    def row(self, i: int) -> dict:
        direction, host, port, dev = self.layout.keys[i]
        cohort, profile = self.layout.cohort(i)
        out = {"direction": direction, "host": host, "port": None if port == ALL_PORTS else port, "dev": dev,
               "rate_bps": self.layout.rate_bps[i], "cohort": cohort or None, "profile": profile or None}
        for name in COLUMNS:
            value = self.columns[name][i]
            if name == "active":
                value = bool(value)
            elif name == "state":
                value = STATE_NAMES[value]
            elif name in COUNTERS or name in GAUGES:
                value = int(value)
            else:
                value = None if value != value else round(value, 6 if name in ("rate_share", "track_ratio") else 3)
            out[name] = value
        return out


def _aggregate(cols: dict, layout: Layout, sums: dict, have_rates: bool, pps: float) -> dict:
    n = len(layout)
    down = sums.get("dest", {}).get("throughput_bps", 0.0)
    up = sums.get("source", {}).get("throughput_bps", 0.0)
    agg = {"links": n, "active_links": sum(cols["active"])}
    for name in COUNTERS + GAUGES:
        agg[name] = sum(side[name] for side in sums.values())
    agg.update({
        "throughput_bps": round(down + up, 3) if have_rates else None,
        "throughput_bps_down": round(down, 3) if have_rates else None,
        "throughput_bps_up": round(up, 3) if have_rates else None,
        "packets_per_s": round(pps, 3) if have_rates else None,
        "drops_per_s": round(sum(cols["drops_per_s"]), 3) if have_rates else None,
    })
    return agg


def _empty_snapshot(netns, interface) -> Snapshot:
    cols = empty_columns()
    dist = distribution(cols, EMPTY_LAYOUT.rates)
    return Snapshot(netns, interface, 0, None, None, None, EMPTY_LAYOUT, cols,
                    _aggregate(cols, EMPTY_LAYOUT, {}, False, 0.0), dist, {}, 0.0)


class _TargetHistory:
    """Ring buffers for one target: aggregate and distribution samples, per-link rates."""

    def __init__(self, samples: int):
        self.samples = samples
        self.aggregate = {name: deque(maxlen=samples) for name in ("time",) + AGGREGATE_SERIES + DISTRIBUTION_SERIES}
        self.link_time: deque = deque()
        self.link_tp: deque = deque()
        self.link_drops: deque = deque()
        self.link_cap: deque = deque()  # each sample's capacity column, None while nothing is traced
        self.link_max = samples
        self.layout_id = 0

    def reset_links(self, layout: Layout, budget: int) -> None:
        self.layout_id = layout.id
        self.link_max = max(2, min(self.samples, budget // max(1, 2 * len(layout))))
        self.link_time = deque(maxlen=self.link_max)
        self.link_tp = deque(maxlen=self.link_max)
        self.link_drops = deque(maxlen=self.link_max)
        self.link_cap = deque(maxlen=self.link_max)


def _series_values(snap: Snapshot) -> dict:
    """One history sample's distribution values (None for a direction without links)."""
    out = dict.fromkeys(DISTRIBUTION_SERIES)
    for direction, d in snap.distribution.items():
        for what in ("rate_share", "queue_delay_ms"):
            for q, value in d[what].items():
                out[f"{what}_{q}_{direction}"] = value
        for state, count in d["states"].items():
            out[f"{state}_links_{direction}"] = count
    return out


class StatsSource:
    """Polls ``reader(interface, netns)`` for each target; see the module doc."""

    def __init__(self, targets, reader=None, *, interval: float = 1.0, history: float = 300.0,
                 link_values: int = 4_000_000, active_seconds: float = 10.0, share_window: float = SHARE_WINDOW_S):
        self._own_reader = None
        if reader is None:
            from ratelimit.service import readout
            reader = self._own_reader = readout.Poller()
        self._targets = [(netns or None, interface) for netns, interface in targets]
        if not self._targets:
            raise ValueError("no targets to watch")
        self.reader = reader
        self.interval = float(interval)
        self.history_seconds = float(history)
        self.link_values = int(link_values)
        self.active_seconds = float(active_seconds)
        self.share_window = max(float(share_window), self.interval)
        samples = max(2, int(round(self.history_seconds / self.interval)) + 1)
        self._snap: dict = {t: _empty_snapshot(*t) for t in self._targets}
        self._last_change: dict = {t: [] for t in self._targets}
        self._bytes_seen: dict = {t: deque() for t in self._targets}  # (time, bytes column), the share window
        self._hist = {t: _TargetHistory(samples) for t in self._targets}
        self._hist_lock = threading.Lock()
        self._cond = threading.Condition()
        self._seq = 0
        self._layout_ids = 0
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
        return self._snap.get((netns or None, interface))

    def wait(self, after_seq: int, timeout: float) -> int:
        """Block until a poll round newer than ``after_seq`` finished (or timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > after_seq or self._stop.is_set(), timeout)
            return self._seq

    def history(self, netns, interface) -> dict:
        """Aggregate and distribution series, oldest first: {"time": [...], name: [...]}."""
        h = self._hist[(netns or None, interface)]
        with self._hist_lock:
            return {name: list(values) for name, values in h.aggregate.items()}

    def link_history(self, netns, interface, row: int, layout_id: int) -> dict | None:
        """One link's throughput, drop-rate and trace-capacity series (None where the link has
        a static rate), or None if the layout moved on."""
        h = self._hist[(netns or None, interface)]
        with self._hist_lock:
            if h.layout_id != layout_id:
                return None
            return {"time": list(h.link_time),
                    "throughput_bps": [round(a[row], 3) for a in h.link_tp],
                    "drops_per_s": [round(a[row], 3) for a in h.link_drops],
                    "capacity_bps": [None if a is None or a[row] != a[row] else round(a[row], 3)
                                     for a in h.link_cap]}

    def link_history_samples(self, netns, interface) -> int:
        return self._hist[(netns or None, interface)].link_max

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
            return self._failed(prev, seq, str(err), started)
        except Exception as err:
            if self._logged.get(target) != repr(err):  # each new failure once, not every second
                self._logged[target] = repr(err)
                log.exception("reading statistics of %s failed", target_name(netns, interface))
            return self._failed(prev, seq, "internal error reading statistics (see the server log)", started)
        return self._digest(target, prev, stats, seq, started)

    @staticmethod
    def _failed(prev: Snapshot, seq: int, error: str, started: float) -> Snapshot:
        return Snapshot(prev.netns, prev.interface, seq, prev.time, prev.applied, error, prev.layout,
                        prev.columns, prev.aggregate, prev.distribution, prev.totals, time.monotonic() - started,
                        driver=prev.driver, tracking=prev.tracking)

    def _layout(self, target, prev: Snapshot, stats: dict) -> tuple[Layout, bool]:
        """The layout of this read, and whether it is the previous read's."""
        keys, applied = stats.get("keys") or (), stats.get("applied")
        old = prev.layout
        if old.id and applied == prev.applied and (keys is old.source_keys or keys == old.source_keys):
            return old, True
        self._layout_ids += 1
        shown = tuple((d, OTHERS if h is None else str(h), ALL_PORTS if p is None else int(p), dev)
                      for d, h, p, dev in keys)
        cohorts = tuple((c or "", p or "") for c, p in stats.get("cohorts") or ())
        layout = Layout(self._layout_ids, shown, tuple(stats.get("rate_bps") or (None,) * len(keys)),
                        {k[:3]: i for i, k in enumerate(shown)}, LinkRates(shown, applied, cohorts), keys,
                        cohorts=cohorts)
        self._last_change[target] = [float("-inf")] * len(keys)
        self._bytes_seen[target].clear()
        return layout, False

    def _digest(self, target, prev: Snapshot, stats: dict, seq: int, started: float) -> Snapshot:
        netns, interface = target
        now = float(stats.get("time") or time.time())
        applied = stats.get("applied")
        layout, same = self._layout(target, prev, stats)
        counters = stats.get("counters") or {}
        if len(layout) and not counters:
            raise ValueError("a reading with links but no counters")
        if not len(layout):
            counters = {name: array("q") for name in COUNTERS + GAUGES}
        dt = now - prev.time if same and prev.time is not None else 0.0
        have_rates = same and dt > 0
        seen = self._bytes_seen[target]
        while len(seen) >= 2 and now - seen[1][0] >= self.share_window:
            seen.popleft()  # keep the newest sample at least a window old
        base_t, base_bytes = seen[0] if seen and have_rates else (now, None)
        rates = stats.get("trace_rates")
        capacity = rates.window_bps if rates is not None and len(rates) == len(layout) else None
        cols, pps = digest(counters, prev.columns if have_rates else None, dt, layout.rates,
                           self._last_change[target], now, self.active_seconds, base_bytes, now - base_t,
                           capacity)
        seen.append((now, counters["bytes"]))
        sums = totals(cols, layout.rates)
        agg = _aggregate(cols, layout, sums, have_rates, pps)
        dist = distribution(cols, layout.rates)
        refresh = time.monotonic() - started  # the kernel read and the arithmetic above
        snap = Snapshot(netns, interface, seq, now, applied, None, layout, cols, agg, dist, sums, refresh,
                        cohorts=by_cohort(cols, layout.rates, layout.cohorts), driver=stats.get("driver"),
                        tracking=tracking(cols, layout.rates))
        self._record(target, snap, have_rates)
        return snap

    def _record(self, target, snap: Snapshot, have_rates: bool) -> None:
        h = self._hist[target]
        with self._hist_lock:
            if h.layout_id != snap.layout.id:
                h.reset_links(snap.layout, self.link_values)
            if not have_rates:
                return
            values = _series_values(snap)
            for name, series in h.aggregate.items():
                series.append(snap.time if name == "time" else
                              snap.aggregate[name] if name in snap.aggregate else values[name])
            if len(snap.layout):
                h.link_time.append(snap.time)
                h.link_tp.append(array("f", snap.columns["throughput_bps"]))
                h.link_drops.append(array("f", snap.columns["drops_per_s"]))
                cap = snap.columns["capacity_bps"]
                h.link_cap.append(array("f", cap) if snap.tracking else None)
