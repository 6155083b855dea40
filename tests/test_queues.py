"""Several tx queues, pure: where groups go (placement), the trees and their pools, the
queue map's entries, and everything that reads a plan (diff, teardown, fingerprint, record)."""

import dataclasses
import json
from ipaddress import ip_address, ip_network

import pytest

from ratelimit import service
from ratelimit.errors import FieldError, StateError, UsageError
from ratelimit.plan import diff, placement
from ratelimit.plan.compile import compile_plan, ifb_name, link_flows
from ratelimit.plan.filters import U32Filter
from ratelimit.plan.layout import (GROUP_LINKS, MAX_QUEUES, QUEUE_GROUP_LINKS, ROOT, TREE_BASE, Layout, queue_of,
                                   tree_handle)
from ratelimit.plan.ops import (TC_H_CLSACT_INGRESS, TC_H_INGRESS, TC_H_ROOT, AddIfb, ClsactQdisc, DelClass, DelLink,
                                DelQdisc, HtbQdisc, IngressQdisc, MqQdisc)
from ratelimit.plan.queuepin import key, QueueEntry, QueueMap, QueueProgram
from ratelimit.plan.shaping import HtbClass
from ratelimit.profiles.scenario import load as load_scenario
from ratelimit.spec.linklayer import layer
from ratelimit.spec.model import Cohort, LinkParams, Request
from ratelimit.state import fingerprint, records

LINK = LinkParams(28800)


def _cohort(name, hosts, ports=(10000, 10000 + QUEUE_GROUP_LINKS - 1), per="port"):
    return Cohort(name, tuple(ip_address(h) for h in hosts), None if ports is None else (ports,), LINK, LINK, per=per)


def _is_tree(handle: int) -> bool:
    return TREE_BASE <= handle >> 16 < TREE_BASE + MAX_QUEUES


def _request(*cohorts, queues=2, direction="dest", bandwidth_bps=100_000_000):
    return Request("eth0", tuple(cohorts), mode="shape", direction=direction, queues=queues,
                   bandwidth_bps=bandwidth_bps)


# ---------------------------------------------------------------- placement


def test_a_cohorts_groups_take_the_queues_in_turn_from_one_its_name_picks():
    start = queue_of("modems", 0, 4)
    assert [queue_of("modems", g, 4) for g in range(6)] == [(start + g) % 4 for g in range(6)]
    assert all(queue_of(name, g, 1) == 0 for name in ("a", "modems") for g in range(5))


def test_growing_a_cohort_moves_none_of_its_groups_and_no_other_cohorts():
    before = Layout.of(_request(_cohort("a", ["198.18.0.2"]), _cohort("b", ["198.18.0.3"]), queues=3))
    a_grown = _cohort("a", ["198.18.0.2", "198.18.0.4", "198.18.0.5"])
    after = Layout.of(_request(a_grown, _cohort("b", ["198.18.0.3"]), queues=3))

    def queues(lay):
        return {s.cohort.name: [lay.group_class_of(s, g) >> 16 for g in range(s.groups)] for s in lay.spans}
    old, new = queues(before), queues(after)
    assert new["a"][:len(old["a"])] == old["a"] and len(new["a"]) == 3
    assert new["b"] == old["b"]  # its queue; its minors may move (cohorts are packed in order)


def test_a_group_keeps_its_minor_in_whichever_tree_it_is():
    lay = Layout.of(_request(_cohort("a", ["198.18.0.2", "198.18.0.3"]), queues=2))
    one = Layout.of(dataclasses.replace(_request(_cohort("a", ["198.18.0.2", "198.18.0.3"]), queues=1),
                                        group_links=QUEUE_GROUP_LINKS))
    for link in range(lay.links):
        assert lay.group_class(link) & 0xFFFF == one.group_class(link) & 0xFFFF
        assert lay.group_class(link) >> 16 in range(TREE_BASE, TREE_BASE + 2)
        assert one.group_class(link) >> 16 == ROOT >> 16
        assert lay.link_class(link) == one.link_class(link)  # statistics read the same classes
    assert sum(lay.queue_links()) == lay.links


# ---------------------------------------------------------------- the plan


def test_each_queue_gets_a_tree_with_the_size_table_and_its_share_of_the_bandwidth():
    req = _request(_cohort("a", [f"198.18.0.{i}" for i in range(2, 5)]), queues=2)
    req = dataclasses.replace(req, cohorts=(dataclasses.replace(req.cohorts[0], link=layer("ppp-vj")),))
    plan = compile_plan(req)
    assert plan.ops[0] == MqQdisc("eth0", ROOT)
    trees = [op for op in plan.ops if type(op) is HtbQdisc and op.parent >> 16 == ROOT >> 16]
    assert [(t.handle, t.parent) for t in trees] == [(tree_handle(0), ROOT | 1), (tree_handle(1), ROOT | 2)]
    assert all(t.stab is not None for t in trees)  # the chosen queue's qdisc meters the length
    assert not any(type(op) is HtbQdisc and op.parent == TC_H_ROOT for op in plan.ops)
    pools = {op.classid: op for op in plan.ops if type(op) is HtbClass and op.classid & 0xFFFF == 1
             and _is_tree(op.classid)}
    held = Layout.of(req).queue_links()
    n = QUEUE_GROUP_LINKS
    assert held == [n, 2 * n] or held == [2 * n, n]
    for q, links in enumerate(held):
        pool = pools[tree_handle(q) | 1]
        assert pool.rate_bps == pool.ceil_bps == req.bandwidth_bps * links // (3 * n)
    assert sum(p.rate_bps for p in pools.values()) <= req.bandwidth_bps  # (no tree is empty here)
    groups = [op for op in plan.ops if type(op) is HtbClass and op.parent in pools]
    assert {g.classid & 0xFFFF for g in groups} == {0x10, 0x11, 0x12}


def test_a_tree_without_links_has_the_least_pool_and_nothing_reaches_it_classified():
    plan = compile_plan(_request(_cohort("a", ["198.18.0.2"]), queues=4))
    pools = [op for op in plan.ops if type(op) is HtbClass and op.classid & 0xFFFF == 1 and _is_tree(op.classid)]
    used = [p for p in pools if p.rate_bps > 8]
    assert len(pools) == 4 and len(used) == 1 and used[0].rate_bps == 100_000_000
    assert {op.queue for op in plan.ops if type(op) is QueueEntry} == {(used[0].classid >> 16) - TREE_BASE}


def test_no_root_u32_tree_but_one_map_entry_per_flow_naming_its_groups_queue_and_class():
    hosts = _cohort("hosts", ["198.18.0.9", "2001:db8::9"], ports=None, per="host")
    ports = _cohort("ports", ["198.18.0.2", "2001:db8::2"], ports=(1000, 1299), per="port")
    rest = Cohort("rest", (), None, LINK, LINK, per="shared", others=True)
    req = _request(ports, hosts, rest, queues=3, direction="both")
    plan = compile_plan(req)
    lay = Layout.of(req)
    for dev in ("eth0", ifb_name("eth0")):
        assert not any(type(op) is U32Filter and op.dev == dev and op.parent in (ROOT, TC_H_ROOT) for op in plan.ops)
        entries = [op for op in plan.ops if type(op) is QueueEntry and op.dev == dev]
        assert len(entries) == 600 + 2 + 1
        assert [op for op in plan.ops if type(op) is QueueMap and op.dev == dev] == [QueueMap(dev, 603)]
        assert len({e.key() for e in entries}) == len(entries)
        for e in entries:
            assert e.classid >> 16 == TREE_BASE + e.queue
            assert e.classid in {lay.group_class(link) for link in range(lay.links)}
        assert [e.key() for e in entries[-3:]] == [key(4, ip_address("198.18.0.9"), None),
                                                  key(6, ip_address("2001:db8::9"), None), key(0, None, None)]
        at = [i for i, op in enumerate(plan.ops) if getattr(op, "dev", None) == dev]
        kinds = [type(plan.ops[i]) for i in at]
        assert kinds.index(ClsactQdisc) < kinds.index(QueueMap) < kinds.index(QueueEntry) < kinds.index(QueueProgram)
    program = [op for op in plan.ops if type(op) is QueueProgram]
    assert program == [QueueProgram("eth0", "dest"), QueueProgram(ifb_name("eth0"), "source")]
    # the interface's clsact qdisc carries the IFB redirect too: no ingress qdisc beside it
    assert not any(type(op) is IngressQdisc for op in plan.ops)
    redirect = [op for op in plan.ops if type(op) is U32Filter and op.redirect]
    assert [op.parent for op in redirect] == [TC_H_CLSACT_INGRESS]
    assert plan.ops[0] == AddIfb(ifb_name("eth0"), 3)


def test_upload_only_keeps_the_ingress_qdisc_on_the_interface():
    plan = compile_plan(_request(_cohort("a", ["198.18.0.2"]), queues=2, direction="source"))
    assert [type(op) for op in plan.ops if getattr(op, "dev", None) == "eth0"] == [IngressQdisc, U32Filter]
    assert ClsactQdisc(ifb_name("eth0")) in plan.ops


def test_statistics_find_each_link_in_its_group_as_with_one_queue():
    req = _request(_cohort("a", ["198.18.0.2", "198.18.0.3"]), queues=2, direction="both")
    assert link_flows(req) == link_flows(dataclasses.replace(req, queues=1, group_links=QUEUE_GROUP_LINKS))

    def links(flows):
        return {(f.direction, f.host, f.port, f.dev, f.classid) for f in flows}
    assert links(compile_plan(req).flows) == links(link_flows(req))


def test_teardown_fingerprint_and_record():
    req = _request(_cohort("a", ["198.18.0.2"]), queues=2, direction="both")
    plan = compile_plan(req)
    assert plan.teardown() == (DelQdisc(ifb_name("eth0"), TC_H_INGRESS, "clsact"), DelQdisc(ifb_name("eth0"), TC_H_ROOT),
                               DelQdisc("eth0", TC_H_INGRESS, "clsact"), DelQdisc("eth0", TC_H_ROOT),
                               DelLink(ifb_name("eth0")))
    assert plan.teardown()[0].tc() == f"qdisc del dev {ifb_name('eth0')} clsact"
    owned = fingerprint.of_plan(plan)
    assert owned["eth0"]["root"] == "mq 52:" and owned["eth0"]["ingress"] == "clsact"
    assert owned[ifb_name("eth0")]["ingress"] == "clsact" and owned[ifb_name("eth0")]["device"]
    assert plan.has_ingress()
    assert records.from_json(json.loads(json.dumps(records.to_json(req)))) == req
    old = records.to_json(req)
    del old["queues"]  # a record written before queues
    assert records.from_json(old).queues == 1
    old = records.to_json(req)
    del old["group_links"]  # a record written when every group held 256 links, on two queues
    assert Layout.of(records.from_json(old)).group_links == GROUP_LINKS
    assert Layout.of(req).group_links == QUEUE_GROUP_LINKS == 2 * GROUP_LINKS
    for bad in (0, -1, 70000, "many", 1.5):  # a damaged record: one line, naming the field
        with pytest.raises(StateError, match=f"group links: {bad!s} is not a number of links from 1 to 65280"):
            records.request_from_json(records.to_json(req) | {"group_links": bad}, "r.json")


# ---------------------------------------------------------------- re-applies


def test_other_numbers_change_in_place_and_other_links_switch_with_the_program():
    req = _request(_cohort("a", ["198.18.0.2", "198.18.0.3"]), _cohort("b", ["198.18.0.9"]), queues=2,
                   direction="both")
    old = compile_plan(req)
    faster = dataclasses.replace(req, cohorts=(dataclasses.replace(req.cohorts[0], down=LinkParams(56000)),
                                               req.cohorts[1]), bandwidth_bps=200_000_000)
    changes = diff.in_place(old, compile_plan(faster))
    assert changes and all(type(c.op) is HtbClass for c in changes)
    # a grows: built beside in free handles, b stays; the map and program switch last
    grown = _request(_cohort("a", ["198.18.0.2", "198.18.0.3", "198.18.0.4"]), _cohort("b", ["198.18.0.9"]),
                     queues=2, direction="both")
    plan, changes, switch = placement.over(old, compile_plan(grown))
    assert changes is None and switch is not None
    b_before = {op for op in old.ops if type(op) is HtbClass and op.dev == "eth0"
                and op.classid == Layout.of(old.request).group_class(2 * QUEUE_GROUP_LINKS)}
    assert b_before and not any(type(op) is DelClass and op in b_before for op in switch.removal)
    for dev in ("eth0", ifb_name("eth0")):
        mine = [type(op) for op in switch.adds if getattr(op, "dev", None) == dev]
        assert mine[-1] is QueueProgram and QueueMap in mine
        first_pin = mine.index(QueueMap)
        assert set(mine[first_pin:]) == {QueueMap, QueueEntry, QueueProgram}
    assert {type(op) for op in switch.removal} == {DelClass}
    assert {op.classid for op in switch.removal} == \
        {Layout.of(old.request).group_class(link) for link in range(2 * QUEUE_GROUP_LINKS)}
    entries = {op.key(): op for op in switch.adds if type(op) is QueueEntry and op.dev == "eth0"}
    assert len(entries) == 4 * QUEUE_GROUP_LINKS
    # another number of queues, or one queue against several: rebuilt
    assert diff.make_before_break(old, compile_plan(dataclasses.replace(grown, queues=3, generation=1))) is None
    one = compile_plan(dataclasses.replace(req, queues=1))
    assert diff.in_place(one, old) is None and placement.over(one, old)[1:] == (None, None)


def test_a_plan_recorded_with_groups_of_256_keeps_them_over_a_re_apply():
    req = _request(_cohort("a", ["198.18.0.2", "198.18.0.3"]), queues=2)
    old = compile_plan(dataclasses.replace(req, group_links=GROUP_LINKS))  # as a record from before reads
    faster = compile_plan(dataclasses.replace(req, cohorts=(dataclasses.replace(req.cohorts[0],
                                                                                down=LinkParams(56000)),)))
    assert Layout.of(faster.request).group_links == QUEUE_GROUP_LINKS  # a fresh plan's
    plan, changes, switch = placement.over(old, faster)
    assert changes and switch is None and all(type(c.op) is HtbClass for c in changes)
    assert plan.request.group_links == GROUP_LINKS  # and the record written after says so
    # the same size as the plan's own: nothing carried over, the plan compiled once
    assert placement.over(compile_plan(req), faster)[0] is faster


# ---------------------------------------------------------------- what a person types


def test_queues_at_the_edge():
    def make(**kw):
        return service.make_request("eth0", hosts="198.18.0.2", ports="1000-1001", **kw)
    assert make(profile="modem-28k8", queues="2").queues == 2
    assert make(profile="modem-28k8").queues == 1
    assert make(queues="auto").queues == 1  # police mode: one tree, whatever the device has
    for bad in ("0", "x", str(MAX_QUEUES + 1), "-1"):
        with pytest.raises(FieldError, match=r"^--queues: .* is not a whole number from 1 to 128$"):
            make(profile="modem-28k8", queues=bad)
    with pytest.raises(FieldError, match="^--queues: 2 needs --mode shape"):
        make(queues="2")


def test_a_default_cohort_in_a_scenario_gets_its_entry(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[cohort.a]\ndescription = "a"\nhosts = "198.18.0.2"\nprofile = "modem-28k8"\n'
                    '[default]\ndescription = "the rest"\nprofile = "cable"\n')
    req = service.make_request("eth0", scenario=load_scenario(str(path)), queues="2")
    entries = [op for op in compile_plan(req).ops if type(op) is QueueEntry and op.dev == "eth0"]
    assert [e.family for e in entries] == [4, 0]


def test_the_request_itself_refuses_what_its_layout_cannot_hold():
    with pytest.raises(FieldError, match="^--queues: 0 is not a number of tx queues from 1 to 128"):
        layout_check(_request(_cohort("a", ["198.18.0.2"]), queues=0))
    servers = dataclasses.replace(_cohort("a", ["198.18.0.2"]), servers=(ip_network("198.19.0.0/24"),))
    with pytest.raises(FieldError, match="cohort 'a' also selects servers"):
        layout_check(_request(servers, queues=2))
    with pytest.raises(UsageError):
        layout_check(dataclasses.replace(_request(_cohort("a", ["198.18.0.2"]), queues=2), mode="police"))


def layout_check(req):
    from ratelimit.plan.validate import checked_layout
    return checked_layout(req)


def test_places_and_generations_keep_their_minors_under_the_trees():
    req = dataclasses.replace(_request(_cohort("a", ["198.18.0.2"]), queues=2), generation=1)
    groups = [op for op in compile_plan(req).ops if type(op) is HtbClass and op.classid & 0xFFFF >= 0x8010]
    assert groups and all(_is_tree(g.parent) for g in groups)
    assert placement.packed(req) == placement.packed(dataclasses.replace(req, queues=1))
