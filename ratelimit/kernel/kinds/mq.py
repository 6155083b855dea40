"""mq: a classless root that gives each tx queue of a device a qdisc of its own (class ``handle:(q + 1)``)."""

from ..nl import TC_H_ROOT, TCA_KIND, attr_str, tcmsg

KIND = attr_str(TCA_KIND, "mq")


def body(ifindex: int, handle: int) -> bytes:
    """tcmsg + kind, as tc sends for ``qdisc add dev DEV root handle H mq`` (no options)."""
    return tcmsg(ifindex, handle, TC_H_ROOT) + KIND
