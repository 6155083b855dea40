"""A reject on the host kernel (router_pair namespaces, nftables): the client's connect is
refused at once, an established flow is reset, UDP is answered with port unreachable; it
comes and goes in place, leaves every link's classes and queues as they were and the other
client's flows alone, and counts what it refused.  A refusal before the change leaves the
router as it was."""

import json
import subprocess
import time

import pytest

from ratelimit import service
from ratelimit.errors import KernelMissing
from ratelimit.plan import reject
from ratelimit.profiles import scenario
from ratelimit.service import readout
from tcdump import tc_dump

pytestmark = pytest.mark.netns

PORT = 18081
ROUTER = "198.18.1.1"
TWO = """
[cohort.phone]
description = "the client, refused when reject is set"
hosts = "198.18.1.2"
rate = "2mbit"
reject = {refused}
[cohort.other]
description = "another user, never touched"
hosts = "198.18.1.3"
rate = "2mbit"
"""
# run in the client: a TCP connect, a UDP exchange, or a send on a connection made before
# the reject (argv: the source address, what, the seconds to wait before the send); prints
# how it ended and after how many seconds
PROBE = f"""
import socket, sys, time
src, what = sys.argv[1], sys.argv[2]
kind = socket.SOCK_DGRAM if what == "udp" else socket.SOCK_STREAM
s = socket.socket(socket.AF_INET, kind)
s.settimeout(2.0)
s.bind((src, 0))
try:
    if what == "established":
        s.connect(("{ROUTER}", {PORT}))
        print("ready", flush=True)
        sys.stdin.readline()  # the reject is applied meanwhile
    t = time.monotonic()
    if what == "connect":
        s.connect(("{ROUTER}", {PORT}))
        print("connected", time.monotonic() - t)
    else:
        if what == "udp":
            s.connect(("{ROUTER}", {PORT}))
        s.send(b"x")
        s.recv(10)
        print("answered", time.monotonic() - t)
except OSError as e:
    print(type(e).__name__, time.monotonic() - t)
"""
# run in the router: a TCP server that echoes, and a UDP one, on ROUTER:PORT
SERVERS = f"""
import socket, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("{ROUTER}", {PORT}))
def udp():
    while True:
        data, peer = u.recvfrom(100)
        u.sendto(data, peer)
threading.Thread(target=udp, daemon=True).start()
s = socket.create_server(("{ROUTER}", {PORT}))
def echo(c):
    while (data := c.recv(100)):
        c.send(data)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"""


@pytest.fixture
def served(router_pair):
    """``router_pair`` with a second client address (198.18.1.3) and the echo servers; the
    servers stopped at the end (the namespaces take the nftables table with them)."""
    router, client = router_pair
    subprocess.run(["ip", "-n", client, "addr", "add", "198.18.1.3/24", "dev", "c0"], check=True)
    proc = subprocess.Popen(["ip", "netns", "exec", router, "python3", "-c", SERVERS])
    try:
        time.sleep(0.3)
        yield router_pair
    finally:
        proc.kill()
        proc.wait()


def probe(client: str, src: str, what: str) -> tuple[str, float]:
    out = subprocess.run(["ip", "netns", "exec", client, "python3", "-c", PROBE, src, what], capture_output=True,
                         text=True, check=True, timeout=30).stdout.split()
    return out[0], float(out[1])


def apply(router: str, refused: bool):
    text = TWO.format(refused="true" if refused else "false")
    return service.apply(service.make_request("r0", netns=router, scenario=scenario.parse(text)))


def table(router: str) -> str | None:
    """The router's reject table as nft lists it, or None."""
    proc = subprocess.run(["ip", "netns", "exec", router, "nft", "list", "table", "inet", reject.table_name("r0")],
                          capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def test_a_reject_refuses_at_once_and_comes_and_goes_in_place(served):
    """Rejected, the client's connect fails with ECONNREFUSED in under 10 ms and its UDP
    datagram is answered with port unreachable (ECONNREFUSED on the connected socket); the
    other client connects; every link's classes and queues are as they were, and --stats
    counts the refused packets.  Applied without it, the client connects again and the table
    is gone."""
    router, client = served
    apply(router, refused=False)
    assert probe(client, "198.18.1.2", "connect")[0] == "connected"
    assert probe(client, "198.18.1.2", "udp")[0] == "answered"
    links = tc_dump(router, "r0", "rl-r0")
    refused = apply(router, refused=True)
    assert refused.how == "in place" and not refused.changed  # no link changes: the rules are beside them
    how, took = probe(client, "198.18.1.2", "connect")
    print("connect", how, took)
    assert how == "ConnectionRefusedError" and took < 0.010
    how, took = probe(client, "198.18.1.2", "udp")
    print("udp", how, took)
    assert how == "ConnectionRefusedError" and took < 0.010
    assert probe(client, "198.18.1.3", "connect")[0] == "connected"
    assert probe(client, "198.18.1.3", "udp")[0] == "answered"
    assert tc_dump(router, "r0", "rl-r0") == links
    stats = readout.statistics("r0", router)
    assert stats["rejected"]["phone"]["source"] == 2  # the SYN and the datagram, nothing else
    assert "phone" in stats["rejected"] and "other" not in stats["rejected"]
    back = apply(router, refused=False)
    assert back.how == "in place"
    assert table(router) is None
    how, took = probe(client, "198.18.1.2", "connect")
    assert how == "connected" and took < 0.5
    assert tc_dump(router, "r0", "rl-r0") == links


def test_a_reject_resets_an_established_flow(served):
    """A connection made before the reject: the client's next send is answered with a reset,
    in under 10 ms."""
    router, client = served
    apply(router, refused=False)
    proc = subprocess.Popen(["ip", "netns", "exec", client, "python3", "-c", PROBE, "198.18.1.2", "established"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        apply(router, refused=True)
        out, _ = proc.communicate("go\n", timeout=30)
    finally:
        proc.kill()
    how, took = out.split()
    print(how, took)
    assert how == "ConnectionResetError" and float(took) < 0.010


def test_clean_removes_the_rules(served):
    router, client = served
    apply(router, refused=True)
    assert "reject with tcp reset" in table(router)
    assert service.clean("r0", router)
    assert table(router) is None
    assert probe(client, "198.18.1.2", "connect")[0] == "connected"


def test_without_nft_a_reject_is_refused_and_the_router_left_as_it_was(served, monkeypatch):
    """No nft command: a one-line refusal before anything changes; the links, the record
    and the kernel's rules are those of the plan before."""
    from ratelimit.state import records
    router, client = served
    apply(router, refused=False)
    links, record = tc_dump(router, "r0", "rl-r0"), records.load(router, "r0")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(KernelMissing) as err:
        apply(router, refused=True)
    monkeypatch.undo()
    assert str(err.value) == "--reject: needs nftables' nft command (apt install nftables)"
    assert tc_dump(router, "r0", "rl-r0") == links
    assert json.dumps(records.load(router, "r0").request.cohorts, default=str) == \
        json.dumps(record.request.cohorts, default=str)
    assert table(router) is None
    assert probe(client, "198.18.1.2", "connect")[0] == "connected"

