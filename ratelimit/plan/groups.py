"""Shape mode's groups, pure: a cohort's groups (each its class under its tree's pool, its
HTB qdisc with a root class, a class and queue per link, and the group's own u32 tree that
finds a flow's link class), and what each link's class and queue are: its rates
(``link_rates``), its queue (a fifo, or a netem stage), a traced link's gate and delay
stage; a cell's one group (``cell_group``), whose class is the cell, with a gate under it
when the cell is traced.  ``compile`` puts the groups under the device's root; the layout
says where.
"""

import math
from dataclasses import dataclass, replace

from ..spec.aqm import managed
from ..spec.linklayer import ATM_CELL_BYTES, ATM_CELL_PAYLOAD_BYTES
from ..spec.model import Burst, Cohort, LinkParams, Request
from . import gate
from .layout import LINK_MINOR_BASE, carried, Layout
from .stages import managed_stage, traced_stage
from .ops import Flow, HtbQdisc
from .shaping import AqmQdisc, FifoQdisc, HtbClass, NetemQdisc
from .u32tree import FIRST, OTHERS_FAMILY, build, catch_all, table_ids, Terminal


def cohort_groups(req, lay, span, dev, direction, ops, links, pool_burst):
    """A cohort's groups: each its class under the pool, its HTB qdisc with a root class,
    a class and queue per link, and the tree that finds a flow's link class."""
    c, bw = span.cohort, req.bandwidth_bps
    n = c.link_count()
    guaranteed = _rates(req, lay, c, direction)[1][0]
    mtu, mpu = req.line_mtu_bytes(c), c.mpu_bytes
    over, atm = lay.overhead(c)
    for g, first in enumerate(range(0, n, lay.group_links)):
        members = range(first, min(first + lay.group_links, n))
        group, qdisc = lay.group_class_of(span, g), lay.group_qdisc(span, g)
        pool = group & 0xFFFF0000 | 1  # its tree's pool class (52:1 with one queue)
        ops.append(HtbClass(dev, pool, group, min(bw, guaranteed * len(members)), bw, pool_burst, mtu, mpu,
                            over, atm))
        _group(req, lay, span, dev, direction, ops, links, pool_burst, qdisc, group,
               range(span.first_link + first, span.first_link + members.stop))


def cell_group(req, lay, k, dev, direction, ops, links, pool_burst):
    """The one group of the cell whose first cohort is span ``k``: its class under the pool
    held to the cell's capacity (docs/design.md, "Cells"; without one that way, as a
    cohort's group), and in its HTB qdisc every link of the cell's cohorts, each its own."""
    span = lay.spans[k]
    c = span.cohort
    mtu, mpu = req.line_mtu_bytes(c), c.mpu_bytes
    over, atm = lay.overhead(c)
    cell_links = lay.cell_links(k)
    group, qdisc = lay.group_class_of(span, 0), lay.group_qdisc(span, 0)
    pool = group & 0xFFFF0000 | 1
    src = c.cell.traced(direction)
    cell_bps = c.cell.side_bps(direction) if src is None else cell_first_rate_bps(c, src)
    parent = group
    if cell_bps:
        ops.append(HtbClass(dev, pool, group, *cell_rates(cell_bps, mtu), mtu, mpu, over, atm))
        if src is not None:  # its gate, between its class and its group's qdisc: shut while it has no capacity
            parent = lay.cell_gate(span)
            ops.append(gate.opened(dev, group, parent, gate.burst_bytes(req, lay), gate.burst_bytes(req, lay)))
            parent |= 1
    else:
        guaranteed = sum(_rates(req, lay, s.cohort, direction)[1][0] * s.cohort.link_count()
                         for s in lay.spans if s.group_span == k)
        ops.append(HtbClass(dev, pool, group, min(req.bandwidth_bps, guaranteed), req.bandwidth_bps, pool_burst,
                            mtu, mpu, over, atm))
    _group(req, lay, span, dev, direction, ops, links, pool_burst, qdisc, parent, cell_links)


def cell_rates(rate_bps: int, mtu_bytes: int) -> tuple[int, int, int]:
    """A cell's class (rate, ceil, burst) at its capacity ``rate_bps``: held to it, with
    10 ms of it as burst (at least a frame).

    >>> cell_rates(20_000_000, 1514)
    (20000000, 20000000, 25000)
    """
    return rate_bps, rate_bps, max(mtu_bytes, rate_bps // 800)


def cell_first_rate_bps(c: Cohort, src) -> int:
    """The class rate a plan builds a traced cell with: its trace's mean, scaled (the
    driver sets it step by step)."""
    return max(8, gate.class_rate_bps(src, src.mean_bps * c.cell.trace.scale, c.link))


def _group(req, lay, span, dev, direction, ops, links, pool_burst, qdisc, parent, members: range):
    """A group's HTB qdisc under ``parent`` (its class, or a traced cell's gate), with a
    root class, a class and queue for each of the links ``members`` (of one cohort, or of a
    cell's cohorts), and its own trees: a flow's link class, which reports for it."""
    bw, c = req.bandwidth_bps, span.cohort
    mtu, mpu = req.line_mtu_bytes(c), c.mpu_bytes
    over, atm = lay.overhead(c)
    ops.append(HtbQdisc(dev, qdisc, parent=parent))
    # the group qdisc's root class lets its links borrow up to their ceilings (the pool
    # above holds the total to --bandwidth)
    ops.append(HtbClass(dev, qdisc, qdisc | 1, bw, bw, pool_burst, mtu, mpu, over, atm))
    kinds: dict = {}  # span index -> what each of its links is (``_kind``), once per cohort
    for link in members:
        k = lay.link_cohort[link]
        kind = kinds.get(k) or kinds.setdefault(k, _kind(req, lay, lay.spans[k], direction))
        _link(req, lay, kind, dev, ops, qdisc | (LINK_MINOR_BASE + link - members.start),
              link - lay.spans[k].first_link)
    ports, wholes = lay.group_flows(members.start, members.stop)
    ids = table_ids(FIRST)  # a group's trees have its qdisc to themselves
    reported: set[int] = set()
    for pairs, owner, whole, indices in ((lay.port_flows, lay.port_link, False, ports),
                                         (lay.whole_flows, lay.whole_link, True, wholes)):
        def terminal(i, owner=owner):
            link = owner[i]
            first_seen = link not in reported
            reported.add(link)
            of = lay.spans[lay.link_cohort[link]].cohort
            return Terminal(qdisc | (LINK_MINOR_BASE + link - members.start), reports=first_seen,
                            per_host=of.per != "port", cohort=of.name)
        if len(indices):
            build(pairs, dev, qdisc, direction, terminal, ops, links, link_classid=True, indices=indices,
                  ids=ids, whole_hosts=whole)
    if c.others:  # its one link takes whatever reaches its group
        link_class = qdisc | LINK_MINOR_BASE
        ops += catch_all(dev, qdisc, link_class, 1)
        links.append(Flow(direction, None, None, dev, OTHERS_FAMILY[4][0], 0, link_class, c.name))


def _rates(req, lay, c, direction):
    """(the side's parameters, its link class's (rate, ceil, burst), its first rate, its
    trace or None) of cohort ``c``'s links on ``direction``."""
    params = c.side(direction)
    traced = gate.traced(c, direction)
    rate = carried(req, c, params) if traced is None else gate.first_rate_bps(c, traced)
    return params, link_rates(req, lay, c, params, rate, traced=traced is not None), rate, traced


def _kind(req, lay, span, direction) -> tuple:
    """What each link of ``span``'s cohort is on ``direction``: (the span, its side's
    parameters, its class's (rate, ceil, burst), its first rate, its trace or None, whether
    it has a traced delay stage, its class's (mtu, mpu, overhead, atm))."""
    c = span.cohort
    params, rates, rate, traced = _rates(req, lay, c, direction)
    staged = traced is not None and traced_stage(c, direction)
    return (span, params, rates, rate, traced, staged, managed_stage(c, direction),
            (req.line_mtu_bytes(c), c.mpu_bytes, *lay.overhead(c)))


def _link(req, lay, kind: tuple, dev, ops, classid: int, i: int):
    """Link ``i`` of a cohort (``kind``): its class ``classid`` and its queue (with a traced
    delay stage, or a managed queue behind netem, two)."""
    span, params, (guaranteed, ceil, burst), rate, traced, staged, aqm_staged, sizes = kind
    c, at = span.cohort, span.place
    ops.append(HtbClass(dev, classid & 0xFFFF0000 | 1, classid, guaranteed, ceil, burst, *sizes))
    leaf = _leaf if traced is None else _gate
    first = lay.queue_qdisc(at.leaf_base + i)
    ops.append(_dark(c, leaf(req, lay, c, params, rate, dev, classid, first)))
    if staged or aqm_staged:
        second = lay.queue_qdisc(at.leaf_base + c.link_count() + i)
        if staged:
            ops.append(_dark(c, _stage(req, lay, c, params, rate, dev, first, second, traced)))
        else:  # netem's child: delayed first, then queued (docs/design.md, "Managed queues")
            ops.append(_managed(req, c, params, rate, dev, first | 1, second))


def _dark(c: Cohort, queue):
    """A link's queue (a fifo, a netem stage, a managed queue or a traced link's gate) as it
    is built: with a limit of 0 when ``c`` is blackholed, so that it drops every packet that
    reaches it (docs/faults.md); a change in place either way."""
    if not c.dark:
        return queue
    field = {FifoQdisc: "limit", NetemQdisc: "limit_pkts", AqmQdisc: "limit_pkts"}.get(type(queue), "limit_bytes")
    return replace(queue, **{field: 0})


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
    # (not in front of a managed queue: the class is the link's bottleneck, where the AQM's
    # queue builds)
    over = req.bandwidth_bps if params.needs_netem() and not traced and managed(params) is None else 0
    # in a cell (a direction it shares), one frame more: a user that turns eligible just after
    # its turn in the cell's round waits at most one round, and keeps what it was owed
    # (docs/design.md, "Cells")
    shared = c.cell is not None and c.cell.side_bps("dest" if params is c.down else "source")
    extra = req.mtu_bytes if shared else 0
    return LinkRates(share, over, req.burst_of(params, c), req.mtu_bytes, extra)


@dataclass(frozen=True)
class LinkRates:
    """A link class's (rate, ceil, burst) as a function of the link's rate: guaranteed up
    to ``share_bps``, its ceiling at least ``over_bps``, its burst ``burst`` at the rate
    and ``extra_bytes``.

    >>> LinkRates(1_000_000, 0, Burst(1000, "us"), 1514)(2_000_000)
    (1000000, 2000000, 250)
    """

    share_bps: int
    over_bps: int
    burst: Burst
    mtu_bytes: int
    extra_bytes: int = 0  # added to the burst (a cell's users: one frame)

    def __call__(self, rate: int) -> tuple[int, int, int]:
        return (min(rate, self.share_bps), max(rate, self.over_bps),
                self.burst.bytes_at(rate, self.mtu_bytes) + self.extra_bytes)


def _leaf(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int, dev: str, parent: int, handle: int):
    """A link's queue: a managed queue (behind a delay, the netem stage in front of it), a
    netem stage that also serializes (in order) at the link's rate, or a fifo when there is
    nothing for netem to do.  Both see a packet's length as the
    device's size table gives it: netem's rate adds the cohort's own overhead (signed,
    with ATM cells), a byte fifo's limit is scaled from the cohort's frames to the
    device's (exact for full-size packets)."""
    if managed(params) is not None:
        return (_delay_stage(req, c, params, dev, parent, handle) if params.needs_netem()
                else _managed(req, c, params, rate, dev, parent, handle))
    if params.needs_netem():
        over, atm = lay.overhead(c)
        cells = (ATM_CELL_PAYLOAD_BYTES, ATM_CELL_BYTES - ATM_CELL_PAYLOAD_BYTES) if atm else (0, 0)
        limit = req.queue_packets(params, rate, c) + _in_flight(req, c, rate, params.delay_us + params.jitter_us)
        return NetemQdisc(dev, parent, handle, params, limit, rate, over, *cells)
    if params.queue is not None and params.queue.unit == "pkts":
        return FifoQdisc(dev, parent, handle, "pfifo", params.queue.amount)
    return FifoQdisc(dev, parent, handle, "bfifo", queue_limit_bytes(req, lay, c, params, rate))


def _delay_stage(req: Request, c: Cohort, params: LinkParams, dev: str, parent: int, handle: int) -> NetemQdisc:
    """The netem stage in front of a link's managed queue: it delays and loses, and holds
    what arrives over its delay at the device's bandwidth; it serializes at that bandwidth
    only so that jitter keeps the link's packets in order (the class shapes)."""
    return NetemQdisc(dev, parent, handle, params,
                      _in_flight(req, c, req.bandwidth_bps, params.delay_us + params.jitter_us), req.bandwidth_bps)


def _managed(req: Request, c: Cohort, params: LinkParams, rate: int, dev: str, parent: int, handle: int) -> AqmQdisc:
    """A link's managed queue, its every parameter given: its limit its own, else the link's
    queue in packets."""
    aqm = managed(params)
    return _dark(c, AqmQdisc(dev, parent, handle, aqm.full(), aqm.limit_pkts or req.queue_packets(params, rate, c)))


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
    return NetemQdisc(dev, gate_handle | 1, handle, params,
                      req.queue_packets(params, rate, c) + _in_flight(req, c, rate, delay_us + params.jitter_us),
                      req.bandwidth_bps)


def _in_flight(req: Request, c: Cohort, rate_bps: int, delay_us: int) -> int:
    """What a netem stage holds beside its queue: the full frames in flight over ``delay_us``
    at ``rate_bps``, and one more."""
    return int(rate_bps * delay_us / 8e6 / req.line_mtu_bytes(c)) + 1


def queue_limit_bytes(req: Request, lay: Layout, c: Cohort, params: LinkParams, rate: int) -> int:
    """A link's queue in bytes as the device's size table gives them (a byte fifo's limit)."""
    limit = req.queue_bytes(params, rate, c)
    if lay.overhead(c) != (0, False):
        limit = math.ceil(limit * req.line_mtu_bytes(lay.base) / req.line_mtu_bytes(c))
    return limit
