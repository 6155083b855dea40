"""Traced links in the dashboard's numbers and ``/metrics``, pure (no kernel): each link's
trace capacity over a window of the clock (``tracerates``, from a real request following
tests/cases/traces/square.toml), delivered / capacity and the glance's tracking line
(``digest``), and the driver's report (``follow.report``, from a status file) as the
dashboard and ``/metrics`` carry it, through the real StatsSource and Flask app."""

import json
import math
import re
from pathlib import Path

import pytest

from ratelimit.driver import follow
from ratelimit.driver.steps import now_bps
from ratelimit.driver.tracerates import TraceRates
from ratelimit.service import make_request, readout
from ratelimit.traces import tracespec
from ratelimit.webui import create_app
from ratelimit.webui.digest import TRACK_TOLERANCE
from ratelimit.webui.stats import StatsSource
from webuikit import reading

ROOT = Path(__file__).resolve().parent.parent
SQUARE = ROOT / "tests" / "cases" / "traces" / "square.toml"  # 2 s at 400 kbit/s, 2 s at 40 kbit/s, looping
T0 = 1_000_000.0  # s: the plan's start on the wall clock
IFACE = "veth0"
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def at_root(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", "")
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))


def square_request(ports="2000-2001"):
    req = make_request(IFACE, hosts="198.18.1.2", ports=ports, direction="dest", schedule=str(SQUARE), phase="same")
    return tracespec.stamped(req, None, int(T0 * 1000))


def test_the_capacity_of_a_window_is_the_trace_s_steps_averaged():
    req = square_request()
    rates = TraceRates(req, readout.link_table(req).keys)
    assert len(rates) == 2 and rates.traced == b"\x01\x01"
    now = now_bps(req, T0 * 1000 + 500, 100)  # what --stats shows as trace_bps, one step
    high, low = now[("dest", "198.18.1.2", 2000)], now_bps(req, T0 * 1000 + 2500, 100)[("dest", "198.18.1.2", 2000)]
    assert high > 9 * low > 0  # 10:1
    assert list(rates.window_bps(T0, T0 + 2)) == [high, high]
    assert list(rates.window_bps(T0 + 2.2, T0 + 3.9)) == [low, low]
    assert rates.window_bps(T0 + 1, T0 + 3)[0] == pytest.approx((high + low) / 2, abs=1)  # straddles a step
    assert rates.window_bps(T0 + 4.5, T0 + 5.5)[0] == pytest.approx(high, abs=1)  # it loops
    assert all(math.isnan(v) for v in rates.window_bps(T0 + 2, T0 + 2))  # an empty window has none


class TracedReader:
    """``readout.counters``' shape for the two square-wave links of ``square_request``, with
    the real ``TraceRates`` and ``follow.report``: link 0 delivers its capacity exactly,
    link 1 half of it, both with a backlog."""

    def __init__(self):
        self.req = square_request()
        self.rates = TraceRates(self.req, readout.link_table(self.req).keys)
        self.time = T0 + 0.5
        self.links = [{"direction": "dest", "host": "198.18.1.2", "port": p, "dev": IFACE, "bytes": 0, "packets": 0,
                       "drops": 0, "overlimits": 0, "backlog_bytes": 3000, "backlog_pkts": 2, "rate_bps": None,
                       "cohort": "default", "profile": None} for p in (2000, 2001)]

    def advance(self, seconds=1.0):
        caps = self.rates.window_bps(self.time, self.time + seconds)
        for link, cap, share in zip(self.links, caps, (1.0, 0.5)):
            link["bytes"] += round(cap * seconds / 8 * share)
            link["packets"] += 1
        self.time += seconds

    def __call__(self, interface, netns=None):
        return reading(interface, netns, self.time, {"interface": interface, "mode": "shape"}, self.links,
                       driver=follow.report(self.req, netns, interface, now_ms=int(self.time * 1000)),
                       trace_rates=self.rates)


def polled_app(reader, rounds=7):
    src = StatsSource([(None, IFACE)], reader=reader, share_window=5.0)
    app = create_app({"STATS_SOURCE": src, "CONTROL": None, "TOKEN": TOKEN})
    for _ in range(rounds):
        reader.advance()
        src.poll_once()
    return app, src


def test_delivered_over_capacity_and_the_glance_s_tracking():
    reader = TracedReader()
    app, src = polled_app(reader)
    snap = src.snapshot(None, IFACE)
    last = reader.rates.window_bps(reader.time - 1, reader.time)
    assert list(snap.columns["capacity_bps"]) == list(last)  # the last interval's capacity
    assert snap.columns["throughput_bps"][0] == pytest.approx(last[0], rel=1e-3)
    # over the share window (5 s: both steps of the square wave in it) link 0 delivered its capacity, link 1 half
    assert snap.columns["track_ratio"][0] == pytest.approx(1.0, abs=1e-3)
    assert snap.columns["track_ratio"][1] == pytest.approx(0.5, abs=1e-3)
    t = snap.tracking["dest"]
    assert t["links"] == 2 and t["backlogged"] == 2 and t["tolerance"] == TRACK_TOLERANCE
    assert t["ratio_mean"] == pytest.approx(0.75, abs=1e-3) and t["within"] == 0.5
    assert t["ratio"]["p5"] == pytest.approx(0.5, abs=1e-3) and t["ratio"]["p95"] == pytest.approx(1.0, abs=1e-3)

    c = app.test_client()
    info = c.get("/api/targets").get_json()["targets"][0]
    assert info["tracking"]["dest"]["within"] == 0.5
    assert not info["driver"]["running"] and "has not followed these traces" in info["driver"]["notice"]
    hist = c.get(f"/api/links/history?interface={IFACE}&host=198.18.1.2&port=2000&direction=dest").get_json()
    caps = hist["series"]["capacity_bps"]
    assert len(caps) == len(hist["series"]["time"]) == 6  # every sample with rates
    assert max(caps) > 9 * min(caps)  # the square wave's steps in the series (1 s windows, 2 s steps)
    row = c.get("/api/links").get_json()["links"][0]
    assert row["capacity_bps"] == pytest.approx(last[0], abs=1e-3) and row["track_ratio"] == pytest.approx(1, abs=1e-3)


def test_a_link_that_is_not_backlogged_is_not_counted():
    reader = TracedReader()
    reader.links[1]["backlog_bytes"] = reader.links[1]["backlog_pkts"] = 0  # its sender sends less
    _, src = polled_app(reader)
    t = src.snapshot(None, IFACE).tracking["dest"]
    assert t["links"] == 2 and t["backlogged"] == 1 and t["within"] == 1.0


def write_status(reader, **fields):
    path = follow.status_path(None, IFACE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": follow.VERSION, "pid": 1, "step_ms": 100, "state": "following",
                                "started_ms": reader.req.traced_start_ms, "links": 2, "why": None,
                                **fields}))


def test_metrics_of_a_dead_driver_that_left_links_shut():
    reader = TracedReader()
    write_status(reader, step=37, step_at_ms=int((T0 + 3.7) * 1000), shut=2)  # no driver holds the lock
    app, src = polled_app(reader)
    info = app.test_client().get("/api/targets").get_json()["targets"][0]
    notice = info["driver"]["notice"]
    assert "the links were left at step 37 (3.7 s into the traces)" in notice
    assert "2 of them shut -- an outage left in place, the worst case" in notice
    text = app.test_client().get("/metrics").get_data(as_text=True)
    labels = f'interface="{IFACE}",netns=""'
    for line in (f"ratelimit_trace_driver_running{{{labels}}} 0", f"ratelimit_trace_driver_step{{{labels}}} 37",
                 f"ratelimit_trace_driver_step_seconds{{{labels}}} 0.1",
                 f"ratelimit_trace_driver_shut_links{{{labels}}} 2",
                 f"ratelimit_trace_driver_traced_links{{{labels}}} 2",
                 f"ratelimit_trace_backlogged_links{{{labels},direction=\"dest\"}} 2",
                 f"ratelimit_trace_tracking_ratio_mean{{{labels},direction=\"dest\"}} 0.75",
                 f"ratelimit_trace_tracking_within_ratio{{{labels},direction=\"dest\",tolerance=\"0.1\"}} 0.5",
                 f"ratelimit_trace_tracking_ratio{{{labels},direction=\"dest\",quantile=\"0.5\"}} 0.5"):
        assert line + "\n" in text, line
    age = re.search(rf"ratelimit_trace_driver_step_age_seconds{{{labels}}} (\S+)", text)
    assert float(age.group(1)) == pytest.approx(reader.time - (T0 + 3.7), abs=0.01)
    snap = src.snapshot(None, IFACE)
    link = f'{labels},host="198.18.1.2",port="2001",direction="dest",cohort="default",profile=""'
    cap = re.search(rf"ratelimit_link_trace_capacity_bps{{{re.escape(link)}}} (\S+)", text)
    got = re.search(rf"ratelimit_link_delivered_bps{{{re.escape(link)}}} (\S+)", text)
    assert float(cap.group(1)) == pytest.approx(snap.columns["capacity_bps"][1], rel=1e-5)
    assert float(got.group(1)) == pytest.approx(snap.columns["capacity_bps"][1] / 2, rel=1e-3)


def test_a_plan_without_traces_has_no_trace_metrics():
    reader = TracedReader()
    base = reader.__call__

    def static(interface, netns=None):
        return {**base(interface, netns), "driver": None, "trace_rates": None}
    src = StatsSource([(None, IFACE)], reader=static)
    app = create_app({"STATS_SOURCE": src, "CONTROL": None, "TOKEN": TOKEN})
    for _ in range(3):
        reader.advance()
        src.poll_once()
    assert src.snapshot(None, IFACE).tracking == {}
    text = app.test_client().get("/metrics").get_data(as_text=True)
    assert not re.search(r"^ratelimit_(trace_|link_trace_|link_delivered)", text, re.M)
    assert app.test_client().get("/api/targets").get_json()["targets"][0]["driver"] is None
