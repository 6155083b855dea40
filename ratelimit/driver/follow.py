"""The trace driver's control, for the processes around it: its files beside the record
(``IF.follow.json``, its status; ``IF.follow.log``; ``IF.follow.lock``, held for as long as
it lives), whether one runs (``alive``), its last word (``read_status``), ``start``, ``stop``
and ``report`` (what ``--list``, ``--stats`` and the dashboard say of it).  The driver
itself is ``loop``; what it does and why: docs/profiles.md, "The driver".

For example, the apply that installs a traced plan on eth1 calls ``start(None, "eth1")``:
it runs ``ratelimit follow --interface eth1`` detached and returns its pid once it holds
its lock (None: one runs already, and it reads the new record itself).
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import SOURCE_ROOT
from ..errors import RatelimitError, StateError
from ..state import records

VERSION = 1
DEFAULT_STEP_MS = 100  # docs/profiles.md, "The driver": measured
MIN_STEP_MS, MAX_STEP_MS = 10, 10_000
START_WAIT_S = 60.0  # how long ``start`` waits for a new driver to take its lock (it returns at once if the driver ends)
STOP_WAIT_S = 5.0


def status_path(netns, interface) -> Path:
    return records.interface_path(netns, interface, "follow.json")


def log_path(netns, interface) -> Path:
    return records.interface_path(netns, interface, "follow.log")


def lock_path(netns, interface) -> Path:
    return records.interface_path(netns, interface, "follow.lock")


def traced(req) -> bool:
    return req is not None and req.mode == "shape" and bool(req.trace_specs())


def alive(netns: str | None, interface: str) -> bool:
    """Whether a driver runs for the interface (it holds the lock file)."""
    try:
        fh = open(lock_path(netns, interface), "r")
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
    """The driver's last word (None: none ever ran here, or it is unreadable): its pid,
    ``state``, the step and when it was sent (``step``, ``step_at_ms``), how many links it
    left ``shut``, ``held`` and ``learnt`` the packets of, and its counts so far (``sent``
    changes, ``rounds``, ``missed`` steps, ``kicked`` frames).  A driver that died leaves its last step there."""
    try:
        data = json.loads(status_path(netns, interface).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def command(netns: str | None, interface: str, step_ms: int | None = None, reference: bool = False) -> list[str]:
    """The command line of the interface's driver (``ratelimit follow``; ``reference``: the
    per-link reference steps, ``--reference``)."""
    argv = ["ratelimit", "follow", "--interface", interface]
    if netns:
        argv += ["--netns", netns]
    if step_ms is not None and step_ms != DEFAULT_STEP_MS:
        argv += ["--step", f"{step_ms}ms"]
    return argv + ["--reference"] * reference


def start(netns: str | None, interface: str, step_ms: int | None = None, reference: bool = False) -> int | None:
    """Start the interface's driver unless one runs (that one reads the new record itself);
    returns the new driver's pid, or None.  Waits until it holds its lock; RatelimitError
    with its last words if it ends first."""
    if alive(netns, interface):
        return None
    log = log_path(netns, interface)
    proc = spawn(command(netns, interface, step_ms, reference)[1:], log)
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


def python_path() -> str:
    """The PYTHONPATH a process of ours starts with: this checkout first, so it runs this code."""
    return os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH")) if p)


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    """``python -m ratelimit ARGV``, detached (a session of its own, no input), its output
    appended to ``log``: a driver, or a plan's expiry (``service.expiry``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=python_path())
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, "-m", "ratelimit", *argv], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=out, env=env, start_new_session=True, close_fds=True)


def stop(netns: str | None, interface: str, timeout_s: float = STOP_WAIT_S) -> bool:
    """Stop the interface's driver (SIGTERM, then SIGKILL after ``timeout_s``); True if one ran."""
    if not alive(netns, interface):
        return False
    pid = (read_status(netns, interface) or {}).get("pid")
    if not isinstance(pid, int) or not _is_driver(pid):
        raise StateError(f"{interface}: a trace driver holds {lock_path(netns, interface)} but its status names "
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
    started = req.traced_start_ms
    out = {"running": running, "pid": status.get("pid") if running else None, "step_ms": status.get("step_ms"),
           "step": status.get("step"), "step_at_ms": status.get("step_at_ms"), "shut": status.get("shut", 0),
           "links": status.get("links"), "cells": status.get("cells", 0), "cells_shut": status.get("cells_shut", 0),
           "state": status.get("state") if running else "stopped",
           "why": status.get("why"), "started_ms": started, "command": " ".join(command(netns, interface))}
    if status.get("started_ms") != started:  # its last word is of another plan's traces
        out.update(step=None, step_at_ms=None, shut=0, links=None, cells=0, cells_shut=0)
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
