"""What a link that follows a trace or a schedule can deliver, over any window: pure.

Time here is the link's own, in milliseconds from the start of its replay; a link
starts at its phase (``phase_ms``: the trace's or schedule's time at the link's time 0,
``phases.py``).  Windows are half-open, ``[t0_ms, t1_ms)``, and may be fractional.

**A trace** (``TraceCapacity``): the physical reference is what mm-link delivers to a
backlogged sender: every opportunity whose time falls in the window carries
``tracefile.PACKET_BYTES`` (1,504) bytes *as mm-link counts them*: each packet it
reads from its TUN device is the IP packet and TUN's 4-byte header, so an opportunity
carries one 1,500-byte IP packet exactly, or smaller packets packed byte by byte (a
packet may straddle two opportunities; bytes of an opportunity that the queue cannot
fill are lost).  ``scale`` multiplies every opportunity's bytes (0.01: a hundredth of
the trace's capacity for each of many links); the looped trace recurs every period,
an opportunity at ``t`` again at ``t + k x period`` (so a trace ``0, 5`` has two
opportunities at 5 ms, 10 ms, ... and one at 0).

**Which bytes a traced link meters.**  Our HTB classes meter what the device's size
table says: each packet as its link layer's frame (``linklayer.py``; Ethernet: the IP
packet + 14 bytes, at least 64).  mm-link meters the IP packet + 4.  No one rate makes
the two equal for every packet size, so a traced class is given the rate at which it
passes **full-size packets** exactly as mm-link does (``TraceCapacity.class_rate_bps``:
an opportunity is worth one 1,500-byte IP packet, i.e. one frame of the link layer:
1,514 bytes on Ethernet).  That is the unit the traces were recorded in (Saturator
counted MTU-sized packets) and what a bulk download sends.  Smaller packets then get
fewer per second than under mm-link: at the same class rate a packet of ``s`` IP bytes,
metered ``m(s)`` (its frame, at least the layer's mpu), passes at ``(s + 4) / m(s) x
m(1500) / 1504`` of mm-link's packet rate: 0.96 for 200-byte datagrams on Ethernet,
0.69 for 40-byte ACKs (which Ethernet meters as 64); a benchmark that paces small
datagrams takes ``class_rate_bps(..., ip_bytes=s)`` for its reference, or compares in packets.

**A schedule** (``ScheduleCapacity``): a step's rate means what a profile's rate means,
the line's rate, and the class gets the link layer's share of it
(``LinkLayer.carried_bps``, as ``layout.carried`` gives a profile's).  Its bytes over a
window are the integral of that line rate.

A rate of 0 stays 0 in ``class_rate_bps``: HTB cannot take it, and how the kernel holds
a link still is the driver's business (docs/traces-notes.md).
"""

import bisect
import math
from dataclasses import dataclass, field
from itertools import accumulate

from ..spec.linklayer import LinkLayer, min_frame_bytes
from .schedulefile import DIRECTIONS, Schedule, Step
from .tracefile import PACKET_BYTES, TUN_HEADER_BYTES, Trace

FULL_IP_BYTES = PACKET_BYTES - TUN_HEADER_BYTES  # the IP packet one opportunity carries: 1,500


@dataclass(frozen=True)
class TraceCapacity:
    """One direction of a link following ``trace`` from ``phase_ms``, at ``scale`` of its
    capacity, looping (``loop``) or once (as ``mm-link --once``: nothing after the end)."""

    trace: Trace
    scale: float = 1.0
    phase_ms: int = 0
    loop: bool = True

    def __post_init__(self):
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale {self.scale!r} is not a positive number")

    def units_before(self, t_ms: float) -> int:
        """The opportunities before the link's time ``t_ms`` (``bytes_of`` them: bytes):
        a window's are the difference of its edges'.  The trace loops from time 0 (unless
        ``loop`` is off: nothing after its end)."""
        u_ms = t_ms + self.phase_ms
        if u_ms <= 0:
            return 0
        trace = self.trace
        period, stamps = trace.period_ms, trace.timestamps_ms
        if not self.loop and u_ms > period:
            return len(stamps)
        k = math.ceil(u_ms / period) - 1  # whole periods before u, so that 0 < u - k x period <= period
        return k * len(stamps) + bisect.bisect_left(stamps, u_ms - k * period)  # and those of the period below u

    def bytes_of(self, units: int) -> float:
        return units * PACKET_BYTES * self.scale

    def opportunities(self, t0_ms: float, t1_ms: float) -> int:
        """Delivery opportunities in the window [t0, t1) of the link's time (unscaled)."""
        return self.units_before(t1_ms) - self.units_before(t0_ms)

    def bytes(self, t0_ms: float, t1_ms: float) -> float:
        """mm-link's bytes (IP packets and TUN's 4-byte headers) the window can carry, scaled."""
        return self.bytes_of(self.opportunities(t0_ms, t1_ms))

    def ip_bytes(self, t0_ms: float, t1_ms: float, ip_bytes: int = FULL_IP_BYTES) -> float:
        """IP bytes a backlogged sender of ``ip_bytes``-byte packets gets through the window
        under mm-link (packed byte by byte: the packet in transit at an edge counted in part)."""
        return self.bytes(t0_ms, t1_ms) * ip_bytes / (ip_bytes + TUN_HEADER_BYTES)

    def rate_bps(self, t0_ms: float, t1_ms: float) -> float:
        """The window's average capacity, in mm-link's bits per second."""
        return self.bytes(t0_ms, t1_ms) * 8000 / (t1_ms - t0_ms)

    @staticmethod
    def class_rate_bps(rate_bps: float, layer: LinkLayer, ip_bytes: int = FULL_IP_BYTES) -> int:
        """The HTB rate (frames of ``layer``, as the size table meters them) that passes
        packets of ``ip_bytes`` at the packet rate mm-link gives them at ``rate_bps`` of its
        own bits: by default full-size packets (see the module docstring).  0 stays 0."""
        return TraceCapacity.class_rate_of(layer, ip_bytes)(rate_bps)

    @staticmethod
    def class_rate_of(layer: LinkLayer, ip_bytes: int = FULL_IP_BYTES):
        """``class_rate_bps`` for one layer and packet size, as a function of the rate."""
        metered, carried = TraceCapacity.class_rate_factors(layer, ip_bytes)
        return lambda rate_bps: 0 if rate_bps <= 0 else max(1, round(rate_bps * metered / carried))

    @staticmethod
    def class_rate_factors(layer: LinkLayer, ip_bytes: int = FULL_IP_BYTES) -> tuple[int, int]:
        """(what the class meters, what mm-link counts) of one packet: ``class_rate_of``
        multiplies a rate by the first and divides it by the second."""
        return metered_bytes(ip_bytes, layer), ip_bytes + TUN_HEADER_BYTES


@dataclass(frozen=True)
class ScheduleCapacity:
    """One direction (``down`` or ``up``) of a link following ``schedule`` from ``phase_ms``."""

    schedule: Schedule
    direction: str
    phase_ms: int = 0
    scale: float = 1.0
    _ends: tuple = field(init=False, repr=False, compare=False)
    _bits: tuple = field(init=False, repr=False, compare=False)  # bits (x 1000) before each step

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r} is not down or up")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale {self.scale!r} is not a positive number")
        steps = self.schedule.steps
        object.__setattr__(self, "_ends", tuple(accumulate(s.duration_ms for s in steps)))
        object.__setattr__(self, "_bits", (0, *accumulate(self._rate(s) * s.duration_ms for s in steps)))

    def _rate(self, step: Step) -> int:
        return step.side(self.direction).rate_bps

    def _index(self, u_ms: float) -> tuple[int, float]:
        """(the step in force at schedule time ``u_ms`` within one period, the time into it)."""
        i = min(bisect.bisect_right(self._ends, u_ms), len(self._ends) - 1)
        return i, u_ms - (self._ends[i - 1] if i else 0)

    def _bits_before(self, u_ms: float) -> float:
        """Line bits (x 1000) below schedule time ``u_ms``."""
        if u_ms <= 0:
            return 0.0
        period, total, steps = self.schedule.period_ms, self._bits[-1], self.schedule.steps
        if not self.schedule.loop:
            if u_ms >= period:
                return total + self._rate(steps[-1]) * (u_ms - period)
            k = 0
        else:
            k = math.floor(u_ms / period)
        i, into = self._index(u_ms - k * period)
        return k * total + self._bits[i] + self._rate(steps[i]) * into

    def units_before(self, t_ms: float) -> float:
        """Line bits (x 1000) before the link's time ``t_ms`` (``bytes_of`` them: bytes): a
        window's are the difference of its edges'."""
        return self._bits_before(t_ms + self.phase_ms)

    def bytes_of(self, units: float) -> float:
        return units * self.scale / 8000

    def bytes(self, t0_ms: float, t1_ms: float) -> float:
        """Line bytes the window [t0, t1) of the link's time can carry, scaled."""
        return self.bytes_of(self.units_before(t1_ms) - self.units_before(t0_ms))

    def rate_bps(self, t0_ms: float, t1_ms: float) -> float:
        """The window's average line rate."""
        return self.bytes(t0_ms, t1_ms) * 8000 / (t1_ms - t0_ms)

    def at(self, t_ms: float) -> Step:
        """The step in force at the link's time ``t_ms`` (its delay and loss)."""
        u = t_ms + self.phase_ms
        period = self.schedule.period_ms
        if not self.schedule.loop and u >= period:
            return self.schedule.steps[-1]
        return self.schedule.steps[self._index(u % period)[0]]

    @staticmethod
    def class_rate_bps(rate_bps: float, layer: LinkLayer) -> int:
        """The HTB rate for a line rate of ``rate_bps``: the link layer's share, as a
        profile's rate gets.  0 stays 0."""
        return ScheduleCapacity.class_rate_of(layer)(rate_bps)

    @staticmethod
    def class_rate_of(layer: LinkLayer):
        """``class_rate_bps`` for one layer, as a function of the rate."""
        return lambda rate_bps: 0 if rate_bps <= 0 else layer.carried_bps(round(rate_bps))


def metered_bytes(ip_bytes: int, layer: LinkLayer) -> int:
    """What a class of ``layer`` charges a packet of ``ip_bytes``: its frame, at least the
    layer's mpu (``linklayer.min_frame_bytes``)."""
    return max(layer.frame_bytes(ip_bytes), min_frame_bytes(layer))


def carried_by_ms(capacity, t0_ms: float, nbytes: float, most_ms: float = 24 * 3600 * 1000) -> float | None:
    """The time (ms, in ``capacity``'s time) by which a window starting at ``t0_ms`` has
    carried ``nbytes`` (``capacity.bytes``, to the millisecond); None if not within
    ``most_ms``.  What a backlogged sender starting at ``t0_ms`` needs to move ``nbytes``."""
    if nbytes <= 0:
        return t0_ms
    span = 1.0
    while capacity.bytes(t0_ms, t0_ms + span) < nbytes:
        span *= 2
        if span > most_ms:
            return None
    lo, hi = span / 2 if span > 1 else 0.0, span
    while hi - lo > 1:
        mid = (lo + hi) / 2
        if capacity.bytes(t0_ms, t0_ms + mid) >= nbytes:
            hi = mid
        else:
            lo = mid
    return t0_ms + hi
