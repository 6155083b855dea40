"""The ingress qdisc (``tc qdisc add dev DEV handle ffff: ingress``): where arriving packets are
classified; and clsact (``tc qdisc add dev DEV clsact``), the same hook with an egress one beside it."""

from ..nl import TC_H_INGRESS, TCA_KIND, attr_str, tcmsg

HANDLE = 0xFFFF0000
KIND = attr_str(TCA_KIND, "ingress")


def body(ifindex: int, kind: str = "ingress") -> bytes:
    """tcmsg + kind, as tc sends for both ``add`` and ``del ... ingress`` (``clsact``: the same
    for ``... clsact``)."""
    return tcmsg(ifindex, HANDLE, TC_H_INGRESS) + (KIND if kind == "ingress" else attr_str(TCA_KIND, kind))
