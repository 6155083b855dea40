"""Kicks: the frames that make a device dequeue again after a traced link's gate opened.

A tbf gate that opens does not make the kernel look at the queue again (``plan.gate``):
the packets it held wait for the device's next packet.  A kick is that packet: one frame
per tx queue (``plan.gate.kick_frame``), sent on a packet socket through the device's
qdiscs, which HTB lets out unclassified and every receiver drops.  For example,
``Kicker("rl-lab-router").kick("lan0", 1)`` sends one frame on lan0 and returns 1.
"""

import socket

from ..plan.gate import kick_frame
from .netns import netns_socket


class Kicker:
    """Packet sockets in one namespace (None: this one), one bound to each device kicked."""

    def __init__(self, netns: str | None = None):
        self.netns = netns
        self._sockets: dict[str, tuple[socket.socket, bytes]] = {}  # device -> (socket, its address)

    def kick(self, dev: str, queues: int) -> int:
        """Send ``dev`` a kick for each of its ``queues`` tx queues (1: one, to no queue in
        particular); the frames sent.  Best effort: a device that is gone gets none."""
        try:
            sock, mac = self._socket(dev)
            for q in range(queues) if queues > 1 else (None,):
                sock.send(kick_frame(mac, q))
        except OSError:
            self._drop(dev)  # the device was deleted or made again: a fresh socket next time
            return 0
        return queues

    def _socket(self, dev: str) -> tuple[socket.socket, bytes]:
        got = self._sockets.get(dev)
        if got is None:
            # protocol 0: it sends (the kernel reads the frame's own type), and never
            # receives a copy of what passes
            sock = (netns_socket(self.netns, socket.AF_PACKET, socket.SOCK_RAW, 0) if self.netns
                    else socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
            try:
                sock.bind((dev, 0))
            except OSError:
                sock.close()
                raise
            got = self._sockets[dev] = (sock, sock.getsockname()[4])
        return got

    def _drop(self, dev: str) -> None:
        got = self._sockets.pop(dev, None)
        if got is not None:
            got[0].close()

    def close(self) -> None:
        for dev in list(self._sockets):
            self._drop(dev)

    def __enter__(self) -> "Kicker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
