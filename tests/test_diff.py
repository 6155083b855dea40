"""Golden cases of the plan difference (``diff.in_place``): what changes in place, what
rebuilds."""

import pytest

from ratelimit import diff, service
from ratelimit.compile import compile_plan
from ratelimit.plan import Change, FifoQdisc, HtbClass, NetemQdisc, U32Filter


def plan(**kw):
    args = dict(hosts="198.18.1.2", ports="5000-5003", mode="shape", direction="both", rate="28800")
    args.update(kw)
    return compile_plan(service.make_request("eth0", **args))


def test_the_same_request_changes_nothing():
    assert diff.in_place(plan(), plan()) == ()


def test_a_profile_switch_changes_classes_and_leaves_where_they_stand():
    old, new = plan(profile="modem-28k8", rate=None), plan(profile="modem-56k", rate=None)
    changes = diff.in_place(old, new)
    assert changes and all(type(c) is Change for c in changes)
    kinds = [type(c.op) for c in changes]
    assert set(kinds) == {HtbClass, NetemQdisc}
    # each changed object is the new plan's, under the handle the old plan gave it
    def where(op):
        return type(op), op.dev, op.parent, op.classid if type(op) is HtbClass else op.handle
    olds = {where(op) for op in old.ops if type(op) in (HtbClass, NetemQdisc)}
    assert all(where(c.op) in olds for c in changes)
    assert all(c.op in new.ops for c in changes)
    assert diff.in_place(new, old) == tuple(Change(op) for op in old.ops if op not in new.ops)


def test_a_new_queue_changes_the_fifo_leaves():
    changes = diff.in_place(plan(queue="10kb"), plan(queue="20kb"))
    assert {type(c.op) for c in changes} == {FifoQdisc}
    assert all(c.op.limit == 20 * 1024 for c in changes)


def test_police_changes_its_filters():
    changes = diff.in_place(plan(mode="police"), plan(mode="police", rate="56000"))
    assert changes and {type(c.op) for c in changes} == {U32Filter}
    assert all(c.op.police.rate_bps == 56000 for c in changes)


@pytest.mark.parametrize("other", [dict(ports="5000-5004"), dict(hosts="198.18.1.3"), dict(mode="police"),
                                   dict(per="host"), dict(link="atm"), dict(direction="dest"),
                                   dict(delay="10ms")], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_other_selectors_layout_or_leaf_kinds_rebuild(other):
    assert diff.in_place(plan(), plan(**other)) is None


def test_change_text_is_tcs():
    changes = diff.in_place(plan(queue="10kb"), plan(queue="20kb", rate="56000"))
    lines = [c.tc() for c in changes]
    assert lines[0].startswith("class change dev eth0 parent 52:1 classid 52:10 htb rate ")
    assert any(line.startswith("qdisc change dev eth0 parent fffe:100 handle 100: bfifo limit 20480") for line in lines)


def test_a_netem_stage_that_drops_a_part_the_kernel_keeps_rebuilds():
    with_reorder = plan(delay="100ms", reorder="5%")
    assert diff.in_place(with_reorder, plan(delay="50ms", reorder="1%"))  # the part is sent again
    assert diff.in_place(with_reorder, plan(delay="50ms")) is None  # netem would keep reordering
    assert diff.in_place(plan(delay="50ms"), with_reorder)  # a part added is sent
