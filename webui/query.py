"""Which links a table page shows, in what order: filters and sorts over a snapshot's columns.

The browser asks for one page of the filtered, sorted links at a time
(``/api/links``), so each sort is computed once per snapshot (a column's
values change every poll) or once per layout (host, port, direction, device
and configured rate never change), and kept for the next page or browser;
filters are masks combined with C-level ``map``/``compress``.

``worst`` orders the links that need a look first: those with a backlog or
drops this interval by rate share (lowest first), then the other busy links
by rate share, then the idle ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from ipaddress import ip_address
from itertools import compress, repeat
from operator import and_, eq, ge, lt

from ratelimit.errors import shown
from ratelimit.spec.units import decimal

from .digest import COLUMNS, STATE_COUNTS, STATES
from .snapshot import OTHERS

STATIC_SORTS = ("direction", "host", "port", "dev", "rate_bps")
SORTABLE = STATIC_SORTS + COLUMNS + ("worst",)
STATE_FILTERS = STATE_COUNTS
ASCENDING_FIRST = ("direction", "host", "port", "dev", "worst")  # the other sorts start highest first


@dataclass(frozen=True)
class LinkQuery:
    """What a page asks for; ``None`` means no such filter."""

    host: str | None = None  # a substring of the address
    ports: tuple[int, int] | None = None
    direction: str | None = None
    active: bool = True  # only links active in the last seconds
    state: str | None = None  # one of STATE_FILTERS
    share: tuple[float, float] | None = None  # rate share in [low, high)
    sort: str = "throughput_bps"
    desc: bool = True


def select(snap, q: LinkQuery) -> list[int]:
    """The rows ``q`` matches, in its order."""
    order = _order(snap, q.sort, q.desc)
    mask = _mask(snap, q)
    if mask is None:
        return order
    return list(compress(order, map(mask.__getitem__, order)))


def _mask(snap, q: LinkQuery):
    cols, keys = snap.columns, snap.layout.keys
    masks = []
    if q.active:
        masks.append(cols["active"])
    if q.direction:
        masks.append(snap.layout.rates.mask(q.direction))
    if q.host:
        masks.append([q.host in k[1] for k in keys])
    if q.ports:
        lo, hi = q.ports
        masks.append([lo <= k[2] <= hi for k in keys])
    if q.state == "dropping":
        masks.append(list(map(bool, cols["drops_per_s"])))
    elif q.state:
        masks.append(list(map(eq, cols["state"], repeat(STATES.index(q.state)))))
    if q.share:
        share = cols["rate_share"]
        masks.append(list(map(and_, map(ge, share, repeat(q.share[0])), map(lt, share, repeat(q.share[1])))))
    if not masks:
        return None
    mask = masks[0]
    for other in masks[1:]:
        mask = list(map(and_, map(bool, mask), map(bool, other)))
    return mask


def _order(snap, sort: str, desc: bool) -> list[int]:
    """Every row, sorted; ties keep the layout's order."""
    static = sort in STATIC_SORTS
    cache = snap.layout.orders if static else snap.cache
    key = (sort, desc)
    order = cache.get(key)
    if order is None:
        order = cache[key] = sorted(range(len(snap.layout)), key=_key(snap, sort).__getitem__, reverse=desc)
    return order


def _key(snap, sort: str) -> list:
    keys, cols = snap.layout.keys, snap.columns
    if sort == "host":
        parsed: dict = {}
        for k in keys:
            if k[1] not in parsed:  # the default cohort's link ("others") after every address
                a = None if k[1] == OTHERS else ip_address(k[1])
                parsed[k[1]] = (7, 0) if a is None else (a.version, int(a))
        return [(*parsed[k[1]], k[2], k[0]) for k in keys]
    if sort in ("direction", "port", "dev"):
        pos = {"direction": 0, "port": 2, "dev": 3}[sort]
        return [k[pos] for k in keys]
    if sort == "rate_bps":
        return [r or 0 for r in snap.layout.rate_bps]
    if sort == "worst":
        return _worst(cols)
    values = cols[sort]
    if sort in ("rate_share", "queue_delay_ms"):
        return [v if v == v else -math.inf for v in values]  # no rate: below every share
    return values


def _worst(cols: dict) -> list[float]:
    """Group (0: backlog or drops, 1: other busy links, 2: idle) x 10 + rate share (capped)."""
    share, state, backlog, drops = cols["rate_share"], cols["state"], cols["backlog_bytes"], cols["drops_per_s"]
    return [(0 if b or d else 1 if st else 2) * 10.0 + (min(s, 9.0) if s == s else 9.5)
            for s, st, b, d in zip(share, state, backlog, drops)]


def parse_share(text: str) -> tuple[float, float]:
    """``0.2-0.3`` (a half-open range of rate shares; ``1-`` for 1 and above) -> (low, high)."""
    low, sep, high = text.partition("-")
    lo = decimal(low)
    hi = decimal(high) if high.strip() else math.inf
    if not sep or lo is None or hi is None or not 0 <= lo < hi:
        raise ValueError(f"{shown(repr(text))} is not a range of rate shares (e.g. 0.2-0.3, 1-)")
    return lo, hi


__all__ = ["ASCENDING_FIRST", "LinkQuery", "SORTABLE", "STATE_FILTERS", "parse_share", "select"]

