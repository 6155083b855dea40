"""Benchmark: what one ``/metrics`` scrape costs, the dashboard's hand-written writer
against ``prometheus_client``, side by side on the same snapshots.

The ``prometheus_client`` side is the alternative the dashboard could serve: a
custom collector (``metrics_collector.SnapshotCollector``) over the poller's snapshots, in a
private registry per ``?links`` mode (no process or platform collectors),
written by the library in the format the ``Accept`` header negotiates.  Each run
checks that it serves what ``webui.metrics.render`` serves: the same families,
help, types, samples and values (only label order and number format differ,
as the library writes them).

The collector is in ``metrics_collector``.  A ``StatsSource`` over a synthetic reader (no kernel: formatting is pure Python)
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
from .metrics_collector import exposition, registry_of
from .results import new_result, save

try:
    from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # main() says what to install
    OPENMETRICS = None

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
    if OPENMETRICS is None:
        raise BenchError("prometheus_client is not installed: pip install -e '.[bench]'")
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, links=args.flows, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
