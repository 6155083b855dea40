"""``/metrics``: the latest poll in Prometheus' text exposition format (0.0.4).

Per link (labels interface, netns, host, port, direction): the cumulative
counters as ``*_total`` counters, the backlog as gauges and the configured
rate.  Per target: the same summed per direction, plus whether the last read
worked, how long it took, how many links exist and are active, what is applied
(profile, mode, granularity, link layer) and each direction's link numbers
(frame rate, burst, queue).  A per-host link's port label is ``all``.  ``?links=false`` leaves the per-link series out (65,536 links make
~400,000 series).  ``netns=""`` is the host's own namespace.  Served from the
poller's last snapshot, so a scrape never touches the kernel.
"""

from flask import Blueprint, Response

from .params import boolean, check_query, source
from .stats import port_text

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


def _header(out: list, name: str, kind: str, text: str) -> None:
    out.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")


def render(snaps, with_links: bool) -> str:
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
            for side, direction in (("down", "dest"), ("up", "source")):
                value = ((s.applied or {}).get(side) or {}).get(field)
                if value is not None:
                    out.append(f"{name}{_labels(interface=s.interface, netns=s.netns, direction=direction)} {value}\n")
    for name, text in (("ratelimit_links", "Emulated links (host, port, direction) installed."),
                       ("ratelimit_active_links", "Links that moved packets in the last seconds.")):
        _header(out, name, "gauge", text)
        key = "links" if name == "ratelimit_links" else "active_links"
        for s in snaps:
            out.append(f"{name}{_labels(interface=s.interface, netns=s.netns)} {s.aggregate[key]}\n")

    # Aggregates per direction.
    sums = []
    for s in snaps:
        per = {}
        for i, (direction, *_rest) in enumerate(s.layout.keys):
            acc = per.setdefault(direction, [0] * len(LINK_METRICS))
            for j, (_n, column, _k, _t) in enumerate(LINK_METRICS):
                acc[j] += s.columns[column][i]
        sums.append((s, per))
    for j, (name, _column, kind, text) in enumerate(LINK_METRICS):
        agg = name.replace("ratelimit_link_", "ratelimit_")
        _header(out, agg, kind, text.replace("one emulated link", "all emulated links of one direction"))
        for s, per in sums:
            for direction in sorted(per):
                out.append(f"{agg}{_labels(interface=s.interface, netns=s.netns, direction=direction)} "
                           f"{per[direction][j]}\n")

    if with_links:
        _header(out, "ratelimit_link_rate_bps", "gauge", "Configured rate of one emulated link, bit/s.")
        for s in snaps:
            base = {"interface": s.interface, "netns": s.netns}
            for (direction, host, port, _dev), rate in zip(s.layout.keys, s.layout.rate_bps):
                if rate:
                    out.append(f"ratelimit_link_rate_bps{_labels(**base, host=host, port=port_text(port), direction=direction)}"
                               f" {rate}\n")
        for name, column, kind, text in LINK_METRICS:
            _header(out, name, kind, text)
            for s in snaps:
                ns, ifc = _escape(s.netns or ""), _escape(s.interface)
                col = s.columns[column]
                for (direction, host, port, _dev), value in zip(s.layout.keys, col):
                    out.append(f'{name}{{interface="{ifc}",netns="{ns}",host="{host}",port="{port_text(port)}",'
                               f'direction="{direction}"}} {value}\n')
    return "".join(out)


@bp.get("/metrics")
def metrics():
    args = check_query(("links",))
    with_links = boolean("links", args.get("links"), True)
    src = source()
    snaps = [src.snapshot(n, i) for n, i in src.targets()]
    return Response(render(snaps, with_links), content_type="text/plain; version=0.0.4; charset=utf-8")
