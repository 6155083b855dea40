"""Traced links in the plan and the driver's steps, pure (no kernel): where traces are named
(command line, scenario, profile), what the record keeps, each link's phase, the changes
of each step, and what --list says of a driver that is not running."""

import dataclasses
import fcntl
import json
import os
from pathlib import Path

import pytest

from bench import spansim
from ratelimit.driver import follow
from ratelimit.driver.steps import Stepper, traced_links
from ratelimit.errors import StateError
from ratelimit.plan import gate, layout
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.ops import Change
from ratelimit.plan.shaping import HtbClass, NetemQdisc, TbfQdisc
from ratelimit.profiles import scenario, traced
from ratelimit.service import make_request
from ratelimit.state import records
from ratelimit.traces import phases, tracespec

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases" / "traces"


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", "")
    monkeypatch.setenv("HOME", "/nonexistent")


def square(**kw):
    args = dict(hosts="198.18.1.2", ports="2000-2001", direction="dest", schedule=str(CASES / "square.toml"),
                phase="same")
    args.update(kw)
    return make_request("veth0", **args)


def stepper(req, step_ms=100, started_ms=0):
    req = tracespec.stamped(req, None, started_ms)
    plan = compile_plan(req)
    loaded = traced.load_all(req)
    return Stepper(traced_links(plan, loaded), step_ms), plan


def rates(ops):
    return [(type(op.op).__name__, op.op.rate_bps, op.op.ceil_bps if type(op.op) is HtbClass else None) for op in ops]


# ---------------------------------------------------------------- the plan and the record


def test_a_traced_link_has_a_wide_open_gate_and_its_class_at_the_traces_mean():
    plan = compile_plan(square())
    gates = [op for op in plan.ops if type(op) is TbfQdisc]
    links = [op for op in plan.ops if type(op) is HtbClass and op.classid >> 16 == 0xFFFE and op.classid & 0xFFFF >= 0x100]
    assert len(gates) == len(links) == 2
    assert all(g.rate_bps == gate.OPEN_BPS and g.burst_bytes == 1514 for g in gates)
    assert [g.parent for g in gates] == [k.classid for k in links]
    assert {(k.rate_bps, k.ceil_bps) for k in links} == {(220_000, 220_000)}  # (400k + 40k) / 2, Ethernet


def test_the_record_keeps_the_traces_their_hashes_the_phases_and_the_start():
    req = tracespec.stamped(square(phase="random", phase_seed="7", trace_scale="0.5"), None, 1_795_000_000_000)
    data = json.loads(json.dumps(records.to_json(req)))
    back = records.request_from_json(data, "test")
    assert back == req
    spec = back.cohorts[0].trace
    assert spec.down.path == str(CASES / "square.toml") and spec.down.kind == "schedule" and len(spec.down.sha256) == 64
    assert (spec.scale, spec.phase.kind, spec.seed, spec.started_ms) == (0.5, "random", 7, 1_795_000_000_000)


def test_a_damaged_trace_in_a_record_is_refused_in_one_line():
    data = records.to_json(square())
    data["cohorts"][0]["trace"]["down"]["sha256"] = "not a hash"
    with pytest.raises(StateError) as err:
        records.request_from_json(data, "state file X")
    assert str(err.value).startswith("state file X: does not hold a ratelimit request") and "\n" not in str(err.value)


def test_a_reapply_of_the_same_traces_keeps_their_start_and_other_traces_start_again():
    old = tracespec.stamped(square(), None, 1000)
    assert tracespec.stamped(square(queue="30"), old, 5000).cohorts[0].trace.started_ms == 1000
    assert tracespec.stamped(square(trace_scale="0.5"), old, 5000).cohorts[0].trace.started_ms == 5000


def test_a_scenario_names_traces_relative_to_its_file_and_a_static_cohort_beside_them():
    req = make_request("veth0", scenario=scenario.load(str(CASES / "traced.toml")))
    phones, fixed = req.cohorts
    assert fixed.trace is None and phones.trace.scale == 0.5 and phones.trace.phase.kind == "same"
    assert phones.trace.down.path == phones.trace.up.path == str(CASES / "tunnel.toml")
    assert (phones.trace.down.mean_bps, phones.trace.up.mean_bps) == (1_000_000, 500_000)
    ops = compile_plan(req).ops
    assert sum(type(op) is TbfQdisc for op in ops) == 4  # two hosts, both directions; the fixed line has fifos


def test_a_profile_names_traces_and_the_command_line_overrides_them(tmp_path, monkeypatch):
    (tmp_path / "mine.down").write_text("1\n2\n")
    (tmp_path / "phone.toml").write_text('description = "x"\ntrace_down = "mine.down"\ntrace_up = "lte-drive.up"\n'
                                         'trace_scale = 0.1\n[down]\nrate = "1mbit"\n[up]\nrate = "1mbit"\n')
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", str(tmp_path))
    spec = make_request("veth0", hosts="198.18.1.2", ports="2000", profile="phone").cohorts[0].trace
    assert (spec.down.path, spec.up.name, spec.scale) == (str(tmp_path / "mine.down"), "lte-drive.up", 0.1)
    assert spec.down.mean_bps == 2 * 1504 * 8 * 1000 / 2  # two opportunities in a period of 2 ms
    over = make_request("veth0", hosts="198.18.1.2", ports="2000", profile="phone",
                        schedule=str(CASES / "tunnel.toml")).cohorts[0].trace
    assert over.down.kind == over.up.kind == "schedule" and over.scale == 0.1  # the scale stays the profile's


def test_the_driver_refuses_a_trace_whose_bytes_changed(tmp_path):
    path = tmp_path / "t.down"
    path.write_text("1\n2\n")
    spec = make_request("veth0", hosts="198.18.1.2", ports="2000", trace_down=str(path)).cohorts[0].trace
    assert traced.load(spec.down).period_ms == 2
    path.write_text("1\n3\n")
    with pytest.raises(StateError, match="changed since it was applied"):
        traced.load(spec.down)


# ---------------------------------------------------------------- phases


def test_each_link_has_its_own_seeded_phase_and_same_puts_them_in_step():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000-2099", direction="dest", trace_down="lte-drive.down",
                       phase_seed="3")
    links = stepper(req)[0].links
    expected = [phases.link_phase_ms(phases.Phase(), 3, phases.identity("main", link.host, link.port), 60_000)
                for link in links]
    assert [link.phase_ms for link in links] == expected
    assert len(set(expected)) > 90  # spread over the trace's minute
    assert {link.phase_ms for link in stepper(square())[0].links} == {0}


# ---------------------------------------------------------------- steps


def test_each_step_sets_the_windows_capacity_and_only_what_changed():
    s, _ = stepper(square())
    first = s.changes(0, resend=True)
    assert rates(first) == [("HtbClass", 400_000, 400_000)] * 2 + [("TbfQdisc", gate.OPEN_BPS, None)] * 2
    assert all(type(op) is Change for op in first)
    assert s.changes(1) == ()  # the same rate: nothing to send
    assert rates(s.changes(20)) == [("HtbClass", 40_000, 40_000)] * 2  # 2 s in: the low half
    assert rates(s.changes(40)) == [("HtbClass", 400_000, 400_000)] * 2


def test_a_step_across_an_edge_gets_the_windows_average():
    s, _ = stepper(square(), step_ms=300)
    assert s.links[0].rates_from(6, 2, 300) == [280_000, 40_000]  # 1.8-2.1 s: 200 ms high, 100 low


def test_no_capacity_shuts_the_gate_first_and_capacity_opens_it_after_the_class():
    s, _ = stepper(square(schedule=str(CASES / "tunnel.toml")))
    s.changes(8, resend=True)
    before = rates(s.changes(9))  # the frame the gate lets out as it shuts, paid for before it
    assert before == [("HtbClass", 2_000_000 - 121_120, 2_000_000 - 121_120)] * 2
    shut = s.changes(10)
    assert rates(shut) == [("TbfQdisc", gate.SHUT_BPS, None)] * 2 and s.shut_count() == 2
    assert not s.reopens  # a round that shuts may go early (the driver's lead)
    assert s.changes(11) == ()
    assert rates(s.changes(20)) == [("HtbClass", 2_000_000, 2_000_000)] * 2 + [("TbfQdisc", gate.OPEN_BPS, None)] * 2
    # ... one that ends the outage is not sent before its step, and its device is kicked
    assert s.reopened == {s.links[0].gate.dev} and s.reopens
    assert s.changes(21) == () and not s.reopens
    s.forget()  # after a failed step: every class and gate again, the class first
    assert rates(s.changes(22)) == [("HtbClass", 2_000_000, 2_000_000)] * 2 + [("TbfQdisc", gate.OPEN_BPS, None)] * 2


def test_a_packet_longer_than_a_window_is_charged_the_time_its_capacity_takes_to_carry_it():
    """40 kbit/s: a 1,514-byte frame takes 303 ms.  From a window's middle on, the class's
    rate is the one at which a frame is charged the time the coming windows take to carry it:
    it rises from 3.7 s, as the rise at 4 s comes within a frame's time."""
    s, _ = stepper(square())
    s.changes(30, resend=True)
    assert [s.changes(k) for k in range(31, 37)] == [()] * 6

    def span(low_ms):  # ``low_ms`` at 40 kbit/s (500 bytes a window), the rest at 400 kbit/s
        carried = 40_000 * low_ms / 8000
        return round(1514 * 8000 / (low_ms + (1514 - carried) * 8000 / 400_000))
    for k, low_ms in ((37, 250), (38, 150), (39, 50)):
        assert rates(s.changes(k)) == [("HtbClass", span(low_ms), span(low_ms))] * 2, k
    assert rates(s.changes(40)) == [("HtbClass", 400_000, 400_000)] * 2 and s.held_count() == 0
    assert span(250) == 47_446  # the rise's first: 250 ms at 40 kbit/s, 5.3 ms at 400


def test_a_fall_is_paid_for_in_the_window_before_it():
    s, _ = stepper(square())
    s.changes(18, resend=True)
    paid = round(400_000 - 0.5 * 1514 * 0.9 * 8 / 0.1)  # half a frame, nine tenths of it the fall's
    assert rates(s.changes(19)) == [("HtbClass", paid, paid)] * 2
    assert rates(s.changes(20)) == [("HtbClass", 40_000, 40_000)] * 2


def small_packets(s, packet_bytes=202):
    """Let the stepper learn that every link sends ``packet_bytes`` packets (two readings of
    its counters, ten packets apart)."""
    n = len(s.links)
    s.learn([0] * n, [0] * n)
    s.learn([10 * packet_bytes] * n, [10] * n)
    assert s.learnt == n and all(link.packet_bytes == packet_bytes for link in s.links)


def test_the_links_packets_are_learnt_from_their_counters():
    s, _ = stepper(square())
    s.learn([1000, 1000], [5, 5])  # the first reading: where the next counts from
    assert [link.packet_bytes for link in s.links] == [None, None] and s.learnt == 0
    s.learn([1000 + 7 * 100, 1000 + 9000 * 7], [5 + 7, 5 + 7])  # too few packets to tell
    assert [link.packet_bytes for link in s.links] == [None, None]
    s.learn([1700 + 8 * 100, 64000 + 8 * 9000], [20, 20])  # 100-byte packets; no packet above the gate's frame
    assert [link.packet_bytes for link in s.links] == [100.0, 1514.0] and s.learnt == 2
    s.learn([0, 136000 + 1514 * 8], [0, 28])  # a class's counters started again (another plan): not known
    assert [link.packet_bytes for link in s.links] == [None, 1514.0] and s.learnt == 1


def test_a_change_is_paid_for_in_the_links_own_packets():
    s, _ = stepper(square())
    small_packets(s)
    s.changes(18, resend=True)
    paid = round(400_000 - 0.5 * 202 * 0.9 * 8 / 0.1)  # half a 202-byte packet, nine tenths of it the fall's
    assert rates(s.changes(19)) == [("HtbClass", paid, paid)] * 2


def test_a_gate_that_holds_lets_out_its_bucket_at_once_beyond_the_packet_due():
    """400-byte packets: one takes 80 ms at 40 kbit/s, within a window, and HTB would owe 80
    ms at the rise, so the gate holds it from the window before; its bucket, a full frame,
    goes at once, one packet of it due: the rest is paid back after the hold."""
    s, _ = stepper(square())
    small_packets(s, 400)
    s.changes(35, resend=True)
    assert [s.changes(k) for k in (36, 37, 38)] == [()] * 3
    assert rates(s.changes(39)) == [("TbfQdisc", 40_000, None)] * 2 + [("HtbClass", 400_000, 400_000)] * 2
    assert s.links[0].ahead_bytes == 1514 - 400 and s.held_count() == 2
    ahead = 1514 - 400 + 0.5 * 400 * 0.9  # and the packet the gate was saving up for goes as it opens
    paid = round(400_000 - ahead * 8 / 0.1)
    assert rates(s.changes(40)) == [("HtbClass", paid, paid)] * 2 + [("TbfQdisc", gate.OPEN_BPS, None)] * 2


def test_a_rise_whose_debt_is_less_than_a_gates_bucket_is_paid_for_not_held():
    """202-byte packets at a 10:1 rise: HTB's debt (half a packet times 9: 909 bytes) is less
    than what a hold's bucket lets out beyond a packet (1,312), so the rise is not held; it is
    paid for from the window before it (at most half its rate) and the one of it."""
    s, _ = stepper(square())
    small_packets(s)
    s.changes(35, resend=True)
    before = 40_000 + 0.5 * 40_000  # owed 909 bytes: half of this window's rate is paid now
    assert rates(s.changes(39)) == [("HtbClass", before, before)] * 2 and s.held_count() == 0
    left = 0.5 * 202 * 9 - 0.5 * 40_000 * 0.1 / 8
    after = round(400_000 + left * 8 / 0.1)
    assert rates(s.changes(40)) == [("HtbClass", after, after)] * 2


def test_less_than_a_sixteenth_of_a_packet_is_left_owing_not_paid():
    """Each payment is a change, and a change that lands late owes again: a few bytes are
    kept until they add up to a sixteenth of a packet, not paid in a change of their own."""
    s, _ = stepper(square())
    s.changes(5, resend=True)
    s.links[0].ahead_bytes = 1514 / 16 - 1
    assert s.changes(6) == ()
    s.links[0].ahead_bytes += 1
    paid = round(400_000 - 1514 / 16 * 8 / 0.1)
    assert rates(s.changes(7)) == [("HtbClass", paid, paid)] and s.links[0].ahead_bytes == 0


def test_a_change_that_lands_late_is_owed_what_it_missed():
    s, _ = stepper(square())
    small_packets(s, 400)
    s.changes(35, resend=True)
    s.changes(39)  # the hold: the link passes 40 kbit/s
    s.changes(40)  # ... and the paid 296,480 bit/s from the opening
    before = s.links[0].ahead_bytes
    s.landed(20.0, 0.0)  # landed 20 ms late: 20 ms at 40 kbit/s instead
    assert s.links[0].ahead_bytes == pytest.approx(before + 0.020 * (40_000 - 296_480) / 8)


def test_each_change_is_taken_to_land_at_its_own_place_in_the_round():
    """Link 0 was shut and opens (its class, then its gate, last of the round); link 1 only
    falls (its class, the round's second operation): over a round of 30 ms from the
    window's start, link 1's change lands at 20 ms, link 0's opening at 30 ms."""
    s, _ = stepper(square())
    s.changes(18, resend=True)
    s.changes(19)  # the fall at step 20, paid for before it: both classes at 345,496 bit/s
    s.links[0].gate_bps = gate.SHUT_BPS  # as if shut, so that it opens at step 20
    ops = s.changes(20)
    assert [(type(op.op).__name__, op.op.rate_bps) for op in ops] == [
        ("HtbClass", 40_000), ("HtbClass", 40_000), ("TbfQdisc", gate.OPEN_BPS)]
    before = [link.ahead_bytes for link in s.links]
    s.landed(0.0, 30.0)
    assert s.links[0].ahead_bytes == pytest.approx(before[0] + 0.030 * (0 - 40_000) / 8)
    assert s.links[1].ahead_bytes == pytest.approx(before[1] + 0.020 * (345_496 - 40_000) / 8)


def test_a_plan_in_other_handles_is_followed_in_those():
    req = square()
    plan_1 = compile_plan(dataclasses.replace(tracespec.stamped(req, None, 0), generation=1))
    loaded = {req.cohorts[0].trace.down.path: traced.load(req.cohorts[0].trace.down)}
    links = traced_links(plan_1, loaded)
    assert {link.klass.classid >> 16 for link in links} == {0xFDEC}  # generation 1's first group
    ops = Stepper(links, 100).changes(0, resend=True)
    assert {op.op.classid for op in ops if type(op.op) is HtbClass} == {link.klass.classid for link in links}


def test_a_cohort_applied_earlier_keeps_its_own_start():
    req = make_request("veth0", scenario=scenario.load(str(CASES / "traced.toml")))
    early = tracespec.stamped(req, None, 10_000)
    phones = dataclasses.replace(early.cohorts[0], trace=dataclasses.replace(early.cohorts[0].trace, started_ms=9_000))
    later = dataclasses.replace(early, cohorts=(phones, early.cohorts[1]))
    loaded = {phones.trace.down.path: traced.load(phones.trace.down)}
    links = traced_links(compile_plan(later), loaded)
    assert {link.offset_ms for link in links} == {0}  # one cohort: the plan's start is its own
    s = Stepper(links, 100)
    assert s.changes(10, resend=True)[0].op.rate_bps == gate.SHUT_BPS  # 1.0-1.1 s into its tunnel schedule


# ---------------------------------------------------------------- what --list says


def test_a_driver_that_died_is_reported_with_its_step_and_an_outage_left_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path))
    req = tracespec.stamped(square(), None, 1_000)
    assert follow.report(square(trace_scale=None, schedule=None, phase=None, rate="1mbit"), None, "veth0") is None
    never = follow.report(req, None, "veth0")
    assert not never["running"] and "has not followed these traces" in never["notice"]
    path = follow.status_path(None, "veth0")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "pid": os.getpid(), "step_ms": 100, "state": "following",
                                "started_ms": 1_000, "step": 37, "step_at_ms": 4_700, "links": 2, "shut": 2}))
    dead = follow.report(req, None, "veth0", now_ms=6_700)
    assert not dead["running"] and dead["step"] == 37 and dead["shut"] == 2
    assert "stopped 2.0 s ago" in dead["notice"] and "step 37 (3.7 s into the traces)" in dead["notice"]
    assert "an outage left in place, the worst case" in dead["notice"]
    assert "ratelimit follow --interface veth0" in dead["notice"] and "\n" not in dead["notice"]
    other = follow.report(tracespec.stamped(square(), None, 2_000), None, "veth0")  # another apply's traces
    assert other["step"] is None and "has not followed these traces" in other["notice"]


def two_traced(tmp_path, phones_scale):
    """Phones, then tablets, each on the tunnel schedule (phones at ``phones_scale``)."""
    path = tmp_path / "two.toml"
    path.write_text('description = "two traced cohorts"\n' + "".join(
        f'[cohort.{name}]\ndescription = "{name}"\nhosts = "{host}"\nper = "host"\n'
        f'schedule = "{CASES / "tunnel.toml"}"\ntrace_scale = {scale}\nphase = "same"\n'
        for name, host, scale in (("phones", "198.18.1.2", phones_scale), ("tablets", "198.18.1.3", 0.5))))
    return make_request("veth0", scenario=scenario.load(str(path)))


def test_a_driver_of_a_plan_whose_older_cohort_comes_second_is_reported_at_its_step(tmp_path, monkeypatch):
    """A re-apply that restarts the first cohort's traces keeps the second's start, the
    earlier one: the plan's time 0, which the driver writes to its status.  Its report (what
    --stats and the dashboard show) keeps the driver's step."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    first = tracespec.stamped(two_traced(tmp_path, 0.5), None, 10_000)
    again = tracespec.stamped(two_traced(tmp_path, 0.25), first, 20_000)
    assert [c.trace.started_ms for c in again.cohorts] == [20_000, 10_000]  # the newer first, the older after
    assert {link.offset_ms for link in traced_links(compile_plan(again), traced.load_all(again))} == {0, 10_000}
    path = follow.status_path(None, "veth0")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "pid": os.getpid(), "step_ms": 100, "state": "following",
                                "started_ms": 10_000, "step": 137, "step_at_ms": 23_700, "links": 4, "shut": 2}))
    dead = follow.report(again, None, "veth0", now_ms=25_700)
    assert (dead["started_ms"], dead["step"], dead["shut"]) == (10_000, 137, 2)
    assert "stopped 2.0 s ago" in dead["notice"] and "step 137 (13.7 s into the traces)" in dead["notice"]
    with open(follow.lock_path(None, "veth0"), "a") as held:  # a driver runs: it holds the lock
        fcntl.flock(held, fcntl.LOCK_EX)
        running = follow.report(again, None, "veth0")
    assert running["running"] and running["notice"] is None
    assert (running["started_ms"], running["step"], running["shut"], running["links"]) == (10_000, 137, 2, 4)


# ---------------------------------------------------------------- the command line


def run_cli(*argv):
    import io
    from ratelimit.cli.main import Console, main
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Console(out, err))
    return code, out.getvalue(), err.getvalue()


def test_dry_run_shows_the_gates_and_what_the_links_follow():
    code, out, err = run_cli("--if", "veth0", "-h", "198.18.1.2", "-p", "2000-2001", "-d", "dest", "--trace-down",
                             "lte-drive.down", "--trace-scale", "0.01", "--phase-seed", "9", "--dry-run")
    assert code == 0 and err == ""
    assert "down follows trace lte-drive.down" in out.splitlines()[0]
    assert "# cohort main: down trace lte-drive.down x0.01, phase random seed 9; a driver ('ratelimit follow')" in out
    assert out.count(" tbf rate 10gbit burst 1514b limit ") == 2


BAD_ON_THE_COMMAND_LINE = {
    "a trace": ("--trace-down", "bad.down", "5\n3\n", "line 2: 3 is less than 5 on line 1 (timestamps never decrease)"),
    "a schedule": ("--schedule", "bad.toml", '[[step]]\nduration = "1s"\ndown = { rate = "1mbit", delay = "-5ms" }\n'
                   'up = { rate = "1mbit" }\n', "step 1 down.delay: '-5ms' is negative (a delay is a time from 0 to "
                   "1 hour, e.g. 150ms)"),
}


@pytest.mark.parametrize("what", BAD_ON_THE_COMMAND_LINE)
def test_a_bad_trace_or_schedule_on_the_command_line_is_one_line_and_nothing_is_applied(tmp_path, monkeypatch, what):
    option, name, text, message = BAD_ON_THE_COMMAND_LINE[what]
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    bad = tmp_path / name
    bad.write_text(text)
    code, out, err = run_cli("--if", "veth0", "-h", "198.18.1.2", "-p", "2000", option, str(bad))
    assert code == 2 and out == ""
    assert err == f"ratelimit: {option} {bad}: {message}\n"
    assert not (tmp_path / "state").exists()  # it never reached the kernel or the record


def test_the_time_a_capacity_takes_to_carry_bytes():
    from ratelimit.traces.capacity import ScheduleCapacity, carried_by_ms
    cap = ScheduleCapacity(traced.load(square().cohorts[0].trace.down), "down")  # 400 kbit/s 2 s, 40 kbit/s 2 s
    assert carried_by_ms(cap, 0, 50_000) == pytest.approx(1000, abs=1)  # 50 kB at 50 kB/s
    assert carried_by_ms(cap, 1000, 60_000) == pytest.approx(2000 + 2000, abs=1)  # 50 kB, then 10 kB at 5 kB/s
    assert carried_by_ms(cap, 0, 0) == 0


# ---------------------------------------------------------------- a delay stage, and a schedule's delay and loss


def stages(ops):
    return [(op.op.parent, op.op.params.delay_us, op.op.params.loss_pct) for op in ops if type(op.op) is NetemQdisc]


def test_a_traced_link_with_a_delay_has_a_netem_stage_under_its_gate_and_its_class_shapes():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000-2002", direction="dest", profile="3g",
                       trace_down="3g-walk.down")
    ops = compile_plan(req).ops
    gates = [op for op in ops if type(op) is TbfQdisc]
    netems = [op for op in ops if type(op) is NetemQdisc]
    assert [g.handle >> 16 for g in gates] == [0x100, 0x101, 0x102]
    assert [(n.parent, n.handle >> 16) for n in netems] == [(g.handle | 1, 0x103 + i) for i, g in enumerate(gates)]
    assert all(n.params.delay_us == 150_000 and n.params.jitter_us == 50_000 and n.rate_bps == req.bandwidth_bps
               for n in netems)  # netem only delays; its rate at the bandwidth keeps the link's packets in order
    links = [op for op in ops if type(op) is HtbClass and op.parent == 0xFFFE0001]
    assert all(k.ceil_bps == k.rate_bps for k in links)  # the class shapes, not netem
    assert layout.Layout.of(req).leaves == 6


def test_a_cohort_beside_one_with_delay_stages_takes_the_majors_after_them(tmp_path):
    (tmp_path / "two.toml").write_text(
        '[cohort.phones]\ndescription = "x"\nhosts = "198.18.1.2-198.18.1.3"\nper = "host"\nprofile = "3g"\n'
        f'schedule = "{CASES / "tunnel.toml"}"\n[cohort.fixed]\ndescription = "y"\nhosts = "198.18.1.4"\nper = "host"\n'
        'rate = "1mbit"\n')
    req = make_request("veth0", scenario=scenario.load(str(tmp_path / "two.toml")), direction="dest")
    ops = compile_plan(req).ops
    majors = [op.handle >> 16 for op in ops if type(op) in (TbfQdisc, NetemQdisc) or type(op).__name__ == "FifoQdisc"]
    assert majors == [0x100, 0x102, 0x101, 0x103, 0x104]  # the phones' gates and stages, then the fixed line's fifo
    assert len(set(majors)) == len(majors)


def test_a_schedules_delay_and_loss_are_set_in_place_at_its_steps_and_resent_after_a_failure():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000", direction="dest", schedule="train", rate="1mbit",
                       phase="same")
    s, plan = stepper(req)
    (stage,) = [op for op in plan.ops if type(op) is NetemQdisc]
    assert stage.params.delay_us == 0 and stage.limit_pkts > 150_000 * 5_000_000 / 8e6 / 1514  # the longest delay
    assert stages(s.changes(0, resend=True)) == [(stage.parent, 14_000, 0.0)]  # cable: 14 ms
    assert stages(s.changes(1)) == [] and stages(s.changes(199)) == []
    assert stages(s.changes(200)) == [(stage.parent, 0, 0.0)]  # the tunnel says none: the link's own
    assert stages(s.changes(250)) == [(stage.parent, 150_000, 0.5)]  # 3g
    assert stages(s.changes(251)) == []
    s.forget()
    assert stages(s.changes(252)) == [(stage.parent, 150_000, 0.5)]


def test_a_schedule_step_meets_its_edge_within_half_a_window():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000", direction="dest", schedule="train", rate="1mbit",
                       phase="same")
    s, _ = stepper(req, step_ms=300)
    s.changes(0, resend=True)
    # the tunnel starts at 20 s: the window 19.8-20.1 s is cable at its middle, 20.1-20.4 s the tunnel
    assert [stages(s.changes(k)) != [] for k in (65, 66, 67)] == [False, False, True]


def test_a_traces_stage_keeps_the_links_own_delay():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000", direction="dest", profile="lte",
                       trace_down="lte-drive.down", phase="same")
    s, _ = stepper(req)
    assert stages(s.changes(0, resend=True)) == [] and s.links[0].stage is not None


def test_the_record_keeps_a_schedules_stage():
    req = tracespec.stamped(make_request("veth0", hosts="198.18.1.2", ports="2000", schedule="train", rate="1mbit"),
                            None, 1_000)
    back = records.request_from_json(json.loads(json.dumps(records.to_json(req))), "test")
    assert back == req and back.cohorts[0].trace.down.netem and back.cohorts[0].trace.down.most_delay_us == 150_000
    data = records.to_json(req)
    data["cohorts"][0]["trace"]["up"]["most_delay_us"] = -1
    with pytest.raises(StateError, match="does not hold a ratelimit request"):
        records.request_from_json(data, "state file X")


def test_a_schedules_step_can_lose_in_bursts_and_the_next_at_random(tmp_path):
    path = tmp_path / "fade.toml"
    path.write_text('description = "a fade (tests)"\n'
                    '[[step]]\nduration = "1s"\ndown = { rate = "1mbit", loss = "gemodel p=5% r=20%" }\n'
                    'up = { rate = "1mbit" }\n'
                    '[[step]]\nduration = "1s"\ndown = { rate = "1mbit", loss = "1%" }\nup = { rate = "1mbit" }\n')
    req = make_request("veth0", hosts="198.18.1.2", ports="2000", direction="dest", schedule=str(path), rate="1mbit",
                       phase="same")
    s, _ = stepper(req)
    (first,) = [c.op.params for c in s.changes(0, resend=True) if type(c.op) is NetemQdisc]
    assert first.loss_model.text() == "gemodel p=5% r=20% h=0% k=100%" and first.loss_pct == 0
    (second,) = [c.op.params for c in s.changes(10) if type(c.op) is NetemQdisc]
    assert second.loss_model is None and second.loss_pct == 1
    assert [c.op.params for c in s.changes(20) if type(c.op) is NetemQdisc] == [first]  # it loops


def test_the_leo_schedule_steps_its_delay_every_15_s():
    req = make_request("veth0", hosts="198.18.1.2", ports="2000", direction="dest", schedule="leo-starlink",
                       rate="300mbit", bandwidth="1gbit", phase="same")
    s, plan = stepper(req)  # 100 ms windows
    (stage,) = [op for op in plan.ops if type(op) is NetemQdisc]
    assert stages(s.changes(0, resend=True)) == [(stage.parent, 20_000, 0.0)]
    assert stages(s.changes(149)) == []
    assert [stages(s.changes(k)) for k in (150, 300, 450, 600)] == [
        [(stage.parent, us, 0.0)] for us in (25_000, 30_000, 23_500, 20_000)]  # a minute, and again


def test_dry_run_shows_the_stages_and_that_the_driver_sets_their_delay_and_loss():
    code, out, err = run_cli("--if", "veth0", "-h", "198.18.1.2", "-p", "2000", "-d", "dest", "--schedule", "train",
                             "--rate", "1mbit", "--dry-run")
    assert code == 0 and err == ""
    assert "schedule train.toml (its rates, delays and losses)" in out
    assert "sets the delay and loss of the netem stages under the gates" in out
    assert "qdisc add dev veth0 parent 100:1 handle 101: netem limit " in out



@pytest.mark.parametrize("source", [dict(scale=0.002), dict(scale=0.005),
                                    dict(schedule=str(CASES / "square-frames.toml"))],
                         ids=["lte x 0.002", "lte x 0.005", "square wave"])
def test_a_backlogged_link_of_a_frame_or_two_a_second_gets_its_capacity_through_htb_as_simulated(source):
    """Through a model of HTB and the gate (bench/spansim.py), 20 links of full frames for
    30 s: each spans several windows at its rate (a frame every 0.7 s at 0.002 of the trace).
    Before the span rule the mean was 21% short at 0.002, 7.6% at 0.005."""
    r = spansim.simulate(20, 30.0, 100, 1514, **source)
    assert abs(r["mean_ratio"] - 1) <= 0.01, r
    assert r["p95_error_1000ms_frames"] <= 1.0, r
