"""The operations a plan is made of, and how each reads as tc text.

A plan is an ordered tuple of small frozen operations.  The compiler makes it
without touching the system; the executor (``kernel.executor``) carries it
out, one function per operation type; ``script`` prints it as the
shell/``tc -batch`` text a person can paste.  The classification operations (u32 tables and
filters, policers) are in ``filters``.  Handles are ints inside
(``0x520000`` is ``52:``).  Each operation says which kernel parts it needs
(``features``, names as ``kernel.probe`` knows them) and what removes it
(``undo``; None when it goes with the qdisc it hangs under).

Over 400 lines: every operation type of a plan in one place, each a small frozen class with
its tc text, features and undo; the classification operations are already apart (``filters``,
``queuepin``).
"""

from dataclasses import dataclass

from ..spec.model import IPAddress, LinkParams, Request
from ..spec.names import batch_word, shell_word
from ..spec.units import format_percent, format_rate, format_time

TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1
TC_H_CLSACT_INGRESS, TC_H_CLSACT_EGRESS = 0xFFFFFFF2, 0xFFFFFFF3  # clsact's two filter lists
INGRESS_HANDLE = 0xFFFF0000
SHARED_POLICE_INDEX_BASE = 0x40000000  # indexes ratelimit picks for policers filters share


def tc_handle(handle: int) -> str:
    """0x520000 -> '52:', 0x520100 -> '52:100' (tc's hex notation)."""
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:" if minor == 0 else f"{major:x}:{minor:x}"


def u32_handle(ht: int, bucket: int = 0, node: int = 0) -> int:
    return (ht << 20) | (bucket << 12) | node


# ---------------------------------------------------------------- operations


class _Ip:
    """An operation on a network device (``ip link ...``)."""

    features: frozenset = frozenset()

    def shell(self) -> list[str]:
        raise NotImplementedError

    def lines(self) -> list[str]:
        return self.shell()

    def undo(self):
        return None


class _Tc:
    """An operation on traffic control (one ``tc -batch`` line)."""

    features: frozenset = frozenset()

    def tc(self) -> str:
        raise NotImplementedError

    def lines(self) -> list[str]:
        return [self.tc()]

    def undo(self):
        return None  # removed with the root qdisc it hangs under


class _Bpf:
    """An operation carried out with bpf(2) (``queuepin``: a map, its entries, the program
    that reads them): no ``tc`` line can carry it, so a script shows it as comments."""

    features: frozenset = frozenset()

    def lines(self) -> list[str]:
        raise NotImplementedError

    def undo(self):
        return None  # goes with the clsact qdisc its program hangs on


@dataclass(frozen=True)
class AddIfb(_Ip):
    """An IFB device that ingress traffic is redirected to, for shaping/delay, with
    ``queues`` transmit queues (one tree each, ``MqQdisc``)."""

    name: str
    queues: int = 1
    features = frozenset({"ifb"})

    def shell(self) -> list[str]:
        name = shell_word(self.name)
        queues = f" numtxqueues {self.queues}" if self.queues > 1 else ""
        return [f"ip link add name {name}{queues} type ifb", f"ip link set dev {name} up"]

    def undo(self):
        return DelLink(self.name)


@dataclass(frozen=True)
class DelLink(_Ip):
    name: str

    def shell(self) -> list[str]:
        return [f"ip link del dev {shell_word(self.name)}"]


@dataclass(frozen=True)
class Stab:
    """A size table: the kernel meters each packet as ``skb->len + overhead``, padded to
    53-byte ATM cells when ``atm`` (tc-stab(8)); for ATM the table has one slot per byte
    up to 2047, so no rounding."""

    overhead_bytes: int
    atm: bool = False

    def tc(self) -> str:
        if self.atm:
            return f"stab mtu {STAB_MTU} tsize {STAB_TSIZE} overhead {self.overhead_bytes} linklayer atm"
        return f"stab overhead {self.overhead_bytes} linklayer ethernet"


STAB_MTU, STAB_TSIZE = 2047, 2048


@dataclass(frozen=True)
class HtbQdisc(_Tc):
    dev: str
    handle: int
    default_minor: int = 0  # 0: unclassified packets go out untouched
    stab: Stab | None = None  # the link layer (None: tc's own count, Ethernet frames); root only
    parent: int = TC_H_ROOT  # else the class it hangs under (a group of links)
    features = frozenset({"htb"})

    def tc(self) -> str:
        stab = f" {self.stab.tc()}" if self.stab else ""
        where = "root" if self.parent == TC_H_ROOT else f"parent {tc_handle(self.parent)}"
        return (f"qdisc add dev {batch_word(self.dev)} {where} handle {tc_handle(self.handle)}{stab}"
                f" htb default {self.default_minor:x}")

    def undo(self):
        return DelQdisc(self.dev, TC_H_ROOT) if self.parent == TC_H_ROOT else None


@dataclass(frozen=True)
class IngressQdisc(_Tc):
    dev: str
    features = frozenset({"ingress"})

    def tc(self) -> str:
        return f"qdisc add dev {batch_word(self.dev)} handle ffff: ingress"

    def undo(self):
        return DelQdisc(self.dev, TC_H_INGRESS)


@dataclass(frozen=True)
class ClsactQdisc(_Tc):
    """The clsact qdisc: the ingress hook (``ffff:fff2``, where the IFB redirect goes when the
    device has one) and the egress hook (``ffff:fff3``), where the program that pins each
    link to its tx queue runs (``queuepin.QueueProgram``)."""

    dev: str
    features = frozenset({"clsact"})

    def tc(self) -> str:
        return f"qdisc add dev {batch_word(self.dev)} clsact"

    def undo(self):
        return DelQdisc(self.dev, TC_H_INGRESS, "clsact")


@dataclass(frozen=True)
class MqQdisc(_Tc):
    """The root of a device with one tree per tx queue: ``mq`` gives each queue its own
    qdisc (class ``handle:(q + 1)`` holds queue q's), each behind its own lock."""

    dev: str
    handle: int
    features = frozenset({"mq"})

    def tc(self) -> str:
        return f"qdisc add dev {batch_word(self.dev)} root handle {tc_handle(self.handle)} mq"

    def undo(self):
        return DelQdisc(self.dev, TC_H_ROOT)


@dataclass(frozen=True)
class DelQdisc(_Tc):
    dev: str
    parent: int
    kind: str = "ingress"  # at TC_H_INGRESS: the qdisc's kind (the kernel refuses a delete naming another)

    def tc(self) -> str:
        where = self.kind if self.parent == TC_H_INGRESS else "root"
        return f"qdisc del dev {batch_word(self.dev)} {where}"


@dataclass(frozen=True)
class DelClass(_Tc):
    """Remove a class, with the qdisc it holds and everything under that."""

    dev: str
    classid: int

    def tc(self) -> str:
        return f"class del dev {batch_word(self.dev)} classid {tc_handle(self.classid)}"


@dataclass(frozen=True)
class DelFilter(_Tc):
    """Remove u32 filters of the list ``prio`` of ``parent``: the node or table ``handle``
    (``U32_ROOT_TABLE`` names the list's own root table), or with ``handle`` 0 the whole list."""

    dev: str
    parent: int
    prio: int
    protocol: str
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

    def _where(self, word) -> str:
        return f"filter del dev {word(self.dev)} parent {tc_handle(self.parent)} prio {self.prio}"

    def tc(self) -> str:
        if not self.handle:
            return f"{self._where(batch_word)} protocol {self.protocol}"
        ht, bucket, node = self.handle >> 20, (self.handle >> 12) & 0xFF, self.handle & 0xFFF
        where = f"{ht:x}:" if not (bucket or node) else f"{ht:x}:{bucket:x}:{node:x}"
        return f"{self._where(batch_word)} handle {where} protocol {self.protocol} u32"

    def shell(self, tc: str = "tc") -> list[str]:
        """Shell lines for a node of the root table or a table (``in_root_table``, ``is_table``)."""
        if self.is_table:
            delete = f"{tc} {self._where(shell_word)} handle {self.handle >> 20:x}: protocol {self.protocol} u32"
            return [f"n=0; until {delete} 2>/dev/null; do",
                    '  n=$((n + 1)); [ "$n" -lt 100 ] || { echo "ratelimit: could not remove u32 table '
                    f'{self.handle >> 20:x}:" >&2; exit 1; }}; sleep 0.05',
                    "done"]
        show = (f"{tc} {self._where(shell_word).replace('filter del', 'filter show', 1)} protocol {self.protocol}"
                " | sed -n 's/.* fh \\([0-9a-f]*\\): ht divisor 1 *$/\\1/p'")
        bucket, node = (self.handle >> 12) & 0xFF, self.handle & 0xFFF
        return [f"root=$({show})",
                f'{tc} {self._where(shell_word)} handle "$root:{bucket:x}:{node:x}" protocol {self.protocol} u32']

    def lines(self) -> list[str]:
        return self.shell() if self.in_root_table or self.is_table else [self.tc()]


U32_ROOT_TABLE = 0xFFF  # a handle's table part that names the filter list's own root table


@dataclass(frozen=True)
class HtbClass(_Tc):
    dev: str
    parent: int
    classid: int
    rate_bps: int
    ceil_bps: int
    burst_bytes: int
    quantum_bytes: int
    mpu_bytes: int = 0
    # added to the length the device's size table gave a packet (a cohort whose link layer
    # is not the device's), and ATM cells: 48 bytes of it per 53 on the line
    overhead_bytes: int = 0
    atm: bool = False
    features = frozenset({"htb"})

    def with_rates(self, rate_bps: int, ceil_bps: int, burst_bytes: int) -> "HtbClass":
        """This class at other rates: what ``dataclasses.replace`` gives, made without
        ``__init__`` (a trace driver makes one for every link every step)."""
        new = object.__new__(type(self))
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["rate_bps"], fields["ceil_bps"], fields["burst_bytes"] = rate_bps, ceil_bps, burst_bytes
        return new

    def tc(self) -> str:
        mpu = f" mpu {self.mpu_bytes}" if self.mpu_bytes else ""
        layer = (f" overhead {self.overhead_bytes}" if self.overhead_bytes else "") + (" linklayer atm" if self.atm else "")
        return (f"class add dev {batch_word(self.dev)} parent {tc_handle(self.parent)}"
                f" classid {tc_handle(self.classid)}"
                f" htb rate {format_rate(self.rate_bps)} ceil {format_rate(self.ceil_bps)}"
                f" burst {self.burst_bytes}b cburst {self.burst_bytes}b quantum {self.quantum_bytes}{mpu}{layer}")


def netem_args(p: LinkParams, limit_pkts: int) -> str:
    """tc's words for the netem stage of link parameters ``p``."""
    out = [f"limit {limit_pkts}"]
    if p.delay_us or p.jitter_us:
        out.append(f"delay {format_time(p.delay_us)}")
        if p.jitter_us:
            out.append(format_time(p.jitter_us))
            if p.delay_corr_pct:
                out.append(format_percent(p.delay_corr_pct))
    for word, pct, corr in (("loss", p.loss_pct, p.loss_corr_pct),
                            ("duplicate", p.duplicate_pct, p.duplicate_corr_pct),
                            ("corrupt", p.corrupt_pct, p.corrupt_corr_pct),
                            ("reorder", p.reorder_pct, p.reorder_corr_pct)):
        if pct:
            out.append(f"{word} {format_percent(pct)}")
            if corr:
                out.append(format_percent(corr))
    return " ".join(out)


def netem_groups(p: LinkParams, rate_bps: int = 0) -> frozenset:
    """The optional parts a netem stage of ``p`` is sent with (beside its fixed options):
    "corr", "reorder", "corrupt", "rate".  The kernel keeps a part a change leaves out, so
    a stage can be changed in place only to one that sends every part it had."""
    delayed = bool(p.delay_us or p.jitter_us)
    corr = ((p.delay_corr_pct and delayed and p.jitter_us) or (p.loss_corr_pct and p.loss_pct)
            or (p.duplicate_corr_pct and p.duplicate_pct) or (p.reorder_corr_pct and p.reorder_pct)
            or (p.corrupt_corr_pct and p.corrupt_pct))
    return frozenset(name for name, on in (("corr", corr), ("reorder", p.reorder_pct), ("corrupt", p.corrupt_pct),
                                           ("rate", rate_bps)) if on)


@dataclass(frozen=True)
class NetemQdisc(_Tc):
    """A netem stage for the impairments of ``params``, queueing at most ``limit_pkts``;
    with ``rate_bps`` it also serializes packets at that rate, in order (a packet never
    leaves before the one ahead of it, whatever its jitter)."""

    dev: str
    parent: int
    handle: int
    params: LinkParams
    limit_pkts: int = 1000
    rate_bps: int = 0
    # its rate's packet overhead (signed: a cohort whose link layer is not the device's),
    # and cells (ATM: 48 bytes a cell, 5 more on the line)
    overhead_bytes: int = 0
    cell_bytes: int = 0
    cell_overhead_bytes: int = 0
    features = frozenset({"netem"})

    def tc(self) -> str:
        rate = f" rate {format_rate(self.rate_bps)}" if self.rate_bps else ""
        if self.rate_bps and (self.overhead_bytes or self.cell_bytes):
            rate += f" {self.overhead_bytes}" + (f" {self.cell_bytes} {self.cell_overhead_bytes}" if self.cell_bytes else "")
        return (f"qdisc add dev {batch_word(self.dev)} parent {tc_handle(self.parent)} handle {tc_handle(self.handle)}"
                f" netem {netem_args(self.params, self.limit_pkts)}{rate}")


@dataclass(frozen=True)
class FifoQdisc(_Tc):
    """A link's queue without netem: ``bfifo`` (a limit in bytes, as the link meters them)
    or ``pfifo`` (in packets)."""

    dev: str
    parent: int
    handle: int
    kind: str  # "bfifo" or "pfifo"
    limit: int

    @property
    def features(self) -> frozenset:
        return frozenset({self.kind})

    def tc(self) -> str:
        return (f"qdisc add dev {batch_word(self.dev)} parent {tc_handle(self.parent)} handle {tc_handle(self.handle)}"
                f" {self.kind} limit {self.limit}")


@dataclass(frozen=True)
class TbfQdisc(_Tc):
    """A token bucket as a traced link's leaf (``gate``): wide open it passes what the HTB
    class above sends, shut (a few bit/s) it holds the link's packets in its own byte
    queue of ``limit_bytes`` (tbf's bfifo) like a tunnel.  ``burst_bytes`` must hold the
    largest frame: tbf drops a larger packet on arrival."""

    dev: str
    parent: int
    handle: int
    rate_bps: int
    burst_bytes: int
    limit_bytes: int
    features = frozenset({"tbf"})

    def tc(self) -> str:
        return (f"qdisc add dev {batch_word(self.dev)} parent {tc_handle(self.parent)} handle {tc_handle(self.handle)}"
                f" tbf rate {format_rate(self.rate_bps)} burst {self.burst_bytes}b limit {self.limit_bytes}")


@dataclass(frozen=True)
class Change(_Tc):
    """Set an existing class, leaf qdisc or u32 filter to ``op``'s parameters in place
    (``tc ... change``): its queue, its place in the tree and its classification stay."""

    op: object  # an HtbClass, NetemQdisc, FifoQdisc, TbfQdisc or filters.U32Filter

    @classmethod
    def of(cls, op) -> "Change":
        """``Change(op)``, made without the frozen dataclass's ``__init__`` (a trace driver
        makes one for every link every step)."""
        new = object.__new__(cls)
        new.__dict__["op"] = op
        return new

    @property
    def features(self) -> frozenset:
        return self.op.features

    def tc(self) -> str:
        what, add, rest = self.op.tc().partition(" add ")
        return f"{what} change {rest}"


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Flow:
    """Where one emulated link -- (host, port) or, per host, (host, None) -- and direction
    lives in the kernel, for statistics."""

    direction: str
    host: IPAddress
    port: int | None
    dev: str
    prio: int
    handle: int  # of its u32 filter (per host: of one of them; they share the policer)
    classid: int | None = None  # shape mode: its own HTB class
    cohort: str = ""  # the name of its cohort


@dataclass(frozen=True)
class Plan:
    request: Request
    ops: tuple
    flows: tuple[Flow, ...]
    changed: tuple | None = None  # set by an apply over an installed plan that was not rebuilt: what it sent
    how: str = "built"  # "built" (removing an installed plan first), "in place" or "make-before-break"

    def devices(self) -> tuple[str, ...]:
        """Every device the plan configures, the request's interface first."""
        devs = [self.request.interface]
        for op in self.ops:
            dev = getattr(op, "dev", None) or getattr(op, "name", None)
            if dev not in devs:
                devs.append(dev)
        return tuple(devs)

    def teardown(self) -> tuple:
        """The operations that remove everything the plan adds, in order."""
        return tuple(u for u in (op.undo() for op in reversed(self.ops)) if u is not None)

    def features(self) -> frozenset[str]:
        """Kernel parts the plan needs (names as used by ``kernel.probe``)."""
        return frozenset().union(*(op.features for op in self.ops))

    def has_ingress(self) -> bool:
        """True if the plan puts an ingress (or clsact) qdisc on its interface."""
        return any(type(op) in (IngressQdisc, ClsactQdisc) and op.dev == self.request.interface for op in self.ops)
