"""Cells in the namespace lab (``ratelimit lab``: nginx behind the router, client namespaces
with curl): twenty clients behind one 4G cell of 10 Mbit/s download at once, each on its own
link, and each download takes the time the link model gives at the cell's fair share."""

import dataclasses
import os
import subprocess
import time

import pytest

from ratelimit import service
from ratelimit.kernel.probe import probe
from ratelimit.lab.core import Lab
from ratelimit.lab.link import LinkSpec
from ratelimit.profiles import scenario
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.spec.summary import summary

pytestmark = pytest.mark.netns

CLIENTS = 20
CELL_BPS = 10_000_000
TOWER = """
description = "twenty phones under one tower"
[cell.tower]
description = "one LTE cell's downlink, shared"
down = "10mbit"
[cohort.phones]
description = "phones, each its own 4G link (no loss: a loss would be a retransmission's time, not the cell's)"
hosts = "{hosts}"
profile = "4g"
loss = "0%"
cell = "tower"
"""
# the server behind one access link: the cohort's flows to and from the server's address
# share it, whoever the client is; each client keeps its own 4G link
SERVER_SIDE = TOWER.replace('[cell.tower]\ndescription = "one LTE cell\'s downlink, shared"',
                            '[cell.tower]\ndescription = "the server\'s access link, shared by every client"') \
    .replace('cell = "tower"', 'cell = "tower"\nservers = "{server}"')


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    netem = probe(["netem"])["netem"]
    made = Lab.up(f"tcl{os.getpid() % 100000}", clients=CLIENTS, ports="10000-10009",
                  link=LinkSpec(profile="4g", no_delay=not netem), server_tcp="rfc6298")
    try:
        yield made, netem
    finally:
        made.down()


@pytest.mark.slow
@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
@pytest.mark.parametrize("text", [TOWER, SERVER_SIDE], ids=["tower", "server-side"])
def test_twenty_clients_in_a_cell_each_download_in_the_models_time_at_the_fair_share(lab, tmp_path, text):
    """All twenty fetch 1,000,000 bytes at once (curl, started together within a few ms): each
    gets min(its 4G cap, 10 Mbit/s / 20) = 0.5 Mbit/s, so each download takes the link
    model's time at that rate, within 5%; under a tower's cell, and under the server's
    (a cell of the flows to and from the server's address).  (100,000 bytes each read 0.935-1.016: in 1.7 s,
    the flows' slow starts move bytes between them; the cell's total held.)"""
    lab, netem = lab
    hosts = ",".join(lab.client(i).address for i in range(1, CLIENTS + 1))
    extra = {} if netem else {"delay": "0ms", "jitter": "0ms"}
    req = service.make_request(lab.topo.router_client_if, netns=lab.topo.router,
                               scenario=scenario.parse(text.format(hosts=hosts, server=lab.server.address),
                                                       "test tower"), **extra)
    service.apply(req)
    model = LinkModel.from_summary(summary(req), delay_stage=netem)
    share = dataclasses.replace(model, down_bps=min(model.down_bps, CELL_BPS // CLIENTS))
    go = tmp_path / "go"
    fmt = "%{size_download} %{size_header} %{size_request} %{time_total}"
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", lab.client(i).netns, "sh", "-c",
         f'while [ ! -e "{go}" ]; do sleep 0.001; done; exec curl -sS -o /dev/null -w "{fmt} %{{time_starttransfer}}" '
         f'"{lab.url("/1000000.bin")}"'], stdout=subprocess.PIPE, text=True) for i in range(1, CLIENTS + 1)]
    time.sleep(1.0)  # every shell polling
    go.touch()
    results = [p.communicate(timeout=120)[0].split() for p in procs]
    ratios = []
    for size, header, request, seconds, _ in results:
        expected = share.fetch_seconds(int(size), header=int(header), request=int(request))
        ratios.append(float(seconds) / expected)
    print(f"model {expected:.2f} s at {share.down_bps / 1e6:.2f} Mbit/s; measured / model "
          f"{min(ratios):.3f}-{max(ratios):.3f}")
    assert all(int(r[0]) == 1_000_000 for r in results)
    assert all(0.95 <= r <= 1.05 for r in ratios), ratios
