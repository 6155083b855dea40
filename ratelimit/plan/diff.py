"""What an apply over an installed plan has to change: the difference of two plans.

Pure.  Two plans of the same selectors (a profile switch, a new rate, delay or queue)
compile to the same operations in the same order, object for object -- the same
classes, leaf qdiscs and filters under the same handles -- and differ only in numbers.
``in_place`` turns such a difference into ``Change`` operations: HTB classes, netem and
fifo leaves, and u32 filters (their policers) changed where they stand, so no queue is
flushed and no packet of a selected flow passes unshaped.  A netem stage that would drop
a part the kernel keeps on a change (reordering, corruption, a correlation, its rate) is
not a change in place.

Other hosts or ports, another granularity or mode: ``make_before_break`` builds the new
plan beside the installed one, its trees in the other generation of handles
(``Request.generation``, ``layout.GENERATIONS``), under the same root qdisc and pool class;
the groups both plans have under the same handles (cohorts kept where they stand,
``Request.places``) are changed in place instead, so their queues carry on.  Its tree's root
filters go in last; u32 tries a list's root filters in node order, so the tree whose
filters come first answers, and removing the old tree's root filters (or adding the
new ones ahead of them) switches every flow of a protocol in one kernel step.  Then the
old groups are held still, and the old tables and groups removed.  Another link layer,
direction or ingress layout, or two generations that do not fit side by side in the
16-bit handles: None, and the caller rebuilds.  With several tx queues (``queuepin``) the
switch is the queue program's: a new map and program take the old one's place on each
device's clsact egress hook in one kernel step (another number of queues is rebuilt).
"""

from dataclasses import dataclass, replace

from .filters import U32_ROOT_TABLE, DelFilter, U32Filter, U32Table
from .layout import MAX_QUEUES, POOL_CLASS, POOL_NETEM, ROOT, TREE_BASE
from .ops import (INGRESS_HANDLE, TC_H_ROOT, AddIfb, Change, ClsactQdisc, DelClass, HtbQdisc, IngressQdisc, MqQdisc,
                  Plan, u32_handle)
from .queuepin import QueueEntry, QueueMap, QueueProgram
from .shaping import AqmQdisc, FifoQdisc, HtbClass, netem_groups, NetemQdisc, TbfQdisc

_PINS = (QueueMap, QueueEntry, QueueProgram)  # several queues: the classifier, switched whole

# What must be equal for an operation to be changed in place, per type; the rest are its
# numbers.  A type missing here must be equal as a whole.
_FIXED = {
    HtbClass: ("dev", "parent", "classid"),
    NetemQdisc: ("dev", "parent", "handle"),
    FifoQdisc: ("dev", "parent", "handle", "kind"),
    AqmQdisc: ("dev", "parent", "handle", "kind", "flows"),  # the kernel keeps fq_codel's flows
    TbfQdisc: ("dev", "parent", "handle"),
    U32Filter: ("dev", "parent", "prio", "protocol", "ht", "bucket", "node", "keys", "hashkey", "link", "classid",
                "redirect"),
}


def _changeable(old, new) -> bool:
    fixed = _FIXED.get(type(old))
    if fixed is None or type(new) is not type(old):
        return False
    if type(old) is U32Filter and (old.police is None) != (new.police is None):
        return False
    if type(old) is NetemQdisc and not netem_groups(old.params, old.rate_bps) <= netem_groups(new.params, new.rate_bps):
        return False  # the kernel would keep the part the new stage leaves out
    return all(getattr(old, name) == getattr(new, name) for name in fixed)


def in_place(old, new) -> tuple | None:
    """The ``Change`` operations that turn the installed plan ``old`` into ``new``, in plan
    order (empty: nothing to change); None when ``new`` is not ``old`` with other numbers."""
    if len(old.ops) != len(new.ops):
        return None
    changes = []
    for a, b in zip(old.ops, new.ops):
        if a == b:
            continue
        if not _changeable(a, b):
            return None
        changes.append(Change(b))
    return tuple(changes)


# ---------------------------------------------------------------- make-before-break


@dataclass(frozen=True)
class Switch:
    """A re-apply with other selectors (or layout) that builds the new plan beside the
    installed one and then removes the old: ``adds`` (``changes``: the shared and kept parts'
    new numbers; ``build``: the new generation; ``held``: the old groups held still;
    ``roots``: the new root filters), then ``removal`` (the old generation: its root filters
    first -- the switch -- then its tables and groups).  ``undo_pins``, ``undo_removal`` and
    ``undo_changes`` take back ``adds``: with several queues, the old queue maps and programs
    first (a device whose program the switch had replaced gets the old one back before the
    new groups go).

    A staged apply (``service.staging``) sends ``build`` alone, which no packet reaches, and
    later ``commit``: the rest of ``adds``, then ``removal``."""

    changes: tuple
    build: tuple
    held: tuple
    roots: tuple
    removal: tuple
    undo_removal: tuple
    undo_changes: tuple
    undo_pins: tuple = ()

    @property
    def adds(self) -> tuple:
        return self.changes + self.build + self.held + self.roots

    @property
    def commit(self) -> "Switch":
        """This switch with its ``build`` already in the kernel (staged)."""
        return replace(self, build=())

    def ops(self) -> tuple:
        return self.adds + self.removal


def from_nothing(plan: Plan) -> Switch:
    """``plan`` over no plan of ratelimit's, as a switch: everything but its root filters
    (and queue programs) is built first -- the root qdiscs' default sends every packet
    past their classes meanwhile (``htb default 0``) -- and the root filters then send the
    selected flows into their links.  Its removal is the plan's teardown."""
    return Switch((), tuple(op for op in plan.ops if not _root_filter(op)), (),
                  tuple(op for op in plan.ops if _root_filter(op)), (), plan.teardown(), ())


def in_place_switch(changes: tuple, undo: tuple) -> Switch:
    """Changes in place (``in_place``) as a switch with nothing to build beside."""
    return Switch(changes, (), (), (), (), (), undo)


def _tree(handle: int) -> bool:
    """A handle of one of the per-queue trees (several queues): ``(54 + q):``."""
    return TREE_BASE <= handle >> 16 < TREE_BASE + MAX_QUEUES


def _pool(classid: int) -> bool:
    """The pool class: ``52:1``, or a per-queue tree's ``(54 + q):1``."""
    return classid == POOL_CLASS or (classid & 0xFFFF == 1 and _tree(classid))


def _shared(op) -> bool:
    """Parts both generations use: the devices, the root and ingress (or clsact) qdiscs, the
    per-queue trees, the pool classes and the police netem stage, the ingress redirect."""
    t = type(op)
    return (t in (AddIfb, IngressQdisc, MqQdisc, ClsactQdisc) or (t is HtbQdisc and (op.parent == TC_H_ROOT
                                                                                   or _tree(op.handle)))
            or (t is HtbClass and _pool(op.classid)) or (t is NetemQdisc and op.handle == POOL_NETEM)
            or (t is U32Filter and op.redirect is not None))


def _on_shared(op) -> bool:
    """A generation's part that hangs directly on a shared qdisc or class (the queue map
    and program count as the root's tree)."""
    if _shared(op):
        return False
    if type(op) in (U32Table, U32Filter):
        return op.parent in (ROOT, INGRESS_HANDLE)
    return type(op) in _PINS or (type(op) is HtbClass and _pool(op.parent))


def _keys(ops) -> set:
    """What must not clash between two generations on one device: class and qdisc
    handles, the tables and root filters of the shared qdiscs' filter lists (u32 shares
    table ids among a qdisc's lists), shared policer indexes."""
    out = set()
    for op in ops:
        t = type(op)
        if t is HtbClass:
            out.add(("class", op.dev, op.classid))
        elif t in (HtbQdisc, NetemQdisc, FifoQdisc, AqmQdisc, TbfQdisc):
            out.add(("qdisc", op.dev, op.handle))
        elif t is U32Table and _on_shared(op):
            out.add(("table", op.dev, op.parent, op.ht))
        elif t is U32Filter and _on_shared(op) and op.ht == 0:
            out.add(("root filter", op.dev, op.parent, op.prio, op.node))
        if t is U32Filter and op.police is not None and op.police.index:
            out.add(("police", op.police.index))
    return out


def _root_filter(op) -> bool:
    """What switches to a tree, sent last: its root filters, or (several queues) its map and
    program, which take the old program's place in one step."""
    return (type(op) is U32Filter and op.ht == 0 and _on_shared(op)) or type(op) in _PINS


def _filter_lists(plan: Plan) -> dict:
    """The filter lists (device, parent, prio, protocol) of ``plan``'s trees on the shared
    qdiscs, in plan order (a dict used as an ordered set)."""
    return dict.fromkeys((op.dev, op.parent, op.prio, op.protocol) for op in plan.ops
                         if type(op) in (U32Table, U32Filter) and _on_shared(op))


FROZEN_BPS = 8  # an old group's rate from just before the switch until it is removed


def _units(plan: Plan) -> tuple[list, dict]:
    """``plan``'s generation parts: its trees on the shared qdiscs, and its groups -- each
    group's class under the pool with everything after it up to the next group (its qdisc,
    links, queues and own trees) -- by (device, class)."""
    trees, groups, unit = [], {}, None
    for op in plan.ops:
        if _shared(op):
            unit = None
        elif type(op) is HtbClass and _pool(op.parent):
            unit = groups.setdefault((op.dev, op.classid), [])
            unit.append(op)
        elif type(op) in (U32Table, U32Filter, *_PINS) and _on_shared(op):
            trees.append(op)
        else:
            unit.append(op)
    return trees, groups


def _held(groups: list) -> list:
    """The groups' rates set to ``FROZEN_BPS``: from then on their links send nothing but
    the one packet HTB lets a class send on the credit it had (it charges a packet after
    sending it), so no flow gets an old link's rate beside its new link's while the new
    tree takes over (until it does, a flow's packets wait in its old link)."""
    return [Change(replace(op, rate_bps=FROZEN_BPS, ceil_bps=FROZEN_BPS, burst_bytes=op.quantum_bytes))
            for op in groups]


def _removal(plan: Plan, keep: Plan, groups: list) -> tuple:
    """What removes ``plan``'s trees and its ``groups`` while ``keep``'s stay:

    1. its root filters: from the next packet on, the other tree answers;
    2. its tables (u32 frees a table only after an RCU grace period once nothing links
       to it, so the groups cannot go at once; a filter list ``keep`` does not use goes
       whole once they are gone);
    3. the groups: each class with its qdisc, links, queues and filters."""
    kept = _filter_lists(keep)
    roots = [DelFilter(op.dev, op.parent, op.prio, op.protocol, u32_handle(U32_ROOT_TABLE, 0, op.node))
             for op in plan.ops if type(op) is U32Filter and _root_filter(op)]
    tables = [DelFilter(op.dev, op.parent, op.prio, op.protocol, u32_handle(op.ht)) for op in plan.ops
              if type(op) is U32Table and _on_shared(op)]
    whole = [DelFilter(*head) for head in _filter_lists(plan) if head not in kept]
    return tuple(roots + tables + whole + [DelClass(op.dev, op.classid) for op in groups])


def _paired(old: list, new: list) -> tuple[list, list] | None:
    """The changes that turn ``old`` parts into ``new`` ones where they stand, and back; None
    when they are not the same parts with other numbers."""
    if len(old) != len(new):
        return None
    changes, backs = [], []
    for a, b in zip(old, new):
        if a == b:
            continue
        if not _changeable(a, b):
            return None
        changes.append(Change(b))
        backs.append(Change(a))
    return changes, backs


def rebuilt_groups(old: Plan, new: Plan) -> set:
    """The groups (device, class) both plans have under the same handles but that a change
    in place cannot turn into each other (another queue kind, other flows, ...): a re-apply
    must give them other handles (``placement.replaced``'s ``move``) to build them beside."""
    _, before = _units(old)
    _, after = _units(new)
    return {key for key in before.keys() & after.keys() if _paired(before[key], after[key]) is None}


def make_before_break(old: Plan, new: Plan) -> Switch | None:
    """The switch from the installed plan ``old`` to ``new``, its trees in the other
    generation (``Request.generation``): the groups both have under the same handles
    (cohorts kept where they stand, ``Request.places``) change in place and keep their
    queues; the others are built beside and the old ones removed.  None when the two
    cannot stand side by side: other shared parts (devices, ingress layout, link layer, a
    police-mode netem stage where shape mode hangs its groups), a kept group that cannot
    change in place, or handles that clash (together they need more than the handle
    space)."""
    if old.request.generation == new.request.generation or old.request.queues != new.request.queues or \
            old.request.server_side != new.request.server_side:  # the directions trade devices
        return None
    shared = _paired([op for op in old.ops if _shared(op)], [op for op in new.ops if _shared(op)])
    if shared is None:
        return None
    changes, backs = shared
    old_trees, old_groups = _units(old)
    new_trees, new_groups = _units(new)
    for key in old_groups.keys() & new_groups.keys():
        kept = _paired(old_groups[key], new_groups[key])
        if kept is None:
            return None
        changes += kept[0]
        backs += kept[1]
    gone = [ops for key, ops in old_groups.items() if key not in new_groups]
    built = [ops for key, ops in new_groups.items() if key not in old_groups]
    old_gen = old_trees + [op for ops in gone for op in ops]
    fresh = {id(op) for op in new_trees} | {id(op) for ops in built for op in ops}
    new_gen = [op for op in new.ops if id(op) in fresh]  # in plan order
    if _keys(old_gen) & _keys(new_gen):
        return None
    # the root filters last, on every device: where the new tree takes over on adding them,
    # everything they lead to is there.  Just before them the old groups are held still:
    # a new tree whose root filters come first in node order takes over as they are added,
    # one whose filters come after as the old ones go
    held = [ops[0] for ops in gone]
    undo = tuple(backs) + tuple(Change(op) for op in held)  # the old groups' own rates back
    return Switch(tuple(changes), tuple(op for op in new_gen if not _root_filter(op)), tuple(_held(held)),
                  tuple(op for op in new_gen if _root_filter(op)), _removal(old, new, held),
                  _removal(new, old, [ops[0] for ops in built]), undo, tuple(op for op in old.ops if type(op) in _PINS))


def staging(old: Plan | None, new: Plan) -> Switch | None:
    """The switch a staged apply makes from ``old`` (the installed plan, or None) to ``new``
    (placed by ``placement.staged``): its ``build`` goes in at the stage, and its ``commit``
    later.  The same two plans give the same switch, so a commit, an abort or the repair of
    a killed stage works it out again from the record.  None when ``new`` cannot be built
    beside ``old``."""
    if old is None:
        return from_nothing(new)
    switch = make_before_break(old, new)
    if switch is not None:
        return switch
    changes = in_place(old, new)
    return None if changes is None else in_place_switch(changes, in_place(new, old))


def unbuilt(old: Plan | None, switch: Switch, refused=frozenset()) -> tuple:
    """What removes a staged ``switch.build`` that stopped part way, every part by its own
    handle -- the parts it made and nothing else: ``refused`` (indexes in ``build``) are the
    parts the kernel would not make, whose handles someone else's object may hold.  Its
    groups, its tables, and the filter lists ``old`` does not use and no refused part is in
    (a list the build made goes whole: u32 keeps an empty one); over nothing (``old``
    None), the plan's teardown."""
    if old is None:
        return switch.undo_removal
    build = switch.build
    lists = [(op.dev, op.parent, op.prio, op.protocol) for op in build if type(op) in (U32Table, U32Filter)
             and _on_shared(op)]
    theirs = {(build[i].dev, build[i].parent, build[i].prio, build[i].protocol) for i in refused
              if type(build[i]) in (U32Table, U32Filter)} | set(_filter_lists(old))
    tables = [DelFilter(op.dev, op.parent, op.prio, op.protocol, u32_handle(op.ht)) for i, op in enumerate(build)
              if type(op) is U32Table and _on_shared(op) and i not in refused]
    groups = [DelClass(op.dev, op.classid) for i, op in enumerate(build)
              if type(op) is HtbClass and _pool(op.parent) and i not in refused]
    return tuple(tables + [DelFilter(*head) for head in dict.fromkeys(lists) if head not in theirs] + groups)
