"""A container's recorded links over its life: ``save``, ``restore`` and ``--list`` after
the container stopped, restarted or came back on another veth (docs/containers.md,
"Restarts").

A record made with ``--container`` notes the container (``Request.container``: engine,
name, the id of the container that owns the namespace, network, use).  ``now`` finds that
container again by its id and gives the request as it goes *now*: on the veth the engine
wired this time -- the server use facing the container (``Request.server_side``; a record
from 0.4 or earlier had its links inside the container's namespace, and goes on the veth
too), the user use for the addresses it has this time.  Hosts
given by name (``container:NAME``) are resolved again, with a notice when one moved: the
names are what the person asked for, the addresses only what they were.  A container
that is not running is no error: ``now`` yields None and says why.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from ipaddress import ip_address

from ..errors import RatelimitError
from ..service import readout
from ..state import records
from . import attach, lookup


@contextmanager
def now(req, notice):
    """``req`` (recorded for a container) as it would be applied now, or None (with a
    ``notice``) when its container is not running or is gone."""
    engine, name, owner_id, network, use = req.container
    owner = _running(req, notice)
    if owner is None:
        yield None
        return
    with attach.turn():
        endpoint = lookup.choose_network(owner, network)
        wired = lookup.wiring(owner, endpoint)
        if use == "user":
            attach.gone_veths(owner.id)  # a record on the veth it had before it restarted
            addrs = tuple(ip_address(a) for a in wired.addresses)
            cohort = dataclasses.replace(req.cohorts[0], hosts=addrs,
                                         named=((name, tuple(str(a) for a in addrs)),))
            _moved(name, req.cohorts[0].hosts, addrs, notice)
            yield dataclasses.replace(req, interface=wired.veth, netns=None, cohorts=(cohort,))
            return
        cohorts = tuple(_again(c, owner, network, engine, notice) for c in req.cohorts)
        yield dataclasses.replace(req, interface=wired.veth, netns=None, cohorts=cohorts, server_side=True)


def recorded_single_segments(req, on: bool = True, notice=None) -> None:
    """The device of the container ``req`` was recorded for hands its qdisc single segments
    (``on``: after a server's links went on its veth, ``now``), or whole packets again once
    they are gone (``lookup.single_segments``).  Call it outside the containers' turn.
    With ``on=False`` a container that cannot be set (not running: its device went with it)
    is no error; ``notice`` says so."""
    engine, name, owner_id, network, use = req.container
    try:
        _, owner = lookup.resolve(owner_id[:12], engine)
        with attach.turn():
            wired = lookup.wiring(owner, lookup.choose_network(owner, network))
        lookup.single_segments(owner.pid, wired.inside_index, on)
    except lookup.ContainerError as err:
        if on:
            raise
        if notice:
            notice(f"container '{name}': its device was not given back whole packets: {_reason(err)}")


@contextmanager
def inside(req, notice):
    """The name of the namespace of the container a record from 0.4 or earlier had a server's
    links in (``rl-ct-ID``, named again for the block), or None (with a ``notice``) when it
    is not running."""
    owner = _running(req, notice)
    if owner is None:
        yield None
        return
    with attach.turn(), attach.attached(owner) as ns:
        yield ns


def _running(req, notice):
    """The container that owns the namespace of the one ``req`` was recorded for, or None
    (with a ``notice``) when it is not running or is gone."""
    engine, _, owner_id, _, _ = req.container
    try:
        return lookup.resolve(owner_id[:12], engine)[1]
    except lookup.ContainerError as err:
        notice(f"{_reason(err)}: its links are left out (run this again once it runs)")
        return None


def _reason(err: RatelimitError) -> str:
    return str(err).split(": ", 1)[1] if ": " in str(err) else str(err)


def _again(cohort, owner, network: str, engine: str, notice):
    """``cohort`` with the containers it names resolved again on ``network``."""
    if not cohort.named:
        return cohort
    old = {a for _, addrs in cohort.named for a in addrs}
    hosts = [h for h in cohort.hosts if str(h) not in old]
    named = []
    for name, addrs in cohort.named:
        found, more = lookup.expand_hosts([f"{lookup.HOST_PREFIX}{name}"], server=owner, network=network,
                                              engine=engine, field_name=f"restore: cohort {cohort.name}: hosts")
        _moved(name, tuple(ip_address(a) for a in addrs), tuple(ip_address(a) for a in found), notice)
        hosts += [ip_address(a) for a in found]
        named += more
    return dataclasses.replace(cohort, hosts=tuple(dict.fromkeys(hosts)), named=tuple(named))


def _moved(name: str, was: tuple, is_now: tuple, notice) -> None:
    if sorted(map(str, was)) != sorted(map(str, is_now)):
        notice(f"container '{name}' now has {', '.join(map(str, is_now)) or 'no address'} "
               f"(was {', '.join(map(str, was)) or 'none'}): its links follow it")


def forget_if_gone(c, ns: str, interface: str, notice) -> None:
    """A server's record whose links the kernel no longer shows in its namespace (the
    container restarted: a new namespace) is forgotten, with a notice (--list, --stats,
    --clean with --container)."""
    try:
        record = records.load(ns, interface)
        if record is None or record.request is None or readout.applied(interface, ns) is not None:
            return
    except RatelimitError:
        return  # a record that cannot be read is reported by the read that follows
    records.forget(ns, interface)
    notice(f"{c.label()}: the links recorded on its {interface} went with its network namespace (the container "
           f"was restarted); record removed: apply again to put them back")


def strangers(applied: dict | None) -> list[str]:
    """What became of the containers a record names as hosts (``container:NAME``), asked of
    the engine now: one line for each that has other addresses, or is not running, since
    the apply -- its links then select addresses that may be a stranger's.  ``applied`` is
    the record's summary (``summary.summary``; ``--list``, ``--stats`` and the dashboard).
    A user's own link (``use`` "user") names the container it sits on: not a host of its."""
    if not applied:
        return []
    ct = applied.get("container") or {}
    if ct.get("use") == "user":
        return []
    out = []
    for cohort in applied.get("cohorts") or ():
        for name, was in (cohort.get("named") or {}).items():
            try:
                now, _ = lookup.expand_hosts([f"{lookup.HOST_PREFIX}{name}"], server=None,
                                                 network=ct.get("network"), engine=ct.get("engine"),
                                                 field_name="container")
            except RatelimitError as err:
                out.append(f"container '{name}': {_reason(err)}: its links select {', '.join(was)}, which may be "
                           f"another's now")
                continue
            if sorted(now) != sorted(was):
                out.append(f"container '{name}' now has {', '.join(now)} (was {', '.join(was)}): its links select "
                           f"{', '.join(was)}, a stranger's or no one's; apply again (or ratelimit restore) to "
                           f"follow it")
    return out

