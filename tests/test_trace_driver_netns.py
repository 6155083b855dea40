"""The trace driver against the host kernel (namespaces ``rltr-<pid>-<n>-*``, removed even when a
test fails; traffic in 198.18.70.0/24 and 198.18.71.0/24 only): a square wave on 1,000 links
with paced UDP senders, an outage in the middle of a TCP download, a driver killed and
started again, and a plan that moves to other handles while the driver follows it.

Each test applies with ``service.apply``, which starts the driver as a process of its own
(``ratelimit follow``), as it does for a user."""

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import tracefacts, traceload
from bench.common import established, listening, wait_until
from ratelimit import service
from ratelimit.driver import follow
from ratelimit.driver.steps import traced_links
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.ops import tc_handle
from ratelimit.profiles import traced
from ratelimit.service import readout
from ratelimit.state import records

pytestmark = pytest.mark.netns

CASES = Path(__file__).resolve().parent / "cases" / "traces"
_counter = itertools.count(1)
# the outage test's warm-up schedule: the first step's rate until ``outage.toml`` replaces it
WARM = """description = "2 Mbit/s until the test's schedule takes over (tests)"
loop = false

[[step]]
duration = "3600s"
down = { rate = "2mbit" }
up = { rate = "2mbit" }
"""
# the outage test's run from the download's start, and the most its second apply may take
APPLY_S = 5.0
RUN_S = 10.0 + APPLY_S


@pytest.fixture
def tag(tmp_path, monkeypatch):
    """A tag for this test's namespaces, and a private state directory; the namespaces and
    the driver go at the end, whatever happened."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    name = f"{os.getpid()}-{next(_counter)}"
    yield name
    ns = traceload.names(name)
    try:
        follow.stop(ns["rtr"], traceload.DEV)
    finally:
        traceload.cleanup(name)


def request(ns, schedule, links=1, **kw):
    args = dict(hosts=traceload.CLIENT, ports=f"{traceload.PORT0}-{traceload.PORT0 + links - 1}", direction="dest",
                schedule=str(CASES / schedule), phase="same")
    args.update(kw)
    return service.make_request(traceload.DEV, netns=ns["rtr"], **args)


def status_when(ns, ready, timeout_s=60.0) -> dict:
    """The driver's status once ``ready(status)`` holds (generous: a driver's start is a
    Python process's, seconds on a slow machine)."""
    def now():
        st = follow.read_status(ns["rtr"], traceload.DEV)
        return st if st and ready(st) else None
    return wait_until(now, timeout_s, "the driver's status", every_s=0.01,
                      detail=lambda: f"it is {follow.read_status(ns['rtr'], traceload.DEV)}")


def kernel_rates(ns, link) -> tuple[int, int]:
    """(the class's ceil, the gate's rate) of a traced link, as tc shows them, in bit/s."""
    dev = ("dev", traceload.DEV)
    klass = subprocess.run(["tc", "-n", ns["rtr"], "class", "show", *dev, "classid", tc_handle(link.klass.classid)],
                           capture_output=True, text=True, check=True).stdout
    qdisc = subprocess.run(["tc", "-n", ns["rtr"], "qdisc", "show", *dev], capture_output=True, text=True,
                           check=True).stdout
    gate = re.search(rf"qdisc tbf {tc_handle(link.gate.handle)} .*? rate (\S+)", qdisc).group(1)
    return _bps(re.search(r" ceil (\S+)", klass).group(1)), _bps(gate)


def _bps(text: str) -> int:
    number, unit = re.fullmatch(r"([\d.]+)(\w*)", text).groups()
    return round(float(number) * {"bit": 1, "Kbit": 1e3, "Mbit": 1e6, "Gbit": 1e9}[unit])


# ---------------------------------------------------------------- the load generator


# it times the sender against the clock: beside the loaded suite one datagram went 30 ms late;
# pinned beside the kernel VM's tests it passed 8 runs of 8 (tests/schedule.py, "Alone on the host")
@pytest.mark.alone_on_host
def test_the_c_sender_sends_each_datagram_at_its_time_and_the_receiver_records_each(tag, tmp_path):
    """No shaping: 600 datagrams to three client ports, each due at a time of its own over
    0.6 s (``traceload.schedule``'s plan format): the receiver records every one, with its
    port and IP length, no earlier than its time and within 20 ms of it."""
    from array import array
    ns = traceload.topology(tag)
    sender, receiver = traceload._compiled(traceload.SENDER), traceload._compiled(traceload.RECEIVER)
    out = tmp_path / "received.bin"
    rec = subprocess.Popen(["ip", "netns", "exec", ns["cli"], receiver, traceload.CLIENT_DEV, "30", str(out)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert rec.stdout.readline().strip() == "ready"
        t0 = time.time() * 1000 + 300
        times = array("d", (t0 + k for k in range(600)))
        ports = array("i", (traceload.PORT0 + k % 3 for k in range(600)))
        traceload.write_plan(tmp_path / "plan.bin", times, ports)
        sent = subprocess.run(["ip", "netns", "exec", ns["srv"], sender, traceload.CLIENT, "100",
                               str(tmp_path / "plan.bin")], capture_output=True, text=True, check=True, timeout=30)
        counts = json.loads(sent.stdout)
        time.sleep(0.3)  # after the measurement: the last datagrams' way to the receiver (unshaped: microseconds)
        Path(str(out) + ".stop").touch()
        got = json.loads(rec.communicate(timeout=10)[0].splitlines()[-1])
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    ts, pp, ll = traceload.read_records(out)
    mine = sorted((t / 1e6, p, n) for t, p, n in zip(ts, pp, ll) if p in set(ports))
    assert counts["sent"] == 600 and counts["errors"] == 0 and got["drops"] == 0, (counts, got)
    assert len(mine) == 600 and {n for _, _, n in mine} == {128}, mine[:5]
    for port in set(ports):
        arrived = [t for t, p, _ in mine if p == port]
        due = [t for t, p in zip(times, ports) if p == port]
        lateness = [a - d for a, d in zip(arrived, due)]
        assert -1 <= min(lateness) and max(lateness) < 20, (port, min(lateness), max(lateness))


# ---------------------------------------------------------------- the square wave


# the runs of the paced senders: each as long as before plus SLACK_S, in which the scored window
# (as long as before) may start later, at the first step after every sender is on its plan; a
# run whose senders fell behind in every such window is run again, at most ATTEMPTS times
# (beside the kernel VM on a 2-core machine the senders fell 876 ms behind, the mean read 0.869:
# the load's, not the links'; the test then fails saying so, and judges no link)
SLACK_S, ATTEMPTS = 4.0, 3


# the paced senders need the whole machine: 1,000 links take a sender per CPU; pinned to one CPU
# beside the kernel VM they fell up to 883 ms behind their plan on a slower machine (issue 45)
@pytest.mark.alone
@pytest.mark.whole_machine("1,000 links paced by a sender per CPU, and the driver beside them")
def test_a_square_wave_on_1000_links_is_followed_within_its_tolerances(tag, tmp_path):
    """2 s high, 2 s low, 10:1, a step of 100 ms, 1,000 links each with a UDP sender paced at
    1.1 times its capacity (full-size datagrams: what a trace counts), each link at its own
    phase (in lock-step, one link's rounding to whole datagrams would be every link's: the
    mean would measure one link).  Each tolerance is the percentage or one datagram,
    whichever is larger.  Scored over a window where every sender was on its plan
    (``traceload.on_plan``): the links' tolerances are not the load's."""
    r = traceload.on_plan_run(tag, 12.0, tmp_path, attempts=ATTEMPTS, say=print, slack_s=SLACK_S, links=1000,
                              schedule=str(CASES / "square-frames.toml"), phase_seed="23", queue="6056b",
                              bandwidth="1gbit")
    print(json.dumps({k: v for k, v in r.items() if k != "driver"}), r["driver"])
    assert r["received"] > 100_000 and r["sent"]["errors"] == 0
    # the load is what it says over the window scored (its first datagrams, a burst that fills
    # every queue at once, go late by how long the kernel takes to forward 4,000 of them)
    assert r["receiver_lost"] == 0 and r["window"]["late_ms"] < 100, (r["window"], r["sent"])
    assert abs(r["mean_ratio"] - 1) <= 0.01, r  # the mean within 1% of the schedule's capacity
    assert r["p95_tolerances_1000ms"] <= 1.0, r  # per 1 s window, within 2% (p95 over links and windows)
    assert r["p95_tolerances_100ms"] <= 1.0, r  # per 100 ms window, within 10%
    assert r["driver"]["links"] == 1000 and r["driver"]["step_ms"] == 100
    assert r["driver"]["stepper"] == "arrays"  # 1,000 links or more: in arrays, schedules too (loop.ARRAYS_FROM)


# the paced senders and the driver's timing against the clock need the host to themselves; pinned
# beside the kernel VM's tests it passed 8 runs of 8 (tests/schedule.py, "Alone on the host")
@pytest.mark.alone_on_host
def test_a_cellular_trace_of_small_datagrams_is_followed_in_the_links_own_packets(tag, tmp_path):
    """0.01 of the LTE drive on 500 links, each at its own phase with a UDP sender paced at 1.1
    times its capacity in 202-byte frames (52 a 1 s window at the trace's mean): the driver
    learns each link's packets from its counters and counts what a change or a hold lets out
    in them, so the mean is within 1% of the capacity and the p95 error of 1 s windows within
    5%.  Counted in full frames, as before, the same run read +1.7% and 19%
    (docs/traces-notes.md, section 9)."""
    r = traceload.on_plan_run(tag, 12.0, tmp_path, attempts=ATTEMPTS, say=print, slack_s=SLACK_S, links=500,
                              trace_down="lte-drive.down", trace_scale="0.01", phase_seed="23", queue="30280b",
                              bandwidth="1gbit", payload=160)
    print(json.dumps({k: v for k, v in r.items() if k != "driver"}), r["driver"])
    # the load is what it says over the window scored
    assert r["receiver_lost"] == 0 and r["window"]["late_ms"] < 100, (r["window"], r["sent"])
    assert r["datagrams_per_window"] >= 50, r
    assert r["driver"]["learnt"] == 500, r["driver"]  # every link's packets known
    assert r["driver"]["stepper"] == "arrays"  # a trace: in arrays
    assert abs(r["mean_ratio"] - 1) <= 0.01, r
    assert r["p95_error_1000ms"] <= 0.05, r


# ---------------------------------------------------------------- an outage


@pytest.mark.alone_on_host  # the driver's rounds and the client's reads against the clock: beside the loaded suite
# 13 kB (some 50 ms of the link) were read inside the outage once: an opening sent early by the driver's lead, the
# likely cause, is no longer possible (docs/traces-notes.md, 9)
def test_an_outage_holds_a_tcp_download_and_it_resumes_when_capacity_returns(tag, tmp_path):
    """4 s at 2 Mbit/s, 3 s of nothing (the driver shuts the link's gate), then 2 Mbit/s: the
    download is not reset, nothing reaches the client during the outage, and it goes on at
    the link's rate afterwards.  The schedule's steps are fixed in the wall clock from its
    apply, so the driver (a process's start) and the download (two) start first, under a
    schedule of the first step's rate (``WARM``), and ``outage.toml`` is applied once they run:
    the driver reads its record at its next step."""
    ns = traceload.topology(tag)
    warm = tmp_path / "warm.toml"
    warm.write_text(WARM)
    service.apply(request(ns, str(warm), per="host", ports="all"))
    status_when(ns, lambda st: st.get("step") is not None)  # the driver follows
    wall = time.time() - time.monotonic()  # the client stamps its receives with the monotonic clock
    # the run ends RUN_S after the download's start (both ends count from it): 10 s after the
    # traces' start if the second apply comes within APPLY_S of it
    server = subprocess.Popen(["ip", "netns", "exec", ns["srv"], sys.executable, "-c", tracefacts.SERVER,
                               str(tracefacts.PORT), str(RUN_S)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    client = None
    try:
        wait_until(lambda: listening(ns["srv"], tracefacts.PORT), 60, "the server to listen")
        client = subprocess.Popen(["ip", "netns", "exec", ns["cli"], sys.executable, "-c", tracefacts.CLIENT,
                                   str(tracefacts.PORT), str(RUN_S + 1)], stdout=subprocess.PIPE, text=True)
        wait_until(lambda: established(ns["srv"], tracefacts.PORT), 60, "the download to connect")
        connected = time.time()
        service.apply(request(ns, "outage.toml", per="host", ports="all"))
        started = records.load(ns["rtr"], traceload.DEV).request.traced_start_ms
        status_when(ns, lambda st: st.get("started_ms") == started and st.get("step") is not None)
        print(f"the traces started {started / 1000 - connected:.2f} s after the download; the driver followed them "
              f"{time.time() - started / 1000:.2f} s after their start")
        assert started / 1000 - connected < APPLY_S, "the second apply came too late: the run ends before 10 s of it"
        out, _ = client.communicate(timeout=RUN_S + 60)
        _, err = server.communicate(timeout=30)
    finally:
        for p in (server, client):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    got = json.loads(out)
    assert got["error"] is None and err == "", (got["error"], err)  # not reset
    samples = [((t + wall) * 1000 - started, n) for t, n in got["samples"]]  # ms into the traces, bytes so far

    def received(a_ms, b_ms):
        before = [n for t, n in samples if t < a_ms]
        upto = [n for t, n in samples if t < b_ms]
        return (upto[-1] if upto else 0) - (before[-1] if before else 0)
    assert received(3000, 4000) > 150_000  # the link at work before (2 Mbit/s: 250 kB/s)
    # nothing passes while the tunnel lasts (the frame the gate lets out as it shuts, and one
    # step's lateness of the driver's round, are in its first 200 ms)
    assert received(4200, 7000) == 0
    after = [t for t, n in samples if t >= 7000]
    kicked = follow.read_status(ns["rtr"], traceload.DEV)["kicked"]
    print(f"the first bytes after the outage: {f'{after[0] - 7000:.0f} ms' if after else 'none'} after its end; "
          f"kick frames sent: {kicked}")
    # the download resumes as the outage ends: what the gate held goes out at once, kicked
    # (without the kick it waited for the sender's next packet, or HTB's timer: up to 1 s)
    assert kicked >= 1 and after and after[0] < 7300
    payload_bps = received(8000, 9800) * 8 / 1.8
    assert payload_bps / (2_000_000 * 1448 / 1514) == pytest.approx(1.0, abs=0.1)  # at the link's rate


# ---------------------------------------------------------------- a driver that dies


def test_a_killed_driver_is_reported_at_its_step_and_a_new_one_resumes_within_a_step(tag):
    """1 s at 2 Mbit/s, 1 s of nothing, over and over, on 100 links: the driver is killed
    while the links are shut; --list names the step they were left at and calls the outage
    left in place the worst case; a driver started again sends the step the clock says at
    once, and the kernel holds that step's rates."""
    ns = traceload.topology(tag)
    service.apply(request(ns, "tunnel.toml", links=100))
    shut = status_when(ns, lambda st: st.get("shut") == 100 and st.get("step", 0) >= 3)
    assert shut["stepper"] == "reference"  # 100 links of a schedule: numpy is not imported (loop.ARRAYS_FROM)
    os.kill(shut["pid"], signal.SIGKILL)
    wait_until(lambda: not follow.alive(ns["rtr"], traceload.DEV), 30, "the killed driver to let its lock go")
    left = follow.read_status(ns["rtr"], traceload.DEV)
    data = readout.statistics(traceload.DEV, ns["rtr"])
    driver = data["driver"]
    assert not driver["running"] and driver["step"] == left["step"] and driver["shut"] == 100
    assert f"the links were left at step {left['step']}" in driver["notice"]
    assert "100 of them shut -- an outage left in place, the worst case" in driver["notice"]
    req = records.load(ns["rtr"], traceload.DEV).request
    plan = compile_plan(req)
    loaded = {s.path: traced.load(s) for s in (req.cohorts[0].trace.down,)}
    links = traced_links(plan, loaded)
    assert kernel_rates(ns, links[0])[1] == 64  # still shut: nobody opens it

    follow.start(ns["rtr"], traceload.DEV)
    first = status_when(ns, lambda st: st.get("pid") != shut["pid"] and st.get("step") is not None)
    # the step the clock says when it is sent (or the next, up to half a step early, as a driver
    # that has learnt its lead sends): a resumed driver neither replays where the old one stopped
    # nor waits.  Its round's time in the kernel is not part of this (late_ms counts half of it;
    # a stop's CI, busy, read 122 ms there)
    sent_ms = first["step_at_ms"] - (req.traced_start_ms + first["step"] * 100)
    assert -50 <= sent_ms < 100, first
    # the kernel holds the driver's steps: read where every step that can be in the kernel
    # during the read (from the status's step before it to the one after the status after it,
    # which may be going out) gives the same half of the square wave.  Reading the status's
    # step alone failed in a stop's CI: step 9's status, then step 10 (shut) in the kernel
    # by the time the busy machine's tc answered
    for _ in range(50):
        before = follow.read_status(ns["rtr"], traceload.DEV)["step"]
        klass, gate = kernel_rates(ns, links[0])
        after = follow.read_status(ns["rtr"], traceload.DEV)["step"]
        halves = {k % 20 < 10 for k in range(before, after + 2)}
        if len(halves) == 1:
            break
    else:
        raise AssertionError("no read of the kernel fell within one half of the square wave")
    if halves == {True}:  # 1 s at 2 Mbit/s: the gate open, the class at the rate (less what it pays back)
        assert gate == 10**10 and abs(klass - 2_000_000) <= 2_000_000 * 0.1, (before, after, klass, gate)
    else:  # 1 s of nothing: shut
        assert gate == 64, (before, after, klass, gate)

    assert service.clean(traceload.DEV, ns["rtr"])  # --clean stops the driver
    assert not follow.alive(ns["rtr"], traceload.DEV)
    assert follow.read_status(ns["rtr"], traceload.DEV)["why"] == "SIGTERM"


# ---------------------------------------------------------------- a new plan


def test_the_driver_follows_a_plan_built_beside_in_other_handles(tag):
    """A cohort that grows is built beside in free handles and switched to (make-before-break);
    the driver reads the new record and follows the new plan's classes, not the old."""
    ns = traceload.topology(tag)
    service.apply(request(ns, "square.toml", links=50))
    status_when(ns, lambda st: st.get("links") == 50 and st.get("step", 0) >= 2)
    old = compile_plan(records.load(ns["rtr"], traceload.DEV).request)
    plan = service.apply(request(ns, "square.toml", links=300))
    assert plan.how == "make-before-break"
    req = records.load(ns["rtr"], traceload.DEV).request
    new = traced_links(compile_plan(req), {s.path: traced.load(s) for s in (req.cohorts[0].trace.down,)})
    assert {link.klass.classid for link in new}.isdisjoint(
        {op.classid for op in old.ops if type(op).__name__ == "HtbClass" and op.classid & 0xFFFF >= 0x100})
    st = status_when(ns, lambda st: st.get("links") == 300)
    assert st["step"] is not None
    # a round of the new plan's after that one has gone out (a status is written once its round has)
    status_when(ns, lambda now: now.get("links") == 300 and now.get("rounds", 0) > st["rounds"])
    klass, _ = kernel_rates(ns, new[-1])  # the new plan's last link: the driver's rate (around 400 or 40
    assert klass != new[-1].klass.ceil_bps == 220_000  # kbit/s), not the plan's first (the schedule's mean)
    data = readout.statistics(traceload.DEV, ns["rtr"])  # --stats: each link's trace and its rate now
    assert len(data["links"]) == 300 and {row["trace"] for row in data["links"]} == {"square.toml"}
    assert {row["trace_bps"] for row in data["links"]} <= {400_000, 40_000} and data["driver"]["running"]
    from ratelimit.cli.main import render_table
    assert re.search(r"follows square\.toml \(now (400|40)kbit\)", render_table(data, counters=True))


def test_a_rollback_leaves_the_driver_following_the_old_plan(tag):
    """The kernel refuses a step of a make-before-break half way (a real refusal,
    ``bench.faults.inject``); the apply rolls back to the old plan and its record, and the
    driver, which only ever reads the record, goes on following the old plan's classes."""
    from bench.faults import inject
    from ratelimit.errors import ApplyError
    ns = traceload.topology(tag)
    service.apply(request(ns, "square.toml", links=50))
    status_when(ns, lambda st: st.get("links") == 50 and st.get("step", 0) >= 2)
    before = records.load(ns["rtr"], traceload.DEV).request
    with inject(40), pytest.raises(ApplyError):
        service.apply(request(ns, "square.toml", links=300))
    assert records.load(ns["rtr"], traceload.DEV).request == before  # rolled back, record and all
    now = follow.read_status(ns["rtr"], traceload.DEV)
    later = status_when(ns, lambda st: st.get("step", 0) >= now["step"] + 3)
    assert later["links"] == 50 and later["state"] == "following" and later["pid"] == now["pid"]
    links = traced_links(compile_plan(before), {before.cohorts[0].trace.down.path:
                                                traced.load(before.cohorts[0].trace.down)})
    klass, _ = kernel_rates(ns, links[0])
    assert klass != links[0].klass.ceil_bps == 220_000  # the driver's rate, on the old plan's class
