"""The operations a plan is made of, and the plan itself.

A plan is an ordered tuple of small frozen operations.  The compiler makes it
without touching the system; the executor (``kernel.executor``) carries it
out, one function per operation type; ``script`` prints it as the
shell/``tc -batch`` text a person can paste.  Handles are ints inside
(``0x520000`` is ``52:``).  Each operation says which kernel parts it needs
(``features``, names as ``kernel.probe`` knows them) and what removes it
(``undo``; None when it goes with the qdisc it hangs under).

This module holds the handles, the three kinds of operation (``ip``, ``tc``, bpf(2)),
the devices, the root and hook qdiscs, the removals of qdiscs and classes, ``Change`` and
the ``Plan``.  The classes and leaf qdiscs are in ``shaping``; the classification
operations (u32 tables and filters, policers) in ``filters`` and ``queuepin``.

>>> MqQdisc("eth0", 0x10000).tc(), tc_handle(0x520100)
('qdisc add dev eth0 root handle 1: mq', '52:100')
"""

from dataclasses import dataclass

from ..spec.model import IPAddress, Request
from ..spec.names import batch_word, shell_word

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
class Change(_Tc):
    """Set an existing class, leaf qdisc or u32 filter to ``op``'s parameters in place
    (``tc ... change``): its queue, its place in the tree and its classification stay."""

    op: object  # a shaping.HtbClass, NetemQdisc, FifoQdisc, TbfQdisc or filters.U32Filter

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
