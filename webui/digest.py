"""From two reads of the counters to what the dashboard shows: pure, columns in, columns out.

Per link: rate now (``throughput_bps``), drops per second, the rate as a share
of the link's frame rate (``rate_share``: the summary's ``frame_rate_bps``, the
line rate less the link layer's coding), the queueing delay its backlog makes
(``queue_delay_ms`` = backlog bytes x 8 / frame rate), whether it was active in
the last seconds, and its state this interval:

* ``idle``: moved and dropped nothing and has no backlog;
* ``at_rate``: ``rate_share`` >= 0.9;
* ``starved``: a backlog, yet ``rate_share`` < 0.5 (it wants more than it gets);
* ``busy``: any other link that moved something (below its rate without a
  backlog: the application sends less; or 50-90% with a backlog);
* ``dropping`` (counted on its own, it overlaps the others): dropped packets.

A traced link (one that follows a trace or a schedule: no configured rate) also has its
trace's capacity over the last interval (``capacity_bps``) and ``track_ratio``, its rate
over the share window against its capacity over the same window; ``tracking`` sums these up
per direction for the glance (the backlogged traced links: the mean, p5/p50/p95 and the
share within ``TRACK_TOLERANCE``).

Per target: sums (all links, and per direction); per direction the counts of
each state and the distribution of ``rate_share`` and ``queue_delay_ms`` over
the links that were not idle and have a rate: p5/p50/p95 and a histogram of
``rate_share`` (per direction: downloads' acknowledgements would otherwise
crowd the downstream links' shares).

Everything runs as C-level ``map``/``zip``/``sum`` over ``array`` columns:
65,536 links digest in tens of milliseconds.  A link without a configured rate
has ``rate_share`` and ``queue_delay_ms`` NaN (``None`` in JSON).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from itertools import compress, repeat
from operator import add, and_, ge, lt, mul, or_, sub

from ratelimit.spec.summary import shared_cells

COUNTERS = ("bytes", "packets", "drops", "overlimits")
GAUGES = ("backlog_bytes", "backlog_pkts")
RATES = ("throughput_bps", "drops_per_s", "rate_share", "queue_delay_ms")
TRACED = ("capacity_bps", "track_ratio")  # NaN for a link with a static rate
# Per-link columns a snapshot carries (arrays of equal length, in link order).
COLUMNS = COUNTERS + GAUGES + RATES + TRACED + ("active", "state")
TRACK_TOLERANCE = 0.1  # a traced link tracks its trace when it delivers within 10% of its capacity

STATES = ("idle", "busy", "at_rate", "starved")  # the ``state`` column holds the index
STATE_COUNTS = STATES + ("dropping",)  # what a distribution counts: the states, and the dropping links
SIDES = (("down", "dest"), ("up", "source"))  # a summary's side, and its links' direction
AT_RATE_SHARE = 0.9
STARVED_SHARE = 0.5
SHARE_EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # the last bucket: 1.0 and above
QUANTILES = (("p5", 0.05), ("p50", 0.5), ("p95", 0.95))
NAN = float("nan")


class LinkRates:
    """Per-link constants of one layout: 1 / frame rate (for the share) and 8000 / frame
    rate (ms of queue per byte), NaN for a link without a rate; which links go down."""

    def __init__(self, keys, applied: dict | None, cohorts: tuple = ()):
        def frame(part: dict) -> dict:
            out = {}
            for side, direction in SIDES:
                rate = ((part or {}).get(side) or {}).get("frame_rate_bps")
                out[direction] = float(rate) if rate else NAN
            return out
        # each link at its cohort's rate (``cohorts``: the link's (cohort, profile)); a link
        # without one at the applied plan's own (a plan of one cohort has it at the top)
        top = frame(applied)
        own = {c.get("name"): frame(c) for c in (applied or {}).get("cohorts") or ()}
        names = [c for c, _ in cohorts] if cohorts else [None] * len(keys)
        per_link = [own.get(name, top).get(k[0], NAN) for name, k in zip(names, keys)]
        self.frame_rate_bps = array("d", per_link)
        self.inv_rate = array("d", (1.0 / r for r in per_link))  # NaN stays NaN
        self.ms_per_byte = array("d", (8000.0 / r for r in per_link))
        self.down = bytes(k[0] == "dest" for k in keys)  # a mask for compress()
        self.up = bytes(k[0] != "dest" for k in keys)
        self.directions = tuple(d for d in ("dest", "source") if any(self.mask(d)))

    def mask(self, direction: str) -> bytes:
        """The mask of ``direction``'s links (``dest`` or ``source``), for compress()."""
        return self.down if direction == "dest" else self.up


def empty_columns(n: int = 0) -> dict:
    cols = {name: array("q", bytes(8 * n)) for name in COUNTERS + GAUGES}
    for name in RATES:
        cols[name] = array("d", bytes(8 * n))
    for name in ("rate_share", "queue_delay_ms") + TRACED:
        cols[name] = array("d", repeat(NAN, n))
    cols["active"] = array("b", bytes(n))
    cols["state"] = array("b", bytes(n))
    return cols


def digest(counters: dict, prev: dict | None, dt: float, rates: LinkRates, last_change: list, now: float,
           active_seconds: float, share_bytes=None, share_dt: float = 0.0, capacity=None) -> tuple[dict, float]:
    """The snapshot columns from this read's ``counters`` and the previous snapshot's
    columns ``prev`` (None: no rates this round), ``dt`` seconds apart; ``share_bytes``
    are the byte counters of ``share_dt`` seconds ago (None: ``prev``'s), the base of
    ``rate_share``.  ``last_change`` (when each link last moved, had a backlog or dropped)
    is updated in place.  ``capacity(t0, t1)``: each link's trace capacity (bit/s, NaN
    for a static rate) over that window of the clock, or None when no link is traced:
    ``capacity_bps`` over the last interval, and ``track_ratio``, the rate delivered over
    the share window against the capacity over the same window (NaN when that is 0).
    Returns (columns, packets per second)."""
    n = len(rates.inv_rate)
    cols = {name: counters[name] for name in COUNTERS + GAUGES}
    backlog = cols["backlog_bytes"]
    cols["capacity_bps"], cols["track_ratio"] = array("d", repeat(NAN, n)), array("d", repeat(NAN, n))
    if prev is None:
        cols["throughput_bps"] = array("d", bytes(8 * n))
        cols["drops_per_s"] = array("d", bytes(8 * n))
        cols["rate_share"] = array("d", repeat(NAN, n))
        moved = list(map(or_, backlog, cols["backlog_pkts"]))
        pps = 0.0
    else:
        db = list(map(sub, cols["bytes"], prev["bytes"]))
        dp = list(map(sub, cols["packets"], prev["packets"]))
        dd = list(map(sub, cols["drops"], prev["drops"]))
        if n and min(min(db), min(dp), min(dd)) < 0:  # counters were reset: no rate for those links
            for i in range(n):
                if db[i] < 0 or dp[i] < 0 or dd[i] < 0:
                    db[i] = dp[i] = dd[i] = 0
        cols["throughput_bps"] = array("d", map(mul, db, repeat(8.0 / dt)))
        cols["drops_per_s"] = array("d", map(mul, dd, repeat(1.0 / dt)))
        if share_bytes is None or share_dt <= dt:
            share_dt, share_bps = dt, cols["throughput_bps"]
        else:
            moved_bytes = list(map(sub, cols["bytes"], share_bytes))
            if n and min(moved_bytes) < 0:  # reset within the window: the last interval only
                moved_bytes = [m if m >= 0 else d * share_dt / dt for m, d in zip(moved_bytes, db)]
            share_bps = array("d", map(mul, moved_bytes, repeat(8.0 / share_dt)))
        cols["rate_share"] = array("d", map(mul, share_bps, rates.inv_rate))
        if capacity is not None:
            cols["capacity_bps"] = capacity(now - dt, now)
            cols["track_ratio"] = array("d", map(_ratio, share_bps, capacity(now - share_dt, now)))
        moved = list(map(or_, map(or_, map(or_, db, dp), dd), map(or_, backlog, cols["backlog_pkts"])))
        pps = sum(dp) / dt
    cols["queue_delay_ms"] = array("d", map(mul, backlog, rates.ms_per_byte))
    last_change[:] = [now if m else t for m, t in zip(moved, last_change)]
    cols["active"] = array("b", map(ge, last_change, repeat(now - active_seconds)))
    share = cols["rate_share"]
    busy = map(bool, moved)
    at_rate = map(ge, share, repeat(AT_RATE_SHARE))  # NaN compares false
    starved = map(and_, map(bool, backlog), map(lt, share, repeat(STARVED_SHARE)))
    # idle 0, busy 1, at_rate 2, starved 3: at rate and starved exclude each other, and both imply busy
    cols["state"] = array("b", map(add, map(add, busy, at_rate), map(mul, starved, repeat(2))))
    return cols, pps


def _ratio(got: float, capacity: float) -> float:
    return got / capacity if capacity > 0 else NAN  # NaN (a static rate) compares false


def tracking(cols: dict, rates: LinkRates) -> dict:
    """Per direction with traced links, how closely they track their traces over the share
    window: of the traced links (``links``), those with a backlog now and capacity in the
    window (``backlogged``: the ones whose delivery the capacity bounds), the mean of
    ``track_ratio`` and its p5/p50/p95, and the share of them within ``TRACK_TOLERANCE``
    (``within``); the ratios None when none is backlogged."""
    out = {}
    traced = bytes(c == c for c in cols["capacity_bps"])
    if not any(traced):
        return out
    counted = list(map(and_, map(bool, cols["backlog_bytes"]), map(lambda r: r == r, cols["track_ratio"])))
    for d in rates.directions:
        mask = bytes(map(mul, traced, rates.mask(d)))
        if not any(mask):
            continue
        ratios = sorted(compress(cols["track_ratio"], map(mul, mask, counted)))
        near = sum(1 for r in ratios if abs(r - 1) <= TRACK_TOLERANCE)
        out[d] = {"links": sum(mask), "backlogged": len(ratios), "tolerance": TRACK_TOLERANCE,
                  "ratio_mean": round(sum(ratios) / len(ratios), 6) if ratios else None,
                  "ratio": _quantiles(ratios), "within": round(near / len(ratios), 6) if ratios else None}
    return out


def totals(cols: dict, rates: LinkRates) -> dict:
    """Sums of the counters and gauges: {"dest": {...}, "source": {...}} (directions present)."""
    out = {}
    for direction in rates.directions:
        mask = rates.mask(direction)
        out[direction] = {name: sum(compress(cols[name], mask)) for name in COUNTERS + GAUGES}
        out[direction]["throughput_bps"] = sum(compress(cols["throughput_bps"], mask))
    return out


def _quantiles(values: list) -> dict:
    """p5/p50/p95 of sorted ``values`` (nearest rank); None each when there are none."""
    if not values:
        return {name: None for name, _ in QUANTILES}
    last = len(values) - 1
    return {name: round(values[min(last, max(0, math.ceil(q * len(values)) - 1))], 6) for name, q in QUANTILES}


def distribution(cols: dict, rates: LinkRates, only: bytes | None = None) -> dict:
    """Per direction: the states counted, and the distribution of rate share and queueing
    delay over the links that were not idle and have a rate (``only``: a mask of the links
    to count, e.g. a cohort's)."""
    out = {}
    for d in rates.directions:
        mask = rates.mask(d)
        out[d] = _distribution(cols, mask if only is None else bytes(map(mul, mask, only)))
    return out


def by_cohort(cols: dict, rates: LinkRates, names: tuple) -> dict:
    """Per cohort (``names``: each link's (cohort, profile)), in the plan's order: its
    profile, links, active links, throughput each way, drops/s, and its distribution;
    empty for a plan of one cohort (the whole is that cohort)."""
    order = list(dict.fromkeys(names))
    if len(order) < 2:
        return {}
    out = {}
    for name, profile in order:
        only = bytes(n == name for n, _ in names)
        down, up = bytes(map(mul, only, rates.down)), bytes(map(mul, only, rates.up))
        out[name] = {"profile": profile or None, "links": sum(only), "active_links": sum(compress(cols["active"], only)),
                     "throughput_bps_down": round(sum(compress(cols["throughput_bps"], down)), 3),
                     "throughput_bps_up": round(sum(compress(cols["throughput_bps"], up)), 3),
                     "drops_per_s": round(sum(compress(cols["drops_per_s"], only)), 3),
                     "distribution": distribution(cols, rates, only)}
    return out


COHORT_SUMS = ("bytes", "packets", "drops")  # summed per cohort and direction for /metrics


def cohort_totals(cols: dict, runs: tuple) -> dict:
    """Per (cohort, profile, direction), whatever the number of cohorts: its links, active
    links and the sums of ``COHORT_SUMS`` (``runs``: ``LinkRows.cohort_runs``, the rows as
    runs of one cohort and direction; the fleet's ``sum by (cohort)`` across routers).

    >>> from array import array
    >>> cols = {"bytes": array("q", [5, 7, 1]), "packets": array("q", [1, 2, 3]),
    ...         "drops": array("q", [0, 1, 0]), "active": array("b", [1, 0, 1])}
    >>> runs = (("a", "dsl", "dest", 0, 2), ("b", "", "dest", 2, 3))
    >>> cohort_totals(cols, runs)[("a", "dsl", "dest")]
    {'links': 2, 'active_links': 1, 'bytes': 12, 'packets': 3, 'drops': 1}
    """
    out: dict = {}
    for cohort, profile, direction, lo, hi in runs:
        sums = out.setdefault((cohort, profile, direction), dict.fromkeys(("links", "active_links") + COHORT_SUMS, 0))
        sums["links"] += hi - lo
        sums["active_links"] += sum(cols["active"][lo:hi])
        for c in COHORT_SUMS:
            sums[c] += sum(cols[c][lo:hi])
    return out


def cells(cols: dict, runs: tuple, applied: dict | None, traced: dict | None = None) -> dict:
    """Per cell of the applied plan (docs/cells.md) and direction it shares: its capacity
    (a traced cell's over the last poll, ``traced`` by (cell, direction):
    ``TraceRates.cells_bps``), its users (links) and busy users (links that delivered over
    the last poll or hold a backlog), what it delivered (bit/s over the last poll) as a
    share of its capacity, and its busy users' rates: least (0: a user starved), median
    and most, and Jain's index of them (1: all equal).

    >>> from array import array
    >>> cols = {"throughput_bps": array("d", [2e6, 2e6, 0.0]), "backlog_bytes": array("q", [0, 0, 0])}
    >>> applied = {"cohorts": [{"name": "a", "cell": {"name": "t", "down_bps": 8_000_000, "up_bps": None}}]}
    >>> cells(cols, (("a", "", "dest", 0, 3),), applied)["t"]["dest"]["utilisation"]
    0.5
    """
    shared = shared_cells(applied)
    rows: dict = {}
    for cohort, _, direction, lo, hi in runs:
        cell = shared.get((cohort, direction))
        if cell is not None:
            rows.setdefault((cell[0], direction, cell[1]), []).append((lo, hi))
    out: dict = {}
    for (name, direction, capacity), spans in rows.items():
        capacity = (traced or {}).get((name, direction), capacity)
        rates = [r for lo, hi in spans for r in cols["throughput_bps"][lo:hi]]
        queued = [q for lo, hi in spans for q in cols["backlog_bytes"][lo:hi]]
        busy = sorted(r for r, q in zip(rates, queued) if r > 0 or q > 0)
        delivered = sum(rates)
        out.setdefault(name, {})[direction] = {
            "capacity_bps": capacity, "users": len(rates), "busy_users": len(busy),
            "delivered_bps": round(delivered, 3), "utilisation": round(delivered / capacity, 4) if capacity else None,
            "busy_bps": {"min": busy[0], "median": busy[len(busy) // 2], "max": busy[-1]} if busy else None,
            "jain": round(sum(busy) ** 2 / (len(busy) * sum(b * b for b in busy)), 4) if busy and busy[-1] else None}
    return out


def _distribution(cols: dict, mask: bytes) -> dict:
    state = cols["state"]
    mine = array("b", compress(state, mask))
    counts = {name: mine.count(i) for i, name in enumerate(STATES)}
    counts["dropping"] = sum(map(bool, compress(cols["drops_per_s"], mask)))
    busy = list(map(mul, state, mask))  # nonzero: a busy link of this direction
    shares = sorted(s for s in compress(cols["rate_share"], busy) if s == s)
    delays = sorted(d for d in compress(cols["queue_delay_ms"], busy) if d == d)
    cuts = [bisect_left(shares, edge) for edge in SHARE_EDGES[1:]]
    histogram = [b - a for a, b in zip([0] + cuts, cuts + [len(shares)])]
    return {"states": counts, "links": len(shares),
            "rate_share": _quantiles(shares), "queue_delay_ms": _quantiles(delays),
            "histogram": {"edges": list(SHARE_EDGES), "counts": histogram}}
