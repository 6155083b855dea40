"""Cells, pure: how a scenario and the command line say them, what the compiler makes of
them (the cohort's one group held to the cell's capacity), a capacity changed in place, and
the one-line refusals."""

from pathlib import Path

import pytest

from ratelimit import service
from ratelimit.errors import UsageError
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.layout import POOL_CLASS
from ratelimit.profiles import scenario
from ratelimit.spec.cells import parse_cell
from ratelimit.spec.model import Cell
from ratelimit.state import records

WAVE = Path(__file__).resolve().parent / "cases" / "traces" / "cell-wave.toml"

PHONES = """
description = "a tower of phones"
[cell.tower-1]
description = "one LTE cell's downlink and uplink"
down = "20mbit"
up = "5mbit"
[cohort.phones]
description = "phones, each its own 4G link"
hosts = "198.18.1.2-198.18.1.41"
profile = "4g"
cell = "tower-1"
"""


def phones(text=PHONES, **kw):
    return service.make_request("r0", scenario=scenario.parse(text, "scenario phones.toml"), **kw)


def group_classes(plan, dev="r0"):
    """The classes right under the pool (the groups'), by classid: (rate, ceil)."""
    return {op.classid: (op.rate_bps, op.ceil_bps) for op in plan.ops
            if type(op).__name__ == "HtbClass" and op.dev == dev and op.parent == POOL_CLASS}


def test_a_scenario_cell_is_the_cohorts_group_held_to_its_capacity():
    req = phones()
    assert req.cohorts[0].cell == Cell("tower-1", 20_000_000, 5_000_000)
    plan = compile_plan(req)
    assert list(group_classes(plan).values()) == [(20_000_000, 20_000_000)]  # down, on the interface
    assert list(group_classes(plan, "rl-r0").values()) == [(5_000_000, 5_000_000)]  # up, on its IFB device
    links = [op for op in plan.ops if type(op).__name__ == "HtbClass" and op.dev == "r0"
             and op.classid & 0xFFFF >= 0x100]
    assert len(links) == 40  # each user its own link (its cap: the class's ceil, or its netem stage's rate)
    assert records.from_json(records.to_json(req)) == req  # the record keeps the cell


def test_the_command_line_cell_and_a_cell_of_one_direction():
    assert parse_cell("20mbit/5mbit", "--cell") == Cell("main", 20_000_000, 5_000_000)
    req = service.make_request("r0", hosts="198.18.1.2-198.18.1.11", per="host", rate="4mbit", mode="shape",
                               cell="20mbit")
    plan = compile_plan(req)
    assert list(group_classes(plan).values()) == [(20_000_000, 20_000_000)]
    assert list(group_classes(plan, "rl-r0").values()) == [(40_000_000, 100_000_000)]  # up: not shared


def test_a_cells_capacity_changes_in_place():
    old, new = compile_plan(phones()), compile_plan(phones(PHONES.replace('"20mbit"', '"10mbit"')))
    changes = diff.in_place(old, new)
    assert changes is not None and len(changes) == 1
    assert (changes[0].op.rate_bps, changes[0].op.ceil_bps) == (10_000_000, 10_000_000)


@pytest.mark.parametrize("text,message", [
    (PHONES.replace('cell = "tower-1"', 'cell = "tower-9"'),
     "scenario phones.toml: [cohort.phones] cell: tower-9 is not a cell of the scenario (tower-1)"),
    (PHONES.replace('down = "20mbit"\nup = "5mbit"\n', ''),
     "scenario phones.toml: [cell.tower-1]: no capacity (give down, up or both"),
    (PHONES.replace('down = "20mbit"', 'down = "fast"'), "scenario phones.toml: [cell.tower-1] down: 'fast'"),
    (PHONES.replace('up = "5mbit"', 'up = "5mbit"\nshare = "fair"'),
     "scenario phones.toml: [cell.tower-1]: 'share' is not a field (allowed: blackhole, description, down, schedule, source, "
     "trace_down, trace_scale, trace_up, up)"),
    (PHONES.replace('down = "20mbit"', f'down = "20mbit"\nschedule = "{WAVE}"'),
     "scenario phones.toml: [cell.tower-1]: down and schedule both give its down capacity; give one"),
    (PHONES.replace('up = "5mbit"', 'trace_up = "lte-drive.up"\nup = "5mbit"'),
     "scenario phones.toml: [cell.tower-1]: up and trace_up both give its up capacity; give one"),
    (PHONES.replace('up = "5mbit"', 'trace_scale = "0.5"'),
     "scenario phones.toml: [cell.tower-1] trace_scale: there is no trace or schedule for it to apply to"),
    (PHONES.replace('down = "20mbit"\nup = "5mbit"', 'schedule = "no-such-schedule"'),
     "scenario phones.toml: [cell.tower-1] schedule no-such-schedule:"),
    (PHONES.replace('description = "one LTE cell\'s downlink and uplink"\n', ''),
     "scenario phones.toml: [cell.tower-1]: needs a description or its source"),
    (PHONES + '[cohort.laptops]\ndescription = "x"\nhosts = "198.18.1.50"\nprofile = "dsl"\ncell = "tower-1"\n',
     "cell tower-1: cohorts phones (ethernet) and laptops (atm) are of different link layers"),
    (PHONES.replace('"198.18.1.2-198.18.1.41"', '"198.18.0.0/19"'),
     "cell tower-1: 8,192 links, more than a cell holds (4,096 each way"),
])
def test_a_bad_cell_is_one_line_naming_the_file_the_cell_and_the_field(text, message):
    with pytest.raises(UsageError) as err:
        phones(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_a_cell_with_a_scenario_is_refused_on_the_command_line():
    with pytest.raises(UsageError, match=r"^--cell: a scenario names its cells"):
        phones(cell="20mbit")


LAPTOPS = """
[cohort.office]
description = "an office on its own line, in no cell"
hosts = "198.18.2.2"
rate = "10mbit"
[cohort.laptops]
description = "laptops under the same tower, each its own link"
hosts = "198.18.1.100-198.18.1.109"
rate = "20mbit"
cell = "tower-1"
"""


def test_cohorts_of_one_cell_share_its_one_group_each_link_its_own_class():
    req = phones(PHONES.replace('profile = "4g"', 'rate = "4mbit"') + LAPTOPS)
    assert [c.name for c in req.cohorts] == ["phones", "laptops", "office"]  # a cell's cohorts follow one another
    plan = compile_plan(req)
    groups = group_classes(plan)
    assert len(groups) == 2 and (20_000_000, 20_000_000) in groups.values()  # the cell's group, the office's
    cell_qdisc = next(op.handle for op in plan.ops if type(op).__name__ == "HtbQdisc" and op.dev == "r0"
                      and group_classes(plan).get(op.parent) == (20_000_000, 20_000_000))
    in_cell = [op for op in plan.ops if type(op).__name__ == "HtbClass" and op.dev == "r0"
               and op.parent == cell_qdisc | 1]
    assert [op.ceil_bps for op in in_cell] == [4_000_000] * 40 + [20_000_000] * 10
    by_host = {str(f.host): f.classid for f in plan.flows if f.direction == "dest"}
    assert by_host["198.18.1.100"] >> 16 == by_host["198.18.1.2"] >> 16 == cell_qdisc >> 16
    assert by_host["198.18.2.2"] >> 16 != cell_qdisc >> 16


def test_a_cell_may_hold_more_links_than_a_group():
    req = phones(PHONES.replace('"198.18.1.2-198.18.1.41"', '"198.18.1.0/23"').replace('profile = "4g"',
                                                                                    'rate = "1mbit"'))
    plan = compile_plan(req)
    assert list(group_classes(plan).values()) == [(20_000_000, 20_000_000)]
    assert len({f.classid for f in plan.flows if f.direction == "dest"}) == 512


def test_a_mix_in_a_cell_puts_every_cohort_of_the_mix_in_it():
    req = service.make_request("r0", hosts="198.18.1.2-198.18.1.21", mix="modem-28k8:50%,modem-56k:50%",
                               cell="1mbit", mode="shape")
    assert {c.cell for c in req.cohorts} == {Cell("main", 1_000_000, None)}


TRACED = PHONES.replace('down = "20mbit"\nup = "5mbit"', f'schedule = "{WAVE}"')


def test_a_traced_cell_is_its_class_at_the_schedules_mean_and_a_gate_above_its_users():
    """A cell whose capacity follows a schedule: its class starts at the schedule's mean
    (7.5 Mbit/s), a token bucket wide open sits between it and its users' group, and its
    users' links are those of a cell of fixed capacity.  The record keeps its schedule."""
    from ratelimit.driver import follow
    from ratelimit.plan.gate import OPEN_BPS
    req, fixed = phones(TRACED), phones()
    assert req.cohorts[0].cell.trace.down.name == "cell-wave.toml" and follow.traced(req)
    plan = compile_plan(req)
    (group, rates), = group_classes(plan).items()
    assert rates == (7_500_000, 7_500_000)
    gate, = [op for op in plan.ops if type(op).__name__ == "TbfQdisc" and op.dev == "r0"]
    assert gate.parent == group and gate.rate_bps == OPEN_BPS
    assert [op for op in plan.ops if type(op).__name__ == "HtbQdisc" and op.parent == gate.handle | 1]

    def users(p):
        return [(op.rate_bps, op.ceil_bps, op.burst_bytes) for op in p.ops if type(op).__name__ == "HtbClass"
                and op.dev == "r0" and op.classid & 0xFFFF >= 0x100]
    assert users(plan) == users(compile_plan(fixed))
    assert records.from_json(records.to_json(req)) == req


def test_a_traced_cells_cohorts_carry_one_start_which_a_reapply_keeps():
    from ratelimit.traces.tracespec import stamped
    req = stamped(phones(TRACED + LAPTOPS.replace('rate = "20mbit"', 'rate = "2mbit"')), None, 1000)
    starts = {c.cell.trace.started_ms for c in req.cohorts if c.cell is not None}
    assert starts == {1000} and req.traced_start_ms == 1000
    again = stamped(phones(TRACED.replace('"198.18.1.2-198.18.1.41"', '"198.18.1.2-198.18.1.31"')), req, 5000)
    assert again.cohorts[0].cell.trace.started_ms == 1000  # the same schedule: not restarted
    other = stamped(phones(TRACED.replace("schedule = ", 'trace_scale = "0.5"\nschedule = ')), req, 5000)
    assert other.cohorts[0].cell.trace.started_ms == 5000


def test_a_traced_cells_steps_follow_its_schedule_and_shut_its_gate_while_dark():
    """cell-wave.toml, in steps of 100 ms: 12 Mbit/s, 6, 12, then a dark second.  While dark
    the gate shuts and the class keeps one frame of burst, and in the window its gate
    opens in; its burst of 10 ms of its rate comes back after."""
    import time
    from ratelimit.driver.cells import CellSteps, traced_cells
    from ratelimit.plan.gate import OPEN_BPS, SHUT_BPS
    from ratelimit.profiles import traced
    from ratelimit.traces.tracespec import stamped
    req = stamped(phones(TRACED), None, int(time.time() * 1000))
    plan = compile_plan(req)
    cells = traced_cells(plan, traced.load_all(req))
    assert [(c.cell, c.direction) for c in cells] == [("tower-1", "dest"), ("tower-1", "source")]
    steps = CellSteps(cells[:1], 100)

    def step(k, resend=False):
        return [(type(ch.op).__name__, ch.op.rate_bps, getattr(ch.op, "burst_bytes", None))
                for ch in steps.changes(k, resend)]
    assert step(0, resend=True) == [("HtbClass", 12_000_000, 15_000), ("TbfQdisc", OPEN_BPS, 1514)]
    assert step(1) == [] and step(10) == [("HtbClass", 6_000_000, 7_500)]
    assert step(20) == [("HtbClass", 12_000_000, 15_000)]
    assert step(30) == [("TbfQdisc", SHUT_BPS, 1514), ("HtbClass", 12_000_000, 1514)]
    assert steps.shut_count() == 1 and step(31) == []
    assert step(40) == [("TbfQdisc", OPEN_BPS, 1514)] and steps.reopened == {"r0"}
    assert step(41) == [("HtbClass", 12_000_000, 15_000)]


def test_a_traced_cells_capacity_over_a_window_is_what_the_dashboard_reads_it_against():
    """The dashboard's source reads a traced cell against its schedule's capacity over the
    poll (``TraceRates.cells_bps``), not its mean; the summary says what it follows."""
    from array import array
    from ratelimit.driver.tracerates import TraceRates
    from ratelimit.spec.summary import describe, summary
    from ratelimit.traces.tracespec import stamped
    from webui.digest import cells
    req = stamped(phones(TRACED), None, 1_000_000)
    rates = TraceRates(req, ())
    assert rates.cells_bps(1000.5, 1001.5) == {("tower-1", "dest"): 9_000_000, ("tower-1", "source"): 9_000_000}
    assert rates.cells_bps(1003.0, 1004.0)[("tower-1", "dest")] == 0  # dark
    applied = summary(req)
    assert applied["cohorts"][0]["cell"]["down_bps"] == 7_500_000
    assert "in cell tower-1 (down 7500kbit, up 7500kbit: the mean of schedule cell-wave.toml)" in describe(applied)
    cols = {"throughput_bps": array("d", [3e6] * 3), "backlog_bytes": array("q", [0] * 3)}
    runs = (("phones", "", "dest", 0, 3),)
    assert cells(cols, runs, applied)["tower-1"]["dest"]["utilisation"] == 1.2  # against the mean
    over = cells(cols, runs, applied, {("tower-1", "dest"): 9_000_000})["tower-1"]["dest"]
    assert over["capacity_bps"] == 9_000_000 and over["utilisation"] == 1.0
    assert cells(cols, runs, applied, {("tower-1", "dest"): 0})["tower-1"]["dest"]["utilisation"] is None
