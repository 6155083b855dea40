"""The groups' qdiscs in a bucket of the device's qdisc hash of their own (``layout.major``,
docs/design.md "The qdisc hash"): pure checks of the numbering, and against the kernel that
``layout.hash_bucket`` is its hash (a qdisc dump lists the hash bucket by bucket, newest
first) and that a plan's groups land alone in their bucket.  A plan an earlier ratelimit
numbered another way keeps its numbering over re-applies until it is removed.
"""

import dataclasses
import subprocess
import uuid

import pytest

from ratelimit import service
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.layout import (GENERATIONS, GROUP_BUCKET, GROUP_LINKS, GROUP_SLOTS, MAJORS, MAX_SHAPE_LINKS,
                                   MID_BUCKET, NUMBERINGS, SLOT_ORDER, TOP_BUCKET, _majors, handles,
                                   hash_bucket, major, max_shape_links)
from ratelimit.plan.ops import HtbQdisc
from ratelimit.plan.shaping import FifoQdisc
from ratelimit.state import records

QUEUES_ALONE = 61_000  # a generation-0 plan's queues stay out of the groups' bucket up to about this many


@pytest.mark.parametrize("numbering", NUMBERINGS)
def test_each_numbering_is_a_bijection_that_keeps_the_first_groups_and_the_first_queue(numbering):
    lo, end = MAJORS
    table = [major(s, numbering) for s in range(1 << 16)]
    assert sorted(table[lo:end]) == list(range(lo, end))
    assert all(table[m] == m for m in range(lo)) and table[0xFFFF] == 0xFFFF and table[0x100] == 0x100
    tops = [handles(g, numbering).group_top for g in range(len(GENERATIONS))]
    assert [table[t] for t in tops] == tops == [0xFFFE, 0xFDEC if numbering == TOP_BUCKET else 0x7FFF]
    if numbering == SLOT_ORDER:
        assert table == list(range(1 << 16))
    else:
        assert table == list(_majors(numbering))


def bucketed(slots, numbering=TOP_BUCKET) -> list[int]:
    return [s for s in slots if hash_bucket(major(s, numbering)) == GROUP_BUCKET]


def test_groups_take_the_bucket_and_queues_leave_it_to_them():
    gen0, gen1 = GENERATIONS
    for g in GENERATIONS:
        assert len(bucketed(range(g.group_top - GROUP_SLOTS + 1, g.group_top + 1))) == GROUP_SLOTS
    # generation 0 alone: its queues stay out of the bucket up to about 61,000 links
    assert not bucketed(range(gen0.leaf_base, gen0.leaf_base + QUEUES_ALONE))
    # generation 1, alone or beside generation 0: its queues up to 28,000 links
    assert not bucketed(range(gen1.leaf_base, gen1.leaf_base + 28_000))
    # the ceiling does not move: the largest plan still fits, its queues spilling into the bucket last
    assert MAX_SHAPE_LINKS == 65_024 and max_shape_links(gen1) == 32_110


def test_the_numbering_before_put_the_queues_of_a_plan_of_over_32000_links_in_the_bucket():
    """Why TOP_BUCKET: under MID_BUCKET generation 1's group slots (7fff: down) are generation
    0's queue slots from its 32,000th link on, so a plan of 40,000 links had 512 queues in the
    groups' bucket, newer than the groups, and every class change walked past them."""
    gen0 = GENERATIONS[0]
    assert len(bucketed(range(gen0.leaf_base, gen0.leaf_base + 40_000), MID_BUCKET)) == GROUP_SLOTS
    assert bucketed(range(gen0.leaf_base, gen0.leaf_base + 40_000), MID_BUCKET)[0] == gen0.leaf_base + 32_000
    assert not bucketed(range(gen0.leaf_base, gen0.leaf_base + 40_000))


def test_a_plans_group_qdiscs_are_in_the_bucket_and_its_queues_elsewhere():
    req = service.make_request("eth0", hosts="198.18.1.2", ports=f"10000-{10000 + 3 * GROUP_LINKS + 9}",
                               mode="shape", direction="dest", rate="1mbit")
    ops = compile_plan(req).ops
    groups = [op.handle >> 16 for op in ops if type(op) is HtbQdisc and op.parent >> 16 == 0x52]
    queues = [op.handle >> 16 for op in ops if type(op) is FifoQdisc]
    assert len(groups) == 4 and len(queues) == 3 * GROUP_LINKS + 10
    assert {hash_bucket(m) for m in groups} == {GROUP_BUCKET} and GROUP_BUCKET not in {hash_bucket(m) for m in queues}
    assert groups[0] == 0xFFFE and queues[0] == 0x100
    old = compile_plan(dataclasses.replace(req, numbering=SLOT_ORDER)).ops  # slot order, as before
    assert [op.handle >> 16 for op in old if type(op) is HtbQdisc and op.parent >> 16 == 0x52] == \
        [0xFFFE, 0xFFFD, 0xFFFC, 0xFFFB]


def test_a_record_reads_as_the_numbering_it_was_written_in():
    req = service.make_request("eth0", hosts="198.18.1.2", ports="10000-10003", mode="shape", rate="1mbit")
    data = records.to_json(req)
    assert data["numbering"] == TOP_BUCKET and "group_bucket" not in data and records.from_json(data) == req
    del data["numbering"]
    assert records.from_json({**data, "group_bucket": True}) == dataclasses.replace(req, numbering=MID_BUCKET)
    assert records.from_json(data) == dataclasses.replace(req, numbering=SLOT_ORDER)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


@pytest.fixture
def router(tmp_path, monkeypatch):
    name = f"rlqh-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "add", "rlq0", "type", "veth", "peer", "name", "rlq1")
        sh("ip", "-n", name, "link", "set", "rlq0", "up")
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)


def dumped_majors(ns: str) -> list[int]:
    """The majors of rlq0's qdiscs in the order the kernel dumps them (the root first)."""
    out = sh("tc", "-n", ns, "qdisc", "show", "dev", "rlq0").stdout.splitlines()
    return [int(line.split()[2].rstrip(":"), 16) for line in out]


@pytest.mark.netns
def test_the_kernels_qdisc_hash_is_ours_and_a_plans_groups_sit_alone_in_their_bucket(router):
    req = service.make_request("rlq0", netns=router, hosts="198.18.1.2", ports="10000-10599", mode="shape",
                               direction="dest", rate="1mbit")
    plan = service.apply(req)
    made = [op.handle >> 16 for op in plan.ops if type(op) in (HtbQdisc, FifoQdisc) and op.parent >> 16 != 0xFFFF]
    dumped = dumped_majors(router)
    assert dumped[0] == 0x52 and sorted(dumped[1:]) == sorted(made)
    # the dump walks the hash bucket by bucket, each from its newest qdisc: ours, exactly
    assert dumped[1:] == sorted(made, key=lambda m: (hash_bucket(m), -made.index(m)))
    groups = [m for m in made if hash_bucket(m) == GROUP_BUCKET]
    assert len(groups) == 3 and groups == [op.handle >> 16 for op in plan.ops
                                           if type(op) is HtbQdisc and op.parent >> 16 == 0x52]


@pytest.mark.netns
def test_a_plan_in_slot_order_keeps_it_when_changed_in_place_and_leaves_it_when_removed(router):
    req = service.make_request("rlq0", netns=router, hosts="198.18.1.2", ports="10000-10299", mode="shape",
                               direction="dest", rate="1mbit")
    service.apply(dataclasses.replace(req, numbering=SLOT_ORDER))  # as an earlier ratelimit numbered it
    before = dumped_majors(router)
    assert 0xFFFD in before and records.load(router, "rlq0").request.numbering == SLOT_ORDER
    changed = service.make_request("rlq0", netns=router, hosts="198.18.1.2", ports="10000-10299", mode="shape",
                                   direction="dest", rate="2mbit")
    assert service.apply(changed).how == "in place"
    assert dumped_majors(router) == before and records.load(router, "rlq0").request.numbering == SLOT_ORDER
    service.clean("rlq0", router)
    assert service.apply(changed).how == "built"
    assert 0xFFFD not in dumped_majors(router) and major(0xFFFD) in dumped_majors(router)
    assert records.load(router, "rlq0").request.numbering == TOP_BUCKET
