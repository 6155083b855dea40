"""The trace driver, ``ratelimit follow``: one process per traced interface that keeps the
kernel following the traces of the plan recorded on it (``run``).

* Each step it sends the traced cells' classes and gates (``cells``), then the traced
  links' (``steps``), through the executor, under the interface's lock, as an apply or a
  clean is.
* It follows the record, never the kernel: a new record is read and compiled; one that is
  gone or no longer traced ends it, as SIGTERM (``follow.stop``) does.
* Step ``k`` is due at ``Request.traced_start_ms + k x step_ms`` of the wall clock, so a
  driver started again takes up each link at the step the clock says.
* Each step it rewrites its status (``follow.read_status``).

Why it runs as it does (its own process, its timing, its memory, the links' packets):
docs/design.md, "The driver process".  For example, ``run(None, "eth1", 100)`` follows
eth1's plan in steps of 100 ms until ``--clean`` stops it, and returns 0.
"""

import fcntl
import functools
import gc
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import ConflictError, RatelimitError, StateError
from ..kernel.counters import FlowTable
from ..kernel.executor import Executor, StepFailed  # the only code that changes traffic control
from ..kernel.kick import Kicker
from ..kernel.netns import NETNS_DIR
from ..kernel.readback import Reader
from ..kernel.transport import KernelError
from ..plan.compile import compiled
from ..profiles.traced import load as load_source
from ..state import records
from ..state.signals import guard
from ..traces.capacity import TraceCapacity
from .follow import DEFAULT_STEP_MS, MAX_STEP_MS, MIN_STEP_MS, VERSION, lock_path, read_status, status_path, traced
from .cells import CellSteps, traced_cells
from .steps import Stepper, traced_links

FAILURES = 3  # steps refused in a row before the driver gives up
LEAD_WEIGHT = 0.1  # of the newest round's lateness in the running lead
LEAD_MOST_MS = 2.0  # the most one round moves the lead
LEARN_EVERY_S = 1.0  # how often the links' counters are read to learn their packets
ARRAYS_FROM = 1000  # links from which a plan of schedules alone is stepped in arrays too
LEARN_SHARE = 0.02  # the most of its time the driver gives to that (a longer reading, a longer interval)


class _Writer:
    """The status file, rewritten in place (a temporary file renamed over it; no fsync:
    it is news, not a record, and lives in /run)."""

    def __init__(self, netns, interface, step_ms: int):
        self.path = status_path(netns, interface)
        self.base = {"version": VERSION, "pid": os.getpid(), "step_ms": step_ms}
        self.last: dict = {}

    def __call__(self, **fields) -> None:
        self.last = {**self.base, **fields}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.last))
        os.replace(tmp, self.path)


def run(netns: str | None, interface: str, step_ms: int = DEFAULT_STEP_MS, say=print, reference: bool = False) -> int:
    """Follow the traces of the interface's record until it is removed or no longer traced,
    or a signal (SIGTERM, SIGINT) stops it; returns the exit status.  ``reference``: step
    each link with ``steps.Stepper`` and send operations (the same changes, more CPU)."""
    if not MIN_STEP_MS <= step_ms <= MAX_STEP_MS:
        raise ValueError(f"step {step_ms} ms is outside {MIN_STEP_MS}-{MAX_STEP_MS}")
    lock = lock_path(netns, interface)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConflictError(f"{interface}: a trace driver already follows its traces "
                                f"(pid {(read_status(netns, interface) or {}).get('pid')})") from None
        write = _Writer(netns, interface, step_ms)
        write.base["realtime"] = _realtime()
        write(state="starting", started_ms=None, step=None, links=0, shut=0)
        with guard() as g:
            gc.disable()  # docs/design.md, "The driver process": memory
            try:
                why, code = _Loop(netns, interface, step_ms, write, g, reference).run()
            except BaseException as err:  # a signal (signals.Stop) or a failure: say so, then go
                why = getattr(err, "name", None) or f"{type(err).__name__}: {err}"
                code = 0 if getattr(err, "name", None) else 1
                if code:
                    say(f"ratelimit: follow {interface}: {why}")
            finally:
                gc.unfreeze()
                gc.enable()
            write(**{**write.last, "state": "stopped", "why": why})
        say(f"ratelimit: follow {interface}: stopped ({why})")
        return code


def _realtime() -> bool:
    """Run at the lowest real-time priority, if allowed; whether it does (docs/design.md,
    "The driver process": timing)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (AttributeError, OSError):
        return False


def _timed(apply, ops, kick) -> float:
    """Send ``ops``, then ``kick()``; when the last op was answered (``time.monotonic``)."""
    apply(ops)
    done = time.monotonic()
    kick()
    return done


@dataclass
class _Step:
    """One step's changes: the traced cells' operations, and the links' (``Stepper.changes``
    or ``VectorStepper.changes``)."""

    cells: tuple
    links: object

    def __len__(self) -> int:
        return len(self.cells) + len(self.links)


class _Loop:
    def __init__(self, netns, interface, step_ms, write, g, reference=False):
        self.netns, self.interface, self.step_ms, self.write, self.guard = netns, interface, step_ms, write, g
        self.reference = reference
        self.templates = None  # each link's messages, packed for the plan (``rounds.Templates``; None: not yet)
        self.record_id = None
        self.stepper = self.started = None
        self.cells = None  # the traced cells' steps (``cells.CellSteps``)
        self.loaded: dict = {}  # (path, sha256) -> the trace or schedule
        self.lead_ms = 0.0
        self.queues = 1  # the plan's tx queues: a kick goes to each
        self.table = None  # where the traced links' class counters are (``counters.FlowTable``)
        self.learn_at = 0.0  # when to read them next (``time.monotonic``)

    def run(self) -> tuple[str, int]:
        failures, resend, ops, k, counts = 0, True, None, None, {}
        sent = rounds = missed = 0  # changes and rounds sent, steps not sent (their time had passed)
        kicks, kicked = frozenset(), 0  # the devices to kick after this round (``Stepper.reopened``); frames sent
        with Executor(self.netns) as ex, Reader(self.netns) as reader, Kicker(self.netns) as kicker, \
                ThreadPoolExecutor(1, "send") as sender:

            def kick(devs):
                nonlocal kicked
                for dev in sorted(devs):
                    kicked += kicker.kick(dev, self.queues)
            while True:
                if self.guard.pending:
                    return signal.Signals(self.guard.pending).name, 0
                self.guard.arm()
                with records.lock(self.netns, self.interface):
                    why = self._read_record()
                    if why:
                        return why, 0
                    if self.record_id[1] or ops is None:  # a new plan, or a step to catch up on
                        resend = resend or self.record_id[1]
                        k = self._now_step()
                        ops = self._changes(k, resend)
                        counts, kicks = self._counts(), self._reopened()
                    self.guard.hold()  # a step goes out whole
                    landing = self.stepper.take_sent()
                    begun_ms, sent_at = time.time() * 1000, time.monotonic()
                    round_ = sender.submit(_timed, functools.partial(self._send, ex), ops,
                                           functools.partial(kick, kicks))
                    # the next step is made while this one goes out: the kernel's work on the
                    # messages is done in the sending thread's system calls, on the other CPU
                    next_k = max(k + 1, self._now_step())  # a step missed is not sent late: the next is
                    next_ops = self._changes(next_k)
                    next_counts = self._counts()  # the links' state once it is sent; this round's is ``counts``
                    next_kicks = self._reopened()
                    try:
                        done_at = round_.result()
                    except StepFailed as e:
                        failures, ops = failures + 1, None
                        self.stepper.forget()
                        self.cells.forget()
                        self.record_id = None  # read it again: the plan may have changed under us
                        if failures >= FAILURES:
                            raise StateError(f"{FAILURES} steps in a row failed, the last: {e}") from None
                        continue
                    round_ms = (done_at - sent_at) * 1000
                    first_ms = begun_ms - (self.started + k * self.step_ms)
                    self.stepper.landed(first_ms, round_ms, landing)
                    late_ms = first_ms + round_ms / 2  # the round's middle against its window's start
                    failures, resend = 0, False
                    sent, rounds = sent + len(ops), rounds + 1
                    if time.monotonic() >= self.learn_at:
                        self._learn(reader)
                    if ops:  # wake earlier (or later) by what the rounds have been late: the middle on time
                        self.lead_ms = min(self.step_ms / 2, max(0.0, self.lead_ms + max(
                            -LEAD_MOST_MS, min(LEAD_MOST_MS, LEAD_WEIGHT * late_ms))))
                    self.write(state="following", started_ms=self.started, step=k, step_at_ms=int(begun_ms),
                               links=len(self.stepper.links), **counts, changes=len(ops), round_ms=round(round_ms, 3),
                               late_ms=round(late_ms, 3), lead_ms=round(self.lead_ms, 3), learnt=self.stepper.learnt,
                               why=None,
                               cpu_s=round(sum(os.times()[:2]), 2), sent=sent, rounds=rounds, missed=missed,
                               kicked=kicked)
                if self.guard.pending:
                    return signal.Signals(self.guard.pending).name, 0
                self.guard.arm()
                missed += next_k - k - 1
                k, ops, counts, kicks = next_k, next_ops, next_counts, next_kicks
                wake_ms = self.started + k * self.step_ms - (0.0 if kicks else self.lead_ms)
                time.sleep(max(0.0, (wake_ms - time.time() * 1000) / 1000))

    def _stepper(self, links):
        """The reference ``Stepper`` when asked for, or for a few links that follow only
        schedules (it spares numpy's import: seconds in the emulated VM); else the arrays'."""
        if self.reference or (len(links) < ARRAYS_FROM and
                              not any(type(link.capacity) is TraceCapacity for link in links)):
            return Stepper(links, self.step_ms)
        from .vector import VectorStepper  # numpy: only a driver of traces, or of many links, pays for its import
        return VectorStepper(links, self.step_ms)

    def _changes(self, k: int, resend: bool = False) -> "_Step":
        return _Step(self.cells.changes(k, resend), self.stepper.changes(k, resend))

    def _reopened(self) -> frozenset:
        """The devices to kick once the last ``_changes`` landed (a link's or a cell's gate opens)."""
        return self.stepper.reopened | self.cells.reopened

    def _send(self, ex, step: "_Step") -> None:
        """Carry out a step's changes: the cells', then the links' -- operations (the
        reference ``Stepper``'s), or a round in the plan's templates (packed at the first
        round after a new plan)."""
        if step.cells:
            ex.apply(step.cells)
        ops = step.links
        if type(ops) is tuple:
            return ex.apply(ops) if ops else None
        from ..kernel import rounds  # numpy, as VectorStepper
        if self.templates is None:
            self.templates = rounds.Templates([link.klass for link in self.stepper.links],
                                              [link.gate for link in self.stepper.links])
        rounds.apply_round(ex, ops, self.templates)

    def _counts(self) -> dict:
        return {"shut": self.stepper.shut_count(), "held": self.stepper.held_count(),
                "cells": len(self.cells.cells), "cells_shut": self.cells.shut_count()}

    def _learn(self, reader) -> None:
        """Read the traced links' class counters and learn their packets from them."""
        began = time.monotonic()
        try:
            cols = reader.counters(self.table)
        except (RatelimitError, KernelError):  # traffic control kept changing: the next reading
            pass
        else:
            self.stepper.learn(cols["bytes"], cols["packets"])
        self.learn_at = began + max(LEARN_EVERY_S, (time.monotonic() - began) / LEARN_SHARE)

    def _now_step(self) -> int:
        return max(0, int((time.time() * 1000 + self.lead_ms - self.started) // self.step_ms))

    def _read_record(self) -> str | None:
        """Read the record again if its file changed; a reason to stop, or None.  Sets
        ``record_id`` to (identity, changed?)."""
        path = records.record_path(self.netns, self.interface)
        if self.netns and not os.path.exists(os.path.join(NETNS_DIR, self.netns)):
            return f"namespace {self.netns} is gone"  # our socket would keep its network alive
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "the plan was removed"
        ident = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self.record_id is not None and self.record_id[0] == ident:
            self.record_id = (ident, False)
            return None
        record = records.load(self.netns, self.interface)
        if record is None:
            return "the plan was removed"
        if record.problem:
            return f"the interface is half-configured ({record.problem})"
        req = record.request
        if not traced(req):
            return "the plan has no traces any more"
        plan = compiled(req)
        sources = {(s.path, s.sha256): s for spec in req.trace_specs()
                   for s in (spec.down, spec.up) if s is not None}
        self.loaded = {key: self.loaded.get(key) or load_source(src) for key, src in sources.items()}
        self.stepper = None
        gc.unfreeze()
        gc.collect()  # what the last plan left in cycles
        loaded = {path: v for (path, _), v in self.loaded.items()}
        self.stepper = self._stepper(traced_links(plan, loaded))
        self.cells = CellSteps(traced_cells(plan, loaded), self.step_ms)
        self.write.base["stepper"] = "reference" if type(self.stepper) is Stepper else "arrays"
        self.templates = None
        self.table = FlowTable.of_classes((link.klass.dev, link.klass.classid) for link in self.stepper.links)
        self.learn_at = 0.0  # the first reading after a new plan is where the next one counts from
        gc.freeze()  # the plan and its links live as long as it: no collection walks them
        self.started, self.queues = req.traced_start_ms, req.queues
        if self.started is None:
            return "the record has traces but no start time (applied by an older ratelimit?): apply again"
        self.record_id = (ident, True)
        return None
