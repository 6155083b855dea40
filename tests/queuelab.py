"""The queues lab of the several-tx-queue tests (tests/test_queues_netns.py,
tests/test_stage_queues_netns.py): a server, a router whose client-facing veth sends on two
tx queues (of four it was made with), and a client with several addresses, in namespaces
``<name>-<pid>-<n>-...`` removed even when a test fails; and the probes that read which link
and which tree a flow's packets took.

>>> queue_request("ns", ("a", (CLIENT4[0],), ((10000, 10009),), "port", False)).queues
2
"""

import contextlib
import itertools
import os
import re
import socket
import subprocess
import time
from ipaddress import ip_address

from bench.common import wait_until
from ratelimit.kernel import netns
from ratelimit.service import readout
from ratelimit.spec.model import Cohort, LinkParams, Request

_counter = itertools.count(1)

SERVER4, SERVER6 = "198.19.1.2", "2001:db8:19::2"
CLIENT4, CLIENT6 = ("198.18.1.2", "198.18.1.3", "198.18.1.4"), ("2001:db8:1::2", "2001:db8:1::3")
SERVER_PORT = 443
PROBES = 5  # datagrams per flow and direction


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def routed(tmp_path, monkeypatch, name: str = "rlq"):
    """(server, router, client) namespaces: server s0 -- wan (router) r0 -- c0 client, the
    router's r0 made with four tx queues and sending on two (``ethtool -L``); forwarding on;
    removed at the end."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    base = f"{name}-{os.getpid()}-{next(_counter)}"
    names = [f"{base}-s", f"{base}-r", f"{base}-c"]
    server, router, client = names
    try:
        for ns in names:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            netns.set_sysctl(ns, "net.ipv6.conf.default.accept_dad", 0)  # link-local addresses usable at once
            # no router solicitations: a host repeats them for ever (4 s, 8 s, 16 s ... after its link
            # came up), and one through the trees is a packet no link selects (HTB's direct queue)
            netns.set_sysctl(ns, "net.ipv6.conf.default.router_solicitations", 0)
        sh("ip", "-n", server, "link", "add", "s0", "type", "veth", "peer", "name", "wan", "netns", router)
        sh("ip", "-n", router, "link", "add", "r0", "numtxqueues", "4", "numrxqueues", "4", "type", "veth",
            "peer", "name", "c0", "netns", client, "numtxqueues", "2", "numrxqueues", "2")
        # made with 4 tx queues, sending on 2 (as a NIC's channels set below its queues)
        sh("ip", "netns", "exec", router, "ethtool", "-L", "r0", "tx", "2", "rx", "2")
        for ns, dev, addrs in ((server, "s0", (f"{SERVER4}/24", f"{SERVER6}/64")),
                               (router, "wan", ("198.19.1.1/24", "2001:db8:19::1/64")),
                               (router, "r0", ("198.18.1.1/24", "2001:db8:1::1/64")),
                               (client, "c0", tuple(f"{a}/24" for a in CLIENT4) + tuple(f"{a}/64" for a in CLIENT6))):
            for a in addrs:
                sh("ip", "-n", ns, "addr", "add", a, "dev", dev, *(("nodad",) if ":" in a else ()))
            sh("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1", "up")  # a wire's packets
        for ns, via4, via6 in ((server, "198.19.1.1", "2001:db8:19::1"), (client, "198.18.1.1", "2001:db8:1::1")):
            sh("ip", "-n", ns, "route", "add", "default", "via", via4)
            sh("ip", "-n", ns, "-6", "route", "add", "default", "via", via6)
        for key in ("net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"):
            netns.set_sysctl(router, key, 1)
        for host in CLIENT4 + CLIENT6:  # every neighbour resolved: no probe waits in a neighbour queue
            far = SERVER6 if ":" in host else SERVER4
            sh("ip", "netns", "exec", client, "ping", "-c", "1", "-W", "2", "-I", host, far)
        yield server, router, client
    finally:
        netns.delete_namespaces(names)


def queue_request(router, *cohorts, queues=2):
    link = LinkParams(1_000_000)
    return Request("r0", tuple(Cohort(name, tuple(ip_address(h) for h in hosts), ports, link, link, per=per,
                                      others=others) for name, hosts, ports, per, others in cohorts),
                   mode="shape", direction="both", netns=router, queues=queues)


PORTS = ("ports", (CLIENT4[0], CLIENT6[0]), ((10000, 10599),), "port", False)  # 1,200 links: 3 groups of up to 512
HOSTS = ("hosts", (CLIENT4[1],), None, "host", False)
OTHERS = ("rest", (), None, "shared", True)


@contextlib.contextmanager
def open_ends(server, client, host, port, server_port=SERVER_PORT):
    """A UDP socket on the server (port ``server_port``) and one on client address ``host``,
    port ``port``, open for the block (no ICMP port-unreachable comes back meanwhile)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    ends = []
    try:
        far = SERVER6 if family == socket.AF_INET6 else SERVER4
        for ns, addr in ((server, (far, server_port)), (client, (host, port))):
            s = netns.netns_socket(ns, family, socket.SOCK_DGRAM)
            ends.append(s)
            s.bind(addr)
        yield ends
    finally:
        for s in ends:
            s.close()


def send(ends, received: bool = True) -> None:
    """``PROBES`` datagrams each way between the two ends; ``received``: each end has read
    the other's before they close (a closed end would answer with port-unreachables, packets
    on the links too), else 50 ms between rounds (a flow's pace)."""
    for a, b in ((ends[0], ends[1]), (ends[1], ends[0])):
        for _ in range(PROBES):
            a.sendto(b"q" * 100, b.getsockname()[:2])
    if not received:
        time.sleep(0.05)
        return
    for end in ends:
        end.settimeout(30)  # generous: it says the datagrams will not come
        for k in range(PROBES):
            try:
                end.recv(2048)
            except TimeoutError:
                raise AssertionError(f"{end.getsockname()[:2]} received {k} of {PROBES} datagrams in 30 s") from None


def probe(server, client, host, port, server_port=SERVER_PORT):
    """``PROBES`` datagrams each way between the server and client address ``host``, port ``port``."""
    with open_ends(server, client, host, port, server_port) as ends:
        send(ends)


def settled(router):
    """Counters once every link's queue is empty."""
    def links():
        rows = readout.statistics("r0", router)["links"]
        return None if any(r["backlog_pkts"] for r in rows) else rows
    return wait_until(links, 60, "the links' queues to drain")


def tree_classes(router, dev, tree: int) -> dict:
    """{classid: packets} of one tree's HTB qdisc, as ``tc -s class show`` prints them (its
    HTB classes have no JSON output)."""
    out = subprocess.run(["tc", "-n", router, "-s", "class", "show", "dev", dev, "parent", f"{tree:x}:"],
                         check=True, capture_output=True, text=True).stdout
    found = re.findall(r"class htb ([0-9a-f]+):([0-9a-f]+) .*\n Sent \d+ bytes (\d+) pkt", out)
    return {int(major, 16) << 16 | int(minor, 16): int(pkts) for major, minor, pkts in found
            if int(major, 16) == tree}


def unclassified(router, dev) -> int:
    """Packets the trees of ``dev`` let through unclassified (HTB's direct queue)."""
    return sum(unclassified_by_tree(router, dev).values())


def unclassified_by_tree(router, dev) -> dict:
    """``unclassified`` by tree: {the tree's major: packets}."""
    out = subprocess.run(["tc", "-n", router, "-s", "qdisc", "show", "dev", dev], check=True, capture_output=True,
                         text=True).stdout
    return {int(major, 16): int(n) for major, n in
            re.findall(r"qdisc htb ([0-9a-f]+): parent 52:\S+ .*direct_packets_stat (\d+)", out)}
