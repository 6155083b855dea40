"""Every check a request passes before anything reaches the kernel, pure: its device and
cohorts (``_validate``), and its layout (``_validate_layout``: the handles hold it, each
cohort's link layer can be metered beside the device's).  ``checked_layout`` is all of them: the
compiler runs it first, and a record read back is checked with it (no operations built).
"""

import re
from dataclasses import astuple

from ..errors import FieldError, UsageError
from ..spec import aqm, lossmodel, macslot
from ..spec.cells import check_cells
from ..spec.model import DIRECTIONS, GRANULARITIES, MODES, Cohort, min_police_burst, Request
from ..spec.names import check_target
from ..spec.units import MAX_DURATION_MS
from ..traces.tracespec import check as check_trace
from .layout import (GENERATIONS, MAX_FLOWS, MAX_GROUP_LINKS, MAX_POLICED_HOSTS, MAX_QUEUES, NUMBERINGS, carried,
                     group_links_of, Handles, handles, Layout, max_shape_links, Place)


def checked_layout(req: Request) -> Layout:
    """Every check ``compile_plan`` makes of a request, without building its operations;
    its layout (a record read back is checked this way: compiling 65,536 links takes a
    second, its layout a tenth of that)."""
    _validate(req)
    size = group_links_of(req)
    if type(size) is not int or not 1 <= size <= MAX_GROUP_LINKS:
        raise FieldError("group links", size, f"is not a number of links from 1 to {MAX_GROUP_LINKS} "
                                              "(the class minors of a group's qdisc)")
    check_cells(req.cohorts, req.mode)
    for name, value, hi in (("--for", req.lasting_ms, MAX_DURATION_MS), ("expiry", req.expires_ms, 1 << 53)):
        if value is not None and (type(value) is not int or not 0 < value <= hi):
            raise FieldError(name, value, "is not a time in ms ratelimit records")
    if req.restores is not None and type(req.restores) is not str:
        raise FieldError("the plan before", type(req.restores).__name__, "is not a record's text")
    lay = Layout.of(req)
    _validate_layout(req, lay)
    return lay


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
    _validate_queues(req)
    n = req.flow_count()
    if n > MAX_FLOWS:
        raise FieldError("--hosts/--ports", f"{n} flows", f"are too many (at most {MAX_FLOWS})")
    if req.generation not in range(len(GENERATIONS)):
        raise FieldError("generation", req.generation, f"is not a generation (0-{len(GENERATIONS) - 1})")
    if req.numbering not in NUMBERINGS:
        raise FieldError("numbering", req.numbering, f"is not a numbering ({', '.join(map(str, NUMBERINGS))})")
    if req.places is not None and (req.mode != "shape" or len(req.places) != len(req.cohorts) or not all(
            isinstance(p, Place) and all(type(v) is int for v in astuple(p)) for p in req.places)):
        raise FieldError("places", f"{len(req.places)} places", f"do not place the {len(req.cohorts)} cohorts "
                         "of a shape-mode plan (one handle place each)")
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


def _validate_queues(req: Request) -> None:
    """Several tx queues: shape mode (a tree per queue), and flows told apart by the client's
    address and port alone (the queue map's key)."""
    q = req.queues
    if type(q) is not int or not 1 <= q <= MAX_QUEUES:
        raise FieldError("--queues", q, f"is not a number of tx queues from 1 to {MAX_QUEUES} (or auto)")
    if q == 1:
        return
    if req.server_side:
        raise FieldError("--queues", q, "spreads the links a device sends, and a server's links come in on its "
                         "host-side veth (through an IFB device); use --queues 1")
    if req.mode != "shape":
        raise FieldError("--queues", q, "needs --mode shape (police mode's policers ride on one u32 tree); "
                         "use --queues 1")
    for c in req.cohorts:
        if c.servers is not None or c.server_ports is not None:
            raise FieldError("--queues", q, f"pins flows by the client's address and port only, and cohort "
                             f"'{c.name}' also selects servers; use --queues 1")


def _validate_cohort(req: Request, c: Cohort) -> None:
    where = "" if len(req.cohorts) == 1 else f"cohort '{c.name}': "

    def fail(field, value, why):
        raise FieldError(f"{where}{field}", value, why)
    if not isinstance(c.name, str) or not COHORT_NAME.fullmatch(c.name):
        raise FieldError("cohort name", f"'{c.name}'", "is not a name (letters, digits, '.', '_' or '-'; at most 32, "
                                                        "starting with a letter or digit)")
    if c.per not in GRANULARITIES:
        fail("--per", c.per, f"is not a link granularity ({', '.join(GRANULARITIES)})")
    if c.others:
        if c.hosts or c.ports is not None or c.servers is not None or c.server_ports is not None or c.per != "shared":
            raise UsageError(f"{where}the default cohort takes every flow no other cohort selects, as one link: "
                             "it has no hosts, ports or servers of its own")
        if req.mode != "shape":
            raise UsageError(f"{where}--mode: a default cohort needs shape mode (police mode has no link for "
                             "what no filter selects)")
        if c is not req.cohorts[-1]:
            raise UsageError(f"{where}the default cohort comes last (it takes what the others leave)")
    elif not c.hosts:
        raise UsageError(f"{where}--hosts: none given (comma-separated names or addresses)")
    if c.server_ports is not None:
        if c.ports is None:
            raise UsageError(f"{where}--server-ports: need the cohort's own --ports (a whole host's packets "
                             "include ICMP and fragments, which carry no port to match)")
        for lo, hi in c.server_ports:
            for p in (lo, hi):
                if not 1 <= p <= 65535:
                    fail("--server-ports", p, "is not a port (1-65535)")
            if lo > hi:
                fail("--server-ports", f"{lo}-{hi}", "is a reversed range (low-high)")
    if c.servers is not None:
        for h in c.hosts:
            if not c.servers_for(h.version):
                fail("--servers", ",".join(map(str, c.servers)), f"hold no IPv{h.version} server for host {h} "
                     "(a host talks to servers of its own family)")
    if c.ports is None:
        if c.per == "port":
            raise UsageError(f"{where}--ports: every port (all) needs --per host or shared: a link per host, or one "
                             "for the cohort")
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
    if c.trace is not None:
        check_trace(c.trace, req.mode, where)
    if c.dark and req.mode != "shape":
        raise UsageError(f"{where}--blackhole: needs --mode shape (a blackholed link is a queue that holds nothing; "
                         "police mode has no queues)")
    if type(c.blackhole) is not bool:
        fail("--blackhole", c.blackhole, "is not true or false")
    if c.reject:
        _check_reject(req, c, where)
    if c.cell is not None and c.cell.trace is not None:
        check_trace(c.cell.trace, req.mode, f"cell {c.cell.name}: ")
    for side, params in (("down", c.down), ("up", c.up)):
        if params.loss_model is not None:
            lossmodel.check(params.loss_model, f"{where}--loss ({side})")
            if params.loss_pct or params.loss_corr_pct:
                raise UsageError(f"{where}--loss-correlation: applies to a percentage loss; a loss model "
                                 f"({params.loss_model.model}) has its own bursts ({side}link)")
        if params.slot is not None:
            macslot.check(params.slot, f"{where}--slot ({side})")
        if params.aqm is not None:
            _check_aqm(req, c, params, side, where)
        if params.reorder_pct and not params.delay_us:
            raise UsageError(f"{where}--reorder: {params.reorder_pct:g}% needs a delay ({side}link delay is 0)")
        if req.mode == "police" and params.rate_bps:
            rate = carried(req, c, params)
            burst, least = req.burst_bytes(params, rate, c), min_police_burst(rate, req.line_mtu_bytes(c))
            if burst < least:
                fail("--burst", f"'{req.burst_of(params, c).text()}'",
                     f"is {burst} bytes, too small for a full packet ({req.line_mtu_bytes(c)} bytes on "
                     f"this link; at least {least}): the policer would drop every full-size packet")


def _check_reject(req: Request, c: Cohort, where: str) -> None:
    """A reject matches its hosts in nftables rules on the interface (``reject``)."""
    if c.reject is not True:
        raise FieldError(f"{where}--reject", c.reject, "is not true or false")
    if c.dark:
        raise UsageError(f"{where}--reject: not with --blackhole (a link either drops its packets or refuses them)")
    if c.others or not c.hosts:
        raise UsageError(f"{where}--reject: needs hosts (the default cohort's flows are all the others; name them)")
    if req.server_side or req.container is not None:
        raise UsageError(f"{where}--reject: not on a container's interface (the rules match a router's "
                         "forwarded and own packets)")
    if not _NFT_NAME.fullmatch(req.interface):
        raise FieldError(f"{where}--reject: interface", req.interface,
                         "has characters nft does not take in a name (letters, digits and _ . + @ % = , - only)")


_NFT_NAME = re.compile(r"[A-Za-z0-9_.+@%=,-]+")


def _check_aqm(req: Request, c: Cohort, params, side: str, where: str) -> None:
    """A managed queue is one ``parse_aqm`` could make, on a link that has a queue of its own."""
    aqm.check(params.aqm, f"{where}--aqm ({side})")
    if not params.aqm.managed:
        return
    name = params.aqm.discipline
    if req.mode != "shape":
        raise UsageError(f"{where}--aqm: {name} needs --mode shape (police mode drops above the rate; it has no queue "
                         "to manage)")
    if c.trace is not None and c.trace.source("dest" if side == "down" else "source") is not None:
        raise UsageError(f"{where}--aqm: {name} on a link that follows a trace or a schedule is not supported yet "
                         f"(its gate holds the queue; {side}link)")
    if c.dark and name == "cake" and not params.needs_netem():
        raise UsageError(f"{where}--blackhole: a cake queue has no packet limit to shut in place; give the link a "
                         "delay, or use fq_codel")


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
                server = _shared_server(a.servers_for(host.version), b.servers_for(host.version))
                if server is not False and _shared_port(a.server_ports, b.server_ports) is False:
                    server = False
                if port is not False and server is not False:
                    flow = f"{host}" if port is None else f"{host} port {port}"
                    flow += "" if server is None else f" with server {server}"
                    raise UsageError(f"cohorts '{a.name}' and '{b.name}' both select {flow}: a flow gets one link "
                                     "(narrow one cohort's hosts, ports or servers)")


def _shared_server(a, b):
    """An address both cohorts' server prefixes hold (None: both take every server), or False."""
    for x in a:
        for y in b:
            if x is None and y is None:
                return None
            if x is None or y is None or x.overlaps(y):
                narrow = y if x is None else x if y is None else max(x, y, key=lambda n: n.prefixlen)
                return narrow.network_address
    return False


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
    h = handles(req.generation, req.numbering)
    if req.places is not None:
        _validate_places(req, lay)
    elif req.mode == "shape" and not _fits(h, lay.leaves, lay.groups):
        most = max_shape_links(h)
        extra = f" in {len(req.cohorts)} cohorts of whole groups" if len(req.cohorts) > 1 else ""
        two = "; a traced link with a delay stage counts twice" if lay.leaves > lay.links else ""
        raise FieldError("--hosts/--ports", f"{lay.links} links{extra}",
                         f"are too many for shape mode (at most {most}{two}; police mode takes more)")
    for c in req.cohorts:
        over, _ = lay.overhead(c)
        if not 0 <= over <= 0xFFFF:
            raise UsageError(f"cohort '{c.name}': its link layer {c.link.name} (overhead {c.link.overhead_bytes}) "
                             f"cannot be metered beside {lay.base.link.name} (overhead {lay.base.link.overhead_bytes}) "
                             "on one device: a class adds to a packet's length, never takes from it")


def _validate_places(req: Request, lay: "Layout") -> None:
    """Given places (a re-apply's, or a record's), none is outside the handle space or
    another cohort's."""
    clash = lay.clash()
    if clash:
        span, other = clash
        where = f"overlap cohort '{other.cohort.name}'s" if other else "are outside the handle space"
        raise FieldError("places", f"cohort '{span.cohort.name}' at {astuple(span.place)}", f"{where}")


def _fits(h: "Handles", leaves: int, groups: int) -> bool:
    """Whether ``leaves`` queue majors and ``groups`` groups fit the generation's handles."""
    if h.leaf_base > h.group_top:
        return h.leaf_base + leaves - 1 <= h.leaf_top
    return h.leaf_base + leaves <= h.group_top - groups
