"""Reading what the kernel dumps: qdiscs, classes and filters, parsed by hand.

Pure functions over the bytes of one netlink message (``buf[off:end]``):

- ``*_item`` give a comparable, deterministic description for ``snapshot``:
  every static attribute, decoded where we know the kind, and none of the
  counters, timestamps or kernel-chosen action indexes;
- ``u32_op`` turns a u32 filter message back into a plan operation;
- ``action_counters`` / ``class_counters`` pick the statistics out of a filter
  or class message quickly (one pass, no objects), for ``stats``.
"""

import struct

from .netlink_encode import (HTB_GLOB, HTB_OPT, MIRRED, NETEM_QOPT, NLA_TYPE_MASK, POLICE, PROTOCOL_NAMES,
                             RATESPEC, TCA_ACT_INDEX, TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_PAD,
                             TCA_ACT_STATS, TCA_CHAIN, TCA_FCNT, TCA_HTB_INIT, TCA_HTB_PARMS, TCA_KIND,
                             TCA_MIRRED_PAD, TCA_MIRRED_PARMS, TCA_MIRRED_TM, TCA_NETEM_PAD,
                             TCA_NETEM_PRNG_SEED, TCA_OPTIONS, TCA_PAD, TCA_POLICE_PAD, TCA_POLICE_RATE64,
                             TCA_POLICE_TBF, TCA_POLICE_TM, TCA_RATE, TCA_STATS, TCA_STATS2,
                             TCA_STATS_BASIC, TCA_STATS_PKT64, TCA_STATS_QUEUE, TCA_U32_ACT,
                             TCA_U32_CLASSID, TCA_U32_DIVISOR, TCA_U32_HASH, TCA_U32_LINK, TCA_U32_PCNT,
                             TCA_U32_SEL, TCA_XSTATS, TCMSG, U32_SEL, Clock, be32, htons)

_ATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
_KEY = struct.Struct(">II")  # mask, val (big-endian); off, offmask follow in host order
_KEY_OFF = struct.Struct("=ii")
_BASIC = struct.Struct("=QI")  # gnet_stats_basic: bytes, packets
_QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits

# top-level attributes that carry counters or rates, never part of a snapshot
_VOLATILE = frozenset({TCA_STATS, TCA_XSTATS, TCA_RATE, TCA_FCNT, TCA_STATS2, TCA_PAD})
# classless qdiscs: no filter list to dump
CLASSLESS = frozenset({"netem", "pfifo", "bfifo", "pfifo_fast", "pfifo_head_drop", "noqueue", "noop",
                       "tbf", "fq", "codel", "red", "choke", "gred", "pie", "fq_pie", "cake", "mq", "mqprio",
                       "plug", "skbprio", "etf", "taprio", "cbs"})


def attrs(buf, start: int, end: int):
    """(type, payload start, payload end) of each attribute in ``buf[start:end]``."""
    while start + 4 <= end:
        length, kind = _ATTR.unpack_from(buf, start)
        if length < 4:
            return
        yield kind & NLA_TYPE_MASK, start + 4, start + length
        start += (length + 3) & ~3


def attr_map(buf, start: int, end: int) -> dict:
    return {kind: (s, e) for kind, s, e in attrs(buf, start, end)}


def cstr(buf, span) -> str:
    if span is None:
        return ""
    s, e = span
    return bytes(buf[s:e]).split(b"\0", 1)[0].decode("ascii", "replace")


def u32_at(buf, span) -> int:
    return _U32.unpack_from(buf, span[0])[0]


def hexof(buf, s: int, e: int) -> str:
    return bytes(buf[s:e]).hex()


def header(buf, off: int):
    """(ifindex, handle, parent, info) of the tcmsg at ``off`` (the netlink message start)."""
    _, ifindex, handle, parent, info = TCMSG.unpack_from(buf, off + 16)
    return ifindex, handle, parent, info


def protocol_name(info: int) -> str:
    proto = htons(info & 0xFFFF)
    return PROTOCOL_NAMES.get(proto, f"0x{proto:04x}")


def _rest(buf, amap: dict, skip) -> tuple:
    """The static top-level attributes we do not decode, as (type, hex)."""
    return tuple((k, hexof(buf, s, e)) for k, (s, e) in sorted(amap.items())
                 if k not in skip and k not in _VOLATILE)


# ------------------------------------------------------------------ snapshot items


def _ratespec(raw: bytes) -> tuple:
    cell_log, linklayer, overhead, cell_align, mpu, rate = RATESPEC.unpack(raw)
    return ("rate", rate, "overhead", overhead, "mpu", mpu, "linklayer", linklayer,
            "cell_log", cell_log, "cell_align", cell_align)


def _htb_qdisc_opts(buf, s, e) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_HTB_INIT and pe - ps >= HTB_GLOB.size:
            version, r2q, defcls, debug, _direct_pkts = HTB_GLOB.unpack_from(buf, ps)  # direct_pkts counts
            out.append(("init", version, r2q, defcls, debug))
        else:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def _htb_class_opts(buf, s, e) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_HTB_PARMS and pe - ps >= HTB_OPT.size:
            rate, ceil, buffer, cbuffer, quantum, level, prio = HTB_OPT.unpack_from(buf, ps)
            out.append(("parms", _ratespec(rate), _ratespec(ceil), "buffer", buffer, "cbuffer", cbuffer,
                        "quantum", quantum, "level", level, "prio", prio))
        else:
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def _netem_opts(buf, s, e) -> tuple:
    if e - s < NETEM_QOPT.size:
        return (("raw", hexof(buf, s, e)),)
    latency, limit, loss, gap, duplicate, jitter = NETEM_QOPT.unpack_from(buf, s)
    out = [("qopt", "latency", latency, "limit", limit, "loss", loss, "gap", gap,
            "duplicate", duplicate, "jitter", jitter)]
    for kind, ps, pe in attrs(buf, s + NETEM_QOPT.size, e):
        if kind not in (TCA_NETEM_PRNG_SEED, TCA_NETEM_PAD):  # the seed is random unless set
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


_QDISC_OPTS = {"htb": _htb_qdisc_opts, "netem": _netem_opts}
_CLASS_OPTS = {"htb": _htb_class_opts}


def qdisc_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, handle, parent, _refcnt = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _QDISC_OPTS.get(kind, _raw_opts)(buf, *span)
    return ifindex, ("qdisc", parent, handle, kind, opts, _rest(buf, amap, (TCA_KIND, TCA_OPTIONS)))


def class_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, classid, parent, leaf = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _CLASS_OPTS.get(kind, _raw_opts)(buf, *span)
    return ifindex, ("class", parent, classid, kind, leaf, opts, _rest(buf, amap, (TCA_KIND, TCA_OPTIONS)))


def _raw_opts(buf, s, e) -> tuple:
    return (("raw", hexof(buf, s, e)),)


def _sel(buf, s, e) -> tuple:
    flags, offshift, nkeys, offmask, off, offoff, hoff, hmask = U32_SEL.unpack_from(buf, s)
    keys = []
    p = s + U32_SEL.size
    for _ in range(nkeys):
        if p + 16 > e:
            break
        mask, val = _KEY.unpack_from(buf, p)
        koff, koffmask = _KEY_OFF.unpack_from(buf, p + 8)
        keys.append((val, mask, koff, koffmask))
        p += 16
    return (flags, offshift, nkeys, offmask, off, offoff, hoff, be32(hmask),
            tuple(keys))


def _police_opts(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_POLICE_TBF and pe - ps >= POLICE.size:
            _index, action, limit, burst, mtu, rate, peak, _ref, _bind, capab = POLICE.unpack_from(buf, ps)
            out.append(("tbf", "action", action, "limit", limit, "burst", burst, "mtu", mtu,
                        _ratespec(rate), ("peak",) + _ratespec(peak), "capab", capab))
        elif kind not in (TCA_POLICE_TM, TCA_POLICE_PAD):
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def _mirred_opts(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_MIRRED_PARMS and pe - ps >= MIRRED.size:
            _index, capab, action, _ref, _bind, eaction, ifindex = MIRRED.unpack_from(buf, ps)
            out.append(("parms", "capab", capab, "action", action, "eaction", eaction,
                        "dev", names(ifindex) if names else ifindex))
        elif kind not in (TCA_MIRRED_TM, TCA_MIRRED_PAD):
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def _other_action_opts(buf, s, e, names) -> tuple:
    """Unknown actions: drop 32-byte timestamps (struct tcf_t) and the index/refcounts of tc_gen."""
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if pe - ps == 32:
            continue
        raw = bytearray(buf[ps:pe])
        if kind == 2 and len(raw) >= 20:
            raw[0:4] = bytes(4)
            raw[12:20] = bytes(8)
        out.append((kind, raw.hex()))
    return tuple(out)


_ACTION_OPTS = {"police": _police_opts, "mirred": _mirred_opts}


def _actions(buf, s, e, names) -> tuple:
    out = []
    for prio, ps, pe in attrs(buf, s, e):
        amap = attr_map(buf, ps, pe)
        kind = cstr(buf, amap.get(TCA_ACT_KIND))
        span = amap.get(TCA_ACT_OPTIONS)
        opts = () if span is None else _ACTION_OPTS.get(kind, _other_action_opts)(buf, *span, names)
        rest = tuple((k, hexof(buf, a, b)) for k, (a, b) in sorted(amap.items())
                     if k not in (TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_STATS, TCA_ACT_PAD, TCA_ACT_INDEX))
        out.append((prio, kind, opts, rest))
    return tuple(out)


def _u32_opts(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_U32_SEL:
            out.append(("sel",) + _sel(buf, ps, pe))
        elif kind == TCA_U32_ACT:
            out.append(("act", _actions(buf, ps, pe, names)))
        elif kind in (TCA_U32_CLASSID, TCA_U32_HASH, TCA_U32_LINK, TCA_U32_DIVISOR) and pe - ps == 4:
            out.append(({TCA_U32_CLASSID: "classid", TCA_U32_HASH: "hash", TCA_U32_LINK: "link",
                         TCA_U32_DIVISOR: "divisor"}[kind], _U32.unpack_from(buf, ps)[0]))
        elif kind != TCA_U32_PCNT:  # per-key hit counters
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def _raw_filter_opts(buf, s, e, names) -> tuple:
    return _raw_opts(buf, s, e)


_FILTER_OPTS = {"u32": _u32_opts}


def filter_item(buf, off: int, end: int, parent: int, names=None) -> tuple:
    """``names(ifindex)`` gives device names for redirect targets (indexes change when a device is remade)."""
    _, handle, _, info = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    chain = u32_at(buf, amap[TCA_CHAIN]) if TCA_CHAIN in amap else 0
    span = amap.get(TCA_OPTIONS)
    opts = () if span is None else _FILTER_OPTS.get(kind, _raw_filter_opts)(buf, *span, names)
    return ("filter", parent, info >> 16, protocol_name(info), handle, kind, chain, opts,
            _rest(buf, amap, (TCA_KIND, TCA_OPTIONS, TCA_CHAIN)))


# ------------------------------------------------------------------ u32 back to plan operations


def u32_op(buf, off: int, end: int, dev: str, parent: int, clk: Clock, link_name):
    """The U32Table / U32Filter a u32 filter message describes (None for the kernel's own root tables)."""
    from .plan import HashKey, Key, Police, U32Filter, U32Table
    _, handle, _, info = header(buf, off)
    amap = attr_map(buf, off + 36, end)
    if cstr(buf, amap.get(TCA_KIND)) != "u32" or TCA_OPTIONS not in amap:
        return None
    prio, proto = info >> 16, protocol_name(info)
    ht, bucket, node = handle >> 20, (handle >> 12) & 0xFF, handle & 0xFFF
    opts = attr_map(buf, *amap[TCA_OPTIONS])
    if node == 0:
        if ht >= 0x800 or TCA_U32_DIVISOR not in opts:
            return None
        return U32Table(dev, parent, prio, proto, ht, u32_at(buf, opts[TCA_U32_DIVISOR]))
    keys, hashkey = (), None
    if TCA_U32_SEL in opts:
        sel = _sel(buf, *opts[TCA_U32_SEL])
        keys = tuple(Key(val, mask, koff) for val, mask, koff, _ in sel[8])
        if sel[7]:
            hashkey = HashKey(sel[7], sel[6])
    link = u32_at(buf, opts[TCA_U32_LINK]) >> 20 if TCA_U32_LINK in opts else None
    classid = u32_at(buf, opts[TCA_U32_CLASSID]) if TCA_U32_CLASSID in opts else None
    police = redirect = None
    if TCA_U32_ACT in opts:
        for _, ps, pe in attrs(buf, *opts[TCA_U32_ACT]):
            amap2 = attr_map(buf, ps, pe)
            kind = cstr(buf, amap2.get(TCA_ACT_KIND))
            aopts = attr_map(buf, *amap2[TCA_ACT_OPTIONS]) if TCA_ACT_OPTIONS in amap2 else {}
            if kind == "police" and TCA_POLICE_TBF in aopts:
                fields = POLICE.unpack_from(buf, aopts[TCA_POLICE_TBF][0])
                burst, mtu = fields[3], fields[4]
                _, _, _, _, mpu, rate = RATESPEC.unpack(fields[5])
                if TCA_POLICE_RATE64 in aopts:
                    rate = _U64.unpack_from(buf, aopts[TCA_POLICE_RATE64][0])[0]
                police = Police(rate * 8, clk.size_of(rate, burst) if rate else 0, mtu, mpu)
            elif kind == "mirred" and TCA_MIRRED_PARMS in aopts:
                ifindex = MIRRED.unpack_from(buf, aopts[TCA_MIRRED_PARMS][0])[6]
                redirect = link_name(ifindex)
    return U32Filter(dev, parent, prio, proto, 0 if ht >= 0x800 else ht, bucket, node, keys, hashkey, link,
                     classid, police, redirect)


# ------------------------------------------------------------------ counters


def _stats_where(buf, s: int, e: int) -> tuple:
    """Where BASIC, QUEUE and PKT64 sit in a gnet_stats nest: ((offset, header) or None) each."""
    found = {TCA_STATS_BASIC: None, TCA_STATS_QUEUE: None, TCA_STATS_PKT64: None}
    while s + 4 <= e:
        head = _ATTR.unpack_from(buf, s)
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
        packets = _U64.unpack_from(buf, base + pkt64[0] + 4)[0]
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
        if where is not None and all(w is None or _ATTR.unpack_from(buf, off + w[0]) == w[1] for w in where):
            return _read(buf, off, where)
        span = self.locate(buf, off, end)
        if span is None:
            return None
        where = tuple(None if w is None else (w[0] - off, w[1]) for w in _stats_where(buf, *span))
        self.where[end - off] = where
        return _read(buf, off, where)


def _find(buf, s: int, e: int, want: int):
    while s + 4 <= e:
        length, kind = _ATTR.unpack_from(buf, s)
        if length < 4:
            return None
        if kind & NLA_TYPE_MASK == want:
            return s + 4, s + length
        s += (length + 3) & ~3
    return None


def _action_stats(buf, off: int, end: int):
    """The statistics nest of a filter's police action (else of its first action), or None."""
    span = _find(buf, off + 36, end, TCA_OPTIONS)
    if span is None:
        return None
    span = _find(buf, span[0], span[1], TCA_U32_ACT)
    if span is None:
        return None
    first = None
    s, e = span
    while s + 4 <= e:
        length, _ = _ATTR.unpack_from(buf, s)
        if length < 4:
            break
        kind = _find(buf, s + 4, s + length, TCA_ACT_KIND)
        stats = _find(buf, s + 4, s + length, TCA_ACT_STATS)
        if stats is not None:
            if kind is not None and bytes(buf[kind[0]:kind[0] + 7]) == b"police\0":
                return stats
            first = first or stats
        s += (length + 3) & ~3
    return first


def _class_stats(buf, off: int, end: int):
    return _find(buf, off + 36, end, TCA_STATS2)


def action_counters() -> CounterReader:
    """A reader of filter messages' action counters (police first)."""
    return CounterReader(_action_stats)


def class_counters() -> CounterReader:
    """A reader of class messages' counters (TCA_STATS2)."""
    return CounterReader(_class_stats)
