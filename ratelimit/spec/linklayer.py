"""Link layers: how many bytes a link really sends for an IP packet, and how long that takes.

One place for the framing arithmetic.  The compiler turns a layer into a tc
size table on the root qdisc (the kernel then meters every packet of the link
as its frame: HTB classes, policers, netem's rate and byte queues all see the
same length) and into the rate the frames get (``carried_bps``: the line's rate
less what its own coding takes); the lab and the benchmarks use the same
functions to say how long a transfer should take on the real link.

Layers (sources in docs/profiles.md):

* ``ethernet``: what Linux counts on an Ethernet egress: the IP packet and its
  14-byte header (cable, LTE, the latency classes, and v0.3's behaviour).
* ``ppp-vj``: a dial-up modem: PPP in HDLC-like framing with address/control
  and protocol-field compression (flag, 1-byte protocol, 16-bit FCS: 5 bytes,
  RFC 1661/1662), Van Jacobson-compressed TCP/IP headers (a 40-byte header
  becomes 3 bytes for bulk data, RFC 1144), octet stuffing at 2/256 on random
  data (ACCM 0), and V.42 LAPM frames of 128 octets with 6 octets of framing
  and 1 stuffed bit in 62 on the line: 93.3% of the line's bits carry PPP
  bytes.  RFC 1144 sends a segment uncompressed when its TCP options differ
  from the last one, which TCP timestamps do every segment: the model assumes
  clients without timestamps, as the 1990s stacks were (the lab sets
  ``net.ipv4.tcp_timestamps=0`` on its clients for this layer).
* ``ppp-sync-vj``: ISDN: the same PPP frames and compressed headers on a
  synchronous HDLC channel, with 1 stuffed bit in 62 and no modem framing.
* ``atm``: ADSL: the packet plus an encapsulation overhead (PPPoE over LLC/SNAP,
  40 bytes, by default) in AAL5, padded to whole 48-byte cell payloads, 53 bytes
  per cell on the line.

A size table sees sizes, not protocols: ``ppp-vj`` meters every packet as a
TCP segment with a compressed header, UDP included (its real PPP frame is 36
bytes longer); see docs/profiles.md.
"""

import math
from dataclasses import dataclass, replace

from ..errors import FieldError

IP_TCP_HEADER_BYTES = 40  # IPv4 + TCP, no options (the model's clients send no timestamps)
ETHERNET_HEADER_BYTES = 14  # in skb->len on an Ethernet egress, and so in what tc meters
ETHERNET_MIN_FRAME_BYTES = 64  # what an Ethernet frame is padded to (v0.3's --mpu)
ATM_CELL_BYTES, ATM_CELL_PAYLOAD_BYTES = 53, 48


@dataclass(frozen=True)
class LinkLayer:
    """A link's framing: ``frame_bytes(ip_len)`` is what it sends for an IP packet, at
    ``carried_bps(line rate)``."""

    name: str
    overhead_bytes: int = 0  # added to the IP packet (negative: header compression)
    cells: bool = False  # ATM: padded to 48-byte cell payloads, 53 bytes a cell
    efficiency: float = 1.0  # share of the line's bits that carry frames
    vj: bool = False  # TCP/IP headers compressed (RFC 1144): its clients send no TCP timestamps

    def frame_bytes(self, ip_len: int) -> int:
        """Bytes the link sends for one IP packet of ``ip_len`` bytes."""
        size = max(ip_len + self.overhead_bytes, 1)
        if self.cells:
            size = math.ceil(size / ATM_CELL_PAYLOAD_BYTES) * ATM_CELL_BYTES
        return size

    def carried_bps(self, line_bps: int) -> int:
        """The rate frames get on a line of ``line_bps``."""
        return max(8, int(line_bps * self.efficiency))

    def seconds(self, ip_lens, line_bps: int) -> float:
        """Time to send packets of these IP lengths back to back."""
        return sum(self.frame_bytes(n) for n in ip_lens) * 8 / self.carried_bps(line_bps)

    @property
    def is_ethernet(self) -> bool:
        """True when tc's own count on an Ethernet egress is already this layer's."""
        return self.overhead_bytes == ETHERNET_HEADER_BYTES and not self.cells

    @property
    def stab_overhead(self) -> int:
        """The size table's overhead: skb->len on an Ethernet egress holds the 14-byte header."""
        return self.overhead_bytes - ETHERNET_HEADER_BYTES

    def describe(self) -> dict:
        return {"layer": self.name, "overhead_bytes": self.overhead_bytes, "cells": self.cells,
                "efficiency": self.efficiency, "vj": self.vj}

    @classmethod
    def from_description(cls, data: dict) -> "LinkLayer":
        """The inverse of ``describe``."""
        return cls(data["layer"], data["overhead_bytes"], data["cells"], data["efficiency"], data.get("vj", False))


ETHERNET = LinkLayer("ethernet", ETHERNET_HEADER_BYTES)
PPP_VJ_FRAMING_BYTES = 5  # flag, protocol (PFC), FCS-16; ACFC drops address and control
VJ_HEADER_BYTES = 3  # bulk data, same connection id: change mask + TCP checksum
PPP_VJ = LinkLayer("ppp-vj", PPP_VJ_FRAMING_BYTES + VJ_HEADER_BYTES - IP_TCP_HEADER_BYTES,
                   efficiency=round(128 / (128 + 6) * 62 / 63 / (1 + 2 / 256), 4), vj=True)
PPP_SYNC_VJ = LinkLayer("ppp-sync-vj", PPP_VJ.overhead_bytes, efficiency=round(62 / 63, 4), vj=True)
ATM_PPPOE_LLC_BYTES = 40  # PPPoE 8 + ATM LLC/SNAP 18 + Ethernet 14 (tc-stab(8))
ATM = LinkLayer("atm", ATM_PPPOE_LLC_BYTES, cells=True)
LAYERS = {layer.name: layer for layer in (ETHERNET, PPP_VJ, PPP_SYNC_VJ, ATM)}


def min_frame_bytes(link: LinkLayer) -> int:
    """The least a packet is charged on ``link`` (tc's mpu): Ethernet's smallest frame with
    Ethernet framing (with or without its FCS), nothing on other layers, whose size table
    already makes each packet its frame (a modem's compressed ACK is a 20-byte frame)."""
    return ETHERNET_MIN_FRAME_BYTES if link.name == ETHERNET.name else 0


def layer(name: str, overhead_bytes: int | None = None, field: str = "link layer",
          overhead_field: str | None = None) -> LinkLayer:
    """The named layer, with its per-packet overhead replaced if given (``atm`` encapsulations);
    errors name ``field`` (the layer) or ``overhead_field`` (default: FIELD overhead)."""
    found = LAYERS.get(name) if isinstance(name, str) else None
    if found is None:
        raise FieldError(field, f"'{name}'", f"is not a link layer ({', '.join(LAYERS)})")
    if overhead_bytes is None:
        return found
    if not -IP_TCP_HEADER_BYTES <= overhead_bytes <= 256:
        raise FieldError(overhead_field or f"{field} overhead", overhead_bytes, f"is out of range (-{IP_TCP_HEADER_BYTES} to 256 bytes)")
    return replace(found, overhead_bytes=overhead_bytes)
