"""Frozen inputs of the compiler: link parameters, profiles and a request.

Directions follow ratelimit v0.3.  The router interface faces the clients:
``dest`` limits packets *to* the selected (host, port) -- they leave the
interface (egress), the client's download, a profile's ``down`` side;
``source`` limits packets *from* them -- they arrive on the interface (ingress),
the client's upload, a profile's ``up`` side.
"""

import math
from dataclasses import dataclass, field, fields, replace
from ipaddress import IPv4Address, IPv6Address

from .linklayer import ETHERNET, ETHERNET_HEADER_BYTES, LinkLayer

MODES = ("police", "shape")
DIRECTIONS = ("source", "dest", "both")
GRANULARITIES = ("port", "host", "shared")  # a link per (host, port), as v0.3; per host; one for the whole cohort

IPAddress = IPv4Address | IPv6Address


@dataclass(frozen=True)
class Burst:
    """How far a link may run ahead of its rate: v0.3's N (``rate x N / 8`` bytes, at least
    one MTU), a number of bytes, or a time's worth of the rate."""

    amount: float
    unit: str  # "v03", "bytes" or "us"

    def bytes_at(self, rate_bps: int, mtu_bytes: int) -> int:
        if self.unit == "v03":
            return v03_burst_bytes(rate_bps, int(self.amount), mtu_bytes)
        if self.unit == "bytes":
            return int(self.amount)
        return max(1, math.ceil(rate_bps * self.amount / 8e6))

    def text(self) -> str:
        if self.unit == "v03":
            return f"{self.amount:g}"
        return f"{self.amount:g}b" if self.unit == "bytes" else _time_text(self.amount)


@dataclass(frozen=True)
class Queue:
    """A link's queue: packets, (line) bytes, or a time's worth of the rate."""

    amount: int
    unit: str  # "pkts", "bytes" or "us"

    def bytes_at(self, rate_bps: int, packet_bytes: int) -> int:
        """The queue in line bytes (a packet counts ``packet_bytes``); at least one packet."""
        if self.unit == "pkts":
            size = self.amount * packet_bytes
        elif self.unit == "bytes":
            size = self.amount
        else:
            size = math.ceil(rate_bps * self.amount / 8e6)
        return max(size, packet_bytes)

    def packets_at(self, rate_bps: int, packet_bytes: int) -> int:
        if self.unit == "pkts":
            return self.amount
        return max(1, math.ceil(self.bytes_at(rate_bps, packet_bytes) / packet_bytes))

    def text(self) -> str:
        if self.unit == "pkts":
            return f"{self.amount}p"
        return f"{self.amount}b" if self.unit == "bytes" else _time_text(self.amount)


def _time_text(us: float) -> str:
    return f"{us / 1000:g}ms" if us % 1000 == 0 else f"{us:g}us"


@dataclass(frozen=True)
class LinkParams:
    """One direction of an emulated link.  ``None``/0 means "not impaired"."""

    rate_bps: int | None = None
    delay_us: int = 0
    jitter_us: int = 0
    delay_corr_pct: float = 0.0
    loss_pct: float = 0.0
    loss_corr_pct: float = 0.0
    duplicate_pct: float = 0.0
    duplicate_corr_pct: float = 0.0
    corrupt_pct: float = 0.0
    corrupt_corr_pct: float = 0.0
    reorder_pct: float = 0.0
    reorder_corr_pct: float = 0.0
    queue: Queue | None = None  # None: DEFAULT_QUEUE
    burst: Burst | None = None  # None: the mode's default
    loss_model: object = None  # a lossmodel.LossModel: burst loss, in place of loss_pct
    slot: object = None  # a macslot.Slot: packets held and let out together
    aqm: object = None  # an aqm.Aqm: the queue managed (fq_codel, ...) instead of droptail

    def as_dict(self) -> dict:
        """The fields that are set, as JSON-able data (queue, burst, loss model, slot, AQM as text)."""
        return {k: (v.text() if hasattr(v, "text") else v) for k, v in self.__dict__.items() if v}

    @classmethod
    def from_dict(cls, data: dict) -> "LinkParams":
        """The inverse of ``dataclasses.asdict`` (state files, the web API), bar the loss
        model, the slot and the AQM (``from_record`` in ``lossmodel``, ``macslot``, ``aqm``)."""
        values = dict(data)
        for name, kind in (("queue", Queue), ("burst", Burst)):
            if isinstance(values.get(name), dict):
                values[name] = kind(**values[name])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def needs_netem(self) -> bool:
        return bool(self.delay_us or self.jitter_us or self.loss_pct or self.loss_model or self.slot
                    or self.duplicate_pct or self.corrupt_pct or self.reorder_pct)

    def merged(self, **overrides) -> "LinkParams":
        """A copy with the given fields replaced (``None`` values are ignored).  Loss is one
        choice: a loss model given puts the percentage and its correlation to 0, and a
        percentage given takes the model away."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if given.get("loss_model") is not None:
            given.setdefault("loss_pct", 0.0)
            given.setdefault("loss_corr_pct", 0.0)
        elif "loss_pct" in given:
            given["loss_model"] = None
        return replace(self, **given)

@dataclass(frozen=True)
class Profile:
    name: str
    description: str = ""
    source: str = ""
    down: LinkParams = field(default_factory=LinkParams)
    up: LinkParams = field(default_factory=LinkParams)
    link: LinkLayer = ETHERNET
    reference_bps: int | None = None  # payload rate a real device of this kind reached (bits/s)
    path: str = ""
    trace: object = None  # a tracespec.TraceAsk: its links follow traces or a schedule (read when applied)

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source, "path": self.path,
                "link": self.link.describe(), "reference_bps": self.reference_bps,
                "down": self.down.as_dict(), "up": self.up.as_dict()}


def v03_burst_bytes(rate_bps: int, burst: int, mtu_bytes: int) -> int:
    """ratelimit v0.3's burst: ``rate x burst / 8`` bytes, never so small that a full packet
    could not pass (``min_police_burst``)."""
    return max(min_police_burst(rate_bps, mtu_bytes), rate_bps * burst // 8)


def min_police_burst(rate_bps: int, mtu_bytes: int) -> int:
    """The smallest policer burst that passes an ``mtu_bytes`` packet: the burst travels as
    whole microseconds at the rate (tc's xmittime), so exactly one MTU rounds down below
    the packet and every full-size packet would be dropped (measured)."""
    return mtu_bytes + math.ceil(rate_bps / 8e6) + 1


@dataclass(frozen=True)
class Cell:
    """A capacity the links of a cohort share, per direction, on top of each link's own cap:
    a cell tower, a DSLAM's backhaul, a DOCSIS channel (docs/cells.md).  ``None`` leaves
    that direction unshared.  A direction may instead follow a trace or a schedule
    (``trace``, a ``tracespec.TraceSpec``): the driver sets the cell's class step by step.

    >>> Cell("tower-1", 20_000_000, 5_000_000).side_bps("dest")
    20000000
    """

    name: str
    down_bps: int | None = None
    up_bps: int | None = None
    trace: object = None  # a tracespec.TraceSpec: its capacity follows traces or a schedule
    blackhole: bool = False  # every packet of its users is dropped (docs/faults.md)

    def traced(self, direction: str):
        """The ``tracespec.Source`` ``direction`` (dest/source, down/up) follows, or None."""
        return None if self.trace is None else self.trace.source(direction)

    def side_bps(self, direction: str) -> int | None:
        """The capacity of ``direction`` (dest: down, source: up); a traced one's is its
        trace's mean, scaled (what the driver sets moves around it)."""
        src = self.traced(direction)
        if src is not None:
            return max(8, round(src.mean_bps * self.trace.scale))
        return self.down_bps if direction in ("dest", "down") else self.up_bps


@dataclass(frozen=True)
class Cohort:
    """A set of flows that share a link kind: who (client hosts, and their ports or every
    packet of theirs), how (one direction's parameters each way, the link layer, the burst)
    and how fine (a link per (host, port), per host, or one shared by all its flows: an
    office behind one line).  Its ``name`` is its identity in
    the plan, the record, the statistics and a re-apply's diff ("cohort" is not "group":
    groups are the 256-link HTB qdiscs a cohort's links are spread over)."""

    name: str
    hosts: tuple[IPAddress, ...]
    ports: tuple[tuple[int, int], ...] | None  # None: every packet of each host (per host or shared)
    down: LinkParams
    up: LinkParams
    per: str = "port"  # "port": a link per (host, port); "host": one per host, all its ports; "shared": one in all
    link: LinkLayer = ETHERNET
    profile: str | None = None
    burst: Burst | None = None  # overrides the sides' bursts (the command line's --burst)
    mpu_bytes: int = 64
    servers: tuple | None = None  # the far side's address prefixes (None: every server)
    others: bool = False  # the default cohort: no hosts, one link for every flow no other cohort selects
    server_ports: tuple | None = None  # the far side's port ranges (None: any)
    # hosts given by name that resolve to addresses once, at apply (--hosts container:NAME):
    # ((name, (address, ...)), ...), kept for the record; the addresses are among ``hosts``
    named: tuple = ()
    trace: object = None  # a tracespec.TraceSpec: the links' rates follow traces or a schedule
    cell: Cell | None = None  # the capacity its links share, beside each one's own
    blackhole: bool = False  # its links drop every packet: a link that went away (docs/faults.md)
    reject: bool = False  # its flows are refused: TCP resets, ICMP unreachable (plan.reject)

    @property
    def dark(self) -> bool:
        """Whether its links drop every packet: it is blackholed, or its cell is."""
        return self.blackhole or (self.cell is not None and self.cell.blackhole)

    def side(self, direction: str) -> LinkParams:
        """One side's link parameters: ``down`` for a plan's ``dest``, ``up`` for ``source``."""
        return self.down if direction == "dest" else self.up

    def servers_for(self, family: int) -> tuple:
        """The server prefixes a host of ``family`` (4 or 6) talks to: (None,) for any."""
        if self.servers is None:
            return (None,)
        return tuple(s for s in self.servers if s.version == family)

    def far_for(self, family: int) -> tuple:
        """The far sides a host of ``family`` talks to, one filter each: (server prefix or
        None, (port value, mask) or None) -- a port range takes the fewest aligned blocks."""
        if self.servers is None and self.server_ports is None:
            return (None,)
        blocks = (None,) if self.server_ports is None else \
            tuple(b for lo, hi in self.server_ports for b in port_blocks(lo, hi))
        return tuple((s, b) for s in self.servers_for(family) for b in blocks)

    def flow_count(self) -> int:
        """Selected (host, port) pairs (a whole host counts one), each once per far side of its
        family (``far_for``): the filters a tree holds per direction."""
        ports = 1 if self.ports is None else sum(hi - lo + 1 for lo, hi in self.ports)
        if self.servers is None and self.server_ports is None:
            return len(self.hosts) * ports
        return sum(len(self.far_for(h.version)) for h in self.hosts) * ports

    def link_count(self) -> int:
        """Emulated links per direction: a (host, port) each, a host each, or one in all (shared)."""
        ports = 1 if self.ports is None else sum(hi - lo + 1 for lo, hi in self.ports)
        return {"host": len(self.hosts), "shared": 1}.get(self.per) or len(self.hosts) * ports


def port_blocks(lo: int, hi: int) -> list[tuple[int, int]]:
    """Ports ``lo``..``hi`` as the fewest (value, mask) pairs a 16-bit match takes."""
    out = []
    while lo <= hi:
        size = lo & -lo if lo else 1 << 16
        while size > hi - lo + 1:
            size >>= 1
        out.append((lo, 0xFFFF & ~(size - 1)))
        lo += size
    return out


MAIN_COHORT = "main"  # the one cohort of a request made from the command line's link options


@dataclass(frozen=True)
class Request:
    """Everything the compiler needs: the device's settings and its cohorts, in order
    (their links take handles in that order); hosts are already resolved to addresses.
    A request of one cohort (the command line's) gives it as ``only``."""

    interface: str
    cohorts: tuple[Cohort, ...]
    mode: str = "police"
    direction: str = "both"
    netns: str | None = None
    bandwidth_bps: int = 100_000_000
    mtu_bytes: int = 1514
    avpkt_bytes: int = 1200
    # which of two sets of kernel handles the plan uses (0 or 1): a re-apply with other
    # selectors builds its plan in the set the installed plan leaves free (``diff``)
    generation: int = 0
    # shape mode: where each cohort's groups and queues are (``layout.Place``, one per
    # cohort, in order); None packs them in the generation's handles.  A re-apply that
    # changes some cohorts keeps the others where they stand (``layout.replace``)
    places: tuple | None = None
    # the container the links are for (--container), as resolved at apply:
    # (engine, name, id, network, use) with use "server" (links on its own interface, in
    # its namespace) or "user" (one link for it on its host-side veth); None: no container
    container: tuple | None = None
    # shape mode: the device's tx queues used, each with its own HTB tree under an mq root
    # (``layout.queue_of`` places each group); 1: one tree at the root, as before queues
    queues: int = 1
    # shape mode: how slots are numbered as qdisc majors (``layout.major``): 2, the groups'
    # qdiscs in one bucket of the device's qdisc hash that the links' queues leave alone and
    # generation 1's groups just below generation 0's; 1, the same with generation 1's groups
    # from 7fff: down (a record with ``group_bucket``); 0, in slot order (a record with neither)
    numbering: int = 2
    # shape mode: links per group qdisc; None: the layout's for the queues (256 with one tree,
    # 512 with several: ``layout.group_links_of``).  A record written before the size
    # depended on the queues reads 256 and keeps it over re-applies
    group_links: int | None = None
    # the interface faces the server, not the clients: down (``dest``) is what arrives on it,
    # through its IFB device, and up (``source``) what it sends; the match on each direction
    # stays the clients' address (a server container's host-side veth, outside the server's
    # own network stack).  False: down is what it sends, as on a router's client side
    server_side: bool = False
    # how long the plan lasts from its apply (``--for``), when it ends (Unix time, ms, set by
    # the apply), and the plan installed before it (its record's JSON text; None: nothing),
    # which is put back then (docs/faults.md, "Faults that end")
    lasting_ms: int | None = None
    expires_ms: int | None = None
    restores: str | None = None

    @classmethod
    def single(cls, interface: str, hosts, ports, down: LinkParams, up: LinkParams, *, per: str = "port",
               link: LinkLayer = ETHERNET, profile: str | None = None, burst: "Burst | None" = None,
               mpu_bytes: int = 64, name: str = MAIN_COHORT, **device) -> "Request":
        """A request of one cohort (the command line's link options)."""
        return cls(interface, (Cohort(name, tuple(hosts), ports if ports is None else tuple(ports), down, up, per,
                                      link, profile, burst, mpu_bytes),), **device)

    @property
    def only(self) -> Cohort:
        """The request's one cohort; ValueError for a request of several."""
        if len(self.cohorts) != 1:
            raise ValueError(f"a request of {len(self.cohorts)} cohorts has no single cohort")
        return self.cohorts[0]

    @property
    def arriving(self) -> str:
        """The direction that arrives on the interface: ``source`` (up, from the clients) on a
        router's client side, ``dest`` (down) on a server's (``server_side``)."""
        return "dest" if self.server_side else "source"

    @property
    def traced_start_ms(self) -> int | None:
        """When the plan's traces started (Unix time, ms): the earliest of its traced cohorts'
        starts, the plan's time 0.  None: no cohort is traced, or one has no start (not
        applied, or applied by an older ratelimit).  A re-apply that restarts one cohort at
        20,000 and keeps another's from 10,000 has started at 10,000."""
        starts = [spec.started_ms for spec in self.trace_specs()]
        return None if not starts or None in starts else min(starts)

    def trace_specs(self) -> list:
        """Every ``tracespec.TraceSpec`` the plan follows: its traced cohorts', then its traced
        cells' (each cell once)."""
        cells = {c.cell.name: c.cell.trace for c in self.cohorts if c.cell is not None and c.cell.trace is not None}
        return [c.trace for c in self.cohorts if c.trace is not None] + list(cells.values())

    def burst_of(self, params: LinkParams, cohort: Cohort | None = None) -> Burst:
        """The burst one side's links get: --burst, else the side's, else the mode's default."""
        return (cohort or self.only).burst or params.burst or DEFAULT_BURST[self.mode]

    def burst_bytes(self, params: LinkParams, rate_bps: int, cohort: Cohort | None = None) -> int:
        return self.burst_of(params, cohort).bytes_at(rate_bps, self.mtu_bytes)

    def line_mtu_bytes(self, cohort: Cohort | None = None) -> int:
        """The largest packet in line bytes (the MTU frame through the cohort's link layer)."""
        return (cohort or self.only).link.frame_bytes(self.mtu_bytes - ETHERNET_HEADER_BYTES)

    def queue_bytes(self, params: LinkParams, rate_bps: int, cohort: Cohort | None = None) -> int:
        """One side's queue per link, in line bytes: the side's own, else the larger of
        ``DEFAULT_QUEUE`` at the rate and ``DEFAULT_QUEUE_PKTS`` full packets."""
        mtu = self.line_mtu_bytes(cohort)
        if params.queue is not None:
            return params.queue.bytes_at(rate_bps, mtu)
        return max(DEFAULT_QUEUE.bytes_at(rate_bps, mtu), DEFAULT_QUEUE_PKTS * mtu)

    def queue_packets(self, params: LinkParams, rate_bps: int, cohort: Cohort | None = None) -> int:
        """The same queue in packets (netem counts packets): full-size ones for bytes and times."""
        if params.queue is not None and params.queue.unit == "pkts":
            return params.queue.amount
        return math.ceil(self.queue_bytes(params, rate_bps, cohort) / self.line_mtu_bytes(cohort))

    def flow_count(self) -> int:
        """Selected (host, port) pairs over every cohort."""
        return sum(c.flow_count() for c in self.cohorts)

    def link_count(self) -> int:
        """Emulated links per direction over every cohort."""
        return sum(c.link_count() for c in self.cohorts)

    def cohort(self, name: str) -> Cohort | None:
        return next((c for c in self.cohorts if c.name == name), None)


# Defaults chosen by measurement (docs/profiles.md, "Burst" and "Queue").
DEFAULT_BURST = {"shape": Burst(1000, "us"), "police": Burst(4 * 1514, "bytes")}
DEFAULT_QUEUE, DEFAULT_QUEUE_PKTS = Queue(200_000, "us"), 10
