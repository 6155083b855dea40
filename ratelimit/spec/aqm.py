"""Managed queues: a link's queue run by an AQM (fq_codel, codel, pie or cake) instead of
dropping only when full (droptail, the default).

A link's ``aqm`` is given as text or as a table, in the kernel's terms:

    >>> a = parse_aqm("fq_codel target=5ms interval=100ms ecn=on", "--aqm")
    >>> a.tc_words()
    'fq_codel target 5ms interval 100ms ecn'

A parameter left out is the kernel's default (``KERNEL_DEFAULTS``).  The queue's length (``queue``,
or the default queue) stays the most the link holds: it is the AQM's hard limit unless
``limit`` gives one in packets.  ``droptail`` names today's queue, so that a command line can
take a profile's AQM away.  Where the AQM sits beside a delay stage: docs/design.md, "Managed
queues".

May import: errors, spec.units.
"""

from dataclasses import dataclass, replace

from ..errors import FieldError, UsageError
from .units import format_time, parse_count, parse_pairs, parse_part, parse_time_us

# discipline -> its parameters
DISCIPLINES = {
    "droptail": (),
    "fq_codel": ("target", "interval", "limit", "ecn", "flows"),
    "codel": ("target", "interval", "limit", "ecn"),
    "pie": ("target", "limit", "ecn"),
    "cake": ("rtt",),
}
# the kernel's defaults for what is left out (sch_fq_codel.c, sch_codel.c, sch_pie.c,
# sch_cake.c), which a plan gives in full (``Aqm.full``); the limit is the link's queue
KERNEL_DEFAULTS = {
    "fq_codel": {"target_us": 5000, "interval_us": 100_000, "ecn": True, "flows": 1024},
    "codel": {"target_us": 5000, "interval_us": 100_000, "ecn": False},
    "pie": {"target_us": 15_000, "ecn": False},
    "cake": {"rtt_us": 100_000},
}
MAX_TIME_US = 10_000_000  # 10 s: codel's and pie's targets and intervals are u32 microseconds
MAX_LIMIT = 1_000_000  # packets, as --queue
MAX_FLOWS = 65536  # fq_codel's flows: 1 to 65536
_ON = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
EXAMPLE = "fq_codel [target=5ms] [interval=100ms] [limit=1000] [ecn=on|off] [flows=1024]"
ALLOWED = f"is not a managed queue (e.g. '{EXAMPLE}'; or codel, pie, cake, droptail)"


@dataclass(frozen=True)
class Aqm:
    """A managed queue: its discipline and the parameters given (0 or None: the kernel's)."""

    discipline: str
    target_us: int = 0
    interval_us: int = 0
    limit_pkts: int = 0
    ecn: bool | None = None
    flows: int = 0
    rtt_us: int = 0

    @property
    def managed(self) -> bool:
        """False for droptail: the link's queue is a fifo, as without an AQM."""
        return self.discipline != "droptail"

    def full(self) -> "Aqm":
        """This AQM with every parameter it left out at the kernel's default.

        >>> Aqm("codel", target_us=2000).full().text()
        'codel target=2ms interval=100ms ecn=off'
        """
        # unset is None (ecn) or 0 (the numbers); ``ecn=False`` is given, though ``False == 0``
        given = {k: v for k, v in KERNEL_DEFAULTS.get(self.discipline, {}).items()
                 if getattr(self, k) is None or (type(getattr(self, k)) is int and getattr(self, k) == 0)}
        return replace(self, **given)

    def _parts(self) -> list[tuple[str, str]]:
        out = []
        for key, us in (("target", self.target_us), ("interval", self.interval_us), ("rtt", self.rtt_us)):
            if us:
                out.append((key, format_time(us)))
        if self.limit_pkts:
            out.append(("limit", str(self.limit_pkts)))
        if self.ecn is not None:
            out.append(("ecn", "on" if self.ecn else "off"))
        if self.flows:
            out.append(("flows", str(self.flows)))
        return out

    def text(self) -> str:
        """The form ``parse_aqm`` reads: ``fq_codel target=5ms ecn=on``."""
        return " ".join([self.discipline, *(f"{k}={v}" for k, v in self._parts())])

    def tc_words(self, limit_pkts: int | None = None) -> str:
        """tc's words for it, its limit ``limit_pkts`` when given (the plan's: its own, else
        the link's queue); cake takes no limit in packets and shapes nothing here.

        >>> Aqm("codel", ecn=False).tc_words(200)
        'codel limit 200 noecn'
        """
        words = [self.discipline]
        limit = self.limit_pkts if limit_pkts is None else limit_pkts
        if self.discipline != "cake" and (limit or limit_pkts is not None):
            words += ["limit", str(limit)]
        for key, value in self._parts():
            if key == "ecn":
                words.append("ecn" if self.ecn else "noecn")
            elif key != "limit":
                words += [key, value]
        if self.discipline == "cake":
            words += ["unlimited", "besteffort"]
        return " ".join(words)


def parse_aqm(value, field: str = "--aqm") -> Aqm:
    """An ``Aqm`` from text (``fq_codel target=5ms``; pairs apart by spaces or commas) or a
    table (``{discipline = "fq_codel", target = "5ms"}``)."""
    if isinstance(value, dict):
        table = dict(value)
        name = table.pop("discipline", None)
        if name is None:
            raise UsageError(f"{field}: a managed queue needs its discipline (e.g. "
                             f"{{ discipline = \"fq_codel\", target = \"5ms\" }})")
    elif isinstance(value, str):
        words, table = parse_pairs(value, field, ALLOWED, lead=1)
        name = words[0] if words else ""
    else:
        raise FieldError(field, value, ALLOWED)
    if not isinstance(name, str) or name not in DISCIPLINES:
        raise FieldError(field, repr(name), f"is not a discipline (allowed: {', '.join(DISCIPLINES)})")
    keys = DISCIPLINES[name]
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise FieldError(field, f"{unknown[0]}={table[unknown[0]]!r}",
                         f"is not a parameter of {name} (allowed: {', '.join(keys) or 'none'})")
    times = {}
    for key in ("target", "interval", "rtt"):
        if key in table:
            us = parse_part(parse_time_us, table[key], field, key)
            if not 0 < us <= MAX_TIME_US:
                raise FieldError(field, f"{key}={table[key]!r}", "is out of range (above 0, at most 10s)")
            times[key] = us
    if times.get("interval", MAX_TIME_US) < times.get("target", 0):
        raise FieldError(field, f"interval={table['interval']!r}",
                         f"is below target ({format_time(times['target'])}): codel's interval is the longer")
    return Aqm(name, times.get("target", 0), times.get("interval", 0),
               _count(table.get("limit"), field, "limit", MAX_LIMIT), _switch(table.get("ecn"), field),
               _count(table.get("flows"), field, "flows", MAX_FLOWS), times.get("rtt", 0))


def _count(value, field: str, key: str, most: int) -> int:
    """The part ``key`` as a count from 1 to ``most`` (``units.parse_count``); 0 when left out."""
    return 0 if value is None else parse_part(lambda text, f: parse_count(text, f, 1, most), value, field, key)


def _switch(value, field: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    on = _ON.get(value.lower()) if isinstance(value, str) else None
    if on is None:
        raise FieldError(field, f"ecn={value!r}", "is not on or off")
    return on


def managed(params) -> "Aqm | None":
    """The AQM of link parameters ``params`` when their queue is managed, else None (droptail)."""
    a = params.aqm
    return a if a is not None and a.managed else None


def from_record(data) -> "Aqm | None":
    """The AQM ``dataclasses.asdict`` wrote, unchecked (``check`` is), or None."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("aqm is not an object")
    return Aqm(**data)


def check(aqm, field: str = "--aqm") -> None:
    """FieldError unless ``aqm`` is an ``Aqm`` ``parse_aqm`` could have made."""
    if not isinstance(aqm, Aqm) or not isinstance(aqm.discipline, str):
        raise FieldError(field, repr(aqm)[:40], ALLOWED)
    try:
        again = parse_aqm(aqm.text(), field)
    except (FieldError, UsageError, AttributeError, TypeError):
        raise FieldError(field, repr(aqm)[:40], ALLOWED) from None
    if again != aqm:
        raise FieldError(field, repr(aqm)[:40], ALLOWED)
