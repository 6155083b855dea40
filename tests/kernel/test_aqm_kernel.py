"""Managed queues on a full kernel (fq_codel in the VM here): a bulk TCP download and a ping
share a 4G-rate link with a delay, as a phone's download and its game do.

The link is the 4g profile's downlink rate, 9 Mbit/s, with a 20 ms delay, one per host (so
that the ping's replies and the download share it).  The server sends to the client as fast
as TCP lets it for ``BULK_S``; the client pings the server every 50 ms meanwhile.  A ping's
queueing delay is its round trip less the idle link's (the median of the pings before the
download starts): the replies queue on the shaped downlink, the requests go up unshaped.

- fq_codel: the ping's own flow is served first, and the download's queue is held near its
  5 ms target, so a ping waits little.
- droptail with a 100 ms queue: TCP fills it; the most a ping waits is the queue's length in
  time (``Request.queue_bytes`` at the rate), as the queue model says.
- fq_codel with ECN, the client asking for it: the queue marks the download's packets
  instead of dropping them.
"""

import json
import re
import statistics
import subprocess
import sys
import time

import pytest

from ratelimit import service

PORT = 5003
RATE = "9mbit"
DELAY = "20ms"
BULK_S = 12
PING_GAP_S = 0.05

SERVE = r"""
import socket, sys, time
addr, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port))
srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
chunk = bytes(65536)
end = time.monotonic() + seconds
while time.monotonic() < end:
    conn.sendall(chunk)
conn.close()
"""

FETCH = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
got = 0
while True:
    data = s.recv(1 << 20)
    if not data:
        break
    got += len(data)
print(got)
"""


def _rtts_ms(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", text)]


def _ping(topo, count: int):
    return topo.popen("client", ["ping", "-n", "-i", str(PING_GAP_S), "-c", str(count), topo.addr("server")],
                      stdout=subprocess.PIPE, text=True)


def _download_with_pings(topo, ecn: bool = False) -> tuple[float, list[float], int]:
    """(the idle link's round trip, each ping's queueing delay during the download, in ms; the
    bytes the client got)."""
    if ecn:
        topo.exec("client", ["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"])
    idle = _ping(topo, 20).communicate(timeout=60)[0]
    base = statistics.median(_rtts_ms(idle))
    srv = topo.popen("server", [sys.executable, "-c", SERVE, topo.addr("server"), str(PORT), str(BULK_S)],
                     stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        fetch = topo.popen("client", [sys.executable, "-c", FETCH, topo.addr("server"), str(PORT)],
                           stdout=subprocess.PIPE, text=True)
        time.sleep(3)  # past slow start: the queue is in its steady state
        pings = _ping(topo, int((BULK_S - 5) / PING_GAP_S)).communicate(timeout=120)[0]
        got = int(fetch.communicate(timeout=120)[0])
    finally:
        srv.kill()
    return base, [rtt - base for rtt in _rtts_ms(pings)], got


def _measured(topo, name: str) -> tuple[list[float], float]:
    """``_download_with_pings``, printed under ``name``: each ping's queueing delay (ms) and
    the download's rate (bit/s)."""
    base, waits, got = _download_with_pings(topo)
    rate_bps = got * 8 / BULK_S
    print(f"{name}: idle round trip {base:.2f} ms; {len(waits)} pings during the download: queueing median "
          f"{statistics.median(waits):.2f} ms, p95 {_p(waits, 0.95):.2f}, max {max(waits):.2f}; "
          f"download {rate_bps / 1e6:.2f} Mbit/s")
    return waits, rate_bps


def _request(topo, **options):
    return service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0], ports="all",
                                per="host", rate=RATE, delay=DELAY, mode="shape", direction="dest", **options)


def _qdiscs(topo) -> list[dict]:
    out = topo.exec("router", ["tc", "-s", "-j", "qdisc", "show", "dev", topo.router_client_if]).stdout
    return json.loads(out)


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))]


@pytest.mark.kernel("netem", "htb", "u32", "fq_codel")
def test_fq_codel_keeps_a_ping_beside_a_bulk_download_within_its_target(lab):
    topo = lab(clients=1)
    service.apply(_request(topo, aqm="fq_codel"))
    kinds = [q["kind"] for q in _qdiscs(topo)]
    assert "fq_codel" in kinds and "netem" in kinds  # the AQM is netem's child
    waits, rate_bps = _measured(topo, "fq_codel")
    assert _p(waits, 0.95) <= 15.0
    assert rate_bps >= 0.85 * 9e6  # the download still fills the link (less slow start and headers)


@pytest.mark.kernel("netem", "htb", "u32")
def test_a_droptail_queue_holds_a_ping_as_long_as_its_length_at_the_rate(lab):
    topo = lab(clients=1)
    req = _request(topo, aqm="droptail")
    service.apply(req)
    p = req.only.down
    queue_ms = req.queue_bytes(p, p.rate_bps, req.only) * 8 / p.rate_bps * 1000
    frame_ms = req.line_mtu_bytes(req.only) * 8 / p.rate_bps * 1000
    base, waits, got = _download_with_pings(topo)
    print(f"droptail: idle round trip {base:.2f} ms; model queue {queue_ms:.2f} ms; {len(waits)} pings: queueing "
          f"median {statistics.median(waits):.2f} ms, p95 {_p(waits, 0.95):.2f}, max {max(waits):.2f}")
    # TCP fills the queue before each loss: the longest waits are its length, a frame either way
    assert _p(waits, 0.95) == pytest.approx(queue_ms, abs=max(0.05 * queue_ms, frame_ms))
    assert max(waits) <= queue_ms + 2 * frame_ms


@pytest.mark.kernel("netem", "htb", "u32", "fq_codel")
def test_fq_codel_with_ecn_marks_an_ecn_download_and_drops_nothing(lab):
    topo = lab(clients=1)
    service.apply(_request(topo, aqm="fq_codel ecn=on"))
    base, waits, got = _download_with_pings(topo, ecn=True)
    stats = {q["kind"]: q for q in _qdiscs(topo) if q["kind"] in ("fq_codel", "netem")}
    marks, drops = stats["fq_codel"].get("ecn_mark", 0), stats["fq_codel"]["drops"] + stats["netem"]["drops"]
    print(f"fq_codel with ECN: {marks} marks, {drops} drops; pings p95 {_p(waits, 0.95):.2f} ms; "
          f"{got * 8 / BULK_S / 1e6:.2f} Mbit/s")
    assert marks > 0
    assert drops == 0
    assert _p(waits, 0.95) <= 15.0


@pytest.mark.kernel("netem", "htb", "u32", "cake")
def test_the_home_sqm_cake_profile_keeps_a_ping_beside_a_bulk_download_within_its_target(lab):
    """The shipped home link (CAKE behind a 14 ms delay, 4.5 Mbit/s down): the ping's p95
    queueing delay stays within 15 ms, and the download fills the link."""
    topo = lab(clients=1)
    service.apply(service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                                       ports="all", per="host", profile="home-sqm-cake", direction="dest"))
    assert "cake" in [q["kind"] for q in _qdiscs(topo)]
    waits, rate_bps = _measured(topo, "home-sqm-cake")
    assert _p(waits, 0.95) <= 15.0
    assert rate_bps >= 0.85 * 4.5e6
