"""u32: hash tables (``divisor``), filters (selector keys, hashkey, link, classid, actions), read back."""

import struct

from ...plan.filters import HashKey, Key, U32Filter, U32Table
from ..nl import (NLA_TYPE_MASK, NLATTR, TCA_OPTIONS, U32, attr_map, attr_u32, attrs, be32, find, hexof, nest,
                  rebuild, u32_at)
from . import actions

TCA_U32_CLASSID, TCA_U32_HASH, TCA_U32_LINK, TCA_U32_DIVISOR = 1, 2, 3, 4
TCA_U32_SEL, TCA_U32_ACT, TCA_U32_PCNT, TCA_U32_FLAGS = 5, 7, 9, 11
TCA_CLS_FLAGS_SKIP = 0x3  # skip_hw, skip_sw: the only flags a request may carry (not in_hw, not_in_hw)
TC_U32_TERMINAL = 1
U32_SEL = struct.Struct("=BBBxHHhhI")  # flags offshift nkeys offmask off offoff hoff hmask(be)
U32_KEY_BE = struct.Struct(">II")  # mask, val (both big-endian)
U32_KEY_OFF = struct.Struct("=ii")  # off, offmask
_NAMES = {TCA_U32_CLASSID: "classid", TCA_U32_HASH: "hash", TCA_U32_LINK: "link", TCA_U32_DIVISOR: "divisor"}


def table_options(divisor: int) -> bytes:
    return nest(TCA_OPTIONS, attr_u32(TCA_U32_DIVISOR, divisor))


def merge_keys(keys) -> tuple:
    """tc's pack_key: keys at the same offset become one key (values and masks or-ed)."""
    merged: dict[int, list[int]] = {}
    for k in keys:
        value, mask = k.value & k.mask, k.mask
        if k.off in merged:
            old = merged[k.off]
            if (old[0] ^ value) & old[1] & mask:
                raise ValueError(f"u32 keys at offset {k.off} contradict each other")
            old[0] |= value
            old[1] |= mask
        else:
            merged[k.off] = [value, mask]
    return tuple(Key(v, m, off) for off, (v, m) in merged.items())


class FilterPacker:
    """Packs the TCA_OPTIONS of u32 filters; caches make repeated parts one lookup."""

    def __init__(self):
        self._hash: dict = {}
        self._off: dict = {}

    def options(self, op, acts: bytes) -> bytes:
        parts = []
        if op.link is not None:
            parts.append(attr_u32(TCA_U32_LINK, op.link << 20))
        if op.classid is not None:
            parts.append(attr_u32(TCA_U32_CLASSID, op.classid))
        if acts:
            parts.append(acts)
        if op.ht:
            parts.append(attr_u32(TCA_U32_HASH, (op.ht << 20) | (op.bucket << 12)))
        parts.append(self._selector(op))
        opts = b"".join(parts)
        return NLATTR.pack(4 + len(opts), TCA_OPTIONS) + opts

    def _selector(self, op) -> bytes:
        keys = op.keys
        if len({k.off for k in keys}) != len(keys):
            keys = merge_keys(keys)
        offs = self._off
        packed = []
        for k in keys:
            ob = offs.get(k.off)
            if ob is None:
                ob = offs[k.off] = U32_KEY_OFF.pack(k.off, 0)
            packed.append(U32_KEY_BE.pack(k.mask, k.value & k.mask) + ob)
        terminal = TC_U32_TERMINAL if (op.classid is not None or op.police is not None or op.redirect) else 0
        hk = op.hashkey
        head = self._hash.get((terminal, len(keys), hk))
        if head is None:
            mask, off = (hk.mask, hk.off) if hk else (0, 0)
            head = U32_SEL.pack(terminal, 0, len(keys), 0, 0, 0, off, be32(mask))
            self._hash[(terminal, len(keys), hk)] = head
        sel = head + b"".join(packed)
        return NLATTR.pack(4 + len(sel), TCA_U32_SEL) + sel


def _sel(buf, s, e) -> tuple:
    flags, offshift, nkeys, offmask, off, offoff, hoff, hmask = U32_SEL.unpack_from(buf, s)
    keys = []
    p = s + U32_SEL.size
    for _ in range(nkeys):
        if p + 16 > e:
            break
        mask, val = U32_KEY_BE.unpack_from(buf, p)
        koff, koffmask = U32_KEY_OFF.unpack_from(buf, p + 8)
        keys.append((val, mask, koff, koffmask))
        p += 16
    return (flags, offshift, nkeys, offmask, off, offoff, hoff, be32(hmask), tuple(keys))


def decode(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_U32_SEL:
            out.append(("sel",) + _sel(buf, ps, pe))
        elif kind == TCA_U32_ACT:
            out.append(("act", actions.decode(buf, ps, pe, names)))
        elif kind in _NAMES and pe - ps == 4:
            out.append((_NAMES[kind], U32.unpack_from(buf, ps)[0]))
        elif kind != TCA_U32_PCNT:  # per-key hit counters
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def to_op(buf, s, e, dev: str, parent: int, prio: int, proto: str, handle: int, clk, link_name):
    """The U32Table / U32Filter that options ``buf[s:e]`` describe (None for the kernel's own root tables)."""
    ht, bucket, node = handle >> 20, (handle >> 12) & 0xFF, handle & 0xFFF
    opts = attr_map(buf, s, e)
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
    acts = actions.parse(buf, *opts[TCA_U32_ACT], clk, link_name) if TCA_U32_ACT in opts else {}
    return U32Filter(dev, parent, prio, proto, 0 if ht >= 0x800 else ht, bucket, node, keys, hashkey, link,
                     classid, acts.get("police"), acts.get("mirred"))


def stats_span(buf, off: int, end: int):
    """The statistics nest of a u32 filter message's police action (else its first action), or None."""
    span = find(buf, off + 36, end, TCA_OPTIONS)
    if span is None:
        return None
    span = find(buf, span[0], span[1], TCA_U32_ACT)
    return None if span is None else actions.stats_span(buf, *span)


def replayable(payload: bytes) -> bytes:
    """Dumped u32 options as a request carries them: no hit counters, only the flags a request
    may set, actions without their counters."""
    def fix(kind, body):
        kind &= NLA_TYPE_MASK
        if kind == TCA_U32_PCNT:
            return None
        if kind == TCA_U32_FLAGS and len(body) == 4:
            return U32.pack(U32.unpack(body)[0] & TCA_CLS_FLAGS_SKIP)
        if kind == TCA_U32_ACT:
            return actions.replayable(body)
        return body
    return rebuild(payload, 0, len(payload), fix)
