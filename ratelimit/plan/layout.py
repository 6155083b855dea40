"""Where a request's links go on a device, pure: the handles of the two generations, each
cohort's span of links and groups, the flows the trees select, and the device's link layer
(``compile`` builds the operations from it; ``validate`` checks it fits).
"""

import functools
import zlib
from bisect import bisect_left
from dataclasses import dataclass, replace

from ..spec.model import Cohort, LinkParams, Request
from ..spec.units import format_rate
from .stages import cell_groups, leaf_majors
from .u32tree import FIRST, SECOND, TreeIds

ROOT = 0x520000  # 52:
POOL_CLASS = 0x520001  # 52:1
POOL_NETEM = 0x530000  # 53:
GROUP_LINKS = 256  # links per group qdisc with one tree (docs/benchmarks.md, "Setup": the layout's curve)
QUEUE_GROUP_LINKS = 512  # with a tree per tx queue, each walks fewer groups (docs/design.md, "Why queues")
LINK_MINOR_BASE = 0x100  # the group's links are (fffe - g):100..
MAX_GROUP_LINKS = 0xFFFF - LINK_MINOR_BASE + 1  # the class minors a group's qdisc has for links
TREE_BASE = 0x54  # with several tx queues: queue q's tree is the HTB qdisc (54 + q):, under mq class 52:(q + 1)
MAX_QUEUES = 128  # the trees' majors stay below the groups' and queues' (MAJORS)


def tree_handle(queue: int) -> int:
    """The HTB qdisc of tx queue ``queue``'s tree (several queues; one queue: the root 52:)."""
    return (TREE_BASE + queue) << 16


def group_links_of(req: Request) -> int:
    """Links per group qdisc: the request's own (``Request.group_links``, a record's), else
    ``GROUP_LINKS`` with one tree and ``QUEUE_GROUP_LINKS`` with several."""
    if req.group_links is not None:
        return req.group_links
    return GROUP_LINKS if req.queues == 1 else QUEUE_GROUP_LINKS


def queue_of(cohort: str, group: int, queues: int) -> int:
    """The tx queue (0-based) of a cohort's group ``group``: ``(crc32(name) + group) mod
    queues``.  Pure and stable: a cohort's groups take the queues in turn from one its name
    picks, so adding links to a cohort adds groups at its end and moves none of its other
    groups, and no other cohort's; cohorts of one name land where they did whatever else the
    request holds.  With one queue, 0."""
    return (zlib.crc32(cohort.encode()) + group) % queues


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
               Handles(0x8010, 0xFDEC, 0x8000, 0xFDEC, SECOND, 0x80000000))

# ``Request.numbering``: how a plan's slots are numbered as qdisc majors ("The qdisc hash" below)
SLOT_ORDER = 0  # each slot its own major; generation 1's groups from 7fff: down (a record without the field)
MID_BUCKET = 1  # the groups' bucket, generation 1's groups from 7fff: down (a record with ``group_bucket``)
TOP_BUCKET = 2  # the groups' bucket, generation 1's groups just below generation 0's: how plans are numbered now
NUMBERINGS = (SLOT_ORDER, MID_BUCKET, TOP_BUCKET)
MID_SECOND_TOP = 0x7FFF  # generation 1's first group slot under SLOT_ORDER and MID_BUCKET


def handles(generation: int, numbering: int = TOP_BUCKET) -> Handles:
    """The handles of ``generation`` in ``numbering``."""
    h = GENERATIONS[generation]
    if generation == 1 and numbering != TOP_BUCKET:
        return replace(h, group_top=MID_SECOND_TOP, leaf_top=0xFFFE)
    return h


def max_shape_links(h: Handles) -> int:
    """The most links a generation holds: its queues counting up from ``leaf_base`` and its
    groups counting down from ``group_top`` must not meet."""
    if h.leaf_base > h.group_top:
        return h.leaf_top - h.leaf_base + 1
    return max(n for n in range(h.group_top - h.leaf_base + 1)
               if h.leaf_base + n <= h.group_top - -(-n // GROUP_LINKS))


# The device's qdisc hash (``qdisc_hash`` in struct net_device: 16 buckets, a qdisc's handle
# hashed with hash_32).  The kernel finds a qdisc by its handle for every class, filter and
# qdisc message -- each change a trace driver sends looks up its link's group qdisc -- and
# walks the handle's bucket from its newest entry.  A group is made before its links'
# queues, so with majors in slot order its lookup walked past nearly every queue of its
# bucket: about links / 32 entries for every change.  Numbered (``Request.numbering``), the
# groups' qdiscs take the majors of one bucket, which the links' queues leave to them until a
# plan of some 61,000 links needs them (docs/design.md, "The qdisc hash").
QDISC_HASH_BITS = 4
GOLDEN_RATIO_32 = 0x61C88647  # linux/hash.h
GROUP_SLOTS = 512  # each generation's group slots, from its ``group_top`` down, that take the bucket's majors


def hash_bucket(major: int) -> int:
    """The bucket of the device's qdisc hash a qdisc of ``major`` goes to."""
    return ((major << 16) * GOLDEN_RATIO_32 & 0xFFFFFFFF) >> (32 - QDISC_HASH_BITS)


GROUP_BUCKET = hash_bucket(GENERATIONS[0].group_top)  # fffe:'s (and fdec:'s, 7fff:'s): first groups keep their majors


@functools.cache
def _majors(numbering: int) -> tuple[int, ...]:
    """slot -> major over the groups' and queues' slots (``MAJORS``; the identity outside).
    Each generation's group slots (``GROUP_SLOTS``, from its ``group_top`` down) take the
    bucket's majors from its ``group_top`` down (so each generation's first group keeps its
    major), then the slots below the group slots at the top of the range (generation 0's;
    under TOP_BUCKET generation 1's too), which generation 0's queues fill last, take the
    rest; every other slot takes the next major of the other buckets, in order.

    Under MID_BUCKET generation 1's group slots (7fff: down) are also generation 0's queue
    slots from its 32,000th link on: a plan of more links put 512 queues in the groups'
    bucket, newer than the groups, and each change walked past them."""
    gens = [handles(g, numbering) for g in range(len(GENERATIONS))]
    lo, end = MAJORS
    ours = [hash_bucket(m) == GROUP_BUCKET for m in range(end)]
    free = [m for m in range(end - 1, lo - 1, -1) if ours[m]]
    table = list(range(1 << 16))
    taken = set()
    for g in sorted(gens, key=lambda g: g.group_top):
        picks = [m for m in free if m <= g.group_top][:GROUP_SLOTS]
        for slot, m in zip(range(g.group_top, g.group_top - GROUP_SLOTS, -1), picks):
            table[slot] = m
            taken.add(slot)
        picked = set(picks)
        free = [m for m in free if m not in picked]
    below = min(g.group_top for g in gens if g.group_top >= GENERATIONS[1].leaf_base) - GROUP_SLOTS
    for m in free:
        table[below] = m
        taken.add(below)
        below -= 1
    others = (m for m in range(lo, end) if not ours[m])
    for slot, m in zip((s for s in range(lo, end) if s not in taken), others):
        table[slot] = m
    return tuple(table)


def major(slot: int, numbering: int = TOP_BUCKET) -> int:
    """The qdisc major of a group's or a queue's ``slot`` (``Place``'s numbers) in
    ``numbering`` (``Request.numbering``): the slot itself in SLOT_ORDER."""
    return slot if numbering == SLOT_ORDER else _majors(numbering)[slot]


MAX_SHAPE_LINKS = max_shape_links(GENERATIONS[0])
MAX_FLOWS = 1 << 20
MAX_POLICED_HOSTS = 1 << 17


@dataclass(frozen=True)
class Place:
    """Where a cohort's handles are (shape mode): its groups' classes are
    ``52:(group_minor + g)``, their qdiscs ``(group_top - g):`` counting down, and its
    links' queues ``(leaf_base + i):`` counting up."""

    group_minor: int
    group_top: int
    leaf_base: int

    def ranges(self, leaves: int, groups: int) -> tuple[tuple[str, int, int], ...]:
        """The handles it takes, as (space, first, end): class minors under ``52:``, and
        qdisc majors (its groups', and its links' queues: ``leaves`` of them, ``leaf_majors``)."""
        return (("minor", self.group_minor, self.group_minor + groups),
                ("major", self.group_top - groups + 1, self.group_top + 1),
                ("major", self.leaf_base, self.leaf_base + leaves))


MINORS = (0x10, 0x10000)  # group class minors under 52: (52:1 is the pool)
MAJORS = (0x100, 0xFFFF)  # qdisc majors for groups and queues (52: and 53: are below)


@dataclass(frozen=True)
class Span:
    """Where a cohort's links are: the first of them in the device's link numbering, its
    number of groups (each cohort has whole groups), and the handles its groups and queues
    take (``place``).  The cohorts of one cell share one group, the first one's
    (``group_span``: the index of the span whose group holds this one's links; the later
    ones have no group of their own)."""

    cohort: Cohort
    first_link: int
    groups: int
    place: Place
    group_span: int = -1  # -1: its own groups

    def ranges(self) -> tuple:
        return self.place.ranges(self.cohort.link_count() * leaf_majors(self.cohort), self.groups)


@dataclass(frozen=True)
class Layout:
    """A request's links on a device, pure: each cohort's span, in the request's order; the
    flows the u32 trees select, with each one's link (``port_*``: (host, port, server
    prefix or None) flows; ``whole_*``: whole hosts, port None); and the device's link
    layer (``base``: its size table) with what each other cohort's classes add to it."""

    spans: tuple
    port_flows: tuple
    port_link: tuple
    whole_flows: tuple
    whole_link: tuple
    link_cohort: tuple  # link -> index of its span
    base: Cohort
    links: int
    groups: int
    group_links: int = GROUP_LINKS
    queues: int = 1
    leaves: int = 0  # qdisc majors the links' queues take (``leaf_majors``)
    numbering: int = TOP_BUCKET  # ``Request.numbering``: slots to majors through ``major``

    @classmethod
    def of(cls, req: Request) -> "Layout":
        group_links = group_links_of(req)
        spans, port_flows, port_link, whole_flows, whole_link, link_cohort = [], [], [], [], [], []
        link = group = leaf = 0
        gen = handles(req.generation, req.numbering)
        cells: dict = {}  # cell name -> the span holding its group
        for k, c in enumerate(req.cohorts):
            n = c.link_count()
            group_span = -1 if c.cell is None else cells.setdefault(c.cell.name, k)
            groups = -(-n // group_links) if c.cell is None else cell_groups(c) if group_span == k else 0
            place = req.places[k] if req.places else Place(gen.group_minor + group, gen.group_top - group,
                                                           gen.leaf_base + leaf)
            spans.append(Span(c, link, groups, place, group_span))
            ports = [None] if c.ports is None else [p for lo, hi in c.ports for p in range(lo, hi + 1)]
            flows, owner = (whole_flows, whole_link) if c.ports is None else (port_flows, port_link)
            if c.servers is None and c.server_ports is None:  # the common case, kept quick: a flow per (host, port)
                flows += [(h, p, None) for h in c.hosts for p in ports]
                if c.per == "shared":
                    owner += [link] * (len(c.hosts) * len(ports))
                elif c.per == "host":
                    owner += [link + i for i in range(len(c.hosts)) for _ in ports]
                else:
                    owner += range(link, link + n)
            else:  # a flow per (host, port, far side of the host's family)
                for i, h in enumerate(c.hosts):
                    servers = c.far_for(h.version)
                    for j, p in enumerate(ports):
                        at = link if c.per == "shared" else link + i if c.per == "host" else link + i * len(ports) + j
                        flows += [(h, p, srv) for srv in servers]
                        owner += [at] * len(servers)
            link_cohort += [k] * n
            link, group, leaf = link + n, group + groups, leaf + n * leaf_majors(c)
        plain = [c for c in req.cohorts if not c.link.cells] or list(req.cohorts)
        base = min(plain, key=lambda c: c.link.overhead_bytes)
        return cls(tuple(spans), tuple(port_flows), tuple(port_link), tuple(whole_flows), tuple(whole_link),
                   tuple(link_cohort), base, link, group, group_links, req.queues, leaf, req.numbering)

    def overhead(self, c: Cohort) -> tuple[int, bool]:
        """What ``c``'s classes add to the length the device's size table gives a packet, and
        whether they count it in ATM cells (0, False on the device's own layer)."""
        return c.link.overhead_bytes - self.base.link.overhead_bytes, c.link.cells and not self.base.link.cells

    def group_class(self, link: int) -> int:
        """Link ``link``'s group's class under its tree's pool."""
        span, i = self.grouped(link)
        return self.group_class_of(span, i // self.group_links if span.group_span < 0 else 0)

    def grouped(self, link: int) -> tuple[Span, int]:
        """(the span whose group holds link ``link``, the link's number in that span's links):
        its own cohort's, or its cell's first cohort's, whose one group holds the whole cell."""
        span = self.spans[self.link_cohort[link]]
        if span.group_span >= 0:
            span = self.spans[span.group_span]
        return span, link - span.first_link

    def cell_links(self, k: int) -> range:
        """The links of the group of span ``k``, a cell's first: its cell's cohorts', which
        follow one another (``cells.check_cells``)."""
        ends = [s.first_link + s.cohort.link_count() for s in self.spans if s.group_span == k]
        return range(self.spans[k].first_link, max(ends))

    def group_class_of(self, span: Span, group: int) -> int:
        """The class of ``span``'s group ``group``: ``52:m`` with one queue, else ``(54 + q):m``
        in the tree of its queue (``queue_of``); its minor ``m`` is the device's either way."""
        tree = ROOT if self.queues == 1 else tree_handle(queue_of(span.cohort.name, group, self.queues))
        return tree | (span.place.group_minor + group)

    def queue_links(self) -> list[int]:
        """How many links each tx queue's tree holds."""
        out = [0] * self.queues
        for span in self.spans:
            n = span.cohort.link_count()
            if span.group_span >= 0:  # a cell's one group, its first cohort's
                out[queue_of(self.spans[span.group_span].cohort.name, 0, self.queues)] += n
                continue
            for g in range(span.groups):
                out[queue_of(span.cohort.name, g, self.queues)] += min(self.group_links, n - g * self.group_links)
        return out

    def link_class(self, link: int) -> int:
        """Link ``link``'s HTB class: in its group's qdisc, from LINK_MINOR_BASE."""
        span, i = self.grouped(link)
        if span.group_span >= 0:
            return self.group_qdisc(span, 0) | (LINK_MINOR_BASE + i)
        return self.group_qdisc(span, i // self.group_links) | (LINK_MINOR_BASE + i % self.group_links)

    def group_qdisc(self, span: Span, group: int) -> int:
        """The HTB qdisc of ``span``'s group ``group``."""
        return major(span.place.group_top - group, self.numbering) << 16

    def cell_gate(self, span: Span) -> int:
        """The gate of the cell whose group ``span`` holds, a traced cell's: a token bucket
        between its class and its group's qdisc (``groups.cell_group``)."""
        return self.group_qdisc(span, 1)

    def queue_qdisc(self, slot: int) -> int:
        """The qdisc of a link's queue (or gate, or delay stage) in ``slot``."""
        return major(slot, self.numbering) << 16

    def clash(self) -> tuple | None:
        """Two spans whose handles overlap, or one outside the handle space, as (span,
        other span or None); None when every cohort's handles are its own."""
        seen = []
        for span in self.spans:
            for space, lo, hi in span.ranges():
                bounds = MINORS if space == "minor" else MAJORS
                if lo < hi and not bounds[0] <= lo <= hi <= bounds[1]:
                    return span, None
                for other, space2, lo2, hi2 in seen:
                    if space2 == space and max(lo, lo2) < min(hi, hi2):
                        return span, other
            seen += [(span, *r) for r in span.ranges()]
        return None

    def group_flows(self, first_link: int, end_link: int) -> tuple[range, range]:
        """The (host, port) and whole-host flows of the links ``first_link``..``end_link - 1``."""
        return (range(bisect_left(self.port_link, first_link), bisect_left(self.port_link, end_link)),
                range(bisect_left(self.whole_link, first_link), bisect_left(self.whole_link, end_link)))


def carried(req: Request, c: Cohort, params: LinkParams) -> int:
    """The rate the link's frames get (its line rate less the line's own coding)."""
    return c.link.carried_bps(params.rate_bps or req.bandwidth_bps)


def ingress_policing(req: Request) -> bool:
    """True when the arriving direction (``Request.arriving``) is policed on the ingress
    qdisc (v0.3's way): police mode, no netem stage, and Ethernet framing (the ingress
    hook has no size table)."""
    return req.mode == "police" and all(not c.side(req.arriving).needs_netem() and c.link.is_ethernet
                                        for c in req.cohorts)


def links_rate_bps(req: Request) -> dict[str, int]:
    """What the rate-limited links' rates add up to, per direction the device's
    ``--bandwidth`` pools ("dest", "source"; not a source policed on the ingress qdisc,
    which has no pool): the most they can take of it at once."""
    out = {}
    for direction in ("dest", "source"):
        if req.direction in (direction, "both") and not (direction == req.arriving and ingress_policing(req)):
            out[direction] = sum(carried(req, c, c.side(direction)) * c.link_count() for c in req.cohorts
                                 if c.side(direction).rate_bps)
    return out


def oversubscribed(req: Request) -> str | None:
    """The warning for links whose rates add up to more than ``--bandwidth``: while they
    are all busy, the pool holds them to a share each, not their rates."""
    over = {d: bps for d, bps in links_rate_bps(req).items() if bps > req.bandwidth_bps}
    if not over:
        return None
    direction, total = max(over.items(), key=lambda kv: kv[1])
    need = -(-total // 1_000_000) * 1_000_000
    return (f"--bandwidth: the {req.link_count():,} links' rates add up to {format_rate(total)} "
            f"{'to' if direction == 'dest' else 'from'} the hosts, more than the device's "
            f"{format_rate(req.bandwidth_bps)}: while all are busy each gets a share, not its rate "
            f"(--bandwidth {format_rate(need)} carries them)")
