"""Bursty MACs: netem's ``slot``, which holds a link's packets and lets them go together, as
Wi-Fi aggregation, LTE scheduling and DOCSIS grants do.

A link's ``slot`` is given as text or as a table:

    >>> s = parse_slot("min=2ms max=8ms packets=32", "--slot")
    >>> s.tc_words()
    'slot 2ms 8ms packets 32'

The parameters are netem's (tc-netem(8)): each slot opens a uniform draw between ``min`` and
``max`` after the last one closed (``max`` left out: ``min``), and lets out at most
``packets`` packets and ``bytes`` bytes (left out: no limit) before it closes.  A packet that
finds no slot open waits for the next one, so packets that arrive while one waits leave
together.

May import: errors, spec.units.
"""

from dataclasses import dataclass

from ..errors import FieldError, UsageError
from .units import format_time, parse_pairs, parse_part, parse_size_bytes, parse_time_us, whole_number

KEYS = ("min", "max", "packets", "bytes")
MAX_SLOT_US = 10_000_000  # 10 s: a slot longer than that holds a link, it does not batch it
MAX_COUNT = (1 << 31) - 1  # the kernel's s32
EXAMPLE = "min=2ms [max=8ms] [packets=32] [bytes=64kb]"
ALLOWED = f"is not a slot (e.g. '{EXAMPLE}')"


@dataclass(frozen=True)
class Slot:
    """netem's slot: the time between slots (``min_us`` to ``max_us``, uniform) and what a
    slot lets out (``packets``, ``bytes_``; 0: no limit)."""

    min_us: int
    max_us: int
    packets: int = 0
    bytes_: int = 0

    def text(self) -> str:
        """The form ``parse_slot`` reads: ``min=2ms max=8ms packets=32``."""
        out = [f"min={format_time(self.min_us)}", f"max={format_time(self.max_us)}"]
        out += [f"packets={self.packets}"] if self.packets else []
        return " ".join(out + ([f"bytes={self.bytes_}b"] if self.bytes_ else []))

    def tc_words(self) -> str:
        """tc's words: ``slot MIN MAX [packets N] [bytes N]``."""
        out = ["slot", format_time(self.min_us), format_time(self.max_us)]
        out += [f"packets {self.packets}"] if self.packets else []
        return " ".join(out + ([f"bytes {self.bytes_}"] if self.bytes_ else []))


def parse_slot(value, field: str = "--slot") -> Slot:
    """A ``Slot`` from text (``min=2ms max=8ms packets=32``; pairs apart by spaces or commas)
    or a table (``{min = "2ms", packets = 32}``)."""
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
    if "min" not in table:
        raise UsageError(f"{field}: a slot needs min, the time between slots (e.g. '{EXAMPLE}')")
    lo = parse_part(parse_time_us, table["min"], field, "min")
    hi = parse_part(parse_time_us, table["max"], field, "max") if "max" in table else lo
    for name, us in (("min", lo), ("max", hi)):
        if not 0 < us <= MAX_SLOT_US:
            raise FieldError(field, f"{name}={table[name]!r}", "is out of range (above 0, at most 10s)")
    if hi < lo:
        raise FieldError(field, f"max={table['max']!r}", f"is below min ({format_time(lo)})")
    packets = _count(table.get("packets"), field)
    size = 0 if table.get("bytes") is None else parse_part(parse_size_bytes, table["bytes"], field, "bytes")
    if not 0 <= size <= MAX_COUNT:
        raise FieldError(field, f"bytes={table['bytes']!r}", f"is out of range (at most {MAX_COUNT} bytes)")
    return Slot(lo, hi, packets, size)


def _count(value, field: str) -> int:
    if value is None:
        return 0
    n = whole_number(value)
    if n is None or not 1 <= n <= MAX_COUNT:
        raise FieldError(field, f"packets={value!r}", f"is not a number of packets (1 to {MAX_COUNT})")
    return n


def from_record(data) -> "Slot | None":
    """The slot ``dataclasses.asdict`` wrote, unchecked (``check`` is), or None."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("slot is not an object")
    return Slot(**data)


def check(slot, field: str = "--slot") -> None:
    """FieldError unless ``slot`` is a ``Slot`` ``parse_slot`` could have made."""
    ok = isinstance(slot, Slot) and all(type(v) is int for v in (slot.min_us, slot.max_us, slot.packets, slot.bytes_))
    if not ok or not (0 < slot.min_us <= slot.max_us <= MAX_SLOT_US and 0 <= slot.packets <= MAX_COUNT
                      and 0 <= slot.bytes_ <= MAX_COUNT):
        raise FieldError(field, repr(slot)[:40], f"is not a slot (e.g. '{EXAMPLE}')")
