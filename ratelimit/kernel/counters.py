"""Counters of every link, from one dump per device, at scale.

``FlowTable`` says where each of a plan's flows finds its counters in the
kernel: an HTB class (shape mode, one class dump per HTB qdisc: a device-wide
dump stops at the first netem qdisc on Linux 6.1) or the action of
a u32 filter (police mode, one filter dump per device and parent).  It is pure
and is built once per plan.

``read_classes`` / ``read_filters`` walk the receive buffers of those dumps
once.  The first message of each length is parsed attribute by attribute to
find where TCA_STATS2's basic and queue blocks sit (``_Layout``); every later
message of that length is read with one ``struct`` unpack at those offsets --
its key, the two attribute headers and the counters -- and the headers read
there are checked against the learnt ones (a mismatch parses that message
again).  No dicts or objects per message: 65,536 classes (about 15 MB in 480
buffers) decode in tens of milliseconds.

Counters come back as columns (``COLUMNS``: ``array('q')`` each, one entry
per flow, in ``plan.flows`` order); a flow whose counters were not found
(its device is gone) reads 0.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

from ..plan.ops import INGRESS_HANDLE

from ..plan.filters import U32Filter
from .kinds import u32
from .nl import NLA_TYPE_MASK, NLATTR, TCA_STATS2, TCA_STATS_BASIC, TCA_STATS_PKT64, TCA_STATS_QUEUE, U64, find

COLUMNS = ("bytes", "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts")

_LENGTH = struct.Struct("=I")
_BASIC = struct.Struct("=QI")  # gnet_stats_basic: bytes, packets
_QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
_HANDLE_AT, _INFO_AT = 24, 32  # tcm_handle and tcm_info inside a message (nlmsghdr, then tcmsg)


# ------------------------------------------------------------------ where the counters are


@dataclass(frozen=True)
class FlowTable:
    """Where each flow of a plan finds its counters; ``rows`` flows in ``plan.flows`` order."""

    rows: int
    classes: tuple  # ((dev, qdisc handle, {classid: row}), ...)
    filters: tuple  # ((dev, parent, {prio << 32 | u32 handle: row}), ...)
    same: tuple  # ((row, row it reads the same counters as), ...)

    @classmethod
    def of(cls, plan) -> "FlowTable":
        by_class: dict = {}
        by_filter: dict = {}
        same = []
        where = arriving = None
        for row, flow in enumerate(plan.flows):
            if flow.classid is not None:
                want, key = by_class.setdefault((flow.dev, flow.classid & 0xFFFF0000), {}), flow.classid
            else:
                if where is None:  # police mode: a flow's counters are its filter's
                    where, arriving = _leaf_parents(plan.ops), plan.request.arriving
                root, ingress = where.get((flow.dev, flow.prio, flow.handle), (None, False))
                # the same u32 handle can exist under both the root and the ingress qdisc of a device
                parent = INGRESS_HANDLE if root is None or (ingress and flow.direction == arriving) else root
                want, key = by_filter.setdefault((flow.dev, parent), {}), flow.prio << 32 | flow.handle
            _place(want, key, row, same)
        return cls(len(plan.flows), tuple((dev, qdisc, want) for (dev, qdisc), want in by_class.items()),
                   tuple((dev, parent, want) for (dev, parent), want in by_filter.items()), tuple(same))

    @classmethod
    def of_classes(cls, classes) -> "FlowTable":
        """Where the counters of HTB classes ``(dev, classid), ...`` are, a row each in that order."""
        by_class: dict = {}
        same = []
        rows = 0
        for row, (dev, classid) in enumerate(classes):
            _place(by_class.setdefault((dev, classid & 0xFFFF0000), {}), classid, row, same)
            rows = row + 1
        return cls(rows, tuple((dev, qdisc, want) for (dev, qdisc), want in by_class.items()), (), tuple(same))

    def empty(self) -> dict:
        """One zeroed column per counter name."""
        zeros = bytes(8 * self.rows)
        return {name: array("q", zeros) for name in COLUMNS}

    def fill_same(self, cols: dict) -> None:
        """Give the flows that share counters with another flow that flow's values."""
        for row, src in self.same:
            for col in cols.values():
                col[row] = col[src]


def _place(want: dict, key: int, row: int, same: list) -> None:
    """Row ``row`` reads the counters at ``key``: its own, or the same as an earlier row's."""
    if key in want:
        same.append((row, want[key]))
    else:
        want[key] = row


def _leaf_parents(ops) -> dict:
    """(dev, prio, u32 handle) -> (its parent other than ingress or None, also under ingress?)."""
    out: dict = {}
    for op in ops:
        if type(op) is U32Filter and op.link is None:
            key = (op.dev, op.prio, op.handle)
            root, ingress = out.get(key, (None, False))
            if op.parent == INGRESS_HANDLE:
                ingress = True
            else:
                root = op.parent
            out[key] = (root, ingress)
    return out


# ------------------------------------------------------------------ reading dumps


def read_classes(chunks, want: dict, cols: dict, layouts: dict) -> None:
    """Fill ``cols`` from an HTB class dump: ``want`` maps classid -> row."""
    nbytes, packets, drops, over = cols["bytes"], cols["packets"], cols["drops"], cols["overlimits"]
    backlog, qlen = cols["backlog_bytes"], cols["backlog_pkts"]
    for buf, off, stop in chunks:
        while off < stop:
            length = _LENGTH.unpack_from(buf, off)[0]
            lay = layouts.get(length)
            if lay is None or lay.unpack is None:
                t = None
            else:
                t = lay.unpack(buf, off)  # (key, basic header, bytes, packets, queue header, qlen, ...)
                if t[1] != lay.basic or t[4] != lay.queue:
                    t = None
            if t is None:
                lay = layouts[length] = _Layout.learn(buf, off, off + length, _class_stats)
                t = lay.read(buf, off, off + length)
            if t is not None:
                row = want.get(t[0])
                if row is not None:
                    nbytes[row], packets[row] = t[2], t[3]
                    qlen[row], backlog[row], drops[row], over[row] = t[5], t[6], t[7], t[9]
            off += (length + 3) & ~3


def read_filters(chunks, want: dict, cols: dict, layouts: dict) -> None:
    """Fill ``cols`` from a u32 filter dump: ``want`` maps prio << 32 | handle -> row; the
    counters are those of the filter's police action (else of its first action)."""
    nbytes, packets, drops, over = cols["bytes"], cols["packets"], cols["drops"], cols["overlimits"]
    backlog, qlen = cols["backlog_bytes"], cols["backlog_pkts"]
    for buf, off, stop in chunks:
        while off < stop:
            length, = _LENGTH.unpack_from(buf, off)
            handle, info = _FILTER_KEY.unpack_from(buf, off)
            row = want.get((info >> 16) << 32 | handle)
            if row is not None:
                lay = layouts.get(length)
                if lay is None or lay.unpack is None:
                    t = None
                else:
                    t = lay.unpack(buf, off)
                    if t[1] != lay.basic or t[4] != lay.queue:
                        t = None
                if t is None:
                    lay = layouts[length] = _Layout.learn(buf, off, off + length, u32.stats_span)
                    t = lay.read(buf, off, off + length)
                if t is not None:  # a filter without an action has no counters
                    nbytes[row], packets[row] = t[2], t[3]
                    qlen[row], backlog[row], drops[row], over[row] = t[5], t[6], t[7], t[9]
            off += (length + 3) & ~3


_FILTER_KEY = struct.Struct(f"={_HANDLE_AT}xI4xI")  # tcm_handle, tcm_info (prio << 16 | protocol)


def _class_stats(buf, off: int, end: int):
    return find(buf, off + 36, end, TCA_STATS2)


def _stats_where(buf, s: int, e: int) -> dict:
    """Offsets of the BASIC, QUEUE and PKT64 attributes of a gnet_stats nest (absent: missing)."""
    found = {}
    while s + 4 <= e:
        length, kind = NLATTR.unpack_from(buf, s)
        if length < 4:
            break
        if kind & NLA_TYPE_MASK in (TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64):
            found.setdefault(kind & NLA_TYPE_MASK, s)
        s += (length + 3) & ~3
    return found


class _Layout:
    """Where the key, the stats attribute headers and the counters sit in messages of one
    length.  ``unpack(buf, off)`` reads (key, basic header, bytes, packets, queue header,
    qlen, backlog, drops, requeues, overlimits) in one call; ``basic`` and ``queue`` are the
    attribute headers (length | type << 16) to expect there.  A layout that cannot be read
    that way (no queue block, blocks out of order, a 64-bit packet count: more than 2**32
    packets) has ``unpack`` None, and ``read`` parses each such message."""

    __slots__ = ("unpack", "basic", "queue", "locate")

    def __init__(self, unpack, basic, queue, locate):
        self.unpack, self.basic, self.queue, self.locate = unpack, basic, queue, locate

    @classmethod
    def learn(cls, buf, off: int, end: int, locate) -> "_Layout":
        span = locate(buf, off, end)
        where = {} if span is None else _stats_where(buf, *span)
        b, q = where.get(TCA_STATS_BASIC), where.get(TCA_STATS_QUEUE)
        if b is None or q is None or TCA_STATS_PKT64 in where or not (off + _HANDLE_AT + 4 <= b and b + 16 <= q):
            return cls(None, None, None, locate)
        b, q = b - off, q - off
        unpack = struct.Struct(f"={_HANDLE_AT}xI{b - _HANDLE_AT - 4}xIQI{q - b - 16}xIIIIII").unpack_from
        return cls(unpack, _LENGTH.unpack_from(buf, off + b)[0], _LENGTH.unpack_from(buf, off + q)[0], locate)

    def read(self, buf, off: int, end: int):
        """The counters tuple of one message (see the class doc); None if it has no statistics."""
        if self.unpack is not None:
            return self.unpack(buf, off)
        span = self.locate(buf, off, end)
        if span is None:
            return None
        where = _stats_where(buf, *span)
        if TCA_STATS_BASIC not in where:
            return None
        nbytes, packets = _BASIC.unpack_from(buf, where[TCA_STATS_BASIC] + 4)
        qlen = backlog = drops = requeues = overlimits = 0
        if TCA_STATS_QUEUE in where:
            qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(buf, where[TCA_STATS_QUEUE] + 4)
        if TCA_STATS_PKT64 in where:
            packets = U64.unpack_from(buf, where[TCA_STATS_PKT64] + 4)[0]
        key = _LENGTH.unpack_from(buf, off + _HANDLE_AT)[0]
        return (key, None, nbytes, packets, None, qlen, backlog, drops, requeues, overlimits)
