"""K concurrent HTTP downloads from one client, held open for a while.

    python -m bench.downloader --server ADDR --path /1000000.bin --conns K
                               --seconds S [--rcvbuf BYTES] [--spread S] [--until-eof]

Run inside a client namespace (``ip netns exec``).  Opens K connections
(spread over ``--spread`` seconds) from ephemeral ports -- the range the router
limits -- sends ``GET PATH HTTP/1.0``, reads for ``--seconds``, then prints one
JSON object: connections made, failed (with the errors) and finished.  What the
links deliver is measured elsewhere (the server's TCP state, the router's
counters): a reader here sees bytes only when they arrive in order.  ``--rcvbuf``
sets SO_RCVBUF before connecting (the receive window a client advertises);
default: the kernel's (autotuned).  ``--until-eof``: stop as soon as standard input
ends (the caller closes it once its window is over), ``--seconds`` at the most.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import sys
import threading


class Conn:
    __slots__ = ("connected", "error", "done")

    def __init__(self):
        self.connected = False
        self.error = ""
        self.done = False


async def _one(c: Conn, server: str, port: int, path: str, rcvbuf: int, delay: float) -> None:
    await asyncio.sleep(delay)
    loop = asyncio.get_running_loop()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        await loop.sock_connect(s, (server, port))
        c.connected = True
        await loop.sock_sendall(s, f"GET {path} HTTP/1.0\r\nHost: {server}\r\n\r\n".encode())
        while await loop.sock_recv(s, 65536):
            pass
        c.done = True
    except OSError as e:
        c.error = e.strerror or str(e)
    finally:
        s.close()


def _stdin_ends(loop, ended: asyncio.Event) -> None:
    """Set ``ended`` once standard input ends (a daemon thread reads it: it keeps no exit waiting)."""
    def read():
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(ended.set)
    threading.Thread(target=read, daemon=True).start()


async def run(server: str, port: int, path: str, conns: int, seconds: float, rcvbuf: int, spread: float,
              until_eof: bool = False) -> dict:
    cs = [Conn() for _ in range(conns)]
    tasks = [asyncio.create_task(_one(c, server, port, path, rcvbuf, spread * i / max(1, conns)))
             for i, c in enumerate(cs)]
    ended = asyncio.Event()
    if until_eof:
        _stdin_ends(asyncio.get_running_loop(), ended)
    try:
        await asyncio.wait_for(ended.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"conns": conns, "connected": sum(c.connected for c in cs),
            "failed": sum(1 for c in cs if c.error), "finished": sum(1 for c in cs if c.done),
            "errors": sorted({c.error for c in cs if c.error})[:5]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.downloader")
    p.add_argument("--server", required=True)
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--path", default="/1000000.bin")
    p.add_argument("--conns", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True, help="how long to keep downloading")
    p.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF bytes (0: the kernel's default)")
    p.add_argument("--spread", type=float, default=1.0, help="seconds over which to open the connections")
    p.add_argument("--until-eof", action="store_true", help="stop when standard input ends (--seconds at most)")
    a = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.conns + 256)), hard))
    json.dump(asyncio.run(run(a.server, a.port, a.path, a.conns, a.seconds, a.rcvbuf, a.spread, a.until_eof)),
              sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
