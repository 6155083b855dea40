"""The ingress qdisc (``tc qdisc add dev DEV handle ffff: ingress``): where arriving packets are classified."""

from ..nl import TC_H_INGRESS, TCA_KIND, attr_str, tcmsg

HANDLE = 0xFFFF0000
KIND = attr_str(TCA_KIND, "ingress")


def body(ifindex: int) -> bytes:
    """tcmsg + kind, as tc sends for both ``add`` and ``del ... ingress``."""
    return tcmsg(ifindex, HANDLE, TC_H_INGRESS) + KIND
