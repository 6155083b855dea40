"""Units: parse what tc users write, once, at the edge; format it back for tc.

Inside the program every quantity is an int or float whose unit is in its name:
``rate_bps`` (bits/s), ``size_bytes``, ``time_us``, ``pct``.  The meanings are tc's:
``kbit`` is 1000 bit/s, ``kibit`` 1024; ``bps`` is *bytes* per second; ``kb``/``k``
as a size is 1024 bytes.  A bare rate is bits per second (as ratelimit v0.3's
``--rate 28800``); a bare size is bytes; a time needs a unit, because tc's bare
microseconds are a trap.
"""

import math
import re

from ..errors import FieldError
from .model import Burst, Queue

# ASCII digits only (re.ASCII: no other scripts' digits, no full-width ones), no sign, no
# "_" separators, no hex, no "inf"/"nan" words: what tc reads, as a person types it.
_NUMBER = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*", re.ASCII)
_WHOLE = re.compile(r"\s*([0-9]+)\s*", re.ASCII)
_PAIR = re.compile(r"([a-z0-9]+)=(\S+)", re.ASCII)
MAX_TEXT_CHARS = 64  # no number a person types is longer
MATCHED_CHARS = 1024  # longer text is not matched at all: a regular expression's time grows with it

_RATE_BITS = {
    "": 1, "bit": 1,
    "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024**2, "gibit": 1024**3, "tibit": 1024**4,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
    "kibps": 8 * 1024, "mibps": 8 * 1024**2, "gibps": 8 * 1024**3,
}
_SIZE_BYTES = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3,
    "kbit": 1024 / 8, "mbit": 1024**2 / 8, "gbit": 1024**3 / 8,
}
_TIME_US = {
    "us": 1, "usec": 1, "usecs": 1,
    "ms": 1e3, "msec": 1e3, "msecs": 1e3,
    "s": 1e6, "sec": 1e6, "secs": 1e6,
}

MAX_RATE_BPS = 2**32 * 8 * 1000  # far above any NIC; keeps numbers sane


def decimal(value) -> float | None:
    """A bare number as a person or a JSON document gives it -- ASCII digits with an
    optional fraction and exponent, or a JSON int or float -- as a finite float; None for
    anything else (a unit, a sign, other scripts' digits, NaN, an infinity, a value beyond
    a float).  ``-0`` from JSON is 0."""
    try:
        number, unit = _split("", value, "")
    except FieldError:
        return None
    return number if unit == "" and math.isfinite(number) else None


def whole_number(value) -> int | None:
    """A whole number as a person or a JSON document gives it (ASCII digits, a JSON int, or
    a JSON float with nothing after the point); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value == int(value) else None
    if isinstance(value, str) and len(value) <= MAX_TEXT_CHARS and _WHOLE.fullmatch(value):
        return int(value)
    return None


def _given(text):
    """``text`` as an error message shows it: a string in quotes, a JSON number bare."""
    return f"'{text}'" if isinstance(text, str) else text


def _split(field: str, text, allowed: str):
    """(value, unit) of ``text``, or the field's error naming what it takes (``allowed``).
    A number no float holds (1e309, an int of 400 digits, a JSON infinity) comes back as
    an infinity, for the caller's range check to refuse; NaN is no number."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)) or text != text:
        raise FieldError(field, text, allowed)
    if isinstance(text, str):
        m = _NUMBER.fullmatch(text) if len(text) <= MATCHED_CHARS else None
        if len(text) > MAX_TEXT_CHARS:  # a number this long is beyond any range; anything else is no number
            bare = text.strip()
            if m or (bare.isascii() and bare.isdigit()):
                return math.inf, m.group(2).lower() if m else ""
            m = None
        if not m:
            raise FieldError(field, _given(text), allowed)
        digits, unit = m.group(1), m.group(2).lower()
    else:
        digits, unit = text, ""
    try:
        return float(digits) + 0.0, unit  # -0 is 0
    except OverflowError:
        return (math.inf if digits > 0 else -math.inf), unit  # an int beyond a float


def _scaled(field: str, text, allowed: str, factors: dict, lo: int, hi: int, limits: str) -> int:
    """``text`` (a number and a unit of ``factors``) as a whole number of the base unit within
    lo-hi; ``allowed`` when it is no such number, ``limits`` when it is out of range."""
    value, unit = _split(field, text, allowed)
    if unit not in factors:
        raise FieldError(field, _given(text), allowed)
    x = value * factors[unit]
    n = round(x) if abs(x) <= 2 * hi else hi + 1  # an infinity is never rounded
    if not lo <= n <= hi:
        raise FieldError(field, _given(text), limits)
    return n


RATE_ALLOWED = "is not a rate (e.g. 28800, 28.8kbit, 1mbit, 125kbps; kbit = 1000 bit/s)"


def parse_rate_bps(text, field: str = "rate") -> int:
    """``"28.8kbit"`` -> 28800.  A bare number is bit/s."""
    return _scaled(field, text, RATE_ALLOWED, _RATE_BITS, 8, MAX_RATE_BPS, "is out of range (8bit to 34Tbit)")


def parse_rate_or_zero_bps(text, field: str = "rate") -> int:
    """A rate as ``parse_rate_bps`` reads it, or 0 in any rate unit (``0``, ``0bit``,
    ``0mbit``): a link that carries nothing for a while (a schedule's tunnel)."""
    value, unit = _split(field, text, RATE_ALLOWED)
    if value == 0 and unit in _RATE_BITS:
        return 0
    return _scaled(field, text, RATE_ALLOWED, _RATE_BITS, 8, MAX_RATE_BPS, "is out of range (0, or 8bit to 34Tbit)")


def parse_size_bytes(text, field: str = "size") -> int:
    """``"1514"`` -> 1514, ``"2kb"`` -> 2048."""
    return _scaled(field, text, "is not a size (e.g. 1514, 1514b, 2kb, 1mb)", _SIZE_BYTES, 1, 2**32 - 1,
                   "is out of range (1 byte to 4gb)")


def parse_time_us(text, field: str = "time") -> int:
    """``"400ms"`` -> 400000.  A unit is required (us, ms, s)."""
    return _scaled(field, text, "is not a time with a unit (e.g. 400ms, 1.5s, 250us)", _TIME_US, 0, 3600 * 10**6,
                   "is out of range (0 to 1 hour)")


_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DURATION_MS = 30 * 86_400_000


def parse_duration_ms(text, field: str = "--for") -> int:
    """How long something lasts: ``"10m"`` -> 600000; a unit is required (ms, s, m, h, d),
    above 0 and at most 30 days."""
    allowed = "is not a duration (a number and a unit: 90s, 10m, 2h, 1d; above 0, at most 30 days)"
    return _scaled(field, text, allowed, _DURATION_MS, 1, MAX_DURATION_MS, "is out of range (above 0, at most 30 days)")


def format_duration(ms: float) -> str:
    """``ms`` in whole seconds as a person reads them: 1h 02m 05s, 9m 58s, 4s."""
    s = max(0, round(ms / 1000))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def parse_seconds(text, field: str, lo: float, hi: float) -> float:
    """A duration in seconds: a bare number, or with a unit (``1.5``, ``1.5s``, ``200ms``)."""
    allowed = f"is not a time in seconds (e.g. 1.5, 200ms; {lo:g}-{hi:g} seconds)"
    value, unit = _split(field, text, allowed)
    if unit not in ("", *_TIME_US):
        raise FieldError(field, _given(text), allowed)
    seconds = value * _TIME_US.get(unit, 1e6) / 1e6
    if not lo <= seconds <= hi:
        raise FieldError(field, _given(text), f"is out of range ({lo:g}-{hi:g} seconds)")
    return seconds


def parse_pairs(text: str, field: str, allowed: str, lead: int = 0) -> tuple[list, dict]:
    """(the first ``lead`` words, then ``key=value`` words as a dict) of ``text``, its words
    apart by spaces or commas.  A word that is no pair, or a key given twice (a typo, not an
    override), is the option's error naming the whole text and ``allowed``.

    >>> parse_pairs("gemodel p=1%, r=25%", "--loss", "is not a loss", lead=1)
    (['gemodel'], {'p': '1%', 'r': '25%'})
    """
    words = text.replace(",", " ").split()
    pairs = {}
    for word in words[lead:]:
        m = _PAIR.fullmatch(word)
        if not m or m.group(1) in pairs:
            raise FieldError(field, f"'{text}'", allowed)
        pairs[m.group(1)] = m.group(2)
    return words[:lead], pairs


def parse_part(parse, text, field: str, key: str):
    """``parse(text)`` for the part ``key`` of the option ``field``, its error naming both as
    ``--loss: p='120%' is not a percentage ...`` (the option first, as every error names it).

    >>> parse_part(parse_percent, "1%", "--loss", "p")
    1.0
    """
    try:
        return parse(text, field)
    except FieldError as err:
        raise FieldError(field, f"{key}={err.value}", err.allowed) from None


def parse_percent(text, field: str = "percent") -> float:
    """``"0.5%"`` -> 0.5.  A bare number is a percentage too."""
    allowed = "is not a percentage from 0% to 100% (e.g. 0.5%)"
    value, unit = _split(field, text, allowed)
    if unit not in ("", "%") or not 0 <= value <= 100:
        raise FieldError(field, _given(text), allowed)
    return value


_PACKETS = {"p", "pkt", "pkts", "packet", "packets"}


def parse_burst(text, field: str = "--burst"):
    """A burst: a bare number is v0.3's (``rate x N / 8`` bytes), a size is bytes
    (``1600b``, ``3kb``), a time is that long at the link's rate (``20ms``)."""
    allowed = "is not a burst (v0.3's N as in 5, bytes as in 1600b or 3kb, or a time at the rate as in 20ms)"
    v03 = "is out of range (a whole number 1-100000 for v0.3's rate x N / 8)"
    value, unit = _split(field, text, allowed)
    if unit == "":
        if not 1 <= value <= 100000 or value != int(value):
            raise FieldError(field, _given(text), v03)
        return Burst(int(value), "v03")
    if unit in _TIME_US:
        return Burst(parse_time_us(text, field) or _nonzero(field, text), "us")
    if unit in _SIZE_BYTES:
        return Burst(parse_size_bytes(text, field), "bytes")
    raise FieldError(field, _given(text), allowed)


def parse_queue(text, field: str = "--queue"):
    """A queue: packets (a bare number or ``10p``), bytes (``3250b``, ``16kb``) or a time at
    the link's rate (``1s``)."""
    allowed = "is not a queue (packets as in 10 or 10p, bytes as in 3250b or 16kb, or a time at the rate as in 1s)"
    packets = "is out of range (1-1000000 packets)"
    value, unit = _split(field, text, allowed)
    if unit == "" or unit in _PACKETS:
        if not 1 <= value <= 1_000_000 or value != int(value):
            raise FieldError(field, _given(text), packets)
        return Queue(int(value), "pkts")
    if unit in _TIME_US:
        return Queue(parse_time_us(text, field) or _nonzero(field, text), "us")
    if unit in _SIZE_BYTES and unit != "":
        return Queue(parse_size_bytes(text, field), "bytes")
    raise FieldError(field, _given(text), allowed)


def _nonzero(field: str, text) -> int:
    raise FieldError(field, _given(text), "is zero (give a positive time)")


def parse_count(text, field: str, lo: int, hi: int) -> int:
    """A whole number from ``lo`` to ``hi`` (ASCII digits, or a JSON number)."""
    n = whole_number(text)
    if n is None or not lo <= n <= hi:
        raise FieldError(field, _given(text),
                         f"is not a whole number from {lo} to {hi}")
    return n


def format_rate(bps: int) -> str:
    """tc text for a rate, exact: 28800 -> '28800bit', 56000 -> '56kbit', 1000000 -> '1mbit'."""
    for unit, factor in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % factor == 0:
            return f"{bps // factor}{unit}"
    return f"{bps}bit"


def format_time(us: int) -> str:
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def format_percent(pct: float) -> str:
    return f"{pct:.12g}%"
