"""Faults on the host kernel (router_pair namespaces): a blackholed link drops every packet
that reaches it, comes and goes in place, and leaves every other link as it was (a TCP
connect from the client to a listener in the router is the probe; the link's kernel
counters say what passed); and a plan applied --for a while is removed when it ends."""

import re
import subprocess
import time

import pytest

from ratelimit import service
from ratelimit.plan.layout import Layout
from ratelimit.plan.ops import tc_handle
from ratelimit.profiles import scenario
from ratelimit.service import readout
from tcdump import tc_dump

pytestmark = pytest.mark.netns

PORT = 18080
ROUTER = "198.18.1.1"
TWO = """
[cohort.phone]
description = "the client, its link gone when blackhole is set"
hosts = "198.18.1.2"
rate = "2mbit"
blackhole = {dark}
[cohort.other]
description = "another user, never touched"
hosts = "198.18.1.3"
rate = "2mbit"
"""
# connect, and say how it ended and after how long
CONNECT = f"""
import socket, time
s = socket.socket()
s.settimeout(2.0)
t = time.monotonic()
try:
    s.connect(("{ROUTER}", {PORT}))
    print("connected", time.monotonic() - t)
except OSError as e:
    print(type(e).__name__, time.monotonic() - t)
"""


@pytest.fixture
def listener(router_pair):
    """A TCP listener in the router on ``ROUTER``:``PORT``, accepting and closing; stopped at the end."""
    router, _ = router_pair
    code = (f"import socket\ns = socket.create_server(('{ROUTER}', {PORT}))\n"
            "while True:\n    c, _ = s.accept()\n    c.close()\n")
    proc = subprocess.Popen(["ip", "netns", "exec", router, "python3", "-c", code])
    try:
        time.sleep(0.3)
        yield router_pair
    finally:
        proc.kill()
        proc.wait()


def connect(client: str) -> tuple[str, float]:
    out = subprocess.run(["ip", "netns", "exec", client, "python3", "-c", CONNECT], capture_output=True, text=True,
                         check=True, timeout=30).stdout.split()
    return out[0], float(out[1])


def apply(router: str, dark: bool):
    text = TWO.format(dark="true" if dark else "false")
    return service.apply(service.make_request("r0", netns=router, scenario=scenario.parse(text)))


def link(router: str, host: str, direction: str) -> dict:
    return next(r for r in readout.statistics("r0", router)["links"] if r["host"] == host and r["direction"] == direction)


def other_links(router: str, req) -> list[str]:
    """What tc shows of the other cohort's group, classes and queues (the link of 198.18.1.3)."""
    lay = Layout.of(req)
    span = lay.spans[1]
    marks = (tc_handle(lay.group_qdisc(span, 0)), tc_handle(lay.queue_qdisc(span.place.leaf_base)))
    lines = [line for blob in tc_dump(router, "r0", "rl-r0") for line in blob.splitlines()]
    return [line for line in lines if any(m in line for m in marks)]


def test_a_blackhole_drops_every_packet_and_comes_and_goes_in_place(listener):
    """Blackholed, the client's connect times out and its link passes nothing (its upload
    link counts the SYNs it dropped); cleared in place, the connect succeeds at once; the
    other cohort's classes and queues are the same throughout."""
    router, client = listener
    req = apply(router, dark=False).request
    assert connect(client)[0] == "connected"
    others = other_links(router, req)
    assert others
    dark = apply(router, dark=True)
    assert dark.how == "in place"
    before = link(router, "198.18.1.2", "source")
    how, took = connect(client)
    after = link(router, "198.18.1.2", "source")
    print(how, took, before, after)
    assert how == "TimeoutError" and took >= 1.9
    assert after["bytes"] == before["bytes"] and after["drops"] > before["drops"]  # the SYN and its retries
    assert other_links(router, req) == others
    lit = apply(router, dark=False)
    assert lit.how == "in place"
    how, took = connect(client)
    assert how == "connected" and took < 0.5
    assert other_links(router, req) == others


PARTITION = """
[cohort.cut]
description = "the client's flows with the first server, cut both ways"
hosts = "198.18.1.2"
servers = "198.18.1.1"
rate = "2mbit"
blackhole = true
[cohort.other]
description = "the second client, with every server"
hosts = "198.18.1.3"
rate = "2mbit"
"""
CONNECT_FROM = """
import socket, sys
s = socket.socket()
s.settimeout(1.5)
s.bind((sys.argv[1], 0))
try:
    s.connect((sys.argv[2], {port}))
    print("connected")
except OSError as e:
    print(type(e).__name__)
""".format(port=PORT)


def test_a_partition_cuts_exactly_the_pairs_it_names(listener):
    """A blackholed cohort of one client and one server is a partition between them: of
    two clients and two servers (the router's two addresses), only that pair's connect
    fails; the three others connect."""
    router, client = listener
    subprocess.run(["ip", "-n", router, "addr", "add", "198.18.1.254/24", "dev", "r0"], check=True)
    subprocess.run(["ip", "-n", client, "addr", "add", "198.18.1.3/24", "dev", "c0"], check=True)
    second = subprocess.Popen(["ip", "netns", "exec", router, "python3", "-c",
                               f"import socket\ns = socket.create_server(('198.18.1.254', {PORT}))\n"
                               "while True:\n    c, _ = s.accept()\n    c.close()\n"])
    try:
        time.sleep(0.3)
        service.apply(service.make_request("r0", netns=router, scenario=scenario.parse(PARTITION)))
        got = {(a, b): subprocess.run(["ip", "netns", "exec", client, "python3", "-c", CONNECT_FROM, a, b],
                                      capture_output=True, text=True, check=True, timeout=30).stdout.strip()
               for a in ("198.18.1.2", "198.18.1.3") for b in (ROUTER, "198.18.1.254")}
    finally:
        second.kill()
        second.wait()
    print(got)
    assert got == {("198.18.1.2", ROUTER): "TimeoutError", ("198.18.1.2", "198.18.1.254"): "connected",
                   ("198.18.1.3", ROUTER): "connected", ("198.18.1.3", "198.18.1.254"): "connected"}


# ---------------------------------------------------------------- faults that end by themselves


@pytest.fixture
def watched(router_pair, tmp_path, monkeypatch):
    """``router_pair`` with a state directory of the test's own (the watcher an apply starts
    inherits it); a watcher left is killed at the end.  Yields (router, client, tmp_path)."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    router, client = router_pair
    try:
        yield router, client, tmp_path
    finally:
        kill_watcher(router, check=False)


def kill_watcher(router: str, check: bool = True) -> None:
    subprocess.run(["pkill", "-9", "-f", f"ratelimit expire --interface r0 --netns {router}"], check=check,
                   capture_output=True)


def past_end(plan) -> None:
    """Kill the watcher of the plan just applied, and wait until half a second past its end."""
    kill_watcher(plan.request.netns)
    time.sleep(max(0.0, plan.request.expires_ms / 1000 + 0.5 - time.time()))


def lasting(router: str, text: str | None = "2s"):
    return service.apply(service.make_request("r0", netns=router, hosts="198.18.1.2", per="host", rate="2mbit",
                                              mode="shape", lasting=text))


def ours(router: str) -> bool:
    """Whether r0's root qdisc is ratelimit's (52:)."""
    out = subprocess.run(["tc", "-n", router, "qdisc", "show", "dev", "r0", "root"], capture_output=True,
                         text=True).stdout
    return " 52: " in out


@pytest.mark.alone_on_host  # the removal timed against the clock: a busy machine stretches the clean
def test_a_plan_for_2s_is_removed_within_a_second_of_its_end(watched):
    """Applied with --for 2s: --list says when it ends; its watcher removes it within 1 s of
    its end (as --clean would: no record, no qdisc of ours), and then ends itself."""
    from ratelimit.cli.listing import render_table
    from ratelimit.service import expiry
    from ratelimit.state import records
    router, _, _ = watched
    end_s = lasting(router).request.expires_ms / 1000
    assert expiry.alive(router, "r0") and ours(router)
    assert re.search(r"\nends in [12]s \(then removed\)", render_table(readout.statistics("r0", router), counters=False))
    while records.load(router, "r0") is not None and time.time() < end_s + 5:
        time.sleep(0.02)
    gone = time.time()
    print(f"removed {gone - end_s:.3f} s after its end")
    assert 0 <= gone - end_s <= 1.0 and not ours(router)
    deadline = time.time() + 5
    while expiry.alive(router, "r0") and time.time() < deadline:
        time.sleep(0.05)
    assert not expiry.alive(router, "r0")


def test_an_apply_before_the_end_replaces_it(watched):
    """A plan applied again without --for before its end stays; its watcher ends."""
    from ratelimit.service import expiry
    router, _, _ = watched
    lasting(router, "1s")
    assert lasting(router, None).request.expires_ms is None
    time.sleep(2.5)
    assert ours(router) and not expiry.alive(router, "r0")


def test_an_ended_plan_whose_watcher_was_killed_is_said_not_restored_and_removed_by_a_new_watcher(watched):
    """kill -9 of the watcher right after the apply: the plan outlives its end (nothing else of
    ours is left to act), --list says so, --restore after a reboot does not put it back, and
    a watcher started by hand removes it at once."""
    from ratelimit.cli import persist
    from ratelimit.cli.listing import render_table
    from ratelimit.service import expiry
    router, _, tmp_path = watched
    # 5 s: the watcher must still be there to kill when the apply returns (on a busy machine an
    # apply and its watcher's start took longer than 1 s, and the watcher had already acted)
    past_end(lasting(router, "5s"))
    assert ours(router)
    assert "its end passed" in render_table(readout.statistics("r0", router), counters=False)
    saved, _ = persist.save(tmp_path / "saved.json", say=lambda m: None)
    service.clean("r0", router)  # a reboot
    said = []
    assert persist.restore(saved, say=said.append) == 0
    assert not ours(router) and "not restored: its plan ended (--for)" in said[0]
    past_end(lasting(router, "5s"))
    started = time.time()
    expiry.start(router, "r0")
    while ours(router) and time.time() < started + 10:
        time.sleep(0.02)
    assert not ours(router) and time.time() - started < 5


@pytest.mark.alone_on_host  # the plan's return timed against the clock
def test_a_fault_for_2s_over_a_plan_gives_that_plan_back_when_it_ends(watched):
    """A blackhole applied --for 2s over a plan of its own: when it ends the plan before it
    is back, the kernel as a fresh apply of that plan builds it, and the record its request."""
    from ratelimit.state import records
    router, _, _ = watched
    base = dict(hosts="198.18.1.2", per="host", rate="2mbit", mode="shape")
    plan = service.apply(service.make_request("r0", netns=router, **base))
    before = tc_dump(router, "r0", "rl-r0")
    fault = service.apply(service.make_request("r0", netns=router, blackhole=True, lasting="2s", **base))
    assert fault.how == "in place" and tc_dump(router, "r0", "rl-r0") != before
    end_s = fault.request.expires_ms / 1000
    while records.load(router, "r0").request.expires_ms is not None and time.time() < end_s + 5:
        time.sleep(0.02)
    print(f"back {time.time() - end_s:.3f} s after its end")
    assert time.time() - end_s <= 1.0
    assert records.load(router, "r0").request.cohorts == plan.request.cohorts
    assert tc_dump(router, "r0", "rl-r0") == before
