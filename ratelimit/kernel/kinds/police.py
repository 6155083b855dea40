"""act_police: ``action police rate R burst B mtu M [mpu P] conform-exceed drop/ok``."""

import struct

from ...plan.filters import Police
from ...plan.ops import SHARED_POLICE_INDEX_BASE
from ..nl import U32_MAX, U64, attr, attrs, hexof
from ..rates import RATESPEC, Clock, decode_ratespec, rate_bytes, rate_table, ratespec

TCA_POLICE_TBF, TCA_POLICE_RATE, TCA_POLICE_TM, TCA_POLICE_PAD, TCA_POLICE_RATE64 = 1, 2, 6, 7, 8
TC_ACT_SHOT = 2
POLICE = struct.Struct("=IiIII12s12siiI")  # index action limit burst mtu rate peak refcnt bindcnt capab


def options(p, clk: Clock) -> bytes:
    """The TCA_ACT_OPTIONS payload for police parameters ``p`` (filters.Police).  Police keeps
    its rate table: the kernel requires it."""
    rate = rate_bytes(p.rate_bps)
    tbf = POLICE.pack(p.index, TC_ACT_SHOT, 0, clk.xmittime(rate, p.burst_bytes), p.mtu_bytes,
                      ratespec(rate, p.mtu_bytes, p.mpu_bytes, p.overhead_bytes), bytes(12), 0, 0, 0)
    parts = [attr(TCA_POLICE_TBF, tbf), attr(TCA_POLICE_RATE, rate_table(rate, p.mtu_bytes, p.mpu_bytes, clk))]
    if rate > U32_MAX:
        parts.append(attr(TCA_POLICE_RATE64, U64.pack(rate)))
    return b"".join(parts)


def decode(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_POLICE_TBF and pe - ps >= POLICE.size:
            _index, action, limit, burst, mtu, rate, peak, _ref, _bind, capab = POLICE.unpack_from(buf, ps)
            out.append(("tbf", "action", action, "limit", limit, "burst", burst, "mtu", mtu,
                        decode_ratespec(rate), ("peak",) + decode_ratespec(peak), "capab", capab))
        elif kind not in (TCA_POLICE_TM, TCA_POLICE_PAD):
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def parse(buf, amap: dict, clk: Clock, link_name):
    """The filters.Police these options describe, or None."""
    if TCA_POLICE_TBF not in amap:
        return None
    fields = POLICE.unpack_from(buf, amap[TCA_POLICE_TBF][0])
    index, burst, mtu = fields[0], fields[3], fields[4]
    _, _, overhead, _, mpu, rate = RATESPEC.unpack(fields[5])
    if TCA_POLICE_RATE64 in amap:
        rate = U64.unpack_from(buf, amap[TCA_POLICE_RATE64][0])[0]
    shared = index if index >= SHARED_POLICE_INDEX_BASE else 0  # else the kernel picked it
    return Police(rate * 8, clk.size_of(rate, burst) if rate else 0, mtu, mpu, overhead, shared)
