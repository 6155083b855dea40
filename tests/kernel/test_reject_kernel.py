"""A reject over a link with a delay, on a full kernel (netem in the VM here): the refusal
takes the link's round trip, as a real server's would.  The client's SYN crosses the upload
link's delay before the router's rule refuses it, and the reset crosses the download
link's.  The router forwards: the rules are its forward hook's."""

import subprocess
import sys

import pytest

from ratelimit import service

PORT = 5004
DELAY_MS = 20
LISTEN = r"""
import socket, sys
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.close()
"""
CONNECT = r"""
import socket, sys, time
s = socket.socket()
s.settimeout(2.0)
t = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", time.monotonic() - t)
except OSError as e:
    print(type(e).__name__, time.monotonic() - t)
"""


def _connects(topo, count: int = 5) -> tuple[set, list[float]]:
    """How ``count`` connects ended (one warm-up before them: the neighbours' addresses), and
    each one's seconds."""
    ends, took = set(), []
    for i in range(count + 1):
        out = topo.exec("client", [sys.executable, "-c", CONNECT, topo.addr("server"), str(PORT)]).stdout.split()
        if i:
            ends.add(out[0])
            took.append(float(out[1]))
    return ends, took


def _quickest_ms(topo, ask: dict, delay_ms: int, reject: bool) -> float:
    """The quickest of five connects' ms over the plan ``ask`` with ``delay_ms`` each way, and
    a reject or not; AssertionError unless all five end as they should."""
    plan = service.apply(service.make_request(topo.router_client_if, delay=f"{delay_ms}ms", reject=reject, **ask))
    ends, took = _connects(topo)
    print(f"delay {delay_ms} ms, reject {reject} ({plan.how}):", [f"{t * 1000:.2f}" for t in took], "ms")
    assert ends == {"ConnectionRefusedError" if reject else "connected"}
    return min(took) * 1000


@pytest.mark.kernel("netem", "htb", "u32")
def test_a_refusal_takes_the_links_round_trip(lab):
    """A connect and a refused one each take the link's round trip more than over the same
    link without a delay: 40 ms for 20 ms each way (the connect's SYN and SYN-ACK, the
    refusal's SYN and reset), within 2 ms.  The quickest of five counts: the VM's emulated
    CPU adds a few ms to every connect, and more to some."""
    topo = lab(clients=1)
    srv = topo.popen("server", [sys.executable, "-c", LISTEN, topo.addr("server"), str(PORT)],
                     stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        ask = dict(netns=topo.router, hosts=topo.client_addrs[0], ports="all", per="host", rate="2mbit",
                   mode="shape")
        for reject in (False, True):
            idle = _quickest_ms(topo, ask, 1, reject)  # 1 ms: the same netem stage as the delayed link's
            delayed = _quickest_ms(topo, ask, 1 + DELAY_MS, reject)
            print(f"reject {reject}: {delayed - idle:.2f} ms more with the delay; model {2 * DELAY_MS} ms")
            assert delayed - idle == pytest.approx(2 * DELAY_MS, abs=2)
    finally:
        srv.kill()
        srv.wait()
