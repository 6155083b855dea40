"""What the charts draw: the last samples of each target, kept under one lock.

``History`` keeps, per target, the aggregate and distribution series of the last
``samples`` polls, and per link its throughput, drop rate and trace capacity for as many
samples as ``link_values`` allows.  65,536 links x 60 samples x 2 series is 7.9 M floats
(~31 MB); the default budget (4 M values) keeps 5 minutes for up to ~6,600 links, and
proportionally less above.  A new configuration (a new ``LinkRows``) starts its links'
series afresh.

>>> h = History([(None, "eth0")], samples=300, link_values=4_000_000)
>>> h.series((None, "eth0"))["time"]
[]
"""

import threading
from array import array
from collections import deque

from .snapshot import LinkRows, Snapshot

AGGREGATE_SERIES = ("throughput_bps", "throughput_bps_down", "throughput_bps_up",
                    "packets_per_s", "drops_per_s", "backlog_bytes", "active_links")
_PER_DIRECTION = ("rate_share_p5", "rate_share_p50", "rate_share_p95",
                  "queue_delay_ms_p5", "queue_delay_ms_p50", "queue_delay_ms_p95",
                  "idle_links", "busy_links", "at_rate_links", "starved_links", "dropping_links")
# per direction: rate_share_p50_dest, ..., starved_links_source (None while a direction has no links)
DISTRIBUTION_SERIES = tuple(f"{name}_{d}" for d in ("dest", "source") for name in _PER_DIRECTION)
LINK_SERIES = ("throughput_bps", "drops_per_s", "capacity_bps")  # per link, beside "time"


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
        self.rows_id = 0

    def reset_links(self, rows: LinkRows, budget: int) -> None:
        self.rows_id = rows.id
        self.link_max = max(2, min(self.samples, budget // max(1, 2 * len(rows))))
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


def no_link_series() -> dict:
    """A link's series before it has any sample: every one empty."""
    return {"time": [], **{name: [] for name in LINK_SERIES}}


class History:
    """The series of ``targets`` ((netns, interface) keys); readers copy them under the lock."""

    def __init__(self, targets, samples: int, link_values: int):
        self.link_values = link_values
        self._of = {t: _TargetHistory(samples) for t in targets}
        self._lock = threading.Lock()

    def record(self, target, snap: Snapshot, have_rates: bool) -> None:
        """Add ``snap``'s sample (nothing but the reset of its links' series without ``have_rates``)."""
        h = self._of[target]
        with self._lock:
            if h.rows_id != snap.layout.id:
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

    def series(self, target) -> dict:
        """Aggregate and distribution series, oldest first: {"time": [...], name: [...]}."""
        h = self._of[target]
        with self._lock:
            return {name: list(values) for name, values in h.aggregate.items()}

    def link_series(self, target, row: int, rows_id: int) -> dict | None:
        """Link ``row``'s series (``LINK_SERIES``; capacity None where the link has a static
        rate), or None if the rows are no longer ``rows_id``'s."""
        h = self._of[target]
        with self._lock:
            if h.rows_id != rows_id:
                return None
            return {"time": list(h.link_time),
                    "throughput_bps": [round(a[row], 3) for a in h.link_tp],
                    "drops_per_s": [round(a[row], 3) for a in h.link_drops],
                    "capacity_bps": [None if a is None or a[row] != a[row] else round(a[row], 3)
                                     for a in h.link_cap]}

    def link_samples(self, target) -> int:
        """How many samples each link's series keeps."""
        return self._of[target].link_max
