"""What a lab measures: timed downloads, and the time a link should take for them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..model import v03_burst_bytes
from .link import DEFAULT_BURST

MSS_BYTES = 1448  # TCP payload per frame on a 1500-byte MTU, with timestamps
FRAME_OVERHEAD = 66  # Ethernet 14 + IP 20 + TCP 32 bytes per frame
HTTP_OVERHEAD = 400  # response header, SYN-ACK, FIN and the like, roughly


def wire_bytes(payload: int) -> int:
    """Bytes a router counts for an HTTP response of ``payload`` bytes (no retransmissions)."""
    frames = -(-payload // MSS_BYTES)
    return payload + frames * FRAME_OVERHEAD + HTTP_OVERHEAD


def expected_seconds(payload: int, rate_bps: int, burst_pkts: int = DEFAULT_BURST, mtu: int = 1514) -> float:
    """How long a download of ``payload`` bytes takes over a link of ``rate_bps``:
    the link's burst (``rate x burst / 8`` bytes, at least one MTU, as
    ``Request.burst_bytes``) passes at once, the rest at the rate.  Handshake
    and delay not included."""
    burst = v03_burst_bytes(rate_bps, burst_pkts, mtu)
    return max(0, wire_bytes(payload) - burst) * 8 / rate_bps



@dataclass(frozen=True)
class Download:
    """One HTTP download by curl from a client, timed."""

    url: str
    client: str
    http_code: int
    bytes: int
    seconds: float  # from starting to connect to the last byte
    connect_s: float  # TCP handshake: one round trip over the emulated link
    first_byte_s: float
    local_port: int

    @property
    def bps(self) -> float:
        """Payload bits per second over the whole download."""
        return self.bytes * 8 / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict:
        return {**asdict(self), "bps": self.bps}

