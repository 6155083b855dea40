"""Containers with real engines: Docker (dockerd started by containers/engines.sh, no
init system, no iptables) and rootful Podman (CNI), both from Debian, the image built
with mmdebstrap and imported (no registry).

- a web container behind ``--container web --hosts container:client --profile modem-28k8``
  (its links on its host-side veth, its own device sending single segments): a
  10,000-byte fetch from the client container within 5% of the link model, with each
  engine;
- the client container as one user on a slow link (its host-side veth), the same fetch, the
  web container sending single segments as docs/containers.md ("Segments") says to;
- a Podman pod: two containers, one namespace, one owner;
- bad input: one line each, and the router (the host's and the containers' qdiscs, the
  named namespaces, the records) exactly as it was.

Everything a test starts has a name of its own (``rlct-``) and is removed by that name
after it, passed or failed; the networks are bridges of their own in 198.18.0.0/15 with
no gateway, NAT or firewall rule.  The whole module is one group, run alone: one
dockerd for all of it, and fetches timed from userspace.
"""

import json
import os
from pathlib import Path

import pytest

from ratelimit.kernel.probe import probe
from ratelimit.plan.compile import ifb_name

from ratelimit import __version__
from ratelimit.containers import attach, lookup

from enginekit import (delay_args, fetch, gso_max_segs, host_veth, model, qdiscs, ratelimit, run_dir, sh, single_segments,
                       web_and_client)

pytestmark = [pytest.mark.netns, pytest.mark.alone_on_host]


# ---------------------------------------------------------------- the two uses


def test_a_web_container_serves_a_client_container_over_a_modem(engine, ct_state):
    e = engine
    web = web_and_client(e)
    before = qdiscs(e, "rlct-web", "rlct-client")
    segs_before = gso_max_segs(e, "rlct-web")
    owner = json.loads(e("inspect", "rlct-web").stdout)[0]["Id"][:12]
    veth = host_veth(e, "rlct-web")
    dry = ratelimit("--container", "rlct-web", "--hosts", "container:rlct-client", "--profile", "modem-28k8",
                    *delay_args(), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"# ratelimit {__version__} plan for {veth}: " in dry.stdout and "netns" not in dry.stdout
    assert f"dev {ifb_name(veth)} " in dry.stdout  # down comes in on the veth: shaped on its IFB device
    assert (f"# then the container's own device sends single segments: nsenter --net=/proc/{e.pid('rlct-web')}/ns/net "
            f"ip link set dev eth0 gso_max_segs 1") in dry.stdout
    assert qdiscs(e, "rlct-web", "rlct-client") == before and gso_max_segs(e, "rlct-web") == segs_before
    r = ratelimit("--container", "rlct-web", "--hosts", "container:rlct-client", "--profile", "modem-28k8",
                  *delay_args())
    assert r.returncode == 0, r.stderr
    client = e.address("rlct-client")
    assert f"rlct-client = {client}" in r.stdout and f"{e.name} container rlct-web" in r.stdout
    assert "as the server (its host-side veth: down arrives on it)" in r.stdout
    assert not [n for n in run_dir() if n.startswith("rl-ct-")]  # no namespace was named
    try:
        listed = json.loads(ratelimit("--container", "rlct-web", "--list", "--json").stdout)
        applied = listed["applied"]
        assert listed["container"] == {"use": "server", "interface": veth}
        assert applied["server_side"] is True and applied["interface"] == veth and applied["netns"] is None
        assert applied["hosts"] == [client] and applied["named"] == {"rlct-client": [client]}
        assert applied["container"]["name"] == "rlct-web" and applied["container"]["use"] == "server"
        # web's own device hands its qdisc single segments, each metered as its own frame
        assert gso_max_segs(e, "rlct-web") == 1
        d = fetch(e, web)
        assert (d.http_code, d.bytes) == (200, 10_000)
        ratio = d.seconds / d.model_seconds(model(applied))
        print(f"{e.name}, server: {d.seconds:.3f} s, the model {d.model_seconds(model(applied)):.3f} s ({ratio:.3f})")
        assert 0.95 < ratio < 1.05, (d.seconds, ratio)
        # the links are on web's host-side veth, outside its network stack: its namespace is as it was
        assert qdiscs(e, "rlct-web")[1] == before[1]
    finally:
        r = ratelimit("--container", "rlct-web", "--clean")
    assert r.returncode == 0 and f"{veth}: removed what ratelimit installed" in r.stdout, r.stderr
    assert qdiscs(e, "rlct-web", "rlct-client") == before
    assert gso_max_segs(e, "rlct-web") == segs_before == lookup.GSO_MAX_SEGS
    assert not [n for n in run_dir() if n.startswith("rl-ct-")]
    assert not (ct_state / f"rl-ct-{owner}").exists() and not (ct_state / "-" / f"{veth}.json").exists()


@pytest.mark.parametrize("engine", ["podman"], indirect=True)  # what is tested is the record's: one engine's time
def test_links_put_by_hand_over_a_servers_give_its_device_whole_packets_again(engine, ct_state):
    """A server's links on its veth make its device send single segments; links applied over
    them on that veth by name (as any router interface), or a clean by name, find the
    container from the record and give its device whole packets again."""
    e = engine
    web_and_client(e)
    veth, client = host_veth(e, "rlct-web"), e.address("rlct-client")
    server = ("--container", "rlct-web", "--hosts", "container:rlct-client", "--rate", "1mbit", "--mode", "shape")
    try:
        for by_name in (("--hosts", client, "--ports", "80", "--rate", "2mbit", "--mode", "shape"), ("clean",)):
            r = ratelimit(*server)
            assert r.returncode == 0, r.stderr
            assert gso_max_segs(e, "rlct-web") == 1
            r = ratelimit("--interface", veth, *by_name)
            assert r.returncode == 0 and "whole packets" not in r.stderr, r.stderr
            assert gso_max_segs(e, "rlct-web") == lookup.GSO_MAX_SEGS, by_name
    finally:
        ratelimit("--interface", veth, "--clean")
    assert not (ct_state / "-" / f"{veth}.json").exists()


@pytest.mark.parametrize("engine", ["podman"], indirect=True)  # no engine code runs: one engine's time
def test_a_servers_links_recorded_in_its_namespace_by_0_4_are_listed_and_cleaned(engine, ct_state):
    """In 0.4 and earlier a server's links went on its own interface, in its namespace: --list
    still shows such a record (on "its own interface"), and --clean removes it."""
    from ratelimit import service
    e = engine
    web_and_client(e)
    before = qdiscs(e, "rlct-web", "rlct-client")
    client = e.address("rlct-client")
    with attach.turn():
        owner = lookup.resolve("rlct-web", e.name)[1]
        with attach.attached(owner) as ns:
            req = service.make_request("eth0", hosts=[client], per="host", rate="1mbit", mode="shape", netns=ns)
            req = service.for_container(req, (e.name, "rlct-web", owner.id, e.net, "server"), ())
            assert not req.server_side
            service.apply(req)
    assert qdiscs(e, "rlct-web")[1] != before[1]
    r = ratelimit("--container", "rlct-web", "--list")
    assert r.returncode == 0 and "# rlct-web: its own interface, eth0" in r.stdout, r.stdout + r.stderr
    assert f"hosts {client}" in r.stdout or client in r.stdout
    r = ratelimit("--container", "rlct-web", "--clean")
    assert r.returncode == 0 and "eth0: removed what ratelimit installed" in r.stdout, r.stderr
    assert qdiscs(e, "rlct-web", "rlct-client") == before and not list(ct_state.rglob("*.json"))
    assert not [n for n in run_dir() if n.startswith("rl-ct-")]


def test_a_client_container_as_one_user_on_a_slow_link(engine, ct_state):
    e = engine
    web = web_and_client(e)
    single_segments(e, "rlct-web")  # docs/containers.md, "Segments": the server sends single segments
    before = qdiscs(e, "rlct-web", "rlct-client")
    r = ratelimit("--container", "rlct-client", "--profile", "modem-28k8", *delay_args())
    assert r.returncode == 0, r.stderr
    try:
        listed = json.loads(ratelimit("--container", "rlct-client", "--list", "--json").stdout)
        veth = listed["container"]["interface"]
        assert listed["container"]["use"] == "user" and veth != "eth0"
        # the engine's own wiring: the veth's peer is the client's eth0
        shown = sh("nsenter", f"--net=/proc/{e.pid('rlct-client')}/ns/net", "ip", "-o", "link", "show", "eth0").stdout
        assert f"eth0@if{Path(f'/sys/class/net/{veth}/ifindex').read_text().strip()}:" in shown, shown
        assert listed["applied"]["hosts"] == [e.address("rlct-client")] and listed["applied"]["ports"] == "all"
        d = fetch(e, web)
        expected = d.model_seconds(model(listed["applied"]))
        ratio = d.seconds / expected
        print(f"{e.name}, one user: {d.seconds:.3f} s, the model {expected:.3f} s ({ratio:.3f})")
        assert 0.95 < ratio < 1.05, (d.seconds, ratio)
    finally:
        r = ratelimit("--container", "rlct-client", "--clean")
    assert r.returncode == 0, r.stderr
    assert qdiscs(e, "rlct-web", "rlct-client") == before
    assert not list((ct_state / "-").glob(f"{veth}.*"))


@pytest.mark.parametrize("engine", ["podman"], indirect=True)
def test_a_restarted_users_links_went_with_its_veth(engine, ct_state):
    """A restarted container comes back on a new veth: the record of the old one is
    forgotten with a notice, and nothing of it is left."""
    e = engine
    e.run("rlct-client", e.image, "sleep", "600")
    r = ratelimit("--container", "rlct-client", "--rate", "1mbit", "--mode", "shape")
    assert r.returncode == 0, r.stderr
    old = r.stdout.split(":", 1)[0]
    assert (ct_state / "-" / f"{old}.json").exists()
    e("restart", "-t", "0", "rlct-client")
    r = ratelimit("--container", "rlct-client", "--list")
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"ratelimit: podman container 'rlct-client': the links recorded on {old} went with that "
                        f"device (the container was restarted); record and IFB device removed\n")
    assert "nothing installed by ratelimit" in r.stdout and old not in r.stdout
    assert not list((ct_state / "-").glob(f"{old}.*"))
    assert not Path(f"/sys/class/net/{ifb_name(old)}").exists()  # the IFB device of its upload went too


@pytest.mark.parametrize("engine", ["docker"], indirect=True)
def test_container_hosts_on_an_interface_named_by_hand(engine, ct_state):
    """container:NAME in --hosts without --container: the address on the container's one
    network, resolved once; the record keeps the name beside it."""
    from ratelimit.containers import lookup
    e = engine
    e.run("rlct-client", e.image, "sleep", "600")
    c, owner = lookup.resolve("rlct-client", "docker")
    veth = lookup.wiring(owner, lookup.choose_network(owner, None)).veth
    r = ratelimit("--interface", veth, "--hosts", "container:rlct-client", "--per", "host", "--rate", "1mbit",
                  "--mode", "shape")
    assert r.returncode == 0, r.stderr
    try:
        applied = json.loads(ratelimit("--interface", veth, "--list", "--json").stdout)["applied"]
        assert applied["hosts"] == [e.address("rlct-client")]
        assert applied["named"] == {"rlct-client": [e.address("rlct-client")]} and "container" not in applied
    finally:
        r = ratelimit("--interface", veth, "--clean")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("engine", ["podman"], indirect=True)  # the link is the same whoever wired the veth
def test_six_parallel_fetches_of_one_3g_user_share_its_one_link(engine, ct_state):
    """The issue's 3G user: six downloads at once from the client container take as long as
    their frames need at the one link's rate (per host, every port)."""
    e = engine
    web = web_and_client(e, timestamps=True)  # 3G's link layer is Ethernet: the model keeps timestamps
    single_segments(e, "rlct-web")  # docs/containers.md, "Segments": the server sends single segments
    no_netem = [] if probe(["netem"])["netem"] else ["--delay", "0ms", "--jitter", "0ms", "--loss", "0%"]
    r = ratelimit("--container", "rlct-client", "--profile", "3g", *no_netem)
    assert r.returncode == 0, r.stderr
    try:
        applied = json.loads(ratelimit("--container", "rlct-client", "--list", "--json").stdout)["applied"]
        assert applied["links"] == 2  # one link each way for the container's one address
        one = fetch(e, web)
        m = model(applied)
        urls = [f"http://{web}/100000.bin?{i}" for i in range(6)]
        out = e("exec", "rlct-client", "sh", "-c", 'a=$(date +%s.%N); curl -sS -Z --parallel-max 6 -o /dev/null '
                '-o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -w "%{size_download}\\n" "$@"; '
                'b=$(date +%s.%N); echo "$a $b"', "sh", *urls).stdout.split()
        sizes, (start, end) = [int(x) for x in out[:-2]], map(float, out[-2:])
        assert sizes == [100_000] * 6
        seconds = end - start
        # one handshake and request, then six responses back to back on the one link
        expected = m.fetch_seconds(100_000, header=one.header_bytes, request=one.request_bytes) + \
            5 * m.response_seconds(100_000, header=one.header_bytes)
        ratio = seconds / expected
        print(f"{e.name}, six fetches by one 3G user: {seconds:.3f} s, the model {expected:.3f} s ({ratio:.3f})")
        assert 0.95 < ratio < 1.05, (seconds, ratio)
    finally:
        r = ratelimit("--container", "rlct-client", "--clean")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- one namespace, two names


def test_containers_sharing_a_namespace_lead_to_one(engine):
    """A Podman pod's members, and Docker's --network container:X (compose's network_mode:
    service:X): every name leads to the namespace's owner, one name for it, one record."""
    from ratelimit.containers import lookup
    e = engine
    if e.name == "podman":
        e("pod", "rm", "-f", "-t", "0", "rlct-pod", check=False)
        e("pod", "create", "--name", "rlct-pod", "--network", e.net)
        for name in ("rlct-pod-a", "rlct-pod-b"):
            e.made.append(name)
            e("run", "-d", "--pod", "rlct-pod", "--name", name, e.image, "sleep", "600")
        a, b = "rlct-pod-a", "rlct-pod-b"
    else:
        e.run("rlct-pod-a", e.image, "sleep", "600")
        e.run("rlct-pod-b", e.image, "sleep", "600", network="container:rlct-pod-a")
        a, b = "rlct-pod-a", "rlct-pod-b"
    try:
        (ca, owner_a), (cb, owner_b) = lookup.resolve(a, e.name), lookup.resolve(b, e.name)
        assert ca.id != cb.id and owner_a.id == owner_b.id
        assert cb.namespace_owner() is not None
        assert (owner_a.id != ca.id) == (e.name == "podman")  # a pod's namespace is its infra container's
        assert lookup.netns_name(owner_a) == lookup.netns_name(owner_b)
        assert lookup.netns_inode(ca.pid) == lookup.netns_inode(cb.pid)
    finally:
        if e.name == "podman":
            e("pod", "rm", "-f", "-t", "0", "rlct-pod", check=False)


# ---------------------------------------------------------------- bad input changes nothing


def test_bad_containers_are_one_line_and_change_nothing(engine, ct_state):
    e = engine
    web_and_client(e)
    e.made.append("rlct-stopped")
    e("create", "--name", "rlct-stopped", "--network", e.net, e.image, "sleep", "600")
    e.run("rlct-hostnet", e.image, "sleep", "600", network="host")
    e.run("rlct-nonet", e.image, "sleep", "600", network="none")
    records = sorted(str(p) for p in ct_state.rglob("*.json")) if ct_state.exists() else []
    before = (qdiscs(e, "rlct-web", "rlct-client"), run_dir(), records)
    eng = e.name
    cases = [
        (["--container", "rlct-missing"], 3, "--container: no container 'rlct-missing' in docker or podman"),
        (["--container", "rlct-stopped", "--engine", eng], 3,
         f"--container: {eng} container 'rlct-stopped' is not running (created; start it first)"),
        (["--container", "rlct-hostnet", "--engine", eng], 3,
         f"--container: {eng} container 'rlct-hostnet' uses host networking: it has no interface of its own"),
        (["--container", "rlct-nonet", "--engine", eng], 3, f"--container: {eng} container 'rlct-nonet' has no network"),
        (["--container", "rlct-web;touch /tmp/rlct-pwned"], 2,
         "--container: 'rlct-web;touch /tmp/rlct-pwned' is not a container name or id"),
        (["--container", "rlct-web", "--hosts", "container:$(id)"], 2, "--hosts: '$(id)' is not a container name or id"),
        (["--container", "rlct-web", "--hosts", "container:rlct-hostnet", "--engine", eng], 3,
         f"--hosts: {eng} container 'rlct-hostnet' uses host networking"),
        (["--container", "rlct-web", "--engine", eng, "--network", "rlct-other"], 3,
         f"--network: {eng} container 'rlct-web' is not on network 'rlct-other' (it is on: rlct-net)"),
        (["--container", "rlct-web", "--interface", "eth0"], 2, "--container: it says which device"),
    ]
    for argv, code, says in cases:
        r = ratelimit(*argv, "--profile", "modem-28k8")
        assert (r.returncode, r.stdout) == (code, ""), (argv, r.returncode, r.stderr)
        assert r.stderr.startswith(f"ratelimit: {says}") and r.stderr.count("\n") == 1, (argv, r.stderr)
    # an engine that is not installed: a PATH without either
    empty = {**os.environ, "PATH": "/nonexistent"}
    r = ratelimit("--container", "rlct-web", "--profile", "modem-28k8", env=empty)
    assert (r.returncode, r.stderr) == (3, "ratelimit: --container: no container engine (docker or podman) is installed\n")
    r = ratelimit("--container", "rlct-web", "--engine", eng, "--profile", "modem-28k8", env=empty)
    assert r.returncode == 3 and r.stderr.startswith(f"ratelimit: --container: {eng} is not installed")
    assert not Path("/tmp/rlct-pwned").exists()
    records = sorted(str(p) for p in ct_state.rglob("*.json")) if ct_state.exists() else []
    assert (qdiscs(e, "rlct-web", "rlct-client"), run_dir(), records) == before
