"""apply / clean / status / statistics: the operations the CLI, web UI and lab share.

``make_request`` is the edge: it takes what a person typed (strings with
units, host names, a profile name) and returns a validated ``Request``.
``apply`` is atomic: the interface ends up either fully configured or exactly
as it was.
"""

import copy
import functools
import os
import time
from dataclasses import dataclass

from . import linklayer, profiles, state
from .compile import ROOT, compile_plan, ifb_name
from .errors import ApplyError, ConflictError, FieldError, KernelMissing, NotFoundError, PermissionDenied
from .model import LinkParams, Request
from .selectors import format_ports, parse_hosts, parse_ports
from .units import parse_burst, parse_count, parse_queue, parse_rate_bps, parse_size_bytes

DEFAULT_RATE_BPS = 28800
_DIRECTION_WORDS = {"source": "source", "src": "source", "dest": "dest", "dst": "dest",
                    "destination": "dest", "both": "both"}

# option name -> (LinkParams field, parser): the profile fields that are netem impairments
IMPAIRMENTS = {name: spec for name, spec in profiles.SIDE_FIELDS.items() if name not in ("rate", "queue", "burst")}
V03_BURST = "5"  # the bare command line's police burst, as in v0.3: rate x 5 / 8 bytes


def make_request(interface: str, *, hosts, ports, profile: str | None = None, netns: str | None = None,
                 mode: str | None = None, direction: str = "both", rate=None, burst=None,
                 bandwidth="100mbit", mtu=1514, avpkt=1200, mpu=64, queue=None, per: str = "port",
                 link: str | None = None, **impairments) -> Request:
    """Validate what a person typed and return the request (resolves host names).

    ``mode`` None: shape with a profile (the links it describes queue), police without
    (v0.3).  ``burst`` None: the profile's, else the mode's default; without a profile,
    police mode keeps v0.3's ``--burst 5``.  ``link`` names a link layer (``linklayer.LAYERS``)
    over the profile's."""
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
    req = Request(
        interface=interface, netns=netns or None,
        hosts=parse_hosts(hosts), ports=port_ranges,
        down=down.merged(**overrides), up=up.merged(**overrides),
        mode=mode, direction=_DIRECTION_WORDS[direction],
        bandwidth_bps=parse_rate_bps(bandwidth, "--bandwidth"),
        burst=None if burst is None else parse_burst(burst, "--burst"),
        mtu_bytes=parse_size_bytes(mtu, "--mtu"), avpkt_bytes=parse_size_bytes(avpkt, "--avpkt"),
        mpu_bytes=parse_count(mpu, "--mpu", 0, 65535),
        profile=prof.name if prof else None,
        link=linklayer.layer(link, field="--link") if link else (prof.link if prof else linklayer.ETHERNET),
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


def _installed_plan(ex, netns, interface):
    """Our plan on the interface now, or None; raises if state and kernel disagree badly."""
    req = state.load(netns, interface)
    if req is None or ex.root_qdisc(interface) != ("htb", ROOT) and not ex.has_ingress(interface):
        return None
    return compile_plan(req)


def _check_ownership(ex, plan, old_plan, force: bool) -> None:
    if force:
        return
    dev = plan.request.interface
    root = ex.root_qdisc(dev)
    if root is not None and root != ("htb", ROOT):
        raise ConflictError(f"--interface: {dev} has a root qdisc ratelimit did not install "
                            f"({root[0]} {root[1] >> 16:x}:); use --force to replace it")
    ours_ingress = old_plan is not None and old_plan.has_ingress()
    if ex.has_ingress(dev) and not ours_ingress and plan.request.direction != "dest":
        raise ConflictError(f"--interface: {dev} has an ingress qdisc ratelimit did not install; "
                            "use --force to replace it")
    ifb = ifb_name(dev)
    ours_ifb = old_plan is not None and ifb in old_plan.devices()
    if ex.link_index(ifb) is not None and not ours_ifb and ifb in plan.devices():
        raise ConflictError(f"--interface: device {ifb} exists but ratelimit did not make it; "
                            "use --force to replace it")


def _foreign_teardown(dev):
    from .plan import TC_H_INGRESS, TC_H_ROOT, DelLink, DelQdisc
    return (DelQdisc(dev, TC_H_ROOT), DelQdisc(dev, TC_H_INGRESS), DelLink(ifb_name(dev)))


def apply(req: Request, *, force: bool = False, progress=None, echo=None, on_wait=None):
    """Install ``req`` atomically; returns the plan."""
    plan = compile_plan(req)
    _require_root()
    with _executor(req.netns) as ex, state.lock(req.netns, req.interface, on_wait):
        _check_interface(ex, req, req.netns)
        old_plan = _installed_plan(ex, req.netns, req.interface)
        _check_ownership(ex, plan, old_plan, force)
        _check_kernel(plan)
        if old_plan is not None:
            ex.remove(old_plan.teardown())
        elif ex.root_qdisc(req.interface) == ("htb", ROOT) or force:
            ex.remove(_foreign_teardown(req.interface))
        try:
            ex.apply(plan.ops, progress=progress, echo=echo)
        except ApplyError as err:
            ex.remove(plan.teardown())
            if old_plan is not None:
                ex.apply(old_plan.ops)
            raise ApplyError(f"{err}; {req.interface} is back as it was") from None
        state.save(req)
    return plan


def clean(interface: str, netns: str | None = None, *, force: bool = False, echo=None) -> bool:
    """Remove what ratelimit installed on ``interface``; True if there was something."""
    _require_root()
    with _executor(netns) as ex, state.lock(netns, interface):
        _check_interface(ex, interface, netns)
        old_plan = _installed_plan(ex, netns, interface)
        if old_plan is not None:
            teardown = old_plan.teardown()
        elif ex.root_qdisc(interface) == ("htb", ROOT) or force:
            teardown = _foreign_teardown(interface)
        else:
            root = ex.root_qdisc(interface)
            state.forget(netns, interface)
            if root is not None:
                raise ConflictError(f"--interface: {interface} has a root qdisc ratelimit did not install "
                                    f"({root[0]}); left alone (use --force to remove it)")
            return False
        for op in teardown:
            if echo:
                echo(op.lines()[0])
        ex.remove(teardown)
        state.forget(netns, interface)
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


def status(interface: str, netns: str | None = None) -> dict | None:
    """The summary of what ratelimit has on ``interface``, or None."""
    with _executor(netns) as ex:
        _check_interface(ex, interface, netns)
        plan = _installed_plan(ex, netns, interface)
        return summary(plan.request) if plan else None


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


@functools.lru_cache(maxsize=8)
def link_table(req: Request) -> LinkTable:
    """The request's LinkTable; compiling 65,536 flows takes about a second, so a watched
    interface compiles once, not at every read (requests are frozen, hashable values)."""
    from .kernel.counters import FlowTable
    plan = compile_plan(req)
    keys = tuple((f.direction, str(f.host), f.port, f.dev) for f in plan.flows)
    rates = {"dest": req.down.rate_bps, "source": req.up.rate_bps}
    return LinkTable(summary(req), keys, tuple(rates[f.direction] for f in plan.flows), FlowTable.of(plan))


def _installed_table(ex, netns, interface) -> LinkTable | None:
    """The LinkTable of our configuration on the interface now, or None."""
    req = state.load(netns, interface)
    if req is None or ex.root_qdisc(interface) != ("htb", ROOT) and not ex.has_ingress(interface):
        return None
    return link_table(req)


def _read_counters(ex, interface: str, netns: str | None) -> dict:
    _check_interface(ex, interface, netns)
    table = _installed_table(ex, netns, interface)
    if table is None:
        return {"interface": interface, "netns": netns, "time": time.time(), "applied": None, "keys": (),
                "rate_bps": (), "counters": {}}
    cols = ex.counters(table.flows)
    return {"interface": interface, "netns": netns, "time": time.time(), "applied": copy.deepcopy(table.summary),
            "keys": table.keys, "rate_bps": table.rate_bps, "counters": cols}


def counters(interface: str, netns: str | None = None) -> dict:
    """Counters of every link as columns, read in one dump per device::

        {"interface", "netns", "time", "applied": summary() or None,
         "keys": ((direction, host, port or None, dev), ...), "rate_bps": (configured rate, ...),
         "counters": {"bytes": array, "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts"}}

    ``keys`` and ``rate_bps`` are the same objects while the configuration stays."""
    with _executor(netns) as ex:
        return _read_counters(ex, interface, netns)


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


def statistics(interface: str, netns: str | None = None) -> dict:
    """Counters per (host, port, direction), read from the kernel in one dump per device, as
    one dict per link (``--stats``, ``--json``, the lab)."""
    data = counters(interface, netns)
    cols = data.pop("counters")
    keys, rates = data.pop("keys"), data.pop("rate_bps")
    names = tuple(cols)
    data["links"] = [{"direction": d, "host": h, "port": p, "dev": dev, **dict(zip(names, values)), "rate_bps": r}
                     for (d, h, p, dev), r, *values in zip(keys, rates, *cols.values())]
    return data
