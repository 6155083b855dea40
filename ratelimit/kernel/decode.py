"""Reading what the kernel dumps: qdiscs, classes and filters, parsed by hand.

Pure functions over the bytes of one netlink message (``buf[off:end]``):

- ``*_item`` give a comparable, deterministic description for snapshots:
  every static attribute, decoded where ``kinds/`` knows the kind, and none of
  the counters, timestamps or kernel-chosen action indexes;
- ``u32_op`` turns a u32 filter message back into a plan operation.

Counters (statistics) are read by ``counters``, built for tens of thousands of
messages per dump.
"""

from .kinds import bpf, fifo, htb, netem, stab, u32
from .nl import (TCA_CHAIN, TCA_FCNT, TCA_KIND, TCA_OPTIONS, TCA_PAD, TCA_RATE, TCA_STAB, TCA_STATS, TCA_STATS2,
                 TCA_XSTATS, attr_map, cstr, header, hexof, protocol_name, u32_at)

# top-level attributes that carry counters or rates, never part of a snapshot
_VOLATILE = frozenset({TCA_STATS, TCA_XSTATS, TCA_RATE, TCA_FCNT, TCA_STATS2, TCA_PAD})
# classless qdiscs: no filter list to dump
CLASSLESS = frozenset({"netem", "pfifo", "bfifo", "pfifo_fast", "pfifo_head_drop", "noqueue", "noop",
                       "tbf", "fq", "codel", "red", "choke", "gred", "pie", "fq_pie", "cake", "mq", "mqprio",
                       "plug", "skbprio", "etf", "taprio", "cbs"})

_QDISC_OPTS = {"htb": htb.decode_qdisc, "netem": netem.decode, "bfifo": fifo.decode, "pfifo": fifo.decode}
_CLASS_OPTS = {"htb": htb.decode_class}
_FILTER_OPTS = {"u32": u32.decode, "bpf": bpf.decode}


def _raw(buf, s, e, *_names) -> tuple:
    return (("raw", hexof(buf, s, e)),)


def _rest(buf, amap: dict, skip) -> tuple:
    """The static top-level attributes we do not decode, as (type, hex)."""
    return tuple((k, hexof(buf, s, e)) for k, (s, e) in sorted(amap.items())
                 if k not in skip and k not in _VOLATILE)


def qdisc_kind(buf, off: int, end: int) -> str:
    return cstr(buf, attr_map(buf, off + 36, end).get(TCA_KIND))


def _parts(buf, off: int, end: int, decoders: dict, *extra) -> tuple[dict, str, tuple]:
    """A message's top-level attributes, its kind, and its options as ``decoders[kind]``
    reads them (``_raw`` for a kind not in it; ``()`` without options)."""
    amap = attr_map(buf, off + 36, end)
    kind = cstr(buf, amap.get(TCA_KIND))
    span = amap.get(TCA_OPTIONS)
    return amap, kind, () if span is None else decoders.get(kind, _raw)(buf, *span, *extra)


def qdisc_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, handle, parent, _refcnt = header(buf, off)
    amap, kind, opts = _parts(buf, off, end, _QDISC_OPTS)
    size_table = () if TCA_STAB not in amap else stab.decode(buf, *amap[TCA_STAB])
    return ifindex, ("qdisc", parent, handle, kind, opts, size_table,
                     _rest(buf, amap, (TCA_KIND, TCA_OPTIONS, TCA_STAB)))


def class_item(buf, off: int, end: int) -> tuple[int, tuple]:
    ifindex, classid, parent, leaf = header(buf, off)
    amap, kind, opts = _parts(buf, off, end, _CLASS_OPTS)
    return ifindex, ("class", parent, classid, kind, leaf, opts, _rest(buf, amap, (TCA_KIND, TCA_OPTIONS)))


def filter_item(buf, off: int, end: int, parent: int, names=None) -> tuple:
    """``names(ifindex)`` gives device names for redirect targets (indexes change when a device is remade)."""
    _, handle, _, info = header(buf, off)
    amap, kind, opts = _parts(buf, off, end, _FILTER_OPTS, names)
    chain = u32_at(buf, amap[TCA_CHAIN]) if TCA_CHAIN in amap else 0
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
