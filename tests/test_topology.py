"""topology: the layout and names (pure), and real labs in namespaces (netns)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from bench.common import wait_until
from ratelimit.errors import ConflictError, FieldError, NotFoundError, RatelimitError
from ratelimit.kernel import netns as lab_netns
from ratelimit.lab import topology
from ratelimit.lab.topology import Topology


# -- pure -------------------------------------------------------------------

def test_layout_names_and_addresses():
    t = Topology.layout("demo", clients=3)
    assert t.clients == ("rl-demo-c1", "rl-demo-c2", "rl-demo-c3")
    assert (t.router, t.server) == ("rl-demo-router", "rl-demo-server")
    assert t.client_addrs == ("198.18.0.2", "198.18.0.3", "198.18.0.4")
    assert t.client_addrs6 == ("2001:db8:18::2", "2001:db8:18::3", "2001:db8:18::4")
    assert (t.router_client_addr, t.router_server_addr, t.server_addr) == ("198.18.0.1", "198.19.0.1", "198.19.0.2")
    assert (t.router_client_if, t.router_server_if) == ("lan0", "wan0")
    assert t.namespaces == ("rl-demo-router", "rl-demo-server", *t.clients)
    assert t.prefix == "rl-demo-"


def test_every_address_is_in_the_benchmark_or_documentation_ranges():
    import ipaddress
    t = Topology.layout("x", clients=topology.MAX_CLIENTS)
    v4 = [*t.client_addrs, t.router_client_addr, t.router_server_addr, t.server_addr]
    v6 = [*t.client_addrs6, t.router_client_addr6, t.router_server_addr6, t.server_addr6]
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("198.18.0.0/15") for a in v4)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("2001:db8::/32") for a in v6)
    assert len(set(v4)) == len(v4) and len(set(v6)) == len(v6)


def test_hosts_resolve_to_namespaces_and_addresses():
    t = Topology.layout("x", clients=12)
    assert t.ns("router") == "rl-x-router" and t.ns("server") == "rl-x-server"
    assert t.ns("client") == t.ns(1) == t.ns("c1") == t.ns("client1") == "rl-x-c1"
    assert t.ns("client12") == t.ns("rl-x-c12") == "rl-x-c12"
    assert t.addr("client12") == "198.18.0.13" and t.addr(12, v6=True) == "2001:db8:18::d"
    assert t.addr("server") == "198.19.0.2" and t.addr("router") == "198.18.0.1"
    for bad in ("client13", 0, "nobody", "rl-y-router"):
        with pytest.raises(FieldError, match="host"):
            t.ns(bad)
    assert t.argv("server", ["echo", "hi"])[-4:] == ["exec", "rl-x-server", "echo", "hi"]


@pytest.mark.parametrize("name", ["", "A", "with-dash", "x" * 33, "sp ace", "_x", "x/y"])
def test_bad_lab_names_are_refused(name):
    with pytest.raises(FieldError, match="lab name"):
        Topology.layout(name)


@pytest.mark.parametrize("clients", [0, -1, topology.MAX_CLIENTS + 1, "2", True])
def test_bad_client_counts_are_refused(clients):
    with pytest.raises(FieldError, match="clients"):
        Topology.layout("x", clients=clients)


def test_interface_names_must_fit_ifnamsiz():
    assert topology.check_ifname("a" * 15) == "a" * 15
    for bad in ("a" * 16, "", "a/b", "a:b", "a b"):
        with pytest.raises(FieldError, match="interface name"):
            topology.check_ifname(bad)
    t = Topology.layout("x", clients=topology.MAX_CLIENTS)
    for name in (t.router_client_if, t.router_server_if, t.client_if, f"c{topology.MAX_CLIENTS}"):
        topology.check_ifname(name)


def test_one_labs_prefix_never_matches_another_lab():
    # names may not contain '-', so rl-a- is never the start of lab "a-b"'s names
    with pytest.raises(FieldError):
        topology.lab_prefix("a-b")
    assert topology._ROLE_RE.match("router") and not topology._ROLE_RE.match("b-router")


def test_errors_are_ratelimit_errors():
    assert issubclass(topology.TopologyError, RatelimitError)


# -- real labs ---------------------------------------------------------------

def _serve_once_per_connection(topo, family, addr) -> tuple[socket.socket, threading.Thread]:
    """A server in the server namespace that answers each connection with the
    peer address it saw (so we can tell the router does not NAT)."""
    srv = topo.socket("server", family)
    srv.bind((addr, 0))
    srv.listen(64)

    def loop():
        while True:
            try:
                conn, peer = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(peer[0].encode())

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return srv, th


def _ask(topo, host, family, addr, port) -> str:
    c = topo.socket(host, family)
    c.settimeout(5)
    with c:
        c.connect((addr, port))
        return c.recv(100).decode()


@pytest.mark.netns
def test_clients_reach_the_server_through_the_router_v4_and_v6(lab):
    topo = lab(clients=3)
    for family, saddr, caddrs in ((socket.AF_INET, topo.server_addr, topo.client_addrs),
                                  (socket.AF_INET6, topo.server_addr6, topo.client_addrs6)):
        srv, _ = _serve_once_per_connection(topo, family, saddr)
        try:
            port = srv.getsockname()[1]
            for i, caddr in enumerate(caddrs, 1):
                assert _ask(topo, i, family, saddr, port) == caddr
        finally:
            srv.close()
    assert "ip_forward = 1" in topo.exec("router", ["sysctl", "net.ipv4.ip_forward"]).stdout
    assert "forwarding = 1" in topo.exec("router", ["sysctl", "net.ipv6.conf.all.forwarding"]).stdout
    # the route really goes via the router's lan0/wan0
    routes = topo.ip("route", host="client2").stdout
    assert "default via 198.18.0.1 dev eth0" in routes
    links = topo.ip("-d", "link", "show", "c2").stdout
    assert "master lan0" in links and "gso_max_segs 1 " in links


@pytest.mark.netns
def test_open_rebuilds_an_existing_lab_and_create_refuses_to_clobber_it(lab):
    topo = lab(clients=2)
    assert Topology.open(topo.name) == topo
    with pytest.raises(ConflictError, match=f"lab '{topo.name}' exists already"):
        Topology.create(topo.name, clients=1)
    again = Topology.create(topo.name, clients=1, replace=True)
    assert again.clients == (f"rl-{topo.name}-c1",)
    assert topology.lab_namespaces(topo.name) == sorted(again.namespaces)
    with pytest.raises(NotFoundError, match="no complete lab 'nosuchlab'"):
        Topology.open("nosuchlab")


@pytest.mark.netns
def test_destroy_finds_leftovers_by_name_and_kills_what_runs_there(lab):
    topo = lab(clients=1)
    sleeper = topo.popen("server", ["sleep", "60"])
    wait_until(lambda: sleeper.pid in lab_netns.netns_pids(topo.server), 60, "the sleeper in the server's namespace",
               every_s=0.01)
    assert set(topology.list_leftovers(topo.prefix)) == set(topo.namespaces)
    # a "crash": nothing but the name is known
    assert sorted(topology.destroy(topo.name)) == sorted(topo.namespaces)
    assert sleeper.wait(timeout=5) is not None
    assert topology.list_leftovers(topo.prefix) == []
    assert topology.destroy(topo.name) == []  # nothing left: not an error


@pytest.mark.netns
def test_a_failed_build_leaves_nothing_behind(lab, monkeypatch):
    name = f"t{os.getpid()}_broken"
    real = topology.configure
    calls = []

    def failing_on_server(ns, steps):
        calls.append(ns)
        if ns.endswith("-server"):  # the kernel refuses this for real
            steps = [*steps, ("link set nosuchdev up", lambda ipr: ipr.link("set", index=999999, state="up"))]
        return real(ns, steps)

    monkeypatch.setattr(topology, "configure", failing_on_server)
    with pytest.raises(topology.TopologyError, match="nosuchdev"):
        Topology.create(name, clients=2)
    assert topology.lab_namespaces(name) == []


@pytest.mark.netns
def test_sixty_four_clients(lab):
    t0 = time.monotonic()
    topo = lab(clients=64)
    built = time.monotonic() - t0
    srv, _ = _serve_once_per_connection(topo, socket.AF_INET, topo.server_addr)
    try:
        port = srv.getsockname()[1]
        for i in (1, 33, 64):
            assert _ask(topo, i, socket.AF_INET, topo.server_addr, port) == topo.addr(i)
    finally:
        srv.close()
    print(f"64-client lab built in {built:.2f} s")


@pytest.mark.netns
def test_exec_reports_failures_with_stderr(lab):
    topo = lab(clients=1)
    r = topo.exec("client1", [sys.executable, "-c", "import sys; print('ok'); sys.exit(0)"])
    assert r.stdout == "ok\n"
    with pytest.raises(topology.TopologyError, match="exited 3: boom"):
        topo.exec("client1", ["sh", "-c", "echo boom >&2; exit 3"])
    assert topo.exec("client1", ["false"], check=False).returncode == 1
    with pytest.raises(topology.TopologyError, match="did not finish within 0.2 s"):
        topo.exec("client1", ["sleep", "5"], timeout=0.2)


@pytest.mark.netns
def test_sockets_and_sysctls_in_a_namespace_without_a_process(netns):
    name = netns()
    s = lab_netns.netns_socket(name, socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        s.bind(("127.0.0.1", 0))  # lo is up in that namespace only
        assert s.getsockname()[0] == "127.0.0.1"
    lab_netns.set_sysctl(name, "net.ipv4.ip_forward", 1)
    out = subprocess.run(["ip", "netns", "exec", name, "sysctl", "-n", "net.ipv4.ip_forward"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
    with pytest.raises(NotFoundError, match="does not exist"):
        lab_netns.netns_socket("rlt-no-such-namespace")


@pytest.mark.netns
def test_netns_name_fixture_cleans_up(netns_name):
    name = netns_name("x")
    assert name.startswith(f"rlt-{os.getpid()}-") and name.endswith("-x")
    subprocess.run(["ip", "netns", "add", name], check=True)
    assert name in lab_netns.namespaces()  # deleted by the fixture after this test
