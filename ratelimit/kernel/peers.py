"""A veth pair across two namespaces, read with netlink from both sides, and names for
namespaces that belong to a process (``ratelimit.containers``: docs/containers.md).

``Device`` is what ``containers.lookup.wiring`` checks: a device's name, index and kind, and its
peer's index (``IFLA_LINK``) with the id of the namespace the peer is in
(``IFLA_LINK_NETNSID``, from the reading namespace's side).  ``by_mac`` reads the devices
of a namespace given by path (``/proc/PID/ns/net``: no name in /run/netns needed);
``in_host`` reads one device of this process's namespace by index, with the id this
namespace gives the one at a path.  ``gso_max_segs`` sets how many TCP segments a
device of a namespace given by path takes in one packet.  ``attach``/``detach`` name a
process's namespace in /run/netns and remove the name.  Every pyroute2 call goes
through ``netns.off_loop``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .links import link_kind
from .netns import NETNS_DIR, off_loop

NO_NSID = 0xFFFFFFFF  # RTM_GETNSID's answer for a namespace without an id (-1 as u32)


@dataclass(frozen=True)
class Device:
    name: str
    index: int
    kind: str  # "veth", "bridge", ... ("" for a plain device)
    mac: str
    link: int | None  # IFLA_LINK: the peer's index, in the namespace ``link_nsid`` names
    link_nsid: int | None  # IFLA_LINK_NETNSID: None when the peer is in the same namespace


def _attr(msg, name):
    return msg.get_attr(name) if hasattr(msg, "get_attr") else None


def _device(msg) -> Device:
    return Device(_attr(msg, "IFLA_IFNAME"), msg["index"], link_kind(msg), (_attr(msg, "IFLA_ADDRESS") or "").lower(),
                  _attr(msg, "IFLA_LINK"), _attr(msg, "IFLA_LINK_NETNSID"))


def by_mac(ns_path: str, mac: str) -> Device | None:
    """The device with MAC address ``mac`` in the namespace at ``ns_path``, or None."""
    from pyroute2 import IPRoute

    def read():
        with IPRoute(netns=ns_path, flags=0) as ipr:  # flags=0: never make a namespace
            return [_device(m) for m in ipr.get_links()]
    return next((d for d in off_loop(read) if d.mac == mac.lower()), None)


def in_host(index: int, ns_path: str) -> tuple[Device | None, int | None]:
    """(the device with ``index`` in this process's namespace, or None; the id this
    namespace gives the namespace at ``ns_path``, or None)."""
    from pyroute2 import IPRoute

    def read():
        fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with IPRoute() as ipr:
                nsid = (ipr.get_netnsid(fd=fd) or {}).get("nsid")
                try:
                    found = ipr.get_links(index)
                except Exception:  # noqa: BLE001  # no such index here: the peer is elsewhere
                    found = []
        finally:
            os.close(fd)
        return (_device(found[0]) if found else None), (None if nsid is None or nsid >= NO_NSID else nsid)
    return off_loop(read)


def gso_max_segs(ns_path: str, index: int, segments: int) -> None:
    """Set the device ``index`` of the namespace at ``ns_path`` to take at most
    ``segments`` TCP segments a packet from its own sockets (``IFLA_GSO_MAX_SEGS``; new
    connections take it up)."""
    from pyroute2 import IPRoute

    def change():
        with IPRoute(netns=ns_path, flags=0) as ipr:
            ipr.link("set", index=index, gso_max_segs=segments)
    off_loop(change)


def attach(name: str, pid: int) -> str:
    """Name process ``pid``'s network namespace ``name`` in /run/netns (a name left
    behind is replaced); its path.  OSError when it cannot."""
    from pyroute2 import netns as pyroute2_netns
    path = os.path.join(NETNS_DIR, name)
    if os.path.exists(path):
        detach(name)
    os.makedirs(NETNS_DIR, exist_ok=True)
    try:
        off_loop(pyroute2_netns.attach, name, pid)
    except OSError:
        if os.path.exists(path):
            os.unlink(path)  # the mount point of a bind that failed
        raise
    return path


def detach(name: str) -> None:
    """Remove the name ``attach`` gave (the namespace stays as long as its processes)."""
    from pyroute2 import netns as pyroute2_netns
    if os.path.exists(os.path.join(NETNS_DIR, name)):
        off_loop(pyroute2_netns.remove, name)
