"""The link a lab's router applies: a profile (or an audience: ``--mix``, ``--scenario``)
and overrides, checked against the kernel."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..plan import layout
from ..profiles import catalog
from .. import service
from ..errors import FieldError, KernelMissing, UsageError
from ..kernel.vm import in_vm
from .topology import QUEUES as DEVICE_QUEUES  # the queues of the router's client-facing bridge
from ..plan.compile import compile_plan
from ..traces.tracespec import KEYS

MODES = ("shape", "police")  # the lab shapes by default: it queues like the real link
GRANULARITIES = ("host", "port")  # a lab client is a machine (per host) unless asked otherwise

Say = Callable[[str], None]


def check_choice(field: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise FieldError(field, f"'{value}'", f"is not one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class LinkSpec:
    """What the router applies: a profile (or none), or an audience of several cohorts
    (``mix`` or ``scenario``: ``audience``), and its overrides over every cohort."""

    profile: str | None = None
    mode: str = "shape"
    per: str = "host"
    burst: str | None = None  # None: the profile's, else the mode's default
    rate: str | None = None
    delay: str | None = None
    no_delay: bool = False
    bandwidth: str | None = None  # the router's pool; None: what the links' rates add up to (at least 100mbit)
    queue: str | None = None  # each link's queue over the profile's
    mix: str | None = None  # --mix PROFILE:SHARE,...: the clients split between profiles
    scenario: str | None = None  # --scenario FILE|NAME: cohorts selecting clients by address
    queues: str = "auto"  # the router's tx queues the links are spread over (service.Options)
    # traces or a schedule the links follow (``tracespec``; the router's driver starts with the apply)
    trace_down: str | None = None
    trace_up: str | None = None
    schedule: str | None = None
    trace_scale: str | None = None
    phase: str | None = None
    phase_seed: str | None = None

    def traces(self) -> dict:
        """The trace options given, as ``service.Options`` takes them."""
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}

    @property
    def audience(self) -> bool:
        """Several cohorts: a mix or a scenario."""
        return self.mix is not None or self.scenario is not None

    def overrides(self) -> dict:
        kw: dict = {k: v for k, v in (("bandwidth", self.bandwidth), ("queue", self.queue)) if v is not None}
        if self.no_delay:
            kw.update(delay="0ms", jitter="0ms", loss="0%", duplicate="0%", corrupt="0%", reorder="0%")
        if self.delay is not None:
            kw["delay"] = self.delay
        if self.rate is not None:
            kw["rate"] = self.rate
        return {**kw, **self.traces()}

    @property
    def empty(self) -> bool:
        return self.profile is None and self.rate is None and self.delay is None and not self.audience \
            and not self.traces()

    def what(self) -> str:
        """The link as a person named it: its profile, mix or scenario."""
        if self.mix is not None:
            return f"mix {self.mix}"
        if self.scenario is not None:
            return f"scenario {self.scenario}"
        traced = [f"{k.replace('_', ' ')} {v}" for k, v in self.traces().items() if k in ("trace_down", "trace_up",
                                                                                           "schedule")]
        return (self.profile or "custom link") + (f" following {', '.join(traced)}" if traced else "")


def _features_needed(req) -> set[str]:
    return set(compile_plan(req).features())


def resolve_link(spec: LinkSpec, *, interface: str, netns: str | None, clients: Sequence[tuple[str, str]],
                 ports: str, say: Say | None = None, vm_hint: bool = True):
    """Validate ``spec`` for the lab's ``clients`` (each one's IPv4 and IPv6 address) on their
    ephemeral ``ports``, and against the kernel; return ``(request, mode)``.

    A part of the plan the kernel lacks (``probe.plan_lacks``) is one ``KernelMissing`` line
    naming the module and, for netem and police, the ways out.
    """
    from ..kernel.probe import missing_message, plan_lacks  # start-up time: the probe loads pyroute2
    mode = check_choice("--mode", spec.mode, MODES)
    check_choice("--per", spec.per, GRANULARITIES)
    options = service.Options(interface, netns=netns, mode=mode, burst=spec.burst, queues=spec.queues,
                              device_queues=DEVICE_QUEUES, **spec.overrides())
    if spec.audience:
        from . import audience  # a part not every link has (a mix or a scenario)
        options = dataclasses.replace(options, scenario=audience.asks(spec, clients, ports))
    else:
        if spec.profile is not None:
            catalog.load(spec.profile)  # unknown profile: the profiles module's one line
        hosts = [a4 for a4, _ in clients] + [a6 for _, a6 in clients]
        options = dataclasses.replace(options, hosts=hosts, ports=ports, profile=spec.profile, per=spec.per)
    req = service.request_of(options)
    if spec.bandwidth is None:  # the router carries every link at its rate
        need = max(layout.links_rate_bps(req).values(), default=0)
        if need > req.bandwidth_bps:
            req = dataclasses.replace(req, bandwidth_bps=-(-need // 1_000_000) * 1_000_000)
    rateless = [c for c in req.cohorts if not (c.down.rate_bps or c.up.rate_bps)]
    if spec.no_delay and rateless:
        what = f"profile '{rateless[0].profile}'" if rateless[0].profile else f"cohort '{rateless[0].name}'"
        raise UsageError(f"--no-delay: {what} has no rate, so nothing would be left to "
                         f"emulate; run it with --vm (full kernel) instead")
    needed = _features_needed(req)
    if in_vm():
        _modprobe(needed)
    lacking = plan_lacks(needed)
    if lacking:
        if not set(lacking) <= {"netem", "police"}:
            raise KernelMissing(missing_message(lacking[0]), lacking[0])
        ways = []
        scheduled = [c.name for c in req.cohorts if c.trace is not None
                     and any(s is not None and s.netem for s in (c.trace.down, c.trace.up))]
        if "netem" in lacking and scheduled:  # --no-delay leaves a schedule's steps as they are
            ways.append(f"{'' if spec.no_delay else '--no-delay and '}a schedule whose steps set no delay or "
                        f"loss ({'the' if len(req.cohorts) == 1 else 'cohort ' + scheduled[0] + chr(39) + 's'} schedule's "
                        f"steps delay or lose packets, which takes netem)")
        elif "netem" in lacking:
            ways.append("--no-delay to leave the delay and loss out")
        if "police" in lacking:
            ways.append("--mode shape instead of police")
        if vm_hint:
            ways.append("--vm to run the lab in the full-kernel VM")
        what = f"profile '{spec.profile}'" if spec.profile else spec.what() if spec.audience else "this link"
        need = {"netem": "delay/loss (module sch_netem)", "police": "police mode (module act_police)"}
        raise KernelMissing(f"{what} needs {' and '.join(need[f] for f in lacking)}, which this kernel "
                            f"lacks: add {', or '.join(ways)}", lacking[0])
    return req, mode


def _modprobe(features) -> None:
    """Load the modules of ``features`` (in the full-kernel VM, whose modules load on demand
    only when a tool asks)."""
    from ..kernel.probe import FEATURES  # start-up time: the probe loads pyroute2
    for f in features:
        if f in FEATURES and FEATURES[f].module:
            subprocess.run(["modprobe", "-q", FEATURES[f].module], capture_output=True, check=False)

