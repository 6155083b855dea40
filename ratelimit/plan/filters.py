"""The classification operations of a plan: u32 hash tables and filters, what a filter
matches (``Key``, ``HashKey``), and what it does with a packet (its class, a ``Police``
action, a redirect to the IFB device).  The other operations and the plan itself are in
``plan``.
"""

from dataclasses import dataclass

from ..spec.names import batch_word
from .ops import _Tc, tc_handle, u32_handle
from ..spec.units import format_rate


@dataclass(frozen=True)
class U32Table(_Tc):
    """A u32 hash table (``divisor``) in the filter list ``prio`` of ``parent``."""

    dev: str
    parent: int
    prio: int
    protocol: str
    ht: int
    divisor: int
    features = frozenset({"u32"})

    def tc(self) -> str:
        return (f"filter add dev {batch_word(self.dev)} parent {tc_handle(self.parent)} prio {self.prio}"
                f" handle {self.ht:x}: protocol {self.protocol} u32 divisor {self.divisor}")


@dataclass(frozen=True)
class Key:
    """Match ``(word at off) & mask == value``; off is from the network header."""

    value: int
    mask: int
    off: int

    def tc(self) -> str:
        return f"match u32 0x{self.value:08x} 0x{self.mask:08x} at {self.off}"


@dataclass(frozen=True)
class HashKey:
    """Pick the bucket of the linked table from ``(word at off) & mask``."""

    mask: int
    off: int


@dataclass(frozen=True)
class Police:
    """A token bucket; filters whose policers share an ``index`` share one bucket (a link
    per host).  ``overhead_bytes`` is added to every packet it meters."""

    rate_bps: int
    burst_bytes: int
    mtu_bytes: int
    mpu_bytes: int = 0
    overhead_bytes: int = 0
    index: int = 0  # 0: the kernel picks one, unshared

    def tc(self) -> str:
        index = f" index {self.index}" if self.index else ""
        mpu = f" mpu {self.mpu_bytes}" if self.mpu_bytes else ""
        overhead = f" overhead {self.overhead_bytes}" if self.overhead_bytes else ""
        return (f"action police{index} rate {format_rate(self.rate_bps)} burst {self.burst_bytes}"
                f" mtu {self.mtu_bytes}{mpu}{overhead} conform-exceed drop/ok")


@dataclass(frozen=True)
class U32Filter(_Tc):
    """One u32 node: in table ``ht`` (0 = the root table of ``prio``), bucket, node."""

    dev: str
    parent: int
    prio: int
    protocol: str
    ht: int
    bucket: int
    node: int
    keys: tuple[Key, ...]
    hashkey: HashKey | None = None
    link: int | None = None
    classid: int | None = None
    police: Police | None = None
    redirect: str | None = None

    @property
    def handle(self) -> int:
        return u32_handle(self.ht, self.bucket, self.node)

    @property
    def features(self) -> frozenset:
        return frozenset({"u32"} | ({"police"} if self.police else set()) | ({"mirred"} if self.redirect else set()))

    def tc(self) -> str:
        where = f"{self.ht:x}:{self.bucket:x}:{self.node:x}" if self.ht else f"::{self.node:x}"
        out = [f"filter add dev {batch_word(self.dev)} parent {tc_handle(self.parent)} prio {self.prio}"
               f" handle {where} protocol {self.protocol} u32"]
        if self.ht:
            out.append(f"ht {self.ht:x}:{self.bucket:x}:")
        out += [k.tc() for k in self.keys]
        if self.link is not None:
            if self.hashkey:
                out.append(f"hashkey mask 0x{self.hashkey.mask:08x} at {self.hashkey.off}")
            out.append(f"link {self.link:x}:")
        if self.classid is not None:
            out.append(f"classid {tc_handle(self.classid)}")
        if self.police:
            out.append(self.police.tc())
        if self.redirect:
            out.append(f"action mirred egress redirect dev {batch_word(self.redirect)}")
        return " ".join(out)
