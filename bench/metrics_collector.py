"""The ``prometheus_client`` side of ``python -m bench metrics`` (``metrics_cost``): a custom
collector over a ``StatsSource``'s snapshots that serves what ``webui.metrics.render``
serves, in a private registry, written in the format an ``Accept`` header negotiates.
Needs ``pip install -e '.[bench]'`` (without it, ``CollectorRegistry`` is None).
"""

from __future__ import annotations

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import CollectorRegistry
except ImportError:  # metrics_cost.main() says what to install
    CollectorRegistry = None


TARGET_LABELS = ("interface", "netns")
LINK_LABELS = TARGET_LABELS + ("host", "port", "direction", "cohort", "profile")
APPLIED_NUMBERS = (
    # (name, field of applied["down"/"up"], help)
    ("ratelimit_frame_rate_bps", "frame_rate_bps",
     "Rate each link's frames get (its line rate less the link layer's coding), bit/s."),
    ("ratelimit_burst_bytes", "burst_bytes", "Burst of each link, bytes."),
    ("ratelimit_queue_bytes", "queue_bytes", "Queue of each link (shape mode), bytes."),
)
LINK_COUNTS = (
    # (name, aggregate key, help)
    ("ratelimit_links", "links", "Emulated links (host, port, direction) installed."),
    ("ratelimit_active_links", "active_links", "Links that moved packets in the last seconds."),
)
QUANTILES = (
    # (name, distribution key, scale to the name's unit, help)
    ("ratelimit_link_rate_share", "rate_share", 1.0,
     "Quantiles over busy links of their rate (last seconds) as a share of their frame rate."),
    ("ratelimit_link_queue_delay_seconds", "queue_delay_ms", 0.001,
     "Quantiles over busy links of the queueing delay (backlog x 8 / frame rate)."),
)
QUANTILE_LABEL = {"p5": "0.05", "p50": "0.5", "p95": "0.95"}
STATES_HELP = ("Links per state this interval: idle, busy, at_rate (>= 90% of the rate), starved (a backlog, "
               "< 50% of the rate), dropping (overlaps the others).")
SIDES = (("down", "dest"), ("up", "source"))  # applied's key, the direction label


def _family(kind: str, name: str, text: str, labels):
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(name, text, labels=labels)


def _target(s) -> list:
    return [s.interface, s.netns or ""]


def _status(snaps):
    up = GaugeMetricFamily("ratelimit_stats_up", "1 if the last statistics read of the interface worked.",
                           labels=TARGET_LABELS)
    took = GaugeMetricFamily("ratelimit_stats_refresh_seconds", "Time the last statistics read took.",
                             labels=TARGET_LABELS)
    for s in snaps:
        up.add_metric(_target(s), 0 if s.error else 1)
        took.add_metric(_target(s), round(s.refresh_s, 6))
    return up, took


def _applied(snaps):
    fam = GaugeMetricFamily("ratelimit_applied", "1 while ratelimit has a configuration on the interface.",
                            labels=TARGET_LABELS + ("profile", "mode", "direction", "per", "link"))
    for s in snaps:
        a = s.applied or {}
        what = [a.get(key) or "" for key in ("profile", "mode", "direction", "per")]
        fam.add_metric(_target(s) + what + [(a.get("link") or {}).get("layer") or ""], 1 if s.applied else 0)
    return fam


def _applied_numbers(snaps):
    for name, key, text in APPLIED_NUMBERS:
        fam = GaugeMetricFamily(name, text, labels=TARGET_LABELS + ("direction",))
        for s in snaps:
            for side, direction in SIDES:
                value = ((s.applied or {}).get(side) or {}).get(key)
                if value is not None:
                    fam.add_metric(_target(s) + [direction], value)
        yield fam


def _link_counts(snaps):
    for name, key, text in LINK_COUNTS:
        fam = GaugeMetricFamily(name, text, labels=TARGET_LABELS)
        for s in snaps:
            fam.add_metric(_target(s), s.aggregate[key])
        yield fam


def _direction_totals(snaps, link_metrics):
    for name, column, kind, text in link_metrics:
        fam = _family(kind, name.replace("ratelimit_link_", "ratelimit_"),
                      text.replace("one emulated link", "all emulated links of one direction"),
                      TARGET_LABELS + ("direction",))
        for s in snaps:
            for direction in sorted(s.totals):
                fam.add_metric(_target(s) + [direction], s.totals[direction][column])
        yield fam


def _states(snaps, states):
    fam = GaugeMetricFamily("ratelimit_links_state", STATES_HELP, labels=TARGET_LABELS + ("direction", "state"))
    for s in snaps:
        for direction, d in s.distribution.items():
            for state in states + ("dropping",):
                fam.add_metric(_target(s) + [direction, state], d["states"][state])
    return fam


def _quantiles(snaps):
    for name, key, scale, text in QUANTILES:
        fam = GaugeMetricFamily(name, text, labels=TARGET_LABELS + ("direction", "quantile"))
        for s in snaps:
            for direction, d in s.distribution.items():
                for q, value in d[key].items():
                    if value is not None:  # no busy links
                        fam.add_metric(_target(s) + [direction, QUANTILE_LABEL[q]], float(f"{value * scale:.6g}"))
        yield fam


def _share_histogram(snaps):
    fam = GaugeMetricFamily("ratelimit_links_rate_share_bucket",
                            "Busy links whose rate share is below le (cumulative; le=+Inf counts them all).",
                            labels=TARGET_LABELS + ("direction", "le"))
    for s in snaps:
        for direction, d in s.distribution.items():
            hist = d["histogram"]
            running = 0
            for le, count in zip([f"{upper:g}" for upper in hist["edges"][1:]] + ["+Inf"], hist["counts"]):
                running += count
                fam.add_metric(_target(s) + [direction, le], running)
    return fam


def _cohorts(snaps, cohort_metrics):
    for name, field, kind, text in cohort_metrics:
        fam = _family(kind, name, text, TARGET_LABELS + ("cohort", "profile", "direction"))
        for s in snaps:
            for (cohort, profile, direction), sums in s.cohort_totals.items():
                fam.add_metric(_target(s) + [cohort, profile or "", direction], sums[field])
        yield fam


def _per_link(detailed, link_metrics, port_text):
    labels = {id(s): [(s.interface, s.netns or "", host, port_text(port), direction, *s.layout.cohort(i))
                      for i, (direction, host, port, _dev) in enumerate(s.layout.keys)] for s in detailed}
    rates = GaugeMetricFamily("ratelimit_link_rate_bps", "Configured rate of one emulated link, bit/s.",
                              labels=LINK_LABELS)
    for s in detailed:
        for values, rate in zip(labels[id(s)], s.layout.rate_bps):
            if rate:  # None: no rate limit
                rates.add_metric(values, rate)
    yield rates
    for name, column, kind, text in link_metrics:
        fam = _family(kind, name, text, LINK_LABELS)
        for s in detailed:
            for values, value in zip(labels[id(s)], s.columns[column]):
                fam.add_metric(values, value)
        yield fam


class SnapshotCollector:
    """A ``prometheus_client`` collector of the source's latest snapshots: the families
    ``webui.metrics.render`` writes, per-link series as ``links`` (auto, true, false) says."""

    def __init__(self, stats_source, links: str = "auto"):
        self.source, self.links = stats_source, links

    def collect(self):
        from ratelimit.webui import metrics
        from ratelimit.webui.digest import STATES
        from ratelimit.webui.snapshot import port_text
        snaps = [self.source.snapshot(netns, interface) for netns, interface in self.source.targets()]
        yield from _status(snaps)
        yield _applied(snaps)
        yield from _applied_numbers(snaps)
        yield from _link_counts(snaps)
        yield from _direction_totals(snaps, metrics.LINK_METRICS)
        yield _states(snaps, STATES)
        yield from _quantiles(snaps)
        yield _share_histogram(snaps)
        yield from _cohorts(snaps, metrics.COHORT_METRICS)
        detailed = [s for s in snaps if self.links == "true"
                    or self.links == "auto" and len(s.layout) <= metrics.AUTO_LINK_LIMIT]
        if detailed:
            yield from _per_link(detailed, metrics.LINK_METRICS, port_text)


def registry_of(stats_source, links: str):
    """A private registry holding only the snapshot collector (no process or platform series)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(stats_source, links))
    return registry


def exposition(registry, accept: str | None) -> tuple[bytes, str]:
    """The registry's text in the format ``accept`` negotiates, and its content type."""
    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type
