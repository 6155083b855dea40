"""The netlink executor on a full kernel (police and netem): run in the stock-kernel VM.

The key check: for police and netem plans, the state our messages build is the
state ``tc -batch`` builds for the same operations (``Executor.snapshot``),
it reads back as the plan, and netem's parameters are what ``tc`` reports.
Traffic stays short (software emulation is slow).
"""

from __future__ import annotations

import json
import subprocess
import sys
from ipaddress import ip_address

import pytest

from bench.common import wait_until
from ratelimit.kernel.executor import Executor
from ratelimit.plan import diff
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.filters import U32Filter, U32Table
from ratelimit.plan.script import script
from ratelimit.plan.shaping import netem_args, NetemQdisc
from ratelimit.spec.lossmodel import parse_loss
from ratelimit.spec.macslot import parse_slot
from ratelimit.spec.model import LinkParams, Request

pytestmark = pytest.mark.kernel("htb", "u32", "ingress", "netem", "police", "mirred", "ifb")

from conftest import HOST4, HOST6, ROUTER4


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def plan_for(mode, direction="both", ports=(1024, 1031), down=None, up=None, per="port", generation=0):
    req = Request.single("r0", (ip_address(HOST4), ip_address(HOST6)), (ports,), down or LinkParams(28800),
                  up or LinkParams(56000), mode=mode, direction=direction, per=per, generation=generation)
    return compile_plan(req)


PLANS = {
    # policers on root and ingress, no IFB
    "police": dict(mode="police"),
    # policers plus a shared netem delay each way (the upload side through the IFB)
    "police+netem": dict(mode="police", down=LinkParams(28800, delay_us=100_000, jitter_us=10_000,
                                                        delay_corr_pct=25, loss_pct=1),
                         up=LinkParams(56000, delay_us=50_000, duplicate_pct=1, corrupt_pct=0.5)),
    # a class and a netem leaf per flow
    "shape+netem": dict(mode="shape", down=LinkParams(64000, delay_us=200_000, reorder_pct=5,
                                                      reorder_corr_pct=50, loss_pct=0.5, loss_corr_pct=20),
                        up=LinkParams(32000, delay_us=20_000)),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_builds_the_same_kernel_state_as_tc_batch(router_pair, name):
    router, _ = router_pair
    plan = plan_for(**PLANS[name])
    devs = plan.devices()
    with Executor(router) as ex:
        pristine = ex.snapshot(devs)
        sh("sh", "-c", script(plan.ops, router))
        by_tc = ex.snapshot(devs)
        ex.remove(plan.teardown())
        assert ex.snapshot(devs) == pristine
        ex.apply(plan.ops)
        ours = ex.snapshot(devs)
        assert ours == by_tc
        for dev in devs:
            assert set(ex.read_back(dev)) == {op for op in plan.ops
                                              if isinstance(op, (U32Table, U32Filter)) and op.dev == dev}
        if "police" in name:
            assert any(op.police for op in ex.read_back("r0") if isinstance(op, U32Filter))
        ex.remove(plan.teardown())
        assert ex.snapshot(devs) == pristine


NETEMS = tuple(NetemQdisc("r0", 0xFFFFFFFF, 0x530000, params, limit) for params, limit in (
    (LinkParams(delay_us=100_000, jitter_us=10_000, delay_corr_pct=25, loss_pct=1, loss_corr_pct=5,
                duplicate_pct=2, duplicate_corr_pct=0, corrupt_pct=0.5, corrupt_corr_pct=3, reorder_pct=10,
                reorder_corr_pct=50), 2000),
    (LinkParams(delay_us=400_000), 5000),
    (LinkParams(loss_pct=0.1, duplicate_pct=0.2), 10),
    (LinkParams(delay_us=2500, jitter_us=500, corrupt_pct=50), 1000),
    (LinkParams(delay_us=20_000, loss_model=parse_loss("gemodel p=1.5% r=30% h=10% k=99.5%")), 1000),
    (LinkParams(loss_model=parse_loss("state p13=2% p31=40% p32=5% p23=60% p14=0.5%")), 1000),
    (LinkParams(slot=parse_slot("min=2ms max=8ms packets=32 bytes=64kb")), 1000),
    (LinkParams(delay_us=10_000, slot=parse_slot("min=500us")), 1000),
))


def _close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _close_s(shown_s, set_us):
    """Times travel as 64 ns ticks and tc prints whole microseconds (truncated):
    2500 us goes in as 39062 ticks and shows as 2499 us, with tc as with us."""
    return abs(shown_s * 1e6 - set_us) <= 1.0


@pytest.mark.parametrize("stage", NETEMS, ids=[netem_args(n.params, n.limit_pkts) for n in NETEMS])
def test_netem_parameters_read_back_as_set(router_pair, stage):
    router, _ = router_pair
    netem = stage.params
    with Executor(router) as ex:
        ex.apply([stage])
    shown = json.loads(sh("tc", "-n", router, "-j", "-d", "qdisc", "show", "dev", "r0").stdout)
    (q,) = [q for q in shown if q["kind"] == "netem"]
    opts = q["options"]
    assert q["handle"] == "53:" and opts["limit"] == stage.limit_pkts
    if netem.delay_us:
        assert _close_s(opts["delay"]["delay"], netem.delay_us)
        assert _close_s(opts["delay"]["jitter"], netem.jitter_us)
        assert _close(opts["delay"].get("correlation", 0), netem.delay_corr_pct / 100)
    else:
        assert "delay" not in opts
    for key, pct, corr in (("loss-random", netem.loss_pct, netem.loss_corr_pct),
                           ("duplicate", netem.duplicate_pct, netem.duplicate_corr_pct),
                           ("reorder", netem.reorder_pct, netem.reorder_corr_pct),
                           ("corrupt", netem.corrupt_pct, netem.corrupt_corr_pct)):
        if not pct:
            assert key not in opts
            continue
        word = "loss" if key == "loss-random" else key
        assert _close(opts[key][word], pct / 100), (key, opts[key])
        assert _close(opts[key].get("correlation", 0), corr / 100), (key, opts[key])
    assert opts.get("gap", 0) == (1 if netem.reorder_pct else 0)
    model = netem.loss_model
    for kind in ("gemodel", "state"):  # tc shows the model in its own words: gemodel's h and k as 1-h and 1-k
        if model is None or model.model != kind:
            assert f"loss-{kind}" not in opts
            continue
        shown = opts[f"loss-{kind}"]
        want = {**model.params(), "1-h": 100 - model.params().get("h", 0), "1-k": 100 - model.params().get("k", 0)}
        for key, value in shown.items():
            assert abs(value - want[key] / 100) <= 1e-6, (key, shown, model)
        assert len(shown) == len(model.pct), shown
    if netem.slot is None:
        assert "slot" not in opts
    else:  # tc shows a limit only where one is set
        slot = opts["slot"]
        assert _close_s(slot["min-delay"], netem.slot.min_us) and _close_s(slot["max-delay"], netem.slot.max_us), slot
        assert (slot.get("packets", 0), slot.get("bytes", 0)) == (netem.slot.packets, netem.slot.bytes_), slot


SEND = r"""
import socket, sys
dst, dport, n, size, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if sport:
    s.bind(("", sport))
for _ in range(n):
    s.sendto(b"x" * size, (dst, dport))
"""


def _send(ns, dst, dport, n, size, sport=0):
    sh("ip", "netns", "exec", ns, sys.executable, "-c", SEND, *map(str, (dst, dport, n, size, sport)))


def test_police_counters_count_and_drop(router_pair):
    """Both directions: the same u32 handles exist under the root and the ingress
    qdisc of r0; each flow must read its own policer."""
    router, client = router_pair
    plan = plan_for("police", direction="both", ports=(1024, 1027))
    with Executor(router) as ex:
        ex.apply(plan.ops)
        _send(router, HOST4, 9, 1, 10)  # resolve neighbours first (port 9 is not limited)
        _send(client, ROUTER4, 9, 1, 10)
        wait_until(lambda: all("lladdr" in sh("ip", "-n", ns, "neigh", "show").stdout for ns in (router, client)),
                   60, "neighbours resolved")

        def rows():
            return {(r["direction"], r["host"].version, r["port"]): r for r in ex.stats(plan)}

        _send(router, HOST4, 1025, 10, 100)  # 1,420 bytes: inside the 18,000-byte burst
        _send(client, ROUTER4, 9, 6, 100, 1026)  # from the client's port 1026: the "source" policer
        got = rows()
        first = got["dest", 4, 1025]
        assert (first["packets"], first["bytes"], first["drops"]) == (10, 10 * 142, 0)
        assert got["source", 4, 1026]["packets"] == 6 and got["source", 4, 1026]["drops"] == 0
        _send(router, HOST4, 1025, 200, 1000)  # 208 kB at 28.8 kbit/s: most exceed
        got = rows()
        hit = got["dest", 4, 1025]
        assert hit["packets"] == 210 and hit["drops"] > 100 and hit["overlimits"] >= hit["drops"]
        assert hit["backlog_bytes"] == hit["backlog_pkts"] == 0
        busy = {("dest", 4, 1025), ("source", 4, 1026)}
        assert all(r["packets"] == 0 for k, r in got.items() if k not in busy)
        ex.remove(plan.teardown())


CHANGES = {  # (before, after): the same selectors and layout, other numbers
    "police": (dict(mode="police"), dict(mode="police", down=LinkParams(56000), up=LinkParams(28800))),
    "police+netem": (PLANS["police+netem"], dict(mode="police", down=LinkParams(56000, delay_us=300_000, jitter_us=5000,
                                                                              delay_corr_pct=10, loss_pct=2),
                                                 up=LinkParams(33600, delay_us=150_000, duplicate_pct=2,
                                                               corrupt_pct=1))),
    "shape+netem": (PLANS["shape+netem"], dict(mode="shape", down=LinkParams(128000, delay_us=50_000, reorder_pct=2,
                                                                             reorder_corr_pct=25, loss_pct=1,
                                                                             loss_corr_pct=10),
                                               up=LinkParams(64000, delay_us=40_000))),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_changes_in_place_leave_what_a_fresh_apply_leaves(router_pair, name):
    """Classes, netem leaves and policers changed where they stand read back as the new
    plan applied from scratch."""
    router, _ = router_pair
    before, after = (plan_for(**kw) for kw in CHANGES[name])
    changes = diff.in_place(before, after)
    assert changes
    with Executor(router) as ex:
        ex.apply(after.ops)
        fresh = ex.snapshot(after.devices())
        ex.remove(after.teardown())
        ex.apply(before.ops)
        assert ex.snapshot(before.devices()) != fresh
        ex.apply(changes)
        assert ex.snapshot(after.devices()) == fresh
        ex.remove(after.teardown())


SWITCHES = {  # (installed, new): other ports, so a make-before-break switch
    "police": dict(mode="police"),
    "police per host": dict(mode="police", per="host"),  # shared policers, indexes of the second generation
    "police+netem": PLANS["police+netem"],
    "shape+netem": PLANS["shape+netem"],
}


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_a_switch_to_other_ports_leaves_what_a_fresh_apply_leaves(router_pair, name):
    """The new plan built beside the old in the second generation of handles, then the old
    removed: the kernel reads back as the new plan applied from scratch; and back."""
    router, _ = router_pair
    kw = dict(SWITCHES[name])
    per = kw.pop("per", "port")
    first = plan_for(**kw, per=per)
    second = plan_for(**kw, per=per, ports=(2000, 2011), generation=1)
    with Executor(router) as ex:
        pristine = ex.snapshot(second.devices())
        ex.apply(second.ops)
        fresh = ex.snapshot(second.devices())
        ex.remove(second.teardown())
        ex.apply(first.ops)
        switch = diff.make_before_break(first, second)
        assert switch is not None
        ex.apply(switch.adds)
        ex.remove(switch.removal)
        assert ex.snapshot(second.devices()) == fresh
        back = diff.make_before_break(second, first)
        ex.apply(back.adds)
        ex.remove(back.removal)
        ex.remove(first.teardown())
        assert ex.snapshot(second.devices()) == pristine
