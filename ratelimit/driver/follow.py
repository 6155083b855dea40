"""The trace driver: one ``ratelimit follow`` process per traced interface.

It keeps the kernel following the traces of the plan recorded on the interface: every
step it changes the traced links' classes and gates in place (``steps``), in batches,
through the executor.  Decided here (docs/profiles.md, "The driver"):

* **Where it runs**: a process of its own, started by the apply that installs a traced
  plan (``start``: detached, its output in ``IF.follow.log`` beside the record), or by a
  supervisor (``contrib/ratelimit-follow@.service``; apply with ``--no-follow`` then).
  One per interface: it holds ``IF.follow.lock`` for as long as it lives, so a second one
  stops at once, and whether one runs is whether that lock is held (a pid can be reused;
  a lock dies with its process).
* **The interface's lock**: each step is sent under the interface's lock (``state.lock``),
  as an apply or a clean is, so a step never interleaves with them: while one runs the
  driver waits, and then goes on at the step the clock says.
* **What it follows**: the record, never the kernel.  Each step it looks whether the record
  changed (its file's identity); if so it reads it, compiles the plan (the handles of a
  make-before-break, the old plan back after a rollback) and sends every traced link's
  class and gate, not only what changed.  A record that is gone (``--clean``) or no longer
  traced ends it; ``--clean`` also stops it (``stop``).
* **Time**: the traces' start is the record's (``TraceSpec.started_ms``, wall clock), so a
  driver started again -- after a crash, a reboot of the driver, ``ratelimit follow`` by
  hand -- takes up each link at the step the clock says, its phase as recorded.
* **Timing**: the driver makes a step's changes before the step and sleeps until just
  before it (``lead_ms``, learnt from how late its rounds land), except that a round that
  ends an outage (opens a shut gate) is not sent before its step: a lead learnt while rounds
  were late would let the link's packets through before the outage's end; it runs at the lowest
  real-time priority where it may (``_realtime``).  A thread of its own sends each round
  while the driver makes the next step's changes: the kernel works on the messages in the
  sender's system calls, so the driver's Python runs beside that on the other CPU (at
  10,000 links each takes some 60 ms a step, measured).  A step's changes are made before
  the last round's lateness is known, so what that lateness owes is paid a step later.
* **Memory**: the cycle collector is off while the driver follows (``run``): a step makes
  and drops thousands of objects, none in cycles, and each collection walked the whole
  plan (a quarter of a step's time at 10,000 links, measured).  It collects when it reads
  a new plan, and freezes what that plan made.
* **The links' packets**: every ``LEARN_EVERY_S`` (less often where a reading takes over
  ``LEARN_SHARE`` of that) it reads its links' class counters, one dump per HTB qdisc, and
  each link's packets are its bytes over its packets since the reading before
  (``Stepper.learn``): what a change lets out is counted in them (``steps``, "In the
  link's own packets").
* **What it says**: ``IF.follow.json``, rewritten every step (``report`` reads it for
  ``--list``, ``--stats`` and the dashboard): its pid, the step and when it was sent,
  how many links it left shut, holds and knows the packets of; and its counts so far
  (``sent`` changes, ``rounds``, ``missed`` steps: their time had passed before it could
  send them), which ``bench/trace.py`` reads.  A driver that died leaves its last step there.

Over 400 lines: the control (start, stop, report) and the loop share the files, locks and
status they name; the seam for a split is between them, at "the driver" below.
"""

import fcntl
import gc
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import SOURCE_ROOT
from ..state import records
from ..plan.compile import compiled
from ..errors import ConflictError, RatelimitError, StateError
from ..kernel.counters import FlowTable
from ..kernel.transport import KernelError
from ..state.signals import guard
from .steps import Stepper, traced_links
from ..profiles.traced import load as load_source

VERSION = 1
DEFAULT_STEP_MS = 100  # docs/profiles.md, "The driver": measured
MIN_STEP_MS, MAX_STEP_MS = 10, 10_000
START_WAIT_S = 60.0  # how long ``start`` waits for a new driver to take its lock (it returns at once if the driver ends)
STOP_WAIT_S = 5.0
FAILURES = 3  # steps refused in a row before the driver gives up
LEAD_WEIGHT = 0.1  # of the newest round's lateness in the running lead
LEAD_MOST_MS = 2.0  # the most one round moves the lead
LEARN_EVERY_S = 1.0  # how often the links' counters are read to learn their packets
LEARN_SHARE = 0.02  # the most of its time the driver gives to that (a longer reading, a longer interval)


def _path(netns: str | None, interface: str, suffix: str) -> Path:
    return records.state_dir() / (netns or "-") / f"{interface}.{suffix}"


def status_path(netns, interface) -> Path:
    return _path(netns, interface, "follow.json")


def log_path(netns, interface) -> Path:
    return _path(netns, interface, "follow.log")


def _lock_path(netns, interface) -> Path:
    return _path(netns, interface, "follow.lock")


def traced(req) -> bool:
    return req is not None and req.mode == "shape" and any(c.trace is not None for c in req.cohorts)


# ---------------------------------------------------------------- control: start, stop, report


def alive(netns: str | None, interface: str) -> bool:
    """Whether a driver runs for the interface (it holds the lock file)."""
    try:
        fh = open(_lock_path(netns, interface), "r")
    except FileNotFoundError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def read_status(netns: str | None, interface: str) -> dict | None:
    """The driver's last word (None: none ever ran here, or it is unreadable)."""
    try:
        data = json.loads(status_path(netns, interface).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def command(netns: str | None, interface: str, step_ms: int | None = None) -> list[str]:
    """The command line of the interface's driver (``ratelimit follow``)."""
    argv = ["ratelimit", "follow", "--interface", interface]
    if netns:
        argv += ["--netns", netns]
    if step_ms is not None and step_ms != DEFAULT_STEP_MS:
        argv += ["--step", f"{step_ms}ms"]
    return argv


def start(netns: str | None, interface: str, step_ms: int | None = None) -> int | None:
    """Start the interface's driver unless one runs (that one reads the new record itself);
    returns the new driver's pid, or None.  Waits until it holds its lock; RatelimitError
    with its last words if it ends first."""
    if alive(netns, interface):
        return None
    log = log_path(netns, interface)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH"))
                                                       if p))
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ratelimit", *command(netns, interface, step_ms)[1:]],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True,
                                close_fds=True)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if alive(netns, interface):
            return proc.pid
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    last = ([line for line in log.read_text().splitlines() if line.strip()] or ["no output"])[-1]
    raise RatelimitError(f"{interface}: the trace driver did not start ({last.removeprefix('ratelimit: ')}; "
                         f"log {log})")


def stop(netns: str | None, interface: str, timeout_s: float = STOP_WAIT_S) -> bool:
    """Stop the interface's driver (SIGTERM, then SIGKILL after ``timeout_s``); True if one ran."""
    if not alive(netns, interface):
        return False
    pid = (read_status(netns, interface) or {}).get("pid")
    if not isinstance(pid, int) or not _is_driver(pid):
        raise StateError(f"{interface}: a trace driver holds {_lock_path(netns, interface)} but its status names "
                         f"no live driver (pid {pid}); stop it by hand")
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, timeout_s)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(netns, interface):
                return True
            time.sleep(0.02)
    raise StateError(f"{interface}: the trace driver (pid {pid}) did not stop")


def _is_driver(pid: int) -> bool:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"follow" in words


def report(req, netns: str | None, interface: str, now_ms: int | None = None) -> dict | None:
    """What ``--list``, ``--stats`` and the dashboard say of the driver of the traced plan
    ``req`` (None for a plan without traces): running or not, the step the links are at
    (or were left at), how many are shut, and a one-line ``notice`` when it is not running."""
    if not traced(req):
        return None
    status = read_status(netns, interface) or {}
    running = alive(netns, interface)
    started = next((c.trace.started_ms for c in req.cohorts if c.trace is not None), None)
    out = {"running": running, "pid": status.get("pid") if running else None, "step_ms": status.get("step_ms"),
           "step": status.get("step"), "step_at_ms": status.get("step_at_ms"), "shut": status.get("shut", 0),
           "links": status.get("links"), "state": status.get("state") if running else "stopped",
           "why": status.get("why"), "started_ms": started, "command": " ".join(command(netns, interface))}
    if status.get("started_ms") != started:  # its last word is of another plan's traces
        out.update(step=None, step_at_ms=None, shut=0, links=None)
    if running:
        out["notice"] = None
        return out
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if out["step"] is None:
        out["notice"] = (f"the trace driver is not running and has not followed these traces: every traced link "
                         f"holds the plan's first rate; start it: {out['command']}")
        return out
    into = out["step"] * (out["step_ms"] or 0) / 1000
    ago = max(0.0, (now_ms - (out["step_at_ms"] or now_ms)) / 1000)
    text = (f"the trace driver stopped {ago:.1f} s ago ({out['why'] or 'it died'}): the links were left at step "
            f"{out['step']} ({into:.1f} s into the traces)")
    if out["shut"]:
        text += (f", {out['shut']} of them shut -- an outage left in place, the worst case: nothing passes on "
                 "them until the driver runs again")
    out["notice"] = f"{text}; start it again: {out['command']}"
    return out


# ---------------------------------------------------------------- the driver


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


def run(netns: str | None, interface: str, step_ms: int = DEFAULT_STEP_MS, say=print) -> int:
    """Follow the traces of the interface's record until it is removed or no longer traced,
    or a signal (SIGTERM, SIGINT) stops it; returns the exit status."""
    if not MIN_STEP_MS <= step_ms <= MAX_STEP_MS:
        raise ValueError(f"step {step_ms} ms is outside {MIN_STEP_MS}-{MAX_STEP_MS}")
    lock = _lock_path(netns, interface)
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
            gc.disable()  # see "Memory" above
            try:
                why, code = _Loop(netns, interface, step_ms, write, g).run()
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
    """Run at the lowest real-time priority, if allowed: a step is a few milliseconds of
    work every ``step_ms``, and on a busy router an ordinary process woke tens of
    milliseconds late at the moments that matter most, when every link's rate rises and its
    traffic with it (measured).  The kernel keeps real-time tasks to 95% of a CPU."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (AttributeError, OSError):
        return False


def _timed(apply, ops) -> float:
    """Send ``ops``; when the last was answered (``time.monotonic``)."""
    apply(ops)
    return time.monotonic()


class _Loop:
    def __init__(self, netns, interface, step_ms, write, g):
        self.netns, self.interface, self.step_ms, self.write, self.guard = netns, interface, step_ms, write, g
        self.record_id = None
        self.stepper = self.started = None
        self.loaded: dict = {}  # (path, sha256) -> the trace or schedule
        self.lead_ms = 0.0
        self.table = None  # where the traced links' class counters are (``counters.FlowTable``)
        self.learn_at = 0.0  # when to read them next (``time.monotonic``)

    def run(self) -> tuple[str, int]:
        from ..kernel.executor import Executor, StepFailed  # the only code that changes traffic control
        from ..kernel.readback import Reader
        failures, resend, ops, k, counts = 0, True, None, None, {}
        sent = rounds = missed = 0  # changes and rounds sent, steps not sent (their time had passed)
        with Executor(self.netns) as ex, Reader(self.netns) as reader, ThreadPoolExecutor(1, "send") as sender:
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
                        ops = self.stepper.changes(k, resend)
                        counts = self._counts()
                    self.guard.hold()  # a step goes out whole
                    landing = self.stepper.take_sent()
                    begun_ms, sent_at = time.time() * 1000, time.monotonic()
                    round_ = sender.submit(_timed, ex.apply, ops)
                    # the next step is made while this one goes out: the kernel's work on the
                    # messages is done in the sending thread's system calls, on the other CPU
                    next_k = max(k + 1, self._now_step())  # a step missed is not sent late: the next is
                    next_ops = self.stepper.changes(next_k)
                    next_counts = self._counts()  # the links' state once it is sent; this round's is ``counts``
                    try:
                        done_at = round_.result()
                    except StepFailed as e:
                        failures, ops = failures + 1, None
                        self.stepper.forget()
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
                               cpu_s=round(sum(os.times()[:2]), 2), sent=sent, rounds=rounds, missed=missed)
                if self.guard.pending:
                    return signal.Signals(self.guard.pending).name, 0
                self.guard.arm()
                missed += next_k - k - 1
                k, ops, counts = next_k, next_ops, next_counts
                wake_ms = self.started + k * self.step_ms - (0.0 if self.stepper.reopens else self.lead_ms)
                time.sleep(max(0.0, (wake_ms - time.time() * 1000) / 1000))

    def _counts(self) -> dict:
        return {"shut": self.stepper.shut_count(), "held": self.stepper.held_count()}

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
        from ..kernel.netns import NETNS_DIR
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
        sources = {(s.path, s.sha256): s for c in req.cohorts if c.trace is not None
                   for s in (c.trace.down, c.trace.up) if s is not None}
        self.loaded = {key: self.loaded.get(key) or load_source(src) for key, src in sources.items()}
        self.stepper = None
        gc.unfreeze()
        gc.collect()  # what the last plan left in cycles
        self.stepper = Stepper(traced_links(plan, {path: v for (path, _), v in self.loaded.items()}), self.step_ms)
        self.table = FlowTable.of_classes((link.klass.dev, link.klass.classid) for link in self.stepper.links)
        self.learn_at = 0.0  # the first reading after a new plan is where the next one counts from
        gc.freeze()  # the plan and its links live as long as it: no collection walks them
        starts = {c.trace.started_ms for c in req.cohorts if c.trace is not None}
        if None in starts:
            return "the record has traces but no start time (applied by an older ratelimit?): apply again"
        self.started = min(starts)
        self.record_id = (ident, True)
        return None
