"""``--container``: which device a container's links go on, for the CLI's apply, clean,
--list and --stats (docs/containers.md).

Two uses, told apart by ``--hosts``; both put the links on the container's host-side
veth, in the host's namespace, outside the container's own network stack (a queue inside
the sender's stack is not a link's: there a server's fetch took 1.57 of the model, TCP
sending most segments twice; on the veth 1.003, docs/containers.md):

- **server** (``--hosts`` given: the container's clients): down is what the container
  sends to the selected clients, arriving on the veth and shaped on its IFB device; up is
  what the veth sends into the container (``Request.server_side``).  The container's own
  device is set to hand its qdisc single TCP segments (``gso_max_segs 1``, as the lab's
  devices are), so that each segment is metered as its own frame
  (``lookup.single_segments``).
- **user** (no ``--hosts``): the container is one client on a slow link: one link per
  address of its own (``--per host``, every port) -- down is what the veth sends into
  the container, up what arrives from it.

Records made by 0.4 and earlier put a server's links on its own interface, inside its
namespace (named only while the run lasts, ``attach.attached``); clean, --list and
--stats still find them there (``both_targets``).

``ContainerTarget`` is what both uses need: the device, the namespace name, the hosts as the
request takes them, and the record's note of the container.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import RatelimitError, UsageError
from ..state import records
from . import attach, lookup
from .life import forget_if_gone

USES = ("server", "user")


@dataclass(frozen=True)
class ContainerTarget:
    use: str  # "server" or "user"
    pid: int  # a process in the container's namespace
    interface: str
    netns: str | None  # the run's name of the container's namespace (server), or None (host)
    hosts: list | None  # for make_request: addresses (user), or --hosts with container:NAME expanded (server)
    named: tuple  # ((name, (address, ...)), ...) for the record
    container: tuple  # Request.container: (engine, name, id, network, use)
    owner: object = None  # the containers.Container that owns the namespace
    wired: lookup.Wiring | None = None  # its device on the network and that device's host-side veth

    @property
    def server_side(self) -> bool:
        """The links are a server's on its host-side veth (``Request.server_side``)."""
        return self.use == "server" and self.netns is None


@contextmanager
def container_target(name: str, *, hosts=None, network: str | None = None, engine: str | None = None,
                     use: str | None = None, notice=None):
    """Resolve ``--container name`` and yield its ``ContainerTarget``; for the server use the
    container's namespace has a name in /run/netns until the block ends.  ``use`` None:
    server with ``hosts``, user without (the CLI passes server for a scenario too).
    ``notice(text)`` hears of records forgotten because their veth is gone."""
    use = use or ("server" if hosts is not None else "user")
    if use not in USES:
        raise UsageError(f"use: '{use}' is not one of {', '.join(USES)}")
    with attach.turn():
        c, owner = lookup.resolve(name, engine)
        endpoint = lookup.choose_network(owner, network)
        wired = lookup.wiring(owner, endpoint)
        note = (c.engine, c.name, owner.id, endpoint.network, use)
        _forget_gone(c, owner, notice)
        if use == "user":
            if hosts is not None:
                raise UsageError("--hosts: a container as one user has one link for its own addresses "
                                 "(leave out --hosts)")
            addrs = [str(a) for a in wired.addresses]
            if not addrs:
                raise lookup.ContainerError(f"--container: {c.label()} has no address on network "
                                                f"'{endpoint.network}'")
            hosts, named = addrs, ((c.name, tuple(addrs)),)
        elif hosts is None:
            named = ()
        else:
            hosts, named = lookup.expand_hosts(hosts, server=owner, network=endpoint.network,
                                                   engine=engine or c.engine)
        try:
            yield ContainerTarget(use, owner.pid, wired.veth, None, hosts, named, note, owner, wired)
        finally:
            attach.tidy(None, wired.veth)


@contextmanager
def both_targets(name: str, *, network: str | None = None, engine: str | None = None, notice=None):
    """For clean, --list and --stats: (the target on the container's own interface, where
    records of 0.4 and earlier put a server's links; the target on its host-side veth, as the
    use its record names, else a user's) of ``name``."""
    with attach.turn():
        c, owner = lookup.resolve(name, engine)
        endpoint = lookup.choose_network(owner, network)
        wired = lookup.wiring(owner, endpoint)
        note = (c.engine, c.name, owner.id, endpoint.network)
        _forget_gone(c, owner, notice)
        use = recorded_use(wired.veth)
        with attach.attached(owner) as ns:
            forget_if_gone(c, ns, wired.inside, notice or (lambda text: None))
            try:
                yield (ContainerTarget("server", owner.pid, wired.inside, ns, None, (), note + ("server",), owner,
                              wired),
                       ContainerTarget(use, owner.pid, wired.veth, None, None, (), note + (use,), owner, wired))
            finally:
                attach.tidy(ns, wired.inside)
                attach.tidy(None, wired.veth)


def recorded_use(veth: str) -> str:
    """The use a record on a container's host-side veth names ("user" when there is none)."""
    req = _recorded(veth, None)
    return req.container[4] if req is not None and req.container else "user"


def recorded_server(interface: str, netns: str | None):
    """The request recorded on ``interface`` when it holds a container server's links on its
    host-side veth (``Request.server_side``), else None: that container's device sends single
    segments until they are gone."""
    req = _recorded(interface, netns)
    return req if req is not None and req.server_side and req.container else None


def _recorded(interface: str, netns: str | None):
    try:
        record = records.load(netns, interface)
    except RatelimitError:
        return None  # the read that follows reports it
    return record.request if record is not None else None


def _forget_gone(c, owner, notice) -> None:
    for veth in attach.gone_veths(owner.id):
        if notice:
            notice(f"{c.label()}: the links recorded on {veth} went with that device "
                   f"(the container was restarted); record and IFB device removed")


def names_containers(hosts) -> bool:
    """Whether a --hosts value or a cohort's hosts (text or a list of texts) name a container."""
    return isinstance(hosts, (str, list)) and \
        any(h.lower().startswith(lookup.HOST_PREFIX) for h in lookup.host_items(hosts))


def scenario_hosts(asks: list, target: ContainerTarget | None, *, network: str | None, engine: str | None) -> list:
    """A scenario's cohorts (``scenario.Ask``) with every ``container:NAME`` in their hosts
    replaced by that container's addresses -- on the network it shares with the server
    ``target`` (--container), else on its one network or ``network`` -- each cohort noting
    the names for the record; errors name the cohort's hosts field.  Unchanged when no
    cohort names a container."""
    if not any(names_containers(a.hosts) for a in asks):
        return asks
    server = None if target is None else target.owner
    net = network if target is None else target.container[3]
    eng = engine or (None if target is None else target.container[0])

    def expand() -> list:
        out = []
        for a in asks:
            if names_containers(a.hosts):
                hosts, named = lookup.expand_hosts(a.hosts, server=server, network=net, engine=eng,
                                                       field_name=f"{a.where} hosts")
                a = dataclasses.replace(a, hosts=hosts, named=named)
            out.append(a)
        return out
    if target is not None:  # its run holds the containers' turn already
        return expand()
    with attach.turn():
        return expand()
