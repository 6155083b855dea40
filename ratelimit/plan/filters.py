"""The classification operations of a plan: u32 hash tables and filters, what a filter
matches (``Key``, ``HashKey``), what it does with a packet (its class, a ``Police``
action, a redirect to the IFB device), and their removal (``DelFilter``).  The other
operations and the plan itself are in ``ops`` and ``shaping``.

>>> DelFilter("eth0", 0x520000, 3, "ip").tc()
'filter del dev eth0 parent 52: prio 3 protocol ip'
"""

from dataclasses import dataclass

from ..spec.names import batch_word, shell_word
from ..spec.units import format_rate
from .ops import _Tc, tc_handle, u32_handle

U32_ROOT_TABLE = 0xFFF  # a handle's table part that names the filter list's own root table


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
class _InList(_Tc):
    """An operation on the filter list ``prio`` of ``parent`` on ``dev``, for ``protocol``."""

    dev: str
    parent: int
    prio: int
    protocol: str

    def _list(self, verb: str, word=batch_word) -> str:
        """``filter VERB dev DEV parent P prio N``, the device's name quoted by ``word``."""
        return f"filter {verb} dev {word(self.dev)} parent {tc_handle(self.parent)} prio {self.prio}"


@dataclass(frozen=True)
class U32Table(_InList):
    """A u32 hash table (``divisor``) in the filter list ``prio`` of ``parent``."""

    ht: int
    divisor: int
    features = frozenset({"u32"})

    def tc(self) -> str:
        return f"{self._list('add')} handle {self.ht:x}: protocol {self.protocol} u32 divisor {self.divisor}"


@dataclass(frozen=True)
class U32Filter(_InList):
    """One u32 node: in table ``ht`` (0 = the root table of ``prio``), bucket, node."""

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
        out = [f"{self._list('add')} handle {where} protocol {self.protocol} u32"]
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


@dataclass(frozen=True)
class DelFilter(_InList):
    """Remove u32 filters of the list ``prio`` of ``parent``: the node or table ``handle``
    (``U32_ROOT_TABLE`` names the list's own root table), or with ``handle`` 0 the whole list."""

    handle: int = 0

    @property
    def in_root_table(self) -> bool:
        """A node of the list's own root table, whose number the kernel picks: a script
        reads it from ``tc filter show`` first (``shell``)."""
        return self.handle >> 20 == U32_ROOT_TABLE and bool(self.handle & 0xFFFFF)

    @property
    def is_table(self) -> bool:
        """A table: u32 frees it only an RCU grace period after the last filter linking to
        it went, so a script tries again for a while (``shell``)."""
        return bool(self.handle) and not self.handle & 0xFFFFF

    def tc(self) -> str:
        if not self.handle:
            return f"{self._list('del')} protocol {self.protocol}"
        ht, bucket, node = self.handle >> 20, (self.handle >> 12) & 0xFF, self.handle & 0xFFF
        where = f"{ht:x}:" if not (bucket or node) else f"{ht:x}:{bucket:x}:{node:x}"
        return f"{self._list('del')} handle {where} protocol {self.protocol} u32"

    def shell(self, tc: str = "tc") -> list[str]:
        """Shell lines for a node of the root table or a table (``in_root_table``, ``is_table``)."""
        delete = f"{tc} {self._list('del', shell_word)}"
        if self.is_table:
            return [f"n=0; until {delete} handle {self.handle >> 20:x}: protocol {self.protocol} u32 2>/dev/null; do",
                    '  n=$((n + 1)); [ "$n" -lt 100 ] || { echo "ratelimit: could not remove u32 table '
                    f'{self.handle >> 20:x}:" >&2; exit 1; }}; sleep 0.05',
                    "done"]
        show = (f"{tc} {self._list('show', shell_word)} protocol {self.protocol}"
                " | sed -n 's/.* fh \\([0-9a-f]*\\): ht divisor 1 *$/\\1/p'")
        bucket, node = (self.handle >> 12) & 0xFF, self.handle & 0xFFF
        return [f"root=$({show})", f'{delete} handle "$root:{bucket:x}:{node:x}" protocol {self.protocol} u32']

    def lines(self) -> list[str]:
        return self.shell() if self.in_root_table or self.is_table else [self.tc()]

