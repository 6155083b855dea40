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
import zlib
from dataclasses import replace

from ..spec.linklayer import ETHERNET_HEADER_BYTES
from ..spec.model import Cohort, LinkParams, Request
from .filters import Key, Police, U32Filter
from .layout import (GENERATIONS, POOL_CLASS, POOL_NETEM, ROOT, carried, ingress_policing, Layout,
                     tree_handle)
from .ops import (INGRESS_HANDLE, SHARED_POLICE_INDEX_BASE, TC_H_CLSACT_INGRESS, AddIfb, Flow, HtbQdisc,
                  IngressQdisc, MqQdisc, Plan, Stab)
from .groups import cell_group, cohort_groups
from .queuepin import pins
from .shaping import HtbClass, NetemQdisc
from .u32tree import build, catch_all, table_ids, Terminal
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
    for k, span in enumerate(lay.spans):
        if span.group_span == k:  # a cell's one group, with every link of its cohorts
            cell_group(req, lay, k, dev, direction, ops, links, pool_burst)
        elif span.group_span < 0:
            cohort_groups(req, lay, span, dev, direction, ops, links, pool_burst)
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
