"""What a lab measures: timed downloads (``ratelimit.spec.linkmodel`` says how long they should
take), one-way delays of datagrams, and the router's counters summed per client."""

from __future__ import annotations

import shutil
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass

SO_TIMESTAMPNS = 35  # linux/asm-generic/socket.h; Python's socket module does not name it
_SENT_NS = struct.Struct("!q")
_TIMESPEC = struct.Struct("@qq")


@dataclass(frozen=True)
class Download:
    """One HTTP download from a client (by curl, or ratelimit's fetch without it), timed."""

    url: str
    client: str
    http_code: int
    bytes: int
    seconds: float  # from starting to connect to the last byte
    connect_s: float  # TCP handshake: one round trip over the emulated link
    first_byte_s: float
    local_port: int
    header_bytes: int = 0  # the response's HTTP header
    request_bytes: int = 0

    @property
    def bps(self) -> float:
        """Payload bits per second over the whole download."""
        return self.bytes * 8 / self.seconds if self.seconds > 0 else float("inf")

    def model_seconds(self, model) -> float:
        """The time ``model`` (a ``linkmodel.LinkModel``) gives for exactly this download."""
        return model.fetch_seconds(self.bytes, header=self.header_bytes, request=self.request_bytes)

    def as_dict(self) -> dict:
        return {**asdict(self), "bps": self.bps}


CURL_FORMAT = ("%{http_code} %{size_download} %{time_connect} %{time_starttransfer} %{time_total} %{local_port}"
               " %{size_header} %{size_request}")


def curl_argv(url: str, timeout: float) -> list[str]:
    """curl's command line for one timed download of ``url`` (``read_curl`` reads what it prints)."""
    return ["curl", "-sSg", "-o", "/dev/null", "--max-time", f"{timeout:g}", "-w", CURL_FORMAT, url]


def download_argv(url: str, timeout: float) -> tuple[str, list[str]]:
    """(the tool, its command line) for one timed download of ``url`` on this machine: curl
    where it is installed, else ratelimit's own fetch (``python -m ratelimit.lab.fetch``,
    which prints what curl's ``-w CURL_FORMAT`` does); ``read_curl`` reads either."""
    if shutil.which("curl"):
        return "curl", curl_argv(url, timeout)
    return "ratelimit's fetch", [sys.executable, "-m", "ratelimit.lab.fetch", url, f"{timeout:g}"]


def read_curl(url: str, client: str, r) -> Download | None:
    """The ``Download`` a finished ``curl_argv`` run (``r``: a CompletedProcess) measured, or
    None when it failed (``curl_failure`` says why)."""
    fields = r.stdout.split()
    if r.returncode != 0 or len(fields) != 8:
        return None
    code, size, connect, first, total, port, header, request = fields
    return Download(url, client, int(code), int(size), float(total), float(connect), float(first),
                    int(port), int(header), int(request))


def curl_failure(r) -> str:
    return " ".join(r.stderr.split()) or f"{r.args[0]} exited {r.returncode}"


def one_way_delays(tx: socket.socket, rx: socket.socket, count: int, gap_s: float,
                   timeout_s: float) -> list[float]:
    """Send ``count`` small datagrams ``gap_s`` apart from ``tx`` to ``rx``'s address; return
    their one-way delays in seconds, fastest first (lost ones are left out).  Each datagram
    carries its send time (CLOCK_REALTIME, one clock for every namespace) and is read at the
    kernel's receive timestamp, so no process wakeup counts, only the path.  Once all are
    sent, each one still to come is waited for at most ``timeout_s``."""
    rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    dst = rx.getsockname()
    for i in range(count):
        if i:
            time.sleep(gap_s)
        tx.sendto(_SENT_NS.pack(time.time_ns()), dst)
    delays: list[float] = []
    rx.settimeout(timeout_s)
    try:
        while len(delays) < count:
            data, ancillary, _, _ = rx.recvmsg(64, socket.CMSG_SPACE(_TIMESPEC.size))
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) == _SENT_NS.size:
                    sec, nsec = _TIMESPEC.unpack_from(raw)
                    delays.append((sec * 10**9 + nsec - _SENT_NS.unpack(data)[0]) / 1e9)
    except socket.timeout:
        pass
    return sorted(delays)


def client_totals(rows, clients) -> list[dict]:
    """The statistics ``rows`` (one per link and direction) summed per client and direction,
    in the order of ``clients`` ((name, IPv4, IPv6) each; a host that is none of them after,
    by its address).  For example, two rows of client1's links going to the client make one
    total: ``{"client": "client1", "direction": ..., "links": 2, "bytes": ..., ...}``."""
    by_addr = {a: name for name, *addrs in clients for a in addrs}
    per: dict = {}
    for row in rows:
        client = by_addr.get(row["host"], row["host"])
        key = (client, row["direction"])
        agg = per.setdefault(key, {"client": client, "cohort": row.get("cohort"), "profile": row.get("profile"),
                                   "hosts": [], "direction": row["direction"], "links": 0,
                                   "active": 0, "bytes": 0, "packets": 0, "drops": 0,
                                   "overlimits": 0, "backlog_bytes": 0, "rate_bps": row.get("rate_bps")})
        if row["host"] not in agg["hosts"]:
            agg["hosts"].append(row["host"])
        agg["links"] += 1
        agg["active"] += 1 if row.get("bytes") else 0
        for k in ("bytes", "packets", "drops", "overlimits", "backlog_bytes"):
            agg[k] += row.get(k) or 0
    order = {name: i for i, (name, *_) in enumerate(clients)}
    return sorted(per.values(), key=lambda a: (order.get(a["client"], len(order)), a["client"], a["direction"]))
