"""The web dashboard: every route through Flask's test client, with a fake
statistics reader behind the real StatsSource and a recording control backend
behind the real ``service.make_request`` validation.  The ``netns`` tests at the
end apply and clean for real through the API in a throwaway namespace."""

import json
import re
import subprocess

import pytest

from ratelimit import service
from ratelimit.errors import ApplyError, ConflictError, NotFoundError, PermissionDenied
from ratelimit.service import readout
from ratelimit.webui import create_app
from ratelimit.webui.cli import parse_listen, web_main
from ratelimit.webui.stats import StatsSource
from webuikit import reading

TOKEN = "test-token-0123456789abcdef"
AUTH = {"X-Ratelimit-Token": TOKEN}


class FakeReader:
    """Stands in for service.statistics: counters the test sets, a clock it moves."""

    def __init__(self, n=6, interface="eth0", netns=None):
        self.time = 1_000_000.0
        self.calls = 0
        self.error = None
        self.applied = {"interface": interface, "netns": netns, "profile": "modem-28k8", "mode": "shape",
                        "direction": "both", "hosts": ["198.18.0.2"], "ports": "5000-5002", "flows": n,
                        "per": "port", "link": {"layer": "ppp-vj"},
                        "down": {"rate_bps": 28800, "frame_rate_bps": 26864, "burst_bytes": 4, "queue_bytes": 16384},
                        "up": {"rate_bps": 28800, "frame_rate_bps": 26864, "burst_bytes": 4, "queue_bytes": 3250}}
        self.links = [self.link("dest" if i % 2 == 0 else "source", "198.18.0.2", 5000 + i // 2, interface)
                      for i in range(n)]

    @staticmethod
    def link(direction, host, port, dev, **counters):
        row = {"direction": direction, "host": host, "port": port, "dev": dev, "bytes": 0, "packets": 0,
               "drops": 0, "overlimits": 0, "backlog_bytes": 0, "backlog_pkts": 0, "rate_bps": 28800,
               "cohort": "main", "profile": "modem-28k8"}
        row.update(counters)
        return row

    def advance(self, seconds=1.0, **per_link):
        """Move the clock; add ``per_link[field][i]`` to the counters of link i."""
        self.time += seconds
        for name, values in per_link.items():
            for i, v in enumerate(values):
                self.links[i][name] += v

    def __call__(self, interface, netns=None):
        self.calls += 1
        if self.error:
            raise self.error
        return reading(interface, netns, self.time, self.applied, self.links if self.applied else [])


class FakeControl:
    """The real request validation; apply/clean only recorded (or made to fail)."""

    def __init__(self):
        self.calls = []
        self.fail = None

    def make_request(self, interface, **kwargs):
        return service.make_request(interface, **kwargs)

    def apply(self, req, *, force=False, lock_timeout=None):
        self.calls.append(("apply", req, force))
        self.lock_timeout = lock_timeout
        if self.fail:
            raise self.fail
        from ratelimit.plan.compile import compile_plan
        return compile_plan(req)

    def clean(self, interface, netns=None, *, force=False, lock_timeout=None):
        self.calls.append(("clean", interface, netns, force))
        self.lock_timeout = lock_timeout
        if self.fail:
            raise self.fail
        return True


@pytest.fixture
def reader():
    return FakeReader()


@pytest.fixture
def control():
    return FakeControl()


def make_app(reader, control, targets=((None, "eth0"),), **config):
    src = StatsSource(list(targets), reader=reader)
    cfg = {"STATS_SOURCE": src, "CONTROL": control, "TOKEN": TOKEN}
    cfg.update(config)
    return create_app(cfg), src


@pytest.fixture
def app_src(reader, control):
    return make_app(reader, control)


@pytest.fixture
def client(app_src):
    return app_src[0].test_client()


@pytest.fixture
def src(app_src):
    return app_src[1]


def polled(src, reader, rounds=2, **per_link):
    for _ in range(rounds):
        reader.advance(**per_link)
        src.poll_once()


def assert_error(resp, status, *fragments):
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/json"
    data = resp.get_json()
    assert set(data) == {"error"}
    message = data["error"]
    assert "\n" not in message and "Traceback" not in message
    for f in fragments:
        assert f in message, message
    return message


# ---------------------------------------------------------------- the stats source


def test_rates_come_from_counter_deltas(src, reader):
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    assert snap.aggregate["throughput_bps"] is None  # one read: no rate yet
    reader.advance(2.0, bytes=[1000, 0, 500, 0, 0, 0], packets=[10, 0, 5, 0, 0, 0], drops=[0, 0, 4, 0, 0, 0])
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    assert snap.row(0)["throughput_bps"] == 4000.0  # 1000 B in 2 s
    assert snap.row(2)["drops_per_s"] == 2.0
    assert snap.row(0)["active"] and not snap.row(1)["active"]
    agg = snap.aggregate
    assert agg["throughput_bps_down"] == 6000.0 and agg["throughput_bps_up"] == 0.0
    assert agg["packets_per_s"] == 7.5 and agg["drops"] == 4 and agg["active_links"] == 2
    # shares of the frame rate (26,864 bit/s): 4000 / 26864 and 2000 / 26864
    assert snap.row(0)["rate_share"] == round(4000 / 26864, 6) and snap.row(1)["rate_share"] == 0.0
    assert [snap.row(i)["state"] for i in range(3)] == ["busy", "idle", "busy"]
    assert snap.distribution["dest"]["states"] == {"idle": 1, "busy": 2, "at_rate": 0, "starved": 0, "dropping": 1}
    assert snap.distribution["source"]["states"] == {"idle": 3, "busy": 0, "at_rate": 0, "starved": 0, "dropping": 0}


def test_counter_reset_gives_no_negative_rate(src, reader):
    polled(src, reader, bytes=[1000] * 6)
    reader.links[0]["bytes"] = 10
    reader.advance()
    src.poll_once()
    assert src.snapshot(None, "eth0").row(0)["throughput_bps"] == 0.0


def test_links_go_idle_after_the_active_window(src, reader):
    polled(src, reader, bytes=[100] * 6)
    assert src.snapshot(None, "eth0").aggregate["active_links"] == 6
    reader.advance(src.active_seconds + 1)
    src.poll_once()
    assert src.snapshot(None, "eth0").aggregate["active_links"] == 0


def test_history_keeps_aggregate_and_per_link_series(src, reader):
    polled(src, reader, rounds=4, bytes=[125, 0, 0, 0, 0, 0])
    h = src.history(None, "eth0")
    assert len(h["time"]) == 3 and h["throughput_bps"] == [1000.0] * 3
    snap = src.snapshot(None, "eth0")
    lh = src.link_history(None, "eth0", 0, snap.layout.id)
    assert lh["throughput_bps"] == [1000.0] * 3 and lh["time"] == h["time"]


def test_new_configuration_starts_a_new_layout(src, reader):
    polled(src, reader, bytes=[100] * 6)
    old = src.snapshot(None, "eth0").layout.id
    reader.applied = dict(reader.applied, profile="modem-56k")
    reader.advance()
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    assert snap.layout.id != old and snap.aggregate["throughput_bps"] is None
    assert src.link_history(None, "eth0", 0, old) is None


def test_ring_buffer_is_bounded():
    r = FakeReader(n=100)
    s = StatsSource([(None, "eth0")], reader=r, interval=1.0, history=10, link_values=1000)
    for _ in range(30):
        r.advance(bytes=[1] * 100)
        s.poll_once()
    assert len(s.history(None, "eth0")["time"]) == 11
    assert s.link_history_samples(None, "eth0") == 5  # 1000 values / (2 series x 100 links)
    assert len(s.link_history(None, "eth0", 0, s.snapshot(None, "eth0").layout.id)["time"]) == 5


def test_read_errors_are_one_line_and_keep_the_last_numbers(src, reader):
    polled(src, reader, bytes=[100] * 6)
    reader.error = NotFoundError("--interface: 'eth0' does not exist (see: ip link)")
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    assert snap.error == "--interface: 'eth0' does not exist (see: ip link)"
    assert snap.row(0)["bytes"] == 200
    reader.error = RuntimeError("boom")
    src.poll_once()
    assert src.snapshot(None, "eth0").error == "internal error reading statistics (see the server log)"


def test_poller_thread_runs_and_stops(reader):
    s = StatsSource([(None, "eth0")], reader=reader, interval=0.2)
    s.start()
    try:
        assert s.wait(1, timeout=5) >= 2
    finally:
        s.stop()
    assert s.stopped and reader.calls >= 2


# ---------------------------------------------------------------- page and static files


def test_page(client, src, reader):
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    html = resp.get_data(as_text=True)
    assert 'data-interface="eth0"' in html and 'id="control-form"' in html
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert TOKEN not in html  # the token never appears in a page


def test_page_read_only_has_no_control(reader, control):
    app, _ = make_app(reader, control, READ_ONLY=True)
    html = app.test_client().get("/").get_data(as_text=True)
    assert 'id="control-form"' not in html and "read-only" in html


def test_static_files(client):
    for name in ("dashboard.js", "dashboard.css"):
        assert client.get(f"/static/{name}").status_code == 200


# ---------------------------------------------------------------- JSON routes


def test_targets(client, src, reader):
    polled(src, reader, bytes=[100] * 6)
    data = client.get("/api/targets").get_json()
    assert data["read_only"] is False and data["interval"] == 1.0 and data["history_seconds"] == 300.0
    (t,) = data["targets"]
    assert t["name"] == "eth0" and t["applied"]["profile"] == "modem-28k8" and t["error"] is None
    assert t["aggregate"]["throughput_bps"] == 4800.0


def test_profiles(client):
    data = client.get("/api/profiles").get_json()
    by_name = {p["name"]: p for p in data["profiles"]}
    assert by_name["modem-28k8"]["down"]["rate_bps"] == 28800
    assert_error(client.get("/api/profiles?x=1"), 400, "query: 'x'")


def test_status(client, src, reader):
    polled(src, reader)
    data = client.get("/api/status?interface=eth0").get_json()
    assert data["interface"] == "eth0" and data["netns"] is None and data["aggregate"]["links"] == 6
    assert client.get("/api/status").get_json()["interface"] == "eth0"  # the only target
    assert_error(client.get("/api/status?interface=eth9"), 404, "interface: 'eth9'", "watched: eth0")
    assert_error(client.get("/api/status?interface=eth0&interface=eth1"), 400, "more than once")


def test_status_needs_interface_when_several_are_watched(reader, control):
    app, _ = make_app(reader, control, targets=[(None, "eth0"), ("router", "eth1")])
    c = app.test_client()
    assert_error(c.get("/api/status"), 400, "interface: missing", "eth0, router/eth1")
    assert c.get("/api/status?interface=eth1").get_json()["netns"] == "router"
    assert c.get("/api/status?interface=eth1&netns=router").status_code == 200
    assert_error(c.get("/api/status?interface=eth1&netns=other"), 404, "other/eth1")


def test_links_filters_sort_and_pages(client, src, reader):
    polled(src, reader, bytes=[600, 500, 400, 300, 0, 0])
    data = client.get("/api/links").get_json()
    assert data["total"] == 6 and data["matched"] == 4  # active only by default
    assert [r["throughput_bps"] for r in data["links"]] == [4800.0, 4000.0, 3200.0, 2400.0]
    row = data["links"][0]
    assert row["cohort"] == "main" and row["profile"] == "modem-28k8"
    assert set(row) == {"direction", "host", "port", "dev", "rate_bps", "cohort", "profile", "bytes", "packets", "drops", "overlimits",
                        "backlog_bytes", "backlog_pkts", "throughput_bps", "drops_per_s", "rate_share",
                        "queue_delay_ms", "capacity_bps", "track_ratio", "active", "state"}
    assert client.get("/api/links?active=false").get_json()["matched"] == 6
    assert client.get("/api/links?active=0&direction=source").get_json()["matched"] == 3
    assert client.get("/api/links?active=0&port=5001-5002").get_json()["matched"] == 4
    assert client.get("/api/links?active=0&host=198.18.0.9").get_json()["matched"] == 0
    page = client.get("/api/links?active=0&sort=port&order=asc&offset=2&limit=2").get_json()
    assert [r["port"] for r in page["links"]] == [5001, 5001] and page["offset"] == 2
    assert client.get("/api/links?active=0&sort=host").status_code == 200
    assert client.get("/api/links?active=0&sort=rate_bps").status_code == 200


def test_links_sort_by_host_puts_the_default_cohorts_link_last(client, src, reader):
    """The default cohort's link (host None in the reading, ``others`` in a row): by host it comes
    after every address, IPv6 included, instead of failing the request."""
    reader.links[2]["host"], reader.links[3]["host"] = None, "2001:db8:18::2"
    polled(src, reader, bytes=[600, 500, 400, 300, 200, 100])
    data = client.get("/api/links?active=0&sort=host&order=asc").get_json()
    assert [r["host"] for r in data["links"]] == ["198.18.0.2"] * 4 + ["2001:db8:18::2", "others"]


@pytest.mark.parametrize("query, fragment", [
    ("active=maybe", "active: 'maybe' is not a boolean"),
    ("port=70000", "port: 70000 is not a port (1-65535)"),
    ("port=5002-5001", "port: 5002-5001 is a reversed range"),
    ("port=x", "port: 'x' is not a port"),
    ("direction=up", "direction: 'up' is not a direction (allowed: dest, source)"),
    ("sort=color", "sort: 'color' is not a column"),
    ("order=up", "order: 'up' is not an order (allowed: asc, desc)"),
    ("offset=-1", "offset: '-1' is not a whole number"),
    ("limit=0", "limit: 0 is out of range (1-10000)"),
    ("limit=ten", "limit: 'ten' is not a whole number"),
    ("colour=red", "query: 'colour' is not a parameter here"),
])
def test_links_bad_input(client, src, reader, query, fragment):
    polled(src, reader)
    assert_error(client.get(f"/api/links?{query}"), 400, fragment)


def test_history(client, src, reader):
    polled(src, reader, rounds=3, bytes=[100] * 6)
    data = client.get("/api/history?interface=eth0").get_json()
    assert data["interval"] == 1.0 and len(data["series"]["time"]) == 2
    assert set(data["series"]) == {"time", "throughput_bps", "throughput_bps_down", "throughput_bps_up",
                                   "packets_per_s", "drops_per_s", "backlog_bytes", "active_links"} | {
        f"{name}_{direction}" for direction in ("dest", "source")
        for name in ("rate_share_p5", "rate_share_p50", "rate_share_p95", "queue_delay_ms_p5", "queue_delay_ms_p50",
                     "queue_delay_ms_p95", "idle_links", "busy_links", "at_rate_links", "starved_links",
                     "dropping_links")}
    assert_error(client.get("/api/history?interface=nope"), 404, "interface: 'nope'")


def test_link_history(client, src, reader):
    polled(src, reader, rounds=3, bytes=[100] * 6)
    data = client.get("/api/links/history?host=198.18.0.2&port=5000&direction=dest").get_json()
    assert data["series"]["throughput_bps"] == [800.0, 800.0]
    assert_error(client.get("/api/links/history?host=198.18.0.2&port=5000"), 400, "direction: missing")
    assert_error(client.get("/api/links/history?host=198.18.0.2&port=5000&direction=down"), 400, "direction: 'down'")
    assert_error(client.get("/api/links/history?host=198.18.0.2&port=0&direction=dest"), 400, "port: 0")
    assert_error(client.get("/api/links/history?host=198.18.0.3&port=5000&direction=dest"), 404,
                 "link: '198.18.0.3:5000 dest' is not a link on eth0")


def sse_events(chunks):
    """Parse SSE text into [(event, data)]."""
    out = []
    text = "".join(c.decode() if isinstance(c, bytes) else c for c in chunks)
    for block in text.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name:
            out.append((name, data))
    return out


def test_stream_sends_a_small_tick_per_poll_without_link_rows(app_src, reader):
    app, src = app_src
    polled(src, reader, bytes=[100] * 6)
    client = app.test_client()
    resp = client.get("/api/stream?interface=eth0", buffered=False)
    assert resp.status_code == 200 and resp.mimetype == "text/event-stream"
    it = resp.response
    chunks = [next(it), next(it)]
    ((name, tick),) = sse_events(chunks)
    assert name == "tick" and set(tick) == {"seq", "time", "targets"}
    (target,) = tick["targets"]
    assert target["aggregate"]["throughput_bps"] == 4800.0 and target["seq"] == tick["seq"]
    assert target["distribution"]["dest"]["states"]["busy"] == 3 and target["distribution"]["source"]["links"] == 3
    reader.advance(bytes=[100, 0, 0, 0, 0, 0])
    src.poll_once()
    ((name, tick2),) = sse_events([next(it)])
    assert name == "tick" and tick2["seq"] == tick["seq"] + 1
    assert tick2["targets"][0]["distribution"]["dest"]["states"] == {"idle": 2, "busy": 1, "at_rate": 0,
                                                                     "starved": 0, "dropping": 0}
    assert app.extensions["ratelimit_streams"]["open"] == 1
    resp.close()
    assert app.extensions["ratelimit_streams"]["open"] == 0


def test_link_states_and_distributions(src, reader):
    """idle / busy / at rate / starved / dropping, rate share of the frame rate, queueing delay."""
    frame = 26864 / 8  # bytes per second at the down and up frame rate
    polled(src, reader, rounds=1)
    reader.advance(1.0, bytes=[round(frame), round(frame * 0.35), round(frame * 0.7), round(frame * 0.95), 0, 0],
                   drops=[0, 0, 3, 0, 0, 0])
    reader.links[1]["backlog_bytes"] = 3358  # 1 s of the frame rate queued: 1000 ms of delay
    reader.links[5]["backlog_bytes"] = 0
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    rows = [snap.row(i) for i in range(6)]
    assert [r["state"] for r in rows] == ["at_rate", "starved", "busy", "at_rate", "idle", "idle"]
    assert rows[1]["queue_delay_ms"] == round(3358 * 8 / 26864 * 1000, 3)
    down, up = snap.distribution["dest"], snap.distribution["source"]  # links 0, 2, 4 and 1, 3, 5
    assert down["states"] == {"idle": 1, "busy": 1, "at_rate": 1, "starved": 0, "dropping": 1}
    assert up["states"] == {"idle": 1, "busy": 0, "at_rate": 1, "starved": 1, "dropping": 0}
    assert down["links"] == 2 and down["histogram"]["counts"][7] == 1 and down["histogram"]["counts"][10] == 1
    assert up["histogram"]["counts"][3] == 1 and up["histogram"]["counts"][9] == 1
    assert (down["rate_share"]["p50"], down["rate_share"]["p95"]) == (rows[2]["rate_share"], rows[0]["rate_share"])
    assert up["queue_delay_ms"]["p95"] == rows[1]["queue_delay_ms"] and up["queue_delay_ms"]["p5"] == 0
    h = src.history(None, "eth0")
    assert h["starved_links_source"][-1] == 1 and h["rate_share_p50_dest"][-1] == down["rate_share"]["p50"]


def test_each_cohort_is_read_at_its_own_rate_and_glanced_at_apart(client, src, reader):
    """Two cohorts (modems at 26,864 bit/s of frames, cable at 5,000,000): a link's share
    and queueing delay are against its own cohort's rate, and the target's reading has a
    glance and distributions per cohort."""
    modem, cable = dict(reader.applied["down"]), {"rate_bps": 5_000_000, "frame_rate_bps": 5_000_000}
    reader.applied = {**reader.applied, "profile": None, "per": None, "link": None, "down": {}, "up": {},
                      "cohorts": [{"name": "modems", "profile": "modem-28k8", "down": modem, "up": modem},
                                  {"name": "office", "profile": "cable", "down": cable, "up": cable}]}
    for i, row in enumerate(reader.links):
        row["cohort"], row["profile"] = ("modems", "modem-28k8") if i < 4 else ("office", "cable")
    polled(src, reader, rounds=1)
    reader.advance(1.0, bytes=[round(26864 / 8 / 2), 0, 0, 0, round(5_000_000 / 8 / 4), 0])
    reader.links[4]["backlog_bytes"] = 62500  # 100 ms at 5 Mbit/s
    src.poll_once()
    snap = src.snapshot(None, "eth0")
    rows = [snap.row(i) for i in range(6)]
    assert rows[0]["rate_share"] == pytest.approx(0.5, abs=0.01)  # of a modem
    assert rows[4]["rate_share"] == pytest.approx(0.25, abs=0.01)  # of the cable line, not of a modem
    assert rows[4]["queue_delay_ms"] == 100.0
    info = client.get("/api/status?interface=eth0").get_json()
    glance = info["cohorts"]
    assert list(glance) == ["modems", "office"]
    assert (glance["modems"]["profile"], glance["modems"]["links"], glance["office"]["links"]) == ("modem-28k8", 4, 2)
    assert glance["modems"]["active_links"] == 1 and glance["office"]["active_links"] == 1
    assert glance["office"]["throughput_bps_down"] == pytest.approx(5_000_000 / 4, rel=0.01)
    assert glance["modems"]["distribution"]["dest"]["rate_share"]["p50"] == rows[0]["rate_share"]
    assert glance["office"]["distribution"]["dest"]["queue_delay_ms"]["p50"] == 100.0
    assert glance["office"]["distribution"]["source"]["links"] == 0


def test_rate_share_is_measured_over_the_share_window(src, reader):
    """A modem sends two or three frames a second: its one-second rate jumps, its share over
    the last five seconds does not."""
    polled(src, reader, rounds=1)
    sent = []
    for k in range(8):
        n = 3000 if k % 2 else 4500
        sent.append(n)
        reader.advance(1.0, bytes=[n, 0, 0, 0, 0, 0])
        src.poll_once()
    row = src.snapshot(None, "eth0").row(0)
    assert row["throughput_bps"] == sent[-1] * 8
    assert row["rate_share"] == round(sum(sent[-5:]) * 8 / 5 / 26864, 6)


def test_links_worst_state_and_share_filters(client, src, reader):
    frame = 26864 / 8
    polled(src, reader, rounds=1)
    reader.advance(1.0, bytes=[round(frame), round(frame * 0.35), round(frame * 0.7), round(frame * 0.95), 0, 10],
                   drops=[0, 0, 3, 0, 0, 0])
    reader.links[1]["backlog_bytes"] = 3358
    src.poll_once()
    worst = client.get("/api/links?sort=worst&active=false").get_json()["links"]
    # a backlog or drops first (lowest share first), then the other busy links, idle last
    assert [(r["port"], r["direction"]) for r in worst][:3] == [(5000, "source"), (5001, "dest"), (5002, "source")]
    assert worst[-1]["state"] == "idle"
    starved = client.get("/api/links?state=starved").get_json()
    assert starved["matched"] == 1 and starved["links"][0]["state"] == "starved"
    assert client.get("/api/links?state=dropping").get_json()["matched"] == 1
    bucket = client.get("/api/links?share=0.9-1.0").get_json()["links"]
    assert [round(r["rate_share"], 2) for r in bucket] == [0.95]
    assert [r["rate_share"] for r in client.get("/api/links?share=1-").get_json()["links"]] == [1.0]
    assert_error(client.get("/api/links?state=sleepy"), 400, "state: 'sleepy' is not a link state")
    assert_error(client.get("/api/links?share=0.5"), 400, "share: '0.5' is not a range of rate shares")


def test_stream_limit_and_bad_target(reader, control):
    app, src = make_app(reader, control, STREAM_LIMIT=1)
    src.poll_once()
    c = app.test_client()
    first = c.get("/api/stream", buffered=False)
    assert_error(c.get("/api/stream", buffered=False), 503, "streams: 1 already open")
    first.close()
    assert_error(c.get("/api/stream?interface=wlan0"), 404, "interface: 'wlan0'")


def test_stream_ends_when_the_source_stops(app_src, reader):
    app, src = app_src
    src.poll_once()
    resp = app.test_client().get("/api/stream", buffered=False)
    chunks = list(__import__("itertools").islice(resp.response, 3))
    src.stop()
    rest = list(resp.response)  # the generator returns instead of waiting
    assert len(chunks) == 3 and rest == []
    resp.close()


METRIC_LINE = re.compile(r'^[a-z_]+(\{([a-z_]+="[^"\\]*(\\.[^"\\]*)*",?)*\})? -?[0-9.e+]+$')


def test_metrics(client, src, reader):
    polled(src, reader, bytes=[100, 200, 0, 0, 0, 0], drops=[0, 1, 0, 0, 0, 0])
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = resp.get_data(as_text=True)
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or METRIC_LINE.match(line), line
    cohort = 'cohort="main",profile="modem-28k8"'
    assert ('ratelimit_link_bytes_total{interface="eth0",netns="",host="198.18.0.2",port="5000",'
            f'direction="dest",{cohort}}} 200') in text
    assert ('ratelimit_link_drops_total{interface="eth0",netns="",host="198.18.0.2",port="5000",direction="source",'
            f'{cohort}}} 2') in text
    assert 'ratelimit_bytes_total{interface="eth0",netns="",direction="source"} 400' in text
    assert ('ratelimit_link_rate_bps{interface="eth0",netns="",host="198.18.0.2",port="5000",direction="dest",'
            f'{cohort}}} 28800') in text
    assert 'ratelimit_stats_up{interface="eth0",netns=""} 1' in text
    assert "# TYPE ratelimit_link_bytes_total counter" in text
    assert ('ratelimit_applied{interface="eth0",netns="",profile="modem-28k8",mode="shape",direction="both",'
            'per="port",link="ppp-vj"} 1') in text
    assert 'ratelimit_queue_bytes{interface="eth0",netns="",direction="dest"} 16384' in text
    assert 'ratelimit_burst_bytes{interface="eth0",netns="",direction="source"} 4' in text
    assert 'ratelimit_frame_rate_bps{interface="eth0",netns="",direction="dest"} 26864' in text
    short = client.get("/metrics?links=false").get_data(as_text=True)
    assert "ratelimit_link_bytes" not in short and "ratelimit_bytes_total" in short
    assert 'ratelimit_links_state{interface="eth0",netns="",direction="dest",state="busy"} 1' in short
    assert 'ratelimit_links_state{interface="eth0",netns="",direction="source",state="idle"} 2' in short
    assert 'ratelimit_link_rate_share{interface="eth0",netns="",direction="dest",quantile="0.5"}' in short
    assert 'ratelimit_links_rate_share_bucket{interface="eth0",netns="",direction="source",le="+Inf"} 1' in short
    assert_error(client.get("/metrics?links=perhaps"), 400, "links: 'perhaps' is not auto or a boolean")


def test_metrics_leave_per_link_series_out_above_the_auto_limit(control):
    from ratelimit.webui.metrics import AUTO_LINK_LIMIT
    reader = FakeReader(n=AUTO_LINK_LIMIT + 2)
    app, src = make_app(reader, control)
    polled(src, reader, bytes=[10] * (AUTO_LINK_LIMIT + 2))
    c = app.test_client()
    text = c.get("/metrics").get_data(as_text=True)
    assert "ratelimit_link_bytes_total" not in text and "ratelimit_link_rate_bps" not in text
    assert f'ratelimit_links{{interface="eth0",netns=""}} {AUTO_LINK_LIMIT + 2}' in text
    assert 'ratelimit_bytes_total{interface="eth0",netns="",direction="dest"}' in text
    forced = c.get("/metrics?links=true").get_data(as_text=True)
    assert forced.count("ratelimit_link_bytes_total{") == AUTO_LINK_LIMIT + 2
    # the cohort's series stay, whatever the link count: one cohort, so its sums are the direction's
    for direction in ("dest", "source"):
        total = re.search(rf'^ratelimit_bytes_total{{interface="eth0",netns="",direction="{direction}"}} (\d+)$', text,
                          re.M)
        cohort = re.search(rf'^ratelimit_cohort_bytes_total{{interface="eth0",netns="",cohort="main",'
                           rf'profile="modem-28k8",direction="{direction}"}} (\d+)$', text, re.M)
        links = re.search(rf'^ratelimit_cohort_links{{interface="eth0",netns="",cohort="main",'
                          rf'profile="modem-28k8",direction="{direction}"}} (\d+)$', text, re.M)
        assert total and cohort and cohort.group(1) == total.group(1), direction
        assert links and int(links.group(1)) > 0
    assert sum(int(m) for m in re.findall(r'^ratelimit_cohort_links\{.*\} (\d+)$', text, re.M)) == AUTO_LINK_LIMIT + 2
    assert sum(int(m) for m in re.findall(r'^ratelimit_cohort_bytes_total\{.*\} (\d+)$', text, re.M)) == \
        sum(int(m) for m in re.findall(r'^ratelimit_bytes_total\{.*\} (\d+)$', text, re.M)) > 0


def test_per_host_links_show_port_all(reader, control):
    """A per-host link carries all its host's ports: null in JSON, ``all`` in labels and queries."""
    reader.applied = dict(reader.applied, per="host")
    reader.links = [reader.link(d, "198.18.0.2", None, "eth0") for d in ("dest", "source")]
    app, src = make_app(reader, control)
    src.poll_once()
    client = app.test_client()
    links = client.get("/api/links?active=false").get_json()["links"]
    assert [(r["direction"], r["port"]) for r in links] == [("dest", None), ("source", None)]
    text = client.get("/metrics").get_data(as_text=True)
    assert ('ratelimit_link_rate_bps{interface="eth0",netns="",host="198.18.0.2",port="all",direction="dest",'
            'cohort="main",profile="modem-28k8"} 28800') in text
    hist = client.get("/api/links/history?host=198.18.0.2&port=all&direction=dest")
    assert hist.status_code == 200 and hist.get_json()["port"] is None
    assert_error(client.get("/api/links/history?host=198.18.0.2&port=5000&direction=dest"), 404,
                 "link: '198.18.0.2:5000 dest' is not a link")


def test_metrics_escape_label_values(reader, control):
    reader.applied = dict(reader.applied, profile='we"ird\\name')
    app, src = make_app(reader, control)
    src.poll_once()
    text = app.test_client().get("/metrics").get_data(as_text=True)
    assert 'profile="we\\"ird\\\\name"' in text


# ---------------------------------------------------------------- control: refusals change nothing

APPLY = {"interface": "eth0", "hosts": "198.18.0.2", "ports": "5000-5003", "mode": "shape",
         "direction": "dest", "rate": "1mbit"}


def post(client, url, body, headers=AUTH, **kw):
    return client.post(url, data=json.dumps(body), headers=headers, content_type=kw.pop("content_type", "application/json"), **kw)


@pytest.mark.parametrize("url", ["/api/apply", "/api/clean"])
def test_changes_need_the_token(client, control, url):
    assert_error(post(client, url, APPLY if url.endswith("apply") else {"interface": "eth0"}, headers={}),
                 401, "X-Ratelimit-Token: missing")
    assert_error(post(client, url, {"interface": "eth0"}, headers={"X-Ratelimit-Token": "wrong"}),
                 403, "X-Ratelimit-Token: wrong token")
    assert control.calls == []


@pytest.mark.parametrize("headers, status, fragment", [
    ({"Origin": "http://evil.example"}, 403, "Origin: 'http://evil.example' is not this dashboard"),
    ({"Origin": "null"}, 403, "Origin: 'null'"),
    ({"Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site: 'cross-site'"),
    ({"Host": "attacker.example"}, 400, "Host: 'attacker.example' is not a name of this dashboard"),
])
def test_cross_site_changes_are_refused(client, control, headers, status, fragment):
    assert_error(post(client, "/api/apply", APPLY, headers=dict(AUTH, **headers)), status, fragment)
    assert control.calls == []


def test_same_origin_change_is_accepted(client, control):
    resp = post(client, "/api/apply", APPLY, headers=dict(AUTH, Origin="http://localhost", **{"Sec-Fetch-Site": "same-origin"}))
    assert resp.status_code == 200, resp.get_json()


def test_changes_must_be_json(client, control):
    assert_error(post(client, "/api/apply", APPLY, content_type="application/x-www-form-urlencoded"), 415,
                 "Content-Type: 'application/x-www-form-urlencoded' is not allowed (allowed: application/json)")
    assert_error(client.post("/api/apply", data="{not json", headers=AUTH, content_type="application/json"), 400,
                 "body: not a JSON object")
    assert_error(post(client, "/api/apply", [1, 2]), 400, "body: a JSON list is not allowed")
    assert_error(client.post("/api/apply", data="x" * 70000, headers=AUTH, content_type="application/json"),
                 413, "too large")
    assert control.calls == []


def test_read_only_refuses_changes(reader, control):
    app, _ = make_app(reader, control, READ_ONLY=True)
    c = app.test_client()
    assert_error(post(c, "/api/apply", APPLY), 403, "--read-only")
    assert_error(post(c, "/api/clean", {"interface": "eth0"}), 403, "--read-only")
    assert control.calls == []


@pytest.mark.parametrize("change, status, fragment", [
    ({"colour": "red"}, 400, "field: 'colour' is not a field here (allowed: interface, netns, profile"),
    ({"interface": "eth7"}, 404, "interface: 'eth7' is not watched by this dashboard (watched: eth0)"),
    ({"rate": "fast"}, 400, "--rate: 'fast' is not a rate"),
    ({"rate": True}, 400, "rate: True is not a string or number"),
    ({"rate": {"x": 1}}, 400, "rate: {'x': 1} is not a string or number"),
    ({"ports": "70000"}, 400, "--ports: 70000 is not a port (1-65535)"),
    ({"ports": ""}, 400, "--ports: none given"),
    ({"hosts": [1, 2]}, 400, "hosts: [1, 2] is not a list of names or addresses"),
    ({"mode": "teleport"}, 400, "--mode: teleport is not a mode (police, shape)"),
    ({"direction": "sideways"}, 400, "--direction: sideways is not a direction"),
    ({"profile": "no-such-profile"}, 400, "--profile: 'no-such-profile' is not a profile"),
    # a profile is a name, never a file on the router (the API runs as root)
    ({"profile": "/etc/ratelimit/x.toml"}, 400, "profile: '/etc/ratelimit/x.toml' is not a profile name "
                                                "(allowed: a name 'ratelimit profiles' lists; no paths or .toml files)"),
    ({"profile": "tests/cases/profiles/bad-field.toml"}, 400, "profile: 'tests/cases/profiles/bad-field.toml' is not "
                                                              "a profile name"),
    ({"profile": "modem-28k8.toml"}, 400, "profile: 'modem-28k8.toml' is not a profile name"),
    ({"profile": "../profiles/modem-28k8"}, 400, "profile: '../profiles/modem-28k8' is not a profile name"),
    ({"profile": ".hidden"}, 400, "profile: '.hidden' is not a profile name"),
    ({"delay": "5"}, 400, "--delay: '5' is not a time with a unit"),
    ({"loss": "150%"}, 400, "--loss: '150%' is not a percentage"),
    ({"loss": {"model": "gemodel", "p": "2"}}, 400, "--loss: gemodel needs p and r (r is missing"),
    ({"loss": {"model": "gemodel", "p": "1%", "r": "101%"}}, 400, "--loss: r='101%' is not a percentage from 0%"),
    ({"burst": 0}, 400, "--burst: 0 is out of range (a whole number 1-100000"),
    ({"force": "maybe"}, 400, "force: 'maybe' is not a boolean"),
    ({"per": "street"}, 400, "--per: street is not a link granularity (port, host, shared)"),
    ({"link": "carrier-pigeon"}, 400, "--link: 'carrier-pigeon' is not a link layer"),
    ({"queue": "deep"}, 400, "--queue: 'deep' is not a queue"),
    ({"queues": "many"}, 400, "--queues: 'many' is not"),
    # a trace or schedule is a shipped one by name, never a file on the router
    ({"trace_down": "/etc/passwd"}, 400, "trace_down: '/etc/passwd' is not a shipped trace (allowed: 3g-walk.down, "
                                         "3g-walk.up, lte-drive.down, lte-drive.up, tunnel.down, tunnel.up)"),
    ({"schedule": "../tests/cases/traces/square.toml"}, 400, "schedule: '../tests/cases/traces/square.toml' is not "
                                                             "a shipped schedule (allowed: leo-starlink.toml, train.toml)"),
    ({"scenario": '[cohort.a]\ndescription = "phones"\nhosts = "198.18.0.2"\nprofile = "3g"\ntrace_down = "/etc/passwd"\n',
      "hosts": None,
      "ports": None}, 400, "scenario: [cohort.a] trace_down: '/etc/passwd' is not a shipped trace"),
    ({"scenario": '[cell.t]\ndescription = "a tower"\ntrace_down = "/etc/passwd"\n[cohort.a]\ndescription = "phones"'
                  '\nhosts = "198.18.0.2"\nprofile = "3g"\ncell = "t"\n', "hosts": None, "ports": None},
     400, "scenario: [cell.t] trace_down: '/etc/passwd' is not a shipped trace"),
    ({"trace_scale": "0.5"}, 400, "--trace-scale: there is no trace or schedule for it to apply to"),
])
def test_apply_bad_input(client, control, change, status, fragment):
    assert_error(post(client, "/api/apply", dict(APPLY, **change)), status, fragment)
    assert control.calls == []


def test_apply(client, control, src, reader):
    resp = post(client, "/api/apply", dict(APPLY, profile="modem-28k8", hosts=["198.18.0.2", "198.18.0.3"], force=True))
    assert resp.status_code == 200, resp.get_json()
    data = resp.get_json()
    assert data["interface"] == "eth0" and data["netns"] is None and data["operations"] > 0 and data["in_place"] is False
    assert data["how"] == "built"
    assert data["applied"]["profile"] == "modem-28k8" and data["applied"]["flows"] == 8
    assert data["applied"]["down"]["rate_bps"] == 1_000_000
    ((what, req, force),) = control.calls
    assert what == "apply" and force is True and req.mode == "shape" and req.only.ports == ((5000, 5003),)


def test_apply_takes_for_and_blackhole(client, control):
    resp = post(client, "/api/apply", dict(APPLY, per="host", rate="1mbit", mode="shape", blackhole=True, **{"for": "10m"}))
    assert resp.status_code == 200, resp.get_json()
    ((_, req, _),) = control.calls
    assert req.lasting_ms == 600_000 and req.cohorts[0].blackhole
    assert_error(post(client, "/api/apply", dict(APPLY, **{"for": "0"})), 400, "--for: '0' is not a duration")
    assert_error(post(client, "/api/apply", dict(APPLY, blackhole="maybe")), 400, "blackhole: 'maybe' is not a boolean")


def test_apply_takes_reject(client, control):
    resp = post(client, "/api/apply", dict(APPLY, per="host", rate="1mbit", reject=True))
    assert resp.status_code == 200, resp.get_json()
    ((_, req, _),) = control.calls
    assert req.cohorts[0].reject and not req.cohorts[0].blackhole
    assert_error(post(client, "/api/apply", dict(APPLY, reject="maybe")), 400, "reject: 'maybe' is not a boolean")


def test_apply_takes_a_burst_loss_model_as_an_object_or_as_text(client, control):
    for loss in ({"model": "gemodel", "p": "1%", "r": "25%"}, "gemodel p=1% r=25%"):
        resp = post(client, "/api/apply", dict(APPLY, rate="1mbit", loss=loss))
        assert resp.status_code == 200, resp.get_json()
        assert resp.get_json()["applied"]["down"]["loss_model"]["burst_packets"] == 4
    assert {req.only.down.loss_model.text() for _, req, _ in control.calls} == {"gemodel p=1% r=25% h=0% k=100%"}


def test_apply_takes_a_scenario_whose_cell_follows_a_shipped_trace(client, control):
    text = ('[cell.t]\ndescription = "a tower"\ntrace_down = "lte-drive.down"\n[cohort.a]\ndescription = "phones"\n'
            'hosts = "198.18.0.2-198.18.0.5"\nprofile = "3g"\ncell = "t"\n')
    resp = post(client, "/api/apply", dict(APPLY, scenario=text, hosts=None, ports=None))
    assert resp.status_code == 200, resp.get_json()
    ((_, req, _),) = control.calls
    assert req.cohorts[0].cell.trace.down.name == "lte-drive.down" and req.cohorts[0].cell.trace.up is None


def test_apply_takes_every_option_the_command_line_does(client, control):
    """The API's fields are the request's options (``service.request.Options``): the tx queues
    and the trace options too, a shipped trace or schedule by its name."""
    from ratelimit.cli.main import build_parser
    from ratelimit.service.request import FIELDS
    from ratelimit.webui.api import APPLY_FIELDS
    dests = {a.dest for a in build_parser()._actions}
    assert set(FIELDS) - {"device_queues"} <= dests and set(APPLY_FIELDS) == set(FIELDS) - {"device_queues"} | {"force"}
    resp = post(client, "/api/apply", dict(APPLY, per="host", schedule="train", rate="1mbit", queues="1",
                                           phase="same"))
    assert resp.status_code == 200, resp.get_json()
    ((_, req, _),) = control.calls
    trace = req.only.trace
    assert trace.down.kind == "schedule" and trace.down.name == "train.toml" and trace.phase.kind == "same"
    resp = post(client, "/api/apply", dict(APPLY, per="host", trace_down="lte-drive.down", trace_scale="0.01"))
    assert resp.status_code == 200, resp.get_json()
    assert control.calls[-1][1].only.trace.down.name == "lte-drive.down" and control.calls[-1][1].only.trace.scale == 0.01


def test_apply_per_host_link_layer_and_queue(client, control):
    resp = post(client, "/api/apply", dict(APPLY, per="host", link="atm", queue="20p", burst="3kb"))
    assert resp.status_code == 200, resp.get_json()
    applied = resp.get_json()["applied"]
    assert applied["per"] == "host" and applied["link"]["layer"] == "atm" and applied["links"] == 1
    assert applied["down"]["burst_bytes"] == 3072 and applied["down"]["queue"] == "20p"


@pytest.mark.parametrize("err, status", [
    (ConflictError("--interface: eth0 has a root qdisc ratelimit did not install (tbf 1:); use --force to replace it"), 409),
    (PermissionDenied("changing traffic control needs root (run with sudo)"), 503),
    (ApplyError("adding filter 1:0:1 failed (Invalid argument); eth0 is back as it was"), 500),
])
def test_apply_failures_are_one_line(client, control, err, status):
    control.fail = err
    assert assert_error(post(client, "/api/apply", APPLY), status) == str(err)


def test_unexpected_errors_show_no_traceback(client, control):
    control.fail = RuntimeError("secret internals\nTraceback")
    assert assert_error(post(client, "/api/apply", APPLY), 500) == "internal error (see the server log)"


def test_clean(client, control):
    resp = post(client, "/api/clean", {"interface": "eth0"})
    assert resp.get_json() == {"interface": "eth0", "netns": None, "cleaned": True}
    assert control.calls == [("clean", "eth0", None, False)]
    assert_error(post(client, "/api/clean", {"interface": "eth0", "hosts": "x"}), 400, "field: 'hosts'")
    assert_error(post(client, "/api/clean", {"interface": "eth3"}), 404, "interface: 'eth3'")
    assert len(control.calls) == 1


def test_wrong_method_and_unknown_route(client):
    assert_error(client.get("/api/apply"), 405, "method: GET is not allowed here (allowed: OPTIONS, POST)")
    assert_error(client.get("/api/nothing"), 404, "no such page")


# ---------------------------------------------------------------- ratelimit web (cli)


def test_web_help(capsys):
    assert web_main(["--help"]) == 0
    assert "--read-only" in capsys.readouterr().out


@pytest.mark.parametrize("argv, fragment", [
    (["--listen", "nowhere"], "--listen: 'nowhere' is not HOST:PORT"),
    (["--listen", "127.0.0.1:99999"], "--listen: '127.0.0.1:99999' has no valid port"),
    (["--interval", "0"], "--interval: '0' is out of range (0.2-60 seconds)"),
    (["--history", "5"], "--history: '5' is out of range (10-3600 seconds)"),
    (["--token", "short"], "--token: too short"),
    (["--interface", "bad name"], "--interface: 'bad name'"),
    (["--interface", "router/a:b"], "--interface: 'a:b' is not an interface name"),
    (["--interface", "../x/eth0"], "--netns: '../x' is not a namespace name"),
    # beyond loopback only with the names it is reached by (the Host check stays on)
    (["--listen", "0.0.0.0:8080"], "--listen: 0.0.0.0:8080 serves beyond this machine; add --allow-host NAME"),
    (["--listen", "[::]:8080"], "--listen: [::]:8080 serves beyond this machine; add --allow-host NAME"),
    (["--listen", "198.18.0.1:8080"], "--listen: 198.18.0.1:8080 serves beyond this machine"),
    (["--colour"], "unrecognized arguments: --colour"),
])
def test_web_bad_arguments(argv, fragment, capsys):
    assert web_main(argv, serve=lambda *a: pytest.fail("must not serve")) == 2
    err = capsys.readouterr().err
    assert err.startswith("ratelimit web: ") and fragment in err and err.count("\n") == 1


def test_parse_listen():
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("9000") == ("127.0.0.1", 9000)


def test_web_main_prints_token_and_serves(capsys):
    seen = {}

    def serve(app, host, port, ready):
        seen.update(app=app, host=host, port=port)
        ready(host, 8123)

    argv = ["--interface", "eth0,router/eth1", "--listen", "127.0.0.1:0", "--interval", "5"]
    assert web_main(argv, serve=serve) == 0
    out = capsys.readouterr().out
    app = seen["app"]
    token = app.config["TOKEN"]
    assert f"open http://127.0.0.1:8123/#token={token}" in out and "watching eth0, router/eth1" in out
    assert app.config["STATS_SOURCE"].targets() == [(None, "eth0"), ("router", "eth1")]
    assert app.config["ALLOWED_HOSTS"] == ["127.0.0.1", "localhost", "::1"]
    assert app.config["STATS_SOURCE"].stopped  # stopped when the server returned


def test_web_main_configured_token_is_not_printed(capsys, monkeypatch):
    monkeypatch.setenv("RATELIMIT_WEB_TOKEN", "configured-token-123456")
    seen = {}
    assert web_main(["--if", "eth0", "--listen", "0.0.0.0:0", "--read-only", "--allow-host", "router.lab"],
                    serve=lambda app, h, p, ready: (seen.update(app=app), ready(h, 9))) == 0
    out = capsys.readouterr().out
    assert "configured-token-123456" not in out and "(read-only)" in out
    assert seen["app"].config["READ_ONLY"]
    assert seen["app"].config["ALLOWED_HOSTS"] == ["127.0.0.1", "localhost", "::1", "router.lab"]


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "127.0.0.2:0", "localhost:0", "[::1]:0", "0"])
def test_web_main_serves_loopback_without_allow_host(listen):
    seen = {}
    assert web_main(["--if", "eth0", "--listen", listen, "--read-only"],
                    serve=lambda app, h, p, ready: seen.update(app=app)) == 0
    assert "localhost" in seen["app"].config["ALLOWED_HOSTS"]


def test_web_main_beyond_loopback_keeps_the_host_check(reader, control):
    from ratelimit.webui.cli import _allowed_hosts
    allowed = _allowed_hosts("0.0.0.0", ["router.lab"])
    app, _ = make_app(reader, control, ALLOWED_HOSTS=allowed)
    c = app.test_client()
    assert c.get("/api/targets", headers={"Host": "router.lab:8080"}).status_code == 200
    assert_error(c.get("/api/targets", headers={"Host": "rebound.example:8080"}), 400,
                 "Host: 'rebound.example:8080' is not a name of this dashboard")


def test_apply_and_clean_wait_for_the_lock_with_a_timeout(reader, control):
    app, _ = make_app(reader, control, LOCK_TIMEOUT=2.5)
    c = app.test_client()
    assert post(c, "/api/apply", APPLY).status_code == 200 and control.lock_timeout == 2.5
    assert post(c, "/api/clean", {"interface": "eth0"}).status_code == 200 and control.lock_timeout == 2.5


# ---------------------------------------------------------------- vendored chart library


def test_vendor_build_copies_the_pinned_files(tmp_path):
    from ratelimit.webui import vendor
    pkg = tmp_path / "webui"
    (pkg / "node_modules/uplot/dist").mkdir(parents=True)
    (pkg / "package-lock.json").write_text(json.dumps({"packages": {"node_modules/uplot": {"version": "1.6.32"}}}))
    (pkg / "node_modules/uplot/package.json").write_text(json.dumps({"version": "1.6.32"}))
    for name in ("dist/uPlot.iife.min.js", "dist/uPlot.min.css", "LICENSE"):
        (pkg / "node_modules/uplot" / name).write_text(name)
    out = vendor.build(pkg, pkg / "static/vendor")
    assert sorted(p.name for p in out) == ["uPlot.LICENSE", "uPlot.iife.min.js", "uPlot.min.css"]
    vendor.build(pkg, pkg / "static/vendor", check=True)
    (pkg / "node_modules/uplot/package.json").write_text(json.dumps({"version": "1.0.0"}))
    with pytest.raises(vendor.VendorError, match="pins 1.6.32"):
        vendor.build(pkg, pkg / "static/vendor")


def test_vendored_files_match_the_lock_when_built():
    from ratelimit.webui import vendor
    if not (vendor.HERE / "node_modules" / "uplot").is_dir():
        pytest.skip("webui/node_modules not installed (npm ci --prefix webui)")
    vendor.build(check=True)


# ---------------------------------------------------------------- real apply/clean in a namespace


@pytest.fixture
def veth_netns(netns, tmp_path, monkeypatch):
    """A throwaway namespace (conftest's ``netns``) holding a veth pair rlw-a <-> rlw-b."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    ns = netns("web")
    subprocess.run(["ip", "-n", ns, "link", "add", "rlw-a", "type", "veth", "peer", "name", "rlw-b"], check=True)
    for dev in ("rlw-a", "rlw-b"):
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    return ns


@pytest.mark.netns
def test_real_apply_and_clean_through_the_api(veth_netns):
    ns = veth_netns
    src = StatsSource([(ns, "rlw-a")])
    app = create_app({"STATS_SOURCE": src, "TOKEN": TOKEN})  # real control: ratelimit.service
    c = app.test_client()
    body = {"interface": "rlw-a", "netns": ns, "hosts": "198.18.0.2", "ports": "5000-5003", "mode": "shape",
            "direction": "dest", "rate": "1mbit"}
    assert_error(post(c, "/api/apply", body, headers={}), 401)
    assert readout.status("rlw-a", ns) is None  # the refused request changed nothing
    assert_error(post(c, "/api/apply", dict(body, rate="0bit")), 400, "--rate")
    assert readout.status("rlw-a", ns) is None
    resp = post(c, "/api/apply", body)
    assert resp.status_code == 200, resp.get_json()
    now = readout.status("rlw-a", ns)
    assert now["mode"] == "shape" and now["flows"] == 4 and now["down"]["rate_bps"] == 1_000_000
    src.poll_once()
    links = c.get(f"/api/links?interface=rlw-a&netns={ns}&active=0").get_json()
    assert links["total"] == 4 and {r["port"] for r in links["links"]} == {5000, 5001, 5002, 5003}
    assert post(c, "/api/clean", {"interface": "rlw-a", "netns": ns}).get_json()["cleaned"] is True
    assert readout.status("rlw-a", ns) is None


@pytest.mark.netns
def test_a_busy_interface_answers_409_instead_of_blocking(rlhd):
    """Another run holds the interface's lock: apply and clean give up after LOCK_TIMEOUT."""
    import time
    from ratelimit.state import records
    ns = rlhd()
    app = create_app({"STATS_SOURCE": StatsSource([(ns, "rlh0")]), "TOKEN": TOKEN, "LOCK_TIMEOUT": 0.3})
    c = app.test_client()
    body = {"interface": "rlh0", "netns": ns, "hosts": "198.18.0.2", "ports": "5000-5003", "mode": "shape",
            "direction": "dest", "rate": "1mbit"}
    with records.lock(ns, "rlh0"):
        for url, data in (("/api/apply", body), ("/api/clean", {"interface": "rlh0", "netns": ns})):
            started = time.monotonic()
            assert_error(post(c, url, data), 409, f"--interface: {ns}/rlh0 is busy: another ratelimit run is "
                                                  "changing it (waited 0.3 s); try again when it is done")
            assert 0.3 <= time.monotonic() - started < 5
        assert readout.status("rlh0", ns) is None
    assert post(c, "/api/apply", body).status_code == 200
    assert readout.status("rlh0", ns)["flows"] == 4


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_the_server_stops_cleanly_with_a_dashboard_open(signum):
    """A real ``ratelimit web`` stopped by a signal while an /api/stream response is open:
    exit 0 and nothing on stderr (waitress used to wait 5 s for the stream's thread, log it
    as still running, and sometimes a write to a closed socket as a traceback)."""
    import os
    import signal
    import socket
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "ratelimit", "web", "--if", "lo", "--listen", "127.0.0.1:0",
                             "--read-only", "--interval", "0.2"], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", line).group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            got = b""
            while b"event: tick" not in got:
                got += s.recv(4096)
            proc.send_signal(getattr(signal, signum))
            _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (0, "")


SCENARIO_TEXT = """
description = "two kinds of link"
[cohort.dialup]
description = "modems"
hosts = "198.18.0.2-198.18.0.3"
profile = "modem-28k8"
[cohort.office]
source = "an office on cable"
hosts = "198.18.0.10"
ports = "8000-8003"
per = "port"
profile = "cable"
"""


def test_apply_a_scenario_and_a_mix(client, control):
    resp = post(client, "/api/apply", {"interface": "eth0", "scenario": SCENARIO_TEXT})
    assert resp.status_code == 200, resp.get_json()
    applied = resp.get_json()["applied"]
    assert [c["name"] for c in applied["cohorts"]] == ["dialup", "office"] and applied["links"] == 12
    resp = post(client, "/api/apply", {"interface": "eth0", "hosts": "198.18.0.2-198.18.0.11",
                                       "mix": "modem-28k8:70%,isdn-64k:30%"})
    assert resp.status_code == 200, resp.get_json()
    assert [(c["name"], len(c["hosts"])) for c in resp.get_json()["applied"]["cohorts"]] == \
        [("modem-28k8", 7), ("isdn-64k", 3)]


@pytest.mark.parametrize("body,fragment", [
    ({"scenario": 5}, "scenario: int is not text"),
    ({"scenario": "[cohort"}, "scenario: is not TOML"),
    ({"scenario": SCENARIO_TEXT.replace('profile = "cable"', 'profile = "/etc/shadow"')},
     "scenario: [cohort.office] profile: '/etc/shadow' is not a profile name"),
    ({"scenario": SCENARIO_TEXT.replace('profile = "cable"', 'profile = "../../etc/passwd"')},
     "is not a profile name"),
    ({"scenario": SCENARIO_TEXT, "hosts": "198.18.0.2"}, "--hosts/--ports/--servers: a scenario names each cohort's hosts"),
    ({"scenario": SCENARIO_TEXT, "profile": "cable"}, "--profile: a scenario or a mix names each cohort's profile"),
    ({"scenario": SCENARIO_TEXT.replace('hosts = "198.18.0.10"', 'hosts = "198.18.0.3"')},
     "cohorts 'dialup' and 'office' both select 198.18.0.3"),
    ({"hosts": "198.18.0.2", "mix": "modem-28k8:1e309"}, "--mix modem-28k8: '1e309' is not a weight"),
    ({"hosts": "198.18.0.2", "mix": ["a"]}, "mix: ['a'] is not a string or number"),
])
def test_apply_a_bad_scenario_or_mix(client, control, body, fragment):
    assert_error(post(client, "/api/apply", {"interface": "eth0", **body}), 400, fragment)
    assert control.calls == []


def test_a_containers_target_is_watched_not_changed(reader, control):
    """The targets of ``ratelimit web --container`` are read, never applied to or cleaned from
    the page: a one-line 409 that names the container and the CLI, and nothing is called."""
    from ratelimit.webui.containers import Watch, owners
    w = Watch("podman container web", "podman", None, (1, 2), ("rl-ct-0123456789ab", "eth0"), (None, "veth1a2b"))
    targets = [w.server, w.user, (None, "eth0")]
    app, _src = make_app(reader, control, targets, CONTAINER_TARGETS=owners([w]))
    c = app.test_client()
    for target, use in ((w.server, "the server's links"), (w.user, "a server's or a user's links")):
        body = {"interface": target[1], "netns": target[0]}
        for path, extra in (("/api/apply", {"profile": "modem-28k8"}), ("/api/clean", {})):
            resp = post(c, path, {**body, **extra})
            assert_error(resp, 409, f"interface: '{target[1] if target[0] is None else target[0] + '/' + target[1]}'",
                         f"is podman container web's ({'its interface' if target[0] else 'its veth'}, {use})",
                         "ratelimit --container web")
    assert control.calls == []
    assert post(c, "/api/apply", dict(APPLY, profile="modem-28k8")).status_code == 200  # other targets are changed
