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
groups at 52:8010.., 7fff: down and 8000: up (``GENERATIONS``).

The u32 tree (``u32tree``) classifies: policers ride on its exact filters in
police mode; in shape mode the root's tree names the link's group and each
group's own tree (on its HTB qdisc) the link's class.  ``dest`` is the
interface's egress.  ``source`` arrives on the interface: v0.3 polices it on the
ingress qdisc, which only works for Ethernet framing (ingress sees no size
table); anything else is redirected to an IFB device carrying the same layout.
"""

import functools
import math
import re
import zlib
from bisect import bisect_left
from dataclasses import dataclass, replace

from .errors import FieldError, UsageError
from .model import DIRECTIONS, GRANULARITIES, MODES, Cohort, LinkParams, Request, min_police_burst
from .plan import INGRESS_HANDLE, SHARED_POLICE_INDEX_BASE, AddIfb, FifoQdisc, Flow, HtbClass, HtbQdisc, IngressQdisc, NetemQdisc, Plan, Stab
from .filters import Key, Police, U32Filter
from .linklayer import ATM_CELL_BYTES, ATM_CELL_PAYLOAD_BYTES, ETHERNET_HEADER_BYTES
from .names import check_target
from .u32tree import FIRST, SECOND, Terminal, TreeIds, build, table_ids

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
    return req.mode == "police" and all(not c.up.needs_netem() and c.link.is_ethernet for c in req.cohorts)


@dataclass(frozen=True)
class Span:
    """Where a cohort's links are: the first of them in the device's link numbering (their
    queues' handles follow it) and its first group (each cohort has whole groups)."""

    cohort: Cohort
    first_link: int
    first_group: int
    groups: int


@dataclass(frozen=True)
class Layout:
    """A request's links on a device, pure: each cohort's span, in the request's order; the
    flows the u32 trees select, with each one's link (``port_*``: (host, port) flows;
    ``whole_*``: whole hosts); and the device's link layer (``base``: its size table) with
    what each other cohort's classes add to it."""

    spans: tuple
    port_flows: tuple
    port_link: tuple
    whole_flows: tuple
    whole_link: tuple
    link_cohort: tuple  # link -> index of its span
    base: Cohort
    links: int
    groups: int

    @classmethod
    def of(cls, req: Request, group_links: int = GROUP_LINKS) -> "Layout":
        spans, port_flows, port_link, whole_flows, whole_link, link_cohort = [], [], [], [], [], []
        link = group = 0
        for k, c in enumerate(req.cohorts):
            n = c.link_count()
            groups = -(-n // group_links)
            spans.append(Span(c, link, group, groups))
            if c.ports is None:
                whole_flows += [(h, None) for h in c.hosts]
                whole_link += range(link, link + n)
            else:
                ports = [p for lo, hi in c.ports for p in range(lo, hi + 1)]
                port_flows += [(h, p) for h in c.hosts for p in ports]
                if c.per == "host":
                    port_link += [link + i for i in range(len(c.hosts)) for _ in ports]
                else:
                    port_link += range(link, link + n)
            link_cohort += [k] * n
            link, group = link + n, group + groups
        plain = [c for c in req.cohorts if not c.link.cells] or list(req.cohorts)
        base = min(plain, key=lambda c: c.link.overhead_bytes)
        return cls(tuple(spans), tuple(port_flows), tuple(port_link), tuple(whole_flows), tuple(whole_link),
                   tuple(link_cohort), base, link, group)

    def overhead(self, c: Cohort) -> tuple[int, bool]:
        """What ``c``'s classes add to the length the device's size table gives a packet, and
        whether they count it in ATM cells (0, False on the device's own layer)."""
        if c.link.overhead_bytes == self.base.link.overhead_bytes and c.link.cells == self.base.link.cells:
            return 0, False
        return c.link.overhead_bytes - self.base.link.overhead_bytes, c.link.cells and not self.base.link.cells

    def group_flows(self, first_link: int, end_link: int) -> tuple[range, range]:
        """The (host, port) and whole-host flows of the links ``first_link``..``end_link - 1``."""
        return (range(bisect_left(self.port_link, first_link), bisect_left(self.port_link, end_link)),
                range(bisect_left(self.whole_link, first_link), bisect_left(self.whole_link, end_link)))


def check(req: Request, *, group_links: int = GROUP_LINKS) -> Layout:
    """Every check ``compile_plan`` makes of a request, without building its operations;
    its layout (a record read back is checked this way: compiling 65,536 links takes a
    second, its layout a tenth of that)."""
    _validate(req)
    lay = Layout.of(req, group_links)
    _validate_layout(req, lay)
    return lay


def compile_plan(req: Request, *, group_links: int = GROUP_LINKS) -> Plan:
    """Turn a request into the ordered operations that build it (``group_links``: shape
    mode's links per HTB qdisc; the benchmarks set it to compare layouts)."""
    lay = check(req, group_links=group_links)
    ops: list = []
    links: list[Flow] = []
    if req.direction in ("dest", "both"):
        _egress(req, lay, req.interface, "dest", ops, links, group_links)
    if req.direction in ("source", "both"):
        if ingress_policing(req):
            ops.append(IngressQdisc(req.interface))
            _police_trees(req, lay, req.interface, INGRESS_HANDLE, "source", ops, links,
                          overhead_bytes=ETHERNET_HEADER_BYTES)  # count the frame, as egress does
        else:
            ifb = ifb_name(req.interface)
            ops.insert(0, AddIfb(ifb))
            ops.append(IngressQdisc(req.interface))
            ops.append(U32Filter(req.interface, INGRESS_HANDLE, 1, "all", 0, 0, 1,
                                 (Key(0, 0, 0),), redirect=ifb))
            _egress(req, lay, ifb, "source", ops, links, group_links)
    return Plan(req, tuple(ops), tuple(links))


def link_flows(req: Request) -> tuple[Flow, ...]:
    """Shape mode: every link's ``Flow`` (its class, for statistics) from the layout alone, in
    link order per device: what ``compile_plan(req).flows`` holds, without the filters (the
    order differs: that is the trees')."""
    if req.mode != "shape":
        raise ValueError("link_flows: shape mode only (a policed link's counters are its filter's)")
    lay = check(req)
    h = GENERATIONS[req.generation]
    out = []
    for direction, dev in (("dest", req.interface), ("source", ifb_name(req.interface))):
        if req.direction not in (direction, "both"):
            continue
        for span in lay.spans:
            c = span.cohort
            if c.per == "host":
                pairs = [(host, None) for host in c.hosts]
            else:
                ports = [p for lo, hi in c.ports for p in range(lo, hi + 1)]
                pairs = [(host, p) for host in c.hosts for p in ports]
            for j, (host, port) in enumerate(pairs):
                qdisc = (h.group_top - span.first_group - j // GROUP_LINKS) << 16
                out.append(Flow(direction, host, port, dev, 0, 0, qdisc | (LINK_MINOR_BASE + j % GROUP_LINKS), c.name))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def compiled(req: Request) -> Plan:
    """``compile_plan(req)``, kept for the last few requests: reading a record or the
    statistics of a watched interface compiles its request once, not at every read
    (compiling 65,536 links takes about a second; requests are frozen, hashable values)."""
    return compile_plan(req)


# ---------------------------------------------------------------- validation


COHORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}", re.ASCII)


def _validate(req: Request) -> None:
    if req.mode not in MODES:
        raise FieldError("--mode", req.mode, f"is not a mode ({', '.join(MODES)})")
    if req.direction not in DIRECTIONS:
        raise FieldError("--direction", req.direction, f"is not a direction ({', '.join(DIRECTIONS)})")
    check_target(req.interface, req.netns)
    for field, value, lo, hi in (("--mtu", req.mtu_bytes, 68, 65535), ("--avpkt", req.avpkt_bytes, 1, 65535)):
        if not lo <= value <= hi:
            raise FieldError(field, value, f"is out of range ({lo}-{hi})")
    if not req.cohorts:
        raise UsageError("cohorts: none given")
    names = set()
    for c in req.cohorts:
        _validate_cohort(req, c)
        if c.name in names:
            raise FieldError("cohort", f"'{c.name}'", "is named twice (each cohort needs its own name)")
        names.add(c.name)
    _refuse_overlaps(req.cohorts)
    n = req.flow_count()
    if n > MAX_FLOWS:
        raise FieldError("--hosts/--ports", f"{n} flows", f"are too many (at most {MAX_FLOWS})")
    if req.generation not in range(len(GENERATIONS)):
        raise FieldError("generation", req.generation, f"is not a generation (0-{len(GENERATIONS) - 1})")
    hosts = sum(len(c.hosts) for c in req.cohorts if c.per == "host")
    if req.mode == "police" and hosts > MAX_POLICED_HOSTS:
        raise FieldError("--hosts", f"{hosts} hosts", f"are too many for per-host policers (at most {MAX_POLICED_HOSTS})")
    if req.mode == "police" and len(req.cohorts) > 1:
        for side in ("down", "up"):
            stages = {getattr(c, side).merged(rate_bps=0, queue=None, burst=None) for c in req.cohorts}
            if len(stages) > 1 and any(getattr(c, side).needs_netem() for c in req.cohorts):
                raise UsageError(f"--mode: police mode puts one delay/loss stage on a device for every link; "
                                 f"cohorts {', '.join(c.name for c in req.cohorts)} differ in theirs ({side}); "
                                 "use shape mode")
        if len({(c.link.overhead_bytes, c.link.cells) for c in req.cohorts}) > 1:
            raise UsageError("--mode: police mode meters every link of a device with one link layer; cohorts "
                             f"{', '.join(c.name for c in req.cohorts)} have several; use shape mode")


def _validate_cohort(req: Request, c: Cohort) -> None:
    where = "" if len(req.cohorts) == 1 else f"cohort '{c.name}': "

    def fail(field, value, why):
        raise FieldError(f"{where}{field}", value, why)
    if not isinstance(c.name, str) or not COHORT_NAME.fullmatch(c.name):
        raise FieldError("cohort name", f"'{c.name}'", "is not a name (letters, digits, '.', '_' or '-'; at most 32, "
                                                        "starting with a letter or digit)")
    if c.per not in GRANULARITIES:
        fail("--per", c.per, f"is not a link granularity ({', '.join(GRANULARITIES)})")
    if not c.hosts:
        raise UsageError(f"{where}--hosts: none given (comma-separated names or addresses)")
    if c.ports is None:
        if c.per != "host":
            raise UsageError(f"{where}--ports: every port (all) needs --per host: a link per host")
    elif not c.ports:
        raise UsageError(f"{where}--ports: none given (ranges like 1024-2047,3000, or all)")
    for lo, hi in c.ports or ():
        for p in (lo, hi):
            if not 1 <= p <= 65535:
                fail("--ports", p, "is not a port (1-65535)")
        if lo > hi:
            fail("--ports", f"{lo}-{hi}", "is a reversed range (low-high)")
    if not 0 <= c.mpu_bytes <= 65535:
        fail("--mpu", c.mpu_bytes, "is out of range (0-65535)")
    for side, params in (("down", c.down), ("up", c.up)):
        if params.reorder_pct and not params.delay_us:
            raise UsageError(f"{where}--reorder: {params.reorder_pct:g}% needs a delay ({side}link delay is 0)")
        if req.mode == "police" and params.rate_bps:
            rate = _carried(req, c, params)
            burst, least = req.burst_bytes(params, rate, c), min_police_burst(rate, req.line_mtu_bytes(c))
            if burst < least:
                fail("--burst", f"'{req.burst_of(params, c).text()}'",
                     f"is {burst} bytes, too small for a full packet ({req.line_mtu_bytes(c)} bytes on "
                     f"this link; at least {least}): the policer would drop every full-size packet")


def _refuse_overlaps(cohorts) -> None:
    """A flow belongs to one cohort: two that select one (host, port) are refused, naming
    both and that flow."""
    if len(cohorts) < 2:
        return
    seen: dict = {}  # host -> [(cohort, its port ranges or None)]
    for c in cohorts:
        for h in c.hosts:
            seen.setdefault(h, []).append(c)
    for host, cs in seen.items():
        if len(cs) < 2:
            continue
        for i, a in enumerate(cs):
            for b in cs[i + 1:]:
                port = _shared_port(a.ports, b.ports)
                if port is not False:
                    flow = f"{host}" if port is None else f"{host} port {port}"
                    raise UsageError(f"cohorts '{a.name}' and '{b.name}' both select {flow}: a flow gets one link "
                                     "(narrow one cohort's hosts or ports)")


def _shared_port(a, b):
    """A port both range lists hold (None: one is a whole host, so they share every port), or False."""
    if a is None:
        return b[0][0] if b else None
    if b is None:
        return a[0][0]
    for lo, hi in a:
        for lo2, hi2 in b:
            if max(lo, lo2) <= min(hi, hi2):
                return max(lo, lo2)
    return False


def _validate_layout(req: Request, lay: "Layout") -> None:
    h = GENERATIONS[req.generation]
    if req.mode == "shape" and not _fits(h, lay.links, lay.groups):
        most = max_shape_links(h)
        extra = f" in {len(req.cohorts)} cohorts of whole groups" if len(req.cohorts) > 1 else ""
        raise FieldError("--hosts/--ports", f"{lay.links} links{extra}",
                         f"are too many for shape mode (at most {most}; police mode takes more)")
    for c in req.cohorts:
        over, _ = lay.overhead(c)
        if not 0 <= over <= 0xFFFF:
            raise UsageError(f"cohort '{c.name}': its link layer {c.link.name} (overhead {c.link.overhead_bytes}) "
                             f"cannot be metered beside {lay.base.link.name} (overhead {lay.base.link.overhead_bytes}) "
                             "on one device: a class adds to a packet's length, never takes from it")


def _fits(h: "Handles", links: int, groups: int) -> bool:
    if h.leaf_base > h.group_top:
        return h.leaf_base + links - 1 <= h.leaf_top
    return h.leaf_base + links <= h.group_top - groups


# ---------------------------------------------------------------- a device


def _stab(base: Cohort) -> Stab | None:
    return None if base.link.is_ethernet else Stab(base.link.stab_overhead, base.link.cells)


def _carried(req: Request, c: Cohort, params: LinkParams) -> int:
    """The rate the link's frames get (its line rate less the line's own coding)."""
    return c.link.carried_bps(params.rate_bps or req.bandwidth_bps)


def _side(c: Cohort, direction: str) -> LinkParams:
    return c.down if direction == "dest" else c.up


def _egress(req, lay, dev, direction, ops, links, group_links):
    """An HTB root on ``dev`` with the pool class, the tree, and per-link classes."""
    ops.append(HtbQdisc(dev, ROOT, stab=_stab(lay.base)))
    bw = req.bandwidth_bps
    base_mtu = req.line_mtu_bytes(lay.base)
    pool_burst = max(base_mtu, bw // 800)  # 10 ms at the device's bandwidth
    ops.append(HtbClass(dev, ROOT, POOL_CLASS, bw, bw, pool_burst, base_mtu, lay.base.mpu_bytes))
    if req.mode == "police":
        params = _side(req.cohorts[0], direction)
        if params.needs_netem():  # one stage for every cohort (``_validate``: they share it)
            # serializing at the device's bandwidth keeps every flow's packets in order
            ops.append(NetemQdisc(dev, POOL_CLASS, POOL_NETEM, params, _pool_limit(req, lay, direction), bw))
        _police_trees(req, lay, dev, ROOT, direction, ops, links)
        return
    h = GENERATIONS[req.generation]
    if LINK_MINOR_BASE + group_links - 1 > 0xFFFF:
        raise FieldError("group links", group_links, f"is more than a qdisc's class minors hold "
                                                     f"(at most {0xFFFF - LINK_MINOR_BASE + 1})")
    ids = table_ids(h.tree)
    for span in lay.spans:
        _cohort_groups(req, lay, span, dev, direction, ops, links, group_links, pool_burst)
    # the root's trees: a flow's group
    for pairs, owner, whole in ((lay.port_flows, lay.port_link, False), (lay.whole_flows, lay.whole_link, True)):
        def terminal(i, owner=owner):
            link = owner[i]
            span = lay.spans[lay.link_cohort[link]]
            return Terminal(ROOT | (h.group_minor + span.first_group + (link - span.first_link) // group_links),
                            reports=False)
        build(pairs, dev, ROOT, direction, terminal, ops, links, link_classid=True, tree_ids=h.tree, ids=ids,
              whole_hosts=whole)


def _cohort_groups(req, lay, span, dev, direction, ops, links, group_links, pool_burst):
    """A cohort's groups: each its class under the pool, its HTB qdisc with a root class,
    a class and queue per link, and the tree that finds a flow's link class."""
    c, bw, h = span.cohort, req.bandwidth_bps, GENERATIONS[req.generation]
    params = _side(c, direction)
    rate = _carried(req, c, params)
    n = c.link_count()
    # A link's own rate is a guarantee only while every link fits the bandwidth; beyond
    # that each is guaranteed its share and borrows up to its rate, so the pool class
    # holds them all to --bandwidth.
    guaranteed = min(rate, max(8, bw // lay.links))
    # with a netem stage, netem serializes the link exactly; a second shaper at the same
    # rate would only add its timer's lateness, so the class may go up to the bandwidth
    ceil = max(rate, bw) if params.needs_netem() else rate
    burst = req.burst_bytes(params, rate, c)
    mtu, mpu = req.line_mtu_bytes(c), c.mpu_bytes
    over, atm = lay.overhead(c)
    for g, first in enumerate(range(0, n, group_links)):
        members = range(first, min(first + group_links, n))
        number = span.first_group + g
        group, qdisc = ROOT | (h.group_minor + number), (h.group_top - number) << 16
        ops.append(HtbClass(dev, POOL_CLASS, group, min(bw, guaranteed * len(members)), bw, pool_burst, mtu, mpu,
                            over, atm))
        ops.append(HtbQdisc(dev, qdisc, parent=group))
        # the group qdisc's root class lets its links borrow up to their ceilings (the pool
        # above holds the total to --bandwidth)
        ops.append(HtbClass(dev, qdisc, qdisc | 1, bw, bw, pool_burst, mtu, mpu, over, atm))
        for link in members:
            classid = qdisc | (LINK_MINOR_BASE + link - first)
            ops.append(HtbClass(dev, qdisc | 1, classid, guaranteed, ceil, burst, mtu, mpu, over, atm))
            ops.append(_leaf(req, lay, c, params, rate, dev, classid, (h.leaf_base + span.first_link + link) << 16))
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
                                per_host=c.per == "host", cohort=c.name)
            if len(indices):
                build(pairs, dev, qdisc, direction, terminal, ops, links, link_classid=True, indices=indices,
                      ids=ids, whole_hosts=whole)


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
    limit = req.queue_bytes(params, rate, c)
    if lay.overhead(c) != (0, False):
        limit = math.ceil(limit * req.line_mtu_bytes(lay.base) / req.line_mtu_bytes(c))
    return FifoQdisc(dev, parent, handle, "bfifo", limit)


def _pool_limit(req: Request, lay: Layout, direction: str) -> int:
    """The shared netem stage of police mode holds what all links have in flight (a
    policer has no queue): twice the aggregate rate (capped by the bandwidth) times the
    delay, at least netem's default of 1000 packets."""
    params = _side(req.cohorts[0], direction)
    rate = min(req.bandwidth_bps, sum(_carried(req, c, _side(c, direction)) * c.link_count() for c in req.cohorts))
    in_flight = rate * (params.delay_us + params.jitter_us) / 1e6 / 8 / req.avpkt_bytes
    return max(1000, int(2 * in_flight) + 1)


def _police_trees(req, lay, dev, parent, direction, ops, links, *, overhead_bytes: int = 0):
    """The u32 trees on ``dev`` under ``parent`` for every selected flow, each exact filter
    with its link's policer (per host: one shared by the host's filters)."""
    h = GENERATIONS[req.generation]
    pool = POOL_CLASS if parent == ROOT else INGRESS_HANDLE | 1
    tag = (zlib.crc32(req.interface.encode()) & 0xFFF) << 18 | (direction == "source") << 17
    police = [_police(req, c, _side(c, direction), overhead_bytes) for c in req.cohorts]
    reported: set[int] = set()
    ids = table_ids(h.tree)
    for pairs, owner, whole in ((lay.port_flows, lay.port_link, False), (lay.whole_flows, lay.whole_link, True)):
        def terminal(i, owner=owner):
            link = owner[i]
            k = lay.link_cohort[link]
            c, p = req.cohorts[k], police[k]
            per_host = c.per == "host"
            shared = p and per_host and replace(p, index=h.police_index | SHARED_POLICE_INDEX_BASE | tag | link)
            first_seen = link not in reported
            reported.add(link)
            return Terminal(pool, shared or p, reports=first_seen, per_host=per_host, cohort=c.name)
        build(pairs, dev, parent, direction, terminal, ops, links, link_classid=False, tree_ids=h.tree, ids=ids,
              whole_hosts=whole)


def _police(req: Request, c: Cohort, params: LinkParams, overhead_bytes: int) -> Police | None:
    if not params.rate_bps:
        return None
    rate = _carried(req, c, params)
    return Police(rate, req.burst_bytes(params, rate, c), req.line_mtu_bytes(c), c.mpu_bytes, overhead_bytes)
