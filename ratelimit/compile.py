"""Compile a request into a plan: pure, no I/O.

Layout on each limited device (``52:`` is ratelimit's mark on a root qdisc)::

    52: htb default 0 [stab]     unclassified packets leave untouched; the size
     |                           table makes every count a link-layer frame
     '- 52:1 htb (bandwidth)     the device's bandwidth, shared by every link
          '- 53: netem            police mode: delay/loss for all links, in order
          '- 52:10.. htb          shape mode: a group of up to 256 links, each
               '- fffe:.. htb      group its own HTB qdisc (adding a class costs
                  '- fffe:1 htb    the kernel a walk over its qdisc's classes)
                    '- fffe:100..  a class per link -- (host, port), or the host
                         '- 100:.. with its queue: a netem stage (delay, jitter,
                                  loss; it also serializes at the link's rate) or,
                                  without impairments, a fifo

The handles under the pool class are those of generation 0; a plan in generation 1
(``Request.generation``: a re-apply built beside the installed plan, ``diff``) puts its
groups at 52:8010.., 7fff: down and 8000: up (``GENERATIONS``).

The u32 tree (``u32tree``) classifies: policers ride on its exact filters in
police mode; in shape mode the root's tree names the link's group and each
group's own tree (on its HTB qdisc) the link's class.  ``dest`` is the
interface's egress.  ``source`` arrives on the interface: v0.3 polices it on the
ingress qdisc, which only works for Ethernet framing (ingress sees no size
table); anything else is redirected to an IFB device carrying the same layout.
"""

import functools
import zlib
from dataclasses import dataclass, replace

from .errors import FieldError, UsageError
from .model import DIRECTIONS, GRANULARITIES, MODES, LinkParams, Request, min_police_burst
from .plan import INGRESS_HANDLE, SHARED_POLICE_INDEX_BASE, AddIfb, FifoQdisc, Flow, HtbClass, HtbQdisc, IngressQdisc, NetemQdisc, Plan, Stab
from .filters import Key, Police, U32Filter
from .linklayer import ETHERNET_HEADER_BYTES
from .names import check_target
from .u32tree import FIRST, SECOND, Flows, Terminal, TreeIds, build

ROOT = 0x520000  # 52:
POOL_CLASS = 0x520001  # 52:1
POOL_NETEM = 0x530000  # 53:
GROUP_LINKS = 256  # links per group qdisc (docs/benchmarks.md, "Setup": the layout's curve)
LINK_MINOR_BASE = 0x100  # the group's links are (fffe - g):100..


@dataclass(frozen=True)
class Handles:
    """The handles of one generation (``Request.generation``): what a plan builds under
    the device's root qdisc and pool class, apart from them.  Generation 1 lives between
    the ends generation 0 grows from, so the two can stand side by side while a re-apply
    switches from one to the other (``diff.make_before_break``) as long as together they
    fit in the 16-bit majors; generation 0 alone takes the whole range."""

    group_minor: int  # group g's class is 52:(group_minor + g)
    group_top: int  # group g's qdisc is (group_top - g):, counting down, with root class (group_top - g):1
    leaf_base: int  # link i's queue is (leaf_base + i):, counting up
    leaf_top: int  # the highest major its queues may take
    tree: TreeIds  # the tables and root filters of the trees on the root (and ingress) qdisc
    police_index: int  # added to the indexes of shared policers


GENERATIONS = (Handles(0x10, 0xFFFE, 0x100, 0xFFFE, FIRST, 0),
               Handles(0x8010, 0x7FFF, 0x8000, 0xFFFE, SECOND, 0x80000000))


def max_shape_links(h: Handles) -> int:
    """The most links a generation holds: its queues counting up from ``leaf_base`` and its
    groups counting down from ``group_top`` must not meet."""
    if h.leaf_base > h.group_top:
        return h.leaf_top - h.leaf_base + 1
    return max(n for n in range(h.group_top - h.leaf_base + 1)
               if h.leaf_base + n <= h.group_top - -(-n // GROUP_LINKS))


MAX_SHAPE_LINKS = max_shape_links(GENERATIONS[0])
MAX_FLOWS = 1 << 20
MAX_POLICED_HOSTS = 1 << 17


def ifb_name(interface: str) -> str:
    """The IFB device for ``interface``'s ingress, within IFNAMSIZ (15 bytes)."""
    raw = interface.encode()
    if len(raw) <= 12:
        return f"rl-{interface}"
    head = interface[:4]
    while len(head.encode()) > 4:  # whole characters, at most 4 bytes
        head = head[:-1]
    return f"rl-{head}{zlib.crc32(raw) & 0xFFFFFFFF:08x}"


def ingress_policing(req: Request) -> bool:
    """True when ``source`` traffic is policed on the ingress qdisc (v0.3's way): police
    mode, no netem stage, and Ethernet framing (the ingress hook has no size table)."""
    return req.mode == "police" and not req.up.needs_netem() and req.link.is_ethernet


def compile_plan(req: Request, *, group_links: int = GROUP_LINKS) -> Plan:
    """Turn a request into the ordered operations that build it (``group_links``: shape
    mode's links per HTB qdisc; the benchmarks set it to compare layouts)."""
    _validate(req)
    ops: list = []
    links: list[Flow] = []
    if req.direction in ("dest", "both"):
        _egress(req, req.interface, "dest", req.down, ops, links, group_links)
    if req.direction in ("source", "both"):
        if ingress_policing(req):
            ops.append(IngressQdisc(req.interface))
            _tree(req, req.interface, INGRESS_HANDLE, "source", req.up, ops, links,
                  overhead_bytes=ETHERNET_HEADER_BYTES)  # count the frame, as egress does
        else:
            ifb = ifb_name(req.interface)
            ops.insert(0, AddIfb(ifb))
            ops.append(IngressQdisc(req.interface))
            ops.append(U32Filter(req.interface, INGRESS_HANDLE, 1, "all", 0, 0, 1,
                                 (Key(0, 0, 0),), redirect=ifb))
            _egress(req, ifb, "source", req.up, ops, links, group_links)
    return Plan(req, tuple(ops), tuple(links))


@functools.lru_cache(maxsize=4)
def compiled(req: Request) -> Plan:
    """``compile_plan(req)``, kept for the last few requests: reading a record or the
    statistics of a watched interface compiles its request once, not at every read
    (compiling 65,536 links takes about a second; requests are frozen, hashable values)."""
    return compile_plan(req)


# ---------------------------------------------------------------- validation


def _validate(req: Request) -> None:
    if req.mode not in MODES:
        raise FieldError("--mode", req.mode, f"is not a mode ({', '.join(MODES)})")
    if req.direction not in DIRECTIONS:
        raise FieldError("--direction", req.direction, f"is not a direction ({', '.join(DIRECTIONS)})")
    if req.per not in GRANULARITIES:
        raise FieldError("--per", req.per, f"is not a link granularity ({', '.join(GRANULARITIES)})")
    check_target(req.interface, req.netns)
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
                                 ("--avpkt", req.avpkt_bytes, 1, 65535)):
        if not lo <= value <= hi:
            raise FieldError(field, value, f"is out of range ({lo}-{hi})")
    n = req.flow_count()
    if n > MAX_FLOWS:
        raise FieldError("--hosts/--ports", f"{n} flows", f"are too many (at most {MAX_FLOWS})")
    if req.generation not in range(len(GENERATIONS)):
        raise FieldError("generation", req.generation, f"is not a generation (0-{len(GENERATIONS) - 1})")
    most = max_shape_links(GENERATIONS[req.generation])
    if req.mode == "shape" and req.link_count() > most:
        raise FieldError("--hosts/--ports", f"{req.link_count()} links",
                         f"are too many for shape mode (at most {most}; police mode takes more)")
    if req.mode == "police" and req.per == "host" and len(req.hosts) > MAX_POLICED_HOSTS:
        raise FieldError("--hosts", f"{len(req.hosts)} hosts", f"are too many for per-host policers (at most {MAX_POLICED_HOSTS})")
    for side, params in (("down", req.down), ("up", req.up)):
        if params.reorder_pct and not params.delay_us:
            raise UsageError(f"--reorder: {params.reorder_pct:g}% needs a delay ({side}link delay is 0)")
        if req.mode == "police" and params.rate_bps:
            rate = _carried(req, params)
            burst, least = req.burst_bytes(params, rate), min_police_burst(rate, req.line_mtu_bytes())
            if burst < least:
                raise FieldError("--burst", f"'{req.burst_of(params).text()}'",
                                 f"is {burst} bytes, too small for a full packet ({req.line_mtu_bytes()} bytes on "
                                 f"this link; at least {least}): the policer would drop every full-size packet")


# ---------------------------------------------------------------- a device


def _stab(req: Request) -> Stab | None:
    return None if req.link.is_ethernet else Stab(req.link.stab_overhead, req.link.cells)


def _carried(req: Request, params: LinkParams) -> int:
    """The rate the link's frames get (its line rate less the line's own coding)."""
    return req.link.carried_bps(params.rate_bps or req.bandwidth_bps)


def _egress(req, dev, direction, params, ops, links, group_links):
    """An HTB root on ``dev`` with the pool class, the tree, and per-link classes."""
    ops.append(HtbQdisc(dev, ROOT, stab=_stab(req)))
    bw = req.bandwidth_bps
    pool_burst = max(req.line_mtu_bytes(), bw // 800)  # 10 ms at the device's bandwidth
    ops.append(HtbClass(dev, ROOT, POOL_CLASS, bw, bw, pool_burst, req.line_mtu_bytes(), req.mpu_bytes))
    if req.mode == "police":
        if params.needs_netem():
            # serializing at the device's bandwidth keeps every flow's packets in order
            ops.append(NetemQdisc(dev, POOL_CLASS, POOL_NETEM, params, _pool_limit(req, params), bw))
        _tree(req, dev, ROOT, direction, params, ops, links)
        return
    rate = _carried(req, params)
    links_n = req.link_count()
    # A link's own rate is a guarantee only while every link fits the bandwidth; beyond
    # that each is guaranteed its share and borrows up to its rate, so the pool class
    # holds them all to --bandwidth.
    guaranteed = min(rate, max(8, bw // links_n))
    # with a netem stage, netem serializes the link exactly; a second shaper at the same
    # rate would only add its timer's lateness, so the class may go up to the bandwidth
    ceil = max(rate, bw) if params.needs_netem() else rate
    burst = req.burst_bytes(params, rate)
    if LINK_MINOR_BASE + group_links - 1 > 0xFFFF:
        raise FieldError("group links", group_links, f"is more than a qdisc's class minors hold "
                                                     f"(at most {0xFFFF - LINK_MINOR_BASE + 1})")
    h = GENERATIONS[req.generation]
    for g, first in enumerate(range(0, links_n, group_links)):
        members = range(first, min(first + group_links, links_n))
        group, qdisc = ROOT | (h.group_minor + g), (h.group_top - g) << 16
        ops.append(HtbClass(dev, POOL_CLASS, group, min(bw, guaranteed * len(members)), bw, pool_burst,
                            req.line_mtu_bytes(), req.mpu_bytes))
        ops.append(HtbQdisc(dev, qdisc, parent=group))
        # the group qdisc's root class lets its links borrow up to their ceilings (the pool
        # above holds the total to --bandwidth)
        ops.append(HtbClass(dev, qdisc, qdisc | 1, bw, bw, pool_burst, req.line_mtu_bytes(), req.mpu_bytes))
        for link in members:
            classid = qdisc | (LINK_MINOR_BASE + link - first)
            ops.append(HtbClass(dev, qdisc | 1, classid, guaranteed, ceil, burst, req.line_mtu_bytes(),
                                req.mpu_bytes))
            ops.append(_leaf(req, params, rate, dev, classid, (h.leaf_base + link) << 16))
        _tree(req, dev, qdisc, direction, params, ops, links, links_in=members)
    _tree(req, dev, ROOT, direction, params, ops, links, group_links=group_links)


def _leaf(req: Request, params: LinkParams, rate: int, dev: str, parent: int, handle: int):
    """A link's queue: a netem stage that also serializes (in order) at the link's rate,
    or a fifo when there is nothing for netem to do."""
    if params.needs_netem():
        in_flight = rate * (params.delay_us + params.jitter_us) / 8e6 / req.line_mtu_bytes()
        return NetemQdisc(dev, parent, handle, params, req.queue_packets(params, rate) + int(in_flight) + 1, rate)
    if params.queue is not None and params.queue.unit == "pkts":
        return FifoQdisc(dev, parent, handle, "pfifo", params.queue.amount)
    return FifoQdisc(dev, parent, handle, "bfifo", req.queue_bytes(params, rate))


def _pool_limit(req: Request, params: LinkParams) -> int:
    """The shared netem stage of police mode holds what all links have in flight (a
    policer has no queue): twice the aggregate rate (capped by the bandwidth) times the
    delay, at least netem's default of 1000 packets."""
    rate = min(req.bandwidth_bps, _carried(req, params) * req.link_count())
    in_flight = rate * (params.delay_us + params.jitter_us) / 1e6 / 8 / req.avpkt_bytes
    return max(1000, int(2 * in_flight) + 1)


def _tree(req, dev, parent, direction, params, ops, links, *, overhead_bytes: int = 0,
          links_in: range | None = None, group_links: int = GROUP_LINKS):
    """The u32 tree on ``dev`` under ``parent`` for every selected (host, port) -- or, in a
    shape-mode group's qdisc, for those of the links ``links_in`` -- and what its filters carry."""
    flows = Flows.of(req.hosts, req.ports)
    n_ports = len(flows.ports)
    per_host = req.per == "host"
    link_of = (lambda i: i // n_ports) if per_host else (lambda i: i)  # noqa: E731
    reported: set[int] = set()

    def first(link: int) -> bool:
        if link in reported:
            return False
        reported.add(link)
        return True

    indices = None
    h = GENERATIONS[req.generation]
    tree_ids = h.tree if links_in is None else FIRST  # a group's tree has its group's qdisc to itself
    if req.mode == "shape" and links_in is None:  # the root's tree: a link's group
        def terminal(i):
            return Terminal(ROOT | (h.group_minor + link_of(i) // group_links), reports=False)
    elif req.mode == "shape":  # a group's tree: the link's class, which reports for it
        scale = n_ports if per_host else 1
        indices = range(links_in.start * scale, links_in.stop * scale)

        def terminal(i):
            link = link_of(i)
            return Terminal(parent | (LINK_MINOR_BASE + link - links_in.start), reports=first(link), per_host=per_host)
    else:
        pool = POOL_CLASS if parent == ROOT else INGRESS_HANDLE | 1
        police = _police(req, params, overhead_bytes)
        tag = (zlib.crc32(req.interface.encode()) & 0xFFF) << 18 | (direction == "source") << 17

        def terminal(i):
            link = link_of(i)
            shared = police and per_host and replace(police, index=h.police_index | SHARED_POLICE_INDEX_BASE | tag | link)
            return Terminal(pool, shared or police, reports=first(link), per_host=per_host)
    build(flows, dev, parent, direction, terminal, ops, links, link_classid=req.mode == "shape", indices=indices,
          tree_ids=tree_ids)


def _police(req: Request, params: LinkParams, overhead_bytes: int) -> Police | None:
    if not params.rate_bps:
        return None
    rate = _carried(req, params)
    return Police(rate, req.burst_bytes(params, rate), req.line_mtu_bytes(), req.mpu_bytes, overhead_bytes)
