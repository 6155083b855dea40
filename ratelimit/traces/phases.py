"""Where in its trace or schedule each link starts: pure and deterministic.

A thousand users on one trace should not all hit the same tunnel at the same
instant, so each link replays from its own phase:

* ``random`` (the default): an offset drawn from the link's identity and a seed,
  the same every time for the same two (a restart, a re-apply, another machine), and
  uniform over the period: ``BLAKE2b(seed, identity)`` as a 64-bit number modulo the
  period;
* ``same``: every link at 0, in lock-step;
* a time (``"12.5s"``, ``"300ms"``): every link at that offset (modulo the period).

A link's identity is its cohort and its host (and port, per port): ``identity``.  Both
directions of a link take one phase, as mm-link starts its uplink and downlink traces
together; with traces of two periods, the offset is drawn over the longer and each
direction wraps by its own.  The phases are in whole milliseconds (a trace's unit).
"""

import hashlib
from dataclasses import dataclass

from ..errors import FieldError
from ..spec.units import parse_count, parse_time_us

SAME, RANDOM, FIXED = "same", "random", "fixed"
MAX_SEED = 2**64 - 1


@dataclass(frozen=True)
class Phase:
    """How links choose their phase: ``kind`` ``random``, ``same`` or ``fixed`` (at ``offset_ms``)."""

    kind: str = RANDOM
    offset_ms: int = 0

    def text(self) -> str:
        return f"{self.offset_ms}ms" if self.kind == FIXED else self.kind


def parse_phase(value, field: str = "phase") -> Phase:
    """``random``, ``same`` or a time with a unit in whole milliseconds."""
    allowed = "is not a phase (random, same, or a time in whole milliseconds such as 12s or 300ms)"
    if isinstance(value, str) and value.strip().lower() in (SAME, RANDOM):
        return Phase(value.strip().lower())
    if isinstance(value, str) and value.strip().startswith("-"):
        raise FieldError(field, f"'{value}'", allowed)
    try:
        us = parse_time_us(value, field)
    except FieldError:
        raise FieldError(field, f"'{value}'", allowed) from None
    if us % 1000:
        raise FieldError(field, f"'{value}'", allowed)
    return Phase(FIXED, us // 1000)


def parse_seed(value, field: str = "seed") -> int:
    """A seed: a whole number from 0 to 2**64 - 1."""
    return parse_count(value, field, 0, MAX_SEED)


def identity(cohort: str, host, port: int | None = None) -> str:
    """A link's identity for its phase: ``cohort/host`` or ``cohort/host:port`` (IPv6
    hosts in brackets before a port)."""
    text = str(host)
    if port is None:
        return f"{cohort}/{text}"
    return f"{cohort}/[{text}]:{port}" if ":" in text else f"{cohort}/{text}:{port}"


def link_phase_ms(phase: Phase, seed: int, link: str, period_ms: int) -> int:
    """The phase of the link whose identity is ``link``, in [0, period_ms)."""
    if period_ms <= 0:
        raise ValueError(f"period {period_ms!r} ms is not positive")
    if phase.kind == SAME:
        return 0
    if phase.kind == FIXED:
        return phase.offset_ms % period_ms
    digest = hashlib.blake2b(link.encode("utf-8"), digest_size=8, key=seed.to_bytes(8, "big")).digest()
    return int.from_bytes(digest, "big") % period_ms


def phases(phase: Phase, seed: int, links, period_ms: int) -> dict[str, int]:
    """Each link's phase (``link_phase_ms``), by identity, in the order given."""
    return {link: link_phase_ms(phase, seed, link, period_ms) for link in links}
