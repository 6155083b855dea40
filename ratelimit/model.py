"""Frozen inputs of the compiler: link parameters, profiles and a request.

Directions follow ratelimit v0.3.  The router interface faces the clients:
``dest`` limits packets *to* the selected (host, port) -- they leave the
interface (egress), the client's download, a profile's ``down`` side;
``source`` limits packets *from* them -- they arrive on the interface (ingress),
the client's upload, a profile's ``up`` side.
"""

from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv6Address

MODES = ("police", "shape")
DIRECTIONS = ("source", "dest", "both")

IPAddress = IPv4Address | IPv6Address


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
    queue_pkts: int | None = None

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
    path: str = ""


def v03_burst_bytes(rate_bps: int, burst: int, mtu_bytes: int) -> int:
    """ratelimit v0.3's burst: ``rate x burst / 8`` bytes, never below one MTU."""
    return max(mtu_bytes, rate_bps * burst // 8)


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
    burst_pkts: int = 5
    mtu_bytes: int = 1514
    avpkt_bytes: int = 1200
    mpu_bytes: int = 64
    profile: str | None = None

    def burst_bytes(self, rate_bps: int) -> int:
        return v03_burst_bytes(rate_bps, self.burst_pkts, self.mtu_bytes)

    def flow_count(self) -> int:
        return len(self.hosts) * sum(hi - lo + 1 for lo, hi in self.ports)
