"""A timed HTTP download for machines without curl: what ``curl -w`` prints for the lab.

    python -m ratelimit.lab.fetch URL TIMEOUT

prints the eight numbers of ``measure.CURL_FORMAT`` on one line: the HTTP status, the body's
bytes, the seconds from the start to the TCP connection, to the first byte and to the last
byte, the local port, the header's and the request's bytes.  It speaks plain HTTP/1.1, one
request per connection, and reads the body to its ``Content-Length``.  Errors are one line
on stderr and exit status 1.

>>> _request("server", "/10000.bin")[:28]
b'GET /10000.bin HTTP/1.1\\r\\nHos'
"""

from __future__ import annotations

import socket
import sys
import time
from urllib.parse import urlsplit

USER_AGENT = "ratelimit-lab"


def _request(host: str, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\n"
            f"Connection: close\r\n\r\n").encode("ascii")


def fetch(url: str, timeout: float) -> tuple:
    """The eight fields of ``measure.CURL_FORMAT`` for one download of ``url``."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url}: not an http:// URL")
    port = parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    addr = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)[0]
    with socket.socket(addr[0], socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(addr[4])
        t_connect = time.monotonic() - t0
        request = _request(parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]", path)
        s.sendall(request)
        head, first = b"", None
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection before its header ended")
            first = first if first is not None else time.monotonic() - t0
            head += chunk
            _check(deadline)
        header, _, body = head.partition(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        code = int(lines[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(fields.get("content-length", -1))
        got = len(body)
        while length < 0 or got < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += len(chunk)
            _check(deadline)
        total = time.monotonic() - t0
        local_port = s.getsockname()[1]
    return code, got, t_connect, first, total, local_port, len(header) + 4, len(request)


def _check(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError("the download did not finish in time")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m ratelimit.lab.fetch URL TIMEOUT", file=sys.stderr)
        return 2
    try:
        code, size, connect, first, total, port, header, request = fetch(argv[0], float(argv[1]))
    except (OSError, ValueError) as err:
        print(f"fetch: {argv[0]}: {err}", file=sys.stderr)
        return 1
    print(f"{code} {size} {connect:.6f} {first:.6f} {total:.6f} {port} {header} {request}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
