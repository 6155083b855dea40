"""Benchmark: what one ``/metrics`` scrape costs, the dashboard's hand-written writer
against ``prometheus_client``, side by side on the same snapshots.

The ``prometheus_client`` side is the alternative the dashboard could serve: a
custom collector (``SnapshotCollector`` below) over the poller's snapshots, in a
private registry per ``?links`` mode (no process or platform collectors),
written by the library in the format the ``Accept`` header negotiates.  Each run
checks that it serves what ``webui.metrics.render`` serves: the same families,
help, types, samples and values (only label order and number format differ,
as the library writes them).

A ``StatsSource`` over a synthetic reader (no kernel: formatting is pure Python)
is polled twice at each link count, so rates, states and quantiles exist.  Then
each writer renders the source's snapshots, alternating, median of the repeats
(at least 3, more while the configuration's time budget lasts):

* ``hand-written``: ``webui.metrics.render``, encoded to UTF-8 as the response is;
* ``prometheus_client``: the text format 0.0.4 (a scraper without ``Accept``);
* ``prometheus_client openmetrics``: OpenMetrics 1.0 (what Prometheus asks for first).

Each size is scraped with ``?links=auto`` (the default: per-link series up to
``AUTO_LINK_LIMIT`` links on an interface) and with ``?links=true`` where that
differs.  Rows carry the wall time and the process's CPU time of a scrape, the
body's size and its sample lines.  Needs ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass

from ratelimit.service.readout import Counters

from .common import BenchError, fmt_time, median, ratio, say, Steps
from .results import new_result, save

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry
except ImportError:  # main() says what to install
    CollectorRegistry = None

NAME = "metrics"
VM_WORK = False
MIN_REPEATS = 3
CHECK_SAMPLES = 20_000  # compare every sample of the two writers up to this many (parsing is slow)


@dataclass(frozen=True)
class Config:
    links: tuple[int, ...]
    max_repeats: int
    budget_s: float  # per configuration: repeat while this lasts (at least MIN_REPEATS times)


def config(quick: bool, links=None) -> Config:
    return Config(tuple(links or (1024, 65536)), 7 if quick else 21, 2.0 if quick else 6.0)


# ---------------------------------------------------------------- the prometheus_client collector

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


# ---------------------------------------------------------------- the measurement


class SyntheticReader:
    """``n`` links, both directions; each call moves the clock 1 s and every link by its own
    amount (a fifth idle, every 7th with a backlog, every 13th dropping)."""

    def __init__(self, n: int, interface: str = "eth0", cohorts: int = 0):
        self.n, self.time, self.calls = n, 1_000_000.0, 0
        # as a plan's rows come: every link's dest, then every link's source; link j of each
        # half in cohort j * cohorts // half (0 cohorts: none named)
        half = n // 2
        self.cohorts = tuple((f"c{(i % half) * cohorts // half}", "modem-28k8") for i in range(n)) if cohorts else ()
        self.applied = {"interface": interface, "netns": None, "profile": "modem-28k8", "mode": "shape",
                        "direction": "both", "flows": n, "per": "port", "link": {"layer": "ppp-vj"},
                        "down": {"rate_bps": 28800, "frame_rate_bps": 26864, "burst_bytes": 4, "queue_bytes": 16384},
                        "up": {"rate_bps": 28800, "frame_rate_bps": 26864, "burst_bytes": 4, "queue_bytes": 3250}}
        self.keys = tuple(("dest" if i < half else "source", f"198.18.{(i % half) // 32768}.{2 + i % 2}",
                           1024 + (i % half // 2) % 16384, interface) for i in range(n))
        self.bytes_per_s = [(i % 5) * 900 for i in range(n)]  # 0-3,600 B/s of a 3,600 B/s link

    def __call__(self, interface, netns=None) -> dict:
        self.calls += 1
        self.time += 1.0
        moved = [b * self.calls for b in self.bytes_per_s]
        counters = {"bytes": array("q", moved), "packets": array("q", [b // 500 for b in moved]),
                    "drops": array("q", [self.calls if i % 13 == 0 else 0 for i in range(self.n)]),
                    "overlimits": array("q", [b // 1000 for b in moved]),
                    "backlog_bytes": array("q", [1500 if i % 7 == 1 else 0 for i in range(self.n)]),
                    "backlog_pkts": array("q", [1 if i % 7 == 1 else 0 for i in range(self.n)])}
        return Counters(interface, netns, self.time, self.applied, self.keys, (28800,) * self.n, cohorts=self.cohorts,
                        counters=counters)


def polled_source(n: int, cohorts: int = 0):
    from ratelimit.webui.stats import StatsSource
    src = StatsSource([(None, "eth0")], reader=SyntheticReader(n, cohorts=cohorts))
    src.poll_once()
    src.poll_once()
    return src


def scrapers(src, links: str) -> dict:
    """{writer: function returning the body, bytes} for one source and ``?links`` mode."""
    from ratelimit.webui.metrics import render
    registry = registry_of(src, links)

    def hand_written() -> bytes:
        snaps = [src.snapshot(netns, interface) for netns, interface in src.targets()]
        return render(snaps, links).encode()

    return {"hand-written": hand_written,
            "prometheus_client": lambda: exposition(registry, None)[0],
            "prometheus_client openmetrics": lambda: exposition(registry, OPENMETRICS)[0]}


def sample_lines(body: bytes) -> int:
    return sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))


def families(body: bytes, parse=None) -> dict:
    """{family: (type, help, {(sample, sorted labels): value})} of a text-format (or ``parse``'s) body."""
    return {f.name: (f.type, f.documentation, {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples})
            for f in (parse or text_string_to_metric_families)(body.decode())}


def samples(fams: dict) -> dict:
    return {key: value for _type, _help, values in fams.values() for key, value in values.items()}


def check_same(n: int, links: str, bodies: dict) -> int:
    """The sample count all writers agree on; every sample compared while there are few."""
    counts = {name: sample_lines(body) for name, body in bodies.items()}
    if len(set(counts.values())) != 1:
        raise BenchError(f"{n:,} links, ?links={links}: the writers disagree on the samples: {counts}")
    count = counts["hand-written"]
    if count <= CHECK_SAMPLES:
        ours = families(bodies["hand-written"])
        if families(bodies["prometheus_client"]) != ours:
            raise BenchError(f"{n:,} links, ?links={links}: prometheus_client serves other series than render()")
        if samples(families(bodies["prometheus_client openmetrics"], openmetrics_families)) != samples(ours):
            raise BenchError(f"{n:,} links, ?links={links}: OpenMetrics serves other samples than render()")
    return count


def timed_scrape(scrape) -> tuple[float, float, bytes]:
    """(wall_s, cpu_s, body) of one call; CPU is the process's (nothing else runs in it)."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    body = scrape()
    return time.perf_counter() - t0, time.process_time() - cpu0, body


def measure_config(cfg: Config, fns: dict) -> dict:
    """{writer: (walls, cpus, body)}, the writers alternating, at least MIN_REPEATS rounds."""
    got = {name: ([], [], b"") for name in fns}
    names = list(fns)
    started = time.monotonic()
    for r in range(cfg.max_repeats):
        if r >= MIN_REPEATS and time.monotonic() - started > cfg.budget_s:
            break
        for name in (names if r % 2 == 0 else names[::-1]):
            wall_s, cpu_s, body = timed_scrape(fns[name])
            walls, cpus, _ = got[name]
            walls.append(wall_s)
            cpus.append(cpu_s)
            got[name] = (walls, cpus, body)
    return got


def rows_of_config(n: int, links: str, got: dict) -> list:
    count = check_same(n, links, {name: body for name, (_w, _c, body) in got.items()})
    base_s = median(got["hand-written"][0])
    return [{"links": n, "links_param": links, "writer": name, "median_s": median(walls), "samples": walls,
             "cpu_s": median(cpus), "cpu_samples": cpus, "bytes": len(body), "series": count,
             "vs_hand_written": ratio(median(walls), base_s)}
            for name, (walls, cpus, body) in got.items()]


COHORT_COUNTS = (1, 16)  # cohorts of the per-cohort series' measurement


def cohort_series(cfg: Config, n: int, cohorts: int) -> dict:
    """What the per-cohort series cost at ``n`` links in ``cohorts`` cohorts, medians: a
    ``?links=false`` scrape with them against one without them (the scrape before they
    were added: the same snapshots, their ``cohort_totals`` emptied), and their sums, done
    once a poll (``digest.cohort_totals``)."""
    import dataclasses
    from ratelimit.webui.digest import cohort_totals
    from ratelimit.webui.metrics import render
    src = polled_source(n, cohorts)
    snaps = [src.snapshot(netns, interface) for netns, interface in src.targets()]
    bare = [dataclasses.replace(s, cohort_totals={}) for s in snaps]
    got = measure_config(cfg, {"with": lambda: render(snaps, "false").encode(),
                               "without": lambda: render(bare, "false").encode()})
    s = snaps[0]
    sums = measure_config(cfg, {"sums": lambda: repr(cohort_totals(s.columns, s.layout.cohort_runs)).encode()})
    return {"links": n, "cohorts": cohorts,
            "scrape_with_s": median(got["with"][0]), "scrape_without_s": median(got["without"][0]),
            "samples_with": sample_lines(got["with"][2]), "samples_without": sample_lines(got["without"][2]),
            "with_over_without": ratio(median(got["with"][0]), median(got["without"][0])),
            "sums_per_poll_s": median(sums["sums"][0]), "repeats": len(got["with"][0])}


def measure(quick: bool, *, links=None, outdir=None) -> dict:
    from ratelimit.webui.metrics import AUTO_LINK_LIMIT
    cfg = config(quick, links)
    doc = new_result(NAME, quick)
    doc["config"] = {**cfg.__dict__, "min_repeats": MIN_REPEATS}
    plan = [(n, mode) for n in cfg.links for mode in ("auto", "true") if mode == "auto" or n > AUTO_LINK_LIMIT]
    steps = Steps(NAME, len(plan))
    for n in cfg.links:
        src = polled_source(n)
        for mode in (m for size, m in plan if size == n):
            rows = rows_of_config(n, mode, measure_config(cfg, scrapers(src, mode)))
            doc["rows"] += rows
            steps(f"{n:,} links, ?links={mode}, {rows[0]['series']:,} samples: " + ", ".join(
                f"{r['writer']} {fmt_time(r['median_s'])} (CPU {fmt_time(r['cpu_s'])})" for r in rows)
                + f"; median of {len(rows[0]['samples'])}")
        if outdir:
            save(doc, outdir)
    doc["cohort_series"] = []
    for n in cfg.links:
        for k in COHORT_COUNTS:
            row = cohort_series(cfg, n, k)
            doc["cohort_series"].append(row)
            say(NAME, f"{n:,} links in {k} cohort(s), ?links=false: {fmt_time(row['scrape_with_s'])} with the "
                      f"per-cohort series ({row['samples_with']} samples), {fmt_time(row['scrape_without_s'])} "
                      f"without ({row['samples_without']}); their sums {fmt_time(row['sums_per_poll_s'])} a poll")
    doc["notes"].append("a synthetic reader, no kernel; CPU is time.process_time() of the scrape; "
                        "prometheus_client: bench/metrics_cost.py's SnapshotCollector")
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    if CollectorRegistry is None:
        raise BenchError("prometheus_client is not installed: pip install -e '.[bench]'")
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, links=args.flows, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
