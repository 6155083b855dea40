"""netem's slot (``spec.macslot``): how it is given, refused, compiled and recorded.  What the
kernel does with it is measured in tests/kernel/test_slot_kernel.py."""

import pytest

from ratelimit import service
from ratelimit.errors import RatelimitError, UsageError
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.shaping import NetemQdisc, netem_groups
from ratelimit.profiles import catalog
from ratelimit.spec.macslot import Slot, parse_slot
from ratelimit.spec.model import LinkParams
from ratelimit.state import records


def test_a_slot_as_text_and_as_a_table():
    assert parse_slot("min=2ms max=8ms packets=32 bytes=64kb") == Slot(2000, 8000, 32, 65536)
    assert parse_slot({"min": "20ms", "packets": 5}) == Slot(20_000, 20_000, 5, 0)  # max left out: min
    assert Slot(2000, 8000, 32, 65536).tc_words() == "slot 2ms 8ms packets 32 bytes 65536"


@pytest.mark.parametrize("given, message", [
    ("max=2ms", "--slot: a slot needs min"),
    ("min=5ms max=2ms", "--slot: max='2ms' is below min (5ms)"),
    ("min=0ms", "--slot: min='0ms' is out of range (above 0, at most 10s)"),
    ("min=11s", "--slot: min='11s' is out of range"),
    ("min=5ms packets=0", "--slot: packets='0' is not a number of packets (1 to 2147483647)"),
    ("min=5ms packets=many", "--slot: packets='many' is not a number of packets"),
    ("min=5ms packets=\u0663", "--slot: packets='\u0663' is not a number of packets"),  # an Arabic-Indic 3
    ("min=5ms min=6ms", "--slot: 'min=5ms min=6ms' is not a slot"),
    ("min=5ms x=1", "--slot: x='1' is not a slot parameter (allowed: min, max, packets, bytes)"),
    ("min=5ms bytes=3gb", "--slot: bytes='3gb' is out of range"),
    ("5ms", "--slot: '5ms' is not a slot (e.g. 'min=2ms [max=8ms] [packets=32] [bytes=64kb]')"),
])
def test_a_bad_slot_gets_one_line_naming_the_field_and_what_is_allowed(given, message):
    with pytest.raises(UsageError) as err:
        parse_slot(given, "--slot")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def _request(**kw):
    return service.make_request("eth0", hosts="198.18.1.2", ports="80", mode="shape", rate="10mbit", **kw)


def test_a_slot_is_a_netem_stage_and_a_record_keeps_it():
    req = _request(slot="min=2ms max=8ms packets=32")
    stages = [op for op in compile_plan(req).ops if isinstance(op, NetemQdisc)]
    assert stages and all("slot 2ms 8ms packets 32" in op.tc() for op in stages)
    assert records.from_json(records.to_json(req)).only.down.slot == Slot(2000, 8000, 32, 0)
    data = records.to_json(req)
    data["cohorts"][0]["down"]["slot"]["max_us"] = 1
    with pytest.raises(RatelimitError, match="slot"):
        records.request_from_json(data, "record")


def test_a_slot_taken_away_rebuilds_the_stage_the_kernel_would_keep_it_in():
    """A netem change that leaves the slot out keeps it, so a slot cannot be taken away in place."""
    assert "slot" in netem_groups(LinkParams(slot=Slot(2000, 2000)))
    before, after = compile_plan(_request(delay="10ms", slot="min=2ms")), compile_plan(_request(delay="10ms"))
    assert diff.in_place(before, after) is None
    changed = compile_plan(_request(delay="10ms", slot="min=4ms packets=3"))
    assert diff.in_place(before, changed)  # one slot for another: in place


@pytest.mark.parametrize("name, down, up, cited", [
    ("wifi-aggregation", "slot 800us 10ms packets 42 bytes 65536", "slot 800us 10ms packets 42 bytes 65536",
     "836af83b54e3"),
    ("lte-scheduled", "slot 1ms 1ms", "slot 1ms 10ms", "TS 36.213 Table 10.1.5-1"),
])
def test_the_shipped_slot_profiles_compile_to_their_cited_slots(name, down, up, cited):
    profile = catalog.load(name)
    assert cited in profile.source
    req = service.make_request("eth0", hosts="198.18.1.2", ports="80", profile=name)
    stages = [op.tc() for op in compile_plan(req).ops if isinstance(op, NetemQdisc)]
    assert len(stages) == 2
    assert sum(down in s for s in stages) >= 1 and sum(up in s for s in stages) >= 1
    assert not profile.down.jitter_us and not profile.up.jitter_us  # the slots make the variation
