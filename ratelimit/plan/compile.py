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

Cohorts (``Request.cohorts``, in order) take whole groups each: a cohort's links are
numbered from the end of the one before, its groups likewise (``Layout``).  The size
table is that of the cohort whose link layer is smallest per packet (a modem's
compressed headers, the *base*); every other cohort's classes add the difference
(``HtbClass.overhead_bytes``, and ATM cells), its netem stage counts it in its rate, and
its byte fifo's limit is scaled to the base's lengths.  A whole host (a cohort without
ports) is one filter on its address in trees of their own (``u32tree``, prio 3 and 4).

The handles under the pool class are those of generation 0; a plan in generation 1
(``Request.generation``: a re-apply built beside the installed plan, ``diff``) puts its
groups at 52:8010.. and fdec: down, its queues 8000: up (``layout.handles``), and its root trees in
the other tables.  Those are slots: each becomes a qdisc major through ``layout.major``,
which puts every group's qdisc in one bucket of the device's qdisc hash (fffe:'s) and the
queues in the others.  A re-apply that changes some cohorts keeps the others' groups where
they stand and puts the changed ones in free handles (``Request.places``,
``layout.replaced``).

With several tx queues (``Request.queues``, shape mode) the root is ``mq`` instead, with one
tree per queue: the HTB qdisc ``(54 + q):`` [stab] under ``52:(q + 1)``, its pool class
``(54 + q):1`` holding its share of the bandwidth (in proportion to the links it holds), and
under it the groups ``layout.queue_of`` places there (``(54 + q):10..``; their qdiscs, links
and queues as above).  No u32 tree at the root: the eBPF program of ``queuepin`` names each
packet's queue and group.

The u32 tree (``u32tree``) classifies: policers ride on its exact filters in
police mode; in shape mode the root's tree names the link's group and each
group's own tree (on its HTB qdisc) the link's class.  ``dest`` is the
interface's egress.  ``source`` arrives on the interface: v0.3 polices it on the
ingress qdisc, which only works for Ethernet framing (ingress sees no size
table); anything else is redirected to an IFB device carrying the same layout.
"""

import functools
import math
import zlib
from dataclasses import dataclass, replace

from ..spec.linklayer import ATM_CELL_BYTES, ATM_CELL_PAYLOAD_BYTES, ETHERNET_HEADER_BYTES
from ..spec.model import Burst, Cohort, LinkParams, Request
from . import gate
from .filters import Key, Police, U32Filter
from .layout import (GENERATIONS, LINK_MINOR_BASE, POOL_CLASS, POOL_NETEM, ROOT, carried, ingress_policing, Layout,
                     traced_stage, tree_handle)
from .ops import (INGRESS_HANDLE, SHARED_POLICE_INDEX_BASE, TC_H_CLSACT_INGRESS, AddIfb, Flow, HtbQdisc,
                  IngressQdisc, MqQdisc, Plan, Stab)
from .queuepin import pins
from .shaping import FifoQdisc, HtbClass, NetemQdisc
from .u32tree import FIRST, OTHERS_FAMILY, build, catch_all, table_ids, Terminal
from .validate import checked_layout

def ifb_name(interface: str) -> str:
    """The IFB device for ``interface``'s ingress, within IFNAMSIZ (15 bytes)."""
    raw = interface.encode()
    if len(raw) <= 12:
        return f"rl-{interface}"
    head = interface[:4]
    while len(head.encode()) > 4:  # whole characters, at most 4 bytes
        head = head[:-1]
    return f"rl-{head}{zlib.crc32(raw) & 0xFFFFFFFF:08x}"


def compile_plan(req: Request) -> Plan:
    """Turn a request into the ordered operations that build it (shape mode's links per
    HTB qdisc: ``Request.group_links``, which the benchmarks set to compare layouts)."""
    lay = checked_layout(req)
    ops: list = []
    links: list[Flow] = []
    for direction in ("dest", "source"):
        if req.direction not in (direction, "both"):
            continue
        if direction != req.arriving:
            _egress(req, lay, req.interface, direction, ops, links)
        elif ingress_policing(req):
            ops.append(IngressQdisc(req.interface))
            _police_trees(req, lay, req.interface, INGRESS_HANDLE, direction, ops, links,
                          overhead_bytes=ETHERNET_HEADER_BYTES)  # count the frame, as egress does
        else:
            ifb = ifb_name(req.interface)
            ops.insert(0, AddIfb(ifb, req.queues))
            hook = INGRESS_HANDLE
            if req.queues > 1 and req.direction == "both":
                hook = TC_H_CLSACT_INGRESS  # the interface's clsact qdisc (its egress program's) has the hook
            else:
                ops.append(IngressQdisc(req.interface))
            ops.append(U32Filter(req.interface, hook, 1, "all", 0, 0, 1,
                                 (Key(0, 0, 0),), redirect=ifb))
            _egress(req, lay, ifb, direction, ops, links)
    return Plan(req, tuple(ops), tuple(links))


def device_of(req: Request, direction: str) -> str:
    """The device whose root qdisc holds ``direction``'s links in shape mode: the interface
    for what it sends, its IFB device for what arrives on it (``Request.arriving``)."""
    return ifb_name(req.interface) if direction == req.arriving else req.interface


def link_flows(req: Request) -> tuple[Flow, ...]:
    """Shape mode: every link's ``Flow`` (its class, for statistics) from the layout alone, in
    link order per device: what ``compile_plan(req).flows`` holds, without the filters (the
    order differs: that is the trees')."""
    if req.mode != "shape":
        raise ValueError("link_flows: shape mode only (a policed link's counters are its filter's)")
    lay = checked_layout(req)
    first: dict = {}  # link -> its first flow's (host, port)
    for pairs, owner in ((lay.port_flows, lay.port_link), (lay.whole_flows, lay.whole_link)):
        for pair, link in zip(pairs, owner):
            first.setdefault(link, pair)
    out = []
    for direction in ("dest", "source"):
        if req.direction not in (direction, "both"):
            continue
        dev = device_of(req, direction)
        for link in range(lay.links):
            c = lay.spans[lay.link_cohort[link]].cohort
            host, port, _ = first.get(link, (None, None, None))  # the default cohort has no flows
            out.append(Flow(direction, host, None if c.per != "port" else port, dev, 0, 0, lay.link_class(link),
                            c.name))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def compiled(req: Request) -> Plan:
    """``compile_plan(req)``, kept for the last few requests: reading a record or the
    statistics of a watched interface compiles its request once, not at every read
    (compiling 65,536 links takes about a second; requests are frozen, hashable values)."""
    return compile_plan(req)


# ---------------------------------------------------------------- a device


def _stab(base: Cohort) -> Stab | None:
    return None if base.link.is_ethernet else Stab(base.link.stab_overhead, base.link.cells)


def _egress(req, lay, dev, direction, ops, links):
    """An HTB root on ``dev`` with the pool class, the tree, and per-link classes (several
    queues: an mq root with an HTB tree and pool class per queue, and the queue pins)."""
    bw = req.bandwidth_bps
    base_mtu = req.line_mtu_bytes(lay.base)
    pool_burst = max(base_mtu, bw // 800)  # 10 ms at the device's bandwidth
    if req.queues > 1:
        ops.append(MqQdisc(dev, ROOT))
        for q, held in enumerate(lay.queue_links()):
            tree = tree_handle(q)
            ops.append(HtbQdisc(dev, tree, stab=_stab(lay.base), parent=ROOT | (q + 1)))
            # the tree's share of the bandwidth, no tree borrowing another's; a tree without
            # links has a pool all the same (HTB's least rate), for a re-apply to place some there
            share = max(8, bw * held // lay.links)
            ops.append(HtbClass(dev, tree, tree | 1, share, share, pool_burst, base_mtu, lay.base.mpu_bytes))
    else:
        ops.append(HtbQdisc(dev, ROOT, stab=_stab(lay.base)))
        ops.append(HtbClass(dev, ROOT, POOL_CLASS, bw, bw, pool_burst, base_mtu, lay.base.mpu_bytes))
    if req.mode == "police":
        params = req.cohorts[0].side(direction)
        if params.needs_netem():  # one stage for every cohort (``_validate``: they share it)
            # serializing at the device's bandwidth keeps every flow's packets in order
            ops.append(NetemQdisc(dev, POOL_CLASS, POOL_NETEM, params, _pool_limit(req, lay, direction), bw))
        _police_trees(req, lay, dev, ROOT, direction, ops, links)
        return
    h = GENERATIONS[req.generation]
    ids = table_ids(h.tree)
    for span in lay.spans:
        _cohort_groups(req, lay, span, dev, direction, ops, links, pool_burst)
    if req.queues > 1:
        ops += pins(lay, dev, direction)
        return
    # the root's trees: a flow's group
    for pairs, owner, whole in ((lay.port_flows, lay.port_link, False), (lay.whole_flows, lay.whole_link, True)):
        def terminal(i, owner=owner):
            return Terminal(lay.group_class(owner[i]), reports=False)
        build(pairs, dev, ROOT, direction, terminal, ops, links, link_classid=True, tree_ids=h.tree, ids=ids,
              whole_hosts=whole)
    for span in lay.spans:
        if span.cohort.others:  # what no tree took: the default cohort's group
            ops += catch_all(dev, ROOT, lay.group_class(span.first_link), h.tree.root_node)


def _cohort_groups(req, lay, span, dev, direction, ops, links, pool_burst):
    """A cohort's groups: each its class under the pool, its HTB qdisc with a root class,
    a class and queue per link, and the tree that finds a flow's link class."""
    c, bw, at = span.cohort, req.bandwidth_bps, span.place
    params = c.side(direction)
    traced = gate.traced(c, direction)
    rate = carried(req, c, params) if traced is None else gate.first_rate_bps(c, traced)
    n = c.link_count()
    guaranteed, ceil, burst = link_rates(req, lay, c, params, rate, traced=traced is not None)
    staged = traced is not None and traced_stage(c, direction)
    mtu, mpu = req.line_mtu_bytes(c), c.mpu_bytes
    over, atm = lay.overhead(c)
    cell_bps = None if c.cell is None else c.cell.side_bps(direction)
    for g, first in enumerate(range(0, n, lay.group_links)):
        members = range(first, min(first + lay.group_links, n))
        group, qdisc = lay.group_class_of(span, g), lay.group_qdisc(span, g)
        pool = group & 0xFFFF0000 | 1  # its tree's pool class (52:1 with one queue)
        if cell_bps:  # the cell: its links' one group, held to its capacity (docs/design.md, "Cells")
            ops.append(HtbClass(dev, pool, group, cell_bps, cell_bps, max(mtu, cell_bps // 800), mtu, mpu, over, atm))
        else:
            ops.append(HtbClass(dev, pool, group, min(bw, guaranteed * len(members)), bw, pool_burst, mtu, mpu,
                                over, atm))
        ops.append(HtbQdisc(dev, qdisc, parent=group))
        # the group qdisc's root class lets its links borrow up to their ceilings (the pool
        # above holds the total to --bandwidth)
        ops.append(HtbClass(dev, qdisc, qdisc | 1, bw, bw, pool_burst, mtu, mpu, over, atm))
        for link in members:
            classid = qdisc | (LINK_MINOR_BASE + link - first)
            ops.append(HtbClass(dev, qdisc | 1, classid, guaranteed, ceil, burst, mtu, mpu, over, atm))
            leaf = _leaf if traced is None else _gate
            ops.append(leaf(req, lay, c, params, rate, dev, classid, lay.queue_qdisc(at.leaf_base + link)))
            if staged:
                ops.append(_stage(req, lay, c, params, rate, dev, lay.queue_qdisc(at.leaf_base + link),
                                  lay.queue_qdisc(at.leaf_base + n + link), traced))
        # the group's own trees: a flow's link class, which reports for it
        ports, wholes = lay.group_flows(span.first_link + first, span.first_link + members.stop)
        ids = table_ids(FIRST)  # a group's trees have its qdisc to themselves
        reported: set[int] = set()
        for pairs, owner, whole, indices in ((lay.port_flows, lay.port_link, False, ports),
                                             (lay.whole_flows, lay.whole_link, True, wholes)):
            def terminal(i, owner=owner):
                link = owner[i]
                first_seen = link not in reported
                reported.add(link)
                return Terminal(qdisc | (LINK_MINOR_BASE + link - span.first_link - first), reports=first_seen,
                                per_host=c.per != "port", cohort=c.name)
            if len(indices):
                build(pairs, dev, qdisc, direction, terminal, ops, links, link_classid=True, indices=indices,
                      ids=ids, whole_hosts=whole)
        if c.others:  # its one link takes whatever reaches its group
            link_class = qdisc | LINK_MINOR_BASE
            ops += catch_all(dev, qdisc, link_class, 1)
            links.append(Flow(direction, None, None, dev, OTHERS_FAMILY[4][0], 0, link_class, c.name))


def link_rates(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int,
               traced: bool = False) -> tuple[int, int, int]:
    """A link class's (rate, ceil, burst) for a link at ``rate`` (a traced link's driver
    sets them step by step, ``gate``; its class shapes, whatever stage it has)."""
    return link_rates_of(req, lay, c, params, traced)(rate)


def link_rates_of(req: Request, lay: Layout, c: Cohort, params: LinkParams, traced: bool = False) -> "LinkRates":
    """``link_rates`` for one cohort's side, as a function of the rate (a trace driver asks
    for thousands a step)."""
    # A link's own rate is a guarantee only while every link fits the bandwidth; beyond
    # that each is guaranteed its share and borrows up to its rate, so the pool class
    # holds them all to --bandwidth.
    share = max(8, req.bandwidth_bps // lay.links)
    # with a netem stage, netem serializes the link exactly; a second shaper at the same
    # rate would only add its timer's lateness, so the class may go up to the bandwidth
    over = req.bandwidth_bps if params.needs_netem() and not traced else 0
    return LinkRates(share, over, req.burst_of(params, c), req.mtu_bytes)


@dataclass(frozen=True)
class LinkRates:
    """A link class's (rate, ceil, burst) as a function of the link's rate: guaranteed up
    to ``share_bps``, its ceiling at least ``over_bps``, its burst ``burst`` at the rate.

    >>> LinkRates(1_000_000, 0, Burst(1000, "us"), 1514)(2_000_000)
    (1000000, 2000000, 250)
    """

    share_bps: int
    over_bps: int
    burst: Burst
    mtu_bytes: int

    def __call__(self, rate: int) -> tuple[int, int, int]:
        return min(rate, self.share_bps), max(rate, self.over_bps), self.burst.bytes_at(rate, self.mtu_bytes)


def _leaf(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int, dev: str, parent: int, handle: int):
    """A link's queue: a netem stage that also serializes (in order) at the link's rate,
    or a fifo when there is nothing for netem to do.  Both see a packet's length as the
    device's size table gives it: netem's rate adds the cohort's own overhead (signed,
    with ATM cells), a byte fifo's limit is scaled from the cohort's frames to the
    device's (exact for full-size packets)."""
    if params.needs_netem():
        in_flight = rate * (params.delay_us + params.jitter_us) / 8e6 / req.line_mtu_bytes(c)
        over, atm = lay.overhead(c)
        cells = (ATM_CELL_PAYLOAD_BYTES, ATM_CELL_BYTES - ATM_CELL_PAYLOAD_BYTES) if atm else (0, 0)
        return NetemQdisc(dev, parent, handle, params, req.queue_packets(params, rate, c) + int(in_flight) + 1, rate,
                          over, *cells)
    if params.queue is not None and params.queue.unit == "pkts":
        return FifoQdisc(dev, parent, handle, "pfifo", params.queue.amount)
    return FifoQdisc(dev, parent, handle, "bfifo", queue_limit_bytes(req, lay, c, params, rate))


def _gate(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int, dev: str, parent: int, handle: int):
    """A traced link's queue: a token bucket, wide open, as its gate (``gate``), holding the
    queue a byte fifo would."""
    return gate.opened(dev, parent, handle, gate.burst_bytes(req, lay), queue_limit_bytes(req, lay, c, params, rate))


def _stage(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int, dev: str, gate_handle: int,
           handle: int, src) -> NetemQdisc:
    """A traced link's delay stage: netem as its gate's child (``gate_handle:1``), delaying
    and losing as the link's own numbers say (a schedule's steps change them in place), at
    no rate of the link's own: the class above shapes, the gate holds, and netem serializes
    at the device's bandwidth only so that jitter keeps the link's packets in order.  Its
    limit is the link's queue plus what is in flight at the trace's mean over the longest
    delay (the link's own, or a schedule step's)."""
    delay_us = max(params.delay_us, src.most_delay_us)
    in_flight = rate * (delay_us + params.jitter_us) / 8e6 / req.line_mtu_bytes(c)
    return NetemQdisc(dev, gate_handle | 1, handle, params, req.queue_packets(params, rate, c) + int(in_flight) + 1,
                      req.bandwidth_bps)


def queue_limit_bytes(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int) -> int:
    """A link's queue in bytes as the device's size table gives them (a byte fifo's limit)."""
    limit = req.queue_bytes(params, rate, c)
    if lay.overhead(c) != (0, False):
        limit = math.ceil(limit * req.line_mtu_bytes(lay.base) / req.line_mtu_bytes(c))
    return limit


def _pool_limit(req: Request, lay: Layout, direction: str) -> int:
    """The shared netem stage of police mode holds what all links have in flight (a
    policer has no queue): twice the aggregate rate (capped by the bandwidth) times the
    delay, at least netem's default of 1000 packets."""
    params = req.cohorts[0].side(direction)
    rate = min(req.bandwidth_bps, sum(carried(req, c, c.side(direction)) * c.link_count() for c in req.cohorts))
    in_flight = rate * (params.delay_us + params.jitter_us) / 1e6 / 8 / req.avpkt_bytes
    return max(1000, int(2 * in_flight) + 1)


def _police_trees(req, lay, dev, parent, direction, ops, links, *, overhead_bytes: int = 0):
    """The u32 trees on ``dev`` under ``parent`` for every selected flow, each exact filter
    with its link's policer (per host: one shared by the host's filters)."""
    h = GENERATIONS[req.generation]
    pool = POOL_CLASS if parent == ROOT else INGRESS_HANDLE | 1
    tag = (zlib.crc32(req.interface.encode()) & 0xFFF) << 18 | (direction == "source") << 17
    police = [_police(req, c, c.side(direction), overhead_bytes) for c in req.cohorts]
    reported: set[int] = set()
    ids = table_ids(h.tree)
    for pairs, owner, whole in ((lay.port_flows, lay.port_link, False), (lay.whole_flows, lay.whole_link, True)):
        def terminal(i, owner=owner):
            link = owner[i]
            k = lay.link_cohort[link]
            c, p = req.cohorts[k], police[k]
            per_host = c.per != "port"  # one policer for the link's filters
            shared = p and per_host and replace(p, index=h.police_index | SHARED_POLICE_INDEX_BASE | tag | link)
            first_seen = link not in reported
            reported.add(link)
            return Terminal(pool, shared or p, reports=first_seen, per_host=per_host, cohort=c.name)
        build(pairs, dev, parent, direction, terminal, ops, links, link_classid=False, tree_ids=h.tree, ids=ids,
              whole_hosts=whole)


def _police(req: Request, c: Cohort, params: LinkParams, overhead_bytes: int) -> Police | None:
    if not params.rate_bps:
        return None
    rate = carried(req, c, params)
    return Police(rate, req.burst_bytes(params, rate, c), req.line_mtu_bytes(c), c.mpu_bytes, overhead_bytes)
