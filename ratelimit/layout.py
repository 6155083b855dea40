"""Where a request's links go on a device, pure: the handles of the two generations, each
cohort's span of links and groups, the flows the trees select, and the device's link layer
(``compile`` builds the operations from it; ``validate`` checks it fits).
"""

from bisect import bisect_left
from dataclasses import dataclass

from .model import Cohort, LinkParams, Request
from .u32tree import FIRST, SECOND, TreeIds

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
    group_links: int = GROUP_LINKS

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
                   tuple(link_cohort), base, link, group, group_links)

    def overhead(self, c: Cohort) -> tuple[int, bool]:
        """What ``c``'s classes add to the length the device's size table gives a packet, and
        whether they count it in ATM cells (0, False on the device's own layer)."""
        return c.link.overhead_bytes - self.base.link.overhead_bytes, c.link.cells and not self.base.link.cells

    def group(self, link: int) -> int:
        """The number of link ``link``'s group (a cohort's groups follow the one before's)."""
        span = self.spans[self.link_cohort[link]]
        return span.first_group + (link - span.first_link) // self.group_links

    def link_class(self, h: "Handles", link: int) -> int:
        """Link ``link``'s HTB class in generation ``h``: in its group's qdisc, from LINK_MINOR_BASE."""
        span = self.spans[self.link_cohort[link]]
        return (h.group_top - self.group(link)) << 16 | (LINK_MINOR_BASE + (link - span.first_link) % self.group_links)

    def group_flows(self, first_link: int, end_link: int) -> tuple[range, range]:
        """The (host, port) and whole-host flows of the links ``first_link``..``end_link - 1``."""
        return (range(bisect_left(self.port_link, first_link), bisect_left(self.port_link, end_link)),
                range(bisect_left(self.whole_link, first_link), bisect_left(self.whole_link, end_link)))


def carried(req: Request, c: Cohort, params: LinkParams) -> int:
    """The rate the link's frames get (its line rate less the line's own coding)."""
    return c.link.carried_bps(params.rate_bps or req.bandwidth_bps)
