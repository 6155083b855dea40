"""The netlink executor against the host kernel, and its message packing.

Root tests (``netns``) each make throwaway namespaces named ``rlnl-...`` and
delete them even when they fail.  The host kernel has no police or netem, so
here police-mode trees are compared without their police action and police
and netem messages are compared with the bytes tc sends (captured with
strace); ``tests/kernel/test_netlink_kernel.py`` applies them for real.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid
from ipaddress import ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.common import wait_until
from ratelimit.errors import ApplyError, NotFoundError
from ratelimit.kernel.encode import Encoder
from ratelimit.kernel.executor import Executor, shorten, StepFailed
from ratelimit.kernel.kinds import htb
from ratelimit.kernel.rates import Clock, percent
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.filters import Key, Police, U32Filter, U32Table
from ratelimit.plan.ops import AddIfb, Change, DelLink, DelQdisc, HtbQdisc, Plan
from ratelimit.plan.script import script, tc_batch
from ratelimit.plan.shaping import AqmQdisc, FifoQdisc, HtbClass, NetemQdisc, TbfQdisc
from ratelimit.spec import linklayer
from ratelimit.spec.aqm import parse_aqm
from ratelimit.spec.lossmodel import parse_loss
from ratelimit.spec.macslot import parse_slot
from ratelimit.spec.model import LinkParams, Queue, Request

from conftest import HOST4, HOST6, ROUTER4, ROUTER6


def sh(*argv, check=True, **kw):
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)


def plan_for(dev="r0", mode="shape", direction="both", ports=(1024, 1031), down=None, up=None, **kw):
    down = down or LinkParams(2_000_000)
    up = up or LinkParams(1_000_000)
    req = Request.single(dev, (ip_address(HOST4), ip_address(HOST6)), (ports,), down, up, mode=mode,
                  direction=direction, **kw)
    return compile_plan(req)


def without_police(plan: Plan) -> Plan:
    """The host kernel lacks act_police: the same tree, minus the action."""
    ops = tuple(dataclasses.replace(op, police=None) if isinstance(op, U32Filter) else op for op in plan.ops)
    return Plan(plan.request, ops, plan.flows)


def tc_ops(plan: Plan, dev: str) -> set:
    return {op for op in plan.ops if isinstance(op, (U32Table, U32Filter)) and op.dev == dev}


def tc_apply(ns: str, plan: Plan) -> None:
    sh("sh", "-c", script(plan.ops, ns))


# ------------------------------------------------------------------ pure: no root needed


def test_ticks_are_computed_like_tc():
    clk = Clock("000003e8 00000040 000f4240 3b9aca00\n")
    assert clk.tick_in_usec == 15.625
    assert clk.xmittime(12_500_000, 64) == 78  # 5.12 us: whole microseconds first (tc's rtab[0])
    assert clk.xmittime(3600, 18000) == 78_125_000  # 5 s
    for rate, size in ((3600, 18000), (12_500_000, 62_500_000), (125_000, 1514), (7, 1)):
        assert clk.size_of(rate, clk.xmittime(rate, size)) == size
    assert percent(25) == 0x40000000 and percent(10) == 0x1999999A and percent(100) == 0xFFFFFFFF


def test_step_failed_names_the_step_the_text_and_the_error():
    op = HtbClass("eth0", 0x520001, 0x520100, 28800, 28800, 18000, 1514)
    err = StepFailed(36, op, errno.EEXIST, "Class already exists", total=1200)
    assert str(err).startswith("step 37 of 1200 (class add dev eth0 parent 52:1 classid 52:100 htb")
    assert str(err).endswith("failed: File exists (Class already exists)")
    assert isinstance(err, ApplyError) and err.index == 36 and err.op is op
    long = "filter add dev eth0 " + "match u32 0x00000000 0xffffffff at 16 " * 10
    assert len(shorten(long)) <= 110 and " ... " in shorten(long)


def test_u32_selector_bytes():
    op = U32Filter("eth0", 0x520000, 1, "ip", 1, 5, 1, (Key(0xC6120102, 0xFFFFFFFF, 16), Key(0x400, 0xFFFF, 20)),
                   classid=0x520100)
    msg = Encoder(lambda name: 7, Clock("000003e8 00000040 000f4240 3b9aca00")).u32_filter(op, 9, 1)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq) == (len(msg), 44, 0x601, 9)
    family, ifindex, handle, parent, info = struct.unpack_from("=BxxxiIII", msg, 16)
    assert (ifindex, handle, parent, info) == (7, 0x00105001, 0x520000, 0x00010008)
    sel = msg.index(bytes.fromhex("01000200"))  # TERMINAL, 2 keys
    assert msg[sel + 16:sel + 48] == bytes.fromhex("ffffffff" "c6120102" "10000000" "00000000"
                                                   "0000ffff" "00000400" "14000000" "00000000")


def test_the_class_options_cache_does_not_grow_with_the_rates():
    """A trace driver's encoder sets a new rate on every link every step, for hours: what it
    keeps is one packer per class's fixed parameters."""
    enc = Encoder(lambda name: 7, Clock("000003e8 00000040 000f4240 3b9aca00"))
    for rate in range(1000, 1350):
        enc.htb_class(HtbClass("eth0", 0x10001, 0x10002, rate, rate * 2, rate // 10 + 1600, 1514), 1, 1)
    assert len(enc._htb) == 1


@settings(max_examples=300, deadline=None)
@given(rate=st.integers(8, 2**40), ceil=st.integers(8, 2**40), burst=st.integers(1, 2**20),
       quantum=st.integers(1, 200_000), mpu=st.integers(0, 1600), overhead=st.integers(0, 64),
       atm=st.booleans(), tables=st.booleans())
def test_a_class_packer_packs_what_class_options_packs(rate, ceil, burst, quantum, mpu, overhead, atm, tables):
    """The driver's path (the rates packed into options made once per class) and the plain
    one give the same bytes, 64-bit rates and rate tables included."""
    clk = Clock("000003e8 00000040 000f4240 3b9aca00")
    packer = htb.class_packer(quantum, mpu, overhead, atm, clk, tables)
    assert packer(rate, ceil, burst) == htb.class_options(rate, ceil, burst, quantum, mpu, overhead, atm, clk, tables)


# ------------------------------------------------------------------ namespaces


@pytest.mark.netns
def test_a_missing_namespace_is_not_found_and_not_created():
    name = f"rlnl-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(NotFoundError, match=rf"^--netns: '{name}' does not exist \(see: ip netns list\)$"):
        Executor(name)
    assert not os.path.exists(f"/run/netns/{name}")
    assert name not in sh("ip", "netns", "list").stdout
    with pytest.raises(NotFoundError):
        Executor("../etc")


@pytest.mark.netns
def test_shape_plan_builds_the_same_kernel_state_as_tc_batch(router_pair):
    router, _ = router_pair
    plan = plan_for(down=LinkParams(2_000_000), up=LinkParams(1_000_000), bandwidth_bps=50_000_000)
    devs = plan.devices()
    assert devs == ("r0", "rl-r0")
    with Executor(router) as ex:
        pristine = ex.snapshot(devs)
        assert pristine["rl-r0"] is None
        tc_apply(router, plan)
        by_tc = ex.snapshot(devs)
        ex.remove(plan.teardown())
        assert ex.snapshot(devs) == pristine
        ex.apply(plan.ops)
        ours = ex.snapshot(devs)
        assert ours == by_tc
        # the pool, a group with its root class and 16 links: 8 ports x (IPv4 and IPv6 host)
        assert len(ours["r0"]["filters"]) > 20 and len(ours["rl-r0"]["classes"]) == 19
        for dev in devs:
            assert set(ex.read_back(dev)) == tc_ops(plan, dev)
        ex.remove(plan.teardown())
        assert ex.snapshot(devs) == pristine
        ex.remove(plan.teardown())  # again: nothing there, nothing raised
        ex.remove([DelLink("rl-nothere"), DelQdisc("nothere", 0xFFFFFFFF)])
        assert ex.snapshot(devs) == pristine


@pytest.mark.netns
def test_police_mode_tree_matches_tc_batch(router_pair):
    """Police mode, both directions: egress tree on the root qdisc, the source
    tree on the ingress qdisc (no IFB).  The host lacks act_police, so the
    policer is left out here (the kernel test applies it)."""
    router, _ = router_pair
    plan = without_police(plan_for(mode="police", ports=(2000, 2047)))
    with Executor(router) as ex:
        tc_apply(router, plan)
        by_tc = ex.snapshot(["r0"])
        ex.remove(plan.teardown())
        ex.apply(plan.ops)
        assert ex.snapshot(["r0"]) == by_tc
        assert set(ex.read_back("r0")) == tc_ops(plan, "r0")
        assert ex.root_qdisc("r0") == ("htb", 0x520000) and ex.has_ingress("r0")
        ex.remove(plan.teardown())
        assert ex.root_qdisc("r0") is None and not ex.has_ingress("r0")


@pytest.mark.netns
def test_progress_and_echo(router_pair):
    router, _ = router_pair
    plan = plan_for(ports=(1024, 1087))
    calls, lines = [], []
    with Executor(router) as ex:
        ex.apply(plan.ops, progress=lambda done, total: calls.append((done, total)), echo=lines.append)
        ex.remove(plan.teardown())
    total = len(plan.ops)
    assert calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and all(t == total for _, t in calls)
    assert 2 <= len(calls) <= 110  # at batch ends and lone steps, at most ~1% apart
    want = []
    for op in plan.ops:
        want += op.lines()
    assert lines == want


@pytest.mark.netns
def test_the_first_refused_step_is_reported_with_its_index(router_pair):
    router, _ = router_pair
    plan = plan_for(direction="dest")
    ops = list(plan.ops)
    dup = next(i for i, op in enumerate(ops) if isinstance(op, HtbClass) and op.classid == 0xFFFE0103)
    bad_at = len(ops) - 3  # inside a batch, with good operations after it
    ops.insert(bad_at, ops[dup])
    with Executor(router) as ex:
        pristine = ex.snapshot(["r0"])
        with pytest.raises(StepFailed) as info:
            ex.apply(ops)
        err = info.value
        assert err.index == bad_at and err.op == ops[dup] and err.errno == errno.EEXIST
        assert str(err).startswith(f"step {bad_at + 1} of {len(ops)} (class add dev r0 parent fffe:1 classid fffe:103 ")
        assert "failed: File exists" in str(err)
        ex.remove(plan.teardown())
        assert ex.snapshot(["r0"]) == pristine

        # a filter linking to a table that does not exist: the kernel says why
        bad = U32Filter("r0", 0x520000, 1, "ip", 0, 0, 9, (Key(0, 0, 0),), link=0x7FF)
        with pytest.raises(StepFailed) as info:
            ex.apply(plan.ops + (bad,))
        assert info.value.index == len(plan.ops) and info.value.errno == errno.EINVAL
        assert info.value.kernel_message  # the extended ack, e.g. "Link hash table not found"
        assert info.value.kernel_message in str(info.value)
        ex.remove(plan.teardown())

        # a device that does not exist
        with pytest.raises(StepFailed, match=r"step 1 of 1 .* No such device"):
            ex.apply([HtbClass("nothere", 0x520000, 0x520001, 8000, 8000, 1514, 1514)])
        with pytest.raises(StepFailed, match="File exists"):
            ex.apply([AddIfb("r0")])
        assert ex.snapshot(["r0"]) == pristine


# ------------------------------------------------------------------ real traffic


SEND = r"""
import socket, sys
family, dst, dport, sport, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET, socket.SOCK_DGRAM)
if sport:
    s.bind(("", sport))
for _ in range(n):
    s.sendto(b"x" * 100, (dst, dport))
"""

TCP_SERVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    d = c.recv(65536)
    if not d: break
    n += len(d)
c.sendall(str(n).encode()); c.close()
"""

TCP_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_INET); s.bind(("", int(sys.argv[3]))); s.settimeout(20)
s.connect((sys.argv[1], int(sys.argv[2]))); s.sendall(b"y" * 3000); s.shutdown(socket.SHUT_WR)
print(s.recv(100).decode())
"""


def in_ns(ns, code, *args, **kw):
    return sh("ip", "netns", "exec", ns, sys.executable, "-c", code, *map(str, args), **kw)


def resolve_neighbours(router, client):
    """Packets wait for ARP/ND before they reach a qdisc: resolve first, with
    traffic to a port outside the plan, so counts are final when read."""
    for ns, a4, a6 in ((router, HOST4, HOST6), (client, ROUTER4, ROUTER6)):
        in_ns(ns, SEND, 4, a4, 9, 0, 1)
        in_ns(ns, SEND, 6, a6, 9, 0, 1)
    def table():
        return sh("ip", "-n", router, "neigh", "show").stdout + sh("ip", "-n", client, "neigh", "show").stdout

    def resolved():
        have = [line.split()[0] for line in table().splitlines() if "lladdr" in line]
        return all(a in have for a in (HOST4, HOST6, ROUTER4, ROUTER6))
    wait_until(resolved, 30, "neighbours resolved", detail=lambda: " | ".join(table().splitlines()))


@pytest.mark.netns
def test_stats_count_real_traffic_per_flow(router_pair):
    router, client = router_pair
    plan = plan_for(down=LinkParams(8_000_000), up=LinkParams(8_000_000))
    keys = ("direction", "host", "port", "dev", "bytes", "packets", "drops", "overlimits",
            "backlog_bytes", "backlog_pkts")
    with Executor(router) as ex:
        ex.apply(plan.ops)
        rows = ex.stats(plan)
        assert len(rows) == len(plan.flows) == 32
        assert all(tuple(r) == keys and r["bytes"] == r["packets"] == r["drops"] == 0 for r in rows)

        resolve_neighbours(router, client)

        in_ns(router, SEND, 4, HOST4, 1025, 0, 7)  # to the client's port 1025: "dest"
        in_ns(router, SEND, 6, HOST6, 1030, 0, 5)
        in_ns(client, SEND, 4, ROUTER4, 9, 1027, 4)  # from the client's port 1027: "source"
        in_ns(client, SEND, 6, ROUTER6, 9, 1024, 3)
        server = subprocess.Popen(["ip", "netns", "exec", router, sys.executable, "-c", TCP_SERVER,
                                   ROUTER4, "5001"], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "ready"
            assert in_ns(client, TCP_CLIENT, ROUTER4, 5001, 1029).stdout.strip() == "3000"
        finally:
            server.kill()
            server.wait()

        def counts():
            return {(r["direction"], str(r["host"]), r["port"]): r for r in ex.stats(plan)}

        # packets waiting for ARP/ND reach the qdisc a little later: wait for the UDP counts
        want = {("dest", HOST4, 1025): 7, ("dest", HOST6, 1030): 5, ("source", HOST4, 1027): 4,
                ("source", HOST6, 1024): 3}
        wait_until(lambda: all(counts()[k]["packets"] >= n for k, n in want.items()), 30, "the UDP packets counted",
                   detail=lambda: {k: counts()[k]["packets"] for k in want})
        got = counts()
        assert got["dest", HOST4, 1025]["packets"] == 7 and got["dest", HOST4, 1025]["dev"] == "r0"
        assert got["dest", HOST4, 1025]["bytes"] == 7 * (100 + 8 + 20 + 14)
        assert got["dest", HOST6, 1030]["packets"] == 5
        assert got["dest", HOST6, 1030]["bytes"] == 5 * (100 + 8 + 40 + 14)
        assert got["source", HOST4, 1027]["packets"] == 4 and got["source", HOST4, 1027]["dev"] == "rl-r0"
        assert got["source", HOST6, 1024]["packets"] == 3
        tcp_up, tcp_down = got["source", HOST4, 1029], got["dest", HOST4, 1029]
        assert tcp_up["packets"] >= 4 and tcp_up["bytes"] > 3000  # SYN, data, FIN, ACKs
        assert tcp_down["packets"] >= 3  # SYN-ACK, the reply, ACKs
        counted = {k for k, r in got.items() if r["packets"]}
        assert counted == {("dest", HOST4, 1025), ("dest", HOST6, 1030), ("source", HOST4, 1027),
                           ("source", HOST6, 1024), ("source", HOST4, 1029), ("dest", HOST4, 1029)}
        assert all(r["drops"] == 0 for r in got.values())
        ex.remove(plan.teardown())


@pytest.mark.netns
def test_police_mode_stats_read_one_dump_per_device_and_parent(router_pair, monkeypatch):
    router, client = router_pair
    plan = without_police(plan_for(mode="police", ports=(1024, 1031)))
    with Executor(router) as ex:
        ex.apply(plan.ops)
        dumps = []
        real = ex.chan.dump_chunks
        monkeypatch.setattr(ex.chan, "dump_chunks", lambda msg: dumps.append(msg) or real(msg))
        rows = ex.stats(plan)
        assert len(rows) == 32 and all(r["packets"] == 0 for r in rows)
        assert len(dumps) == 2  # root 52: and ingress ffff: on r0
        ex.remove(plan.teardown())


# ------------------------------------------------------------------ bytes on the wire, against tc's own


def capture_tc(batch: str, netns: str) -> list[bytes]:
    """The netlink messages ``tc -force -batch`` sends for ``batch`` (via strace)."""
    with tempfile.TemporaryDirectory() as d:
        path, trace = os.path.join(d, "batch"), os.path.join(d, "trace")
        with open(path, "w") as f:
            f.write(batch)
        subprocess.run(["strace", "-e", "trace=sendmsg", "-e", "write=all", "-o", trace,
                        "tc", "-n", netns, "-force", "-batch", path], capture_output=True)
        with open(trace) as f:
            text = f.read()
    sends, buf = [], None
    for line in text.splitlines():
        if "sendmsg(" in line:
            if buf:
                sends.append(bytes(buf))
            buf = bytearray()
        m = re.match(r"\s*\| [0-9a-f]{5}  ", line)
        if m and buf is not None:
            buf += bytes.fromhex(line[m.end():m.end() + 49].replace(" ", ""))
    if buf:
        sends.append(bytes(buf))
    msgs = []
    for data in sends:
        off = 0
        while off + 16 <= len(data):
            length = struct.unpack_from("=I", data, off)[0]
            msgs.append(data[off:off + length])
            off += (length + 3) & ~3
    return msgs


NETEMS = (  # (link parameters, queue limit)
    (LinkParams(delay_us=100_000, jitter_us=10_000, delay_corr_pct=25, loss_pct=1, loss_corr_pct=5, duplicate_pct=2,
                corrupt_pct=0.5, reorder_pct=10, reorder_corr_pct=50), 2000),
    (LinkParams(delay_us=1, jitter_us=3, loss_pct=0.123), 1000),
    (LinkParams(corrupt_pct=3, corrupt_corr_pct=1), 77),
    (LinkParams(delay_us=400_000, duplicate_pct=0.5, duplicate_corr_pct=10, loss_pct=1), 1000),
    (LinkParams(jitter_us=5000), 1000),
    (LinkParams(delay_us=20_000, loss_model=parse_loss("gemodel p=1.5% r=30% h=10% k=99.5%")), 1000),
    (LinkParams(loss_model=parse_loss("gemodel p=0.1% r=99.9%")), 1000),
    (LinkParams(slot=parse_slot("min=2ms max=8ms packets=32 bytes=64kb")), 1000),
    (LinkParams(delay_us=10_000, corrupt_pct=1, slot=parse_slot("min=500us")), 1000),
    (LinkParams(delay_us=5000, reorder_pct=5, loss_model=parse_loss("state p13=2% p31=40% p32=5% p23=60% p14=0.5%")),
     1000),
    (LinkParams(slot=parse_slot("distribution=pareto delay=5ms jitter=2ms packets=8")), 1000),
    # the table goes last, after the loss model (tc's order)
    (LinkParams(delay_us=20_000, jitter_us=1000, corrupt_pct=1, loss_model=parse_loss("gemodel p=1% r=30%"),
                slot=parse_slot("distribution=normal delay=0ms jitter=1500us bytes=3000")), 1000),
)


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_every_message_is_byte_for_byte_what_tc_sends(router_pair):
    """Police, mirred, netem, HTB and u32 messages against tc's (the host kernel
    refuses police and netem, but tc has sent them by then)."""
    router, _ = router_pair
    sh("ip", "-n", router, "link", "add", "rl-r0", "type", "ifb")
    plan = plan_for(mode="police", ports=(1024, 1027), down=LinkParams(28800, delay_us=100_000),
                    up=LinkParams(56000, loss_pct=1))
    big = Police(10**12, 10**9, 1514, 64)  # over 2**32 bytes/s: TCA_POLICE_RATE64
    extra = [NetemQdisc("r0", 0x520001, (0x54 + i) << 16, n, limit) for i, (n, limit) in enumerate(NETEMS)]
    extra.append(NetemQdisc("r0", 0x520001, 0x7F << 16, LinkParams(delay_us=1000), 1000, 8 * 2**33))  # NETEM_RATE64
    extra.append(NetemQdisc("r0", 0x520001, 0x7E << 16,  # a slot's table after the rate (tc's order)
                            LinkParams(slot=parse_slot("distribution=paretonormal delay=1s jitter=2s")), 1000, 8_000_000))
    extra.append(U32Filter("r0", 0x520000, 1, "ip", 1, 255, 77, (Key(6, 0xFF, 8), Key(0x10000, 0xFFFF0000, 8)),
                           police=big))
    extra.append(HtbClass("r0", 0x520000, 0x520777, 8 * 2**33, 8 * 2**33, 10**6, 1514, 0))  # HTB_RATE64
    assert_same_messages_as_tc(router, [op for op in plan.ops if not isinstance(op, AddIfb)] + extra)


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_a_slot_table_is_read_as_tc_reads_it(router_pair, tmp_path, monkeypatch):
    """A table file of every shape tc takes (comments, blank lines, signs, hex, octal, numbers
    out of the s16 range and out of strtol's, the rest of a line after a word), sent as tc sends it."""
    router, _ = router_pair
    monkeypatch.setenv("TC_LIB_DIR", str(tmp_path))
    (tmp_path / "experimental.dist").write_text(
        "# a comment\n\n 1 -2 +3\t0x1F 0X10 017 08 70000 -40000\n99999999999999999999999 -99999999999999999999999\n"
        "  # not a comment: nothing on this line\n5 6 seven 8\n1-2+3\n0x 0xg\n-32768 32767")
    slot = parse_slot("distribution=experimental delay=3ms jitter=1ms")
    assert_same_messages_as_tc(router, [NetemQdisc("r0", 0x520001, 0x54 << 16, LinkParams(slot=slot), 1000)])


ENCODER = {"HtbQdisc": "htb_qdisc", "IngressQdisc": "ingress_qdisc", "HtbClass": "htb_class",
           "NetemQdisc": "netem_qdisc", "FifoQdisc": "fifo_qdisc", "TbfQdisc": "tbf_qdisc", "U32Table": "u32_table",
           "U32Filter": "u32_filter", "Change": "change", "MqQdisc": "mq_qdisc", "ClsactQdisc": "clsact_qdisc",
           "DelQdisc": "del_qdisc", "AqmQdisc": "aqm_qdisc"}


AQMS = ("fq_codel", "fq_codel target=2ms interval=40ms ecn=off flows=64", "codel", "codel target=1ms ecn=on",
        "pie", "pie target=10ms ecn=on", "cake", "cake rtt=20ms")


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_managed_queue_messages_are_byte_for_byte_what_tc_sends(router_pair):
    """fq_codel, codel, pie and cake with every parameter (``Aqm.full``), added and changed in
    place (bar fq_codel's change: tc sends its flows, which the kernel refuses to change),
    as tc sends them (the host kernel has none of them; tc has sent them by then)."""
    router, _ = router_pair
    ops = [AqmQdisc("r0", 0x520001, (0x60 + i) << 16, parse_aqm(text).full(), 100 + i) for i, text in enumerate(AQMS)]
    ops += [Change(op) for op in ops if op.kind != "fq_codel"]
    assert_same_messages_as_tc(router, ops)


def assert_same_messages_as_tc(router, ops):
    """Each op's netlink message is the one ``tc -batch`` sends for its line (bar the sequence number)."""
    theirs = capture_tc(tc_batch(ops), router)
    assert len(theirs) == len(ops)
    with Executor(router) as ex:
        enc = Encoder(ex._ifindex, ex.clock, htb_tables=True)  # tc sends HTB's rate tables
        for op, msg in zip(ops, theirs):
            mine = getattr(enc, ENCODER[type(op).__name__])(op, 0, 0x5)
            if type(op) is NetemQdisc and op.params.duplicate_corr_pct and not (
                    op.params.loss_corr_pct or op.params.delay_corr_pct):
                continue  # tc 6.1 drops a lone duplicate correlation; we send it (see kinds/netem.py)
            assert msg[:8] + bytes(4) + msg[12:] == mine, op.tc()


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
@pytest.mark.parametrize("layer", [linklayer.PPP_VJ, linklayer.ATM], ids=lambda layer: layer.name)
def test_link_layer_messages_are_byte_for_byte_what_tc_sends(router_pair, layer):
    """The fidelity kinds: the root qdisc's size table (plain and ATM cells), netem's
    rate, byte and packet fifos, and policers with an overhead and a shared index."""
    router, _ = router_pair
    sh("ip", "-n", router, "link", "add", "rl-r0", "type", "ifb")
    shape = plan_for(mode="shape", ports=(1024, 1025), link=layer,
                     down=LinkParams(28800, delay_us=50_000, queue=Queue(16384, "bytes")),
                     up=LinkParams(28800, queue=Queue(10, "pkts")))
    police = plan_for(mode="police", ports=(1024, 1025), link=layer, per="host",
                      down=LinkParams(28800, delay_us=50_000), up=LinkParams(28800))
    kinds = {type(op).__name__ for op in shape.ops}
    assert {"FifoQdisc", "NetemQdisc"} <= kinds
    assert any(isinstance(op, HtbQdisc) and op.stab for op in shape.ops)
    assert any(isinstance(op, NetemQdisc) and op.rate_bps for op in shape.ops)
    policers = [op.police for op in police.ops if isinstance(op, U32Filter) and op.police]
    assert policers and all(p.index for p in policers)
    ops = [op for op in shape.ops if not isinstance(op, AddIfb)]
    ops += [FifoQdisc("r0", 0x520001, 0x990000, "bfifo", 3250), FifoQdisc("r0", 0x520001, 0x980000, "pfifo", 10)]
    ops += [op for op in police.ops if isinstance(op, U32Filter) and op.police]
    ops.append(U32Filter("r0", 0x520000, 1, "ip", 1, 255, 78, (Key(6, 0xFF, 8),),
                         police=Police(28800, 6056, 1514, 64, overhead_bytes=14, index=0x40000007)))  # ingress
    assert_same_messages_as_tc(router, ops)


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_changes_in_place_are_byte_for_byte_what_tc_change_sends(router_pair):
    """``class change``, ``qdisc change`` (netem and fifo leaves) and ``filter change`` (a
    policer's new numbers) as tc sends them: the add message without NLM_F_CREATE|EXCL."""
    router, _ = router_pair
    sh("ip", "-n", router, "link", "add", "rl-r0", "type", "ifb")
    shape = plan_for(mode="shape", ports=(1024, 1025), down=LinkParams(56000, delay_us=50_000),
                     up=LinkParams(56000, queue=Queue(10, "pkts")))
    police = plan_for(mode="police", ports=(1024, 1025), per="host", down=LinkParams(56000), up=LinkParams(56000))
    ops = [Change(op) for op in shape.ops if type(op) in (HtbClass, NetemQdisc, FifoQdisc)]
    ops += [Change(op) for op in police.ops if isinstance(op, U32Filter) and op.police]
    assert {type(c.op).__name__ for c in ops} == {"HtbClass", "NetemQdisc", "FifoQdisc", "U32Filter"}
    assert all(" change " in c.tc() for c in ops)
    assert_same_messages_as_tc(router, ops)


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_several_queues_messages_are_byte_for_byte_what_tc_sends(router_pair):
    """The tc parts of a plan on two tx queues -- the mq root, each tree's HTB qdisc under it
    with its size table, clsact and the IFB redirect on its ingress hook -- and the deletes
    of clsact and ingress, as tc sends them (r0 has one queue: the kernel refuses the trees,
    tc has sent them by then)."""
    router, _ = router_pair
    sh("ip", "-n", router, "link", "add", "rl-r0", "type", "ifb")
    plan = plan_for(mode="shape", ports=(1024, 1025), link=linklayer.PPP_VJ, queues=2)
    ops = [op for op in plan.ops if getattr(op, "dev", None) == "r0" and (
        type(op).__name__ in ("MqQdisc", "ClsactQdisc") or type(op) is HtbQdisc and op.parent >> 16 == 0x52
        or type(op) is U32Filter and op.redirect)]
    assert [type(op).__name__ for op in ops] == ["MqQdisc", "HtbQdisc", "HtbQdisc", "ClsactQdisc", "U32Filter"]
    ops += [DelQdisc("r0", 0xFFFFFFF1, "clsact"), DelQdisc("r0", 0xFFFFFFF1)]
    assert_same_messages_as_tc(router, ops)


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to read tc's messages")
def test_a_traced_links_gate_is_byte_for_byte_what_tc_sends(router_pair):
    """The token bucket a traced link's leaf is (``gate``): added open, shut and opened
    again in place, and one over 2**32 bytes/s (TCA_TBF_RATE64), as tc sends them."""
    router, _ = router_pair
    open_, shut = (TbfQdisc("r0", 0x520001, 0x990000, rate, 1514, 15140) for rate in (10**10, 64))
    ops = [open_, Change(shut), Change(open_), TbfQdisc("r0", 0x520001, 0x980000, 8 * 2**33, 100_000, 200_000)]
    assert [op.tc().split(" tbf ")[1] for op in ops[:2]] == ["rate 10gbit burst 1514b limit 15140",
                                                           "rate 64bit burst 1514b limit 15140"]
    assert_same_messages_as_tc(router, [HtbQdisc("r0", 0x520000), HtbClass("r0", 0x520000, 0x520001, 10**6, 10**6,
                                                                             1514, 1514)] + ops)
