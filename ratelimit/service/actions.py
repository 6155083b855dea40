"""apply / clean / preview: the changes the CLI, web UI and lab share (reading what is
installed is ``readout``; describing it, ``summary``).

``make_request`` is the edge: it takes what a person typed (strings with
units, host names, a profile name) and returns a validated ``Request``.
``apply`` leaves the interface with the new plan whole or exactly as it was
(``recovery``); over installed links of the same selectors it changes them in
place, over others it builds the new plan beside the old before removing it
(``diff``); nothing is deleted before the kernel is checked against what ratelimit
recorded (``fingerprint``).
"""

import dataclasses
import os
import time

from ..plan import diff, layout, placement
from ..spec import linklayer
from ..profiles import catalog
from ..state import recovery, records
from ..profiles import traced
from ..traces import tracespec
from ..profiles import scenario as scenarios
from ..plan.compile import compile_plan, compiled, ifb_name
from ..plan.validate import checked_layout
from ..errors import ConflictError, FieldError, KernelMissing, PermissionDenied, StateError, UsageError
from ..state.installed import Installed, check_interface, executor, find_installed
from ..spec.model import GRANULARITIES, MAIN_COHORT, Cohort, LinkParams, Request
from ..spec.names import check_target
from ..spec.selectors import parse_hosts, parse_ports, parse_servers
from ..spec.units import parse_burst, parse_count, parse_queue, parse_rate_bps, parse_size_bytes

DEFAULT_RATE_BPS = 28800
_DIRECTION_WORDS = {"source": "source", "src": "source", "dest": "dest", "dst": "dest",
                    "destination": "dest", "both": "both"}

# option name -> (LinkParams field, parser): the profile fields that are netem impairments
IMPAIRMENTS = {name: spec for name, spec in catalog.SIDE_FIELDS.items() if name not in ("rate", "queue", "burst")}
V03_BURST = "5"  # the bare command line's police burst, as in v0.3: rate x 5 / 8 bytes


def make_request(interface: str, *, hosts=None, ports=None, profile: str | None = None, netns: str | None = None,
                 mode: str | None = None, direction: str = "both", rate=None, burst=None,
                 bandwidth="100mbit", mtu=1514, avpkt=1200, mpu=None, queue=None, per: str = "port",
                 link: str | None = None, scenario=None, mix=None, servers=None, server_ports=None, queues=1,
                 device_queues: int | None = None,
                 trace_down=None, trace_up=None, schedule=None, trace_scale=None, phase=None, phase_seed=None,
                 **impairments) -> Request:
    """Validate what a person typed and return the request (resolves host names).

    ``mode`` None: shape with a profile (the links it describes queue), police without
    (v0.3).  ``mpu`` None: the link layer's (``linklayer.min_frame_bytes``).  ``burst`` None:
    the profile's, else the mode's default; without a profile,
    police mode keeps v0.3's ``--burst 5``.  ``link`` names a link layer (``linklayer.LAYERS``)
    over the profile's.  ``ports`` None or "all" with ``per`` "host": every packet of each
    host.  ``servers``, ``server_ports``: only the flows to and from these address prefixes
    and ports (default any).  ``queues``: the tx queues the links are spread over, each with
    its own tree (shape mode), or "auto": every tx queue of the interface (read here, once,
    unless the caller says how many it has, ``device_queues``: the lab makes its devices; 1 in
    police mode or with cohorts that select servers).
    ``scenario`` (a list of ``scenario.Ask``) or ``mix`` (``--mix`` text, over ``hosts``)
    make a request of several cohorts; the link options given here then apply to every
    cohort, over its own.  ``trace_down``/``trace_up`` (mahimahi trace files) or ``schedule``
    (a schedule file), with ``trace_scale``, ``phase`` and ``phase_seed``, make every
    cohort's links follow them, over a profile's or a cohort's own (``tracespec``; shape
    mode by default)."""
    interface, netns = check_target(interface, netns)
    if direction not in _DIRECTION_WORDS:
        raise FieldError("--direction", direction, "is not a direction (source, dest[ination], both)")
    unknown = set(impairments) - set(IMPAIRMENTS)
    if unknown:
        raise FieldError("option", sorted(unknown)[0], f"is not an impairment ({', '.join(IMPAIRMENTS)})")
    overrides = {attr: parser(impairments[name], f"--{name.replace('_', '-')}")
                 for name, (attr, parser) in IMPAIRMENTS.items() if impairments.get(name) is not None}
    if rate is not None:
        overrides["rate_bps"] = parse_rate_bps(rate, "--rate")
    if queue is not None:
        overrides["queue"] = parse_queue(queue, "--queue")
    if burst is not None:
        burst = parse_burst(burst, "--burst")
    device = dict(netns=netns or None, direction=_DIRECTION_WORDS[direction],
                  bandwidth_bps=parse_rate_bps(bandwidth, "--bandwidth"),
                  mtu_bytes=parse_size_bytes(mtu, "--mtu"), avpkt_bytes=parse_size_bytes(avpkt, "--avpkt"))
    if scenario is not None and mix is not None:
        raise UsageError("--scenario and --mix: give one of them")
    traces = tracespec.ask(dict(trace_down=trace_down, trace_up=trace_up, schedule=schedule, trace_scale=trace_scale,
                                phase=phase, phase_seed=phase_seed), tracespec.KEYS)
    if scenario is not None or mix is not None:
        if profile is not None:
            raise UsageError("--profile: a scenario or a mix names each cohort's profile")
        if scenario is not None and (hosts is not None or ports is not None or servers is not None
                                     or server_ports is not None):
            raise UsageError("--hosts/--ports/--servers: a scenario names each cohort's hosts, ports and servers")
        asks = scenario if scenario is not None else \
            [dataclasses.replace(a, servers=servers, server_ports=server_ports) for a in
             scenarios.mix(mix, parse_hosts(hosts), None if _all_ports(ports) else parse_ports(ports), per)]
        mode = mode or "shape"
        cohorts = tuple(_cohort(a, mode, overrides, burst, link, mpu, traces) for a in asks)
        req = Request(interface, cohorts, mode=mode, **device)
    else:
        if per == "port" and ports is not None and _all_ports(ports):
            raise UsageError("--ports: all (every packet of a host) needs --per host or shared")
        ask = scenarios.Ask(MAIN_COHORT, "", hosts, None if _all_ports(ports) and per != "port" else ports, per,
                            profile, servers=servers, server_ports=server_ports)
        mode = mode or ("shape" if profile or traces else "police")
        req = Request(interface, (_cohort(ask, mode, overrides, burst, link, mpu, traces),), mode=mode, **device)
    req = dataclasses.replace(req, queues=_queues(queues, req, device_queues))
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


def _check_queues(ex, req: Request) -> None:
    """The interface sends on a tx queue for each tree (its active queues, which its
    channels may set below the ones it was made with; the IFB device ratelimit makes gets
    them): a link pinned to a queue it does not send on would wrap to another queue's tree."""
    if req.queues == 1 or req.direction == "source":
        return
    have = ex.links.tx_queues(req.interface)
    if have < req.queues:
        raise FieldError("--queues", req.queues, f"is more than {req.interface} sends on ({have} tx queues); "
                         f"use --queues {have} or auto, or give it more (ethtool -L {req.interface}; a veth "
                         f"made with ip link add ... numtxqueues {req.queues})")


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


def _cohort(ask, mode: str, overrides: dict, burst, link, mpu, traces=None) -> Cohort:
    """One cohort: its profile, its own options over it, then the command line's over both
    (``traces``: the command line's ``tracespec.TraceAsk``)."""
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
        attr, parser = catalog.SIDE_FIELDS[key]
        own[attr] = parser(value, named(key))
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
                  server_ports=server_ports, named=ask.named, trace=trace)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionDenied("changing traffic control needs root (run with sudo)")


def _check_kernel(plan) -> None:
    from ..kernel.probe import missing_message, probe
    risky = sorted(plan.features() & {"netem", "police", "ifb", "mirred", "clsact", "bpf", "tbf"})
    if not risky:
        return
    have = probe(risky)
    for feature in risky:
        if not have.get(feature, False):
            raise KernelMissing(missing_message(feature), feature)


def _refuse_foreign(plan, foreign: dict, installed: Installed) -> None:
    """ConflictError for a part the new plan would replace that ratelimit did not install."""
    dev = plan.request.interface
    mine = foreign.get(dev, set())
    root = (installed.picture.get(dev) or {}).get("root")
    if "root" in mine:
        raise ConflictError(f"--interface: {dev} has a root qdisc ratelimit did not install "
                            f"({root[0]} {root[1] >> 16:x}:); use --force to replace it")
    if "ingress" in mine and plan.has_ingress():
        raise ConflictError(f"--interface: {dev} has an ingress qdisc ratelimit did not install; "
                            "use --force to replace it")
    ifb = ifb_name(dev)
    if ifb in foreign and ifb in plan.devices():
        raise ConflictError(f"--interface: device {ifb} exists but ratelimit did not make it; "
                            "use --force to replace it")


def apply(req: Request, *, force: bool = False, progress=None, echo=None, on_wait=None, lock_timeout=None,
          notice=None, follow: bool = True):
    """Install ``req``; returns the plan installed (``how``: "built", "in place" or
    "make-before-break", with ``changed`` the operations sent for the last two; its
    ``request.generation`` may differ from ``req``'s: see ``placement.over``).  The interface ends
    up with the new plan whole, or as it was (``recovery.Transaction``): on a refused step, an
    exception, SIGINT or SIGTERM.
    ``lock_timeout``: seconds to wait for another run on the interface (default: as long as
    it takes).  ``notice(message)`` hears about links whose rates add up to more than
    ``--bandwidth``, repairs of a killed run, and devices that merge received frames,
    which the links would meter as one (default: stderr).  A plan with traces records when
    they start (``tracespec.stamped``) and, with ``follow``, has its driver started unless
    one runs (``follow.start``)."""
    plan = compile_plan(req)
    _require_root()
    warning = layout.oversubscribed(req)
    if warning:
        (notice or recovery.notice_to_stderr)(warning)
    with executor(req.netns) as ex, records.lock(req.netns, req.interface, on_wait, lock_timeout):
        check_interface(ex, req, req.netns)
        _check_queues(ex, req)
        recovery.repair(ex, req.netns, req.interface, notice)
        installed = find_installed(ex, req.netns, req.interface, force=force)
        plan = dataclasses.replace(plan, request=tracespec.stamped(req, installed.request, int(time.time() * 1000)))
        foreign = installed.foreign(req.interface)
        if not force:
            _refuse_foreign(plan, foreign, installed)
        _check_kernel(plan)
        if installed.stale:
            records.forget(req.netns, req.interface)
        captured = None
        if force and foreign:
            captured = ex.capture(foreign)  # sent back if this apply does not complete
        removal = recovery.teardown_of(foreign) if force else ()
        changes = undo = switch = None
        if installed.plan is not None:
            removal = installed.plan.teardown() + removal
            if not (force and foreign):
                plan, changes, switch = placement.over(installed.plan, plan)
                undo = None if changes is None else diff.in_place(plan, installed.plan)
        change = recovery.Transaction(ex, req.netns, req.interface, old=installed.plan, new=plan, captured=captured)
        change.run(removal, progress=progress, echo=echo, changes=changes, undo=undo, switch=switch)
        merging = ex.merging()
    if merging:
        from ..kernel.offload import advice
        (notice or recovery.notice_to_stderr)(advice(merging))
    if follow:
        from ..driver import follow as driver
        if driver.traced(plan.request):
            driver.start(req.netns, req.interface)
    if changes is not None:
        return dataclasses.replace(plan, changed=changes, how="in place")
    if switch is not None:
        return dataclasses.replace(plan, changed=switch.ops(), how="make-before-break")
    return plan


def preview(req: Request) -> tuple[tuple, str]:
    """What ``apply`` would send for ``req`` (for --dry-run), without the lock or root:
    (operations, how) -- the changes in place over the plan ratelimit recorded on the
    interface when its selectors are the same, else the plan's operations after the
    installed plan's teardown.  The record is taken as written (apply checks it against
    the kernel first)."""
    plan = compile_plan(req)
    try:
        record = records.load(req.netns, req.interface)
    except StateError:
        record = None
    if record is None or record.request is None or record.problem:
        return plan.ops, "a new plan"
    old = compiled(record.request)
    plan, changes, switch = placement.over(old, plan)
    if changes is not None:
        return changes, f"changes in place of the installed plan ({len(changes)} operations)"
    if switch is not None:
        return switch.ops(), (f"the new plan built beside the installed one, then the old removed "
                              f"(make-before-break: {len(switch.adds)} operations, then {len(switch.removal)} removals)")
    return old.teardown() + plan.ops, "the installed plan removed, then the new plan (other link layer or layout)"


def clean(interface: str, netns: str | None = None, *, force: bool = False, echo=None, lock_timeout=None,
          notice=None) -> bool:
    """Remove what ratelimit installed on ``interface``; True if there was something.
    ``force``: remove the root and ingress qdiscs and the IFB device whoever made them."""
    interface, netns = check_target(interface, netns)
    _require_root()
    with executor(netns) as ex, records.lock(netns, interface, timeout=lock_timeout):
        check_interface(ex, interface, netns)
        recovery.repair(ex, netns, interface, notice)
        installed = find_installed(ex, netns, interface, force=force)
        foreign = installed.foreign(interface)
        if installed.plan is None and not force:
            if installed.stale:
                records.forget(netns, interface)
            root = (installed.picture.get(interface) or {}).get("root")
            if "root" in foreign.get(interface, ()):
                raise ConflictError(f"--interface: {interface} has a root qdisc ratelimit did not install "
                                    f"({root[0]} {root[1] >> 16:x}:); left alone (use --force to remove it)")
            return False
        teardown = installed.plan.teardown() if installed.plan else ()
        if force:
            teardown = teardown + recovery.teardown_of(foreign)
        if not teardown:
            records.forget(netns, interface)
            return False
        for op in teardown:
            if echo:
                echo(op.lines()[0])
        recovery.remove(ex, netns, interface, teardown, old=installed.plan, forced=force)
        _stop_driver(netns, interface)
        return True


def _stop_driver(netns, interface) -> None:
    """The interface's trace driver stops with the plan it follows (it would on its next
    step, finding no record; this makes it so before clean returns)."""
    from ..driver import follow
    follow.stop(netns, interface)


