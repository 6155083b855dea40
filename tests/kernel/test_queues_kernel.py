"""Several tx queues on a full kernel (in the VM here, whose stock kernel is older than the
host's): the lab's router applies ``--queues 2`` with a delay stage (netem under each link's
HTB class, in each queue's tree), and a download through a link in each tree takes the link
model's time.  The eBPF program that pins the queues is loaded by this kernel too.
"""

import threading

import pytest

from ratelimit import service
from ratelimit.kernel.executor import Executor
from ratelimit.lab import topology
from ratelimit.plan.layout import QUEUE_GROUP_LINKS, TREE_BASE, Layout
from ratelimit.service import readout
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.spec.summary import summary
from downloads import download, serve

SIZE = 64_000
PORTS = "10000-10599"  # 600 links: two groups of 512 and 88, one in each tree
FIRST, SECOND = 10000, 10000 + QUEUE_GROUP_LINKS  # a link of each group


@pytest.mark.kernel("netem", "htb", "clsact", "bpf")
def test_two_queues_each_trees_link_takes_the_models_time_with_its_delay(lab, monkeypatch):
    monkeypatch.setattr(topology, "QUEUES", 2)  # two tx queues whatever CPUs the VM has
    topo = lab(clients=1)
    dev, client = topo.router_client_if, topo.client_addrs[0]
    req = service.make_request(dev, netns=topo.router, hosts=client, ports=PORTS, rate="256kbit", delay="50ms",
                               queue=f"{2 * SIZE}b", direction="dest", mode="shape", queues="2")
    plan = service.apply(req)
    lay = Layout.of(plan.request)
    assert {lay.group_class(0) >> 16, lay.group_class(SECOND - FIRST) >> 16} == {TREE_BASE, TREE_BASE + 1}
    with Executor(topo.router) as ex:
        assert ex.queue_program(dev) is not None  # the program that pins each flow to its queue
    port = serve(topo.socket("server"), topo.server_addr, b"d" * SIZE, 2)
    results: dict = {}
    threads = [threading.Thread(target=download, args=(topo.socket("client"), (client, lp), (topo.server_addr, port),
                                                       results, lp)) for lp in (FIRST, SECOND)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    model = LinkModel.from_summary(summary(req))  # the up side has no delay: direction dest
    expected = model.connect_seconds() + model.transfer_seconds(SIZE)
    for lp in (FIRST, SECOND):
        got, seconds = results[lp]
        print(f"port {lp}: {SIZE} bytes in {seconds:.3f} s; the model {expected:.3f} s")
        assert got == SIZE and 0.95 <= seconds / expected <= 1.05
    busy = [r for r in readout.statistics(dev, topo.router)["links"] if r["packets"]]
    assert len(busy) == 2 and all(r["drops"] == 0 for r in busy)  # a shaper queues instead of dropping
