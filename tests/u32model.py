"""A Python model of the kernel's u32 classifier, run over a compiled plan.

It follows ``u32_classify`` in net/sched/cls_u32.c for the features plans use:
keys compare ``(word ^ value) & mask``, a matching node with a link hashes
``(word at hoff) & hmask >> fshift`` into the linked table and descends; if
nothing matches below, the walk returns to the next node of the upper bucket;
a node without a link is terminal.  Nodes in a bucket are tried in handle order.
"""

from collections import defaultdict

from ratelimit.plan.filters import U32Filter, U32Table
from ratelimit.plan.ops import TC_H_ROOT, HtbQdisc


class Tree:
    def __init__(self, ops, dev, parent):
        self.divisor = {}
        self.nodes = defaultdict(list)  # (prio, ht, bucket) -> filters
        self.prios = set()
        for op in ops:
            if getattr(op, "dev", None) != dev or getattr(op, "parent", None) != parent:
                continue
            if isinstance(op, U32Table):
                self.divisor[op.ht] = op.divisor
            elif isinstance(op, U32Filter):
                self.nodes[op.ht, op.bucket].append(op)
                if op.ht == 0:
                    self.prios.add((op.prio, op.protocol))
        for key in self.nodes:
            self.nodes[key].sort(key=lambda f: f.node)

    def classify(self, packet: bytes, ethertype: str):
        """The terminal filter the packet lands on, or None."""
        for prio, protocol in sorted(self.prios):
            if protocol not in (ethertype, "all"):
                continue
            roots = [f for f in self.nodes[0, 0] if f.prio == prio]
            found = self._walk(roots, packet)
            if found is not None:
                return found
        return None

    def _walk(self, nodes, packet):
        for f in nodes:
            if not all(_matches(packet, k) for k in f.keys):
                continue
            if f.link is None:
                return f
            bucket = 0
            if f.hashkey:
                word = _word(packet, f.hashkey.off)
                if word is None:
                    return None
                shift = (f.hashkey.mask & -f.hashkey.mask).bit_length() - 1
                bucket = ((word & f.hashkey.mask) >> shift) & (self.divisor[f.link] - 1)
            found = self._walk(self.nodes[f.link, bucket], packet)
            if found is not None:
                return found
        return None


class Htb:
    """Classification as HTB does it: the root qdisc's filters, and when they name a class
    whose queue is itself an HTB qdisc (a shape-mode group), that qdisc's filters next."""

    def __init__(self, ops, dev, parent):
        self.ops, self.dev, self.root = ops, dev, parent
        self.inner = {op.parent: op.handle for op in ops if type(op) is HtbQdisc and op.dev == dev
                      and op.parent != TC_H_ROOT}
        self.trees = {}

    def classify(self, packet, ethertype):
        parent = self.root
        while True:
            if parent not in self.trees:
                self.trees[parent] = Tree(self.ops, self.dev, parent)
            hit = self.trees[parent].classify(packet, ethertype)
            if hit is None or hit.classid not in self.inner:
                return hit
            parent = self.inner[hit.classid]


def _word(packet, off):
    if off < 0 or off + 4 > len(packet):
        return None
    return int.from_bytes(packet[off:off + 4], "big")


def _matches(packet, key):
    word = _word(packet, key.off)
    return word is not None and ((word ^ key.value) & key.mask) == 0


def ipv4_packet(src, dst, sport, dport, proto=6, ihl=5, frag_off=0):
    header = bytearray(ihl * 4)
    header[0] = 0x40 | ihl
    header[6:8] = frag_off.to_bytes(2, "big")
    header[8] = 64
    header[9] = proto
    header[12:16] = src.packed
    header[16:20] = dst.packed
    return bytes(header) + sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(16)


def ipv6_packet(src, dst, sport, dport, next_header=6):
    header = bytearray(40)
    header[0] = 0x60
    header[6] = next_header
    header[8:24] = src.packed
    header[24:40] = dst.packed
    return bytes(header) + sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(16)
