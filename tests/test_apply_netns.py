"""The executor and service against the host kernel, in throwaway namespaces.

Each test gets its own namespace holding a veth pair; nothing outside it is touched.
"""

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.common import wait_until
from ratelimit import service
from ratelimit.errors import ApplyError, ConflictError, KernelMissing, NotFoundError, PermissionDenied
from ratelimit.kernel.executor import Executor
from ratelimit.plan import placement
from ratelimit.plan.filters import U32Filter, U32Table
from ratelimit.plan.ops import Plan
from ratelimit.plan.shaping import HtbClass
from ratelimit.service import actions, readout

import tcdump

pytestmark = pytest.mark.netns


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


@pytest.fixture
def router(tmp_path, monkeypatch):
    """A router namespace with rlt0 (client-facing) and rlt1, and a client namespace
    ``<router>c`` holding rlt0's peer ``rlc0``; a private state directory."""
    name = f"rlt-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    sh("ip", "netns", "add", name)
    sh("ip", "netns", "add", name + "c")
    try:
        sh("ip", "-n", name, "link", "add", "rlt0", "type", "veth", "peer", "name", "rlc0", "netns", name + "c")
        sh("ip", "-n", name, "link", "add", "rlt1", "type", "veth", "peer", "name", "rlt2")
        for dev in ("rlt0", "rlt1", "rlt2"):
            sh("ip", "-n", name, "link", "set", dev, "up")
        sh("ip", "-n", name + "c", "link", "set", "rlc0", "up")
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)
        sh("ip", "netns", "del", name + "c", check=False)


def tc_dump(ns, *devs):
    """How many devices the namespace has, then ``tcdump.tc_dump`` (the 'before/after' picture)."""
    return [sh("ip", "-n", ns, "-o", "link", "show").stdout.split("\n").__len__()] + tcdump.tc_dump(ns, *devs)


def request(ns, **kw):
    args = dict(hosts="198.18.1.2,2001:db8::2", ports="10000-10039", mode="shape", direction="both", rate="200kbit")
    args.update(kw)
    return service.make_request("rlt0", netns=ns, **args)


def test_applied_filters_read_back_as_the_plan(router):
    plan = service.apply(request(router))
    with Executor(router) as ex:
        for dev in plan.devices():
            want = {op for op in plan.ops if isinstance(op, (U32Table, U32Filter)) and op.dev == dev}
            assert set(ex.read_back(dev)) == want
    assert readout.status("rlt0", router)["flows"] == 2 * 40 * 2


def test_failure_mid_apply_leaves_the_dumps_identical(router, monkeypatch):
    service.apply(request(router, rate="100kbit", ports="10000-10009"))
    before = tc_dump(router, "rlt0", "rl-rlt0")
    real_compile = actions.compile_plan

    def compile_with_a_duplicate_class(req):
        plan = real_compile(req)
        if req.only.down.rate_bps != 300_000:  # only the new request is broken
            return plan
        ops = list(plan.ops)
        dup = next(i for i, op in enumerate(ops) if isinstance(op, HtbClass) and op.classid >> 16 != 0x52)
        ops.insert(len(ops) * 2 // 3, ops[dup])  # the kernel refuses a class that exists
        return Plan(plan.request, tuple(ops), plan.flows)

    monkeypatch.setattr(actions, "compile_plan", compile_with_a_duplicate_class)
    monkeypatch.setattr(placement, "compile_plan", compile_with_a_duplicate_class)  # a plan moved over the old
    with pytest.raises(ApplyError) as info:
        service.apply(request(router, rate="300kbit"))
    assert "failed" in str(info.value) and "back as it was" in str(info.value)
    assert tc_dump(router, "rlt0", "rl-rlt0") == before


def test_failure_on_a_clean_interface_leaves_it_clean(router, monkeypatch):
    before = tc_dump(router, "rlt0", "rl-rlt0")
    real_compile = actions.compile_plan

    def compile_with_a_bad_link(req):
        plan = real_compile(req)
        bad = U32Filter("rlt0", 0x520000, 1, "ip", 0, 0, 9, plan.ops[-1].keys, link=0x7FF)  # no table 7ff:
        return Plan(plan.request, plan.ops + (bad,), plan.flows)

    monkeypatch.setattr(actions, "compile_plan", compile_with_a_bad_link)
    with pytest.raises(ApplyError):
        service.apply(request(router, direction="dest"))
    assert tc_dump(router, "rlt0", "rl-rlt0") == before


def test_a_foreign_root_qdisc_is_left_alone_unless_forced(router):
    sh("tc", "-n", router, "qdisc", "add", "dev", "rlt0", "root", "handle", "9:", "tbf",
       "rate", "1mbit", "burst", "10kb", "latency", "50ms")
    before = tc_dump(router, "rlt0")
    with pytest.raises(ConflictError, match="rlt0 has a root qdisc ratelimit did not install"):
        service.apply(request(router, direction="dest"))
    with pytest.raises(ConflictError):
        service.clean("rlt0", router)
    assert tc_dump(router, "rlt0") == before
    service.apply(request(router, direction="dest"), force=True)
    assert "qdisc htb 52: root" in sh("tc", "-n", router, "qdisc", "show", "dev", "rlt0").stdout


def test_clean_removes_only_what_ratelimit_installed(router):
    sh("tc", "-n", router, "qdisc", "add", "dev", "rlt1", "root", "handle", "9:", "tbf",
       "rate", "1mbit", "burst", "10kb", "latency", "50ms")
    other = tc_dump(router, "rlt1")
    pristine = tc_dump(router, "rlt0", "rl-rlt0")
    service.apply(request(router))
    assert sh("ip", "-n", router, "link", "show", "rl-rlt0", check=False).returncode == 0
    assert service.clean("rlt0", router) is True
    assert tc_dump(router, "rlt0", "rl-rlt0") == pristine
    assert tc_dump(router, "rlt1") == other
    assert service.clean("rlt0", router) is False


def test_reapply_replaces_the_previous_plan(router):
    service.apply(request(router, ports="10000-10099"))
    plan = service.apply(request(router, ports="20000-20004", direction="dest"))
    with Executor(router) as ex:
        want = {op for op in plan.ops if isinstance(op, (U32Table, U32Filter))}
        assert set(ex.read_back("rlt0")) == want
        assert ex.link_index("rl-rlt0") is None
        assert not ex.has_ingress("rlt0")


def test_apply_names_the_devices_that_merge_received_frames(router):
    """GRO turned on for a veth (it then receives through NAPI, as a NIC does) makes an
    apply say so, with the ethtool command that turns it off; the links are applied
    all the same.  A bridge reports rx-gro too but merges nothing itself: not named."""
    def apply(rate):
        heard = []
        service.apply(request(router, rate=rate), notice=heard.append)
        return heard

    def gro(dev):
        out = sh("ip", "netns", "exec", router, "ethtool", "-k", dev).stdout
        return "generic-receive-offload: on" in out.splitlines()

    sh("ip", "-n", router, "link", "add", "rltbr", "type", "bridge")
    sh("ip", "-n", router, "link", "set", "rltbr", "up")
    assert gro("rltbr") and not gro("rlt1")
    assert apply("200kbit") == []
    sh("ip", "netns", "exec", router, "ethtool", "-K", "rlt1", "gro", "on")
    assert gro("rlt1")
    assert apply("300kbit") == [
        "warning: received frames are merged into bigger packets on rlt1 (rx-gro); the links meter "
        "each as one packet and pass it in a burst; for one packet per frame: ethtool -K rlt1 gro off"]
    assert readout.applied("rlt0", router).only.down.rate_bps == 300_000
    sh("ip", "netns", "exec", router, "ethtool", "-K", "rlt1", "gro", "off")
    assert apply("400kbit") == []


def test_concurrent_applies_serialize(router):
    rates = ["100kbit", "200kbit", "300kbit", "400kbit"]

    def run(rate):
        return subprocess.run([sys.executable, "-m", "ratelimit", "--if", "rlt0", "--netns", router,
                               "-h", "198.18.1.2", "-p", "10000-10199", "--mode", "shape", "-r", rate],
                              capture_output=True, text=True, env=os.environ.copy())

    with ThreadPoolExecutor(len(rates)) as pool:
        results = list(pool.map(run, rates))
    assert [r.returncode for r in results] == [0] * len(rates), [r.stderr for r in results]
    classes = sh("tc", "-n", router, "class", "show", "dev", "rlt0").stdout
    seen = {line.split(" rate ")[1].split()[0] for line in classes.splitlines()
            if not line.startswith(("class htb 52:", "class htb fffe:1 "))}  # links only
    assert len(seen) == 1, seen  # one whole plan, never a mix
    # the pool class, a group class and its qdisc's root class, and one per (host, port); source ones live on the IFB
    assert len(classes.splitlines()) == 1 + 2 + 200


BAD_INPUTS = [
    (["--if", "nosuch0"], 3, "--interface: 'nosuch0' does not exist in namespace"),
    (["-h", "no-such-host.invalid"], 3, "--hosts: 'no-such-host.invalid' is not an address"),
    (["-p", "0"], 2, "--ports: 0 is not a port (1-65535)"),
    (["-p", "70000"], 2, "--ports: 70000 is not a port (1-65535)"),
    (["-p", "2000-1000"], 2, "--ports: 2000-1000 is a reversed range"),
    (["-p", ""], 2, "--ports: none given"),
    (["-r", "28.8kbits"], 2, "--rate: '28.8kbits' is not a rate"),
    (["--delay", "40"], 2, "--delay: '40' is not a time with a unit"),
    (["--loss", "120%"], 2, "--loss: '120%' is not a percentage"),
    (["--profile", "modem-1200"], 2, "--profile: 'modem-1200' is not a profile"),
    (["--profile", "tests/cases/profiles/bad-field.toml"], 2, "[down]: 'dealy' is not a field"),
    (["--burst", "1e309"], 2, "--burst: '1e309' is out of range"),
    (["--rate", "nan"], 2, "--rate: 'nan' is not a rate"),
    (["--mpu", "٣"], 2, "--mpu: '٣' is not a whole number"),
    (["--queue", "9" * 400], 2, "(400 characters) is out of range (1-1000000 packets)"),
]


@pytest.mark.parametrize("extra,code,message", BAD_INPUTS, ids=[" ".join(b[0])[:40] or "empty" for b in BAD_INPUTS])
def test_bad_input_leaves_the_router_unchanged(router, extra, code, message):
    service.apply(request(router, ports="10000-10009"))
    before = tc_dump(router, "rlt0", "rl-rlt0")
    argv = ["--if", "rlt0", "--netns", router, "-h", "198.18.1.2", "-p", "10000-10009", "--mode", "shape"] + extra
    result = subprocess.run([sys.executable, "-m", "ratelimit", *argv], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith(f"ratelimit: {message}") or message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert tc_dump(router, "rlt0", "rl-rlt0") == before


def test_unknown_namespace_is_not_created():
    name = f"rlt-missing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(NotFoundError, match=f"--netns: '{name}' does not exist"):
        service.apply(service.make_request("eth0", netns=name, hosts="198.18.1.2", ports="80"))
    assert name not in sh("ip", "netns", "list").stdout


def test_a_kernel_without_netem_is_named_before_anything_changes(router):
    from ratelimit.kernel.probe import probe
    if probe(["netem"]).get("netem"):
        pytest.skip("this kernel has netem; the VM-less message cannot be provoked here")  # noqa
    before = tc_dump(router, "rlt0", "rl-rlt0")
    with pytest.raises(KernelMissing, match="sch_netem"):
        service.apply(request(router, delay="50ms"))
    assert tc_dump(router, "rlt0", "rl-rlt0") == before


def test_not_root_is_refused_before_anything_changes(router):
    before = tc_dump(router, "rlt0")
    req = request(router, direction="dest")
    os.seteuid(65534)
    try:
        with pytest.raises(PermissionDenied, match="needs root"):
            service.apply(req)
    finally:
        os.seteuid(0)
    assert tc_dump(router, "rlt0") == before


def test_statistics_count_real_packets(router):
    """UDP sent out of rlt0 to a selected (host, port) is counted on its own link only."""
    sh("ip", "-n", router, "addr", "add", "198.18.1.1/24", "dev", "rlt0")
    sh("ip", "-n", router + "c", "addr", "add", "198.18.1.2/24", "dev", "rlc0")
    service.apply(request(router, hosts="198.18.1.2", ports="10000-10003", direction="dest"))
    sender = ("import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('198.18.1.1', 0));"
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b'rlt0');"
              "[s.sendto(b'x' * 100, ('198.18.1.2', 10002)) for _ in range(20)]")
    sh("ip", "netns", "exec", router, sys.executable, "-c", sender)
    def drained():  # the link queues them: 20 x 142 bytes take 0.11 s at 200 kbit/s
        links = {(row["host"], row["port"]): row for row in readout.statistics("rlt0", router)["links"]}
        return links if links["198.18.1.2", 10002]["backlog_pkts"] == 0 else None
    links = wait_until(drained, 30, "the link's queue to drain")
    assert links["198.18.1.2", 10002]["packets"] == 20
    assert links["198.18.1.2", 10002]["bytes"] >= 20 * 128
    assert all(links["198.18.1.2", p]["packets"] == 0 for p in (10000, 10001, 10003))


def test_list_and_stats_as_json_are_the_statistics_on_one_line(router):
    service.apply(request(router, ports="10000-10003"))
    expected = readout.statistics("rlt0", router)
    for action in ("--stats", "--list"):
        result = subprocess.run([sys.executable, "-m", "ratelimit", "--if", "rlt0", "--netns", router, action, "--json"],
                                capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
        assert result.returncode == 0 and result.stdout.count("\n") == 1, result.stderr  # compact: one line
        got = json.loads(result.stdout)
        assert got["applied"] == json.loads(json.dumps(expected["applied"]))
        assert [(r["direction"], r["host"], r["port"]) for r in got["links"]] == \
            [(r["direction"], r["host"], r["port"]) for r in expected["links"]]
        assert ("bytes" in got["links"][0]) == (action == "--stats")  # --list leaves the counters out
