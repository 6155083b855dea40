"""Frozen inputs of the compiler: link parameters, profiles and a request.

Directions follow ratelimit v0.3.  The router interface faces the clients:
``dest`` limits packets *to* the selected (host, port) -- they leave the
interface (egress), the client's download, a profile's ``down`` side;
``source`` limits packets *from* them -- they arrive on the interface (ingress),
the client's upload, a profile's ``up`` side.
"""

import math
from dataclasses import dataclass, field, fields, replace
from ipaddress import IPv4Address, IPv6Address

from .linklayer import ETHERNET, ETHERNET_HEADER_BYTES, LinkLayer

MODES = ("police", "shape")
DIRECTIONS = ("source", "dest", "both")
GRANULARITIES = ("port", "host")  # one link per (host, port), as v0.3, or one per host

IPAddress = IPv4Address | IPv6Address


@dataclass(frozen=True)
class Burst:
    """How far a link may run ahead of its rate: v0.3's N (``rate x N / 8`` bytes, at least
    one MTU), a number of bytes, or a time's worth of the rate."""

    amount: float
    unit: str  # "v03", "bytes" or "us"

    def bytes_at(self, rate_bps: int, mtu_bytes: int) -> int:
        if self.unit == "v03":
            return v03_burst_bytes(rate_bps, int(self.amount), mtu_bytes)
        if self.unit == "bytes":
            return int(self.amount)
        return max(1, math.ceil(rate_bps * self.amount / 8e6))

    def text(self) -> str:
        if self.unit == "v03":
            return f"{self.amount:g}"
        return f"{self.amount:g}b" if self.unit == "bytes" else _time_text(self.amount)


@dataclass(frozen=True)
class Queue:
    """A link's queue: packets, (line) bytes, or a time's worth of the rate."""

    amount: int
    unit: str  # "pkts", "bytes" or "us"

    def bytes_at(self, rate_bps: int, packet_bytes: int) -> int:
        """The queue in line bytes (a packet counts ``packet_bytes``); at least one packet."""
        if self.unit == "pkts":
            size = self.amount * packet_bytes
        elif self.unit == "bytes":
            size = self.amount
        else:
            size = math.ceil(rate_bps * self.amount / 8e6)
        return max(size, packet_bytes)

    def packets_at(self, rate_bps: int, packet_bytes: int) -> int:
        if self.unit == "pkts":
            return self.amount
        return max(1, math.ceil(self.bytes_at(rate_bps, packet_bytes) / packet_bytes))

    def text(self) -> str:
        if self.unit == "pkts":
            return f"{self.amount}p"
        return f"{self.amount}b" if self.unit == "bytes" else _time_text(self.amount)


def _time_text(us: float) -> str:
    return f"{us / 1000:g}ms" if us % 1000 == 0 else f"{us:g}us"


@dataclass(frozen=True)
class LinkParams:
    """One direction of an emulated link.  ``None``/0 means "not impaired"."""

    rate_bps: int | None = None
    delay_us: int = 0
    jitter_us: int = 0
    delay_corr_pct: float = 0.0
    loss_pct: float = 0.0
    loss_corr_pct: float = 0.0
    duplicate_pct: float = 0.0
    duplicate_corr_pct: float = 0.0
    corrupt_pct: float = 0.0
    corrupt_corr_pct: float = 0.0
    reorder_pct: float = 0.0
    reorder_corr_pct: float = 0.0
    queue: Queue | None = None  # None: DEFAULT_QUEUE
    burst: Burst | None = None  # None: the mode's default

    def as_dict(self) -> dict:
        """The fields that are set, as JSON-able data (queue and burst as their text)."""
        return {k: (v.text() if isinstance(v, (Queue, Burst)) else v) for k, v in self.__dict__.items() if v}

    @classmethod
    def from_dict(cls, data: dict) -> "LinkParams":
        """The inverse of ``dataclasses.asdict`` (state files, the web API)."""
        values = dict(data)
        for name, kind in (("queue", Queue), ("burst", Burst)):
            if isinstance(values.get(name), dict):
                values[name] = kind(**values[name])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def needs_netem(self) -> bool:
        return bool(self.delay_us or self.jitter_us or self.loss_pct or self.duplicate_pct
                    or self.corrupt_pct or self.reorder_pct)

    def merged(self, **overrides) -> "LinkParams":
        """A copy with the given fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    source: str = ""
    down: LinkParams = field(default_factory=LinkParams)
    up: LinkParams = field(default_factory=LinkParams)
    link: LinkLayer = ETHERNET
    reference_bps: int | None = None  # payload rate a real device of this kind reached (bits/s)
    path: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source, "path": self.path,
                "link": self.link.describe(), "reference_bps": self.reference_bps,
                "down": self.down.as_dict(), "up": self.up.as_dict()}


def v03_burst_bytes(rate_bps: int, burst: int, mtu_bytes: int) -> int:
    """ratelimit v0.3's burst: ``rate x burst / 8`` bytes, never so small that a full packet
    could not pass (``min_police_burst``)."""
    return max(min_police_burst(rate_bps, mtu_bytes), rate_bps * burst // 8)


def min_police_burst(rate_bps: int, mtu_bytes: int) -> int:
    """The smallest policer burst that passes an ``mtu_bytes`` packet: the burst travels as
    whole microseconds at the rate (tc's xmittime), so exactly one MTU rounds down below
    the packet and every full-size packet would be dropped (measured)."""
    return mtu_bytes + math.ceil(rate_bps / 8e6) + 1


@dataclass(frozen=True)
class Request:
    """Everything the compiler needs; hosts are already resolved to addresses."""

    interface: str
    hosts: tuple[IPAddress, ...]
    ports: tuple[tuple[int, int], ...]
    down: LinkParams
    up: LinkParams
    mode: str = "police"
    direction: str = "both"
    netns: str | None = None
    bandwidth_bps: int = 100_000_000
    burst: Burst | None = None  # overrides the sides' bursts (the command line's --burst)
    mtu_bytes: int = 1514
    avpkt_bytes: int = 1200
    mpu_bytes: int = 64
    profile: str | None = None
    link: LinkLayer = ETHERNET
    per: str = "port"  # "port": a link per (host, port); "host": one per host, all its ports
    # which of two sets of kernel handles the plan uses (0 or 1): a re-apply with other
    # selectors builds its plan in the set the installed plan leaves free (``diff``)
    generation: int = 0

    def burst_of(self, params: LinkParams) -> Burst:
        """The burst one side's links get: --burst, else the side's, else the mode's default."""
        return self.burst or params.burst or DEFAULT_BURST[self.mode]

    def burst_bytes(self, params: LinkParams, rate_bps: int) -> int:
        return self.burst_of(params).bytes_at(rate_bps, self.mtu_bytes)

    def line_mtu_bytes(self) -> int:
        """The largest packet in line bytes (the MTU frame through this link layer)."""
        return self.link.frame_bytes(self.mtu_bytes - ETHERNET_HEADER_BYTES)

    def queue_bytes(self, params: LinkParams, rate_bps: int) -> int:
        """One side's queue per link, in line bytes: the side's own, else the larger of
        ``DEFAULT_QUEUE`` at the rate and ``DEFAULT_QUEUE_PKTS`` full packets."""
        mtu = self.line_mtu_bytes()
        if params.queue is not None:
            return params.queue.bytes_at(rate_bps, mtu)
        return max(DEFAULT_QUEUE.bytes_at(rate_bps, mtu), DEFAULT_QUEUE_PKTS * mtu)

    def queue_packets(self, params: LinkParams, rate_bps: int) -> int:
        """The same queue in packets (netem counts packets): full-size ones for bytes and times."""
        if params.queue is not None and params.queue.unit == "pkts":
            return params.queue.amount
        return math.ceil(self.queue_bytes(params, rate_bps) / self.line_mtu_bytes())

    def flow_count(self) -> int:
        """Selected (host, port) pairs: the filters a tree holds per direction."""
        return len(self.hosts) * sum(hi - lo + 1 for lo, hi in self.ports)

    def link_count(self) -> int:
        """Emulated links per direction: a (host, port) each, or a host each."""
        return len(self.hosts) if self.per == "host" else self.flow_count()


# Defaults chosen by measurement (docs/profiles.md, "Burst" and "Queue").
DEFAULT_BURST = {"shape": Burst(1000, "us"), "police": Burst(4 * 1514, "bytes")}
DEFAULT_QUEUE, DEFAULT_QUEUE_PKTS = Queue(200_000, "us"), 10
