"""How a new plan goes over the installed one (``over``: changes in place, a
make-before-break switch, or a rebuild), and where a re-apply's cohorts go (shape mode,
pure): the handles each keeps or takes (``replaced``), and the places of a request as it
stands or packed.  ``layout`` numbers the handles; ``diff`` finds the changes.
"""

from dataclasses import replace

from ..errors import FieldError
from ..spec.model import Request
from . import diff
from .compile import compile_plan
from .layout import MAJORS, MINORS, group_links_of, Layout, Place
from .stages import cell_groups, leaf_majors


def replaced(req: Request, old: Request, move=frozenset()) -> tuple | None:
    """Places for ``req``'s cohorts over the installed ``old`` (shape mode, a pure function
    of the two): a cohort of the same name and number of links as one of ``old``'s stays
    where it is, unless named in ``move``; every other takes free handles, clear of all of
    ``old``'s (they stand until a switch has ended) and of each other's -- first fit, its
    groups from the top of the majors, its queues from the bottom.  None when they do not
    fit: the caller rebuilds in the other generation or from scratch."""
    before = {s.cohort.name: s for s in Layout.of(old).spans}
    size = group_links_of(req)
    cells_before, cells_now = _cells(old), _cells(req)
    places: list = []
    for c in req.cohorts:
        s = before.get(c.name)
        kept = s and c.name not in move and s.cohort.link_count() == c.link_count() and \
            leaf_majors(s.cohort) == leaf_majors(c) and \
            cells_before.get(c.name) == cells_now.get(c.name)  # as many queue majors, and the same cell's group
        places.append(s.place if kept else None)
    taken = [r for s in before.values() for r in s.ranges()]
    for k, c in enumerate(req.cohorts):
        if places[k] is not None:
            continue
        n = c.link_count()
        groups = -(-n // size) if c.cell is None else cell_groups(c) if cells_now[c.name][1][0][0] == c.name else 0
        minor = _first_fit(taken, "minor", groups, MINORS, top=False)
        groups_at = _first_fit(taken, "major", groups, MAJORS, top=True)
        if minor is None or groups_at is None:
            return None
        taken += [("minor", minor, minor + groups), ("major", groups_at, groups_at + groups)]
        leaves = n * leaf_majors(c)
        leaf = _first_fit(taken, "major", leaves, MAJORS, top=False)
        if leaf is None:
            return None
        taken.append(("major", leaf, leaf + leaves))
        places[k] = Place(minor, groups_at + groups - 1, leaf)
    return tuple(places)


def _cells(req: Request) -> dict:
    """Each cell cohort's cell as its group holds it: (whether it has a gate, its cohorts'
    names and link counts in order) by cohort name.  A cohort kept where it stands keeps its
    cell's group only if that is the same."""
    members: dict = {}
    for c in req.cohorts:
        if c.cell is not None:
            members.setdefault(c.cell.name, []).append((c.name, c.link_count()))
    return {c.name: (c.cell.trace is not None, tuple(members[c.cell.name])) for c in req.cohorts
            if c.cell is not None}


def _first_fit(taken: list, space: str, size: int, bounds: tuple[int, int], *, top: bool) -> int | None:
    """The first handle of ``size`` free ones in ``space`` within ``bounds``: the lowest such
    run, or with ``top`` the highest."""
    used = sorted((lo, hi) for s, lo, hi in taken if s == space and lo < hi)
    gaps, at = [], bounds[0]
    for lo, hi in used:
        if lo > at:
            gaps.append((at, min(lo, bounds[1])))
        at = max(at, hi)
    if at < bounds[1]:
        gaps.append((at, bounds[1]))
    fits = [(lo, hi) for lo, hi in gaps if hi - lo >= size]
    if not fits:
        return None
    return fits[-1][1] - size if top else fits[0][0]


def places_of(req: Request) -> tuple:
    """Where ``req``'s cohorts are: its places, or the packed ones when it has none."""
    return tuple(s.place for s in Layout.of(req).spans)


def packed(req: Request) -> tuple:
    """The places of ``req``'s cohorts packed in its generation's handles (``places`` None)."""
    return places_of(replace(req, places=None))


def over(old, plan, *, beside: bool = False):
    """How ``plan`` goes over the installed plan ``old``: (the plan to install, changes in
    place or None, a make-before-break switch or None).

    1. Every cohort where it stands (the same selectors and layout, other numbers): changes
       in place, in the installed plan's handles.
    2. Shape mode, some cohorts kept where they stand: those change in place and keep their
       queues; the others (grown, other flows or queue kind, new) are built in free handles
       and switched to with new root trees in the other generation (``replaced``).
    3. Otherwise the whole plan is built beside the old in the other generation, when both
       fit (packed there, or failing that in free handles);
    4. else (None, None): the old is removed and ``plan`` built.
    1-3 number the qdiscs and size the groups as the installed plan does
    (``Request.numbering``, ``Request.group_links``: a plan an earlier ratelimit installed
    keeps its numbering and its groups until it is removed).  ``beside`` (a staged apply:
    nothing of the old plan changes before the switch) tries 3 first, then 1 and 2."""
    sized = old.request.queues == plan.request.queues and \
        group_links_of(old.request) != group_links_of(plan.request)
    req = replace(plan.request, numbering=old.request.numbering,
                              **({"group_links": old.request.group_links} if sized else {}))
    gen = old.request.generation

    def as_(generation, places):
        if places is not None and places == packed(replace(req, generation=generation)):
            places = None  # the packed layout: the record says so by leaving places out
        moved = replace(req, generation=generation, places=places)
        return plan if moved == plan.request else compile_plan(moved)

    by_cohort = req.mode == old.request.mode == "shape"
    every = {c.name for c in req.cohorts}
    places = replaced(req, old.request) if by_cohort else None
    try:
        same = as_(gen, places)
    except FieldError:  # too many links for the installed plan's generation
        same = None
    changes = None if same is None else diff.in_place(old, same)
    tries = []  # places for the other generation, best first (None: packed there)
    if beside:
        tries += [None, replaced(req, old.request, every)] if by_cohort else [None]
    elif changes is not None:
        return same, changes, None
    if places is not None and same is not None and set(places) & set(places_of(old.request)):
        move = _cohorts_of(same, diff.rebuilt_groups(old, same))  # kept where they stand, but not the same parts
        tries.append(replaced(req, old.request, move) if move else places)
    tries.append(None)
    if by_cohort:
        tries.append(replaced(req, old.request, every))
    for places in dict.fromkeys(tries):  # each once (a failed replacement is None: packed)
        try:
            other = as_(1 - gen, places)
        except FieldError:  # too many links for the other generation
            continue
        switch = diff.make_before_break(old, other)
        if switch is not None:
            return other, None, switch
    if changes is not None:
        return same, changes, None
    return plan, None, None


def staged(old, plan):
    """``plan`` placed for a staged apply over ``old`` (the installed plan, or None): the
    plan ``diff.staging`` builds beside ``old``; None when it cannot stand beside it (other
    devices, direction, tx queues or link layer, or together more links than the handles
    hold)."""
    if old is None:
        return plan
    plan, changes, switch = over(old, plan, beside=True)
    return plan if switch is not None or changes is not None else None


def _cohorts_of(plan, groups: set) -> set:
    """The names of the cohorts whose groups are among ``groups`` ((device, class) pairs)."""
    lay = Layout.of(plan.request)
    return {s.cohort.name for s in lay.spans for g in range(s.groups) for dev, classid in groups
            if classid == lay.group_class_of(s, g)}
