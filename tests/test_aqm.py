"""Managed queues, pure: how an AQM is given and refused, where a plan puts it (the link's
leaf, or netem's child behind a delay stage), and how it changes in place.  What the kernel
does with it is in tests/kernel/test_aqm_kernel.py."""

import pytest

from ratelimit import service
from ratelimit.errors import FieldError, RatelimitError, UsageError
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.ops import Change
from ratelimit.plan.shaping import AqmQdisc, FifoQdisc, HtbClass, NetemQdisc
from ratelimit.profiles import catalog, scenario
from ratelimit.spec.aqm import Aqm, parse_aqm
from ratelimit.state import records


def _request(**kw):
    args = dict(hosts="198.18.1.2", ports="5000-5001", rate="9mbit", direction="dest")
    return service.make_request("eth0", **{**args, **kw})


def _ops(req, kind):
    return [op for op in compile_plan(req).ops if type(op) is kind]


def test_text_and_table_give_the_same_queue_and_tc_words():
    text = parse_aqm("fq_codel target=2ms, interval=40ms limit=500 ecn=off flows=64")
    table = parse_aqm({"discipline": "fq_codel", "target": "2ms", "interval": "40ms", "limit": 500, "ecn": False,
                       "flows": 64})
    assert text == table == Aqm("fq_codel", 2000, 40_000, 500, False, 64)
    assert text.tc_words() == "fq_codel limit 500 target 2ms interval 40ms noecn flows 64"
    assert parse_aqm(text.text()) == text


@pytest.mark.parametrize("given, full", [
    ("fq_codel", "fq_codel target=5ms interval=100ms ecn=on flows=1024"),
    ("codel ecn=on", "codel target=5ms interval=100ms ecn=on"),
    ("pie", "pie target=15ms ecn=off"),
    ("cake rtt=20ms", "cake rtt=20ms"),
    ("droptail", "droptail"),
    ("fq_codel ecn=off", "fq_codel target=5ms interval=100ms ecn=off flows=1024"),
])
def test_a_plan_gives_every_parameter_the_kernel_would_default(given, full):
    assert parse_aqm(given).full().text() == full


@pytest.mark.parametrize("value, message", [
    ("red", "--aqm: 'red' is not a discipline (allowed: droptail, fq_codel, codel, pie, cake)"),
    ("codel flows=64", "--aqm: flows='64' is not a parameter of codel (allowed: target, interval, limit, ecn)"),
    ("fq_codel target=0ms", "--aqm: target='0ms' is out of range (above 0, at most 10s)"),
    ("fq_codel target=11s", "--aqm: target='11s' is out of range (above 0, at most 10s)"),
    ("fq_codel target=fast", "--aqm: target='fast' is not"),
    ("fq_codel limit=0", "--aqm: limit='0' is not a whole number from 1 to 1000000"),
    ("fq_codel flows=70000", "--aqm: flows='70000' is not a whole number from 1 to 65536"),
    ("fq_codel ecn=maybe", "--aqm: ecn='maybe' is not on or off"),
    ("codel target=50ms interval=10ms", "--aqm: interval='10ms' is below target (50ms)"),
    ("fq_codel target=5ms target=6ms", "--aqm: 'fq_codel target=5ms target=6ms' is not a managed queue"),
    ("droptail limit=10", "--aqm: limit='10' is not a parameter of droptail (allowed: none)"),
    ("", "--aqm: '' is not a discipline"),
])
def test_a_bad_queue_is_one_line_naming_the_option_the_value_and_what_is_allowed(value, message):
    with pytest.raises(FieldError) as err:
        _request(aqm=value)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_table_without_a_discipline_is_refused():
    with pytest.raises(UsageError, match=r"^--aqm: a managed queue needs its discipline"):
        parse_aqm({"target": "5ms"})


def test_without_a_delay_the_queue_is_the_link_classes_leaf_and_the_class_is_the_bottleneck():
    req = _request(aqm="codel target=3ms", queue="100p", ports="5000")
    assert req.mode == "shape"  # an AQM alone means shape mode, as a blackhole does
    (leaf,) = _ops(req, AqmQdisc)
    link_class = next(op for op in _ops(req, HtbClass) if op.classid == leaf.parent)
    assert link_class.rate_bps == link_class.ceil_bps == 9_000_000
    assert leaf.limit_pkts == 100 and leaf.aqm == parse_aqm("codel target=3ms").full()
    assert not _ops(req, FifoQdisc) and not _ops(req, NetemQdisc)


def test_behind_a_delay_the_queue_is_netems_child_and_netem_only_delays():
    req = _request(aqm="fq_codel limit=300", delay="20ms", queue="50ms", ports="5000")
    (stage,), (leaf,) = _ops(req, NetemQdisc), _ops(req, AqmQdisc)
    link_class = next(op for op in _ops(req, HtbClass) if op.classid == stage.parent)
    assert link_class.ceil_bps == 9_000_000  # the class shapes: the AQM's queue builds under it
    assert leaf.parent == stage.handle | 1 and leaf.handle != stage.handle
    assert stage.rate_bps == req.bandwidth_bps  # in order, at the device's pace
    in_flight = req.bandwidth_bps * 0.020 / 8 / req.line_mtu_bytes(req.only)
    assert stage.limit_pkts == int(in_flight) + 1
    assert leaf.limit_pkts == 300  # its own limit over the link's queue
    assert "qdisc add dev eth0 parent 100:1 handle 101: fq_codel limit 300 target 5ms" in leaf.tc()


def test_the_limit_is_the_links_queue_in_packets_unless_the_aqm_gives_one():
    req = _request(aqm="pie", queue="100ms")
    (leaf,) = _ops(req, AqmQdisc)[:1]
    assert leaf.limit_pkts == req.queue_packets(req.only.down, 9_000_000, req.only) == 75


def test_droptail_is_todays_queue():
    assert compile_plan(_request(aqm="droptail", mode="shape")).ops == compile_plan(_request(mode="shape")).ops


def test_a_profile_gives_it_as_a_queue_table_or_an_aqm_key(tmp_path):
    path = tmp_path / "home.toml"
    path.write_text('[down]\nrate = "20mbit"\nqueue = { discipline = "fq_codel", target = "5ms" }\n'
                    '[up]\nrate = "2mbit"\naqm = "cake rtt=50ms"\n')
    prof = catalog.parse_file(path)
    assert prof.down.aqm == parse_aqm("fq_codel target=5ms") and prof.down.queue is None
    assert prof.up.aqm == Aqm("cake", rtt_us=50_000)
    path.write_text('[down]\nrate = "20mbit"\nqueue = { discipline = "codel", flows = 8 }\n')
    with pytest.raises(FieldError, match=r"\[down\] queue: flows=8 is not a parameter of codel"):
        catalog.parse_file(path)


def test_a_command_line_aqm_is_over_a_scenarios_cohorts():
    text = ('[cohort.phones]\ndescription = "phones"\nprofile = "4g"\nhosts = "198.18.1.2"\n'
            'queue = { discipline = "pie" }\n')
    req = service.make_request("eth0", scenario=scenario.parse(text, "scenario t.toml"))
    assert req.cohorts[0].down.aqm == Aqm("pie")
    over = service.make_request("eth0", scenario=scenario.parse(text, "scenario t.toml"), aqm="droptail")
    assert over.cohorts[0].down.aqm == Aqm("droptail")


@pytest.mark.parametrize("options, message", [
    (dict(mode="police"), "--aqm: fq_codel needs --mode shape"),
    (dict(profile="4g", schedule="train", rate=None), "--aqm: fq_codel on a link that follows a trace"),
])
def test_a_queue_it_cannot_manage_is_refused(options, message):
    with pytest.raises(UsageError, match=f"^{message}"):
        compile_plan(_request(aqm="fq_codel", **options))


def test_a_blackholed_cake_without_a_delay_is_refused_and_others_shut_in_place():
    with pytest.raises(UsageError, match="^--blackhole: a cake queue has no packet limit"):
        compile_plan(_request(aqm="cake", blackhole=True))
    for extra in ({}, {"delay": "20ms"}):
        lit, dark = compile_plan(_request(aqm="fq_codel", **extra)), compile_plan(_request(aqm="fq_codel",
                                                                                           blackhole=True, **extra))
        changes = diff.in_place(lit, dark)
        assert changes and all(type(c) is Change and c.op.limit_pkts == 0 for c in changes)


def test_new_parameters_change_in_place_and_another_discipline_or_flows_rebuild():
    old = compile_plan(_request(aqm="fq_codel"))
    changes = diff.in_place(old, compile_plan(_request(aqm="fq_codel target=2ms ecn=off")))
    assert changes and {type(c.op) for c in changes} == {AqmQdisc}
    assert changes[0].tc().startswith("qdisc change dev eth0 parent fffe:100 handle 100: fq_codel")
    assert diff.in_place(old, compile_plan(_request(aqm="codel"))) is None
    assert diff.in_place(old, compile_plan(_request(aqm="fq_codel flows=64"))) is None


def test_a_record_keeps_the_queue_and_a_tampered_one_is_refused():
    req = _request(aqm="fq_codel target=2ms ecn=off", delay="10ms")
    data = records.to_json(req)
    assert records.from_json(data).only.down.aqm == req.only.down.aqm
    data["cohorts"][0]["down"]["aqm"]["target_us"] = -5
    with pytest.raises(RatelimitError, match="aqm"):
        records.request_from_json(data, "record")


def test_the_plans_summary_names_the_queue():
    from ratelimit.spec import summary
    assert "managed by fq_codel" in summary.describe(summary.summary(_request(aqm="fq_codel")))
