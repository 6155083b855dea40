"""Where the dashboard's numbers come from: a poller over ``service.statistics``.

``StatsSource`` reads the cumulative kernel counters of every watched
(namespace, interface) once per ``interval``, turns them into rates from the
deltas between two reads, and keeps the last ``history`` seconds: aggregate
samples for every target, and per-link throughput and drop rates for as many
samples as ``link_values`` allows (65,536 links x 60 samples x 2 series is
7.9 M floats, ~31 MB; the default budget keeps 5 minutes for up to ~6,600
links and proportionally less above).

A read that takes longer than half the interval is followed by a pause as
long as the read, so polling keeps at most about half a core busy (measured:
``service.statistics`` of 65,536 shape-mode links takes ~3.5 s on our hosts).

Readers never lock the hot path: each poll builds a new immutable
``Snapshot`` per target and swaps it in.  Tests inject a fake ``reader`` (a
function with ``service.statistics``' signature and result) and call
``poll_once()`` themselves; the app only needs the public methods below, so a
wholly fake source works too.
"""

import logging
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field

from ratelimit.errors import RatelimitError

log = logging.getLogger("webui.stats")

COUNTERS = ("bytes", "packets", "drops", "overlimits")
GAUGES = ("backlog_bytes", "backlog_pkts")
# Per-link columns a snapshot carries (arrays of equal length, in link order).
COLUMNS = COUNTERS + GAUGES + ("throughput_bps", "drops_per_s", "active")
AGGREGATE_SERIES = ("throughput_bps", "throughput_bps_down", "throughput_bps_up",
                    "packets_per_s", "drops_per_s", "backlog_bytes", "active_links")


def target_name(netns: str | None, interface: str) -> str:
    return f"{netns}/{interface}" if netns else interface


ALL_PORTS = 0  # a per-host link's port in the keys: it carries all its host's ports (null in JSON)


def port_text(port: int) -> str:
    """A link's port as shown: the number, or ``all`` for a per-host link."""
    return "all" if port == ALL_PORTS else str(port)


@dataclass(frozen=True)
class Layout:
    """The links of one applied configuration, in the kernel's row order."""

    id: int
    keys: tuple  # ((direction, host, port, dev), ...)
    rate_bps: tuple  # configured rate per link (None: no rate limit)
    index: dict = field(compare=False, repr=False)  # (direction, host, port) -> row

    def __len__(self):
        return len(self.keys)


EMPTY_LAYOUT = Layout(0, (), (), {})


@dataclass(frozen=True)
class Snapshot:
    """One target after one poll; nothing in it changes after it is published."""

    netns: str | None
    interface: str
    seq: int  # the source's poll round that made it
    time: float | None  # the kernel read's wall-clock time
    applied: dict | None  # service.summary() of what is installed, or None
    error: str | None  # one line when the last read failed
    layout: Layout
    columns: dict  # name -> array, one entry per link (see COLUMNS)
    changed: tuple  # rows whose values differ from the previous snapshot
    aggregate: dict
    refresh_s: float  # how long the read took

    @property
    def name(self) -> str:
        return target_name(self.netns, self.interface)

    def row(self, i: int) -> dict:
        direction, host, port, dev = self.layout.keys[i]
        out = {"direction": direction, "host": host, "port": None if port == ALL_PORTS else port, "dev": dev,
               "rate_bps": self.layout.rate_bps[i]}
        for name in COLUMNS:
            value = self.columns[name][i]
            out[name] = bool(value) if name == "active" else (
                int(value) if name in COUNTERS or name in GAUGES else round(value, 3))
        return out


def _empty_columns(n: int = 0) -> dict:
    cols = {name: array("q", bytes(8 * n)) for name in COUNTERS + GAUGES}
    cols["throughput_bps"] = array("d", bytes(8 * n))
    cols["drops_per_s"] = array("d", bytes(8 * n))
    cols["active"] = array("b", bytes(n))
    return cols


def _aggregate(cols: dict, layout: Layout, have_rates: bool) -> dict:
    down = up = 0.0
    tp = cols["throughput_bps"]
    for (direction, *_), value in zip(layout.keys, tp):
        if direction == "dest":
            down += value
        else:
            up += value
    n = len(layout)
    agg = {
        "links": n,
        "active_links": sum(cols["active"]),
        "bytes": sum(cols["bytes"]), "packets": sum(cols["packets"]),
        "drops": sum(cols["drops"]), "overlimits": sum(cols["overlimits"]),
        "backlog_bytes": sum(cols["backlog_bytes"]), "backlog_pkts": sum(cols["backlog_pkts"]),
        "throughput_bps": round(down + up, 3) if have_rates else None,
        "throughput_bps_down": round(down, 3) if have_rates else None,
        "throughput_bps_up": round(up, 3) if have_rates else None,
        "packets_per_s": None, "drops_per_s": None,
    }
    return agg


class _TargetHistory:
    """Ring buffers for one target: aggregate samples and per-link rates."""

    def __init__(self, samples: int):
        self.samples = samples
        self.aggregate = {name: deque(maxlen=samples) for name in ("time",) + AGGREGATE_SERIES}
        self.link_time: deque = deque()
        self.link_tp: deque = deque()
        self.link_drops: deque = deque()
        self.link_max = samples
        self.layout_id = 0

    def reset_links(self, layout: Layout, budget: int) -> None:
        self.layout_id = layout.id
        self.link_max = max(2, min(self.samples, budget // max(1, 2 * len(layout))))
        self.link_time = deque(maxlen=self.link_max)
        self.link_tp = deque(maxlen=self.link_max)
        self.link_drops = deque(maxlen=self.link_max)


class StatsSource:
    """Polls ``reader(interface, netns)`` for each target; see the module doc."""

    def __init__(self, targets, reader=None, *, interval: float = 1.0, history: float = 300.0,
                 link_values: int = 4_000_000, active_seconds: float = 10.0):
        if reader is None:
            from ratelimit import service
            reader = service.statistics
        self._targets = [(netns or None, interface) for netns, interface in targets]
        if not self._targets:
            raise ValueError("no targets to watch")
        self.reader = reader
        self.interval = float(interval)
        self.history_seconds = float(history)
        self.link_values = int(link_values)
        self.active_seconds = float(active_seconds)
        samples = max(2, int(round(self.history_seconds / self.interval)) + 1)
        self._snap: dict = {t: Snapshot(t[0], t[1], 0, None, None, None, EMPTY_LAYOUT, _empty_columns(),
                                        (), _aggregate(_empty_columns(), EMPTY_LAYOUT, False), 0.0)
                            for t in self._targets}
        self._last_change: dict = {t: array("d") for t in self._targets}
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
        """Aggregate series, oldest first: {"time": [...], name: [...]}."""
        h = self._hist[(netns or None, interface)]
        with self._hist_lock:
            return {name: list(values) for name, values in h.aggregate.items()}

    def link_history(self, netns, interface, row: int, layout_id: int) -> dict | None:
        """One link's throughput and drop-rate series, or None if the layout moved on."""
        h = self._hist[(netns or None, interface)]
        with self._hist_lock:
            if h.layout_id != layout_id:
                return None
            return {"time": list(h.link_time),
                    "throughput_bps": [round(a[row], 3) for a in h.link_tp],
                    "drops_per_s": [round(a[row], 3) for a in h.link_drops]}

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
            return Snapshot(netns, interface, seq, prev.time, prev.applied, str(err), prev.layout,
                            prev.columns, (), prev.aggregate, time.monotonic() - started)
        except Exception as err:
            if self._logged.get(target) != repr(err):  # each new failure once, not every second
                self._logged[target] = repr(err)
                log.exception("reading statistics of %s failed", target_name(netns, interface))
            return Snapshot(netns, interface, seq, prev.time, prev.applied,
                            "internal error reading statistics (see the server log)", prev.layout,
                            prev.columns, (), prev.aggregate, time.monotonic() - started)
        return self._digest(target, prev, stats, seq, started)

    def _digest(self, target, prev: Snapshot, stats: dict, seq: int, started: float) -> Snapshot:
        netns, interface = target
        rows = stats.get("links") or []
        now = float(stats.get("time") or time.time())
        applied = stats.get("applied")
        keys = tuple((r["direction"], str(r["host"]), ALL_PORTS if r["port"] is None else int(r["port"]),
                      r.get("dev", interface)) for r in rows)
        same = prev.layout.id != 0 and applied == prev.applied and keys == prev.layout.keys
        if same:
            layout = prev.layout
        else:
            self._layout_ids += 1
            layout = Layout(self._layout_ids, keys, tuple(r.get("rate_bps") for r in rows),
                            {k[:3]: i for i, k in enumerate(keys)})
            self._last_change[target] = array("d", [float("-inf")]) * len(keys)
        n = len(keys)
        cols = _empty_columns(n)
        for name in COUNTERS + GAUGES:
            cols[name] = array("q", [int(r.get(name) or 0) for r in rows])
        dt = now - prev.time if same and prev.time is not None else 0.0
        have_rates = same and dt > 0
        last_change = self._last_change[target]
        changed = []
        if have_rates:
            b, pb = cols["bytes"], prev.columns["bytes"]
            d, pd = cols["drops"], prev.columns["drops"]
            p, pp = cols["packets"], prev.columns["packets"]
            tp, dr, act = cols["throughput_bps"], cols["drops_per_s"], cols["active"]
            ptp, pdr, pact = prev.columns["throughput_bps"], prev.columns["drops_per_s"], prev.columns["active"]
            backlog, pbacklog = cols["backlog_pkts"], prev.columns["backlog_pkts"]
            over, pover = cols["overlimits"], prev.columns["overlimits"]
            bb, pbb = cols["backlog_bytes"], prev.columns["backlog_bytes"]
            horizon = now - self.active_seconds
            pps = 0.0
            for i in range(n):
                db = b[i] - pb[i]
                if db < 0 or d[i] < pd[i] or p[i] < pp[i]:  # counters were reset: no rate this round
                    db, dd, dp = 0, 0, 0
                else:
                    dd, dp = d[i] - pd[i], p[i] - pp[i]
                if db or dp or dd or backlog[i]:
                    last_change[i] = now
                tp[i] = db * 8 / dt
                dr[i] = dd / dt
                pps += dp / dt
                act[i] = 1 if last_change[i] >= horizon else 0
                if (db or dp or dd or ptp[i] or pdr[i] or act[i] != pact[i] or backlog[i] != pbacklog[i]
                        or bb[i] != pbb[i] or over[i] != pover[i]):
                    changed.append(i)
        else:
            changed = list(range(n))
            bl = cols["backlog_pkts"]
            for i in range(n):
                if bl[i]:
                    last_change[i] = now
                    cols["active"][i] = 1
        agg = _aggregate(cols, layout, have_rates)
        if have_rates:
            agg["packets_per_s"] = round(pps, 3)
            agg["drops_per_s"] = round(sum(cols["drops_per_s"]), 3)
        refresh = time.monotonic() - started  # the kernel read and the arithmetic above
        snap = Snapshot(netns, interface, seq, now, applied, None, layout, cols, tuple(changed), agg, refresh)
        self._record(target, snap, have_rates)
        return snap

    def _record(self, target, snap: Snapshot, have_rates: bool) -> None:
        h = self._hist[target]
        with self._hist_lock:
            if h.layout_id != snap.layout.id:
                h.reset_links(snap.layout, self.link_values)
            if not have_rates:
                return
            for name, values in h.aggregate.items():
                values.append(snap.time if name == "time" else snap.aggregate[name])
            if len(snap.layout):
                h.link_time.append(snap.time)
                h.link_tp.append(array("f", snap.columns["throughput_bps"]))
                h.link_drops.append(array("f", snap.columns["drops_per_s"]))
