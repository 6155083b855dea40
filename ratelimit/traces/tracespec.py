"""What a traced cohort's links follow, as the request and the record keep it (pure).

A cohort's link rate in each direction may follow a trace (mahimahi's format,
``tracefile``) or both directions a schedule (``schedulefile``).  ``TraceSpec`` is the
frozen value a ``Cohort`` carries (``Cohort.trace``): per direction a ``Source`` -- the
file's absolute path, the SHA-256 of its bytes, its period and mean (so that compiling
needs no file) -- and the scale, the phases (``phases.Phase`` and the seed) and, once
applied, the wall-clock start of the traces (``started_ms``, set by ``service.apply``).
The driver (``driver``) reads the files again by path and refuses one whose bytes
changed.

What a profile, a scenario's cohort or the command line asks for is a ``TraceAsk``;
``profiles.traced`` reads the files they name into a ``TraceSpec``, and reads them again
for the driver.
"""

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FieldError, UsageError
from . import tracefile
from .phases import MAX_SEED, RANDOM, Phase

KEYS = ("trace_down", "trace_up", "schedule", "trace_scale", "phase", "phase_seed")  # a scenario's cohort
PROFILE_KEYS = ("trace_down", "trace_up", "schedule", "trace_scale")  # a profile (its links' kind, not their phases)
OPTIONS = {key: "--" + key.replace("_", "-") for key in KEYS}  # the command line's spellings
SOURCES = ("trace_down", "trace_up", "schedule")
KINDS = ("trace", "schedule")
MAX_SCALE = 1000.0
SIDES = {"dest": "down", "source": "up", "down": "down", "up": "up"}  # a plan's direction, or a side


@dataclass(frozen=True)
class Source:
    """One direction's trace (or the schedule, which has both)."""

    kind: str  # "trace" or "schedule"
    path: str  # absolute
    sha256: str  # of the file's bytes when applied
    period_ms: int
    mean_bps: float  # one period's mean, unscaled: mm-link's bits (a trace) or the line's (a schedule)
    loop: bool = True  # a trace loops as mm-link's does; a schedule as its file says
    netem: bool = False  # a schedule whose steps delay or lose packets on this side: the link gets a netem stage
    most_delay_us: int = 0  # the longest delay its steps give this side (the stage's limit holds what is in flight)

    @property
    def name(self) -> str:
        return Path(self.path).name


@dataclass(frozen=True)
class TraceSpec:
    """What a traced cohort's links follow: a source per direction (None: that direction
    keeps its static rate), one scale, and each link's phase (``phases``)."""

    down: Source | None = None
    up: Source | None = None
    scale: float = 1.0
    phase: Phase = field(default_factory=Phase)
    seed: int = 0
    started_ms: int | None = None  # Unix time in ms the traces started at (set when applied)

    def source(self, direction: str) -> Source | None:
        """The source of ``direction``: a plan's (dest, source) or a side (down, up)."""
        return self.down if SIDES[direction] == "down" else self.up

    @property
    def period_ms(self) -> int:
        """The period phases are drawn over: the longer of the two directions' (``phases``)."""
        return max(s.period_ms for s in (self.down, self.up) if s is not None)

    def text(self) -> str:
        """In a few words, for the one-line description of a plan."""
        if self.down is not None and self.down.kind == "schedule":
            staged = self.down.netem or self.up is not None and self.up.netem
            what = f"schedule {self.down.name} (its rates{', delays and losses' if staged else ''})"
        else:
            what = ", ".join(f"{side} trace {s.name}" for side, s in (("down", self.down), ("up", self.up)) if s)
        scale = f" x{self.scale:g}" if self.scale != 1 else ""
        seed = f" seed {self.seed}" if self.phase.kind == RANDOM else ""
        return f"{what}{scale}, phase {self.phase.text()}{seed}"

    def without_start(self) -> "TraceSpec":
        return dataclasses.replace(self, started_ms=None)


# ---------------------------------------------------------------- the record


def from_json(data) -> TraceSpec | None:
    """The spec ``dataclasses.asdict`` wrote (the record), or None; TypeError/ValueError if malformed."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("trace is not a table")
    values = dict(data)
    for side in ("down", "up"):
        if values.get(side) is not None:
            values[side] = Source(**values[side])
    values["phase"] = Phase(**values.get("phase") or {})
    return TraceSpec(**values)


def check(spec: TraceSpec, mode: str, where: str = "") -> None:
    """Every check a traced cohort's spec passes (a request made here, or read from a record)."""
    if not isinstance(spec, TraceSpec):
        raise FieldError(f"{where}trace", type(spec).__name__, "is not a trace spec")
    if spec.down is None and spec.up is None:
        raise UsageError(f"{where}traces: none given")
    if mode != "shape":
        raise UsageError(f"{where}--mode: a traced link needs shape mode (its rate lives in its HTB class, which "
                         "police mode does not have)")
    for side, src in (("down", spec.down), ("up", spec.up)):
        if src is None:
            continue
        if not (isinstance(src, Source) and src.kind in KINDS and isinstance(src.path, str) and src.path.startswith("/")
                and isinstance(src.sha256, str) and len(src.sha256) == 64
                and type(src.period_ms) is int and 0 < src.period_ms <= tracefile.MAX_PERIOD_MS
                and isinstance(src.mean_bps, (int, float)) and math.isfinite(src.mean_bps) and src.mean_bps >= 0
                and isinstance(src.loop, bool)):
            raise FieldError(f"{where}{side} trace", str(src), "is not a trace or schedule as ratelimit records one")
        if not (type(src.netem) is bool and type(src.most_delay_us) is int
                and 0 <= src.most_delay_us <= 3600 * 10**6 and (src.kind == "schedule" or not src.netem)):
            raise FieldError(f"{where}{side} trace", str(src), "is not a trace or schedule as ratelimit records one")
    if spec.down is not None and spec.up is not None and (spec.down.kind == "schedule") != (spec.up.kind == "schedule"):
        raise UsageError(f"{where}traces: a schedule drives both directions; give it or traces, not both")
    if isinstance(spec.scale, bool) or not isinstance(spec.scale, (int, float)) or \
            not (math.isfinite(spec.scale) and 0 < spec.scale <= MAX_SCALE):
        raise FieldError(f"{where}{OPTIONS['trace_scale']}", spec.scale, f"is not a scale (above 0, at most {MAX_SCALE:g})")
    if not isinstance(spec.phase, Phase) or spec.phase.kind not in ("random", "same", "fixed") or \
            type(spec.phase.offset_ms) is not int or spec.phase.offset_ms < 0:
        raise FieldError(f"{where}{OPTIONS['phase']}", str(spec.phase), "is not a phase")
    if type(spec.seed) is not int or not 0 <= spec.seed <= MAX_SEED:
        raise FieldError(f"{where}{OPTIONS['phase_seed']}", spec.seed, f"is not a seed (0 to {MAX_SEED})")
    if spec.started_ms is not None and (type(spec.started_ms) is not int or spec.started_ms < 0):
        raise FieldError(f"{where}trace start", spec.started_ms, "is not a time in ms")


# ---------------------------------------------------------------- as asked


@dataclass(frozen=True)
class TraceAsk:
    """One level's trace options as given (a profile, a scenario's cohort, the command line):
    ``values`` ((key, value), ...) of ``KEYS``; relative paths start from ``base``; errors
    name a key as ``where + key`` (or, with ``where`` "", as the command line's option)."""

    values: tuple
    base: str = ""
    where: str = ""

    def field(self, key: str) -> str:
        return f"{self.where}{key}" if self.where else OPTIONS[key]


HELP = {  # the command line's options (``add_options``): what each says
    "trace_down": ("FILE", "the links' downlink follows this mahimahi trace (a file, or a shipped one: lte-drive.down, "
                           "3g-walk.down, tunnel.down); docs/profiles.md, Traces"),
    "trace_up": ("FILE", "the uplink's trace (lte-drive.up, ...)"),
    "schedule": ("FILE", "both directions follow this schedule (TOML steps; shipped: train)"),
    "trace_scale": ("X", "each link gets X of the trace's capacity (default 1; 0.01: a hundredth)"),
    "phase": ("random|same|TIME", "where each link starts in its trace: random (the default, drawn from the link "
                                  "and --phase-seed), same (in lock-step) or a time (12s)"),
    "phase_seed": ("N", "the seed of random phases (default 0)"),
}


def add_options(group) -> None:
    """The trace options (``OPTIONS``) on an argparse parser or group (the main command line,
    ``lab up`` and ``lab apply``)."""
    for key in KEYS:
        metavar, text = HELP[key]
        group.add_argument(OPTIONS[key], metavar=metavar, help=text)


def ask(table: dict, keys, base: str = "", where: str = "") -> TraceAsk | None:
    """The trace options of ``table`` (a TOML table, or the command line's values) among
    ``keys``, None-valued ones left out; None when there are none."""
    values = tuple((k, table[k]) for k in keys if table.get(k) is not None)
    return TraceAsk(values, base, where) if values else None


def stamped(req, installed, now_ms: int):
    """``req`` with each traced cohort's and cell's start: that of the installed request's
    cohort (or cell) of the same name following the same traces (a re-apply that changes
    other numbers does not restart them), else ``now_ms``.  A cell's cohorts carry one
    start."""
    old = installed.cohorts if installed is not None else ()
    before = {c.name: c.trace for c in old if c.trace is not None}
    cells_before = {c.cell.name: c.cell.trace for c in old if c.cell is not None and c.cell.trace is not None}

    def kept(spec, was):
        start = was.started_ms if was is not None and was.without_start() == spec.without_start() else None
        return dataclasses.replace(spec, started_ms=start or now_ms)
    cohorts = []
    for c in req.cohorts:
        if c.trace is not None:
            c = dataclasses.replace(c, trace=kept(c.trace, before.get(c.name)))
        if c.cell is not None and c.cell.trace is not None:
            c = dataclasses.replace(c, cell=dataclasses.replace(c.cell, trace=kept(c.cell.trace,
                                                                                    cells_before.get(c.cell.name))))
        cohorts.append(c)
    return dataclasses.replace(req, cohorts=tuple(cohorts))
