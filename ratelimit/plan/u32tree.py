"""The u32 hash tree that finds a packet's (host, port) in constant time: pure.

One tree per address family (prio 1 IPv4, prio 2 IPv6) in one filter list.  The
root filters match TCP and UDP (IPv4: no IP options, first fragment) and hash on
the byte that best splits the flows into the first 256-way table.  A bucket
holding more than ``LEAF_MAX`` flows links to a further table keyed on the next
level -- host octets, port high byte, port low byte, chosen at each table as the
one that leaves the smallest largest bucket -- until every bucket holds at most
``LEAF_MAX`` exact (host, port) filters.  Ports are read at the fixed offset of a
20-byte IPv4 (40-byte IPv6) header, which is why the root filter requires it:
u32 reads a ``hashkey`` before its own ``offset`` applies.

A whole host (a link per host without ports) is one exact filter on its address in
a tree of its own (prio 3 IPv4, prio 4 IPv6), hashed on address octets only, whose
root filter takes every packet of the family: TCP, UDP, ICMP, fragments, IP options.
Those lists come after the (host, port) ones, so a packet tries its port first.

A cohort with server prefixes or ports adds the far side to each of its exact filters
(``_far_keys``): a flow is then one filter per server prefix and port block, in the same
bucket as its host's.  The default cohort's filters (``catch_all``, prio 5 IPv4 and 6 IPv6)
come after every tree and take every packet the trees did not.
"""

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from ..errors import FieldError
from .filters import HashKey, Key, Police, U32Filter, U32Table
from .ops import Flow

LEAF_MAX = 16  # most exact filters left in one bucket
PROTOCOLS = (6, 17)  # TCP, UDP
FAMILY = {4: (1, "ip"), 6: (2, "ipv6")}  # prio, tc protocol
WHOLE_FAMILY = {4: (3, "ip"), 6: (4, "ipv6")}  # the lists of whole hosts, tried after the (host, port) ones
OTHERS_FAMILY = {4: (5, "ip"), 6: (6, "ipv6")}  # the default cohort's: every IP packet no list before took


def catch_all(dev: str, parent: int, classid: int, node: int) -> list:
    """One filter per address family, in lists tried after every tree's, that sends every
    packet of the family to ``classid`` (the default cohort's group or link)."""
    return [_FilterList(dev, parent, prio, proto).node(0, 0, node, (Key(0, 0, 0),), classid=classid)
            for prio, proto in OTHERS_FAMILY.values()]


@dataclass(frozen=True)
class TreeIds:
    """The ids a tree takes in its filter lists: the first table of each family, the range
    of the further tables (the kernel hands out 0x800 and up itself), and the node number
    of the first root filter.  u32 shares table ids among the filter lists of one qdisc,
    and matches the root filters in node order: a second tree built beside a first in
    ``SECOND`` is not consulted while the first's root filters are there, and takes over,
    flow for flow, when they go (``diff.make_before_break``)."""

    first: dict  # family -> first table id
    lo: int
    hi: int
    root_node: int


FIRST = TreeIds({4: 0x001, 6: 0x002}, 0x003, 0x7FF, 1)
SECOND = TreeIds({4: 0x401, 6: 0x402}, 0x403, 0x7FF, 1 + len(PROTOCOLS))


@dataclass(frozen=True)
class Terminal:
    """What the exact filter of a flow carries, and whether it speaks for its link in statistics."""

    classid: int
    police: Police | None = None
    reports: bool = True  # False: another filter of the same link (per host) already does
    per_host: bool = False  # the link is the host's, all its ports: it reports no port
    cohort: str = ""  # the cohort of its link


def build(pairs: Sequence, dev: str, parent: int, direction: str, terminal: Callable[[int], Terminal],
          ops: list, links: list, *, link_classid: bool, indices: range | None = None,
          tree_ids: TreeIds = FIRST, ids: "_TableIds | None" = None, whole_hosts: bool = False) -> None:
    """Append the tree's tables and filters for the flows ``pairs`` ((host, port, server
    prefix or None) each;
    those numbered in ``indices``, default all) on ``dev`` under ``parent`` to ``ops``, and
    a ``Flow`` per reporting filter to ``links`` (with its class when ``link_classid``:
    shape mode's counters are the class's).  ``whole_hosts``: the flows are hosts (port
    None) and their filters take every IP packet of the host (``WHOLE_FAMILY``'s lists).
    Trees built into one qdisc's filter lists share ``ids`` (u32's table ids are per qdisc)."""
    ids = ids or table_ids(tree_ids)
    indices = indices if indices is not None else range(len(pairs))
    flows_of: dict = {}  # host -> [(flow index, port)], in flow order
    for i in indices:
        host, port, server = pairs[i]
        flows_of.setdefault(host, []).append((i, port, server))
    for family in (4, 6):
        hosts = sorted((h for h in flows_of if h.version == family), key=int)
        if not hosts:
            continue
        prio, proto_name = (WHOLE_FAMILY if whole_hosts else FAMILY)[family]
        l1 = ids.take(len(hosts)) if whole_hosts else tree_ids.first[family]
        where = _FilterList(dev, parent, prio, proto_name)
        levels = _levels(family, direction)
        excluded = _PORT_LEVELS if whole_hosts else frozenset()
        entries = []  # (flow index, host, port, bucket value per level, exact keys)
        for host in hosts:
            host_keys = _host_keys(family, direction, host)
            b0, b1, b2, b3 = (int(host) & 0xFFFFFFFF).to_bytes(4, "big")
            for i, port, server in flows_of[host]:
                keys = host_keys if server is None else host_keys + _far_keys(family, direction, *server)
                if port is None:
                    entries.append((i, host, None, (b3, 0, 0, b2, b1, b0), keys))
                else:
                    entries.append((i, host, port, (b3, port >> 8, port & 0xFF, b2, b1, b0),
                                    keys + (_port_key(family, direction, port),)))
        first = _choose_level(entries, levels, excluded) or 0
        ops.append(where.table(l1))
        place = _Placer(where, direction, levels, terminal, link_classid, ids, ops, links)
        place.split(l1, entries, first, excluded | {first})
        _, off, mask = levels[first]
        if whole_hosts:
            ops.append(where.node(0, 0, tree_ids.root_node, (Key(0, 0, 0),), hashkey=HashKey(mask, off), link=l1))
            continue
        for node, proto in enumerate(PROTOCOLS, start=tree_ids.root_node):
            ops.append(where.node(0, 0, node, _root_keys(family, proto), hashkey=HashKey(mask, off), link=l1))


def table_ids(tree_ids: TreeIds) -> "_TableIds":
    """The allocator of further table ids for the trees of one qdisc."""
    return _TableIds(tree_ids.lo, tree_ids.hi)


_PORT_LEVELS = frozenset({1, 2})  # the port levels of ``_levels``: a whole host's tree hashes on its address only


def _levels(family: int, direction: str):
    """Hash levels, as (name, word offset, mask) in radix order."""
    addr = {(4, "dest"): 16, (4, "source"): 12, (6, "dest"): 36, (6, "source"): 20}[family, direction]
    ports = 20 if family == 4 else 40
    hi, lo = (0x0000FF00, 0x000000FF) if direction == "dest" else (0xFF000000, 0x00FF0000)
    return [("host3", addr, 0x000000FF), ("port_hi", ports, hi), ("port_lo", ports, lo),
            ("host2", addr, 0x0000FF00), ("host1", addr, 0x00FF0000), ("host0", addr, 0xFF000000)]


def _host_keys(family: int, direction: str, host) -> tuple[Key, ...]:
    """Exact match on the whole address (it precedes the ports in the header)."""
    packed = host.packed
    base = {(4, "dest"): 16, (4, "source"): 12, (6, "dest"): 24, (6, "source"): 8}[family, direction]
    return tuple(Key(int.from_bytes(packed[i:i + 4], "big"), 0xFFFFFFFF, base + i) for i in range(0, len(packed), 4))


def _far_keys(family: int, direction: str, server, block) -> tuple[Key, ...]:
    """A match on the far side: its address prefix (the source address of a packet towards
    the host, the destination of one from it; the words the prefix does not reach left out)
    and its port block (value, mask; the other half of the ports' word)."""
    keys = ()
    if server is not None:
        packed, mask = server.network_address.packed, server.netmask.packed
        base = {(4, "dest"): 12, (4, "source"): 16, (6, "dest"): 8, (6, "source"): 24}[family, direction]
        keys = tuple(Key(int.from_bytes(packed[i:i + 4], "big"), int.from_bytes(mask[i:i + 4], "big"), base + i)
                     for i in range(0, len(packed), 4) if int.from_bytes(mask[i:i + 4], "big"))
    if block is not None:
        value, mask = block
        off = 20 if family == 4 else 40
        keys += (Key(value << 16, mask << 16, off) if direction == "dest" else Key(value, mask, off),)
    return keys


def _port_key(family: int, direction: str, port: int) -> Key:
    off = 20 if family == 4 else 40
    return Key(port, 0x0000FFFF, off) if direction == "dest" else Key(port << 16, 0xFFFF0000, off)


def _root_keys(family: int, proto: int) -> tuple[Key, ...]:
    if family == 4:  # 20-byte header, first fragment, protocol
        return (Key(0x05000000, 0x0F000000, 0), Key(0, 0x00001FFF, 4), Key(proto << 16, 0x00FF0000, 8))
    return (Key(proto << 8, 0x0000FF00, 4),)  # next header (no extension headers)


class _TableIds:
    def __init__(self, lo: int, hi: int):
        self.lo, self.hi, self.next = lo, hi, lo

    def take(self, n_flows: int) -> int:
        if self.next > self.hi:
            raise FieldError("--hosts/--ports", f"{n_flows} flows",
                             f"need more than {self.hi - self.lo + 1} u32 hash tables; "
                             "use fewer hosts sharing a last octet or narrower port ranges")
        ht, self.next = self.next, self.next + 1
        return ht


@dataclass(frozen=True)
class _FilterList:
    """One u32 filter list: a device, a parent qdisc, a priority (one per address family)."""

    dev: str
    parent: int
    prio: int
    protocol: str

    def table(self, ht: int) -> U32Table:
        return U32Table(self.dev, self.parent, self.prio, self.protocol, ht, 256)

    def node(self, ht: int, bucket: int, node: int, keys, **kw) -> U32Filter:
        return U32Filter(self.dev, self.parent, self.prio, self.protocol, ht, bucket, node, keys, **kw)


@dataclass
class _Placer:
    """Places flows into 256-way tables until every bucket is small."""

    where: _FilterList
    direction: str
    levels: list
    terminal: Callable[[int], Terminal]  # flow index -> what its exact filter carries
    link_classid: bool  # links remember their class (shape mode) for statistics
    ids: _TableIds
    ops: list
    links: list

    def split(self, ht, entries, level, used):
        """Put ``entries`` (hashed into table ``ht`` on ``level``) into its buckets."""
        buckets = defaultdict(list)
        for e in entries:
            buckets[e[3][level]].append(e)  # noqa: PERF401
        for b in sorted(buckets):
            group = buckets[b]
            nxt = _choose_level(group, self.levels, used) if len(group) > LEAF_MAX else None
            if nxt is None:
                self.leaves(ht, b, group)
                continue
            child = self.ids.take(len(entries))
            self.ops.append(self.where.table(child))
            self.split(child, group, nxt, used | {nxt})
            _, off, mask = self.levels[nxt]
            self.ops.append(self.where.node(ht, b, 1, (Key(0, 0, 0),), hashkey=HashKey(mask, off), link=child))

    def leaves(self, ht, bucket, group: Sequence):
        if len(group) > 0xFFF:
            raise FieldError("--hosts/--ports", f"{len(group)} flows", "share one u32 bucket (at most 4095)")
        w = self.where
        for node, (i, host, port, _, keys) in enumerate(group, start=1):
            t = self.terminal(i)
            self.ops.append(w.node(ht, bucket, node, keys, classid=t.classid, police=t.police))
            if t.reports:
                self.links.append(Flow(self.direction, host, None if t.per_host else port, w.dev, w.prio,
                                       (ht << 20) | (bucket << 12) | node, t.classid if self.link_classid else None,
                                       t.cohort))


def _choose_level(group, levels, used):
    """The unused level that leaves the smallest largest bucket (None if none splits)."""
    best = None
    values = list(map(itemgetter(3), group))
    for d in range(len(levels)):
        if d in used:
            continue
        counts = Counter(map(itemgetter(d), values))
        if len(counts) > 1:
            score = (max(counts.values()), d)
            if best is None or score < best:
                best = score
    return best[1] if best else None
