"""tc's time and rate arithmetic: ticks, rate specs and rate tables, computed as tc does.

Pure except for reading ``/proc/net/psched`` once for the tick length.
"""

import struct

from ..spec.linklayer import ATM_CELL_BYTES, ATM_CELL_PAYLOAD_BYTES
from .nl import U32_MAX

TIME_UNITS_PER_SEC = 1000000
LINKLAYER_ETHERNET, LINKLAYER_ATM = 1, 2
RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate


class Clock:
    """The packet scheduler's tick, from ``/proc/net/psched`` (tc_core.c's tc_core_init)."""

    def __init__(self, psched: str | None = None):
        if psched is None:
            with open("/proc/net/psched") as f:
                psched = f.read()
        t2us, us2t, clock_res = (int(w, 16) for w in psched.split()[:3])
        if clock_res == 1_000_000_000:
            t2us = us2t
        self.tick_in_usec = t2us / us2t * (clock_res / TIME_UNITS_PER_SEC)

    def time2tick(self, time_us: int) -> int:
        return min(int(time_us * self.tick_in_usec), U32_MAX)

    def xmittime(self, rate_bytes: int, size: int) -> int:
        """Ticks to send ``size`` bytes at ``rate_bytes``/s: whole microseconds first, as tc does."""
        time_us = min(int(TIME_UNITS_PER_SEC * (size / rate_bytes)), U32_MAX)
        return self.time2tick(time_us)

    def size_of(self, rate_bytes: int, ticks: int) -> int:
        """The smallest size whose xmittime is ``ticks``: the inverse of a lossy
        map, exact for the bursts plans make (whole microseconds of the rate)."""
        time_us = max(0, int(ticks / self.tick_in_usec) - 1)
        while self.time2tick(time_us) < ticks and time_us < U32_MAX:
            time_us += 1
        size = max(0, int(time_us * rate_bytes / TIME_UNITS_PER_SEC) - 2)
        while int(TIME_UNITS_PER_SEC * (size / rate_bytes)) < time_us:
            size += 1
        return size


_CLOCK: Clock | None = None


def clock() -> Clock:
    global _CLOCK
    if _CLOCK is None:
        _CLOCK = Clock()
    return _CLOCK


def rate_bytes(rate_bps: int) -> int:
    """tc's get_rate64: bits/s to bytes/s, truncated."""
    return int(rate_bps / 8) if rate_bps < 2**53 else rate_bps // 8


def cell_log_for(mtu: int) -> int:
    mtu = mtu or 2047
    cell_log = 0
    while (mtu >> cell_log) > 255:
        cell_log += 1
    return cell_log


def ratespec(rate_b: int, mtu: int, mpu: int, overhead: int = 0, linklayer: int = LINKLAYER_ETHERNET) -> bytes:
    return RATESPEC.pack(cell_log_for(mtu), linklayer, overhead, -1, mpu, min(rate_b, U32_MAX))


def rate_table(rate_b: int, mtu: int, mpu: int, clk: Clock, atm: bool = False) -> bytes:
    """tc_calc_rtable: 256 transmit times, for sizes (i + 1) << cell_log (at least mpu;
    ``atm``: in whole 53-byte cells of 48)."""
    cell_log = cell_log_for(mtu)

    def size(i: int) -> int:
        sz = max((i + 1) << cell_log, mpu)
        return -(-sz // ATM_CELL_PAYLOAD_BYTES) * ATM_CELL_BYTES if atm else sz
    return struct.pack("=256I", *(clk.xmittime(rate_b, size(i)) for i in range(256)))


def percent(pct: float) -> int:
    """tc's get_percent: a share of 2**32 - 1, rounded half to even like rint()."""
    return round(pct / 100.0 * 4294967295.0)


def decode_ratespec(raw: bytes) -> tuple:
    cell_log, linklayer, overhead, cell_align, mpu, rate = RATESPEC.unpack(raw)
    return ("rate", rate, "overhead", overhead, "mpu", mpu, "linklayer", linklayer,
            "cell_log", cell_log, "cell_align", cell_align)
