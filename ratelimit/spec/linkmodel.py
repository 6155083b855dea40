"""How long things should take on an emulated link: pure arithmetic over its link layer, rates and delays.

The same model serves the demo (measured against it), the fixtures
(``expected_seconds``), the benchmarks (the dial-up table's ceiling) and the
tests.  It counts every packet of an HTTP fetch on the link -- handshake,
request, response segments -- as its link-layer frame at the rate the frames
get, plus the one-way delays.

On a kernel without sch_netem the router has no delay stage: the delays are
left out, and the token bucket that shapes each link lets the last packet of a
busy period leave as soon as the ones before it are paid for, instead of a
serialization time later (``delay_stage=False`` models exactly that).
"""

import math
from dataclasses import dataclass

from .linklayer import LinkLayer

MTU_BYTES = 1500
IP_TCP_BYTES = 40
IPV6_EXTRA_BYTES = 20  # an IPv6 header is 40 bytes, IPv4's 20
TIMESTAMP_OPTION_BYTES = 12  # TCP timestamps (RFC 7323), with their padding
SYN_OPTION_BYTES = 12  # MSS, SACK permitted, window scale (and NOPs); +12 with timestamps
HTTP_REQUEST_BYTES = 80  # curl's GET of a file: request line, Host, User-Agent, Accept
HTTP_RESPONSE_HEADER_BYTES = 240  # nginx's 200 for a static file


@dataclass(frozen=True)
class LinkModel:
    """One link in both directions: ``down`` towards the client, ``up`` from it."""

    layer: LinkLayer
    down_bps: int | None  # None: not limited (the router leaves that direction alone)
    up_bps: int | None
    down_delay_us: int = 0
    up_delay_us: int = 0
    delay_stage: bool = True  # False: a kernel without netem (see the module docstring)
    ipv6: bool = False  # the fetch's packets are IPv6: 20 bytes more IP header each, the same frames for them

    @property
    def ip_tcp_bytes(self) -> int:
        return IP_TCP_BYTES + (IPV6_EXTRA_BYTES if self.ipv6 else 0)

    @classmethod
    def from_summary(cls, summary: dict, *, cohort: str | None = None, delay_stage: bool = True) -> "LinkModel":
        """The model of an applied link, from ``summary.summary`` (as the lab and the API keep
        it): of its one cohort, or of the cohort named ``cohort``."""
        link = summary if cohort is None else next(c for c in summary["cohorts"] if c["name"] == cohort)
        layer = LinkLayer.from_description(link["link"])
        sides = {"dest": ("down",), "source": ("up",), "both": ("down", "up")}[summary["direction"]]
        down, up = (link[s] if s in sides else {} for s in ("down", "up"))
        return cls(layer, down.get("rate_bps"), up.get("rate_bps"), down.get("delay_us", 0), up.get("delay_us", 0),
                   delay_stage)

    @property
    def timestamps(self) -> bool:
        """Whether the model's clients use TCP timestamps: not behind header compression,
        which they would defeat (RFC 1144 sends a segment uncompressed when its options change)."""
        return not self.layer.vj

    @property
    def mss_bytes(self) -> int:
        return MTU_BYTES - self.ip_tcp_bytes - (TIMESTAMP_OPTION_BYTES if self.timestamps else 0)

    def segments(self, payload: int) -> list[int]:
        """IP lengths of the TCP segments that carry ``payload`` bytes."""
        header = self.ip_tcp_bytes + (TIMESTAMP_OPTION_BYTES if self.timestamps else 0)
        full, rest = divmod(payload, self.mss_bytes)
        return [header + self.mss_bytes] * full + ([header + rest] if rest else [])

    def _burst(self, ip_lens: list[int], bps: int) -> float:
        """One busy period: packets back to back; without a delay stage the last leaves at once."""
        if not ip_lens or not bps:
            return 0.0
        sent = ip_lens if self.delay_stage else ip_lens[:-1]
        return self.layer.seconds(sent, bps)

    def fetch_seconds(self, body: int, *, header: int = HTTP_RESPONSE_HEADER_BYTES,
                      request: int = HTTP_REQUEST_BYTES) -> float:
        """From connect() to the last byte of an HTTP response (one new connection)."""
        return self.connect_seconds() + self.call_seconds(body, header=header, request=request)

    def connect_seconds(self) -> float:
        """The TCP handshake: SYN up, SYN-ACK down."""
        syn = self.ip_tcp_bytes + SYN_OPTION_BYTES + (TIMESTAMP_OPTION_BYTES if self.timestamps else 0)
        return self._burst([syn], self.up_bps) + self._burst([syn], self.down_bps) + self._delays(2)

    def call_seconds(self, body: int, *, header: int = HTTP_RESPONSE_HEADER_BYTES,
                     request: int = HTTP_REQUEST_BYTES) -> float:
        """A request up and its response down on an open connection (the response fits
        the server's window: ten segments today)."""
        up = self._burst(self.segments(request), self.up_bps)
        down = self._burst(self.segments(header + body), self.down_bps)
        return up + down + self._delays(2)

    def transfer_seconds(self, payload: int) -> float:
        """``payload`` bytes down an open connection, from the first byte sent to the last received."""
        delay = self.down_delay_us / 1e6 if self.delay_stage else 0.0
        return self._burst(self.segments(payload), self.down_bps) + delay

    def response_seconds(self, body: int, *, header: int = HTTP_RESPONSE_HEADER_BYTES) -> float:
        """The response's frames alone, back to back (to compare with a device's payload rate)."""
        return self.layer.seconds(self.segments(header + body), self.down_bps)

    def response_frame_bytes(self, body: int, *, header: int = HTTP_RESPONSE_HEADER_BYTES) -> int:
        return sum(self.layer.frame_bytes(n) for n in self.segments(header + body))

    def _delays(self, legs: int) -> float:
        """``legs`` one-way trips, alternating up and down (0 without a delay stage)."""
        if not self.delay_stage:
            return 0.0
        return (math.ceil(legs / 2) * self.up_delay_us + legs // 2 * self.down_delay_us) / 1e6

