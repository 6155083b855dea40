"""netem's slot (``spec.macslot``): how it is given, refused, compiled and recorded.  What the
kernel does with it is measured in tests/kernel/test_slot_kernel.py."""

import dataclasses
import os
import subprocess
import uuid

import pytest

from ratelimit import service
from ratelimit.errors import FieldError, RatelimitError, UsageError
from ratelimit.kernel import distfile
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.shaping import NetemQdisc, netem_groups
from ratelimit.profiles import catalog
from ratelimit.spec.macslot import check, from_record, MAX_JITTER_US, Slot, parse_slot
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
    ("min=5ms x=1", "--slot: x='1' is not a slot parameter (allowed: min, max, packets, bytes, distribution, delay, "
                    "jitter)"),
    ("min=5ms bytes=3gb", "--slot: bytes='3gb' is out of range"),
    ("5ms", "--slot: '5ms' is not a slot (e.g. 'min=2ms [max=8ms] [packets=32] [bytes=64kb]', or drawn from a table: "
            "'distribution=pareto delay=5ms jitter=2ms [packets=32] [bytes=64kb]')"),
    # drawn from a table
    ("distribution=uniform delay=5ms jitter=2ms",
     "--slot: distribution='uniform' is not a table tc ships (normal, pareto, paretonormal, experimental)"),
    ("distribution=normal delay=5ms jitter=0ms", "--slot: jitter='0ms' is out of range (above 0, at most 2147483us"),
    ("distribution=normal delay=5ms jitter=2200ms",
     "--slot: jitter='2200ms' is out of range (above 0, at most 2147483us: tc refuses 0, the kernel caps it at "
     "2**31-1 ns)"),
    ("distribution=normal delay=11s jitter=2ms", "--slot: delay='11s' is out of range (0 to 10s)"),
    ("min=2ms distribution=pareto delay=5ms jitter=2ms",
     "--slot: distribution='pareto' cannot go with min='2ms' (a slot is either 'min=2ms"),
    ("max=8ms jitter=2ms", "--slot: jitter='2ms' cannot go with max='8ms'"),
    ("distribution=pareto jitter=2ms", "--slot: a slot drawn from a distribution needs delay, the mean time between"),
    ("distribution=pareto delay=5ms", "--slot: a slot drawn from a distribution needs jitter"),
    ("delay=5ms jitter=2ms", "--slot: a slot drawn from a distribution needs distribution, the table the gaps are "
                             "drawn from: normal, pareto, paretonormal or experimental"),
    ("distribution=normal delay=soon jitter=2ms", "--slot: delay='soon' is not a time with a unit"),
])
def test_a_bad_slot_gets_one_line_naming_the_field_and_what_is_allowed(given, message):
    with pytest.raises(UsageError) as err:
        parse_slot(given, "--slot")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_a_slot_drawn_from_a_table_as_text_and_as_a_table():
    drawn = Slot(0, 0, 32, 65536, "pareto", 5000, 2000)
    assert parse_slot("distribution=pareto delay=5ms jitter=2ms packets=32 bytes=64kb") == drawn
    assert parse_slot({"distribution": "pareto", "delay": "5ms", "jitter": "2ms", "packets": 32,
                       "bytes": "64kb"}) == drawn
    assert drawn.tc_words() == "slot distribution pareto 5ms 2ms packets 32 bytes 65536"
    assert drawn.text() == "distribution=pareto delay=5ms jitter=2ms packets=32 bytes=65536b"
    for slot in (drawn, Slot(0, 0, dist="normal", dist_delay_us=0, dist_jitter_us=MAX_JITTER_US),
                 Slot(0, 0, dist="experimental", dist_delay_us=10_000_000, dist_jitter_us=1)):
        assert parse_slot(slot.text()) == slot
        check(slot)
    assert parse_slot("distribution=normal delay=0ms jitter=1500us").tc_words() == "slot distribution normal 0ms 1500us"


@pytest.mark.parametrize("slot", [
    Slot(2000, 2000, dist="normal", dist_delay_us=1000, dist_jitter_us=1000),  # min/max with a table
    Slot(0, 0, dist="normal", dist_delay_us=1000, dist_jitter_us=0),
    Slot(0, 0, dist="normal", dist_delay_us=1000, dist_jitter_us=MAX_JITTER_US + 1),
    Slot(0, 0, dist="uniform", dist_delay_us=1000, dist_jitter_us=1000),
    Slot(0, 0, dist=None, dist_delay_us=1000, dist_jitter_us=1000),
    Slot(2000, 2000, dist_delay_us=1000),  # a table's numbers without a table
    Slot(0, 0),
])
def test_a_slot_no_parse_could_make_is_refused_by_check(slot):
    with pytest.raises(FieldError, match="^--slot: .* is not a slot"):
        check(slot)


def test_a_record_written_before_drawn_slots_reads_as_a_uniform_slot():
    assert from_record({"min_us": 2000, "max_us": 8000, "packets": 32, "bytes_": 0}) == Slot(2000, 8000, 32, 0)


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


def test_a_drawn_slot_is_a_netem_stage_and_a_record_keeps_it():
    req = _request(slot="distribution=normal delay=20ms jitter=5ms packets=5")
    stages = [op for op in compile_plan(req).ops if isinstance(op, NetemQdisc)]
    assert stages and all("slot distribution normal 20ms 5ms packets 5" in op.tc() for op in stages)
    drawn = Slot(0, 0, 5, 0, "normal", 20_000, 5000)
    assert records.from_json(records.to_json(req)).only.down.slot == drawn
    for key, bad in (("dist", "gaussian"), ("dist_jitter_us", 0), ("min_us", 1000)):
        data = records.to_json(req)
        data["cohorts"][0]["down"]["slot"][key] = bad
        with pytest.raises(RatelimitError, match="slot"):
            records.request_from_json(data, "record")


def test_a_slot_table_given_up_rebuilds_the_stage_the_kernel_would_draw_from_it_in():
    """A change that leaves TCA_NETEM_SLOT_DIST out keeps the old table, and the kernel draws
    even a min/max slot's gaps from it: from a drawn slot to a plain one (or none) is a rebuild;
    from a plain slot to a drawn one, or one table for another, goes in place."""
    drawn = LinkParams(slot=parse_slot("distribution=pareto delay=5ms jitter=2ms"))
    assert netem_groups(drawn) == {"slot", "slot_dist"}
    assert netem_groups(LinkParams(slot=parse_slot("min=2ms"))) == {"slot"}
    plans = {name: compile_plan(_request(delay="10ms", **({"slot": slot} if slot else {})))
             for name, slot in (("drawn", "distribution=pareto delay=5ms jitter=2ms"),
                                ("other table", "distribution=normal delay=8ms jitter=1ms packets=4"),
                                ("plain", "min=2ms max=8ms"), ("none", None))}
    assert diff.in_place(plans["drawn"], plans["plain"]) is None
    assert diff.in_place(plans["drawn"], plans["none"]) is None
    assert diff.in_place(plans["plain"], plans["drawn"])
    assert diff.in_place(plans["drawn"], plans["other table"])


def test_the_tables_are_read_as_tc_reads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_LIB_DIR", str(tmp_path))
    (tmp_path / "normal.dist").write_text("# a table\n 1 -2 0x10\n\n010 70000 # the rest ignored 5\n-32768")
    assert distfile.table("normal") == bytes.fromhex("0100 feff 1000 0800 7011 0080")  # 70000 kept mod 2**16
    monkeypatch.delenv("TC_LIB_DIR")
    if not any(os.path.exists(path) for path in distfile.paths("pareto")):
        pytest.skip("tc's tables are not installed here")
    assert len(distfile.table("pareto")) == 2 * 4096  # tc's own, where tc looks


@pytest.mark.parametrize("content, why", [("# only a comment\n", "no numbers in it"),
                                          ("1 " * 16385, "16385 numbers, more than 16384")])
def test_a_table_tc_would_refuse_is_refused_naming_the_path(tmp_path, monkeypatch, content, why):
    monkeypatch.setenv("TC_LIB_DIR", str(tmp_path))
    (tmp_path / "pareto.dist").write_text(content)
    with pytest.raises(FieldError) as err:
        distfile.table("pareto")
    assert str(err.value) == (f"--slot: distribution=pareto has no table tc could read "
                              f"(looked at {tmp_path}/pareto.dist ({why}))")


def test_a_missing_table_is_named_with_every_path_looked_at(monkeypatch):
    monkeypatch.delenv("TC_LIB_DIR", raising=False)
    monkeypatch.setattr(distfile, "lib_dirs", lambda: ("/nonexistent/a", "/nonexistent/b/"))
    with pytest.raises(FieldError) as err:
        distfile.check_tables(compile_plan(_request(slot="distribution=paretonormal delay=5ms jitter=1ms")).ops)
    assert str(err.value) == ("--slot: distribution=paretonormal has no table tc could read (looked at "
                              "/nonexistent/a/paretonormal.dist (No such file or directory), "
                              "/nonexistent/b/paretonormal.dist (No such file or directory))")
    distfile.check_tables(compile_plan(_request(slot="min=2ms")).ops)  # a plain slot needs none


def test_a_drawn_slot_shows_in_the_summary_and_the_profiles_listing(tmp_path, monkeypatch, capsys):
    from ratelimit.cli.main import main
    from ratelimit.spec import summary
    text = "distribution=paretonormal delay=12ms jitter=3ms packets=4"
    assert f"slot {text}" in summary.describe(summary.summary(_request(slot=text)))
    (tmp_path / "bursty.toml").write_text('description = "drawn"\n[down]\nrate = "10mbit"\n'
                                          '[down.slot]\ndistribution = "normal"\ndelay = "20ms"\njitter = "5ms"\n'
                                          'packets = 5\n[up]\nrate = "1mbit"\nslot = "distribution=pareto delay=5ms '
                                          'jitter=2ms"\n')
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", str(tmp_path))
    assert catalog.load("bursty").down.slot == Slot(0, 0, 5, 0, "normal", 20_000, 5000)
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "slot distribution=normal delay=20ms jitter=5ms packets=5" in out
    assert "slot distribution=pareto delay=5ms jitter=2ms" in out


@pytest.fixture
def router(tmp_path, monkeypatch):
    """A namespace ``rlsd-...`` holding a veth pair (rlsd0, up), deleted at the end; a private
    state directory."""
    name = f"rlsd-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        for argv in (["link", "add", "rlsd0", "type", "veth", "peer", "name", "rlsd1"],
                     ["link", "set", "rlsd0", "up"], ["link", "set", "rlsd1", "up"]):
            subprocess.run(["ip", "-n", name, *argv], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.netns
def test_a_missing_table_is_refused_before_anything_changes(router, tmp_path, monkeypatch):
    from tcdump import tc_dump
    empty = tmp_path / "tc"
    empty.mkdir()
    monkeypatch.setenv("TC_LIB_DIR", str(empty))
    before = tc_dump(router, "rlsd0", "rl-rlsd0")
    req = dataclasses.replace(_request(slot="distribution=pareto delay=5ms jitter=2ms packets=8"),
                              interface="rlsd0", netns=router)
    with pytest.raises(FieldError) as err:
        service.apply(req)
    assert str(err.value) == (f"--slot: distribution=pareto has no table tc could read "
                              f"(looked at {empty}/pareto.dist (No such file or directory))")
    assert tc_dump(router, "rlsd0", "rl-rlsd0") == before


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
