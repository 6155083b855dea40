"""ratelimit's own police and netem paths on a full kernel (in the VM here).

Traffic crosses a real client-router-server lab; the router is configured
through ``service.apply`` exactly as the CLI does.  Measured times are held to
the link model (``ratelimit.linkmodel``) within 5%; a policer, which lets its
burst through at once and drops what TCP sends beyond it, between the time its
rate allows for the bytes beyond the burst and the time TCP needs at 95% of it.
"""

import socket
import statistics
import threading
import time

import pytest

from ratelimit import service
from ratelimit.service import readout
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.spec.summary import summary

PORTS = "10000-10099"


def _client_ports(topo):
    topo.exec("client", ["sh", "-c", "echo '10000 10099' > /proc/sys/net/ipv4/ip_local_port_range"])


def _serve(topo, payload: bytes, *, upload: bool = False):
    """A one-connection server in the server namespace; returns (port, thread, box)."""
    srv = topo.socket("server")
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((topo.server_addr, 0))
    srv.listen(16)
    box = {}

    def run():
        conn, _ = srv.accept()
        with conn:
            if upload:
                got = 0
                while chunk := conn.recv(65536):
                    got += len(chunk)
                box["done"] = time.perf_counter()
                box["bytes"] = got
            else:
                conn.sendall(payload)
        srv.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return srv.getsockname()[1], thread, box


def _download_time(topo, port, size):
    c = topo.socket("client")
    c.settimeout(60)
    t0 = time.perf_counter()
    c.connect((topo.server_addr, port))
    got = 0
    while chunk := c.recv(65536):
        got += len(chunk)
    c.close()
    assert got == size
    return time.perf_counter() - t0


def _police_bounds(req, size: int, *, down: bool = True):
    """(fastest, slowest) seconds a policed transfer of ``size`` bytes may take: the rate for
    all frames beyond the burst, and 95% of the rate for all of them."""
    params = req.only.down if down else req.only.up
    model = LinkModel.from_summary(summary(req))
    rate = model.layer.carried_bps(params.rate_bps)
    frames = sum(model.layer.frame_bytes(n) for n in model.segments(size))
    return (frames - req.burst_bytes(params, rate)) * 8 / rate, frames * 8 / rate / 0.95


@pytest.mark.kernel("police", "u32")
def test_policed_28k8_link_passes_its_rate_to_tcp(lab):
    """v0.3's police mode at 28.8 kbit/s, with the measured police burst (4 packets): a
    100,000-byte download gets at least 95% of the rate and never more than rate + burst."""
    topo = lab(clients=1)
    _client_ports(topo)
    req = service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                               ports=PORTS, rate="28800", burst="6056b", direction="dest", mode="police")
    plan = service.apply(req)
    size = 100_000
    port, thread, _ = _serve(topo, b"x" * size)
    elapsed = _download_time(topo, port, size)
    thread.join(5)
    stats = readout.statistics(topo.router_client_if, topo.router)
    mine = [row for row in stats["links"] if row["packets"]]
    fastest, slowest = _police_bounds(req, size)
    print(f"{size:,} bytes policed at 28.8 kbit/s: {elapsed:.2f} s (between {fastest:.2f} and {slowest:.2f} s); "
          f"policer: {mine}; plan of {len(plan.ops)} operations")
    assert fastest <= elapsed <= slowest
    assert len(mine) == 1 and mine[0]["direction"] == "dest" and mine[0]["bytes"] >= size


@pytest.mark.kernel("police", "u32", "ingress")
def test_source_policing_on_ingress_limits_the_upload(lab):
    topo = lab(clients=1)
    _client_ports(topo)
    rate = 64_000
    req = service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                               ports=PORTS, rate=str(rate), burst="6056b", direction="source", mode="police")
    service.apply(req)
    size = 40_000
    port, thread, box = _serve(topo, b"", upload=True)
    c = topo.socket("client")
    c.settimeout(60)
    t0 = time.perf_counter()
    c.connect((topo.server_addr, port))
    c.sendall(b"y" * size)
    c.close()
    thread.join(60)
    elapsed = box["done"] - t0
    fastest, slowest = _police_bounds(req, size, down=False)
    rows = [r for r in readout.statistics(topo.router_client_if, topo.router)["links"] if r["packets"]]
    print(f"upload {size} bytes at {rate} bit/s: {elapsed:.2f} s (between {fastest:.2f} and {slowest:.2f} s); {rows}")
    assert box["bytes"] == size
    assert fastest <= elapsed <= slowest
    assert rows and rows[0]["direction"] == "source"


def _connect_times(topo, port, n):
    times = []
    for _ in range(n):
        c = topo.socket("client")
        c.settimeout(10)
        t0 = time.perf_counter()
        c.connect((topo.server_addr, port))
        times.append(time.perf_counter() - t0)
        c.close()
    return times


@pytest.mark.kernel("netem", "ifb", "mirred")
def test_intercontinental_profile_measures_400ms_rtt(lab):
    """What the profile adds to the lab's own round trip is 400 ms, within 2%."""
    topo = lab(clients=1)
    _client_ports(topo)
    srv = topo.socket("server")
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((topo.server_addr, 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    try:
        base = statistics.median(_connect_times(topo, port, 5))
        service.apply(service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                                           ports=PORTS, profile="intercontinental-400ms"))
        rtts = _connect_times(topo, port, 7)
    finally:
        srv.close()
    ratio = (statistics.median(rtts) - base) / 0.400
    print(f"connect RTTs {[round(r * 1000, 1) for r in rtts]} ms over a {base * 1000:.1f} ms baseline; "
          f"added/configured {ratio:.4f}")
    assert 0.98 <= ratio <= 1.02


@pytest.mark.kernel("netem", "htb")
def test_shape_mode_with_delay_queues_and_delays_each_link(lab):
    topo = lab(clients=1)
    _client_ports(topo)
    req = service.make_request(topo.router_client_if, netns=topo.router, hosts=topo.client_addrs[0],
                               ports=PORTS, rate="256kbit", delay="100ms", queue="64kb", direction="dest",
                               mode="shape")
    service.apply(req)
    size = 64_000
    port, thread, _ = _serve(topo, b"z" * size)
    elapsed = _download_time(topo, port, size)
    thread.join(5)
    model = LinkModel.from_summary(summary(req))  # the up side has no delay: direction dest
    expected = model.connect_seconds() + model.transfer_seconds(size)
    rows = [r for r in readout.statistics(topo.router_client_if, topo.router)["links"] if r["packets"]]
    print(f"shape 256 kbit/s + 100 ms: {size} bytes in {elapsed:.3f} s (the model {expected:.3f} s); {rows}")
    assert 0.95 <= elapsed / expected <= 1.05
    assert rows[0]["drops"] == 0  # a shaper queues instead of dropping
