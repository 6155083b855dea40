"""A process-per-connection HTTP server capped at N workers, like Apache 1.3's
prefork model that the 2000 experiments measured.

    python -m bench.prefork --bind ADDR --port 8080 --workers 256 --log FILE [--backlog 511]

The master opens the listening socket (backlog 511, Apache 1.3's default
``ListenBacklog``) and forks N workers; each accepts one connection at a time,
reads the request, sends the lab's file (``ratelimit.lab.docroot``, held in
memory), then closes like Apache's lingering close: shut down its sending side
and read until the client closes.  A worker is therefore busy for as long as
the reply takes to cross the client's emulated link, and with every worker
busy, new connections wait in the listen queue (and SYNs are dropped once it
is full).  Each completed reply appends ``TIME STATUS BYTES`` to ``--log``.
SIGTERM stops the master and its workers.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

from ratelimit.lab import docroot

LINGER_READ_S = 2.0  # Apache 1.3: lingering_close reads with a 2 s timeout...
LINGER_MAX_S = 30.0  # ...for at most 30 s


def _reply(files: dict[str, bytes], request: bytes) -> tuple[int, bytes]:
    line = request.split(b"\r\n", 1)[0].decode("latin-1", "replace").split()
    path = line[1] if len(line) >= 2 else "/"
    name = path.lstrip("/") or "index.html"
    body = files.get(name)
    if line[:1] not in (["GET"], ["HEAD"]) or body is None:
        body = b"not found\n"
        status = 404
    else:
        status = 200
    head = (f"HTTP/1.0 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
            f"Server: ratelimit-bench-prefork\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return status, head + (body if line[:1] == ["GET"] else b"")


def _serve_one(conn: socket.socket, files: dict[str, bytes], logfd: int) -> None:
    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 16384:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk
    status, out = _reply(files, data)
    conn.sendall(out)
    conn.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + LINGER_MAX_S
    conn.settimeout(LINGER_READ_S)
    while time.monotonic() < deadline:
        try:
            if not conn.recv(4096):
                break
        except (socket.timeout, OSError):
            break
    os.write(logfd, f"{time.time():.3f} {status} {len(out)}\n".encode())


def _worker(listener: socket.socket, files: dict[str, bytes], logfd: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        try:
            _serve_one(conn, files, logfd)
        except OSError:
            pass
        finally:
            conn.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.prefork")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=256)
    p.add_argument("--backlog", type=int, default=511)
    p.add_argument("--log", required=True)
    p.add_argument("--pidfile")
    a = p.parse_args(argv)
    files = docroot.expected()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((a.bind, a.port))
    listener.listen(a.backlog)
    logfd = os.open(a.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    children = []
    for _ in range(a.workers):
        pid = os.fork()
        if pid == 0:
            try:
                _worker(listener, files, logfd)
            finally:
                os._exit(0)
        children.append(pid)
    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")

    def stop(signum, _frame):
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"prefork: {a.workers} workers on {a.bind}:{a.port}", file=sys.stderr, flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
