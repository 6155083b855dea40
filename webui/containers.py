"""The dashboard and containers (docs/containers.md, "The dashboard").

``ratelimit web --container NAME`` watches the two devices a container's links can be on,
as ``ratelimit --container NAME --list`` does: its host-side veth (the server of an
audience, or one user) and its own interface inside its network namespace (where records
of 0.4 and earlier put a server's links).  The namespace
has a name in /run/netns (``rl-ct-ID``, the record's) only while a run of ratelimit lasts,
so the dashboard names it for each read, in the containers' turn, and lets it go after:
it never holds the namespace, and a restarted container's old one goes, links and all, as
it does for the CLI.  Its netlink reader is opened for each read for the same reason.

Every target's record that names containers as hosts (``container:NAME``) is checked with
the engine every ``CHECK_EVERY_S`` (``containers.life.strangers``): a client container that came
back with another address, or is not running, is a notice in the summary
(``applied["notices"]``), shown on the target's card.  A server that restarted, or a user
whose veth went, is the target's error line.
"""

from __future__ import annotations

import os
import time
import dataclasses
from dataclasses import dataclass

from ratelimit.containers import attach, lookup
from ratelimit.containers.life import strangers
from ratelimit.errors import RatelimitError
from ratelimit.service import readout
from ratelimit.state import records

CHECK_EVERY_S = 5.0  # how often the engine is asked (a docker or podman inspect each time)


@dataclass
class Watch:
    """One container the dashboard watches, as resolved at its start (the owner and its
    namespace's inode follow a restart)."""

    label: str  # "docker container web"
    engine: str
    owner: lookup.Container  # the container that owns the namespace
    inode: tuple
    server: tuple  # (namespace name, its interface): a server's target in 0.4 and earlier
    user: tuple  # (None, host-side veth): a server's or a user's target
    failed: tuple = (0.0, None)  # (when, the error) of the last failed look at the engine


def watch(names: list[str], *, network: str | None = None, engine: str | None = None) -> list[Watch]:
    """Resolve each container (one-line ContainerError as the CLI's)."""
    out = []
    with attach.turn():
        for name in names:
            c, owner = lookup.resolve(name, engine)
            wired = lookup.wiring(owner, lookup.choose_network(owner, network))
            out.append(Watch(c.label(), c.engine, owner, lookup.netns_inode(owner.pid),
                             (lookup.netns_name(owner), wired.inside), (None, wired.veth)))
    return out


def targets(watches: list[Watch]) -> list[tuple]:
    return [t for w in watches for t in (w.server, w.user)]


def owners(watches: list[Watch]) -> dict:
    """{target: what the page says when asked to change it}: a container's links are applied
    and removed with the CLI (``--container``), which finds its namespace and veth for the
    run; the dashboard only watches them (``api.apply``/``clean`` refuse)."""
    out = {}
    for w in watches:
        name = w.label.rsplit(" ", 1)[-1]
        for target, use in ((w.server, "its interface, the server's links"),
                            (w.user, "its veth, a server's or a user's links")):
            out[target] = (f"is {w.label}'s ({use}): the dashboard only watches a container's links; change them "
                           f"with ratelimit --container {name} (docs/containers.md)")
    return out


class Reader:
    """``readout.counters``' signature over ``base`` (a ``readout.Poller``) for the
    dashboard's targets: a container's server target read in its namespace, named for the
    read; a container's user target while its veth is there; notices on every target."""

    def __init__(self, base, watches: list[Watch], *, check_every: float = CHECK_EVERY_S, clock=time.monotonic):
        self.base, self.check_every, self.clock = base, check_every, clock
        self.servers = {w.server: w for w in watches}
        self.users = {w.user: w for w in watches}
        self._noted: dict = {}  # target -> (when, the applied it was for, notices)

    def __call__(self, interface: str, netns: str | None = None) -> readout.Counters:
        key = (netns or None, interface)
        if key in self.servers:
            stats = self._server(self.servers[key], interface)
        elif key in self.users and not os.path.exists(f"/sys/class/net/{interface}"):
            raise RatelimitError(f"{self.users[key].label}: its veth {interface} is gone (the container was "
                                 f"restarted or stopped), and the links recorded on it with it; watch it again "
                                 f"(restart the dashboard) to see its new veth")
        else:
            stats = self.base(interface, netns)
        return self._with_notices(key, stats)

    def close(self) -> None:
        self.base.close()

    def _server(self, w: Watch, interface: str) -> readout.Counters:
        with attach.turn():
            self._follow(w)
            with attach.attached(w.owner) as ns:
                stats = readout.counters(interface, ns, repair=True)  # as the Poller does
                if stats.applied is None and records.load(ns, interface) is not None:
                    raise RatelimitError(f"{w.label}: the links recorded on its {interface} went with its network "
                                         f"namespace (the container was restarted): apply again to put them back")
                return stats

    def _follow(self, w: Watch) -> None:
        """The container's namespace now: the same as before, or (after a restart) the new
        one, asked of the engine at most every ``check_every``; a container that is not
        running is the error."""
        try:
            if lookup.netns_inode(w.owner.pid) == w.inode:
                return
        except lookup.ContainerError:
            pass
        when, error = w.failed
        if error is not None and self.clock() - when < self.check_every:
            raise error
        try:
            _, owner = lookup.resolve(w.owner.id[:12], w.engine)
            w.owner, w.inode, w.failed = owner, lookup.netns_inode(owner.pid), (0.0, None)
        except lookup.ContainerError as err:
            w.failed = (self.clock(), RatelimitError(f"{w.label}: {str(err).split(': ', 1)[-1]}; the links "
                                                     f"recorded in its namespace went with it"))
            raise w.failed[1] from None

    def _with_notices(self, key: tuple, stats):
        applied = stats.applied
        if not applied or not any(c.get("named") for c in applied.get("cohorts") or ()):
            self._noted.pop(key, None)
            return stats
        when, was, notices = self._noted.get(key, (None, None, []))
        if was != applied or self.clock() - when >= self.check_every:
            notices = strangers(applied)
            self._noted[key] = (self.clock(), applied, notices)
        return dataclasses.replace(stats, applied={**applied, "notices": notices}) if notices else stats
