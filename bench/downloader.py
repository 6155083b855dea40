"""K concurrent HTTP downloads from one client, counting bytes per connection.

    python -m bench.downloader --server ADDR --path /1000000.bin --conns K
                               --warmup S --window S [--rcvbuf BYTES]

Run inside a client namespace (``ip netns exec``).  Opens K connections
(spread over the first second) from ephemeral ports -- the range the router
limits -- sends ``GET PATH HTTP/1.0``, and reads.  At ``warmup`` seconds it
notes every connection's byte count, at ``warmup + window`` again, then prints
one JSON object: per connection its local port and the bytes received in the
window, plus counts of failed and finished connections.  ``--rcvbuf`` sets
SO_RCVBUF before connecting (a small receive window, like a 1990s client's,
bounds what can queue for each emulated link); default: the kernel's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import sys
import time


class Conn:
    __slots__ = ("port", "bytes", "at_start", "at_end", "error", "done", "connected_s")

    def __init__(self):
        self.port = 0
        self.bytes = 0
        self.at_start = None
        self.at_end = None
        self.error = ""
        self.done = False
        self.connected_s = None


async def _one(c: Conn, server: str, port: int, path: str, rcvbuf: int, delay: float, t0: float) -> None:
    await asyncio.sleep(delay)
    loop = asyncio.get_running_loop()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        await loop.sock_connect(s, (server, port))
        c.connected_s = time.monotonic() - t0
        c.port = s.getsockname()[1]
        await loop.sock_sendall(s, f"GET {path} HTTP/1.0\r\nHost: {server}\r\n\r\n".encode())
        while True:
            data = await loop.sock_recv(s, 65536)
            if not data:
                c.done = True
                return
            c.bytes += len(data)
    except OSError as e:
        c.error = e.strerror or str(e)
    finally:
        s.close()


async def run(server: str, port: int, path: str, conns: int, warmup: float, window: float,
              rcvbuf: int, spread: float) -> dict:
    t0 = time.monotonic()
    cs = [Conn() for _ in range(conns)]
    tasks = [asyncio.create_task(_one(c, server, port, path, rcvbuf, spread * i / max(1, conns), t0))
             for i, c in enumerate(cs)]
    await asyncio.sleep(max(0.0, warmup - (time.monotonic() - t0)))
    t_start = time.monotonic()
    for c in cs:
        c.at_start = c.bytes
    await asyncio.sleep(max(0.0, warmup + window - (time.monotonic() - t0)))
    t_end = time.monotonic()
    for c in cs:
        c.at_end = c.bytes
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"window_s": t_end - t_start, "conns": conns,
            "failed": sum(1 for c in cs if c.error), "finished": sum(1 for c in cs if c.done),
            "errors": sorted({c.error for c in cs if c.error})[:5],
            "links": [[c.port, c.at_end - c.at_start] for c in cs if not c.error and c.port],
            "connect_s_max": max((c.connected_s for c in cs if c.connected_s is not None), default=None)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.downloader")
    p.add_argument("--server", required=True)
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--path", default="/1000000.bin")
    p.add_argument("--conns", type=int, required=True)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--rcvbuf", type=int, default=0, help="SO_RCVBUF bytes (0: the kernel's default)")
    p.add_argument("--spread", type=float, default=1.0, help="seconds over which to open the connections")
    a = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, a.conns + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    out = asyncio.run(run(a.server, a.port, a.path, a.conns, a.warmup, a.window, a.rcvbuf, a.spread))
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
