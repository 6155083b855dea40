"""Shape mode on the host kernel, with real TCP through a client-router-server lab."""

import threading

import pytest

from ratelimit import service
from ratelimit.kernel.probe import probe
from ratelimit.service import readout
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.spec.summary import summary
from downloads import download, serve

pytestmark = pytest.mark.netns

RATE_BPS = 400_000
SIZE = 100_000


def _server(topo, payload, connections):
    return serve(topo.socket("server"), topo.server_addr, payload, connections)


def _download(topo, client, port, local_port, out, key):
    download(topo.socket(client), (topo.addr(client), local_port), (topo.server_addr, port), out, key)


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_each_selected_link_gets_its_own_rate_and_others_full_speed(lab):
    """Per (host, port): each limited connection takes the link model's time within 5%
    (a handshake, then its segments as Ethernet frames at the rate), concurrently.  Each
    link queues more than the whole download: the model has no losses, and with the
    default queue (15 KB here) slow start sometimes overflows it, and recovering from
    that costs a few tenths of a second."""
    topo = lab(clients=2)
    req = service.make_request(topo.router_client_if, netns=topo.router, hosts=",".join(topo.client_addrs),
                               ports="10000-10009", rate=str(RATE_BPS), mode="shape", direction="dest",
                               queue=f"{2 * SIZE}b")
    service.apply(req)
    port = _server(topo, b"d" * SIZE, 4)
    results = {}
    flows = [("client1", 10001, "c1-limited"), ("client1", 10002, "c1-limited-2"),
             ("client2", 10003, "c2-limited"), ("client2", 20000, "c2-unlimited")]
    threads = [threading.Thread(target=_download, args=(topo, c, port, lp, results, key)) for c, lp, key in flows]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    model = LinkModel.from_summary(summary(req), delay_stage=probe(["netem"])["netem"])
    expected = model.connect_seconds() + model.transfer_seconds(SIZE)
    for key in ("c1-limited", "c1-limited-2", "c2-limited"):
        got, seconds = results[key]
        assert got == SIZE
        print(f"{key}: {SIZE} bytes in {seconds:.3f} s; the model {expected:.3f} s")
        assert 0.95 <= seconds / expected <= 1.05
    got, seconds = results["c2-unlimited"]
    print(f"unlimited: {SIZE} bytes in {seconds:.3f} s")
    assert got == SIZE and seconds < 0.25 * SIZE * 8 / RATE_BPS
    links = {(r["host"], r["port"]): r for r in readout.statistics(topo.router_client_if, topo.router)["links"]}
    assert links[topo.client_addrs[0], 10001]["bytes"] >= SIZE
    assert links[topo.client_addrs[1], 10003]["bytes"] >= SIZE
    assert links[topo.client_addrs[1], 10004]["bytes"] == 0
