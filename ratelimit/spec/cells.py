"""Cells, pure: a capacity that the links of a cohort share beside each link's own cap
(docs/cells.md).  Parsing a cell as a scenario or the command line gives it, and checking
how cohorts join cells; the layout puts a cell's links in one group, whose class the cell
is (``plan.groups``).

    >>> parse_cell("20mbit/5mbit", "--cell")
    Cell(name='main', down_bps=20000000, up_bps=5000000, trace=None, blackhole=False)
"""

import re

from ..errors import FieldError, UsageError
from .model import Cell
from .units import parse_rate_bps

CELL_KEYS = {"description", "source", "down", "up", "blackhole"}
TRACE_KEYS = ("trace_down", "trace_up", "schedule", "trace_scale")  # a traced cell's (``profiles.scenario``)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def parse_cell(text, field: str, name: str = "main") -> Cell:
    """``DOWN[/UP]`` (the command line's ``--cell``): the down capacity, and the up one if
    given (else up is not shared)."""
    down, slash, up = str(text).partition("/")
    if not down.strip() or (slash and not up.strip()):
        raise FieldError(field, f"'{text}'", "is not a cell's capacity (DOWN or DOWN/UP, e.g. 20mbit/5mbit)")
    return Cell(name, parse_rate_bps(down.strip(), field), parse_rate_bps(up.strip(), field) if slash else None)


def cell_table(name: str, body, where: str) -> Cell:
    """A scenario's ``[cell.NAME]`` table: ``down`` and/or ``up`` capacities, and a
    description or its source.  Its trace keys (``TRACE_KEYS``) are checked here and read
    by the caller: a traced direction has no capacity of its own."""
    if not _NAME.fullmatch(name):
        raise FieldError(where, f"'{name}'", "is not a cell name (letters, digits, '.', '_', '-'; up to 63)")
    if not isinstance(body, dict):
        raise FieldError(where, type(body).__name__, "is not a table (down = ..., up = ...)")
    for key in body:
        if key not in CELL_KEYS and key not in TRACE_KEYS:
            allowed = ", ".join(sorted(CELL_KEYS | set(TRACE_KEYS)))
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {allowed})")
    if not (body.get("description") or body.get("source")):
        raise UsageError(f"{where}: needs a description or its source (what this capacity stands for)")
    for side in ("down", "up"):
        if side in body and (f"trace_{side}" in body or "schedule" in body):
            follows = f"trace_{side}" if f"trace_{side}" in body else "schedule"
            raise UsageError(f"{where}: {side} and {follows} both give its {side} capacity; give one")
    if not any(k in body for k in ("down", "up", "trace_down", "trace_up", "schedule")):
        raise UsageError(f"{where}: no capacity (give down, up or both, e.g. down = \"20mbit\", or a trace_down, "
                         "trace_up or schedule)")
    blackhole = body.get("blackhole", False)
    if not isinstance(blackhole, bool):
        raise FieldError(f"{where} blackhole", blackhole, "is not true or false")
    return Cell(name, *(None if side not in body else parse_rate_bps(body[side], f"{where} {side}")
                        for side in ("down", "up")), blackhole=blackhole)


MAX_CELL_LINKS = 4096  # per direction: a cell's links are the classes of one HTB qdisc (docs/design.md, "Cells")


def check_cells(cohorts, mode: str) -> None:
    """The cohorts of each cell follow one another, in shape mode, on one link layer, and
    hold at most ``MAX_CELL_LINKS`` links per direction (a cell's users are the classes of
    one HTB qdisc, which shares its capacity by turns: docs/design.md, "Cells"); refused in
    one line naming the cell."""
    members: dict = {}
    last = None
    for c in cohorts:
        if c.cell is None:
            last = None
            continue
        name = c.cell.name
        if mode != "shape":
            raise UsageError(f"cell {name}: needs --mode shape (a cell is a class its links share; "
                             "police mode has no classes)")
        if c.others:
            raise UsageError(f"cell {name}: the default cohort cannot join a cell (it is one link already)")
        if name in members and last != name:
            raise UsageError(f"cell {name}: its cohorts {members[name][0].name} and {c.name} are apart; "
                             "a cell's cohorts follow one another (ratelimit orders a scenario's so)")
        first = members.setdefault(name, [c])[0]
        if c is not first:
            members[name].append(c)
            if c.cell != first.cell:
                raise UsageError(f"cell {name}: cohorts {first.name} and {c.name} give it different capacities")
            if c.link != first.link:
                raise UsageError(f"cell {name}: cohorts {first.name} ({first.link.name}) and {c.name} "
                                 f"({c.link.name}) are of different link layers; a cell's links share one")
        last = name
    for name, cs in members.items():
        links = sum(c.link_count() for c in cs)
        if links > MAX_CELL_LINKS:
            raise UsageError(f"cell {name}: {links:,} links, more than a cell holds ({MAX_CELL_LINKS:,} each way: "
                             "they are the classes of one HTB qdisc); split it into several cells")


def cell_order(cohorts: tuple) -> tuple:
    """``cohorts`` with each cell's cohorts moved up behind its first, the rest in order.

    >>> from .model import Cohort, LinkParams
    >>> def cohort(name, cell=None):
    ...     return Cohort(name, (), None, LinkParams(), LinkParams(), per="shared",
    ...                   cell=None if cell is None else Cell(cell, 1000))
    >>> [c.name for c in cell_order((cohort("a", "x"), cohort("b"), cohort("c", "x")))]
    ['a', 'c', 'b']
    """
    out, seen = [], set()
    for c in cohorts:
        if c.cell is None:
            out.append(c)
        elif c.cell.name not in seen:
            seen.add(c.cell.name)
            out += [d for d in cohorts if d.cell is not None and d.cell.name == c.cell.name]
    return tuple(out)
