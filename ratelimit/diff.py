"""What an apply over an installed plan has to change: the difference of two plans.

Pure.  Two plans of the same selectors (a profile switch, a new rate, delay or queue)
compile to the same operations in the same order, object for object -- the same
classes, leaf qdiscs and filters under the same handles -- and differ only in numbers.
``in_place`` turns such a difference into ``Change`` operations: HTB classes, netem and
fifo leaves, and u32 filters (their policers) changed where they stand, so no queue is
flushed and no packet of a selected flow passes unshaped.  Anything else (other hosts
or ports, another mode or link layer, a leaf of another kind, a netem stage that would drop
a part -- reordering, corruption, correlations, its rate -- the kernel keeps on a change)
is not a change in place:
``in_place`` returns None and the caller rebuilds.
"""

from .plan import Change, FifoQdisc, HtbClass, NetemQdisc, U32Filter, netem_groups

# What must be equal for an operation to be changed in place, per type; the rest are its
# numbers.  A type missing here must be equal as a whole.
_FIXED = {
    HtbClass: ("dev", "parent", "classid"),
    NetemQdisc: ("dev", "parent", "handle"),
    FifoQdisc: ("dev", "parent", "handle", "kind"),
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
