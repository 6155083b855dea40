"""Counters read at scale (``ratelimit.kernel.counters``) against the host kernel.

The readers learn where the counters sit from the first message of each length
and read later ones at those offsets; these tests make the kernel dump messages
of several lengths in one dump, and read action counters from u32 filters
(the host kernel has no act_police, so the exact filters carry a mirred action,
whose counters sit where a policer's do), and check every flow's count against
the packets sent.  Namespaces come from conftest (``router_pair``) and are
removed even when a test fails.
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from bench.common import wait_until
from ratelimit.kernel.executor import Executor
from ratelimit.plan.filters import U32Filter
from ratelimit.plan.ops import Plan
from ratelimit.spec.model import LinkParams

from conftest import HOST4, HOST6
from test_netlink import SEND, in_ns, plan_for, resolve_neighbours, sh


def counts_by_flow(ex, plan):
    return {(r["direction"], str(r["host"]), r["port"]): r for r in ex.stats(plan)}


def wait_for(ex, plan, want: dict, seconds: float = 30.0) -> dict:
    """Counters once every flow in ``want`` counted at least that many packets (packets
    wait for neighbour resolution before they reach a qdisc); BenchError after ``seconds``."""
    def counted():
        got = counts_by_flow(ex, plan)
        return got if all(got[k]["packets"] >= n for k, n in want.items()) else None
    return wait_until(counted, seconds, "the packets counted",
                      detail=lambda: {k: counts_by_flow(ex, plan)[k]["packets"] for k in want})


@pytest.mark.netns
def test_class_counters_from_a_dump_with_messages_of_several_lengths(router_pair):
    router, client = router_pair
    # 40 Gbit/s does not fit HTB's 32-bit byte rate: the pool class carries 64-bit rate
    # attributes, so its message is longer than the links' classes in the same dump
    plan = plan_for(direction="dest", down=LinkParams(8_000_000), bandwidth_bps=40_000_000_000)
    with Executor(router) as ex:
        ex.apply(plan.ops)
        resolve_neighbours(router, client)
        in_ns(router, SEND, 4, HOST4, 1025, 0, 7)
        in_ns(router, SEND, 6, HOST6, 1030, 0, 5)
        in_ns(router, SEND, 4, HOST4, 1031, 0, 2)
        got = wait_for(ex, plan, {("dest", HOST4, 1025): 7, ("dest", HOST6, 1030): 5, ("dest", HOST4, 1031): 2})
        assert len(ex._layouts[0]) >= 2  # the dump held messages of two lengths at least
        assert got["dest", HOST4, 1025]["packets"] == 7
        assert got["dest", HOST4, 1025]["bytes"] == 7 * (100 + 8 + 20 + 14)
        assert got["dest", HOST6, 1030]["packets"] == 5 and got["dest", HOST4, 1031]["packets"] == 2
        assert {k for k, r in got.items() if r["packets"]} == {("dest", HOST4, 1025), ("dest", HOST6, 1030),
                                                              ("dest", HOST4, 1031)}
        # a second read goes through the learnt layouts only, and reads the same
        assert counts_by_flow(ex, plan) == got
        ex.remove(plan.teardown())


def with_mirred(plan: Plan, target: str) -> Plan:
    """The police-mode tree with each exact filter's policer replaced by a mirred
    redirect to ``target`` (the host kernel lacks act_police; mirred counts alike)."""
    ops = tuple(dataclasses.replace(op, police=None, redirect=target) if isinstance(op, U32Filter) and op.police
                else op for op in plan.ops)
    return Plan(plan.request, ops, plan.flows)


@pytest.mark.netns
def test_action_counters_per_flow_from_one_filter_dump_per_device_and_parent(router_pair):
    router, client = router_pair
    sh("ip", "-n", router, "link", "add", "rs0", "type", "veth", "peer", "name", "rs1")
    for dev in ("rs0", "rs1"):
        sh("ip", "-n", router, "link", "set", dev, "up")
    # police mode, Ethernet framing, no netem: dest on r0's root qdisc, source on its ingress qdisc
    plan = with_mirred(plan_for(mode="police", down=LinkParams(8_000_000), up=LinkParams(8_000_000)), "rs0")
    assert all(f.classid is None for f in plan.flows)
    with Executor(router) as ex:
        ex.apply(plan.ops)
        resolve_neighbours(router, client)
        dumps = []
        real = ex.chan.dump_chunks

        def counting(msg):
            dumps.append(msg)
            return real(msg)
        ex.chan.dump_chunks = counting
        in_ns(router, SEND, 4, HOST4, 1025, 0, 7)  # dest: redirected to rs0 by the filter's action
        in_ns(router, SEND, 6, HOST6, 1030, 0, 5)
        in_ns(client, SEND, 4, "198.18.1.1", 9, 1027, 4)  # source: on r0's ingress
        got = wait_for(ex, plan, {("dest", HOST4, 1025): 7, ("dest", HOST6, 1030): 5, ("source", HOST4, 1027): 4})
        assert got["dest", HOST4, 1025]["packets"] == 7 and got["dest", HOST6, 1030]["packets"] == 5
        assert got["source", HOST4, 1027]["packets"] == 4
        assert got["dest", HOST4, 1025]["bytes"] == 7 * (100 + 8 + 20 + 14)
        assert {k for k, r in got.items() if r["packets"]} == {("dest", HOST4, 1025), ("dest", HOST6, 1030),
                                                              ("source", HOST4, 1027)}
        dumps.clear()
        ex.stats(plan)
        assert len(dumps) == 2  # root 52: and ingress ffff: on r0
        ex.remove(plan.teardown())
    subprocess.run(["ip", "-n", router, "link", "del", "rs0"], capture_output=True)


@pytest.mark.netns
def test_device_lookups_answer_as_ip_link_does_and_keep_nothing_behind(router_pair):
    """Names, indexes and states come from the reader's own rtnetlink channel (pyroute2's
    lookups each left a message in its socket's queue: the dashboard's poller grew)."""
    import gc
    import json
    import subprocess
    from pyroute2.netlink.core import CoreMessageQueue
    from ratelimit.kernel.readback import Reader
    router, _ = router_pair
    shown = {d["ifname"]: d for d in json.loads(subprocess.run(["ip", "-j", "-d", "-n", router, "link", "show"],
                                                              check=True, capture_output=True, text=True).stdout)}
    with Reader(router) as reader:
        for name, dev in shown.items():
            assert reader.links.index(name) == dev["ifindex"]
            assert reader.links.name(dev["ifindex"]) == name
            kind = dev.get("linkinfo", {}).get("info_kind", "")
            assert reader.links.state(name) == {"kind": kind, "up": "UP" in dev["flags"]}
        assert reader.links.index("rl-nothing") is None and reader.links.state("rl-nothing") is None
        assert reader.links.name(max(d["ifindex"] for d in shown.values()) + 1000) is None
        def kept() -> int:
            return sum(q.qsize() for o in gc.get_objects() if isinstance(o, CoreMessageQueue) for q in o.queues.values())
        before = kept()
        for _ in range(50):
            reader.links.forget()
            reader.links.index("r0")
            reader.links.state("r0")
        assert kept() == before
