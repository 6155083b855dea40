"""A filter's action list (``action police ...``, ``action mirred ...``), packed and read back."""

from ..nl import NLA_F_NESTED, NLA_TYPE_MASK, NLATTR, attr_map, attr_str, attrs, cstr, find, hexof, nest, rebuild
from . import mirred, police

TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_INDEX, TCA_ACT_STATS, TCA_ACT_PAD = 1, 2, 3, 4, 5
TCA_ACT_COOKIE, TCA_ACT_FLAGS, TCA_ACT_HW_STATS = 6, 7, 8
_REPLAYED = frozenset({TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_INDEX, TCA_ACT_COOKIE, TCA_ACT_FLAGS, TCA_ACT_HW_STATS})

_KINDS = {"police": police, "mirred": mirred}


def action(kind: str, options: bytes) -> bytes:
    return attr_str(TCA_ACT_KIND, kind) + nest(TCA_ACT_OPTIONS | NLA_F_NESTED, options)


def action_list(list_kind: int, actions) -> bytes:
    """``actions`` (packed by ``action``) as the numbered nest a filter carries."""
    return nest(list_kind, *(nest(i, a) for i, a in enumerate(actions, start=1)))


def _other_opts(buf, s, e, names) -> tuple:
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


def decode(buf, s, e, names) -> tuple:
    """The static parts of an action list, for snapshots (no counters, no kernel-chosen index)."""
    out = []
    for prio, ps, pe in attrs(buf, s, e):
        amap = attr_map(buf, ps, pe)
        kind = cstr(buf, amap.get(TCA_ACT_KIND))
        span = amap.get(TCA_ACT_OPTIONS)
        mod = _KINDS.get(kind)
        opts = () if span is None else (mod.decode if mod else _other_opts)(buf, *span, names)
        rest = tuple((k, hexof(buf, a, b)) for k, (a, b) in sorted(amap.items())
                     if k not in (TCA_ACT_KIND, TCA_ACT_OPTIONS, TCA_ACT_STATS, TCA_ACT_PAD, TCA_ACT_INDEX))
        out.append((prio, kind, opts, rest))
    return tuple(out)


def parse(buf, s, e, clk, link_name) -> dict:
    """{kind: what its module's ``parse`` returns} for the actions we know (read-back)."""
    out = {}
    for _, ps, pe in attrs(buf, s, e):
        amap = attr_map(buf, ps, pe)
        kind = cstr(buf, amap.get(TCA_ACT_KIND))
        mod = _KINDS.get(kind)
        if mod is not None and TCA_ACT_OPTIONS in amap:
            value = mod.parse(buf, attr_map(buf, *amap[TCA_ACT_OPTIONS]), clk, link_name)
            if value is not None:
                out[kind] = value
    return out


def stats_span(buf, s, e):
    """The statistics nest of the police action in a list (else of its first action), or None."""
    first = None
    while s + 4 <= e:
        length = NLATTR.unpack_from(buf, s)[0]
        if length < 4:
            break
        kind = find(buf, s + 4, s + length, TCA_ACT_KIND)
        stats = find(buf, s + 4, s + length, TCA_ACT_STATS)
        if stats is not None:
            if kind is not None and bytes(buf[kind[0]:kind[0] + 7]) == b"police\0":
                return stats
            first = first or stats
        s += (length + 3) & ~3
    return first


def replayable(payload: bytes) -> bytes:
    """A dumped action list as a request carries it: each action without its counters."""
    def one(_prio, body):
        return rebuild(body, 0, len(body), lambda kind, p: p if kind & NLA_TYPE_MASK in _REPLAYED else None)
    return rebuild(payload, 0, len(payload), one)
