"""Benchmark 7: a profile switch under load, changed in place against a rebuild.

The namespace lab with 8,000 shaped links each way (one client namespace with an IPv4 and
an IPv6 address, ports 10000-13999, a link per (host, port)), ``modem-28k8``; one download of ``/1000000.bin`` from a
port of that range runs across a switch to ``modem-56k`` (same hosts and ports: the
apply changes the links in place).  The same run then does the same with a rebuild
(``clean``, then ``apply``: what every re-apply did before changes in place, and what one
with other selectors still does when the two plans cannot stand side by side).

Read at the client: the bytes its socket had received, sampled as they arrive; its
receive buffer is ``RCVBUF`` (a window smaller than the modem's queue).  The
reading: the switch's time (the apply call), the longest time the download received
nothing around it, the server's retransmissions (``nstat``) across it, and the bytes
received from ``LEAD_S`` before the switch to ``TAIL_S`` after it against what the link
model lets through: the old link's payload rate before the switch, the new one's after it
(``LinkModel.transfer_seconds`` of a long transfer), and the time the apply takes at
either rate (the middle of the two is the reference).  Beside them, to tell one loss from
another: the server's spurious timeouts, the client's drops (``CLIENT_COUNTERS``) and the
drops of the router's links toward the client, across the same time.  The server's RTO
floor is RFC 6298's 1 s (``server_route``), as in the dial-up table: behind a modem
without its delay stage Linux's 200 ms floor fires before the first segment arrives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .common import (RFC_RTO_MIN_MS, TCP_COUNTERS, BenchError, established, ratio, say, server_route, Steps,
                     tcp_counters, wait_until)
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "switch"
VM_WORK = False
PORTS = "10000-13999"  # 4,000 ports: 8,000 links with both directions
OLD, NEW = "modem-28k8", "modem-56k"
LEAD_S, TAIL_S = 6.0, 10.0
# the reader's receive buffer: a window of a few KB, a 1990s client's, which never fills the
# modem's 16 KB queue -- so the download loses nothing on its own, and whatever it loses
# (and the stall that follows: a lost segment waits behind seconds of queue) is the switch's
RCVBUF = 8192
# before the window: connecting, the queue filling, and the server's first seconds (while
# its send buffer is small, nginx leaves the link idle for a slot now and then)
WARMUP_S = 8.0
FILE = "/1000000.bin"
# what each side says of a loss across the switch (not asserted: to tell one from another):
# the server's timeouts that turned out spurious; the client's drops of segments it had no room
# for (its receive queue, its out-of-order queue, a zero window) and its queue's pruning
SERVER_EXTRA = ("TcpExtTCPSpuriousRTOs",)
CLIENT_COUNTERS = ("TcpExtTCPRcvQDrop", "TcpExtTCPOFODrop", "TcpExtTCPZeroWindowDrop", "TcpExtPruneCalled",
                   "TcpExtRcvPruned")

# reads until its standard input ends (the benchmark closes it once the window is over), or
# for its seconds at the most
READER = r"""
import socket, sys, threading, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[4]))
s.connect((sys.argv[1], 80))
s.sendall(f"GET {sys.argv[2]} HTTP/1.0\r\nHost: {sys.argv[1]}\r\n\r\n".encode())
end, got, out = time.monotonic() + float(sys.argv[3]), 0, []
told = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), told.set()), daemon=True).start()
s.settimeout(0.5)
while time.monotonic() < end and not told.is_set():
    try:
        n = len(s.recv(65536))
    except socket.timeout:
        continue
    if not n:
        break
    got += n
    out.append(f"{time.monotonic():.4f} {got}")
print("\n".join(out))
"""


def _received(samples: list[tuple[float, int]], t: float) -> int:
    """Bytes received by time ``t``."""
    got = 0
    for at, total in samples:
        if at > t:
            break
        got = total
    return got


def _losses(lab) -> tuple[dict, dict, int]:
    """The server's and the client's TCP counters, and the packets the router's links toward
    the client have dropped (their classes' counters)."""
    drops = sum(r.get("drops") or 0 for r in lab.statistics()["links"] if r["direction"] == "dest")
    return (tcp_counters(lab.server.netns, (*TCP_COUNTERS, *SERVER_EXTRA)),
            tcp_counters(lab.client(1).netns, CLIENT_COUNTERS), drops)


def _payload_bps(model) -> float:
    payload = 1_000_000
    return payload * 8 / model.transfer_seconds(payload)


def run_one(lab, method: str, old_link, new_link, lead_s: float, tail_s: float) -> dict:
    # the last method's download gone: the connection waited for below is this one's
    wait_until(lambda: not established(lab.server.netns, 80), 120, f"{method}: the last download to close")
    lab.clean()
    lab.apply(old_link)
    old_model = lab.link_model()
    reader = lab.client(1).popen([sys.executable, "-c", READER, lab.server.address, FILE,
                                  str(WARMUP_S + lead_s + tail_s + 120), str(RCVBUF)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    try:  # the warm-up from the download's connection (the reader is a process: it starts when it can)
        wait_until(lambda: established(lab.server.netns, 80), 120, f"{method}: the download to connect")
    except BenchError:
        reader.kill()
        reader.wait()
        raise
    t_start = time.monotonic() + WARMUP_S + lead_s
    time.sleep(max(0.0, t_start - time.monotonic()))
    server0, client0, drops0 = _losses(lab)
    t0 = time.monotonic()
    if method == "rebuild":
        lab.clean()
    how = lab.apply(new_link)
    t1 = time.monotonic()
    new_model = lab.link_model()
    time.sleep(max(0.0, t1 + tail_s + 1 - time.monotonic()))  # the window's tail, and a second past it
    out, _ = reader.communicate(timeout=60)  # its stdin closes: it stops and prints what it read
    server1, client1, drops1 = _losses(lab)
    samples = [(float(a), int(b)) for a, b in (line.split() for line in out.splitlines())]
    if not samples:
        raise BenchError(f"{method}: the download received nothing")
    a, b = t0 - lead_s, t1 + tail_s
    got = _received(samples, b) - _received(samples, a)
    old_bps, new_bps = _payload_bps(old_model), _payload_bps(new_model)
    # while the apply runs the links go from the old rate to the new one: count that time
    # at the old rate and at the new, and compare with the middle
    low, high = ((old_bps * (t - a) + new_bps * (b - t)) / 8 for t in (t1, t0))
    allowed = (low + high) / 2
    times = [a] + [t for t, _ in samples if a < t < b] + [b]
    stall = max(y - x for x, y in zip(times, times[1:]))
    return {"method": method, "how": how, "switch_s": t1 - t0, "window_s": b - a, "received_bytes": got,
            "allowed_bytes": allowed, "allowed_range": [low, high], "ratio": ratio(got, allowed), "longest_stall_s": stall,
            "old_payload_bps": old_bps, "new_payload_bps": new_bps,
            "server_tcp": {k: server1.get(k, 0) - server0.get(k, 0) for k in (*TCP_COUNTERS, *SERVER_EXTRA)},
            "client_tcp": {k: client1.get(k, 0) - client0.get(k, 0) for k in CLIENT_COUNTERS},
            "router_drops": drops1 - drops0 if how == "in place" else None,  # other applies make new classes
            "samples": [[round(t - t0, 3), n] for t, n in samples]}


def measure(quick: bool, outdir=None) -> dict:
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.core import Lab
    from ratelimit.lab.link import LinkSpec
    netem = probe(["netem"])["netem"]
    ports = "10000-10499" if quick else PORTS
    lead_s, tail_s = (3.0, 5.0) if quick else (LEAD_S, TAIL_S)
    old_link = LinkSpec(profile=OLD, mode="shape", per="port", no_delay=not netem, bandwidth="1gbit")
    new_link = LinkSpec(profile=NEW, mode="shape", per="port", no_delay=not netem, bandwidth="1gbit")
    doc = new_result(NAME, quick)
    doc["config"] = {"ports": ports, "old": OLD, "new": NEW, "mode": "shape", "per": "port", "lead_s": lead_s,
                     "tail_s": tail_s, "delay_stage": netem, "file": FILE}
    steps = Steps(NAME, 2)
    lab = Lab.up(f"bs{os.getpid()}", clients=1, link=old_link, server="nginx", ports=ports,
                 say=lambda m: say(NAME, m))
    track_topology(lab)
    try:
        lo, hi = (int(p) for p in ports.split("-"))
        doc["config"]["links"] = len(lab.topo.client_hosts) * (hi - lo + 1)  # each way: the client's addresses x ports
        doc["config"]["server_rto_min_ms"] = server_route(lab, RFC_RTO_MIN_MS)
        for method in ("in place", "rebuild"):
            row = run_one(lab, method, old_link, new_link, lead_s, tail_s)
            doc["rows"].append(row)
            steps(f"{method} (the apply: {row['how']}): switch {row['switch_s']:.2f} s; received "
                  f"{row['received_bytes']:,} bytes of {row['allowed_bytes']:,.0f} the links allow ({100 * row['ratio']:.1f}%) in "
                  f"{row['window_s']:.1f} s; longest stall {row['longest_stall_s']:.2f} s; server retransmitted "
                  f"{row['server_tcp']['TcpRetransSegs']} segments")
            if outdir:
                save(doc, outdir)
    finally:
        lab.down()
        untrack_topology(lab)
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
