"""Changes in place against the host kernel, in throwaway namespaces (rlhd-*): an apply
over an installed plan of the same selectors changes its classes and queues where they
stand -- the queue keeps its packets, the counters keep counting, the kernel ends up
exactly as a fresh apply of the new request leaves it -- and a change the kernel refuses
is changed back."""

import dataclasses
import subprocess
import sys

import pytest

from ratelimit import service
from ratelimit.errors import ApplyError
from ratelimit.plan import diff
from ratelimit.plan.ops import Change
from ratelimit.plan.shaping import HtbClass
from ratelimit.profiles import scenario
from ratelimit.service import readout
from ratelimit.state import records
from tcdump import tc_dump

pytestmark = pytest.mark.netns

DEVS = ("rlh0", "rl-rlh0")
PORT = 5000


def request(ns, **kw):
    args = dict(hosts="198.18.1.2", ports=f"{PORT}-{PORT + 63}", mode="shape", direction="dest", rate="100kbit",
                queue="30kb")
    args.update(kw)
    return service.make_request("rlh0", netns=ns, **args)


def sh(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True)


def link_class(ns, port: int) -> dict:
    """The counters of the class of (198.18.1.2, port), as statistics reads them."""
    rows = readout.statistics("rlh0", ns)["links"]
    return next(r for r in rows if r["port"] == port)


def blast(ns, port: int, packets: int, size: int = 1000) -> None:
    """``packets`` UDP datagrams to 198.18.1.2:port out of rlh0 at once (a static neighbour
    makes them leave through the shaped device; rlh1 drops them on arrival)."""
    code = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({packets}): s.sendto(b'x' * {size}, ('198.18.1.2', {port}))")
    sh("ip", "netns", "exec", ns, sys.executable, "-c", code)


@pytest.fixture
def router(rlhd):
    ns = rlhd()
    mac = sh("ip", "-n", ns, "-j", "link", "show", "rlh1").stdout.split('"address":"')[1].split('"')[0]
    sh("ip", "-n", ns, "addr", "add", "198.18.1.1/24", "dev", "rlh0")
    sh("ip", "-n", ns, "neigh", "replace", "198.18.1.2", "lladdr", mac, "dev", "rlh0", "nud", "permanent")
    return ns


def test_a_new_rate_and_queue_change_the_links_in_place(router):
    ns = router
    service.apply(request(ns))
    blast(ns, PORT, 40)  # 40 kB into a 30 kB queue draining at 100 kbit/s: it stays full for seconds
    before = link_class(ns, PORT)
    assert before["backlog_bytes"] > 20_000 and before["drops"] > 0

    plan = service.apply(request(ns, rate="200kbit", queue="40kb"))

    assert plan.changed is not None and all(type(op) is Change for op in plan.changed)
    # one group class, and each link's class and queue: nothing else is sent
    assert len(plan.changed) == 1 + 2 * 64
    after = link_class(ns, PORT)
    assert after["backlog_bytes"] > 0  # the queued packets are still there: nothing was flushed
    assert after["packets"] >= before["packets"] and after["drops"] >= before["drops"]  # the same class
    # the kernel holds exactly what a fresh apply of the new request makes
    changed = tc_dump(ns, *DEVS)
    service.clean("rlh0", ns)
    service.apply(request(ns, rate="200kbit", queue="40kb"))
    assert tc_dump(ns, *DEVS) == changed
    assert records.load(ns, "rlh0").request == request(ns, rate="200kbit", queue="40kb")


def test_other_ports_switch_over_and_another_link_layer_rebuilds(router):
    ns = router
    service.apply(request(ns))
    plan = service.apply(request(ns, ports="6000-6009"))
    assert plan.how == "make-before-break" and plan.changed
    assert [r["port"] for r in readout.statistics("rlh0", ns)["links"]] == list(range(6000, 6010))
    plan = service.apply(request(ns, ports="6000-6009", link="atm"))
    assert plan.how == "built" and plan.changed is None
    assert [r["port"] for r in readout.statistics("rlh0", ns)["links"]] == list(range(6000, 6010))


def test_a_refused_change_is_changed_back(router, monkeypatch):
    ns = router
    service.apply(request(ns))
    before = tc_dump(ns, *DEVS)
    record = records.load(ns, "rlh0")
    real = diff.in_place

    def in_place(old, new):  # the new numbers, then a class the kernel does not have
        changes = real(old, new)
        if changes and new.request.only.down.rate_bps == 200_000:
            last = changes[-1].op if type(changes[-1].op) is HtbClass else changes[-2].op
            changes += (Change(HtbClass(last.dev, last.parent, last.classid + 0x1000, last.rate_bps,
                                        last.ceil_bps, last.burst_bytes, last.quantum_bytes, last.mpu_bytes)),)
        return changes
    monkeypatch.setattr(diff, "in_place", in_place)
    with pytest.raises(ApplyError, match="class change .* failed: .*; rlh0 is back as it was"):
        service.apply(request(ns, rate="200kbit"))
    assert tc_dump(ns, *DEVS) == before
    assert records.load(ns, "rlh0") == record and not records.marker_path(ns, "rlh0").exists()


def test_dry_run_shows_the_changes(router):
    ns = router
    service.apply(request(ns))
    cli = [sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", "-h", "198.18.1.2",
           "-p", f"{PORT}-{PORT + 63}", "--mode", "shape", "-d", "dest", "--queue", "40kb"]
    out = subprocess.run(cli + ["-r", "200kbit", "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert "# changes in place of the installed plan (129 operations)" in out
    assert out.count("class change dev rlh0") == 65 and out.count("qdisc change dev rlh0") == 64
    assert " add " not in out and " del " not in out
    out = subprocess.run(cli + ["-r", "200kbit", "-p", "6000", "--dry-run"], capture_output=True, text=True,
                         check=True).stdout
    assert "# the new plan built beside the installed one, then the old removed (make-before-break: " in out
    assert "qdisc del dev rlh0 root" not in out and "class del dev rlh0 classid 52:10" in out
    # the script does what the apply would: run it, and the kernel holds the new plan
    sh("sh", "-c", out)
    switched = tc_dump(ns, *DEVS)
    service.clean("rlh0", ns, force=True)
    req = dataclasses.replace(request(ns, rate="200kbit", ports="6000", queue="40kb"), generation=1)
    service.apply(req)
    assert tc_dump(ns, *DEVS) == switched
    out = subprocess.run(cli + ["-p", "6000", "--link", "atm", "--dry-run"], capture_output=True, text=True,
                         check=True).stdout
    assert "# the installed plan removed, then the new plan" in out and "qdisc del dev rlh0 root" in out


def two_cohorts(ns, other_ports="6000-6009", other_rate="200kbit"):
    """Cohort 'busy' (64 links of 100 kbit/s to 198.18.1.2) and cohort 'other' beside it."""
    text = (f"[cohort.busy]\ndescription = 'the links under load'\nhosts = '198.18.1.2'\nports = '{PORT}-{PORT + 63}'\n"
            "per = 'port'\nrate = '100kbit'\nqueue = '30kb'\n"
            f"[cohort.other]\ndescription = 'the cohort that changes'\nhosts = '198.18.1.3'\nports = '{other_ports}'\n"
            f"per = 'port'\nrate = '{other_rate}'\n")
    return service.make_request("rlh0", netns=ns, scenario=scenario.parse(text), mode="shape", direction="dest")


@pytest.mark.parametrize("change, how", [
    (dict(other_ports="6000-6039"), "make-before-break"),  # the other cohort grows: built beside
    (dict(other_rate="300kbit"), "in place"),
])
def test_changing_one_cohort_leaves_another_cohorts_busy_links_alone(router, change, how):
    ns = router
    service.apply(two_cohorts(ns))
    blast(ns, PORT, 40)  # the busy cohort's link: a full queue for seconds
    before = link_class(ns, PORT)
    assert before["backlog_bytes"] > 20_000 and before["cohort"] == "busy"

    plan = service.apply(two_cohorts(ns, **change))

    assert plan.how == how
    after = link_class(ns, PORT)
    # the same class and queue: its packets still queued, its counters counting on (a rebuilt
    # link would start from an empty queue and zero counters)
    assert after["backlog_bytes"] > 0 and after["packets"] >= before["packets"] > 0
    assert after["drops"] >= before["drops"] > 0
    rows = readout.statistics("rlh0", ns)["links"]
    assert sum(r["cohort"] == "other" for r in rows) == (40 if "other_ports" in change else 10)
    # the record names where each cohort stands; a fresh apply of it makes the same kernel state
    record = records.load(ns, "rlh0").request
    assert record == plan.request
    changed = tc_dump(ns, *DEVS)
    service.clean("rlh0", ns)
    service.apply(record)
    assert tc_dump(ns, *DEVS) == changed
