"""Where a lab lives outside its namespaces, and finding it again by name.

A lab's state file is ``$RATELIMIT_STATE_DIR/lab/NAME/lab.json`` (the state
directory is ``records.state_dir()``, default ``/run/ratelimit``), next to the
server's files; a lock file beside it serializes lab commands.  ``down(NAME)``
needs none of it: it finds the lab's namespaces, processes, ``/etc/netns``
entries, ratelimit state and files by name, so it also removes what a killed
``lab up`` left behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from .. import SOURCE_ROOT
from ..errors import ConflictError, NotFoundError, PermissionDenied, as_root
from ..kernel import netns as kernel_netns
from ..state import records
from . import topology

DEFAULT_NAME = "lab"
HOSTS_DIR = Path("/etc/netns")

def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PermissionDenied(f"lab {what}: needs root (it makes network namespaces); run it with {as_root()}")


def labs_dir() -> Path:
    """``lab/`` in the state directory (``$RATELIMIT_STATE_DIR`` or ``/run/ratelimit``)."""
    return records.state_dir() / "lab"


def lab_path(name: str) -> Path:
    return labs_dir() / topology.check_name(name)


def _state_file(name: str) -> Path:
    return lab_path(name) / "lab.json"


def provision_dir() -> Path:
    """``vagrant/provision`` of the checkout, or where setup.py installed it."""
    for d in (SOURCE_ROOT / "vagrant" / "provision",
              Path(sys.prefix) / "share" / "ratelimit" / "vagrant" / "provision"):
        if (d / "client.sh").is_file():
            return d
    raise NotFoundError("lab: the provisioning scripts (vagrant/provision/*.sh) are missing "
                        "from this installation; run ratelimit from its checkout")


def read_state(name: str) -> dict | None:
    try:
        return json.loads(_state_file(name).read_text())
    except (OSError, ValueError):
        return None


def write_state(name: str, data: dict) -> None:
    path = _state_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def list_labs() -> list[str]:
    """Labs with a state file or namespaces on this machine."""
    names = set()
    if labs_dir().is_dir():
        names |= {p.parent.name for p in labs_dir().glob("*/lab.json")}
    for ns in topology.list_leftovers():
        m = re.match(rf"^{re.escape(topology.PREFIX)}([a-z0-9][a-z0-9_]*)-(router|server|c[0-9]+)$", ns)
        if m:
            names.add(m.group(1))
    return sorted(names)


@contextmanager
def lock(name: str):
    """One lab command at a time per lab name (up, apply, clean, down)."""
    path = labs_dir() / f".{topology.check_name(name)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConflictError(f"lab '{name}' is busy: another `ratelimit lab` command is working "
                                f"on it (lock {path})") from None
        yield path
    finally:
        os.close(fd)


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True


def check_not_up(name: str) -> None:
    info = read_state(name)
    found = topology.lab_namespaces(name)
    if info is None and not found:
        return
    if info and info.get("phase") == "up":
        raise ConflictError(f"--name: lab '{name}' is already up (see: ratelimit lab status --name {name}; "
                            f"remove it with: ratelimit lab down --name {name})")
    if info and info.get("phase") == "starting" and _pid_alive(info.get("pid")):
        raise ConflictError(f"--name: lab '{name}' is being brought up by process {info.get('pid')}")
    raise ConflictError(f"--name: lab '{name}' was left over by an interrupted `lab up` "
                        f"({len(found)} namespace(s)); remove it with: ratelimit lab down --name {name}")


def _leftover_paths(name: str) -> list[Path]:
    """Files and directories of lab ``name`` outside the namespaces, found by name."""
    prefix = topology.lab_prefix(name)
    role = re.compile(rf"^{re.escape(prefix)}(router|server|c[0-9]+)$")
    found = []
    for base in (HOSTS_DIR, records.state_dir()):  # /etc/netns/NS, service state of NS
        if base.is_dir():
            found += sorted(p for p in base.iterdir() if role.match(p.name))
    found += [p for p in (lab_path(name),) if p.exists()]
    return found


def remove(name: str) -> dict:
    """Remove everything of lab ``name``: processes, namespaces, files (no lock taken)."""
    namespaces = topology.lab_namespaces(name)
    pids = [p for ns in namespaces for p in kernel_netns.netns_pids(ns) if p != os.getpid()]
    removed = topology.destroy(name)  # kills what runs inside first
    paths = _leftover_paths(name)
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    try:
        HOSTS_DIR.rmdir()  # made for labs' hosts files; only if nothing else is in it
    except OSError:
        pass
    return {"name": name, "namespaces": removed, "processes": len(pids), "paths": [str(p) for p in paths]}


def down(name: str = DEFAULT_NAME) -> dict:
    """Remove lab ``name`` and everything it made, found by name; works after a
    crash or a killed ``lab up``.  Returns what was removed."""
    topology.check_name(name)
    require_root("down")
    with lock(name) as lock_path:
        result = remove(name)
        lock_path.unlink(missing_ok=True)
    try:
        labs_dir().rmdir()  # only if empty: the last lab is gone
    except OSError:
        pass
    return result
