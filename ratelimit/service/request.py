"""A request made from what a person typed: ``Options`` holds every option, as typed, that
the command line, the dashboard's API and the lab fill in; ``request_of`` checks it and
resolves it into a ``Request`` (units, selectors, profiles, traces: the edge).

>>> opts = Options("eth0", hosts="198.18.0.2", ports="1024-1031", profile="modem-28k8")
>>> request_of(opts).only.down.rate_bps
28800
"""

import dataclasses

from ..errors import FieldError, UsageError
from ..plan import layout
from ..plan.validate import checked_layout
from ..profiles import catalog, scenario as scenarios, traced
from ..spec import linklayer
from ..spec.cells import cell_order, parse_cell
from ..spec.model import GRANULARITIES, MAIN_COHORT, Cohort, LinkParams, Request
from ..spec.names import check_target
from ..spec.selectors import parse_hosts, parse_ports, parse_servers
from ..spec.units import parse_burst, parse_count, parse_duration_ms, parse_queue, parse_rate_bps, parse_size_bytes
from ..state.installed import check_interface, executor
from ..traces import tracespec
from ..traces.phases import Phase, SAME

DEFAULT_RATE_BPS = 28800
_DIRECTION_WORDS = {"source": "source", "src": "source", "dest": "dest", "dst": "dest",
                    "destination": "dest", "both": "both"}

# option name -> (LinkParams field, parser): the profile fields that are netem impairments
IMPAIRMENTS = {name: spec for name, spec in catalog.SIDE_FIELDS.items() if name not in ("rate", "queue", "burst")}
V03_BURST = "5"  # the bare command line's police burst, as in v0.3: rate x 5 / 8 bytes


_DOC = """Every option of a request, as a person typed it (strings with units, host names, a
    profile's name); None leaves an option to the profile or the default.  The command
    line's options, the API's JSON fields and the lab's link options are these fields.

    ``mode`` None: shape with a profile or traces (the links they describe queue), police
    without (v0.3).  ``per`` None: a link per host with ``mix``, else per (host, port).
    ``mpu`` None: the link layer's (``linklayer.min_frame_bytes``).  ``burst`` None: the
    profile's, else the mode's default; without a profile, police mode keeps v0.3's
    ``--burst 5``.  ``link`` names a link layer (``linklayer.LAYERS``) over the profile's.
    ``ports`` None or "all" with ``per`` "host": every packet of each host.  ``servers``,
    ``server_ports``: only the flows to and from these address prefixes and ports (default
    any).  ``queues``: the tx queues the links are spread over, each with its own tree (shape
    mode), or "auto": every tx queue of the interface (read once, unless ``device_queues``
    says how many it has: the lab makes its devices; 1 in police mode or with cohorts that
    select servers).  ``scenario`` (a list of ``scenario.Ask``) or ``mix`` (``--mix`` text,
    over ``hosts``) make a request of several cohorts; the link options given here then
    apply to every cohort, over its own.  The trace options (``tracespec.KEYS``) make every
    cohort's links follow a trace or a schedule, over a profile's or a cohort's own.  The
    impairments (``IMPAIRMENTS``: delay, jitter, loss, ... and their correlations) are
    netem's, over every cohort's.  ``cell``: ``DOWN[/UP]``, a capacity the links share beside
    their own caps, every cohort of a mix's together (``cells.parse_cell``; a scenario names
    its cells).  ``aqm``: the links' queues are managed (shape mode, its default then;
    ``aqm.parse_aqm``).  ``blackhole``: every cohort's links drop every packet (shape mode, its
    default then; docs/faults.md).  ``reject``: every cohort's flows are refused, a TCP reset or
    ICMP port unreachable (``plan.reject``).  ``lasting`` (``--for``; a scenario's ``for``): how long
    the plan lasts from its apply, then it is removed (``units.parse_duration_ms``)."""

# (option, default) in the order the API's errors list them; the impairments and the trace
# options are named where they are parsed (``catalog.SIDE_FIELDS``, ``tracespec.KEYS``)
_OWN = (("interface", "eth0"), ("netns", None), ("profile", None), ("hosts", None), ("ports", None),
        ("mode", None), ("direction", "both"), ("rate", None), ("burst", None), ("bandwidth", "100mbit"),
        ("mtu", 1514), ("avpkt", 1200), ("mpu", None), ("queue", None), ("per", None), ("link", None),
        ("mix", None), ("scenario", None), ("servers", None), ("server_ports", None), ("cell", None),
        ("blackhole", None), ("reject", None), ("lasting", None))
_DEFAULTS = (*_OWN, *((name, None) for name in IMPAIRMENTS), ("queues", 1), *((key, None) for key in tracespec.KEYS),
             ("device_queues", None))

Options = dataclasses.make_dataclass(
    "Options", [(name, object, dataclasses.field(default=default)) for name, default in _DEFAULTS], frozen=True,
    namespace={"__doc__": _DOC, "__module__": __name__,
               "impairments": lambda self: {name: getattr(self, name) for name in IMPAIRMENTS},
               "traces": lambda self: {key: getattr(self, key) for key in tracespec.KEYS}})

FIELDS = tuple(f.name for f in dataclasses.fields(Options))


def make_request(interface: str = "eth0", **options) -> Request:
    """``request_of(Options(interface, **options))``; an unknown option is a FieldError.

    >>> make_request("eth0", hosts="198.18.0.2", ports="1024", rate="56kbit").only.down.rate_bps
    56000
    """
    unknown = sorted(set(options) - set(FIELDS))
    if unknown:
        raise FieldError("option", unknown[0], f"is not an option ({', '.join(FIELDS[1:])})")
    return request_of(Options(interface, **options))


def request_of(o: Options) -> Request:
    """Check what ``o`` asks for and return the request (host names resolved here, once);
    the one-line error names the option, the value and what is allowed."""
    interface, netns = check_target(o.interface, o.netns)
    if o.direction not in _DIRECTION_WORDS:
        raise FieldError("--direction", o.direction, "is not a direction (source, dest[ination], both)")
    overrides = dict(catalog.side_value(name, getattr(o, name), f"--{name.replace('_', '-')}")
                     for name in IMPAIRMENTS if getattr(o, name) is not None)
    if o.rate is not None:
        overrides["rate_bps"] = parse_rate_bps(o.rate, "--rate")
    if o.queue is not None:
        overrides["queue"] = parse_queue(o.queue, "--queue")
    burst = None if o.burst is None else parse_burst(o.burst, "--burst")
    device = dict(netns=netns or None, direction=_DIRECTION_WORDS[o.direction],
                  bandwidth_bps=parse_rate_bps(o.bandwidth, "--bandwidth"),
                  mtu_bytes=parse_size_bytes(o.mtu, "--mtu"), avpkt_bytes=parse_size_bytes(o.avpkt, "--avpkt"))
    if o.scenario is not None and o.mix is not None:
        raise UsageError("--scenario and --mix: give one of them")
    per = o.per or ("host" if o.mix is not None else "port")
    traces = tracespec.ask(o.traces(), tracespec.KEYS)
    if o.scenario is not None or o.mix is not None:
        if o.cell is not None and o.scenario is not None:
            raise UsageError("--cell: a scenario names its cells ([cell.NAME], and cell = NAME in a cohort)")
        if o.profile is not None:
            raise UsageError("--profile: a scenario or a mix names each cohort's profile")
        if o.scenario is not None and (o.hosts is not None or o.ports is not None or o.servers is not None
                                       or o.server_ports is not None):
            raise UsageError("--hosts/--ports/--servers: a scenario names each cohort's hosts, ports and servers")
        cell = None if o.cell is None else parse_cell(o.cell, "--cell")  # with a mix: every cohort in it
        asks = o.scenario if o.scenario is not None else \
            [dataclasses.replace(a, servers=o.servers, server_ports=o.server_ports, cell=cell) for a in
             scenarios.mix(o.mix, parse_hosts(o.hosts), None if _all_ports(o.ports) else parse_ports(o.ports), per)]
        mode = o.mode or "shape"
        cohorts = cell_order(tuple(_cohort(a, mode, overrides, burst, o.link, o.mpu, traces, o.blackhole, o.reject)
                                   for a in asks))
        req = Request(interface, cohorts, mode=mode, **device)
    else:
        if per == "port" and o.ports is not None and _all_ports(o.ports):
            raise UsageError("--ports: all (every packet of a host) needs --per host or shared")
        ask = scenarios.Ask(MAIN_COHORT, "", o.hosts, None if _all_ports(o.ports) and per != "port" else o.ports,
                            per, o.profile, servers=o.servers, server_ports=o.server_ports,
                            cell=None if o.cell is None else parse_cell(o.cell, "--cell"))
        mode = o.mode or ("shape" if o.profile or traces or o.blackhole or o.aqm else "police")
        req = Request(interface, (_cohort(ask, mode, overrides, burst, o.link, o.mpu, traces, o.blackhole, o.reject),),
                      mode=mode, **device)
    req = dataclasses.replace(req, queues=_queues(o.queues, req, o.device_queues), lasting_ms=_lasting(o))
    checked_layout(req)  # every remaining check, before anything touches the router (apply compiles it)
    return req


def _queues(queues, req: Request, count: int | None) -> int:
    """--queues: a number, or "auto": the interface's tx queues (``count``, else read) where
    several trees can be used (shape mode, no cohort selecting servers), else 1."""
    if str(queues).strip().lower() != "auto":
        return parse_count(queues, "--queues", 1, layout.MAX_QUEUES)
    if req.mode != "shape" or any(c.servers is not None or c.server_ports is not None for c in req.cohorts):
        return 1
    interface, netns = req.interface, req.netns
    if count is None:
        with executor(netns) as ex:
            check_interface(ex, interface, netns)
            count = ex.links.tx_queues(interface)
    if count > layout.MAX_QUEUES:
        raise FieldError("--queues", "auto", f"finds {count} tx queues on {interface}, more than the "
                         f"{layout.MAX_QUEUES} ratelimit spreads links over; give --queues N")
    return count


def for_container(req: Request, container: tuple | None, named: tuple, server_side: bool = False) -> Request:
    """``req`` noting the container it is for (``Request.container``, None for none) and,
    on its one cohort, the hosts given by container name (``Cohort.named``); ``server_side``:
    the links face the container, a server (``targets.ContainerTarget.server_side``)."""
    cohorts = req.cohorts if not named or len(req.cohorts) != 1 else \
        (dataclasses.replace(req.cohorts[0], named=tuple(named)),)
    return dataclasses.replace(req, container=None if container is None else tuple(container), cohorts=cohorts,
                               server_side=server_side)


def _all_ports(ports) -> bool:
    return ports is None or str(ports).strip().lower() == "all"


def _cohort(ask, mode: str, overrides: dict, burst, link, mpu, traces=None, blackhole=None, reject=None) -> Cohort:
    """One cohort: its profile, its own options over it, then the command line's over both
    (``traces``: the command line's ``tracespec.TraceAsk``; ``blackhole``: every cohort's
    links drop every packet; ``reject``: every cohort's flows are refused)."""
    at = f"{ask.where} " if ask.where else ""

    def named(key: str) -> str:  # the field's name in errors: --key on the command line
        if key == "profile" and ask.where == f"--mix {ask.profile}":
            return "--mix"  # the mix's cohort is named for its profile: say the name once
        return f"{at}{key}" if at else f"--{key}"
    prof = catalog.load(ask.profile, named("profile")) if ask.profile else None
    down = prof.down if prof else LinkParams(rate_bps=DEFAULT_RATE_BPS)
    up = prof.up if prof else LinkParams(rate_bps=DEFAULT_RATE_BPS)
    own = {}
    for key, value in ask.options.items():
        attr, parsed = catalog.side_value(key, value, named(key))
        own[attr] = parsed
    own_burst = own.pop("burst", None)
    burst = own_burst if burst is None else burst  # the command line's, else the cohort's, over both sides
    if burst is None and prof is None and mode == "police":
        burst = parse_burst(V03_BURST, "--burst")
    name = link or ask.link
    layer = linklayer.layer(name, field="--link" if link else named("link")) if name else \
        (prof.link if prof else linklayer.ETHERNET)
    if mpu is not None:
        mpu_bytes = parse_count(mpu, "--mpu", 0, 65535)
    elif ask.mpu is not None:
        mpu_bytes = parse_count(ask.mpu, named("mpu"), 0, 65535)
    else:
        mpu_bytes = linklayer.min_frame_bytes(layer)
    if ask.per not in GRANULARITIES:
        raise FieldError(named("per"), ask.per, f"is not a link granularity ({', '.join(GRANULARITIES)})")
    if ask.ports is None and ask.per == "port":
        parse_ports(None, named("ports"))  # "none given"
    ports = ask.ports if ask.ports is None or isinstance(ask.ports, tuple) else \
        parse_ports(ask.ports, named("ports"))  # pure checks before any name lookup
    servers = None if ask.servers is None else parse_servers(ask.servers, named("servers"))
    server_ports = None if ask.server_ports is None else parse_ports(ask.server_ports, named("server-ports"))
    hosts = ask.hosts if isinstance(ask.hosts, tuple) else parse_hosts(ask.hosts, named("hosts"))
    trace = traced.resolve((prof.trace if prof else None, ask.trace, traces))
    return Cohort(ask.name, hosts, ports, down.merged(**own).merged(**overrides), up.merged(**own).merged(**overrides),
                  ask.per, layer, prof.name if prof else None, burst, mpu_bytes, servers=servers, others=ask.others,
                  server_ports=server_ports, named=ask.named, trace=trace, cell=_cell(ask),
                  blackhole=bool(ask.blackhole or blackhole), reject=bool(ask.reject or reject))


def _lasting(o: Options) -> int | None:
    """How long the plan lasts (ms): ``--for``, else a scenario's ``for``; None: until removed."""
    if o.lasting is not None:
        return parse_duration_ms(o.lasting, "--for")
    asked = next((a.lasting for a in o.scenario or () if a.lasting is not None), None)
    return None if asked is None else parse_duration_ms(*asked)


def _cell(ask):
    """The cell of ``ask``, its trace read (``traced.resolve``; a cell's capacity has one phase,
    its start: ``same``)."""
    if ask.cell is None or ask.cell_trace is None:
        return ask.cell
    return dataclasses.replace(ask.cell, trace=traced.resolve((ask.cell_trace,), Phase(SAME)))


