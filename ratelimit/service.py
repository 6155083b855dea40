"""apply / clean / status / statistics: the operations the CLI, web UI and lab share.

``make_request`` is the edge: it takes what a person typed (strings with
units, host names, a profile name) and returns a validated ``Request``.
``apply`` leaves the interface with the new plan whole or exactly as it was
(``recovery``); over installed links of the same selectors it changes them in
place, over others it builds the new plan beside the old before removing it
(``diff``); nothing is deleted before the kernel is checked against what ratelimit
recorded (``fingerprint``).
"""

import copy
import dataclasses
import functools
import os
import time
from dataclasses import dataclass

from . import diff, fingerprint, linklayer, profiles, recovery, state
from .compile import compile_plan, compiled, ifb_name
from .errors import ConflictError, FieldError, KernelMissing, NotFoundError, PermissionDenied, StateError
from .model import LinkParams, Request
from .names import check_target
from .selectors import format_ports, parse_hosts, parse_ports
from .units import format_rate, format_time, parse_burst, parse_count, parse_queue, parse_rate_bps, parse_size_bytes

DEFAULT_RATE_BPS = 28800
_DIRECTION_WORDS = {"source": "source", "src": "source", "dest": "dest", "dst": "dest",
                    "destination": "dest", "both": "both"}

# option name -> (LinkParams field, parser): the profile fields that are netem impairments
IMPAIRMENTS = {name: spec for name, spec in profiles.SIDE_FIELDS.items() if name not in ("rate", "queue", "burst")}
V03_BURST = "5"  # the bare command line's police burst, as in v0.3: rate x 5 / 8 bytes


def make_request(interface: str, *, hosts, ports, profile: str | None = None, netns: str | None = None,
                 mode: str | None = None, direction: str = "both", rate=None, burst=None,
                 bandwidth="100mbit", mtu=1514, avpkt=1200, mpu=None, queue=None, per: str = "port",
                 link: str | None = None, **impairments) -> Request:
    """Validate what a person typed and return the request (resolves host names).

    ``mode`` None: shape with a profile (the links it describes queue), police without
    (v0.3).  ``mpu`` None: the link layer's (``linklayer.min_frame_bytes``).  ``burst`` None:
    the profile's, else the mode's default; without a profile,
    police mode keeps v0.3's ``--burst 5``.  ``link`` names a link layer (``linklayer.LAYERS``)
    over the profile's."""
    interface, netns = check_target(interface, netns)
    if direction not in _DIRECTION_WORDS:
        raise FieldError("--direction", direction, "is not a direction (source, dest[ination], both)")
    unknown = set(impairments) - set(IMPAIRMENTS)
    if unknown:
        raise FieldError("option", sorted(unknown)[0], f"is not an impairment ({', '.join(IMPAIRMENTS)})")
    prof = profiles.load(profile) if profile else None
    mode = mode or ("shape" if prof else "police")
    down = prof.down if prof else LinkParams(rate_bps=DEFAULT_RATE_BPS)
    up = prof.up if prof else LinkParams(rate_bps=DEFAULT_RATE_BPS)
    overrides = {attr: parser(impairments[name], f"--{name.replace('_', '-')}")
                 for name, (attr, parser) in IMPAIRMENTS.items() if impairments.get(name) is not None}
    if rate is not None:
        overrides["rate_bps"] = parse_rate_bps(rate, "--rate")
    if queue is not None:
        overrides["queue"] = parse_queue(queue, "--queue")
    if burst is None and prof is None and mode == "police":
        burst = V03_BURST
    port_ranges = parse_ports(ports)  # pure checks before any name lookup
    layer = linklayer.layer(link, field="--link") if link else (prof.link if prof else linklayer.ETHERNET)
    req = Request(
        interface=interface, netns=netns or None,
        hosts=parse_hosts(hosts), ports=port_ranges,
        down=down.merged(**overrides), up=up.merged(**overrides),
        mode=mode, direction=_DIRECTION_WORDS[direction],
        bandwidth_bps=parse_rate_bps(bandwidth, "--bandwidth"),
        burst=None if burst is None else parse_burst(burst, "--burst"),
        mtu_bytes=parse_size_bytes(mtu, "--mtu"), avpkt_bytes=parse_size_bytes(avpkt, "--avpkt"),
        mpu_bytes=linklayer.min_frame_bytes(layer) if mpu is None else parse_count(mpu, "--mpu", 0, 65535),
        profile=prof.name if prof else None,
        link=layer,
        per=per,
    )
    compile_plan(req)  # every remaining check, before anything touches the router
    return req


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionDenied("changing traffic control needs root (run with sudo)")


def _executor(netns):
    from .kernel.executor import Executor  # the only code that changes traffic control
    return Executor(netns)


def _check_interface(ex, req_or_name, netns) -> None:
    name = getattr(req_or_name, "interface", req_or_name)
    if ex.link_index(name) is None:
        where = f" in namespace '{netns}'" if netns else ""
        raise NotFoundError(f"--interface: '{name}' does not exist{where} (see: ip link)")


def _check_kernel(plan) -> None:
    from .kernel.probe import missing_message, probe
    risky = sorted(plan.features() & {"netem", "police", "ifb", "mirred"})
    if not risky:
        return
    have = probe(risky)
    for feature in risky:
        if not have.get(feature, False):
            raise KernelMissing(missing_message(feature), feature)


@dataclass(frozen=True)
class Installed:
    """What is on an interface, as far as ratelimit is concerned."""

    plan: object  # ratelimit's plan, checked against the kernel; None if there is none
    owned: dict  # its fingerprint ({} without a plan)
    picture: dict  # the kernel's picture of the interface and its IFB device
    stale: bool = False  # a record whose parts are all gone from the kernel (nothing to delete)

    def foreign(self, interface: str) -> dict:
        """The parts on the interface and its IFB device that are not ratelimit's."""
        out: dict = {}
        seen = self.picture.get(interface) or {}
        mine = self.owned.get(interface, {})
        for part in ("root", "ingress"):
            if seen.get(part) and part not in mine:
                out.setdefault(interface, set()).add(part)
        ifb = ifb_name(interface)
        if self.picture.get(ifb) is not None and ifb not in self.owned:
            out[ifb] = {"device"}
        return out


def _installed(ex, netns, interface, *, force: bool, classes: bool = True) -> Installed:
    """Our plan on the interface, checked against the kernel before anything trusts it.

    A record that cannot be read, or one saying the interface is half-configured, is an
    error unless ``force`` (then it is ignored: everything there is replaced).  A record
    whose parts the kernel does not show as recorded (another tool's root qdisc with our
    handle, a class tree not ours) is refused unless ``force``; one whose parts are all
    gone is stale (nothing to delete).  The record's plan comes from ``compiled``: reading
    the record compiled it already (``state.load`` checks the request that way)."""
    devs = [interface, ifb_name(interface)]
    try:
        record = state.load(netns, interface)
    except StateError:
        if not force:
            raise
        record = None
    if record is not None and record.problem:
        if not force:
            raise StateError(record.problem)
        record = None
    if record is None:
        return Installed(None, {}, ex.picture(devs, classes))
    plan = compiled(record.request)
    owned = record.fingerprint or fingerprint.of_plan(plan)  # version 1: what the plan should own
    picture = ex.picture(list(dict.fromkeys(devs + list(owned))), classes)
    differences = fingerprint.differences(owned, picture)
    if not differences:
        return Installed(plan, owned, picture)
    if fingerprint.absent(owned, picture):
        return Installed(None, {}, picture, stale=True)
    if force:
        return Installed(None, {}, picture)
    raise ConflictError(f"--interface: {interface} does not hold what ratelimit recorded ({'; '.join(differences)}; "
                        f"record {state.record_path(netns, interface)}); nothing changed (use --force to replace "
                        "whatever is there)")


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
          notice=None):
    """Install ``req``; returns the plan installed (``how``: "built", "in place" or
    "make-before-break", with ``changed`` the operations sent for the last two; its
    ``request.generation`` may differ from ``req``'s: see ``_over``).  The interface ends
    up with the new plan whole, or as it was (``recovery.Change``): on a refused step, an
    exception, SIGINT or SIGTERM.
    ``lock_timeout``: seconds to wait for another run on the interface (default: as long as
    it takes).  ``notice(message)`` hears about repairs of a killed run, and about devices
    that merge received frames, which the links would meter as one (default: stderr)."""
    plan = compile_plan(req)
    _require_root()
    with _executor(req.netns) as ex, state.lock(req.netns, req.interface, on_wait, lock_timeout):
        _check_interface(ex, req, req.netns)
        recovery.repair(ex, req.netns, req.interface, notice)
        installed = _installed(ex, req.netns, req.interface, force=force)
        foreign = installed.foreign(req.interface)
        if not force:
            _refuse_foreign(plan, foreign, installed)
        _check_kernel(plan)
        if installed.stale:
            state.forget(req.netns, req.interface)
        captured = None
        if force and foreign:
            captured = ex.capture(foreign)  # sent back if this apply does not complete
        removal = recovery.teardown_of(foreign) if force else ()
        changes = undo = switch = None
        if installed.plan is not None:
            removal = installed.plan.teardown() + removal
            if not (force and foreign):
                plan, changes, switch = _over(installed.plan, plan)
                undo = None if changes is None else diff.in_place(plan, installed.plan)
        change = recovery.Change(ex, req.netns, req.interface, old=installed.plan, new=plan, captured=captured)
        change.run(removal, progress=progress, echo=echo, changes=changes, undo=undo, switch=switch)
        merging = ex.merging()
    if merging:
        from .kernel.offload import advice
        (notice or recovery.notice_to_stderr)(advice(merging))
    if changes is not None:
        return dataclasses.replace(plan, changed=changes, how="in place")
    if switch is not None:
        return dataclasses.replace(plan, changed=switch.ops(), how="make-before-break")
    return plan


def _over(old, plan):
    """How ``plan`` goes over the installed plan ``old``: (the plan to install, changes in
    place or None, a make-before-break switch or None).  The same selectors and layout
    change in place (in the installed plan's generation); other ones are built beside the
    old in the other generation when both fit; otherwise (None, None) the old is removed and
    ``plan`` built."""
    def in_generation(g):
        if plan.request.generation == g:
            return plan
        return compile_plan(dataclasses.replace(plan.request, generation=g))

    gen = old.request.generation
    same = in_generation(gen)
    changes = diff.in_place(old, same)
    if changes is not None:
        return same, changes, None
    try:
        other = in_generation(1 - gen)
    except FieldError:  # too many links for the other generation: rebuilt
        return plan, None, None
    switch = diff.make_before_break(old, other)
    return (other, None, switch) if switch is not None else (plan, None, None)


def preview(req: Request) -> tuple[tuple, str]:
    """What ``apply`` would send for ``req`` (for --dry-run), without the lock or root:
    (operations, how) -- the changes in place over the plan ratelimit recorded on the
    interface when its selectors are the same, else the plan's operations after the
    installed plan's teardown.  The record is taken as written (apply checks it against
    the kernel first)."""
    plan = compile_plan(req)
    try:
        record = state.load(req.netns, req.interface)
    except StateError:
        record = None
    if record is None or record.request is None or record.problem:
        return plan.ops, "a new plan"
    old = compiled(record.request)
    plan, changes, switch = _over(old, plan)
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
    with _executor(netns) as ex, state.lock(netns, interface, timeout=lock_timeout):
        _check_interface(ex, interface, netns)
        recovery.repair(ex, netns, interface, notice)
        installed = _installed(ex, netns, interface, force=force)
        foreign = installed.foreign(interface)
        if installed.plan is None and not force:
            if installed.stale:
                state.forget(netns, interface)
            root = (installed.picture.get(interface) or {}).get("root")
            if "root" in foreign.get(interface, ()):
                raise ConflictError(f"--interface: {interface} has a root qdisc ratelimit did not install "
                                    f"({root[0]} {root[1] >> 16:x}:); left alone (use --force to remove it)")
            return False
        teardown = installed.plan.teardown() if installed.plan else ()
        if force:
            teardown = teardown + recovery.teardown_of(foreign)
        if not teardown:
            state.forget(netns, interface)
            return False
        for op in teardown:
            if echo:
                echo(op.lines()[0])
        recovery.remove(ex, netns, interface, teardown, old=installed.plan, forced=force)
        return True


def summary(req: Request) -> dict:
    """What is applied, as data (for --list, --json, the dashboard and /metrics): per side
    the link's numbers, its burst and queue (as given and in line bytes), and the link
    layer and granularity the links share."""
    def side(p: LinkParams) -> dict:
        out = {k: v for k, v in p.__dict__.items() if v and k not in ("queue", "burst")}
        if p.rate_bps:
            rate = req.link.carried_bps(p.rate_bps)
            out["frame_rate_bps"] = rate
            out["burst"] = req.burst_of(p).text()
            out["burst_bytes"] = req.burst_bytes(p, rate)
            if req.mode == "shape":
                out["queue_bytes"] = req.queue_bytes(p, rate)
                out["queue"] = p.queue.text() if p.queue else f"{out['queue_bytes']}b (default)"
        return out
    directions = 2 if req.direction == "both" else 1
    return {
        "interface": req.interface, "netns": req.netns, "profile": req.profile, "mode": req.mode,
        "direction": req.direction, "hosts": [str(h) for h in req.hosts], "ports": format_ports(req.ports),
        "per": req.per, "link": req.link.describe(),
        "flows": req.flow_count() * directions, "links": req.link_count() * directions,
        "down": side(req.down), "up": side(req.up),
    }


def describe(applied: dict) -> str:
    """One line for an applied link (``service.summary``): what, how, per what, each side's
    rate, delay, burst and queue, the link layer, the selectors and how many links."""
    sides = []
    for name, used in (("down", ("dest", "both")), ("up", ("source", "both"))):
        p = applied[name]
        if applied["direction"] not in used:
            continue
        text = f"{name} {format_rate(p['rate_bps']) if p.get('rate_bps') else 'unlimited'}"
        if p.get("delay_us"):
            text += f" +{format_time(p['delay_us'])}"
        if p.get("burst"):
            text += f" burst {p['burst']}"
        if p.get("queue"):
            text += f" queue {p['queue']}"
        sides.append(text)
    return (f"{applied['profile'] or 'custom link'} ({applied['mode']}, per {applied['per']}, "
            f"{applied['link']['layer']} framing; {', '.join(sides)}) for hosts {','.join(applied['hosts'])} "
            f"ports {applied['ports']}: {applied['links']} links")


def _readable(ex, netns, interface, notice):
    """Our plan for --list and --stats: a killed run's marker is repaired first (which needs
    root and the lock: a run in progress makes this busy); a half-configured interface or an
    unreadable record is reported, never read as "nothing installed"."""
    if state.read_marker(netns, interface) is not None:
        if os.geteuid() != 0:
            raise StateError(f"--interface: a ratelimit run on {interface} was killed mid-change; run this as "
                             "root to put it back")
        with state.lock(netns, interface, timeout=0):
            recovery.repair(ex, netns, interface, notice)
    return _installed(ex, netns, interface, force=False, classes=False).plan


def applied(interface: str, netns: str | None = None, notice=None) -> Request | None:
    """The request ratelimit has applied on ``interface``, checked against the kernel; None
    when there is none."""
    interface, netns = check_target(interface, netns)
    with _executor(netns) as ex:
        _check_interface(ex, interface, netns)
        plan = _readable(ex, netns, interface, notice)
        return plan.request if plan else None


def status(interface: str, netns: str | None = None, notice=None) -> dict | None:
    """The summary of what ratelimit has on ``interface``, or None."""
    req = applied(interface, netns, notice)
    return summary(req) if req else None


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class LinkTable:
    """What reading statistics needs of an applied request, compiled once per request:
    each link's (direction, host, port or None, device) and configured rate, in the order
    of the plan's flows, and where the kernel keeps its counters."""

    summary: dict
    keys: tuple
    rate_bps: tuple
    flows: object  # kernel.counters.FlowTable

    def __len__(self) -> int:
        return len(self.keys)


@functools.lru_cache(maxsize=4)
def link_table(req: Request) -> LinkTable:
    """The request's LinkTable, built once per request."""
    from .kernel.counters import FlowTable
    plan = compiled(req)
    keys = tuple((f.direction, str(f.host), f.port, f.dev) for f in plan.flows)
    rates = {"dest": req.down.rate_bps, "source": req.up.rate_bps}
    return LinkTable(summary(req), keys, tuple(rates[f.direction] for f in plan.flows), FlowTable.of(plan))


def _read_counters(ex, interface: str, netns: str | None, notice=None) -> dict:
    _check_interface(ex, interface, netns)
    plan = _readable(ex, netns, interface, notice)
    table = None if plan is None else link_table(plan.request)
    if table is None:
        return {"interface": interface, "netns": netns, "time": time.time(), "applied": None, "keys": (),
                "rate_bps": (), "counters": {}}
    cols = ex.counters(table.flows)
    return {"interface": interface, "netns": netns, "time": time.time(), "applied": copy.deepcopy(table.summary),
            "keys": table.keys, "rate_bps": table.rate_bps, "counters": cols}


def counters(interface: str, netns: str | None = None, notice=None) -> dict:
    """Counters of every link as columns, read in one dump per device::

        {"interface", "netns", "time", "applied": summary() or None,
         "keys": ((direction, host, port or None, dev), ...), "rate_bps": (configured rate, ...),
         "counters": {"bytes": array, "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts"}}

    ``keys`` and ``rate_bps`` are the same objects while the configuration stays.  The
    record is checked against the kernel first (root and ingress qdiscs), and a run killed
    mid-change is repaired first (``notice`` hears of it)."""
    interface, netns = check_target(interface, netns)
    with _executor(netns) as ex:
        return _read_counters(ex, interface, netns, notice)


class Poller:
    """``counters`` for a reader that asks again and again (the dashboard): it keeps one
    open netlink reader per namespace, so a read costs the dumps and nothing else.  A read
    that fails on a kept reader (the namespace or device was remade) is tried once more on
    a fresh one.  ``close()`` when done."""

    def __init__(self):
        self._readers: dict = {}

    def __call__(self, interface: str, netns: str | None = None) -> dict:
        for attempt in (0, 1):
            ex = self._readers.get(netns)
            if ex is None:
                ex = self._readers[netns] = _executor(netns)
            try:
                return _read_counters(ex, interface, netns)
            except (NotFoundError, OSError):
                self._drop(netns)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _drop(self, netns) -> None:
        ex = self._readers.pop(netns, None)
        if ex is not None:
            ex.close()

    def close(self) -> None:
        for netns in list(self._readers):
            self._drop(netns)


def statistics(interface: str, netns: str | None = None, notice=None) -> dict:
    """Counters per (host, port, direction), as one dict per link (``--stats``, ``--json``,
    the lab); see ``counters``."""
    data = counters(interface, netns, notice)
    cols = data.pop("counters")
    keys, rates = data.pop("keys"), data.pop("rate_bps")
    names = tuple(cols)
    data["links"] = [{"direction": d, "host": h, "port": p, "dev": dev, **dict(zip(names, values)), "rate_bps": r}
                     for (d, h, p, dev), r, *values in zip(keys, rates, *cols.values())]
    return data
