"""Plans that end by themselves (``--for``): when a plan ends, and the process that removes
it then (docs/faults.md, "Faults that end").

* An apply of a request with ``lasting_ms`` records when it ends (``stamped``:
  ``Request.expires_ms``, Unix time in ms) and starts the interface's watcher (``start``):
  ``ratelimit expire --interface IF``, detached, which holds ``IF.expire.lock`` while it
  lives.
* The watcher (``watch``) reads the record each second.  When the recorded plan's end has
  come, it removes the plan, as ``--clean`` does, unless the record changed meanwhile.  A
  record with no end, or none, ends it.
* The record states the end, so nothing else needs to be alive for it to hold: a watcher
  started again (``ratelimit expire``) acts on it, ``--restore`` after a reboot does not
  put back a plan whose end has passed, and ``--list`` says when a plan ends or that its
  end passed unenforced.

For example, ``ratelimit --if eth1 -h 198.18.0.2 --profile modem-28k8 --for 10m`` installs
the modem's links, and ten minutes later the watcher removes them.
"""

import dataclasses
import fcntl
import time

from ..driver.follow import spawn
from ..errors import StateError
from ..state import records

CHECK_EVERY_S = 1.0  # the record is read again this often: a new apply may have changed the end
START_WAIT_S = 10.0  # how long ``start`` waits for the watcher to take its lock


def lock_path(netns, interface):
    return records.interface_path(netns, interface, "expire.lock")


def stamped(req, now_ms: int):
    """``req`` with the end of a plan that lasts (``lasting_ms``): from ``now_ms``, or the one
    it carries (a recorded request applied again, as ``--restore`` does, keeps its end)."""
    if req.lasting_ms is None:
        return dataclasses.replace(req, expires_ms=None)
    return req if req.expires_ms is not None else dataclasses.replace(req, expires_ms=now_ms + req.lasting_ms)


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


def watch(netns, interface, clean, say=print) -> int:
    """The watcher: remove the interface's plan with ``clean`` (``actions.clean``) when its
    end comes (see the module's docstring); returns 0 when there is nothing left to watch,
    1 if the removal failed."""
    path = lock_path(netns, interface)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another watcher has it
        while True:
            end = ends_ms(netns, interface)
            if end is None:
                return 0
            left_s = end / 1000 - time.time()
            if left_s > 0:
                time.sleep(min(left_s, CHECK_EVERY_S))
                continue
            try:
                removed = clean(interface, netns, only_if=lambda req: req is not None and req.expires_ms == end)
            except Exception as err:  # said in its log; the record still says the end passed (--list shows it)
                say(f"ratelimit: expire {interface}: the plan's end came, and removing it failed: {err}")
                return 1
            if removed:
                say(f"ratelimit: expire {interface}: the plan's end came; removed")
            # not removed: a new apply came first; its end, if any, is the next one


def ends_ms(netns, interface) -> int | None:
    """When the interface's recorded plan ends (Unix time, ms); None: it does not, or there is none."""
    try:
        record = records.load(netns, interface)
    except StateError:  # a damaged record is --clean's to report; nothing to watch
        return None
    return None if record is None or record.request is None else record.request.expires_ms
