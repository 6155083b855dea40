"""Pinning links to tx queues, pure: the map that says, for each selected flow, which tx
queue and which tree class its packets take, the eBPF program that reads it, and the plan
operations that make them (``QueueMap``, ``QueueEntry``, ``QueueProgram``).

With several queues (``Request.queues``) a device's root is ``mq`` with one HTB tree per
queue, and no u32 tree at the root: a clsact egress program (direct action) looks the packet
up in a hash map and, on a hit, sets ``skb->queue_mapping`` (queue + 1: 0 means unset, and
the kernel then picks the queue as value - 1) and ``skb->priority`` to the class of the
flow's group in that queue's tree (``htb_classify`` takes a class named by the priority
before any filter).  The group's own u32 tree then finds the link's class, as with one queue.

The lookup matches what the root u32 tree matches with one queue (``u32tree``), in its
order:

1. (family, address, port): IPv4 with a 20-byte header and fragment offset 0, or IPv6 whose
   next header is TCP or UDP (no extension headers) -- the address and port of the client
   (the destination with ``dest``, the source with ``source``);
2. (family, address, every port): any IPv4 or IPv6 packet of a whole host;
3. every other IPv4 or IPv6 packet: the default cohort's link, when the plan has one.

A gate's kick (``gate.kick_frame``) goes to the tx queue its first byte names, unclassified.
Anything else is left alone, and goes through whichever queue the kernel picks, unclassified
(HTB's default: out untouched), as a packet no u32 filter took.  A miss also clears a
priority that names a class of one of ratelimit's trees (left by another device's program:
an IPv6 packet keeps its priority when it is forwarded), so it is not taken for one of ours.
Headers are read with ``bpf_skb_load_bytes_relative`` from the network header (any link
layer); a read that fails because the bytes are not in the packet's linear part is tried
once more after ``bpf_skb_pull_data`` (u32 reads such packets too).
"""

import functools
import struct
import sys
from dataclasses import dataclass

from ..spec.model import IPAddress
from ..spec.names import shell_word
from .ebpf import FP, R0, R1, R2, R3, R4, R5, R6, R7, R8, Asm, Program
from .gate import KICK_ETHERTYPE
from .layout import MAX_QUEUES, TREE_BASE, Layout
from .ops import _Bpf, ClsactQdisc, tc_handle

# the map: key (family, kind, port in network order, address padded to 16 bytes) ->
# value (queue_mapping, priority)
KEY = struct.Struct("=BB2s16s")
VALUE = struct.Struct("=II")
PORT, HOST, OTHERS = 0, 1, 2  # the key's kind: one port of a host, every packet of a host, everything else
PROGRAM_NAME = "ratelimit_q"  # what the kernel shows (bpftool prog), at most 15 characters
FILTER_PRIO, FILTER_HANDLE = 1, 1  # the program's filter in clsact's egress list

# struct __sk_buff offsets (include/uapi/linux/bpf.h), helpers, return codes
SKB_LEN, SKB_QUEUE_MAPPING, SKB_PROTOCOL, SKB_PRIORITY = 0, 12, 16, 32
HELPER_MAP_LOOKUP, HELPER_PULL_DATA, HELPER_LOAD_BYTES_RELATIVE = 1, 39, 68
BPF_HDR_START_NET = 1
TC_ACT_OK = 0
PULL_BYTES = 128  # enough for a link-layer header, an IPv6 header and the ports

# the stack: the key at -24 (20 bytes), the network header at -64 (40), the ports at -72 (4)
KEY_AT, HEADER_AT, PORTS_AT = -24, -64, -72
_FAMILY_AT, _KIND_AT, _PORT_AT, _ADDRESS_AT = KEY_AT, KEY_AT + 1, KEY_AT + 2, KEY_AT + 4


def _native16(value: int) -> int:
    """A 16-bit value in network order as a native 16-bit load of its bytes reads it."""
    return int.from_bytes(value.to_bytes(2, "big"), sys.byteorder)


def key(family: int, address: IPAddress | None, port: int | None) -> bytes:
    """The map key of a flow: ``family`` 4 or 6 with its ``address`` and ``port`` (None:
    every packet of the host); ``family`` 0 for the default cohort's (every other packet)."""
    if family == 0:
        return KEY.pack(0, OTHERS, b"\0\0", b"")
    kind = HOST if port is None else PORT
    return KEY.pack(family, kind, (port or 0).to_bytes(2, "big"), address.packed)


def value(queue: int, classid: int) -> bytes:
    """The map value: ``skb->queue_mapping`` (the queue counted from 1) and ``skb->priority``."""
    return VALUE.pack(queue + 1, classid)


@functools.lru_cache(maxsize=2)
def program(direction: str) -> Program:
    """The clsact egress program of a device whose links are selected by the packet's
    destination (``dest``) or source (``source``) address and port."""
    dest = direction == "dest"
    a = Asm()
    a.mov(R6, R1)  # the skb
    for off in (KEY_AT, KEY_AT + 8, KEY_AT + 16):
        a.store("u64", FP, off, 0)
    a.load("u32", R7, R6, SKB_PROTOCOL)
    a.jump("==", R7, _native16(0x0800), "ipv4")
    a.jump("==", R7, _native16(0x86DD), "ipv6")
    a.jump("==", R7, _native16(KICK_ETHERTYPE), "kick")
    a.goto("miss")

    a.label("kick")  # a gate's kick: to the tx queue its first byte names, unclassified
    _read(a, 0, HEADER_AT, 1, "miss", "kick_read")
    a.load("u8", R1, FP, HEADER_AT)
    a.jump("==", R1, 0, "miss")
    a.jump(">", R1, MAX_QUEUES, "miss")
    a.store("u32", R6, SKB_QUEUE_MAPPING, R1)
    a.mov(R1, 0)
    a.store("u32", R6, SKB_PRIORITY, R1)
    a.goto("out")

    a.label("ipv4")
    _read(a, 0, HEADER_AT, 20, "others", "ipv4_header")
    a.load("u32", R1, FP, HEADER_AT + (16 if dest else 12))
    a.store("u32", FP, _ADDRESS_AT, R1)
    a.store("u8", FP, _FAMILY_AT, 4)
    a.load("u8", R1, FP, HEADER_AT)
    a.alu("&=", R1, 0x0F)
    a.jump("!=", R1, 5, "host")  # IP options: the ports are not at 20
    a.load("u16", R1, FP, HEADER_AT + 6)
    a.alu("&=", R1, _native16(0x1FFF))
    a.jump("!=", R1, 0, "host")  # a later fragment: no ports
    a.load("u8", R1, FP, HEADER_AT + 9)
    a.mov(R8, 20)
    a.jump("==", R1, 6, "ports")
    a.jump("==", R1, 17, "ports")
    a.goto("host")

    a.label("ipv6")
    _read(a, 0, HEADER_AT, 40, "others", "ipv6_header")
    for word in range(4):
        a.load("u32", R1, FP, HEADER_AT + (24 if dest else 8) + 4 * word)
        a.store("u32", FP, _ADDRESS_AT + 4 * word, R1)
    a.store("u8", FP, _FAMILY_AT, 6)
    a.load("u8", R1, FP, HEADER_AT + 6)  # next header
    a.mov(R8, 40)
    a.jump("==", R1, 6, "ports")
    a.jump("==", R1, 17, "ports")
    a.goto("host")

    a.label("ports")  # r8: where they are
    _read(a, R8, PORTS_AT, 4, "host", "ports_read")
    a.load("u16", R1, FP, PORTS_AT + (2 if dest else 0))
    a.store("u16", FP, _PORT_AT, R1)
    _lookup(a)
    a.store("u16", FP, _PORT_AT, 0)

    a.label("host")
    a.store("u8", FP, _KIND_AT, HOST)
    _lookup(a)

    a.label("others")
    for off in (KEY_AT, KEY_AT + 8, KEY_AT + 16):
        a.store("u64", FP, off, 0)
    a.store("u8", FP, _KIND_AT, OTHERS)
    _lookup(a)

    a.label("miss")
    a.load("u32", R1, R6, SKB_PRIORITY)
    a.alu(">>=", R1, 16)
    a.alu("-=", R1, TREE_BASE)
    a.jump(">=", R1, MAX_QUEUES, "out")  # unsigned: not a tree's major
    a.mov(R1, 0)
    a.store("u32", R6, SKB_PRIORITY, R1)
    a.label("out")
    a.mov(R0, TC_ACT_OK)
    a.exit()

    a.label("hit")  # r0: the value
    a.load("u32", R1, R0, 0)
    a.store("u32", R6, SKB_QUEUE_MAPPING, R1)
    a.load("u32", R1, R0, 4)
    a.store("u32", R6, SKB_PRIORITY, R1)
    a.mov(R0, TC_ACT_OK)
    a.exit()
    return a.assemble()


def _read(a: Asm, offset, at: int, length: int, fail: str, tag: str) -> None:
    """The stack at ``at`` = ``length`` bytes of the packet from ``offset`` (an int, or a
    register) past its network header; on to ``fail`` when the packet is shorter."""
    def call():
        a.mov(R1, R6)
        a.mov(R2, offset)
        a.mov(R3, FP)
        a.alu("+=", R3, at)
        a.mov(R4, length)
        a.mov(R5, BPF_HDR_START_NET)
        a.call(HELPER_LOAD_BYTES_RELATIVE, "bpf_skb_load_bytes_relative")
    call()
    a.jump("==", R0, 0, f"{tag}_done")
    a.load("u32", R2, R6, SKB_LEN)  # not in the linear part, or not there at all: pull, then again
    a.jump("<=", R2, PULL_BYTES, f"{tag}_pull")
    a.mov(R2, PULL_BYTES)
    a.label(f"{tag}_pull")
    a.mov(R1, R6)
    a.call(HELPER_PULL_DATA, "bpf_skb_pull_data")
    call()
    a.jump("!=", R0, 0, fail)
    a.label(f"{tag}_done")


def _lookup(a: Asm) -> None:
    """The key on the stack looked up: on to ``hit`` when it is there."""
    a.load_map(R1, "queues")
    a.mov(R2, FP)
    a.alu("+=", R2, KEY_AT)
    a.call(HELPER_MAP_LOOKUP, "bpf_map_lookup_elem")
    a.jump("!=", R0, 0, "hit")


# ---------------------------------------------------------------- plan operations


def pins(lay: Layout, dev: str, direction: str) -> list:
    """The operations that pin ``lay``'s flows on ``dev`` (several queues): the clsact qdisc,
    the map with an entry per flow -- (host, port) flows, whole hosts, the default cohort's
    -- naming its group's queue and class, and the program."""
    entries = []
    for pairs, owner in ((lay.port_flows, lay.port_link), (lay.whole_flows, lay.whole_link)):
        for (host, port, _), link in zip(pairs, owner):
            group = lay.group_class(link)
            entries.append(QueueEntry(dev, host.version, host, port, (group >> 16) - TREE_BASE, group))
    for span in lay.spans:
        if span.cohort.others:
            group = lay.group_class(span.first_link)
            entries.append(QueueEntry(dev, 0, None, None, (group >> 16) - TREE_BASE, group))
    return [ClsactQdisc(dev), QueueMap(dev, len(entries)), *entries, QueueProgram(dev, direction)]


@dataclass(frozen=True)
class QueueMap(_Bpf):
    """The hash map of a device's program, for ``entries`` flows (made before its entries)."""

    dev: str
    entries: int
    features = frozenset({"bpf"})

    def lines(self) -> list[str]:
        return [f"# bpf: map on dev {shell_word(self.dev)}: hash, key (family, kind, port, address) "
                f"{KEY.size} bytes, value (queue_mapping, priority) {VALUE.size} bytes, {self.entries} entries"]


@dataclass(frozen=True)
class QueueEntry(_Bpf):
    """One flow's entry in its device's map: its tx queue (from 0) and the class of its
    group in that queue's tree.  ``family`` 0: the default cohort's (every other packet)."""

    dev: str
    family: int
    address: IPAddress | None
    port: int | None
    queue: int
    classid: int
    features = frozenset({"bpf"})

    def key(self) -> bytes:
        return key(self.family, self.address, self.port)

    def value(self) -> bytes:
        return value(self.queue, self.classid)

    def lines(self) -> list[str]:
        if self.family == 0:
            what = "every other ip/ipv6 packet"
        else:
            what = f"ip{'' if self.family == 4 else 'v6'} {self.address} " + \
                ("every packet" if self.port is None else f"port {self.port}")
        return [f"# bpf: map on dev {shell_word(self.dev)}: {what} -> tx queue {self.queue} "
                f"(queue_mapping {self.queue + 1}), class {tc_handle(self.classid)}"]


@dataclass(frozen=True)
class QueueProgram(_Bpf):
    """The program (``program(direction)``) loaded with the device's map and attached as a
    direct-action filter to its clsact qdisc's egress hook -- or, when a program is there
    (a make-before-break switch), put in its place in one kernel step."""

    dev: str
    direction: str
    features = frozenset({"bpf", "clsact"})

    def program(self) -> Program:
        return program(self.direction)

    def lines(self) -> list[str]:
        head = (f"# bpf: program {PROGRAM_NAME} (sched_cls), loaded with the map of dev {shell_word(self.dev)} and "
                f"attached as: filter add dev {shell_word(self.dev)} egress prio {FILTER_PRIO} handle "
                f"{FILTER_HANDLE} bpf direct-action")
        return [head] + [f"#   {line}" for line in self.program().listing()]
