"""Bursty MACs: netem's ``slot``, which holds a link's packets and lets them go together, as
Wi-Fi aggregation, LTE scheduling and DOCSIS grants do.

A link's ``slot`` is given as text or as a table, in one of two forms:

    >>> parse_slot("min=2ms max=8ms packets=32", "--slot").tc_words()
    'slot 2ms 8ms packets 32'
    >>> parse_slot("distribution=pareto delay=5ms jitter=2ms packets=8", "--slot").tc_words()
    'slot distribution pareto 5ms 2ms packets 8'

The parameters are netem's (tc-netem(8)): each slot opens a uniform draw between ``min`` and
``max`` after the last one closed (``max`` left out: ``min``) -- or, in the second form, a draw
from one of the tables tc ships (``distribution``), of mean ``delay`` and spread ``jitter`` (a
negative draw opens the next slot at once) -- and lets out at most ``packets`` packets and
``bytes`` bytes (left out: no limit) before it closes.  A packet that finds no slot open waits
for the next one, so packets that arrive while one waits leave together.

May import: errors, spec.units.
"""

from dataclasses import dataclass

from ..errors import FieldError, UsageError
from .units import format_time, parse_pairs, parse_part, parse_size_bytes, parse_time_us, whole_number

UNIFORM_KEYS = ("min", "max")
DRAWN_KEYS = ("distribution", "delay", "jitter")
KEYS = UNIFORM_KEYS + ("packets", "bytes") + DRAWN_KEYS
# the tables tc ships in its lib dir (NAME.dist): what a drawn slot's gap follows
DISTRIBUTIONS = ("normal", "pareto", "paretonormal", "experimental")
MAX_SLOT_US = 10_000_000  # 10 s: a slot longer than that holds a link, it does not batch it
MAX_COUNT = (1 << 31) - 1  # the kernel's s32
MAX_JITTER_US = MAX_COUNT // 1000  # the kernel caps a slot's jitter at INT_MAX ns (about 2.147 s)
EXAMPLE = "min=2ms [max=8ms] [packets=32] [bytes=64kb]"
DRAWN_EXAMPLE = "distribution=pareto delay=5ms jitter=2ms [packets=32] [bytes=64kb]"
ALLOWED = f"is not a slot (e.g. '{EXAMPLE}', or drawn from a table: '{DRAWN_EXAMPLE}')"


@dataclass(frozen=True)
class Slot:
    """netem's slot: the time between slots (``min_us`` to ``max_us``, uniform; or, with
    ``dist``, drawn from that table with mean ``dist_delay_us`` and spread ``dist_jitter_us``,
    ``min_us`` and ``max_us`` 0) and what a slot lets out (``packets``, ``bytes_``; 0: no
    limit).  ``Slot(0, 0, 8, dist="pareto", dist_delay_us=5000, dist_jitter_us=2000)`` is
    ``distribution=pareto delay=5ms jitter=2ms packets=8``."""

    min_us: int
    max_us: int
    packets: int = 0
    bytes_: int = 0
    dist: str = ""  # "" (uniform between min and max) or one of DISTRIBUTIONS
    dist_delay_us: int = 0
    dist_jitter_us: int = 0

    def _limits(self, sep: str, unit: str) -> list:
        out = [f"packets{sep}{self.packets}"] if self.packets else []
        return out + ([f"bytes{sep}{self.bytes_}{unit}"] if self.bytes_ else [])

    def text(self) -> str:
        """The form ``parse_slot`` reads: ``min=2ms max=8ms packets=32``, or
        ``distribution=pareto delay=5ms jitter=2ms packets=32``."""
        if self.dist:
            out = [f"distribution={self.dist}", f"delay={format_time(self.dist_delay_us)}",
                   f"jitter={format_time(self.dist_jitter_us)}"]
        else:
            out = [f"min={format_time(self.min_us)}", f"max={format_time(self.max_us)}"]
        return " ".join(out + self._limits("=", "b"))

    def tc_words(self) -> str:
        """tc's words: ``slot MIN MAX [packets N] [bytes N]``, or ``slot distribution NAME
        DELAY JITTER [packets N] [bytes N]``."""
        if self.dist:
            out = ["slot distribution", self.dist, format_time(self.dist_delay_us), format_time(self.dist_jitter_us)]
        else:
            out = ["slot", format_time(self.min_us), format_time(self.max_us)]
        return " ".join(out + self._limits(" ", ""))


def parse_slot(value, field: str = "--slot") -> Slot:
    """A ``Slot`` from text (``min=2ms max=8ms packets=32``, ``distribution=normal delay=20ms
    jitter=5ms``; pairs apart by spaces or commas) or a table (``{min = "2ms", packets = 32}``)."""
    if isinstance(value, dict):
        table = dict(value)
    elif isinstance(value, str):
        _, table = parse_pairs(value, field, ALLOWED)
    else:
        raise FieldError(field, value, ALLOWED)
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise FieldError(field, f"{unknown[0]}={table[unknown[0]]!r}",
                         f"is not a slot parameter (allowed: {', '.join(KEYS)})")
    drawn = [k for k in DRAWN_KEYS if k in table]
    uniform = [k for k in UNIFORM_KEYS if k in table]
    if drawn and uniform:
        raise FieldError(field, f"{drawn[0]}={table[drawn[0]]!r}",
                         f"cannot go with {uniform[0]}={table[uniform[0]]!r} (a slot is either '{EXAMPLE}' "
                         f"or '{DRAWN_EXAMPLE}')")
    packets = _count(table.get("packets"), field)
    size = 0 if table.get("bytes") is None else parse_part(parse_size_bytes, table["bytes"], field, "bytes")
    if not 0 <= size <= MAX_COUNT:
        raise FieldError(field, f"bytes={table['bytes']!r}", f"is out of range (at most {MAX_COUNT} bytes)")
    if drawn:
        return _drawn(table, field, packets, size)
    if "min" not in table:
        raise UsageError(f"{field}: a slot needs min, the time between slots (e.g. '{EXAMPLE}')")
    lo = parse_part(parse_time_us, table["min"], field, "min")
    hi = parse_part(parse_time_us, table["max"], field, "max") if "max" in table else lo
    for name, us in (("min", lo), ("max", hi)):
        if not 0 < us <= MAX_SLOT_US:
            raise FieldError(field, f"{name}={table[name]!r}", "is out of range (above 0, at most 10s)")
    if hi < lo:
        raise FieldError(field, f"max={table['max']!r}", f"is below min ({format_time(lo)})")
    return Slot(lo, hi, packets, size)


def _drawn(table: dict, field: str, packets: int, size: int) -> Slot:
    """The slot whose gaps are drawn from a table: ``distribution``, ``delay`` and ``jitter``."""
    tables = ", ".join(DISTRIBUTIONS[:-1]) + f" or {DISTRIBUTIONS[-1]}"
    for key, what in (("distribution", f"the table the gaps are drawn from: {tables}"),
                      ("delay", "the mean time between slots"), ("jitter", "the spread of the time between slots")):
        if key not in table:
            raise UsageError(f"{field}: a slot drawn from a distribution needs {key}, {what} "
                             f"(e.g. '{DRAWN_EXAMPLE}')")
    name = table["distribution"]
    if name not in DISTRIBUTIONS:  # (a table's non-string value is never one)
        raise FieldError(field, f"distribution={name!r}", f"is not a table tc ships ({', '.join(DISTRIBUTIONS)})")
    delay = parse_part(parse_time_us, table["delay"], field, "delay")
    if not 0 <= delay <= MAX_SLOT_US:
        raise FieldError(field, f"delay={table['delay']!r}", "is out of range (0 to 10s)")
    jitter = parse_part(parse_time_us, table["jitter"], field, "jitter")
    if not 0 < jitter <= MAX_JITTER_US:
        raise FieldError(field, f"jitter={table['jitter']!r}",
                         f"is out of range (above 0, at most {format_time(MAX_JITTER_US)}: tc refuses 0, "
                         "the kernel caps it at 2**31-1 ns)")
    return Slot(0, 0, packets, size, name, delay, jitter)


def _count(value, field: str) -> int:
    if value is None:
        return 0
    n = whole_number(value)
    if n is None or not 1 <= n <= MAX_COUNT:
        raise FieldError(field, f"packets={value!r}", f"is not a number of packets (1 to {MAX_COUNT})")
    return n


def from_record(data) -> "Slot | None":
    """The slot ``dataclasses.asdict`` wrote, unchecked (``check`` is), or None (a record
    written before drawn slots has no ``dist``: a uniform one)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("slot is not an object")
    return Slot(**data)


def check(slot, field: str = "--slot") -> None:
    """FieldError unless ``slot`` is a ``Slot`` ``parse_slot`` could have made: uniform
    (0 < min <= max <= 10 s, no table) or drawn (min and max 0, a table tc ships, 0 <= delay <=
    10 s, 0 < jitter <= MAX_JITTER_US)."""
    numbers = ("min_us", "max_us", "packets", "bytes_", "dist_delay_us", "dist_jitter_us")
    ok = isinstance(slot, Slot) and type(slot.dist) is str and all(type(getattr(slot, k)) is int for k in numbers)
    if ok and slot.dist:
        ok = (slot.dist in DISTRIBUTIONS and slot.min_us == slot.max_us == 0
              and 0 <= slot.dist_delay_us <= MAX_SLOT_US and 0 < slot.dist_jitter_us <= MAX_JITTER_US)
    elif ok:
        ok = slot.dist_delay_us == slot.dist_jitter_us == 0 and 0 < slot.min_us <= slot.max_us <= MAX_SLOT_US
    if not ok or not (0 <= slot.packets <= MAX_COUNT and 0 <= slot.bytes_ <= MAX_COUNT):
        raise FieldError(field, repr(slot)[:40], ALLOWED)
