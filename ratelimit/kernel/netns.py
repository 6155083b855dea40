"""Named network namespaces, through pyroute2: make, list, enter, find processes in, delete.

``in_netns`` runs a function with one thread inside a namespace (``setns``
acts on the calling thread only), so this process stays where it is and no
process is started: cheap, which matters in the VM where starting one costs
~0.3 s.  Sockets made there keep that namespace for their life; ``/proc/sys/net``
opened there shows that namespace's settings.  pyroute2 has no sysctl API, so
``set_sysctl`` writes ``/proc/sys`` from such a thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence

from ..errors import NotFoundError, PermissionDenied

NETNS_DIR = "/run/netns"


def off_loop(fn, *args):
    """``fn(*args)``, from a helper thread when this thread runs an asyncio event loop.

    pyroute2's synchronous API drives its own asyncio loop and cannot while the
    calling thread already runs one (Playwright's sync API, an asyncio
    application embedding ratelimit)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e
    t = threading.Thread(target=run, name="rl-off-loop")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["result"]


def parent_only(handler):
    """Wrap a Python signal handler so that only this process runs it.

    pyroute2 forks short-lived children to enter namespaces and stops them with
    SIGTERM; a child inherits our handlers, and one that raised (to unwind and
    clean up) would unwind the parent's copied stack in the child.  The wrapped
    handler makes such a child exit at once instead."""
    pid = os.getpid()

    def run(signum, frame):
        if os.getpid() != pid:
            os._exit(128 + signum)
        return handler(signum, frame)
    return run


def create(name: str, attempts: int = 3) -> None:
    """Make the named namespace ``name`` (it must not exist).  pyroute2 makes it from a
    child process; right after many namespaces went, the kernel's cleanup can keep that
    child from answering in time ("no response from the child"): then what it left is
    removed and it is tried again."""
    from pyroute2 import netns as pyroute2_netns  # here, not at the top: importing pyroute2 takes 65 ms
    for attempt in range(attempts):
        try:
            pyroute2_netns.create(name)
            return
        except PermissionError:
            raise PermissionDenied(f"making network namespace {name!r} needs root") from None
        except OSError:
            if attempt == attempts - 1:
                raise
            if name in namespaces():
                try:
                    pyroute2_netns.remove(name)
                except OSError:
                    pass
            time.sleep(0.5 * (attempt + 1))


def namespaces() -> list[str]:
    """Names of all named network namespaces (those in /run/netns)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


CLONE_NEWNET = 0x40000000
_LIBC = None


def _setns(netns: str) -> None:
    """Move the calling thread into the named namespace (setns(2); Python 3.11 has no os.setns)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _LIBC.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)


def in_netns(netns: str, fn, *args):
    """Call ``fn(*args)`` in network namespace ``netns`` (from a short-lived thread) and return its result."""
    out: dict = {}

    def run() -> None:
        try:
            _setns(netns)
        except BaseException as e:  # handed to the caller's thread
            out["entering"] = e
            return
        try:
            out["result"] = fn(*args)
        except BaseException as e:  # fn's own error, as it is (a sysctl the kernel refuses, say)
            out["error"] = e

    t = threading.Thread(target=run, name=f"netns-{netns}")
    t.start()
    t.join()
    if "entering" in out:
        e = out["entering"]
        if isinstance(e, OSError) and netns not in namespaces():
            raise NotFoundError(f"network namespace {netns!r} does not exist") from e
        if isinstance(e, PermissionError):
            raise PermissionDenied(f"entering network namespace {netns!r} needs root") from e
        raise e
    if "error" in out:
        raise out["error"]
    return out["result"]


def netns_socket(netns: str, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,
                 proto: int = 0) -> socket.socket:
    """A socket that lives in network namespace ``netns``: a test can run a server
    and its clients in different namespaces without starting a process."""
    return in_netns(netns, socket.socket, family, type, proto)


def set_sysctl(netns: str, key: str, value: str | int) -> None:
    """Write sysctl ``key`` (``net.ipv4.ip_forward``) inside ``netns``: no sysctl(8) needed.
    An ``OSError`` where the kernel refuses the value."""
    path = "/proc/sys/" + key.replace(".", "/")

    def write() -> None:
        with open(path, "w") as f:
            f.write(f"{value}\n")
    in_netns(netns, write)


def get_sysctl(netns: str, key: str) -> str:
    """The value of sysctl ``key`` inside ``netns``, as /proc/sys gives it, stripped."""
    path = "/proc/sys/" + key.replace(".", "/")

    def read() -> str:
        with open(path) as f:
            return f.read().strip()
    return in_netns(netns, read)


def _pids_in(netns_names: Sequence[str]) -> list[int]:
    """Processes whose network namespace is one of ``netns_names`` (one pass
    over /proc, like ``ip netns pids``, without starting a process)."""
    wanted = set()
    for name in netns_names:
        try:
            st = os.stat(os.path.join(NETNS_DIR, name))
        except FileNotFoundError:
            continue
        wanted.add((st.st_dev, st.st_ino))
    if not wanted:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (ns.st_dev, ns.st_ino) in wanted:
            pids.append(int(entry))
    return pids


def netns_pids(netns: str) -> list[int]:
    """Processes whose network namespace is ``netns``."""
    return _pids_in([netns])


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a child we have not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_netns_processes(netns_names: Sequence[str], grace_s: float = 2.0) -> None:
    """SIGTERM, then after ``grace_s`` SIGKILL, every process in the namespaces."""
    pids = [p for p in _pids_in(netns_names) if p != os.getpid()]
    if not pids:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.02)


def delete_namespaces(netns_names: Sequence[str], *, kill: bool = True) -> list[str]:
    """Delete the named namespaces (their veths go with them), killing the
    processes inside first unless ``kill=False``.  Missing names are ignored.
    Returns the names that could not be deleted."""
    present = set(namespaces())
    names = [n for n in netns_names if n in present]
    if kill and names:
        kill_netns_processes(names)
    from pyroute2 import netns as pyroute2_netns
    for name in names:
        try:
            pyroute2_netns.remove(name)
        except OSError:
            pass
    present = set(namespaces())
    return [n for n in names if n in present]
