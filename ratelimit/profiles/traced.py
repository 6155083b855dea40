"""The traces and schedules a profile, a scenario's cohort or the command line names: read
once into a ``TraceSpec`` when a request is made (``resolve``), and again for the driver
(``load``, ``load_all``).

``resolve`` merges what each level says (a ``tracespec.TraceAsk``, lowest first: a higher
level's schedule replaces the lower levels' traces and schedule; its trace for a direction
replaces a lower schedule and that direction's trace; the scale, phase and seed override
one by one).  Paths are as given, relative to the file that names them (a profile's or a
scenario's directory; the current directory on the command line).  A bare name that is no
such file is a shipped one (``profiles/traces/lte-drive.down``, ``profiles/schedules/train``
or ``train.toml``).  A schedule's steps may name profiles, found by ``catalog``.
"""

import hashlib
from pathlib import Path

from .. import SHIPPED
from ..errors import FieldError, StateError, UsageError
from ..spec import userfile
from ..spec.units import decimal
from ..traces import schedulefile, tracefile
from ..traces.capacity import ScheduleCapacity
from ..traces.phases import parse_phase, parse_seed, Phase
from ..traces.tracespec import MAX_SCALE, SOURCES, Source, TraceAsk, TraceSpec
from . import catalog


def resolve(asks, phase_default: Phase | None = None) -> TraceSpec | None:
    """The spec the ``asks`` (lowest level first, None entries skipped) make, its files read
    and checked once; None when none names a trace or schedule."""
    sources: dict = {}  # key -> (value, its ask)
    scalars: dict = {}
    for a in (a for a in asks if a is not None):
        given = dict(a.values)
        if "schedule" in given and ("trace_down" in given or "trace_up" in given):
            raise UsageError(f"{a.field('schedule')}: a schedule drives both directions; give it or "
                             f"{a.field('trace_down')}/{a.field('trace_up')}, not both")
        if "schedule" in given:
            sources = {}
        elif "trace_down" in given or "trace_up" in given:
            sources.pop("schedule", None)
        for key, value in given.items():
            (sources if key in SOURCES else scalars)[key] = (value, a)
    for key, (value, a) in scalars.items():
        if not sources:
            raise UsageError(f"{a.field(key)}: there is no trace or schedule for it to apply to "
                             f"(give {a.field('trace_down')}, {a.field('trace_up')} or {a.field('schedule')})")
    if not sources:
        return None
    scale = 1.0
    if "trace_scale" in scalars:
        value, a = scalars["trace_scale"]
        number = decimal(value)
        if number is None or not 0 < number <= MAX_SCALE:
            raise FieldError(a.field("trace_scale"), f"'{value}'", f"is not a scale (a number above 0, at most "
                                                                  f"{MAX_SCALE:g}: 0.01 is a hundredth of the trace)")
        scale = float(number)
    phase = phase_default or Phase()
    if "phase" in scalars:
        value, a = scalars["phase"]
        phase = parse_phase(value, a.field("phase"))
    seed = 0
    if "phase_seed" in scalars:
        value, a = scalars["phase_seed"]
        seed = parse_seed(value, a.field("phase_seed"))
    if "schedule" in sources:
        value, a = sources["schedule"]
        down, up = _schedule(value, a)
    else:
        down = _trace(*sources["trace_down"], "trace_down") if "trace_down" in sources else None
        up = _trace(*sources["trace_up"], "trace_up") if "trace_up" in sources else None
    return TraceSpec(down, up, scale, phase, seed)


def _path(value, a: TraceAsk, key: str, shipped: Path, suffix: str = "") -> Path:
    if not isinstance(value, str) or not value:
        raise FieldError(a.field(key), value, "is not a file name")
    given = Path(value)
    path = given if given.is_absolute() else Path(a.base or ".") / given
    if "/" not in value and not path.exists():
        for name in (value, value + suffix):
            if (shipped / name).exists():
                return (shipped / name).resolve()
    return path.resolve() if path.exists() else path


SHIPPED_DIRS = {"trace_down": ("traces", ""), "trace_up": ("traces", ""), "schedule": ("schedules", ".toml")}


def shipped(key: str, value, field: str) -> str:
    """The path of the shipped trace or schedule ``value`` names for ``key`` (a
    ``SHIPPED_DIRS`` key), never another file: what the dashboard's API takes.

    >>> Path(shipped("schedule", "train", "schedule")).name
    'train.toml'
    """
    folder, suffix = SHIPPED_DIRS[key]
    names = sorted(p.name for p in (SHIPPED / folder).iterdir() if p.is_file() and p.suffix != ".py")
    if isinstance(value, str):
        for name in (value, value + suffix):
            if name in names:
                return str((SHIPPED / folder / name).resolve())
    raise FieldError(field, repr(value) if isinstance(value, str) else value,
                     f"is not a shipped {folder[:-1]} (allowed: {', '.join(names)})")


def _trace(value, a: TraceAsk, key: str) -> Source:
    path = _path(value, a, key, SHIPPED / "traces")
    where = f"{a.field(key)} {value}"
    raw = userfile.read(path, tracefile.MAX_BYTES, where, f"a trace file ({tracefile.ALLOWED})")
    trace = tracefile.parse(raw, where, str(path))
    return Source("trace", str(path), hashlib.sha256(raw).hexdigest(), trace.period_ms, trace.mean_bps)


def _schedule(value, a: TraceAsk) -> tuple[Source, Source]:
    path = _path(value, a, "schedule", SHIPPED / "schedules", ".toml")
    where = f"{a.field('schedule')} {value}"
    raw = userfile.read(path, schedulefile.MAX_BYTES, where, schedulefile.WHAT)
    sched = schedulefile.from_bytes(raw, where, str(path), catalog.load_named)
    digest = hashlib.sha256(raw).hexdigest()
    return tuple(Source("schedule", str(path), digest, sched.period_ms,
                        ScheduleCapacity(sched, side).rate_bps(0, sched.period_ms), sched.loop,
                        sched.needs_netem(side), sched.most_delay_us(side)) for side in ("down", "up"))


# ---------------------------------------------------------------- read again, for the driver


def load(src: Source, field: str = "trace"):
    """The ``tracefile.Trace`` or ``schedulefile.Schedule`` of ``src``, read again; StateError
    when its bytes are no longer those applied (the record would follow another trace)."""
    where = f"{field} {src.path}"
    what = f"a trace file ({tracefile.ALLOWED})" if src.kind == "trace" else schedulefile.WHAT
    try:
        raw = userfile.read(src.path, tracefile.MAX_BYTES if src.kind == "trace" else schedulefile.MAX_BYTES,
                            where, what)
    except UsageError as e:
        raise StateError(f"{e}; it was applied from there: put it back, or apply again") from None
    if hashlib.sha256(raw).hexdigest() != src.sha256:
        raise StateError(f"{where}: changed since it was applied (its SHA-256 is not the one recorded); put the "
                         "applied file back, or apply again to follow the new one")
    if src.kind == "trace":
        return tracefile.parse(raw, where, src.path)
    return schedulefile.from_bytes(raw, where, src.path, catalog.load_named)


def load_all(req) -> dict:
    """Every trace and schedule that ``req``'s traced cohorts and cells follow, read again
    (``load``): {path: Trace or Schedule}, what ``driver.steps.traced_links`` takes."""
    return {s.path: load(s) for spec in req.trace_specs() for s in (spec.down, spec.up) if s}
