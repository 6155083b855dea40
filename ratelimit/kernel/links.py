"""Network devices in a namespace, through pyroute2: look up, create IFB devices, delete.

The executor uses this for the few device operations a plan has (``AddIfb``,
``DelLink``) and for name <-> index lookups; traffic-control messages go
through ``transport`` instead (hand-packed and batched, see docs/design.md).
Every pyroute2 call goes through ``netns.off_loop``.
"""

import errno as errnos

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ..errors import NotFoundError, PermissionDenied
from .netns import off_loop
from .transport import KernelError, check_netns

IFF_UP = 0x1
IFF_LOOPBACK = 0x8


class Links:
    """Device lookups and changes in one namespace (which must exist)."""

    def __init__(self, netns: str | None = None):
        if netns is not None:
            check_netns(netns)
        try:
            self.ipr = off_loop(lambda: IPRoute(netns=netns, flags=0) if netns else IPRoute())
        except FileNotFoundError:
            raise NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)") from None
        except PermissionError:
            raise PermissionDenied(f"--netns: entering '{netns}' needs root") from None
        self._index: dict[str, int] = {}
        self._names: dict[int, str] = {}

    def close(self) -> None:
        off_loop(self.ipr.close)

    def forget(self) -> None:
        """Drop cached indexes (devices may have been made or removed)."""
        self._index.clear()
        self._names.clear()

    def index(self, name: str) -> int | None:
        """The interface index of ``name``, or None if there is no such device."""
        if not name or len(name.encode()) > 15:
            return None
        found = self._index.get(name)
        if found is None:
            indexes = off_loop(lambda: self.ipr.link_lookup(ifname=name))
            if not indexes:
                return None
            found = self._index[name] = indexes[0]
        return found

    def name(self, index: int) -> str | None:
        found = self._names.get(index)
        if found is None:
            try:
                links = off_loop(self.ipr.get_links, index)
            except NetlinkError:
                return None
            found = self._names[index] = links[0].get_attr("IFLA_IFNAME") if links else None
        return found

    def state(self, name: str) -> dict | None:
        """{"kind": its link kind ("" for a plain device), "up": administratively up}, or None."""
        index = self.index(name)
        if index is None:
            return None
        try:
            link = off_loop(self.ipr.get_links, index)[0]
        except (NetlinkError, IndexError):
            return None
        return {"kind": _kind(link), "up": bool(link["flags"] & IFF_UP)}

    def receiving(self) -> list[tuple[str, str]]:
        """(name, link kind) of each device that is up, loopback left out: the ones
        packets may reach the router through."""
        found = []
        for link in off_loop(self.ipr.get_links):
            if link["flags"] & IFF_LOOPBACK or not link["flags"] & IFF_UP:
                continue
            found.append((link.get_attr("IFLA_IFNAME"), _kind(link)))
        return found

    def add_ifb(self, name: str) -> None:
        """Create the IFB device ``name`` and set it up."""
        with _kernel_errors():
            off_loop(lambda: self.ipr.link("add", ifname=name, kind="ifb"))
            self.forget()
            off_loop(lambda: self.ipr.link("set", index=self.index(name), state="up"))

    def delete(self, name: str) -> None:
        try:
            with _kernel_errors():
                off_loop(lambda: self.ipr.link("del", ifname=name))
        finally:
            self.forget()


def _kind(link) -> str:
    """A link's kind ("veth", "bridge", ...); "" for a plain (hardware or virtio) device."""
    info = link.get_attr("IFLA_LINKINFO")
    return (info.get_attr("IFLA_INFO_KIND") if info is not None else None) or ""


class _kernel_errors:
    """pyroute2's NetlinkError as the executor's KernelError."""

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if isinstance(err, NetlinkError):
            if err.code == errnos.EPERM:
                raise PermissionDenied("changing network devices needs root (run with sudo)") from None
            raise KernelError(err.code, str(err.args[1]) if len(err.args) > 1 else "") from None
        return False
