"""Plans that end by themselves (``--for``): when a plan ends, and the process that removes
it then (docs/faults.md, "Faults that end"; why: docs/design.md, "Plans that end").

* An apply of a request with ``lasting_ms`` records when it ends (``stamped``:
  ``Request.expires_ms``, Unix time in ms) and starts the interface's watcher (``start``):
  ``ratelimit expire --interface IF``, which holds ``IF.expire.lock`` while it lives.
  Where systemd runs, the watcher is a transient unit (``systemd_argv``) that systemd
  starts again when it is killed, by ``kill -9`` too; elsewhere it is a detached process.
* The watcher (``watch``) reads the record each second.  When the recorded plan's end has
  come, it puts back the plan that was installed before it (``Request.restores``), or
  removes it as ``--clean`` does when there was none, unless the record changed meanwhile.
  A record with no end, or none, ends it.
* The record states the end, so nothing else needs to be alive for it to hold: a watcher
  started again (``ratelimit expire``) acts on it, ``--restore`` after a reboot does not
  put back a plan whose end has passed, and ``--list`` says when a plan ends or that its
  end passed unenforced.

For example, ``ratelimit --if eth1 -h 198.18.0.2 --profile modem-28k8 --for 10m`` installs
the modem's links, and ten minutes later the watcher removes them (or puts back what eth1
had before).
"""

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

from ..driver.follow import python_path, spawn
from ..errors import StateError
from ..state import records

CHECK_EVERY_S = 1.0  # the record is read again this often: a new apply may have changed the end
START_WAIT_S = 10.0  # how long ``start`` waits for the watcher to take its lock
RESTART_S = 0.1  # systemd starts a killed watcher again this long after
PASSED_ENV = ("PATH", "RATELIMIT_STATE_DIR", "TC_LIB_DIR")  # what a watcher under systemd is given of ours


def lock_path(netns, interface):
    return records.interface_path(netns, interface, "expire.lock")


def stamped(req, now_ms: int, installed=None):
    """``req`` with the end of a plan that lasts (``lasting_ms``): from ``now_ms``, and the
    ``installed`` request it replaces, to be put back then; or the end and plan it carries
    (a recorded request applied again, as ``--restore`` does, keeps them)."""
    if req.lasting_ms is None:
        return dataclasses.replace(req, expires_ms=None, restores=None)
    if req.expires_ms is not None:
        return req
    before = None if installed is None else json.dumps(records.to_json(installed))
    return dataclasses.replace(req, expires_ms=now_ms + req.lasting_ms, restores=before)


def restored(req):
    """The request ``req`` puts back when it ends (None: none, it is removed), to be placed
    anew over what is installed then."""
    if req.restores is None:
        return None
    return dataclasses.replace(records.from_json(json.loads(req.restores)), generation=0, places=None)


def ended(req, now_ms: int) -> bool:
    """Whether ``req``'s end (if it has one) has come."""
    return req.expires_ms is not None and req.expires_ms <= now_ms


def alive(netns, interface) -> bool:
    """Whether a watcher runs for the interface (it holds the lock file)."""
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


def start(netns, interface) -> None:
    """Start the interface's watcher unless one runs (that one reads the new end itself):
    a systemd unit where systemd runs (``systemd_argv``), else a detached process; returns
    once it holds its lock, or after ``START_WAIT_S``."""
    if alive(netns, interface):
        return
    argv = ["expire", "--interface", interface, *(["--netns", netns] if netns else [])]
    log = records.interface_path(netns, interface, "expire.log")
    proc = None if _under_systemd(netns, interface, argv, log) else spawn(argv, log)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline and (proc is None or proc.poll() is None) and not alive(netns, interface):
        time.sleep(0.02)


def _under_systemd(netns, interface, argv, log) -> bool:
    """Whether systemd started the watcher as its unit (no systemd, or it refused: no)."""
    if not (os.path.isdir("/run/systemd/system") and shutil.which("systemd-run")):
        return False
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        ran = subprocess.run(systemd_argv(netns, interface, argv, log), stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=START_WAIT_S)
        why = None if ran.returncode == 0 else ran.stderr.strip() or f"exit {ran.returncode}"
    except subprocess.TimeoutExpired:
        why = f"no answer in {START_WAIT_S:.0f} s"
    if why:  # said in the watcher's log; a detached watcher does the job instead (two: one takes the lock)
        with open(log, "a") as out:
            out.write(f"ratelimit: systemd-run refused the watcher ({why}); a detached one instead, which does "
                      "not outlive kill -9\n")
    return why is None


def unit_name(netns, interface) -> str:
    """The watcher's systemd unit: ``ratelimit-expire-eth1.service``, with the namespace's
    name before the interface's (``ratelimit-expire-lab-eth1``); a byte that is not a
    letter, digit or ``_`` is written ``\\xNN``, so names never run together."""
    esc = lambda name: "".join(c if c.isascii() and (c.isalnum() or c == "_") else  # noqa: E731
                               "".join(f"\\x{b:02x}" for b in c.encode()) for c in name)
    return "-".join(["ratelimit-expire", *([esc(netns)] if netns else []), esc(interface)]) + ".service"


def systemd_argv(netns, interface, argv: list[str], log) -> list[str]:
    """``systemd-run`` of the watcher ``python -m ratelimit ARGV`` as the unit
    ``unit_name``: started again ``RESTART_S`` after a signal kills it (``kill -9``
    included), gone when it ends, its output appended to ``log``."""
    env = [f"--setenv={k}={os.environ[k]}" for k in PASSED_ENV if k in os.environ]
    return ["systemd-run", f"--unit={unit_name(netns, interface)}", "--collect", "--quiet",
            "--property=Restart=on-abnormal", f"--property=RestartSec={int(RESTART_S * 1000)}ms",
            f"--property=StandardOutput=append:{log}", f"--property=StandardError=append:{log}",
            f"--setenv=PYTHONPATH={python_path()}", *env, "--", sys.executable, "-m", "ratelimit", *argv]


def watch(netns, interface, clean, apply, say=print) -> int:
    """The watcher: when the interface's plan ends, put back the plan before it with
    ``apply`` (``actions.apply``), or remove it with ``clean`` (``actions.clean``) (see the
    module's docstring); returns 0 when there is nothing left to watch, 1 if that failed."""
    path = lock_path(netns, interface)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another watcher has it
        while True:
            req = recorded(netns, interface)
            end = None if req is None else req.expires_ms
            if end is None:
                return 0
            left_s = end / 1000 - time.time()
            if left_s > 0:
                time.sleep(min(left_s, CHECK_EVERY_S))
                continue

            def ending(installed):  # the plan whose end came, not one applied since
                return installed is not None and installed.expires_ms == end
            before = restored(req)
            what = "removing it" if before is None else "putting back the plan before it"
            try:
                done = clean(interface, netns, only_if=ending) if before is None else \
                    apply(before, only_if=ending) is not None
            except Exception as err:  # said in its log; the record still says the end passed (--list shows it)
                say(f"ratelimit: expire {interface}: the plan's end came, and {what} failed: {err}")
                return 1
            if done:
                say(f"ratelimit: expire {interface}: the plan's end came; {what}: done")
            # not done: a new apply came first; its end, if any, is the next one


def recorded(netns, interface):
    """The interface's recorded request; None when there is none (or the record is damaged:
    that is --clean's to report, and nothing to watch)."""
    try:
        record = records.load(netns, interface)
    except StateError:
        return None
    return None if record is None else record.request
