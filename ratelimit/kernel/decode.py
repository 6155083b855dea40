"""Reading what the kernel dumps: qdiscs, classes and filters, parsed by hand.

Pure functions over the bytes of one netlink message (``buf[off:end]``):

- ``*_item`` give a comparable, deterministic description for snapshots:
  every static attribute, decoded where ``kinds/`` knows the kind, and none of
  the counters, timestamps or kernel-chosen action indexes;
- ``u32_op`` turns a u32 filter message back into a plan operation;
- ``action_counters`` / ``class_counters`` pick the statistics out of a filter
  or class message quickly (one pass, no objects).
"""

import struct

from .kinds import fifo, htb, netem, stab, u32
from .nl import (NLATTR, TCA_CHAIN, TCA_STAB, TCA_FCNT, TCA_KIND, TCA_OPTIONS, TCA_PAD, TCA_RATE, TCA_STATS,
                 TCA_STATS2, TCA_STATS_BASIC, TCA_STATS_PKT64, TCA_STATS_QUEUE, TCA_XSTATS, U64, NLA_TYPE_MASK,
                 attr_map, cstr, find, header, hexof, protocol_name, u32_at)

_BASIC = struct.Struct("=QI")  # gnet_stats_basic: bytes, packets
_QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits

# top-level attributes that carry counters or rates, never part of a snapshot
_VOLATILE = frozenset({TCA_STATS, TCA_XSTATS, TCA_RATE, TCA_FCNT, TCA_STATS2, TCA_PAD})
# classless qdiscs: no filter list to dump
CLASSLESS = frozenset({"netem", "pfifo", "bfifo", "pfifo_fast", "pfifo_head_drop", "noqueue", "noop",
                       "tbf", "fq", "codel", "red", "choke", "gred", "pie", "fq_pie", "cake", "mq", "mqprio",
                       "plug", "skbprio", "etf", "taprio", "cbs"})

_QDISC_OPTS = {"htb": htb.decode_qdisc, "netem": netem.decode, "bfifo": fifo.decode, "pfifo": fifo.decode}
_CLASS_OPTS = {"htb": htb.decode_class}
_FILTER_OPTS = {"u32": u32.decode}


def _raw(buf, s, e, *_names) -> tuple:
    return (("raw", hexof(buf, s, e)),)


def _rest(buf, amap: dict, skip) -> tuple:
    """The static top-level attributes we do not decode, as (type, hex)."""
    return tuple((k, hexof(buf, s, e)) for k, (s, e) in sorted(amap.items())
                 if k not in skip and k not in _VOLATILE)


def qdisc_kind(buf, off: int, end: int) -> str:
    return cstr(buf, attr_map(buf, off + 36, end).get(TCA_KIND))


def qdisc_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, handle, parent, _refcnt = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _QDISC_OPTS.get(kind, _raw)(buf, *span)
    size_table = () if TCA_STAB not in amap else stab.decode(buf, *amap[TCA_STAB])
    return ifindex, ("qdisc", parent, handle, kind, opts, size_table,
                     _rest(buf, amap, (TCA_KIND, TCA_OPTIONS, TCA_STAB)))


def class_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, classid, parent, leaf = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _CLASS_OPTS.get(kind, _raw)(buf, *span)
    return ifindex, ("class", parent, classid, kind, leaf, opts, _rest(buf, amap, (TCA_KIND, TCA_OPTIONS)))


def filter_item(buf, off: int, end: int, parent: int, names=None) -> tuple:
    """``names(ifindex)`` gives device names for redirect targets (indexes change when a device is remade)."""
    _, handle, _, info = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    chain = u32_at(buf, amap[TCA_CHAIN]) if TCA_CHAIN in amap else 0
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _FILTER_OPTS.get(kind, _raw)(buf, *span, names)
    return ("filter", parent, info >> 16, protocol_name(info), handle, kind, chain, opts,
            _rest(buf, amap, (TCA_KIND, TCA_OPTIONS, TCA_CHAIN)))


def u32_op(buf, off: int, end: int, dev: str, parent: int, clk, link_name):
    """The U32Table / U32Filter a u32 filter message describes (None for the kernel's own root tables)."""
    _, handle, _, info = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    if cstr(buf, amap.get(TCA_KIND)) != "u32" or TCA_OPTIONS not in amap:
        return None
    return u32.to_op(buf, *amap[TCA_OPTIONS], dev, parent, info >> 16, protocol_name(info), handle, clk,
                     link_name)


# ------------------------------------------------------------------ counters


def _stats_where(buf, s: int, e: int) -> tuple:
    """Where BASIC, QUEUE and PKT64 sit in a gnet_stats nest: ((offset, header) or None) each."""
    found = {TCA_STATS_BASIC: None, TCA_STATS_QUEUE: None, TCA_STATS_PKT64: None}
    while s + 4 <= e:
        head = NLATTR.unpack_from(buf, s)
        if head[0] < 4:
            break
        kind = head[1] & NLA_TYPE_MASK
        if kind in found:
            found[kind] = (s, head)
        s += (head[0] + 3) & ~3
    return found[TCA_STATS_BASIC], found[TCA_STATS_QUEUE], found[TCA_STATS_PKT64]


def _read(buf, base: int, where: tuple) -> tuple:
    """(bytes, packets, drops, overlimits, backlog, qlen); offsets in ``where`` relative to ``base``."""
    basic, queue, pkt64 = where
    nbytes = packets = drops = overlimits = backlog = qlen = 0
    if basic is not None:
        nbytes, packets = _BASIC.unpack_from(buf, base + basic[0] + 4)
    if queue is not None:
        qlen, backlog, drops, _requeues, overlimits = _QUEUE.unpack_from(buf, base + queue[0] + 4)
    if pkt64 is not None:
        packets = U64.unpack_from(buf, base + pkt64[0] + 4)[0]
    return nbytes, packets, drops, overlimits, backlog, qlen


class CounterReader:
    """Reads the counters of many similar messages quickly.

    ``locate(buf, off, end)`` finds the statistics nest by walking the
    attributes; the reader remembers where the counters were for each message
    length and reads the next message of that length straight from there once
    the attribute headers found there match (otherwise it walks again).
    """

    def __init__(self, locate):
        self.locate = locate
        self.where: dict[int, tuple] = {}

    def __call__(self, buf, off: int, end: int):
        where = self.where.get(end - off)
        if where is not None and all(w is None or NLATTR.unpack_from(buf, off + w[0]) == w[1] for w in where):
            return _read(buf, off, where)
        span = self.locate(buf, off, end)
        if span is None:
            return None
        where = tuple(None if w is None else (w[0] - off, w[1]) for w in _stats_where(buf, *span))
        self.where[end - off] = where
        return _read(buf, off, where)


def _class_stats(buf, off: int, end: int):
    return find(buf, off + 36, end, TCA_STATS2)


def action_counters() -> CounterReader:
    """A reader of u32 filter messages' action counters (police first)."""
    return CounterReader(u32.stats_span)


def class_counters() -> CounterReader:
    """A reader of class messages' counters (TCA_STATS2)."""
    return CounterReader(_class_stats)
