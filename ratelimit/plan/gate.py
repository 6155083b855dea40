"""A traced link in the plan, pure: its gate, its first rate, and the class a step sets.

A traced link (``tracespec``) keeps its rate in its HTB class, as every link does, and has
a token bucket (``plan.TbfQdisc``) as its queue: wide open (``OPEN_BPS``: far above any
link's rate, so the class shapes) while the trace has capacity, shut (``SHUT_BPS`` with a
one-frame bucket) while it has none.  HTB cannot take a rate of 0, and a class at a few
bit/s would owe a minute for the one packet it lets out (docs/traces-notes.md); a shut
token bucket holds the link's packets in its own byte queue -- the link's queue, of the
size a byte fifo would have -- and drops at its limit, like a tunnel, and a change resets
its bucket, so opening it costs nothing.  The plan builds the gate open, the class at the
trace's mean (and the default queue at that rate); the driver sets both step by step.

The kernel does not look at a queue again when a gate opens: what a shut gate held waits
for the device's next packet, or for HTB's own timer (up to a second later).  So the driver
follows each opening with a kick (``kick_frame``): one frame per tx queue, sent through the
device's qdiscs, that HTB lets out unclassified and every receiver drops (docs/design.md,
"The driver process").
"""

import dataclasses

from ..traces.capacity import ScheduleCapacity, TraceCapacity
from .shaping import TbfQdisc

OPEN_BPS = 10 * 10**9  # wide open: the class above shapes
SHUT_BPS = 64  # the least at which tc's one-frame burst still fits its 32-bit ticks (189 s a frame)
KICK_ETHERTYPE = 0x88B5  # IEEE 802's first local experimental EtherType: no stack takes it
KICK_DEST = bytes.fromhex("02726c6b6963")  # a locally administered unicast address ("\x02rlkic"): no host has it
KICK_MIN_PAYLOAD = 46  # Ethernet's least payload


def traced(cohort, direction: str):
    """The ``tracespec.Source`` ``direction`` (dest/source, down/up) of ``cohort`` follows, or None."""
    return None if cohort.trace is None else cohort.trace.source(direction)


def class_rate_bps(src, rate_bps: float, layer) -> int:
    """The HTB rate for a step whose capacity averages ``rate_bps`` (mm-link's bits for a
    trace, the line's for a schedule; ``capacity``); 0 stays 0 (the gate shuts)."""
    return class_rate_of(src, layer)(rate_bps)


def class_rate_of(src, layer):
    """``class_rate_bps`` for one source and layer, as a function of the rate."""
    return (TraceCapacity if src.kind == "trace" else ScheduleCapacity).class_rate_of(layer)


def first_rate_bps(cohort, src) -> int:
    """The class rate a plan builds a traced link with: the trace's mean, scaled (at least
    8 bit/s, tc's least); its queue's default size is taken at this rate."""
    return max(8, class_rate_bps(src, src.mean_bps * cohort.trace.scale, cohort.link))


def burst_bytes(req, lay) -> int:
    """The gate's bucket: the largest frame as the device's size table meters it (a larger
    packet would be dropped on arrival), at least the device's MTU (the kernel warns below)."""
    return max(req.mtu_bytes, req.line_mtu_bytes(lay.base))


def opened(dev: str, parent: int, handle: int, burst: int, limit: int) -> TbfQdisc:
    return TbfQdisc(dev, parent, handle, OPEN_BPS, burst, limit)


def shut(op: TbfQdisc) -> TbfQdisc:
    """The gate ``op`` shut: it lets out the frame its bucket holds, then nothing."""
    return dataclasses.replace(op, rate_bps=SHUT_BPS)


def kick_frame(source_mac: bytes, queue: int | None) -> bytes:
    """The Ethernet frame that makes a device dequeue again after a gate opened: to
    ``KICK_DEST``, of ``KICK_ETHERTYPE``, its first payload byte tx queue ``queue`` + 1 (the
    queue program pins it there, ``queuepin``), 0 for a device of one queue (None).

    >>> kick_frame(bytes(6), 2)[12:16].hex()
    '88b50372'
    """
    tag = b"ratelimit: a gate opened"
    payload = bytes([0 if queue is None else queue + 1]) + tag
    return KICK_DEST + source_mac + KICK_ETHERTYPE.to_bytes(2, "big") + payload.ljust(KICK_MIN_PAYLOAD, b"\0")
