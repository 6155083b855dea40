"""Timed TCP downloads through a lab or a router, for tests that hold them against the link model."""

import socket
import threading
import time


def serve(srv: socket.socket, address: str, payload: bytes, connections: int) -> int:
    """Serve ``payload`` to the next ``connections`` clients of ``srv`` (bound to ``address``,
    a port the kernel picks), each in a thread; the port."""
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((address, 0))
    srv.listen(16)

    def run():
        for _ in range(connections):
            conn, _ = srv.accept()
            threading.Thread(target=lambda c=conn: (c.sendall(payload), c.close()), daemon=True).start()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1]


def download(c: socket.socket, local: tuple, remote: tuple, out: dict, key) -> None:
    """Connect ``c`` from ``local`` to ``remote`` and read to the end: ``out[key]`` = (bytes,
    seconds from the connect to the last byte)."""
    c.settimeout(60)
    c.bind(local)
    t0 = time.perf_counter()
    c.connect(remote)
    got = 0
    while chunk := c.recv(65536):
        got += len(chunk)
    c.close()
    out[key] = (got, time.perf_counter() - t0)
