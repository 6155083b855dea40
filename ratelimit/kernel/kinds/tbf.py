"""tbf: a token bucket qdisc (struct tc_tbf_qopt), as a traced link's gate.

What ``tc qdisc add ... tbf rate R burst B limit L`` sends (iproute2 ``q_tbf.c``): the
parameters (rate, no peak rate, the limit, the burst as scheduler ticks at the rate),
the burst in bytes (``TCA_TBF_BURST``, which the kernel prefers to the ticks: it
computes its bucket from the bytes), a 64-bit rate when the rate does not fit 32 bits,
and the rate table.  As for HTB the table is left out unless ``tables``: a kernel reads
it only when the rate spec's link layer is unknown, and ours names Ethernet.
"""

import struct

from ..nl import NLATTR, TCA_KIND, TCA_OPTIONS, U32_MAX, U64, attr, attr_str, nest
from ..rates import Clock, rate_bytes, rate_table, ratespec

TCA_TBF_PARMS, TCA_TBF_RTAB, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 2, 4, 6
TBF_QOPT = struct.Struct("=12s12sIII")  # rate, peakrate, limit, buffer, mtu
_U32 = struct.Struct("=I")
_NO_PEAK = bytes(12)

KIND = attr_str(TCA_KIND, "tbf")
# Where ``options`` (TCA_KIND, TCA_OPTIONS, TCA_TBF_PARMS, TBF_QOPT) holds what changes with
# the rate, from TCA_KIND on: the rate spec's rate, and the buffer.
_PARMS_AT = len(KIND) + 2 * NLATTR.size
RATE_AT, BUFFER_AT = _PARMS_AT + 8, _PARMS_AT + 28


def options(rate_bps: int, burst_bytes: int, limit_bytes: int, clk: Clock, tables: bool = False) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a token bucket at ``rate_bps`` holding ``burst_bytes``,
    queueing at most ``limit_bytes``."""
    rate = rate_bytes(rate_bps)
    spec_rate = min(rate, U32_MAX)
    parms = TBF_QOPT.pack(ratespec(rate, 0, 0), _NO_PEAK, limit_bytes, clk.xmittime(spec_rate, burst_bytes), 0)
    parts = [attr(TCA_TBF_PARMS, parms), attr(TCA_TBF_BURST, _U32.pack(burst_bytes))]
    if rate > U32_MAX:
        parts.append(attr(TCA_TBF_RATE64, U64.pack(rate)))
    if tables:
        parts.append(attr(TCA_TBF_RTAB, rate_table(spec_rate, 0, 0, clk)))
    return KIND + nest(TCA_OPTIONS, *parts)
