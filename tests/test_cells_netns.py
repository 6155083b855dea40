"""Cells on the host kernel (router_pair namespaces): users whose own links are capped share
one cell's capacity.  Paced UDP senders in the router keep every busy user's link backlogged;
each link's rate is read from its kernel counters over a window (``--stats``), against the
cell's model: user i gets min(its own cap, the max-min fair share of the cell)."""

import subprocess
import time

import pytest

from bench import blast
from bench.shaped_load import PACE
from ratelimit import service
from ratelimit.profiles import scenario
from ratelimit.service import readout

pytestmark = pytest.mark.netns

USERS = [f"198.18.1.{i}" for i in range(2, 12)]  # the client of router_pair and nine more
PAYLOAD_BYTES = 1000
FRAME_BYTES = PAYLOAD_BYTES + 8 + 20 + 14  # what a class counts of each: UDP, IPv4, Ethernet
WARM_S, WINDOW_S = 1.5, 3.0


def jain(xs) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def users_up(router: str, client: str) -> None:
    """The client holds every address of ``USERS``, and the router has resolved each one: no
    ARP through the links once the traffic starts."""
    for a in USERS[1:]:
        subprocess.run(["ip", "-n", client, "addr", "add", f"{a}/24", "dev", "c0"], check=True, capture_output=True)
    for a in USERS:
        subprocess.run(["ip", "netns", "exec", router, "ping", "-c", "1", "-W", "2", a], check=True,
                       capture_output=True)


def pace(router: str, address: str, offered_bps: float, seconds: float) -> subprocess.Popen:
    """A paced sender in the router: ``offered_bps`` of datagrams to ``address`` for ``seconds``."""
    sender = blast.compiled(PACE)
    assert sender, "pace.c needs a C compiler (apt-get install gcc)"
    return subprocess.Popen(["ip", "netns", "exec", router, sender, address, "9", "1", str(PAYLOAD_BYTES),
                             f"{offered_bps / (FRAME_BYTES * 8):.1f}", f"{seconds:g}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def backlog(router: str, client: str, busy: list[str], offered_bps: float, cell: str, rate: str = "4mbit",
            scenario_text: str | None = None) -> dict:
    """Apply ten per-host links of ``rate`` in ``cell`` on r0 (or the scenario
    ``scenario_text``), keep ``busy`` backlogged at ``offered_bps`` each, and read each
    link's delivered rate (bit/s, its frames) over a window."""
    users_up(router, client)
    if scenario_text is None:
        service.apply(service.make_request("r0", netns=router, hosts=",".join(USERS), per="host", rate=rate,
                                           mode="shape", direction="dest", cell=cell))
    else:
        service.apply(service.make_request("r0", netns=router, scenario=scenario.parse(scenario_text),
                                           direction="dest"))
    senders = [pace(router, a, offered_bps, WARM_S + WINDOW_S + 1) for a in busy]
    try:
        time.sleep(WARM_S)
        t0, before = time.monotonic(), _bytes(router)
        time.sleep(WINDOW_S)
        t1, after = time.monotonic(), _bytes(router)
    finally:
        for p in senders:
            p.communicate(timeout=30)
    return {h: (after[h] - before.get(h, 0)) * 8 / (t1 - t0) for h in after}


def _bytes(router: str) -> dict:
    return {r["host"]: r["bytes"] for r in readout.statistics("r0", router)["links"] if r["direction"] == "dest"}


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_a_full_cell_splits_its_capacity_fairly_below_each_users_cap(router_pair):
    """Ten backlogged users, each capped at 4 Mbit/s, in a 20 Mbit/s cell: each gets the
    fair share, 2 Mbit/s, within 3% (Jain's index at least 0.99), and the cell delivers at
    least 98% of its capacity."""
    router, client = router_pair
    rates = backlog(router, client, USERS, 6e6, "20mbit")
    got = [rates[h] for h in USERS]
    print({h: round(r / 1e6, 3) for h, r in rates.items()})
    assert all(abs(r / 2e6 - 1) <= 0.03 for r in got), got
    assert jain(got) >= 0.99
    assert 0.98 <= sum(got) / 20e6 <= 1.02


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_two_busy_users_in_a_cell_with_room_each_get_their_own_cap(router_pair):
    """Two backlogged users of the same ten in the 20 Mbit/s cell: each gets its own 4 Mbit/s
    cap within 2%; the idle ones nothing."""
    router, client = router_pair
    rates = backlog(router, client, USERS[:2], 6e6, "20mbit")
    print({h: round(r / 1e6, 3) for h, r in rates.items()})
    assert all(abs(rates[h] / 4e6 - 1) <= 0.02 for h in USERS[:2]), rates
    assert all(rates[h] < 20_000 for h in USERS[2:]), rates  # at most a stray frame or two


MIXED = """
[cell.tower]
description = "a 10 Mbit/s cell"
down = "10mbit"
[cohort.capped]
description = "three users capped at 1 Mbit/s"
hosts = "198.18.1.2-198.18.1.4"
rate = "1mbit"
cell = "tower"
[cohort.free]
description = "five users with no cap of their own below the cell's"
hosts = "198.18.1.5-198.18.1.9"
rate = "100mbit"
cell = "tower"
"""


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_capped_and_uncapped_users_share_a_cell_max_min_fairly(router_pair):
    """Two cohorts in one 10 Mbit/s cell, all eight users busy: the three capped at 1 Mbit/s
    get their 1 Mbit/s, the five uncapped share the other 7 (1.4 Mbit/s each), within 3%."""
    router, client = router_pair
    rates = backlog(router, client, USERS[:8], 6e6, "", scenario_text=MIXED)
    print({h: round(r / 1e6, 3) for h, r in rates.items()})
    assert all(abs(rates[h] / 1e6 - 1) <= 0.03 for h in USERS[:3]), rates
    assert all(abs(rates[h] / 1.4e6 - 1) <= 0.03 for h in USERS[3:8]), rates
    assert 0.98 <= sum(rates[h] for h in USERS[:8]) / 10e6 <= 1.02


def test_a_cell_is_refused_in_one_line_and_the_router_left_as_it_was(router_pair):
    router, _ = router_pair
    before = subprocess.run(["tc", "-n", router, "qdisc", "show"], capture_output=True, text=True).stdout
    for cell, message in (("fast", "--cell: 'fast' is not a rate"),
                          ("20mbit/", "--cell: '20mbit/' is not a cell's capacity (DOWN or DOWN/UP"),
                          ("", "--cell: '' is not a cell's capacity")):
        with pytest.raises(Exception, match="^" + message.replace("(", r"\(")):
            service.apply(service.make_request("r0", netns=router, hosts=USERS[0], per="host", rate="4mbit",
                                               mode="shape", cell=cell))
    with pytest.raises(Exception, match=r"^cell main: needs --mode shape"):
        service.apply(service.make_request("r0", netns=router, hosts=USERS[0], per="host", rate="4mbit",
                                           mode="police", cell="20mbit"))
    with pytest.raises(Exception, match=r"^cell main: 5,000 links, more than a cell holds \(4,096 each way"):
        service.apply(service.make_request("r0", netns=router, hosts="198.18.1.2", ports="10000-14999",
                                           rate="4mbit", mode="shape", cell="20mbit"))
    assert subprocess.run(["tc", "-n", router, "qdisc", "show"], capture_output=True, text=True).stdout == before


TWO = """
[cell.tower]
description = "a 20 Mbit/s cell"
down = "20mbit"
[cohort.phones]
description = "phones"
hosts = "198.18.1.2-198.18.1.{last}"
rate = "4mbit"
cell = "tower"
[cohort.office]
description = "an office on its own line, in no cell"
hosts = "198.18.1.50"
rate = "10mbit"
[cohort.laptops]
description = "laptops under the same tower"
hosts = "198.18.1.20-198.18.1.29"
rate = "8mbit"
cell = "tower"
"""


def test_a_cells_capacity_changes_in_place_and_a_grown_cell_switches_to_what_a_fresh_apply_builds(router_pair):
    """The cell's capacity changes in place (its users' classes and queues untouched); a
    cohort of the cell that grows moves the cell's whole group beside the old one, and the
    kernel then holds what a fresh apply of the grown scenario builds."""
    from tcdump import tc_dump
    router, _ = router_pair

    def req(last=11, down="20mbit"):
        text = TWO.format(last=last).replace('down = "20mbit"', f'down = "{down}"')
        return service.make_request("r0", netns=router, scenario=scenario.parse(text), direction="dest")
    service.apply(req())
    before = tc_dump(router, "r0")
    changed = service.apply(req(down="10mbit"))
    assert changed.how == "in place" and len(changed.changed) == 1
    after = tc_dump(router, "r0")
    assert [a for a in after if "rate 10Mbit" in a] and len(after) == len(before)
    grown = service.apply(req(last=15, down="10mbit"))
    assert grown.how == "make-before-break"
    switched = tc_dump(router, "r0")
    service.clean("r0", router)
    service.apply(grown.request)
    assert tc_dump(router, "r0") == switched


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_when_a_busy_user_arrives_the_others_shares_fall_to_the_new_fair_share_within_a_second(router_pair):
    """Nine backlogged users of 4 Mbit/s share a 20 Mbit/s cell (2.22 Mbit/s each); a tenth
    starts: read in windows of 100 ms, the nine are at the new share, 2 Mbit/s (within 5%
    over each window from then on), less than 1 s after it started."""
    router, client = router_pair
    users_up(router, client)
    service.apply(service.make_request("r0", netns=router, hosts=",".join(USERS), per="host", rate="4mbit",
                                       mode="shape", direction="dest", cell="20mbit"))
    senders = [pace(router, a, 6e6, 6) for a in USERS[:9]]
    samples = []
    try:
        time.sleep(1.5)
        arrived = None
        while len(samples) < 35:
            samples.append((time.monotonic(), _bytes(router)))
            if len(samples) == 10:
                arrived = time.monotonic()
                senders.append(pace(router, USERS[9], 6e6, 4))
            time.sleep(0.1)
    finally:
        for p in senders:
            p.communicate(timeout=30)
    windows = [(t1, {h: (b1[h] - b0[h]) * 8 / (t1 - t0) for h in USERS})
               for (t0, b0), (t1, b1) in zip(samples, samples[1:])]
    before = [sum(w[h] for h in USERS[:9]) / 9 for t, w in windows if t < arrived]
    after = [(t - arrived, sum(w[h] for h in USERS[:9]) / 9) for t, w in windows if t > arrived]
    print(f"before: {[round(x / 1e6, 3) for x in before]}; after: {[(round(t, 2), round(x / 1e6, 3)) for t, x in after]}")
    assert all(abs(x / (20e6 / 9) - 1) <= 0.05 for x in before[1:])
    settled = next(t for k, (t, _) in enumerate(after) if all(abs(x / 2e6 - 1) <= 0.05 for _, x in after[k:]))
    assert settled < 1.0, after


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_a_full_cell_read_out_by_the_api_the_dashboard_source_metrics_and_stats(router_pair):
    """The cell applied through the web API; while its ten users are backlogged the
    dashboard's source says the cell is full (delivered within 2% of 20 Mbit/s, ten busy
    users, Jain's index at least 0.99), /metrics has its capacity and what it delivers, and
    --stats --json sums its users' counters."""
    import json as json_
    from ratelimit.webui import create_app
    from ratelimit.webui.stats import StatsSource
    router, client = router_pair
    token = "cells-token-0123456789abcdef"
    src = StatsSource([(router, "r0")])
    app = create_app({"STATS_SOURCE": src, "TOKEN": token})
    api = app.test_client()
    users_up(router, client)
    body = {"interface": "r0", "netns": router, "hosts": ",".join(USERS), "per": "host", "rate": "4mbit",
            "mode": "shape", "direction": "dest", "cell": "20mbit"}
    resp = api.post("/api/apply", data=json_.dumps(body), headers={"X-Ratelimit-Token": token},
                    content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    senders = [pace(router, a, 6e6, 5) for a in USERS]
    try:
        time.sleep(1.5)
        src.poll_once()
        time.sleep(2.0)
        src.poll_once()
        cell = api.get(f"/api/status?interface=r0&netns={router}").get_json()["cells"]["main"]["dest"]
        metrics = api.get("/metrics").get_data(as_text=True)
    finally:
        for p in senders:
            p.communicate(timeout=30)
    print(cell)
    assert cell["capacity_bps"] == 20_000_000 and cell["users"] == cell["busy_users"] == 10
    assert abs(cell["utilisation"] - 1) <= 0.02 and cell["jain"] >= 0.99
    assert abs(cell["busy_bps"]["min"] / 2e6 - 1) <= 0.05 and abs(cell["busy_bps"]["max"] / 2e6 - 1) <= 0.05
    assert f'ratelimit_cell_capacity_bps{{interface="r0",netns="{router}",cell="main",direction="dest"}} 2e+07' \
        in metrics
    delivered = next(float(line.split()[-1]) for line in metrics.splitlines()
                     if line.startswith("ratelimit_cell_delivered_bps{"))
    assert abs(delivered / 20e6 - 1) <= 0.02
    stats = readout.statistics("r0", router)
    sums = stats["cells"]["main"]["dest"]
    assert sums["users"] == 10 and sums["bytes"] == sum(r["bytes"] for r in stats["links"] if r["direction"] == "dest")


WAVE = """
[cell.tower]
description = "a tower whose capacity follows a square wave, and goes dark"
schedule = "{schedule}"
[cohort.phones]
description = "phones of 4 Mbit/s"
hosts = "198.18.1.2-198.18.1.11"
rate = "4mbit"
cell = "tower"
"""
WAVE_S = (12e6, 6e6, 12e6, 0.0)  # cell-wave.toml's seconds


def wave_bits(t0: float, t1: float) -> float:
    """What cell-wave.toml's capacity carries between the plan's times ``t0`` and ``t1`` (s)."""
    bits, t = 0.0, t0
    while t < t1:
        edge = min(t1, int(t) + 1.0)
        bits += WAVE_S[int(t) % len(WAVE_S)] * (edge - t)
        t = edge
    return bits


@pytest.mark.alone_on_host  # paced senders on the machine's CPUs; rates read from the kernel's counters
def test_a_traced_cell_delivers_its_schedule_each_second_and_its_users_share_each_window(router_pair, tmp_path,
                                                                                       monkeypatch):
    """Ten backlogged users of 4 Mbit/s under a cell whose capacity follows a square wave
    (12 and 6 Mbit/s) and goes dark for a second in four: read each second of the schedule
    from the kernel's counters, the cell delivers the schedule's bits within 2% (or one frame),
    in all within 1%, nothing while dark, and its users share each second fairly (Jain's
    index at least 0.99)."""
    from pathlib import Path
    from ratelimit.driver import follow
    from ratelimit.kernel.counters import FlowTable
    from ratelimit.kernel.readback import Reader
    from ratelimit.plan.compile import link_flows
    from ratelimit.state import records
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    router, client = router_pair
    users_up(router, client)
    schedule = Path(__file__).resolve().parent / "cases" / "traces" / "cell-wave.toml"
    try:
        plan = service.apply(service.make_request("r0", netns=router, direction="dest",
                                                  scenario=scenario.parse(WAVE.format(schedule=schedule))))
        start_s = records.load(router, "r0").request.traced_start_ms / 1000
        first, seconds = int(time.time() - start_s) + 2, 12  # whole seconds of the schedule, after a warm-up
        senders = [pace(router, a, 6e6, first + seconds + 2 - (time.time() - start_s)) for a in USERS]
        readings = []
        # the users' classes read in one netlink dump (well under a millisecond), timed to its middle
        table = FlowTable.of_classes((f.dev, f.classid) for f in link_flows(plan.request))
        hosts = [str(f.host) for f in link_flows(plan.request)]
        try:
            with Reader(router) as reader:
                for n in range(first, first + seconds + 1):
                    time.sleep(max(0.0, start_s + n - time.time()))
                    t0 = time.time()
                    counts = reader.counters(table)["bytes"]
                    readings.append(((t0 + time.time()) / 2 - start_s, dict(zip(hosts, counts))))
        finally:
            for p in senders:
                p.communicate(timeout=30)
        status = follow.read_status(router, "r0")
    finally:
        follow.stop(router, "r0")
    stats = readout.statistics("r0", router)  # --stats: the cell's capacity in the step of the clock now
    sums = stats["cells"]["tower"]["dest"]
    assert sums["capacity_bps"] == 7_500_000 and sums["users"] == 10  # its mean, and its users
    assert sums["trace_bps"] == WAVE_S[int(stats["time"] - start_s) % len(WAVE_S)], sums
    from ratelimit.cli.listing import render_table
    assert "cell tower dest: 7500kbit (its trace's mean; now " in render_table(stats, counters=True)
    assert status["state"] == "following" and status["cells"] == 1, status
    rows, got_all, want_all = [], 0.0, 0.0
    for (t0, b0), (t1, b1) in zip(readings, readings[1:]):
        got = {h: (b1[h] - b0[h]) * 8 for h in USERS}
        want = wave_bits(t0, t1)
        total = sum(got.values())
        got_all, want_all = got_all + total, want_all + want
        rows.append((round(t0, 3), round(want / 1e6, 3), round(total / 1e6, 3),
                     round(jain(list(got.values())), 4) if total else None))
    print("(plan time s, model Mbit, delivered Mbit, Jain):", rows)
    frame = FRAME_BYTES * 8 / 1e6
    for t0, want, total, fair in rows:
        if WAVE_S[round(t0) % len(WAVE_S)]:
            assert abs(total - want) <= max(0.02 * want, frame), rows
            assert fair >= 0.99, rows
        else:  # dark: what its edges' milliseconds carry, the frame its gate lets out as it shuts, and one more
            assert abs(total - want) <= 2 * frame, rows  # (a frame read on the window's other side)
    assert abs(got_all / want_all - 1) <= 0.01, rows
