"""A staged plan on a router that sends on two tx queues (the queues lab, ``queuelab``, in
namespaces ``rlsq-<pid>-<n>-...``).  The staged plan is built beside the installed one in
each queue's tree, and its queue program waits beside the installed program: until the
commit every packet takes the installed plan's links; the commit switches both devices'
programs; an abort leaves the kernel byte for byte as before."""

import re
import subprocess

import pytest

from ratelimit import service
from ratelimit.kernel.executor import Executor
from ratelimit.plan.layout import TREE_BASE
from ratelimit.service import staging
from ratelimit.state import records
from queuelab import CLIENT4, PROBES, probe, queue_request, settled
from queuelab import routed as queues_lab
from tcdump import tc_dump

pytestmark = pytest.mark.netns

DEVS = ("r0", "rl-r0")
A = ("a", (CLIENT4[0],), ((10000, 10299),), "port", False)
GROWN = ("a", (CLIENT4[0],), ((10000, 10599),), "port", False)  # more groups: built beside, in both trees
B = ("b", (CLIENT4[0],), ((20000, 20255),), "port", False)


@pytest.fixture
def routed(tmp_path, monkeypatch):
    with queues_lab(tmp_path, monkeypatch, "rlsq") as made:
        yield made


def programs(router) -> list:
    with Executor(router) as ex:
        return [ex.queue_program(dev) for dev in DEVS]


def packets(router) -> dict:
    return {(r["direction"], r["port"]): r["packets"] for r in settled(router)}


def class_packets(router) -> dict:
    """{(device, classid): packets} of every HTB class of both devices (``tc -s class show``)."""
    out = {}
    for dev in DEVS:
        text = subprocess.run(["tc", "-n", router, "-s", "class", "show", "dev", dev], check=True,
                              capture_output=True, text=True).stdout
        for major, minor, pkts in re.findall(r"class htb ([0-9a-f]+):([0-9a-f]+) .*\n Sent \d+ bytes (\d+) pkt", text):
            out[dev, int(major, 16) << 16 | int(minor, 16)] = int(pkts)
    return out


def test_a_stage_over_two_queues_carries_nothing_until_its_commit(routed):
    server, router, client = routed
    service.apply(queue_request(router, A, B))
    installed = programs(router)
    plan = staging.stage(queue_request(router, GROWN, B))
    assert plan.how == "staged" and records.load(router, "r0").staged == plan.request
    assert programs(router) == installed  # the installed programs still pick the links
    built = {op.classid for op in plan.changed if type(op).__name__ == "HtbClass"}
    trees = class_packets(router)
    assert {TREE_BASE, TREE_BASE + 1} <= {c >> 16 for c in built}  # the stage built in both queues' trees
    assert built <= {c for _, c in trees}
    probe(server, client, CLIENT4[0], 10005)  # a link of the installed plan
    probe(server, client, CLIENT4[0], 10500)  # a link only the staged plan has
    counted = packets(router)
    assert counted[("dest", 10005)] == counted[("source", 10005)] == PROBES
    assert ("dest", 10500) not in counted  # the installed plan's --stats: no such link yet
    assert sum(n for (_, c), n in class_packets(router).items() if c in built) == 0  # none reached the stage
    committed = staging.commit("r0", router)
    assert committed.how == "committed" and records.load(router, "r0").staged is None
    assert all(p not in (None, old) for p, old in zip(programs(router), installed))
    probe(server, client, CLIENT4[0], 10500)
    after = packets(router)
    assert after[("dest", 10500)] == after[("source", 10500)] == PROBES  # the new plan carries it
    assert sum(n for (_, c), n in class_packets(router).items() if c in built) >= 2 * PROBES  # in what was staged
    assert after[("dest", 20005)] == counted.get(("dest", 20005), 0)  # b's links: in place, not rebuilt


def test_an_abort_over_two_queues_leaves_the_kernel_as_before(routed):
    _, router, _ = routed
    service.apply(queue_request(router, A, B))
    before, record, installed = tc_dump(router, *DEVS), records.load(router, "r0"), programs(router)
    staging.stage(queue_request(router, GROWN, B))
    assert tc_dump(router, *DEVS) != before
    assert staging.abort("r0", router) is not None
    assert tc_dump(router, *DEVS) == before and programs(router) == installed
    assert records.load(router, "r0") == record
