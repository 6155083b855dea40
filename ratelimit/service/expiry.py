"""Plans that end by themselves (``--for``): when a plan ends, and the process that removes
it then (docs/faults.md, "Faults that end").

* An apply of a request with ``lasting_ms`` records when it ends (``stamped``:
  ``Request.expires_ms``, Unix time in ms) and starts the interface's watcher (``start``):
  ``ratelimit expire --interface IF``, detached, which holds ``IF.expire.lock`` while it
  lives.
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
import time

from ..driver.follow import spawn
from ..errors import StateError
from ..state import records

CHECK_EVERY_S = 1.0  # the record is read again this often: a new apply may have changed the end
START_WAIT_S = 10.0  # how long ``start`` waits for the watcher to take its lock


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
    """Start the interface's watcher unless one runs (that one reads the new end itself);
    returns once it holds its lock, or after ``START_WAIT_S``."""
    if alive(netns, interface):
        return
    argv = ["expire", "--interface", interface, *(["--netns", netns] if netns else [])]
    proc = spawn(argv, records.interface_path(netns, interface, "expire.log"))
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None and not alive(netns, interface):
        time.sleep(0.02)


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
