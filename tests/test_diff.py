"""Golden cases of the plan difference (``diff.in_place``): what changes in place, what
rebuilds."""

import dataclasses
import json
import re

import pytest

from ratelimit import service
from ratelimit.errors import FieldError
from ratelimit.plan import diff, layout, placement
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.filters import U32Filter
from ratelimit.plan.ops import Change, HtbQdisc
from ratelimit.plan.shaping import FifoQdisc, HtbClass, NetemQdisc
from ratelimit.profiles import scenario
from ratelimit.state import records


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


# ---------------------------------------------------------------- make-before-break


def second(**kw):
    """``plan(**kw)`` in the second generation of handles."""
    args = dict(hosts="198.18.1.2", ports="5000-5003", mode="shape", direction="both", rate="28800")
    args.update(kw)
    return compile_plan(dataclasses.replace(service.make_request("eth0", **args), generation=1))


def test_other_ports_are_built_beside_then_the_old_removed():
    old, new = plan(), second(ports="5002-5009")
    switch = diff.make_before_break(old, new)
    # the shared parts are there already; the old tree's groups are held still (no flow gets
    # an old link's rate beside its new link's), then the new tree's root filters come
    roots = [op for op in new.ops if diff._root_filter(op)]  # of the trees on the root qdiscs
    assert [op.node for op in roots] == [3, 4, 3, 4]
    held = switch.adds[-len(roots) - 2:-len(roots)]
    assert [line for op in held for line in op.lines()] == [
        "class change dev eth0 parent 52:1 classid 52:10 htb rate 8bit ceil 8bit burst 1514b cburst 1514b "
        "quantum 1514 mpu 64",
        "class change dev rl-eth0 parent 52:1 classid 52:10 htb rate 8bit ceil 8bit burst 1514b cburst 1514b "
        "quantum 1514 mpu 64"]
    assert switch.adds == tuple(op for op in new.ops if op not in old.ops and op not in roots) + held + tuple(roots)
    text = [op.lines() for op in switch.removal]
    # the old tree's root filters go first (from the next packet on the new tree answers),
    # then its tables, then its groups (each class with its qdisc, links, queues, filters)
    assert [next(line for line in reversed(t) if " del " in line) for t in text] == [
        'tc filter del dev eth0 parent 52: prio 1 handle "$root:0:1" protocol ip u32',
        'tc filter del dev eth0 parent 52: prio 1 handle "$root:0:2" protocol ip u32',
        'tc filter del dev rl-eth0 parent 52: prio 1 handle "$root:0:1" protocol ip u32',
        'tc filter del dev rl-eth0 parent 52: prio 1 handle "$root:0:2" protocol ip u32',
        # a table goes once u32 has let go of it (an RCU grace period after the filters
        # linking to it): a script tries again for a while
        "n=0; until tc filter del dev eth0 parent 52: prio 1 handle 1: protocol ip u32 2>/dev/null; do",
        "n=0; until tc filter del dev rl-eth0 parent 52: prio 1 handle 1: protocol ip u32 2>/dev/null; do",
        "class del dev eth0 classid 52:10",
        "class del dev rl-eth0 classid 52:10"]
    assert text[0][0] == ("root=$(tc filter show dev eth0 parent 52: prio 1 protocol ip"
                          " | sed -n 's/.* fh \\([0-9a-f]*\\): ht divisor 1 *$/\\1/p')")
    back = [op.lines()[-1] for op in switch.undo_removal]  # taking it back removes the new generation
    assert back[0].endswith('handle "$root:0:3" protocol ip u32') and back[-1] == "class del dev rl-eth0 classid 52:8010"
    # taking it back gives the old groups their rates again
    assert [(c.op.classid, c.op.rate_bps) for c in switch.undo_changes] == [(0x520010, 4 * 28800)] * 2  # 4 links


def test_the_second_generation_keeps_clear_of_the_first():
    old, new = plan(ports="1000-1999"), second(ports="1500-2499")
    keys = diff._keys([op for op in old.ops if not diff._shared(op)])
    assert keys and not keys & diff._keys([op for op in new.ops if not diff._shared(op)])
    assert diff.make_before_break(old, new) is not None
    assert diff.make_before_break(new, plan(ports="1000-1999")) is not None  # and back


def test_a_new_bandwidth_changes_the_pool_class_first():
    switch = diff.make_before_break(plan(), second(ports="6000-6003", bandwidth="200mbit"))
    assert [type(op) for op in switch.adds[:2]] == [Change, Change]
    assert switch.adds[0].op.classid == 0x520001 and switch.adds[0].op.rate_bps == 200_000_000
    assert [c.op.rate_bps for c in switch.undo_changes[:2]] == [100_000_000, 100_000_000]


def test_shape_to_police_switches_but_a_pool_netem_stage_does_not():
    dest = dict(direction="dest")
    assert diff.make_before_break(plan(**dest), second(mode="police", **dest)) is not None
    assert diff.make_before_break(plan(mode="police", **dest), second(ports="6000-6003", **dest)) is not None
    netem = dict(mode="police", delay="50ms", **dest)
    assert diff.make_before_break(plan(**netem), second(ports="6000-6003", **dest)) is None  # 52:1: netem or groups
    # both ways police polices the source side on the ingress qdisc, shape mode redirects it
    assert diff.make_before_break(plan(), second(mode="police")) is None


@pytest.mark.parametrize("other", [dict(link="atm"), dict(direction="dest")],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_other_shared_parts_rebuild(other):
    assert diff.make_before_break(plan(), second(**other)) is None


def test_the_same_generation_is_never_switched():
    assert diff.make_before_break(plan(), plan(ports="6000-6003")) is None


def test_how_an_apply_goes_over_an_installed_plan():
    old = plan()
    new, changes, switch = placement.over(old, plan(rate="56000"))
    assert changes and switch is None and new.request.generation == 0
    new, changes, switch = placement.over(old, plan(ports="6000-6003"))
    assert changes is None and switch is not None and new.request.generation == 1
    back, changes, switch = placement.over(new, plan(ports="7000-7003"))  # from the second back to the first
    assert switch is not None and back.request.generation == 0
    same, changes, switch = placement.over(new, plan(ports="6000-6003", rate="56000"))
    assert changes and same.request.generation == 1  # in place, where it stands
    big = plan(hosts="198.18.1.2,198.18.1.3", ports="10000-29999", direction="dest")  # 40,000 links
    new, changes, switch = placement.over(plan(direction="dest"), big)  # more than the second generation holds:
    assert switch is not None and new.request.places  # built beside in the handles the old leaves free
    again, changes, switch = placement.over(new, plan(hosts="198.18.1.4,198.18.1.5", ports="10000-29999",
                                                     direction="dest"))
    assert (changes, switch, again.request.generation) == (None, None, 0)  # no room beside: rebuilt


# ---------------------------------------------------------------- cohorts


def audience(**cohorts):
    """A plan of the given cohorts (name -> scenario table text), in shape mode on eth0."""
    text = "\n".join(f"[cohort.{name}]\ndescription = 'x'\n{body}" for name, body in cohorts.items())
    return compile_plan(service.make_request("eth0", scenario=scenario.parse(text), direction="dest"))


MODEMS = 'hosts = "198.18.1.2-198.18.1.11"\nprofile = "modem-28k8"\n'
PHONES = 'hosts = "198.18.2.2-198.18.2.6"\nprofile = "3g"\n'
NO_NETEM = 'delay = "0ms"\njitter = "0ms"\nloss = "0%"\n'  # a fifo for each link instead of a netem stage


def handles(plan, ops=None):
    """Every class and qdisc handle ``ops`` (default: the plan's) create."""
    return {op.classid if type(op) is HtbClass else op.handle for op in (plan.ops if ops is None else ops)
            if type(op) in (HtbClass, HtbQdisc, NetemQdisc, FifoQdisc)}


def cohort_ops(plan, name):
    """The operations of ``name``'s groups: from each of its group classes to the next group."""
    trees, groups = diff._units(plan)
    lay = layout.Layout.of(plan.request)
    span = next(s for s in lay.spans if s.cohort.name == name)
    mine = {layout.ROOT | (span.place.group_minor + g) for g in range(span.groups)}
    return [op for (dev, classid), ops in groups.items() if classid in mine for op in ops]


def test_a_cohort_that_grows_is_built_beside_and_the_others_stay_where_they_stand():
    old = audience(modems=MODEMS, phones=PHONES)
    grown = audience(modems=MODEMS, phones=PHONES.replace("198.18.2.6", "198.18.2.9"))
    new, changes, switch = placement.over(old, grown)
    assert changes is None and switch is not None and new.request.generation == 1
    # the modems' groups: the same handles, and nothing in the switch adds or removes them
    assert handles(new, cohort_ops(new, "modems")) == handles(old, cohort_ops(old, "modems"))
    modem_handles = handles(old, cohort_ops(old, "modems"))
    made = [op for op in switch.ops() if type(op) is not Change]  # what is added or removed
    assert not [op for op in made if handles(new, [op]) & modem_handles]
    assert not [op for op in made if getattr(op, "parent", None) in modem_handles]  # nothing under them either
    # only numbers change there (each link's guaranteed share of the bandwidth, which the total sets)
    assert {type(c.op) for c in switch.adds if type(c) is Change and handles(new, [c.op]) & modem_handles} <= {HtbClass}
    # the phones' grown groups take handles neither plan uses elsewhere, then the old go
    phone_old, phone_new = handles(old, cohort_ops(old, "phones")), handles(new, cohort_ops(new, "phones"))
    assert not phone_old & phone_new and not phone_new & handles(old)
    assert {op.classid for op in switch.removal if type(op).__name__ == "DelClass"} == \
        {op.classid for op in cohort_ops(old, "phones") if type(op) is HtbClass and op.parent == layout.POOL_CLASS}
    # the record keeps where each cohort stands, and a plan compiled from it is the same
    assert new.request.places is not None
    assert records.from_json(json.loads(json.dumps(records.to_json(new.request)))) == new.request
    assert compile_plan(new.request) == new
    # the next change of numbers only goes in place where they stand now
    again, changes, switch = placement.over(new, audience(modems=MODEMS.replace("modem-28k8", "modem-56k"),
                                                         phones=PHONES.replace("198.18.2.6", "198.18.2.9")))
    assert changes and switch is None and again.request.places == new.request.places


def test_a_cohort_whose_queues_change_kind_moves_and_the_others_stay():
    old = audience(modems=MODEMS, phones=PHONES)
    # the phones keep their hosts but lose their delay stage: a fifo replaces each netem queue
    new, changes, switch = placement.over(old, audience(modems=MODEMS, phones=PHONES + NO_NETEM))
    assert switch is not None
    assert handles(new, cohort_ops(new, "modems")) == handles(old, cohort_ops(old, "modems"))
    assert not handles(new, cohort_ops(new, "phones")) & handles(old)


def test_cohorts_added_and_removed():
    old = audience(modems=MODEMS)
    both, changes, switch = placement.over(old, audience(modems=MODEMS, phones=PHONES))
    assert switch is not None
    assert handles(both, cohort_ops(both, "modems")) == handles(old, cohort_ops(old, "modems"))
    alone, changes, switch = placement.over(both, audience(modems=MODEMS))
    assert switch is not None
    assert handles(alone, cohort_ops(alone, "modems")) == handles(both, cohort_ops(both, "modems"))
    assert {op.classid for op in switch.removal if type(op).__name__ == "DelClass"} == \
        {op.classid for op in cohort_ops(both, "phones") if type(op) is HtbClass and op.parent == layout.POOL_CLASS}
    # without the modems the device's link layer is another (no size table): rebuilt
    assert placement.over(both, audience(phones=PHONES))[1:] == (None, None)


def test_free_handles_are_first_fit_and_never_taken_twice():
    old = service.make_request("eth0", scenario=scenario.parse(f"[cohort.modems]\ndescription = 'x'\n{MODEMS}[cohort.phones]\ndescription = 'x'\n{PHONES}"),
                               direction="dest")
    places = placement.replaced(dataclasses.replace(old, cohorts=old.cohorts[::-1]), old, {"modems"})
    phones, modems = places
    assert phones == placement.packed(old)[1]  # kept
    before = placement.packed(old)
    assert modems.group_minor == before[1].group_minor + 1  # the first free class minor
    assert modems.leaf_base == before[1].leaf_base + 5  # queues: the first free majors from the bottom
    assert modems.group_top == before[1].group_top - 1  # groups: from the top
    lay = layout.Layout.of(dataclasses.replace(old, cohorts=old.cohorts[::-1], places=places))
    assert lay.clash() is None


@pytest.mark.parametrize("places, says", [
    (((0x10, 0xFFFE, 0x100), (0x10, 0xFFFD, 0x200)), "places: cohort 'phones' at (16, 65533, 512) overlap "
                                                     "cohort 'modems's"),
    (((0x10, 0xFFFE, 0x100), (0x11, 0xFFFD, 0x105)), "overlap cohort 'modems's"),  # queues 105..109 vs 100..109
    (((0x10, 0xFFFE, 0x100), (0x11, 0x10005, 0x200)), "are outside the handle space"),
    (((0x10, 0xFFFE, 0x100),), "do not place the 2 cohorts"),
])
def test_places_that_clash_are_refused(places, says):
    req = service.make_request("eth0", scenario=scenario.parse(f"[cohort.modems]\ndescription = 'x'\n{MODEMS}[cohort.phones]\ndescription = 'x'\n{PHONES}"),
                               direction="dest")
    with pytest.raises(FieldError, match=re.escape(says)):
        compile_plan(dataclasses.replace(req, places=tuple(layout.Place(*p) for p in places)))
