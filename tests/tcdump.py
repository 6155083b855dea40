"""The configuration dump tests compare before and after: what tc says about devices,
counters aside (``bench.faults.dump``)."""

from bench.faults import dump


def tc_dump(ns: str, *devs: str) -> list[str]:
    """Every qdisc, class and filter ``tc -d`` shows on ``devs`` in namespace ``ns``, and
    which of them exist, with counters and statistics left out, in an order of their own
    (``bench.faults.dump``)."""
    return dump(ns, devs)
