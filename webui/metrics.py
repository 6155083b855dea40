"""``/metrics``: the latest poll in Prometheus' text exposition format (0.0.4).

Per target, always: the counters summed per direction, how many links exist
and are active, how many are idle, busy, at their rate, starved and dropping,
the p5/p50/p95 of the links' rate as a share of their frame rate and of their
queueing delay, the share histogram, whether the last read worked and how long
it took, what is applied (profile, mode, granularity, link layer) and each
direction's link numbers (frame rate, burst, queue).  ``netns=""`` is the
host's own namespace.

Per cohort and direction (labels interface, netns, cohort, profile, direction), always:
its bytes, packets and drops as ``*_total`` counters and its links and active links, so
that ``sum by (cohort)`` over a fleet's routers gives the audience (docs/fleet.md).

Per link (labels interface, netns, host, port, direction, cohort, profile; ``port="all"``
for a per-host link): the cumulative counters as ``*_total`` counters, the backlog
as gauges and the configured rate -- 7 series a link, a cardinality problem
for Prometheus at tens of thousands of links.  ``?links=auto`` (the default)
sends them for an interface with at most ``AUTO_LINK_LIMIT`` links,
``?links=true`` always, ``?links=false`` never.

A traced plan (docs/profiles.md, "Traces") adds its driver's state (running, the step the
links are at or were left at, the step's length and age, traced and shut links), per
direction how closely the backlogged traced links track their traces (the mean and
quantiles of delivered / capacity, the share within ``digest.TRACK_TOLERANCE``), and per
traced link (as the per-link series) its trace's capacity and the rate it delivered over
the last poll interval.

Served from the poller's last snapshot, so a scrape never touches the kernel;
without per-link series its cost does not grow with the number of links.

Written here rather than by ``prometheus_client`` because of what that costs.
``python -m bench metrics`` (bench/metrics_cost.py) serves the same families,
samples and values through a ``prometheus_client`` collector over the same
snapshots and times one scrape of each, median wall time (CPU time) of 3-21
runs (2-core AMD EPYC, load average 4.7, prometheus_client 0.26.0)::

    links   ?links  samples  this module        prometheus_client   its OpenMetrics
    1,024   auto      7,235  3.1 ms (3.0 ms)    43.9 ms (38.2 ms)   61.2 ms (55.1 ms)
    65,536  auto         67  0.09 ms (0.09 ms)  0.37 ms (0.37 ms)   0.52 ms (0.52 ms)
    65,536  true    458,819  0.28 s (0.28 s)    3.11 s (3.07 s)     4.26 s (4.11 s)

prometheus_client takes 11-19 times the CPU wherever per-link series are
sent, and 4-6 times without them.  With ``?links=true`` at 65,536 links that is
3-4 s a scrape, longer than the poller's 1 s interval, in the interpreter the
poller and the dashboard share.  Prometheus asks for OpenMetrics first and
takes this text format (0.0.4) instead; none of these series needs what only
OpenMetrics carries (units, created times, exemplars).
"""

from flask import Blueprint, Response

from .digest import QUANTILES, SIDES, STATE_COUNTS
from .errors import field_error, WebError
from .params import boolean, check_query, snapshots, source
from .snapshot import port_text

AUTO_LINK_LIMIT = 1024  # ?links=auto: per-link series up to this many links on an interface
QUANTILE_LABELS = {name: f"{q:g}" for name, q in QUANTILES}  # p5 -> "0.05"

bp = Blueprint("metrics", __name__)

LINK_METRICS = (
    # (name, column, type, help)
    ("ratelimit_link_bytes_total", "bytes", "counter", "Bytes through one emulated link."),
    ("ratelimit_link_packets_total", "packets", "counter", "Packets through one emulated link."),
    ("ratelimit_link_drops_total", "drops", "counter", "Packets dropped on one emulated link."),
    ("ratelimit_link_overlimits_total", "overlimits", "counter",
     "Times one emulated link was over its rate (delayed or dropped)."),
    ("ratelimit_link_backlog_bytes", "backlog_bytes", "gauge", "Bytes queued on one emulated link."),
    ("ratelimit_link_backlog_packets", "backlog_pkts", "gauge", "Packets queued on one emulated link."),
)


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(**labels) -> str:
    return "{" + ",".join(f'{k}="{_escape("" if v is None else v)}"' for k, v in labels.items()) + "}"


def _link_labels(s, i: int) -> str:
    """The labels of snapshot ``s``'s link ``i``."""
    direction, host, port, _dev = s.layout.keys[i]
    cohort, profile = s.layout.cohort(i)
    return _labels(interface=s.interface, netns=s.netns, host=host, port=port_text(port), direction=direction,
                   cohort=cohort, profile=profile)


def _header(out: list, name: str, kind: str, text: str) -> None:
    out.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")


def _quantiles(out: list, name: str, s, direction: str, values: dict, scale: float = 1.0) -> None:
    """A sample of ``name`` per quantile in ``values`` (p5, p50, p95; None: none) of ``s``'s ``direction``."""
    for q, value in values.items():
        if value is not None:
            labels = _labels(interface=s.interface, netns=s.netns, direction=direction, quantile=QUANTILE_LABELS[q])
            out.append(f"{name}{labels} {value * scale:.6g}\n")


def render(snaps, links: str = "auto") -> str:
    out: list[str] = []
    _header(out, "ratelimit_stats_up", "gauge", "1 if the last statistics read of the interface worked.")
    for s in snaps:
        out.append(f"ratelimit_stats_up{_labels(interface=s.interface, netns=s.netns)} {0 if s.error else 1}\n")
    _header(out, "ratelimit_stats_refresh_seconds", "gauge", "Time the last statistics read took.")
    for s in snaps:
        out.append(f"ratelimit_stats_refresh_seconds{_labels(interface=s.interface, netns=s.netns)} "
                   f"{s.refresh_s:.6f}\n")
    _header(out, "ratelimit_applied", "gauge", "1 while ratelimit has a configuration on the interface.")
    for s in snaps:
        a = s.applied or {}
        labels = _labels(interface=s.interface, netns=s.netns, profile=a.get("profile") or "",
                         mode=a.get("mode") or "", direction=a.get("direction") or "", per=a.get("per") or "",
                         link=(a.get("link") or {}).get("layer") or "")
        out.append(f"ratelimit_applied{labels} {1 if s.applied else 0}\n")
    for name, field, text in (("ratelimit_frame_rate_bps", "frame_rate_bps",
                               "Rate each link's frames get (its line rate less the link layer's coding), bit/s."),
                              ("ratelimit_burst_bytes", "burst_bytes", "Burst of each link, bytes."),
                              ("ratelimit_queue_bytes", "queue_bytes", "Queue of each link (shape mode), bytes.")):
        _header(out, name, "gauge", text)
        for s in snaps:
            for side, direction in SIDES:
                value = ((s.applied or {}).get(side) or {}).get(field)
                if value is not None:
                    out.append(f"{name}{_labels(interface=s.interface, netns=s.netns, direction=direction)} {value}\n")
    for name, text in (("ratelimit_links", "Emulated links (host, port, direction) installed."),
                       ("ratelimit_active_links", "Links that moved packets in the last seconds.")):
        _header(out, name, "gauge", text)
        key = "links" if name == "ratelimit_links" else "active_links"
        for s in snaps:
            out.append(f"{name}{_labels(interface=s.interface, netns=s.netns)} {s.aggregate[key]}\n")

    # Aggregates per direction (summed once per poll).
    for name, column, kind, text in LINK_METRICS:
        agg = name.replace("ratelimit_link_", "ratelimit_")
        _header(out, agg, kind, text.replace("one emulated link", "all emulated links of one direction"))
        for s in snaps:
            for direction in sorted(s.totals):
                out.append(f"{agg}{_labels(interface=s.interface, netns=s.netns, direction=direction)} "
                           f"{s.totals[direction][column]}\n")

    # Per direction: states, and distributions over the links that moved something and have a rate.
    _header(out, "ratelimit_links_state", "gauge",
            "Links per state this interval: idle, busy, at_rate (>= 90% of the rate), starved (a backlog, "
            "< 50% of the rate), dropping (overlaps the others).")
    for s in snaps:
        for direction, d in s.distribution.items():
            for state in STATE_COUNTS:
                labels = _labels(interface=s.interface, netns=s.netns, direction=direction, state=state)
                out.append(f"ratelimit_links_state{labels} {d['states'][state]}\n")
    for name, what, scale, text in (
            ("ratelimit_link_rate_share", "rate_share", 1.0,
             "Quantiles over busy links of their rate (last seconds) as a share of their frame rate."),
            ("ratelimit_link_queue_delay_seconds", "queue_delay_ms", 0.001,
             "Quantiles over busy links of the queueing delay (backlog x 8 / frame rate).")):
        _header(out, name, "gauge", text)
        for s in snaps:
            for direction, d in s.distribution.items():
                _quantiles(out, name, s, direction, d[what], scale)
    _header(out, "ratelimit_links_rate_share_bucket", "gauge",
            "Busy links whose rate share is below le (cumulative; le=+Inf counts them all).")
    for s in snaps:
        for direction, d in s.distribution.items():
            running = 0
            for upper, count in zip(list(d["histogram"]["edges"][1:]) + ["+Inf"], d["histogram"]["counts"]):
                running += count
                le = upper if upper == "+Inf" else f"{upper:g}"
                labels = _labels(interface=s.interface, netns=s.netns, direction=direction, le=le)
                out.append(f"ratelimit_links_rate_share_bucket{labels} {running}\n")

    _cohorts(out, snaps)
    _cells(out, snaps)
    detailed = [s for s in snaps if links == "true" or links == "auto" and len(s.layout) <= AUTO_LINK_LIMIT]
    _traced(out, snaps, detailed)
    if detailed:
        _header(out, "ratelimit_link_rate_bps", "gauge", "Configured rate of one emulated link, bit/s.")
        for s in detailed:
            for i, rate in enumerate(s.layout.rate_bps):
                if rate:
                    out.append(f"ratelimit_link_rate_bps{_link_labels(s, i)} {rate}\n")
        for name, column, kind, text in LINK_METRICS:
            _header(out, name, kind, text)
            for s in detailed:
                ns, ifc = _escape(s.netns or ""), _escape(s.interface)
                col = s.columns[column]
                # _link_labels written out: this loop is most of a ?links=true scrape (the table above)
                for (direction, host, port, _dev), (cohort, profile), value in zip(s.layout.keys,
                                                                                  s.layout.every_cohort(), col):
                    out.append(f'{name}{{interface="{ifc}",netns="{ns}",host="{host}",port="{port_text(port)}",'
                               f'direction="{direction}",cohort="{_escape(cohort)}",profile="{_escape(profile)}"}} '
                               f'{value}\n')
    return "".join(out)


COHORT_METRICS = (
    # (name, field, type, help)
    ("ratelimit_cohort_bytes_total", "bytes", "counter", "Bytes through the links of one cohort and direction."),
    ("ratelimit_cohort_packets_total", "packets", "counter", "Packets through the links of one cohort and direction."),
    ("ratelimit_cohort_drops_total", "drops", "counter", "Packets dropped on the links of one cohort and direction."),
    ("ratelimit_cohort_links", "links", "gauge", "Links of one cohort and direction."),
    ("ratelimit_cohort_active_links", "active_links", "gauge",
     "Links of one cohort and direction that moved packets in the last seconds."),
)


def _cohorts(out: list, snaps) -> None:
    """Per (cohort, profile, direction) sums, whatever the number of links: across a fleet's
    routers, ``sum by (cohort)`` is the audience's (docs/fleet.md)."""
    for name, field, kind, text in COHORT_METRICS:
        _header(out, name, kind, text)
        for s in snaps:
            for (cohort, profile, direction), sums in s.cohort_totals.items():
                labels = _labels(interface=s.interface, netns=s.netns, cohort=cohort, profile=profile,
                                 direction=direction)
                out.append(f"{name}{labels} {sums[field]}\n")


CELL_METRICS = (
    # (name, field, help)
    ("ratelimit_cell_capacity_bps", "capacity_bps", "A cell's capacity in one direction (bit/s, its links' frames)."),
    ("ratelimit_cell_delivered_bps", "delivered_bps", "What a cell's links delivered in one direction (bit/s, last poll)."),
    ("ratelimit_cell_users", "users", "Links in a cell, one direction."),
    ("ratelimit_cell_busy_users", "busy_users", "Links in a cell that delivered over the last poll or hold a backlog."),
)


def _cells(out: list, snaps) -> None:
    """Per cell and direction (docs/cells.md): its capacity, what it delivered, its users and
    busy users; nothing for a router without cells."""
    if not any(s.cells for s in snaps):
        return
    for name, field, text in CELL_METRICS:
        _header(out, name, "gauge", text)
        for s in snaps:
            for cell, sides in s.cells.items():
                for direction, c in sides.items():
                    labels = _labels(interface=s.interface, netns=s.netns, cell=cell, direction=direction)
                    out.append(f"{name}{labels} {c[field]:g}\n")


DRIVER_METRICS = (
    # (name, the driver report's field, scale, help)
    ("ratelimit_trace_driver_running", "running", 1, "1 while the trace driver of the interface runs."),
    ("ratelimit_trace_driver_step", "step", 1,
     "The step the traced links are at (while the driver runs) or were left at (after it stopped)."),
    ("ratelimit_trace_driver_step_seconds", "step_ms", 0.001, "How long each of the driver's steps lasts."),
    ("ratelimit_trace_driver_traced_links", "links", 1, "Traced links (one per direction) the driver follows."),
    ("ratelimit_trace_driver_shut_links", "shut", 1,
     "Traced links whose gate is shut (an outage); left shut by a driver that stopped, nothing passes on them."),
)


def _traced(out: list, snaps, detailed) -> None:
    """Traced plans only: the driver's state, how closely each direction's links track their
    traces, and (``detailed``) each traced link's capacity beside the rate it delivered."""
    traced = [s for s in snaps if s.driver]
    if not traced:
        return  # no trace families at all on a router without traces
    for name, field, scale, text in DRIVER_METRICS:
        _header(out, name, "gauge", text)
        for s in traced:
            value = s.driver.get(field)
            if value is not None:
                out.append(f"{name}{_labels(interface=s.interface, netns=s.netns)} {float(value) * scale:g}\n")
    _header(out, "ratelimit_trace_driver_step_age_seconds", "gauge",
            "Time since the driver set the step it is at (or left the links at).")
    for s in traced:
        at = s.driver.get("step_at_ms")
        if at is not None and s.time is not None:
            out.append(f"ratelimit_trace_driver_step_age_seconds{_labels(interface=s.interface, netns=s.netns)} "
                       f"{max(0.0, s.time - at / 1000):.3f}\n")
    for name, field, text in (
            ("ratelimit_trace_backlogged_links", "backlogged",
             "Traced links with a backlog and capacity in the last seconds: those tracking is measured on."),
            ("ratelimit_trace_tracking_ratio_mean", "ratio_mean",
             "Mean over backlogged traced links of the rate delivered over the trace's capacity (last seconds)."),
            ("ratelimit_trace_tracking_within_ratio", "within",
             "Share of backlogged traced links that delivered within the tolerance of their trace's capacity.")):
        _header(out, name, "gauge", text)
        for s in traced:
            for direction, t in s.tracking.items():
                if t[field] is not None:
                    extra = {"tolerance": f"{t['tolerance']:g}"} if field == "within" else {}
                    labels = _labels(interface=s.interface, netns=s.netns, direction=direction, **extra)
                    out.append(f"{name}{labels} {t[field]:.6g}\n")
    _header(out, "ratelimit_trace_tracking_ratio", "gauge",
            "Quantiles over backlogged traced links of the rate delivered over the trace's capacity (last seconds).")
    for s in traced:
        for direction, t in s.tracking.items():
            _quantiles(out, "ratelimit_trace_tracking_ratio", s, direction, t["ratio"])
    for name, column, text in (
            ("ratelimit_link_trace_capacity_bps", "capacity_bps",
             "Capacity of one traced link's trace over the last poll interval (what a backlogged sender of "
             "full-size packets gets), bit/s."),
            ("ratelimit_link_delivered_bps", "throughput_bps",
             "Rate one traced link delivered over the last poll interval, bit/s.")):
        _header(out, name, "gauge", text)
        for s in detailed:
            if not s.tracking:
                continue
            caps, col = s.columns["capacity_bps"], s.columns[column]
            for i, cap in enumerate(caps):
                if cap == cap:
                    out.append(f"{name}{_link_labels(s, i)} {col[i]:.6g}\n")


@bp.get("/metrics")
def metrics():
    args = check_query(("links",))
    links = args.get("links") or "auto"
    if links != "auto":
        try:
            links = "true" if boolean("links", links, True) else "false"
        except WebError:
            raise field_error("links", links, "is not auto or a boolean (allowed: auto, true, false, 1, 0)") from None
    return Response(render(snapshots(source()), links), content_type="text/plain; version=0.0.4; charset=utf-8")
