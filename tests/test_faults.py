"""Faults, pure: a blackholed link is one whose queues hold nothing, said by the command
line, a scenario's cohort or cell and the API, kept by the record, and a change in place
either way."""

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from ratelimit import SOURCE_ROOT, service
from ratelimit.errors import UsageError
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.profiles import scenario
from ratelimit.spec.summary import describe, summary
from ratelimit.state import records

SCHEDULE = Path(__file__).resolve().parent / "cases" / "traces" / "square.toml"


def queues(plan, dev="r0") -> list:
    """The links' queues: (kind, limit) of each fifo, netem stage and gate."""
    out = []
    for op in plan.ops:
        kind = type(op).__name__
        if kind in ("FifoQdisc", "NetemQdisc", "TbfQdisc") and op.dev == dev:
            out.append((kind, getattr(op, "limit", None) or getattr(op, "limit_pkts", None)
                        or getattr(op, "limit_bytes", 0)))
    return out


@pytest.mark.parametrize("options", [
    dict(rate="1mbit"),  # a byte fifo
    dict(profile="4g"),  # a netem stage
    dict(schedule=str(SCHEDULE), phase="same", rate="1mbit"),  # a traced link's gate
])
def test_a_blackholed_link_is_its_queues_at_a_limit_of_0_and_a_change_in_place(options):
    lit = service.make_request("r0", hosts="198.18.1.2,198.18.1.3", per="host", mode="shape", **options)
    dark = service.make_request("r0", hosts="198.18.1.2,198.18.1.3", per="host", blackhole=True, **options)
    assert dark.mode == "shape" and dark.cohorts[0].dark  # --blackhole alone means shape mode
    before, after = compile_plan(lit), compile_plan(dark)
    assert queues(before) and all(limit > 0 for _, limit in queues(before))
    assert [kind for kind, _ in queues(after)] == [kind for kind, _ in queues(before)]
    assert all(limit == 0 for _, limit in queues(after))
    changes = diff.in_place(before, after)
    assert changes is not None and len(changes) == 2 * len(queues(before))  # both directions' queues, nothing else
    assert diff.in_place(after, before) is not None
    assert records.from_json(records.to_json(dark)) == dark
    assert "BLACKHOLED (every packet dropped)" in describe(summary(dark))


CELL = """
[cell.tower]
description = "a tower that went dark"
down = "20mbit"
blackhole = true
[cohort.phones]
description = "phones"
hosts = "198.18.1.2-198.18.1.5"
rate = "4mbit"
cell = "tower"
[cohort.laptops]
description = "laptops under the same tower"
hosts = "198.18.1.10-198.18.1.11"
rate = "8mbit"
cell = "tower"
[cohort.office]
description = "an office on its own line"
hosts = "198.18.2.2"
rate = "10mbit"
blackhole = {office}
"""


def test_a_blackholed_cell_darkens_every_cohort_in_it_and_a_cohort_may_be_dark_alone():
    req = service.make_request("r0", scenario=scenario.parse(CELL.format(office="false")))
    assert [(c.name, c.dark) for c in req.cohorts] == [("phones", True), ("laptops", True), ("office", False)]
    assert queues(compile_plan(req))[-1][1] > 0  # the office's link, last
    req = service.make_request("r0", scenario=scenario.parse(CELL.format(office="true")))
    assert all(c.dark for c in req.cohorts)


@pytest.mark.parametrize("make,message", [
    (lambda: service.make_request("r0", hosts="198.18.1.2", ports="80", rate="1mbit", mode="police", blackhole=True),
     "--blackhole: needs --mode shape"),
    (lambda: scenario.parse(CELL.format(office='"yes"')), "scenario: [cohort.office] blackhole: yes is not true or false"),
    (lambda: scenario.parse(CELL.replace("blackhole = true", "blackhole = 1").format(office="false")),
     "scenario: [cell.tower] blackhole: 1 is not true or false"),
])
def test_a_bad_blackhole_is_one_line(make, message):
    with pytest.raises(UsageError) as err:
        make()
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_a_plan_that_lasts_records_its_end_which_a_recorded_request_keeps():
    from ratelimit.service import expiry
    req = service.make_request("r0", hosts="198.18.1.2", per="host", rate="1mbit", mode="shape", lasting="10m")
    assert req.lasting_ms == 600_000 and req.expires_ms is None
    applied = expiry.stamped(req, 1_000_000)
    assert applied.expires_ms == 1_600_000 and expiry.stamped(applied, 5_000_000).expires_ms == 1_600_000
    assert not expiry.ended(applied, 1_599_999) and expiry.ended(applied, 1_600_000)
    assert records.from_json(records.to_json(applied)) == applied
    assert summary(applied)["expires_ms"] == 1_600_000
    from ratelimit.cli.listing import ends
    assert ends(1_600_000, 1000.0, True) == "ends in 10m 00s (then removed)"
    assert ends(1_600_000, 1000.0, False).endswith("its watcher is not running: start it with 'ratelimit expire'")
    assert ends(1_600_000, 1612.0, False).startswith("its end passed 12s ago, and it was not removed")
    assert expiry.restored(applied) is None  # nothing before it: removed at its end
    before = service.make_request("r0", hosts="198.18.1.2", per="host", rate="2mbit", mode="shape")
    over = expiry.stamped(req, 1_000_000, installed=dataclasses.replace(before, generation=1))
    assert expiry.restored(over) == before and summary(over)["restores"]
    assert ends(1_600_000, 1000.0, True, restores=True) == "ends in 10m 00s (then the plan before it comes back)"


def test_where_systemd_runs_the_watcher_is_a_unit_that_comes_back_after_kill_9(tmp_path, monkeypatch):
    """The watcher's systemd-run: a unit named after the namespace and interface (escaped,
    so no two names meet), restarted on a signal (kill -9: the Vagrant lab's expire stage
    runs it), collected when it ends, logging beside the record, with our state directory."""
    from ratelimit.service import expiry
    assert expiry.unit_name(None, "eth1") == "ratelimit-expire-eth1.service"
    assert expiry.unit_name("lab-a", "r0") == r"ratelimit-expire-lab\x2da-r0.service"
    assert expiry.unit_name("lab", "a-r0") != expiry.unit_name("lab-a", "r0")
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path))
    argv = expiry.systemd_argv("lab", "r0", ["expire", "--interface", "r0", "--netns", "lab"], tmp_path / "r0.log")
    assert argv[:4] == ["systemd-run", r"--unit=ratelimit-expire-lab-r0.service", "--collect", "--quiet"]
    assert {"--property=Restart=on-abnormal", "--property=RestartSec=100ms", f"--setenv=RATELIMIT_STATE_DIR={tmp_path}",
            f"--property=StandardOutput=append:{tmp_path / 'r0.log'}"} <= set(argv)
    assert argv[argv.index("--") + 1:] == [sys.executable, "-m", "ratelimit", "expire", "--interface", "r0",
                                           "--netns", "lab"]
    path = next(a for a in argv if a.startswith("--setenv=PYTHONPATH=")).split("=", 2)[2].split(os.pathsep)
    assert path[0] == str(SOURCE_ROOT)


@pytest.mark.parametrize("value,message", [
    ("0", "--for: '0' is not a duration (a number and a unit: 90s, 10m, 2h, 1d; above 0, at most 30 days)"),
    ("0s", "--for: '0s' is out of range (above 0, at most 30 days)"),
    ("31d", "--for: '31d' is out of range"),
    ("soon", "--for: 'soon' is not a duration"),
])
def test_a_bad_duration_is_one_line(value, message):
    with pytest.raises(UsageError) as err:
        service.make_request("r0", hosts="198.18.1.2", per="host", rate="1mbit", mode="shape", lasting=value)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_a_scenario_says_how_long_its_plan_lasts():
    text = 'for = "90s"\n[cohort.a]\ndescription = "x"\nhosts = "198.18.1.2"\nrate = "1mbit"\n'
    assert service.make_request("r0", scenario=scenario.parse(text)).lasting_ms == 90_000
    with pytest.raises(UsageError, match=r"^scenario s\.toml: for: '1 week' is not a duration"):
        service.make_request("r0", scenario=scenario.parse(text.replace('"90s"', '"1 week"'), "scenario s.toml"))
