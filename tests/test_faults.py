"""Faults, pure: a blackholed link is one whose queues hold nothing, said by the command
line, a scenario's cohort or cell and the API, kept by the record, and a change in place
either way."""

from pathlib import Path

import pytest

from ratelimit import service
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
