"""Schedules: a link's numbers as piecewise steps over time, in strict TOML.

::

    description = "a train: cable at the station, a tunnel, then 3G"
    source = "where the numbers come from"      # optional
    loop = true                                 # the default, as mm-link repeats a trace

    [[step]]
    duration = "20s"                            # a time with a unit, whole milliseconds
    profile = "cable"                           # takes the profile's rate, delay and loss each way

    [[step]]
    duration = "5s"
    description = "the tunnel"                  # optional
    down = { rate = "0" }                       # nothing passes (rate 0 in any unit)
    up = { rate = "0" }

    [[step]]
    duration = "30s"
    profile = "3g"
    down = { loss = "0%" }                      # a step's own numbers override its profile's

    [[step]]
    duration = "10s"
    profile = "3g"
    blackhole = true                            # the link is gone: every packet is dropped

A step's ``down`` and ``up`` tables take ``rate``, ``delay`` and ``loss`` (the units of
a profile's; a rate may be 0; a loss may be a burst loss model, ``spec.lossmodel``).  Each
step must end with a rate in both directions, its own or its profile's.  A step with
``blackhole = true`` loses every packet both ways (loss 100%, ``BLACKHOLE_LOSS_PCT``): unlike
a rate of 0, which holds packets as a tunnel does, it drops each one as it arrives.  From a
profile a step takes those three numbers only: the link layer, queue, burst and jitter are the link's
own, for its whole life.  A step that gives
no delay (or loss), itself or by its profile, keeps the link's own (``None``).  A side
whose steps delay or lose packets gets a netem stage (``needs_netem``), which the driver
changes in place at each step.  A rate here means what a profile's rate means: the
line's rate, of which the class gets the link layer's share
(``LinkLayer.carried_bps``).

With ``loop = true`` the steps repeat for as long as the link lives; with ``loop =
false`` they run once and the last step's numbers stay.

Errors are one line naming the file, the step (counted from 1) and the field:
``schedule train.toml: step 2 down.rate: '-1kbit' is not a rate (...)``.
"""

import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import FieldError, UsageError
from ..spec import userfile
from ..spec.lossmodel import LossModel, parse_loss
from ..spec.units import parse_rate_or_zero_bps, parse_time_us
from .tracefile import MAX_PERIOD_MS

MAX_BYTES = 1 << 20  # a schedule file larger than this is refused unread
MAX_STEPS = 10_000
TOP_KEYS = ("description", "source", "loop", "step")
STEP_KEYS = ("duration", "profile", "description", "blackhole", "down", "up")
SIDE_KEYS = ("rate", "delay", "loss")
DIRECTIONS = ("down", "up")
BLACKHOLE_LOSS_PCT = 100.0  # a blackholed step's loss each way: its netem stage drops every packet that arrives
DURATIONS = "a step lasts a whole number of milliseconds, from 1ms to 1 hour"


@dataclass(frozen=True)
class Side:
    """One direction's numbers during a step."""

    rate_bps: int  # the line's rate; 0: nothing passes
    delay_us: int | None = None  # None: the link's own
    loss_pct: float | None = None  # None: the link's own
    loss_model: LossModel | None = None  # burst loss in the step (over loss_pct)


@dataclass(frozen=True)
class Step:
    duration_ms: int
    down: Side
    up: Side
    profile: str | None = None
    description: str = ""
    blackhole: bool = False  # its sides lose every packet (loss 100%): the link is gone

    def side(self, direction: str) -> Side:
        return self.down if direction == "down" else self.up


@dataclass(frozen=True)
class Schedule:
    path: str
    steps: tuple[Step, ...]
    loop: bool = True
    description: str = ""
    source: str = ""

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def period_ms(self) -> int:
        return sum(s.duration_ms for s in self.steps)

    def needs_netem(self, direction: str | None = None) -> bool:
        """Whether any step delays or loses packets (in ``direction``, or either), which takes
        a netem stage."""
        return any(s.side(d).delay_us or s.side(d).loss_pct or s.side(d).loss_model for s in self.steps
                   for d in (DIRECTIONS if direction is None else (direction,)))

    def most_delay_us(self, direction: str) -> int:
        """The longest delay a step gives ``direction`` (0: none gives one)."""
        return max(s.side(direction).delay_us or 0 for s in self.steps)


def load(path, profile, field: str = "schedule") -> Schedule:
    """The schedule in the file ``path``; ``profile(name, field)`` gives the profile a step
    names (``profiles.catalog.load_named``); ``field`` starts every error."""
    where = f"{field} {path}"
    return from_bytes(userfile.read(path, MAX_BYTES, where, WHAT), where, str(path), profile)


WHAT = "a schedule file (TOML text)"


def from_bytes(raw: bytes, where: str, path: str, profile) -> Schedule:
    """The schedule in a file's bytes ``raw`` (at most ``MAX_BYTES + 1`` of them, as
    ``userfile.read`` gives them); ``where`` starts every error; ``profile`` as for ``load``."""
    if len(raw) > MAX_BYTES:
        raise UsageError(f"{where}: is more than {MAX_BYTES:,} bytes, the most it may hold")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: is not UTF-8 text (byte {e.start + 1} is not)") from None
    return parse(text, profile, where, path)


def parse(text: str, profile, where: str = "schedule", path: str = "") -> Schedule:
    """The schedule in TOML ``text``; ``profile(name, field)`` gives the profile a step names
    (refusing what is not a profile's name); ``where`` starts every error."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: is not TOML ({' '.join(str(e).split())})") from None
    _known(data, TOP_KEYS, where)
    for key in ("description", "source"):
        if not isinstance(data.get(key, ""), str):
            raise FieldError(f"{where}: {key}", data[key], "is not text")
    loop = data.get("loop", True)
    if not isinstance(loop, bool):
        raise FieldError(f"{where}: loop", loop, "is not true or false")
    tables = data.get("step")
    if not isinstance(tables, list) or not tables:
        raise UsageError(f"{where}: no steps (each is a [[step]] table with a duration and a profile or rates)")
    if len(tables) > MAX_STEPS:
        raise UsageError(f"{where}: has {len(tables):,} steps; a schedule holds at most {MAX_STEPS:,}")
    steps = tuple(_step(body, f"{where}: step {i}", profile) for i, body in enumerate(tables, 1))
    period = sum(s.duration_ms for s in steps)
    if period > MAX_PERIOD_MS:
        raise UsageError(f"{where}: lasts {period:,} ms; a schedule lasts at most {MAX_PERIOD_MS:,} ms (one day)")
    return Schedule(path or where, steps, loop, data.get("description", ""), data.get("source", ""))


def _known(table: dict, allowed: tuple, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {', '.join(allowed)})")


def _step(body, where: str, profile) -> Step:
    if not isinstance(body, dict):
        raise FieldError(where, type(body).__name__, "is not a table ([[step]] with duration = ...)")
    _known(body, STEP_KEYS, where)
    if "duration" not in body:
        raise UsageError(f"{where}: duration: none given (a time with a unit, e.g. 20s or 500ms)")
    duration = body["duration"]
    if _negative(duration):
        raise FieldError(f"{where} duration", f"'{duration}'", f"is negative ({DURATIONS})")
    duration_us = parse_time_us(duration, f"{where} duration")
    if duration_us < 1000 or duration_us % 1000:
        raise FieldError(f"{where} duration", f"'{duration}'", f"is not whole milliseconds ({DURATIONS})")
    for key in ("profile", "description"):
        if not isinstance(body.get(key, ""), str):
            raise FieldError(f"{where} {key}", body[key], "is not text")
    name = body.get("profile")
    base = None
    if name is not None:
        base = profile(name, f"{where} profile")
    sides = {d: _side(body.get(d, {}), base and getattr(base, d), f"{where} {d}") for d in DIRECTIONS}
    dark = body.get("blackhole", False)
    if not isinstance(dark, bool):
        raise FieldError(f"{where} blackhole", dark, "is not true or false")
    if dark:
        for d in DIRECTIONS:
            if "loss" in body.get(d, {}):
                raise UsageError(f"{where} {d}.loss: not with blackhole = true (a blackholed step loses every packet)")
        sides = {d: Side(s.rate_bps, s.delay_us, BLACKHOLE_LOSS_PCT) for d, s in sides.items()}
    return Step(duration_us // 1000, sides["down"], sides["up"], name, body.get("description", ""), dark)


def _negative(value) -> bool:
    """A time given with a minus sign (text) or below 0 (a number): named as negative."""
    return isinstance(value, str) and value.strip().startswith("-") or \
        isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0


def _side(table, params, where: str) -> Side:
    """One direction of a step: its own numbers over its profile's side (``params``)."""
    if not isinstance(table, dict):
        raise FieldError(where, type(table).__name__, "is not a table (e.g. down = { rate = \"1mbit\" })")
    for key in table:
        if key not in SIDE_KEYS:
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {', '.join(SIDE_KEYS)})")
    rate = parse_rate_or_zero_bps(table["rate"], f"{where}.rate") if "rate" in table else \
        params.rate_bps if params else None
    if rate is None:
        raise UsageError(f"{where}.rate: none given (a rate, 0 for nothing, or a profile with a rate)")
    if _negative(table.get("delay")):
        raise FieldError(f"{where}.delay", f"'{table['delay']}'", "is negative (a delay is a time from 0 to 1 hour, "
                                                                  "e.g. 150ms)")
    delay = parse_time_us(table["delay"], f"{where}.delay") if "delay" in table else params.delay_us if params else None
    loss = parse_loss(table["loss"], f"{where}.loss") if "loss" in table else \
        (params.loss_model or params.loss_pct) if params else None
    if isinstance(loss, LossModel):
        return Side(rate, delay, 0.0, loss)
    return Side(rate, delay, loss)
