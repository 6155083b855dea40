"""What the dashboard's tests share: a reader's result built from rows.

``reading()`` is the inverse of ``readout.statistics``' rows: one dict per link in, the
``readout.Counters`` that ``readout.counters`` returns (and ``webui.stats.StatsSource``
reads) out.

>>> r = reading("eth0", None, 1.0, None, [{"direction": "dest", "host": "198.18.0.2", "port": 5000, "bytes": 9}])
>>> r.keys, r.counters["bytes"]
((('dest', '198.18.0.2', 5000, 'eth0'),), array('q', [9]))
"""

from array import array

from ratelimit.service.readout import Counters
from ratelimit.webui.digest import COUNTERS, GAUGES


def reading(interface: str, netns, when: float, applied: dict | None, rows: list, **more) -> Counters:
    """A reader's result from one dict per link: its key (direction, host, port, dev: the
    interface if left out), rate, cohort and counters; ``more``: other ``Counters`` fields
    (``driver``, ``trace_rates``)."""
    return Counters(interface, netns, when, applied,
                    keys=tuple((r["direction"], None if r["host"] is None else str(r["host"]), r["port"],
                                r.get("dev", interface)) for r in rows),
                    rate_bps=tuple(r.get("rate_bps") for r in rows),
                    cohorts=tuple((r.get("cohort"), r.get("profile")) for r in rows),
                    counters={name: array("q", [int(r.get(name) or 0) for r in rows]) for name in COUNTERS + GAUGES},
                    **more)
