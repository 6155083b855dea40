"""What one poll publishes for one target: its links' rows (``LinkRows``) and a ``Snapshot``.

Both are frozen: the poller (``stats.StatsSource``) builds new ones each round and swaps
them in, so a reader never locks.  A ``LinkRows`` lasts while the configuration does; its
``id`` is the ``layout`` field of the API.

>>> from ratelimit.service.readout import Counters
>>> rows = LinkRows.read(1, Counters("eth0", None, 1.0, keys=(("dest", None, None, "eth0"),), rate_bps=(28800,)))
>>> rows.keys, rows.index
((('dest', 'others', 0, 'eth0'),), {('dest', 'others', 0): 0})
"""

import functools
import itertools
from dataclasses import dataclass, field

from ratelimit.spec.names import target_name

from .digest import COLUMNS, COUNTERS, GAUGES, STATES, distribution, empty_columns, LinkRates

ALL_PORTS = 0  # a per-host link's port in the keys: it carries all its host's ports (null in JSON)
OTHERS = "others"  # the default cohort's link in the keys: every host no cohort names
NO_COHORT = ("", "")  # (cohort, profile) of a link the reader named no cohort for


def port_text(port: int) -> str:
    """A link's port as shown: the number, or ``all`` for a per-host link."""
    return "all" if port == ALL_PORTS else str(port)


def port_json(port: int) -> int | None:
    """A link's port in JSON: the number, or None for a per-host link."""
    return None if port == ALL_PORTS else port


def target_key(netns, interface) -> tuple:
    """A target as the dashboard keys it: (netns, interface), the host's namespace None."""
    return (netns or None, interface)


@dataclass(frozen=True)
class LinkRows:
    """The links of one applied configuration, in the kernel's row order: each link's key,
    configured rate and cohort, and its row by key."""

    id: int
    keys: tuple  # ((direction, host, port, dev), ...), port ALL_PORTS for a per-host link
    rate_bps: tuple  # configured rate per link (None: no rate limit)
    index: dict = field(compare=False, repr=False)  # (direction, host, port) -> row
    rates: LinkRates | None = field(default=None, compare=False, repr=False)
    source_keys: tuple = field(default=(), compare=False, repr=False)  # the reader's keys object
    orders: dict = field(default_factory=dict, compare=False, repr=False)  # sorts by key, for queries
    cohorts: tuple = field(default=(), compare=False, repr=False)  # (cohort, profile) per link, or ()

    @classmethod
    def read(cls, rows_id: int, stats) -> "LinkRows":
        """The rows of a reader's result (a ``readout.Counters``), numbered ``rows_id``."""
        keys, applied = stats.keys, stats.applied
        shown = tuple((d, OTHERS if h is None else str(h), ALL_PORTS if p is None else int(p), dev)
                      for d, h, p, dev in keys)
        cohorts = tuple((c or "", p or "") for c, p in stats.cohorts)
        return cls(rows_id, shown, tuple(stats.rate_bps or (None,) * len(keys)),
                   {k[:3]: i for i, k in enumerate(shown)}, LinkRates(shown, applied, cohorts), keys,
                   cohorts=cohorts)

    def cohort(self, i: int) -> tuple:
        """Link ``i``'s (cohort, profile); ``NO_COHORT`` where the reader gave none."""
        return self.cohorts[i] if self.cohorts else NO_COHORT

    def every_cohort(self) -> tuple:
        """Each link's (cohort, profile), in row order (``cohort(i)`` for every ``i``)."""
        return self.cohorts or (NO_COHORT,) * len(self.keys)

    @functools.cached_property
    def cohort_runs(self) -> tuple:
        """The rows as runs of one (cohort, profile, direction): ((cohort, profile, direction,
        first row, row after the last), ...), worked out once a configuration
        (``digest.cohort_totals`` sums each run's slice every poll).  A plan's links come
        cohort by cohort within each direction, so there are a few runs."""
        runs, first = [], 0
        whats = ((cohort, profile, key[0]) for (cohort, profile), key in zip(self.every_cohort(), self.keys))
        for what, run in itertools.groupby(whats):
            last = first + sum(1 for _ in run)
            runs.append((*what, first, last))
            first = last
        return tuple(runs)

    def __len__(self):
        return len(self.keys)


NO_ROWS = LinkRows(0, (), (), {}, LinkRates((), None))


@dataclass(frozen=True)
class Snapshot:
    """One target after one poll; nothing in it changes after it is published."""

    netns: str | None
    interface: str
    seq: int  # the source's poll round that made it
    time: float | None  # the kernel read's wall-clock time
    applied: dict | None  # summary.summary() of what is installed, or None
    error: str | None  # one line when the last read failed
    layout: LinkRows  # its links (the API's "layout" is their id)
    columns: dict  # name -> array, one entry per link (see digest.COLUMNS)
    aggregate: dict
    distribution: dict
    totals: dict  # per direction: sums of the counters and gauges (digest.totals)
    refresh_s: float  # how long the read took
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # orders computed for queries
    cohorts: dict = field(default_factory=dict)  # per cohort: its glance and distribution (digest.cohorts)
    driver: dict | None = None  # a traced plan's driver (follow.report), else None
    tracking: dict = field(default_factory=dict)  # per direction: how traced links track (digest.tracking)
    cohort_totals: dict = field(default_factory=dict)  # per (cohort, profile, direction): sums (digest.cohort_totals)
    cells: dict = field(default_factory=dict)  # per cell and direction: capacity, users, shares (digest.cells)

    @classmethod
    def empty(cls, netns, interface) -> "Snapshot":
        """A target before its first read: no links, no time."""
        cols = empty_columns()
        return cls(netns, interface, 0, None, None, None, NO_ROWS, cols, aggregate(cols, NO_ROWS, {}, False, 0.0),
                   distribution(cols, NO_ROWS.rates), {}, 0.0)

    def failed(self, seq: int, error: str, refresh_s: float) -> "Snapshot":
        """This snapshot's numbers again, made by round ``seq``, whose read failed with ``error``."""
        return Snapshot(self.netns, self.interface, seq, self.time, self.applied, error, self.layout,
                        self.columns, self.aggregate, self.distribution, self.totals, refresh_s,
                        driver=self.driver, tracking=self.tracking)

    @property
    def name(self) -> str:
        return target_name(self.netns, self.interface)

    def row(self, i: int) -> dict:
        """Link ``i`` as ``/api/links`` shows it."""
        direction, host, port, dev = self.layout.keys[i]
        cohort, profile = self.layout.cohort(i)
        out = {"direction": direction, "host": host, "port": port_json(port), "dev": dev,
               "rate_bps": self.layout.rate_bps[i], "cohort": cohort or None, "profile": profile or None}
        for name in COLUMNS:
            value = self.columns[name][i]
            if name == "active":
                value = bool(value)
            elif name == "state":
                value = STATES[value]
            elif name in COUNTERS or name in GAUGES:
                value = int(value)
            else:
                value = None if value != value else round(value, 6 if name in ("rate_share", "track_ratio") else 3)
            out[name] = value
        return out


def aggregate(cols: dict, rows: LinkRows, sums: dict, have_rates: bool, pps: float) -> dict:
    """A target's sums over its links (``sums``: ``digest.totals``); the rates None without
    ``have_rates`` (the first read of a configuration)."""
    down = sums.get("dest", {}).get("throughput_bps", 0.0)
    up = sums.get("source", {}).get("throughput_bps", 0.0)
    agg = {"links": len(rows), "active_links": sum(cols["active"])}
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
