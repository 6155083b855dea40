"""Network devices in a namespace: look up, create IFB devices, delete.

The executor uses this for the few device operations a plan has (``AddIfb``,
``DelLink``, through pyroute2) and for name <-> index lookups; traffic-control
messages go through ``transport`` instead (hand-packed and batched, see
docs/design.md).  Every pyroute2 call goes through ``netns.off_loop``.

A name is looked up on the reader's own rtnetlink channel (``RTM_GETLINK`` by
``IFLA_IFNAME``), not through pyroute2: every ``IPRoute.link_lookup(ifname=...)``
of pyroute2 0.9.7 leaves one message in its socket's untagged queue, which nothing
reads, so a process that looks names up once a second (the dashboard's poller)
grows without end (3.3 KB a read at 16,384 links, mostly heap the kept messages pin).
"""

import errno as errnos

from ..errors import NotFoundError, PermissionDenied, as_root
from .netns import in_netns, off_loop
from .nl import (IFINFOMSG, IFLA_IFNAME, IFLA_INFO_KIND, IFLA_LINKINFO, IFLA_NUM_TX_QUEUES, NLM_F_REQUEST,
                 RTM_GETLINK, U32, attr_str, cstr, find, message)
from .offload import tx_channels
from .transport import check_netns, KernelError

IFF_UP = 0x1
IFF_LOOPBACK = 0x8


class Links:
    """Device lookups and changes in one namespace (which must exist)."""

    def __init__(self, netns: str | None, chan):
        self.chan = chan  # a transport.Channel in the same namespace: name lookups go through it
        if netns is not None:
            check_netns(netns)
        self.netns = netns
        self._ipr = None
        self._index: dict[str, int] = {}
        self._names: dict[int, str] = {}

    @property
    def ipr(self):
        """pyroute2's IPRoute in the namespace, made when a device is listed, made or
        removed (importing pyroute2 takes 65 ms, which reading statistics does without)."""
        if self._ipr is None:
            from pyroute2 import IPRoute
            netns = self.netns
            try:
                self._ipr = off_loop(lambda: IPRoute(netns=netns, flags=0) if netns else IPRoute())
            except FileNotFoundError:
                raise NotFoundError(f"--netns: '{netns}' does not exist (see: ip netns list)") from None
            except PermissionError:
                raise PermissionDenied(f"--netns: entering '{netns}' needs root") from None
        return self._ipr

    def close(self) -> None:
        if self._ipr is not None:
            off_loop(self._ipr.close)
            self._ipr = None

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
            found = self._lookup(name)
            if found is None:
                return None
            self._index[name] = found
        return found

    def _get(self, index: int = 0, name: str | None = None):
        """The kernel's RTM_NEWLINK answer for a device, by index or name: (buffer, its
        ifinfomsg's offset, message end), or None when there is no such device."""
        body = IFINFOMSG.pack(0, 0, index, 0, 0) + (attr_str(IFLA_IFNAME, name) if name is not None else b"")
        try:
            answer = self.chan.query(message(RTM_GETLINK, NLM_F_REQUEST, 0, body))
        except KernelError as e:
            if e.errno == errnos.ENODEV:
                return None
            raise
        if answer is None:
            return None
        buf, off, end = answer
        return buf, off + 16, end

    def _lookup(self, name: str) -> int | None:
        got = self._get(name=name)
        return None if got is None else IFINFOMSG.unpack_from(got[0], got[1])[2]

    def name(self, index: int) -> str | None:
        """The name of device ``index``, or None: no such device, or index 0 (a redirect
        whose target device is gone reads so, and the kernel refuses to look it up)."""
        if index <= 0:
            return None
        found = self._names.get(index)
        if found is None:
            got = self._get(index)
            if got is None:
                return None
            buf, off, end = got
            found = self._names[index] = cstr(buf, find(buf, off + IFINFOMSG.size, end, IFLA_IFNAME)) or None
        return found

    def _of(self, name: str):
        """The kernel's RTM_NEWLINK answer for device ``name`` (as ``_get``), or None."""
        index = self.index(name)
        return None if index is None else self._get(index)

    def state(self, name: str) -> dict | None:
        """{"kind": its link kind ("" for a plain device), "up": administratively up}, or None."""
        got = self._of(name)
        if got is None:
            return None
        buf, off, end = got
        info = find(buf, off + IFINFOMSG.size, end, IFLA_LINKINFO)
        kind = cstr(buf, find(buf, *info, IFLA_INFO_KIND)) if info else ""
        return {"kind": kind, "up": bool(IFINFOMSG.unpack_from(buf, off)[3] & IFF_UP)}

    def receiving(self) -> list[tuple[str, str]]:
        """(name, link kind) of each device that is up, loopback left out: the ones
        packets may reach the router through."""
        found = []
        for link in off_loop(self.ipr.get_links):
            if link["flags"] & IFF_LOOPBACK or not link["flags"] & IFF_UP:
                continue
            found.append((link.get_attr("IFLA_IFNAME"), link_kind(link)))
        return found

    def tx_queues(self, name: str) -> int | None:
        """How many transmit queues device ``name`` sends on, or None: the active ones
        (``real_num_tx_queues``), which a NIC's channels (``ethtool -L``) set below the ones
        it was made with (``IFLA_NUM_TX_QUEUES``, all rtnetlink tells).  Read as the
        device's channels (``ETHTOOL_GCHANNELS``: combined + tx-only; veth and virtio_net
        report exactly ``real_num_tx_queues``), capped by the allocated count; a device
        without channels (IFB, bridge, bond) sends on every queue it was made with."""
        got = self._of(name)
        if got is None:
            return None
        buf, off, end = got
        span = find(buf, off + IFINFOMSG.size, end, IFLA_NUM_TX_QUEUES)
        made = 1 if span is None else U32.unpack_from(buf, span[0])[0]
        active = tx_channels(name) if self.netns is None else in_netns(self.netns, tx_channels, name)
        return made if not active else min(made, active)

    def add_ifb(self, name: str, queues: int = 1) -> None:
        """Create the IFB device ``name`` (with ``queues`` transmit queues) and set it up."""
        extra = {"num_tx_queues": queues} if queues > 1 else {}
        with _kernel_errors():
            off_loop(lambda: self.ipr.link("add", ifname=name, kind="ifb", **extra))
            self.forget()
            off_loop(lambda: self.ipr.link("set", index=self.index(name), state="up"))

    def delete(self, name: str) -> None:
        try:
            with _kernel_errors():
                off_loop(lambda: self.ipr.link("del", ifname=name))
        finally:
            self.forget()


def link_kind(link) -> str:
    """A link's kind ("veth", "bridge", ...); "" for a plain (hardware or virtio) device."""
    info = link.get_attr("IFLA_LINKINFO")
    return (info.get_attr("IFLA_INFO_KIND") if info is not None else None) or ""


class _kernel_errors:
    """pyroute2's NetlinkError as the executor's KernelError."""

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        from pyroute2.netlink.exceptions import NetlinkError
        if isinstance(err, NetlinkError):
            if err.code == errnos.EPERM:
                raise PermissionDenied(f"changing network devices needs root (run it with {as_root()})") from None
            raise KernelError(err.code, str(err.args[1]) if len(err.args) > 1 else "") from None
        return False
