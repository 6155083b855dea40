"""What ratelimit installed where: one JSON file per (namespace, interface).

The file holds the request; the plan is recompiled from it for statistics,
``--clean`` and rollback.  A lock file beside it serializes runs on one
interface.  The directory is ``$RATELIMIT_STATE_DIR`` or ``/run/ratelimit``.
"""

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, fields
from ipaddress import ip_address
from pathlib import Path

from . import linklayer
from .errors import ConflictError
from .model import Burst, LinkParams, Request

LOCK_POLL_S = 0.05


def state_dir() -> Path:
    return Path(os.environ.get("RATELIMIT_STATE_DIR", "/run/ratelimit"))


def _path(netns: str | None, interface: str, suffix: str) -> Path:
    return state_dir() / (netns or "-") / f"{interface}.{suffix}"


def to_json(req: Request) -> dict:
    data = asdict(req)
    data["hosts"] = [str(h) for h in req.hosts]
    data["ports"] = [list(p) for p in req.ports]
    data["link"] = req.link.describe()
    return data


def from_json(data: dict) -> Request:
    names = {f.name for f in fields(Request)}
    values = {k: v for k, v in data.items() if k in names}
    values["hosts"] = tuple(ip_address(h) for h in data["hosts"])
    values["ports"] = tuple(tuple(p) for p in data["ports"])
    values["down"] = LinkParams.from_dict(data["down"])
    values["up"] = LinkParams.from_dict(data["up"])
    values["burst"] = Burst(**data["burst"]) if data.get("burst") else None
    values["link"] = linklayer.LinkLayer.from_description(data["link"]) if data.get("link") else linklayer.ETHERNET
    return Request(**values)


def load(netns: str | None, interface: str) -> Request | None:
    try:
        return from_json(json.loads(_path(netns, interface, "json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(req: Request) -> None:
    path = _path(req.netns, req.interface, "json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_json(req)))
    tmp.replace(path)


def forget(netns: str | None, interface: str) -> None:
    _path(netns, interface, "json").unlink(missing_ok=True)


def interfaces(netns: str | None) -> list[str]:
    d = state_dir() / (netns or "-")
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


@contextmanager
def lock(netns: str | None, interface: str, on_wait=None, timeout: float | None = None):
    """Hold the interface's lock; ``on_wait()`` is called if we have to wait.  With a
    ``timeout`` (seconds), waiting longer raises ConflictError instead of blocking on."""
    path = _path(netns, interface, "lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait()
            _wait(fh, netns, interface, timeout)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait(fh, netns, interface, timeout) -> None:
    if timeout is None:
        fcntl.flock(fh, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(LOCK_POLL_S)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                where = f"{netns}/{interface}" if netns else interface
                raise ConflictError(f"--interface: {where} is busy: another ratelimit run is changing it "
                                    f"(waited {timeout:g} s); try again when it is done") from None
