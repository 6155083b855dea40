"""Cells, pure: a capacity that the links of a cohort share beside each link's own cap
(docs/cells.md).  Parsing a cell as a scenario or the command line gives it, and checking
how cohorts join cells; the layout puts a cell's links in one group, whose class the cell
is (``plan.compile``).

    >>> parse_cell("20mbit/5mbit", "--cell")
    Cell(name='main', down_bps=20000000, up_bps=5000000)
"""

import re

from ..errors import FieldError, UsageError
from .model import Cell
from .units import parse_rate_bps

CELL_KEYS = {"description", "source", "down", "up"}
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
    description or its source."""
    if not _NAME.fullmatch(name):
        raise FieldError(where, f"'{name}'", "is not a cell name (letters, digits, '.', '_', '-'; up to 63)")
    if not isinstance(body, dict):
        raise FieldError(where, type(body).__name__, "is not a table (down = ..., up = ...)")
    for key in body:
        if key not in CELL_KEYS:
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {', '.join(sorted(CELL_KEYS))})")
    if not (body.get("description") or body.get("source")):
        raise UsageError(f"{where}: needs a description or its source (what this capacity stands for)")
    if "down" not in body and "up" not in body:
        raise UsageError(f"{where}: no capacity (give down, up or both, e.g. down = \"20mbit\")")
    return Cell(name, *(None if side not in body else parse_rate_bps(body[side], f"{where} {side}")
                        for side in ("down", "up")))


def check_cells(cohorts, group_links: int, mode: str) -> None:
    """Each cell joined by one cohort, in shape mode, whose links fit one group per
    direction (a cell's users are the classes of one HTB qdisc, so that they share its
    capacity by turns: see docs/design.md, "Cells"); refused in one line naming the cell."""
    joined: dict = {}
    for c in cohorts:
        if c.cell is None:
            continue
        if mode != "shape":
            raise UsageError(f"cell {c.cell.name}: needs --mode shape (a cell is a class its links share; "
                             "police mode has no classes)")
        if c.cell.name in joined:
            raise UsageError(f"cell {c.cell.name}: joined by cohorts {joined[c.cell.name]} and {c.name}; "
                             "a cell takes one cohort's links for now (give each cohort its own cell)")
        joined[c.cell.name] = c.name
        if c.others:
            raise UsageError(f"cell {c.cell.name}: the default cohort cannot join a cell (it is one link already)")
        if c.link_count() > group_links:
            raise UsageError(f"cell {c.cell.name}: cohort {c.name} has {c.link_count():,} links, more than one "
                             f"group holds ({group_links}); a cell's links share one group (split the cohort "
                             "and its cell)")
