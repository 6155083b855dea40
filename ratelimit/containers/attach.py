"""A run of ratelimit on containers: its turn, the names it gives their namespaces, and
what it leaves behind (``lookup`` finds the containers and their devices).

Runs on containers take turns (``turn``: one lock file in the state directory), so the
names ``attached`` gives and the files ``tidy`` removes are no other run's.  ratelimit's
executor and records work on named namespaces, so ``attached`` gives a container's
namespace a name in /run/netns (``lookup.netns_name``) for the length of one block and
removes it afterwards: nothing holds the namespace once the run is over.  Within a turn,
``tidy`` removes the lock files of targets that hold no record (container ids and veths
come and go), and ``gone_veths`` forgets the records, and deletes the IFB devices, of a
container's veths that went when it restarted.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager

from ..errors import RatelimitError
from ..kernel import peers
from ..plan.compile import compiled
from ..plan.ops import DelLink
from ..state import records
from ..state.fingerprint import of_plan
from ..state.installed import executor
from .lookup import NETNS_PREFIX, Container, ContainerError, netns_inode, netns_name


@contextmanager
def turn():
    """Runs of ratelimit on containers take turns (one lock file in the state directory):
    the names ``attached`` gives and the files ``tidy`` removes are then no other run's."""
    records.state_dir().mkdir(parents=True, exist_ok=True)
    with open(records.state_dir() / "containers.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def attached(owner: Container):
    """A name in /run/netns for ``owner``'s namespace while the block runs (``netns_name``),
    removed afterwards; call it within ``turn``.  A name a killed run left is replaced."""
    name = netns_name(owner)
    try:
        path = peers.attach(name, owner.pid)
    except OSError as err:
        raise ContainerError(f"--container: cannot name {owner.label()}'s namespace ({err})") from None
    try:
        st = os.stat(path)
        if (st.st_dev, st.st_ino) != netns_inode(owner.pid):
            raise ContainerError(f"--container: {owner.label()}'s namespace changed while it was being named")
        yield name
    finally:
        peers.detach(name)


def tidy(netns: str | None, interface: str) -> None:
    """Remove the lock file of a container target that holds no record (within ``turn``):
    containers come and go with new ids and veths, and their lock files would pile up in
    the state directory; a container's namespace directory goes with its last file."""
    d = records.state_dir() / (netns or "-")
    if (d / f"{interface}.json").exists() or (d / f"{interface}.marker").exists():
        return  # links are recorded, or a run was killed mid-change: the lock stays with them
    (d / f"{interface}.lock").unlink(missing_ok=True)
    if netns and netns.startswith(NETNS_PREFIX):
        try:
            d.rmdir()
        except OSError:
            pass


def gone_veths(owner_id: str) -> list[str]:
    """Host-side veths recorded for the container ``owner_id`` (either use) that no longer
    exist: a restarted container comes back on a new veth, and the old record is then about
    a device that is gone.  Their records are forgotten and the IFB devices they own
    deleted; returns their names."""
    out = []
    for interface in records.interfaces(None):
        if os.path.exists(f"/sys/class/net/{interface}"):
            continue
        try:
            record = records.load(None, interface)
        except RatelimitError:
            continue
        req = record.request if record is not None else None
        if req is not None and req.container and req.container[2] == owner_id:
            _drop_ifbs(record)
            records.forget(None, interface)
            tidy(None, interface)
            out.append(interface)
    return out


def _drop_ifbs(record) -> None:
    """Delete the IFB devices a record of a vanished veth owns (they stay when the veth goes)."""
    owned = record.fingerprint or of_plan(compiled(record.request))
    names = [dev for dev, parts in owned.items() if parts.get("device")]
    if not names:
        return
    with executor(None) as ex:
        ex.remove([DelLink(name) for name in names if (ex.links.state(name) or {}).get("kind") == "ifb"])
