"""fq_codel, codel, pie and cake: a link's managed queue (``spec.aqm``).

What ``tc qdisc add ... fq_codel limit L flows F interval I target T ecn`` sends (iproute2
``q_fq_codel.c``, ``q_codel.c``, ``q_pie.c``, ``q_cake.c``): each parameter given as a
u32 attribute, in tc's order (cake, unlimited and best effort: its rate 0, its diffserv
mode, its rtt, the target tc derives from it, no autorate).  The plan gives every
parameter (``Aqm.full``), so a change in place sets them all.  One difference from ``tc
qdisc change`` on purpose: a change leaves fq_codel's flows out, since the kernel refuses to
change them (a plan with other flows rebuilds the queue).
"""

import struct

from ..nl import TCA_KIND, TCA_OPTIONS, U64, attr, attr_str, nest

_U32 = struct.Struct("=I")
# (discipline) -> its attributes in tc's order: (Aqm field, netlink type)
_ATTRS = {
    "fq_codel": (("limit_pkts", 2), ("flows", 5), ("interval_us", 3), ("target_us", 1), ("ecn", 4)),
    "codel": (("limit_pkts", 2), ("interval_us", 3), ("target_us", 1), ("ecn", 4)),
    "pie": (("limit_pkts", 2), ("target_us", 1), ("ecn", 6)),
    "cake": (("rtt_us", 7),),
}
TCA_CAKE_BASE_RATE64, TCA_CAKE_DIFFSERV_MODE, TCA_CAKE_TARGET, TCA_CAKE_AUTORATE = 2, 3, 8, 9
CAKE_DIFFSERV_BESTEFFORT = 3  # enum in pkt_sched.h: diffserv3 0, diffserv4 1, diffserv8 2, besteffort 3


def options(aqm, limit_pkts: int, change: bool = False) -> bytes:
    """TCA_KIND + TCA_OPTIONS of the managed queue ``aqm`` (an ``Aqm.full()``) holding at
    most ``limit_pkts``; ``change``: for a change in place (fq_codel's flows left out)."""
    values = {**aqm.__dict__, "limit_pkts": limit_pkts}
    parts = []
    if aqm.discipline == "cake":
        parts += [attr(TCA_CAKE_BASE_RATE64, U64.pack(0)), attr(TCA_CAKE_DIFFSERV_MODE,
                                                                 _U32.pack(CAKE_DIFFSERV_BESTEFFORT))]
    for name, kind in _ATTRS[aqm.discipline]:
        if change and name == "flows":
            continue
        parts.append(attr(kind, _U32.pack(int(values[name]))))
    if aqm.discipline == "cake":  # tc sends cake's target from its rtt, and no autorate ("unlimited")
        parts += [attr(TCA_CAKE_TARGET, _U32.pack(max(1, aqm.rtt_us // 20))), attr(TCA_CAKE_AUTORATE, _U32.pack(0))]
    return attr_str(TCA_KIND, aqm.discipline) + nest(TCA_OPTIONS, *parts)
