"""Compile a request into a plan: pure, no I/O.

Layout on each limited device (``52:`` is ratelimit's mark on a root qdisc)::

    52: htb default 0            unclassified packets leave untouched
     '- 52:1 htb (bandwidth)     police mode: the class policed packets join,
          '- 53: netem            with a netem leaf when delay/loss is asked for
          '- 52:100.. htb rate R  shape mode: one class per (host, port),
               '- 100:.. netem    each with its own netem leaf if asked for

Classification is a u32 hash tree, one per address family (prio 1 IPv4,
prio 2 IPv6).  The root filters match TCP and UDP (IPv4: no IP options, first
fragment) and hash on the last octet of the host address into table 1: (or 2:).
A bucket holding more than ``LEAF_MAX`` flows links to a further 256-way table
keyed on the next level -- port high byte, port low byte, then the host's other
octets -- until every bucket holds at most ``LEAF_MAX`` exact (host, port)
filters.  Packets therefore find their filter in at most five table look-ups,
whatever the number of flows.  Ports are read at the fixed offset of a
20-byte IPv4 (40-byte IPv6) header, which is why the root filter requires it.

``source`` traffic arrives on the interface: policing alone happens on the
ingress qdisc; shaping or netem needs an IFB device the ingress redirects to.
"""

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from collections import Counter, defaultdict

from .errors import FieldError, UsageError
from .model import DIRECTIONS, MODES, LinkParams, Request
from .plan import (INGRESS_HANDLE, AddIfb, Flow, HashKey, HtbClass, HtbQdisc, IngressQdisc, Key, NetemQdisc,
                   Plan, Police, U32Filter, U32Table)

ROOT = 0x520000  # 52:
POOL_CLASS = 0x520001  # 52:1
POOL_NETEM = 0x530000  # 53:
FLOW_MINOR_BASE = 0x100
MAX_SHAPE_FLOWS = 0xFFFE - FLOW_MINOR_BASE + 1  # class minors and leaf majors 0x100..0xfffe
LEAF_MAX = 16  # most exact filters left in one bucket
FIRST_TABLE, LAST_TABLE = 0x003, 0x7FF  # ids we pick; the kernel hands out 0x800 and up
MAX_FLOWS = 1 << 20
PROTOCOLS = (6, 17)  # TCP, UDP

FAMILY = {  # prio, tc protocol, first table id
    4: (1, "ip", 0x001),
    6: (2, "ipv6", 0x002),
}


def ifb_name(interface: str) -> str:
    """The IFB device for ``interface``'s ingress, within IFNAMSIZ (15)."""
    if len(interface) <= 12:
        return f"rl-{interface}"
    return f"rl-{interface[:4]}{zlib.crc32(interface.encode()) & 0xFFFFFFFF:08x}"


def compile_plan(req: Request) -> Plan:
    """Turn a request into the ordered operations that build it."""
    _validate(req)
    ops: list = []
    flows: list[Flow] = []
    if req.direction in ("dest", "both"):
        _egress(req, req.interface, "dest", req.down, ops, flows)
    if req.direction in ("source", "both"):
        if req.mode == "police" and not req.up.needs_netem():
            ops.append(IngressQdisc(req.interface))
            _tree(req, req.interface, INGRESS_HANDLE, "source", req.up, None, ops, flows)
        else:
            ifb = ifb_name(req.interface)
            ops.insert(0, AddIfb(ifb))
            ops.append(IngressQdisc(req.interface))
            ops.append(U32Filter(req.interface, INGRESS_HANDLE, 1, "all", 0, 0, 1,
                                 (Key(0, 0, 0),), redirect=ifb))
            _egress(req, ifb, "source", req.up, ops, flows)
    return Plan(req, tuple(ops), tuple(flows))


# ---------------------------------------------------------------- validation


def _validate(req: Request) -> None:
    if req.mode not in MODES:
        raise FieldError("--mode", req.mode, f"is not a mode ({', '.join(MODES)})")
    if req.direction not in DIRECTIONS:
        raise FieldError("--direction", req.direction, f"is not a direction ({', '.join(DIRECTIONS)})")
    name = req.interface
    if not name or len(name) > 15 or any(c in name for c in "/ \t\n:") or name in (".", ".."):
        raise FieldError("--interface", f"'{name}'", "is not an interface name (1-15 characters, no '/', ':' or spaces)")
    if not req.hosts:
        raise UsageError("--hosts: none given (comma-separated names or addresses)")
    if not req.ports:
        raise UsageError("--ports: none given (ranges like 1024-2047,3000)")
    for lo, hi in req.ports:
        for p in (lo, hi):
            if not 1 <= p <= 65535:
                raise FieldError("--ports", p, "is not a port (1-65535)")
        if lo > hi:
            raise FieldError("--ports", f"{lo}-{hi}", "is a reversed range (low-high)")
    for field, value, lo, hi in (("--mtu", req.mtu_bytes, 68, 65535), ("--mpu", req.mpu_bytes, 0, 65535),
                                 ("--avpkt", req.avpkt_bytes, 1, 65535), ("--burst", req.burst_pkts, 1, 100000)):
        if not lo <= value <= hi:
            raise FieldError(field, value, f"is out of range ({lo}-{hi})")
    n = req.flow_count()
    if n > MAX_FLOWS:
        raise FieldError("--hosts/--ports", f"{n} flows", f"are too many (at most {MAX_FLOWS})")
    if req.mode == "shape" and n > MAX_SHAPE_FLOWS:
        raise FieldError("--hosts/--ports", f"{n} flows", f"are too many for shape mode (at most {MAX_SHAPE_FLOWS}; police mode takes more)")
    for side, params in (("down", req.down), ("up", req.up)):
        if params.reorder_pct and not params.delay_us:
            raise UsageError(f"--reorder: {params.reorder_pct:g}% needs a delay ({side}link delay is 0)")


# ---------------------------------------------------------------- stages


def _pool_limit(req: Request, params: LinkParams) -> int:
    """netem queue for all policed flows: twice what is in flight, at least 1000."""
    if params.queue_pkts:
        return params.queue_pkts
    rate = min(req.bandwidth_bps, (params.rate_bps or req.bandwidth_bps) * req.flow_count())
    in_flight = rate * (params.delay_us + params.jitter_us) / 1e6 / 8 / req.avpkt_bytes
    return max(1000, int(2 * in_flight) + 1)


def _egress(req, dev, direction, params, ops, flows):
    """An HTB root on ``dev`` with the pool class, the tree, and per-flow classes."""
    ops.append(HtbQdisc(dev, ROOT))
    bw = req.bandwidth_bps
    pool_burst = max(req.mtu_bytes, bw // 800)  # 10 ms at the device's bandwidth
    ops.append(HtbClass(dev, ROOT, POOL_CLASS, bw, bw, pool_burst, req.mtu_bytes, req.mpu_bytes))
    if req.mode == "police":
        if params.needs_netem():
            ops.append(NetemQdisc(dev, POOL_CLASS, POOL_NETEM, params, _pool_limit(req, params)))
        _tree(req, dev, ROOT, direction, params, None, ops, flows)
        return
    rate = params.rate_bps or bw
    leaf_limit = params.queue_pkts or 1000
    classes = []
    for i in range(req.flow_count()):
        minor = FLOW_MINOR_BASE + i
        classes.append(HtbClass(dev, POOL_CLASS, ROOT | minor, rate, rate, req.burst_bytes(rate),
                                req.mtu_bytes, req.mpu_bytes))
        if params.needs_netem():
            classes.append(NetemQdisc(dev, ROOT | minor, minor << 16, params, leaf_limit))
    ops += classes
    _tree(req, dev, ROOT, direction, params, lambda i: ROOT | (FLOW_MINOR_BASE + i), ops, flows)


# ---------------------------------------------------------------- the u32 tree


def _levels(family: int, direction: str):
    """Hash levels after the first, as (name, word offset, mask) in radix order."""
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


def _port_key(family: int, direction: str, port: int) -> Key:
    off = 20 if family == 4 else 40
    return Key(port, 0x0000FFFF, off) if direction == "dest" else Key(port << 16, 0xFFFF0000, off)


def _root_keys(family: int, proto: int) -> tuple[Key, ...]:
    if family == 4:  # 20-byte header, first fragment, protocol
        return (Key(0x05000000, 0x0F000000, 0), Key(0, 0x00001FFF, 4), Key(proto << 16, 0x00FF0000, 8))
    return (Key(proto << 8, 0x0000FF00, 4),)  # next header (no extension headers)


class _TableIds:
    def __init__(self):
        self.next = FIRST_TABLE

    def take(self, n_flows: int) -> int:
        if self.next > LAST_TABLE:
            raise FieldError("--hosts/--ports", f"{n_flows} flows",
                             f"need more than {LAST_TABLE - FIRST_TABLE + 1} u32 hash tables; "
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


def _tree(req, dev, parent, direction, params, classid_of, ops, flows):
    """The u32 hash tree for every selected (host, port) on ``dev``."""
    if classid_of is None:  # police mode: everyone joins the pool class
        pool = POOL_CLASS if parent == ROOT else INGRESS_HANDLE | 1
        classid_of = lambda i: pool  # noqa: E731
    police = None
    if req.mode == "police" and params.rate_bps:
        police = Police(params.rate_bps, req.burst_bytes(params.rate_bps), req.mtu_bytes, req.mpu_bytes)
    port_list = [p for lo, hi in req.ports for p in range(lo, hi + 1)]
    ids = _TableIds()
    index = 0
    for family in (4, 6):
        hosts = sorted(h for h in req.hosts if h.version == family)
        if not hosts:
            continue
        prio, proto_name, l1 = FAMILY[family]
        where = _FilterList(dev, parent, prio, proto_name)
        levels = _levels(family, direction)
        port_keys = [_port_key(family, direction, p) for p in port_list]
        port_vals = [(p >> 8, p & 0xFF) for p in port_list]
        entries = []  # (flow index, host, port, bucket value per level, exact keys)
        for host in hosts:
            host_keys = _host_keys(family, direction, host)
            b0, b1, b2, b3 = (int(host) & 0xFFFFFFFF).to_bytes(4, "big")
            for port, port_key, (hi, lo) in zip(port_list, port_keys, port_vals):
                entries.append((index, host, port, (b3, hi, lo, b2, b1, b0), host_keys + (port_key,)))
                index += 1
        first = _choose_level(entries, levels, set()) or 0
        ops.append(where.table(l1))
        place = _Placer(where, direction, levels, classid_of, police, req.mode == "shape", ids, ops, flows)
        place.split(l1, entries, first, {first})
        _, off, mask = levels[first]
        for node, proto in enumerate(PROTOCOLS, start=1):
            ops.append(where.node(0, 0, node, _root_keys(family, proto), hashkey=HashKey(mask, off), link=l1))


@dataclass
class _Placer:
    """Places flows into 256-way tables until every bucket is small."""

    where: _FilterList
    direction: str
    levels: list
    classid_of: Callable[[int], int]  # flow index -> the class its packets join
    police: Police | None
    shape: bool  # flows remember their class (shape mode) for statistics
    ids: _TableIds
    ops: list
    flows: list

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

    def leaves(self, ht, bucket, group):
        if len(group) > 0xFFF:
            raise FieldError("--hosts/--ports", f"{len(group)} flows", "share one u32 bucket (at most 4095)")
        w = self.where
        for node, (i, host, port, _, keys) in enumerate(group, start=1):
            classid = self.classid_of(i)
            self.ops.append(w.node(ht, bucket, node, keys, classid=classid, police=self.police))
            self.flows.append(Flow(self.direction, host, port, w.dev, w.prio, (ht << 20) | (bucket << 12) | node,
                                   classid if self.shape else None))


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
