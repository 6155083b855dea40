"""act_mirred: ``action mirred egress redirect dev DEV`` (ingress traffic to an IFB device)."""

import struct

from ..nl import attr, attrs, hexof

TCA_MIRRED_TM, TCA_MIRRED_PARMS, TCA_MIRRED_PAD = 1, 2, 3
TC_ACT_STOLEN = 4
TCA_EGRESS_REDIR = 1
MIRRED = struct.Struct("=IIiiiiI")  # index capab action refcnt bindcnt eaction ifindex


def options(ifindex: int) -> bytes:
    return attr(TCA_MIRRED_PARMS, MIRRED.pack(0, 0, TC_ACT_STOLEN, 0, 0, TCA_EGRESS_REDIR, ifindex))


def decode(buf, s, e, names) -> tuple:
    out = []
    for kind, ps, pe in attrs(buf, s, e):
        if kind == TCA_MIRRED_PARMS and pe - ps >= MIRRED.size:
            _index, capab, action, _ref, _bind, eaction, ifindex = MIRRED.unpack_from(buf, ps)
            out.append(("parms", "capab", capab, "action", action, "eaction", eaction,
                        "dev", names(ifindex) if names else ifindex))
        elif kind not in (TCA_MIRRED_TM, TCA_MIRRED_PAD):
            out.append((kind, hexof(buf, ps, pe)))
    return tuple(out)


def parse(buf, amap: dict, clk, link_name):
    """The name of the device redirected to, or None."""
    if TCA_MIRRED_PARMS not in amap:
        return None
    return link_name(MIRRED.unpack_from(buf, amap[TCA_MIRRED_PARMS][0])[6])
