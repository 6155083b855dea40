"""The lab's web content, and a small built-in HTTP server for when nginx is absent.

``write(directory)`` fills a directory with fixed-size files, the same bytes
every time: ``10000.bin`` is the 10,000-byte file of the 2000 experiments
(10,000 x 8 / 28,800 bit/s = 2.78 s over a 28.8k modem), with 1 kB, 100 kB and
1 MB companions and a small ``index.html`` that lists them.  The namespace lab,
the Vagrant server (``vagrant/provision/server.sh``) and the pytest fixtures all
call it, so every lab serves identical files.

``serve(root, host, port)`` is a threaded HTTP/1.1 file server from the
standard library, for machines without nginx; it answers GET and HEAD with a
``Content-Length``, so ``curl``, ``httperf`` and ``wrk`` measure it like nginx.

Command line (run by the lab inside the server namespace)::

    python3 -m ratelimit.lab.docroot write DIR
    python3 -m ratelimit.lab.docroot serve --root DIR --bind ADDRESS --port 80 [--pidfile FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path

from ..errors import command_exit, FieldError, NotFoundError, RatelimitError
from ..spec.units import parse_count

# file name -> size in bytes; EXPERIMENT_FILE is the one the 2000 benchmark fetched
SIZES = {"1000.bin": 1_000, "10000.bin": 10_000, "100000.bin": 100_000, "1000000.bin": 1_000_000}
EXPERIMENT_FILE = "10000.bin"
EXPERIMENT_BYTES = SIZES[EXPERIMENT_FILE]
_LINE = 64  # bytes per line of filler, newline included


def content(size: int) -> bytes:
    """``size`` bytes of plain text: a header line, then numbered 64-byte lines."""
    head = f"ratelimit lab file, {size} bytes\n".encode()
    lines = [head]
    total = len(head)
    n = 0
    while total < size:
        n += 1
        line = f"{n:08d} ".encode() + b"." * (_LINE - 10) + b"\n"
        lines.append(line)
        total += len(line)
    return b"".join(lines)[:size]


def index_html() -> bytes:
    rows = "".join(f'<li><a href="{name}">{name}</a> ({size:,} bytes)</li>\n'
                   for name, size in SIZES.items())
    return (f"<!DOCTYPE html>\n<html><head><title>ratelimit lab</title></head><body>\n"
            f"<h1>ratelimit lab server</h1>\n<ul>\n{rows}</ul>\n</body></html>\n").encode()


def expected() -> dict[str, bytes]:
    files = {name: content(size) for name, size in SIZES.items()}
    files["index.html"] = index_html()
    return files


def write(directory: str | os.PathLike) -> list[Path]:
    """Create ``directory`` (if needed) and write the files; returns their paths."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in expected().items():
        path = root / name
        if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_bytes(data)
            tmp.chmod(0o644)
            tmp.replace(path)
        written.append(path)
    root.chmod(0o755)
    return written


def sha256(name: str) -> str:
    """Digest of a docroot file, for checking what a client received."""
    return hashlib.sha256(expected()[name]).hexdigest()


class _Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like nginx
    server_version = "ratelimit-docroot"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.access_log is not None:
            self.server.access_log.write(f"{self.client_address[0]} - [{self.log_date_time_string()}] "
                                         f"{format % args}\n")
            self.server.access_log.flush()

    def list_directory(self, path):  # no directory listings beyond index.html
        self.send_error(404, "Not found")
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    access_log = None

    def server_bind(self):
        # HTTPServer.server_bind would look up the host's name (getfqdn), which
        # waits for a DNS timeout in a namespace without DNS
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


def make_server(root: str | os.PathLike, host: str, port: int, access_log=None) -> _Server:
    """A bound (not yet serving) server; ``serve_forever()`` runs it."""
    root = Path(root)
    if not root.is_dir():
        raise NotFoundError(f"--root: '{root}' is not a directory (create it with: "
                            f"python3 -m ratelimit.lab.docroot write {root})")
    try:
        family = ip_address(host.strip("[]")).version
    except ValueError:
        raise FieldError("--bind", f"'{host}'", "is not an IP address") from None
    if not 0 <= port <= 65535:
        raise FieldError("--port", port, "is not a port (1-65535, or 0: any free port)")
    server_class = _Server
    if family == 6:
        import socket
        server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    try:
        server = server_class((host.strip("[]"), port), partial(_Handler, directory=str(root)))
    except OSError as err:
        raise RatelimitError(f"--bind: cannot listen on {host} port {port} ({err.strerror})") from None
    server.access_log = access_log
    return server


def serve(root, host: str, port: int, pidfile: str | None = None, access_log=None) -> None:
    server = make_server(root, host, port, access_log)
    if pidfile:
        Path(pidfile).write_text(f"{os.getpid()}\n")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if pidfile:
            Path(pidfile).unlink(missing_ok=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m ratelimit.lab.docroot",
                                description="Write the lab's fixed-size files, or serve a directory over HTTP.")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the files into DIR")
    w.add_argument("directory", metavar="DIR")
    s = sub.add_parser("serve", help="serve DIR over HTTP/1.1 (GET, HEAD)")
    s.add_argument("--root", required=True, metavar="DIR")
    s.add_argument("--bind", default="0.0.0.0", metavar="ADDRESS")
    s.add_argument("--port", default="80")
    s.add_argument("--pidfile", default=None, metavar="FILE")
    s.add_argument("--access-log", default=None, metavar="FILE")
    return p


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "write":
        for path in write(args.directory):
            print(f"{path} {path.stat().st_size}")
        return 0
    port = parse_count(args.port, "--port", 0, 65535)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # finally-blocks remove the pidfile
    log = open(args.access_log, "a", encoding="utf-8") if args.access_log else None
    try:
        serve(args.root, args.bind, port, args.pidfile, log)
    finally:
        if log:
            log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_exit(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
