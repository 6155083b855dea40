"""Units: parse what tc users write, once, at the edge; format it back for tc.

Inside the program every quantity is an int or float whose unit is in its name:
``rate_bps`` (bits/s), ``size_bytes``, ``time_us``, ``pct``.  The meanings are tc's:
``kbit`` is 1000 bit/s, ``kibit`` 1024; ``bps`` is *bytes* per second; ``kb``/``k``
as a size is 1024 bytes.  A bare rate is bits per second (as ratelimit v0.3's
``--rate 28800``); a bare size is bytes; a time needs a unit, because tc's bare
microseconds are a trap.
"""

import re

from .errors import FieldError

_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")

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


def _split(field: str, text, allowed: str):
    if isinstance(text, bool):
        raise FieldError(field, text, allowed)
    if isinstance(text, (int, float)):
        return float(text), ""
    m = _NUMBER.match(str(text))
    if not m:
        raise FieldError(field, f"'{text}'", allowed)
    return float(m.group(1)), m.group(2).lower()


def parse_rate_bps(text, field: str = "rate") -> int:
    """``"28.8kbit"`` -> 28800.  A bare number is bit/s."""
    allowed = "is not a rate (e.g. 28800, 28.8kbit, 1mbit, 125kbps; kbit = 1000 bit/s)"
    value, unit = _split(field, text, allowed)
    if unit not in _RATE_BITS:
        raise FieldError(field, f"'{text}'", allowed)
    bps = round(value * _RATE_BITS[unit])
    if bps < 8 or bps > MAX_RATE_BPS:
        raise FieldError(field, f"'{text}'", "is out of range (8bit to 34Tbit)")
    return bps


def parse_size_bytes(text, field: str = "size") -> int:
    """``"1514"`` -> 1514, ``"2kb"`` -> 2048."""
    allowed = "is not a size (e.g. 1514, 1514b, 2kb, 1mb)"
    value, unit = _split(field, text, allowed)
    if unit not in _SIZE_BYTES:
        raise FieldError(field, f"'{text}'", allowed)
    size = round(value * _SIZE_BYTES[unit])
    if size < 1 or size >= 2**32:
        raise FieldError(field, f"'{text}'", "is out of range (1 byte to 4gb)")
    return size


def parse_time_us(text, field: str = "time") -> int:
    """``"400ms"`` -> 400000.  A unit is required (us, ms, s)."""
    allowed = "is not a time with a unit (e.g. 400ms, 1.5s, 250us)"
    value, unit = _split(field, text, allowed)
    if unit not in _TIME_US:
        raise FieldError(field, f"'{text}'", allowed)
    us = round(value * _TIME_US[unit])
    if us > 3600 * 10**6:
        raise FieldError(field, f"'{text}'", "is out of range (0 to 1 hour)")
    return us


def parse_percent(text, field: str = "percent") -> float:
    """``"0.5%"`` -> 0.5.  A bare number is a percentage too."""
    allowed = "is not a percentage from 0% to 100% (e.g. 0.5%)"
    value, unit = _split(field, text, allowed)
    if unit not in ("", "%") or not 0 <= value <= 100:
        raise FieldError(field, f"'{text}'", allowed)
    return value


_PACKETS = {"p", "pkt", "pkts", "packet", "packets"}


def parse_burst(text, field: str = "--burst"):
    """A burst: a bare number is v0.3's (``rate x N / 8`` bytes), a size is bytes
    (``1600b``, ``3kb``), a time is that long at the link's rate (``20ms``)."""
    from .model import Burst
    allowed = "is not a burst (v0.3's N as in 5, bytes as in 1600b or 3kb, or a time at the rate as in 20ms)"
    value, unit = _split(field, text, allowed)
    if unit == "":
        if value != int(value) or not 1 <= value <= 100000:
            raise FieldError(field, f"'{text}'", "is out of range (a whole number 1-100000 for v0.3's rate x N / 8)")
        return Burst(int(value), "v03")
    if unit in _TIME_US:
        return Burst(parse_time_us(text, field) or _nonzero(field, text), "us")
    if unit in _SIZE_BYTES:
        return Burst(parse_size_bytes(text, field), "bytes")
    raise FieldError(field, f"'{text}'", allowed)


def parse_queue(text, field: str = "--queue"):
    """A queue: packets (a bare number or ``10p``), bytes (``3250b``, ``16kb``) or a time at
    the link's rate (``1s``)."""
    from .model import Queue
    allowed = "is not a queue (packets as in 10 or 10p, bytes as in 3250b or 16kb, or a time at the rate as in 1s)"
    value, unit = _split(field, text, allowed)
    if unit == "" or unit in _PACKETS:
        if value != int(value) or not 1 <= value <= 1_000_000:
            raise FieldError(field, f"'{text}'", "is out of range (1-1000000 packets)")
        return Queue(int(value), "pkts")
    if unit in _TIME_US:
        return Queue(parse_time_us(text, field) or _nonzero(field, text), "us")
    if unit in _SIZE_BYTES and unit != "":
        return Queue(parse_size_bytes(text, field), "bytes")
    raise FieldError(field, f"'{text}'", allowed)


def _nonzero(field: str, text) -> int:
    raise FieldError(field, f"'{text}'", "is zero (give a positive time)")


def parse_count(text, field: str, lo: int, hi: int) -> int:
    allowed = f"is not a whole number from {lo} to {hi}"
    try:
        n = int(str(text).strip())
    except ValueError:
        raise FieldError(field, f"'{text}'", allowed) from None
    if not lo <= n <= hi:
        raise FieldError(field, n, allowed)
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
