"""Containers as a user's suite uses them, with real engines (tests/enginekit.py):

- the pytest fixture (``container_link``, ``make_container_link``) in a pytest run of its
  own: a web container as the server of a client container over a modem, and the client as
  one user, each download within 3% of the link model; the links gone after a failing test;
  a refusal in one line;
- the compose example (examples/compose/) with Debian's docker-compose and podman-compose,
  run as its README says: one ratelimit command puts both clients behind their links, a
  fetch within 3% of the model;
- dockerd stopped, and a Docker socket that is not there: one line naming docker and what to
  do, the router as it was, and Podman's containers found all the same;
- IPv6 (2001:db8::/32) beside IPv4 on the network: a v6 fetch shaped as the v4 one, each
  within 3% of the model for its packets, as a server (Podman) and as one user (Docker).

Names of their own (``rlct2-``), removed after each test, passed or failed.  The module
is in the ``containers`` group with tests/test_containers_engines.py: one dockerd.
"""

import dataclasses
import json
import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from bench.common import wait_until
from ratelimit.kernel.probe import probe
from ratelimit.plan.compile import ifb_name
from ratelimit.spec.linkmodel import LinkModel

from enginekit import (ENGINES_SH, PODMAN_ENV, ROOT, Engine, delay_args, fetch, gso_max_segs, model, qdiscs, ratelimit,
                       run_dir, sh, single_segments, web_and_client)
from test_pytest_plugin import run_pytest

pytestmark = [pytest.mark.netns, pytest.mark.alone_on_host]

P = "rlct2-"


def leftovers(e, state):
    """What a run could leave: every qdisc on the host and in the two containers, the named
    namespaces, and records in the state directory."""
    records = sorted(str(p.relative_to(state)) for p in state.rglob("*.json")) if state.exists() else []
    return qdiscs(e, f"{P}web", f"{P}client"), run_dir(), records


def test_the_fixture_puts_a_container_behind_a_modem(engine, tmp_path):
    e = engine
    web_and_client(e, prefix=P)
    state = tmp_path / "state"  # run_pytest's
    before = leftovers(e, state)
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        import pytest

        ENGINE = {e.name!r}

        @pytest.mark.container_link("{P}web", hosts="container:{P}client", profile="modem-28k8", no_delay="auto",
                                    engine=ENGINE)
        def test_server(container_link):
            link = container_link
            assert (link.use, link.engine) == ("server", ENGINE) and link.interface.startswith("veth")
            assert link.applied["server_side"] is True
            d = link.fetch("/10000.bin")  # from the one client named, to web's address
            assert (d.http_code, d.bytes, d.client) == (200, 10_000, "{P}client")
            model = d.model_seconds(link.model)
            print(f"RESULT server {{d.seconds:.3f}} {{model:.3f}}")
            assert 0.97 < d.seconds / model < 1.03, (d.seconds, model)
            assert sum(r["bytes"] for r in link.stats()["links"] if r["direction"] == "dest") > 10_000

        @pytest.mark.container_link("{P}client", profile="modem-28k8", no_delay="auto", engine=ENGINE)
        def test_user(container_link):
            link = container_link
            assert link.use == "user" and link.interface != "eth0"
            # docs/containers.md, "Segments": the server web sends single segments, as its own links set it
            import subprocess
            from ratelimit.containers.lookup import resolve
            pid = resolve("{P}web", ENGINE)[1].pid
            subprocess.run(["nsenter", f"--net=/proc/{{pid}}/ns/net", "ip", "link", "set", "dev", "eth0",
                            "gso_max_segs", "1"], check=True)
            d = link.fetch(link.url("/10000.bin", server="{P}web"))
            model = d.model_seconds(link.model)
            print(f"RESULT user {{d.seconds:.3f}} {{model:.3f}}")
            assert 0.97 < d.seconds / model < 1.03, (d.seconds, model)

        def test_fails_with_links_on(make_container_link):
            make_container_link("{P}web", hosts="container:{P}client", rate="1mbit", mode="shape", engine=ENGINE)
            make_container_link("{P}client", rate="2mbit", mode="shape", engine=ENGINE)
            assert False, "the user's test fails"

        @pytest.mark.container_link("{P}missing", profile="3g", engine=ENGINE)
        def test_missing(container_link):
            pass

        @pytest.mark.container_link("{P}web", hosts="container:{P}client", profile="modem-28k8", colour="red")
        def test_unknown_option(container_link):
            pass
    """))
    r = run_pytest(tmp_path, "test_user.py", "-s")
    out = r.stdout
    print(out)
    assert "PASSED test_user.py::test_server" in out and "PASSED test_user.py::test_user" in out, out + r.stderr
    assert "AssertionError: the user's test fails" in out
    assert f"container_link: --container: no container '{P}missing' in {e.name}" in out
    assert "container_link: 'colour' is not an option (hosts, scenario, profile, " in out
    assert "1 failed, 2 passed" in out and "2 errors in" in out
    results = {use: (float(s), float(m)) for use, s, m in re.findall(r"RESULT (\w+) ([\d.]+) ([\d.]+)", out)}
    assert set(results) == {"server", "user"}
    for use, (seconds, expected) in results.items():
        print(f"{e.name}, the fixture, {use}: {seconds:.3f} s, the model {expected:.3f} s ({seconds / expected:.3f})")
    assert leftovers(e, state) == before


# ---------------------------------------------------------------- the compose example

EXAMPLE = ROOT / "examples" / "compose"


def readme_commands() -> list[str]:
    """The command lines of the example README's shell blocks, comments left out."""
    blocks = re.findall(r"```sh\n(.*?)```", (EXAMPLE / "README.md").read_text(), re.S)
    return [line.split("  #")[0].strip() for b in blocks for line in b.splitlines() if line.strip()]


# each tool's own names and network (198.18.0.0/15)
COMPOSE = {"docker-compose": ("docker", f"{P}ex", "198.18.246.0/24"),
           "podman-compose": ("podman", f"{P}px", "198.18.249.0/24")}


@pytest.mark.parametrize("tool", sorted(COMPOSE))
def test_the_compose_example_runs_as_its_readme_says(engines_up, tmp_path, tool):
    """Each engine's block of the README, run as it says (our names in it): one ratelimit
    command puts both clients behind their cohorts' links, the modem's fetch within 3% of
    the model.  Podman's network is made as the tests make theirs (a CNI bridge without the
    firewall plugin, ``enginekit.Engine.network``) where the README's ``podman network
    create`` adds CNI's firewall chains to the host's filter table."""
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is not installed: bash .ci/install installs it")
    said = readme_commands()
    engine, name, subnet = COMPOSE[tool]
    e = Engine(engine, engines_up)
    base = PODMAN_ENV if engine == "podman" else os.environ
    env = {**base, "RL_IMAGE": e.image, "RL_EXAMPLE": name, "RL_EXAMPLE_SUBNET": subnet,
           "RATELIMIT_STATE_DIR": str(tmp_path / "state")}

    def step(line: str, *argv: str):
        """Run the README's ``line`` (``argv``, our names in it), after checking the README says it."""
        assert line in said, (line, said)
        return sh(*argv, env=env)
    compose = [tool, "-f", str(EXAMPLE / "compose.yaml")]
    web, client = f"{name}-web", f"{name}-client1"
    if engine == "podman":
        assert "export CONTAINERS_CONF=$PWD/containers/containers.conf" in said
        assert "export RL_IMAGE=localhost/$(sh containers/engines.sh image)" in said
        assert "podman network create --internal --subnet 198.18.242.0/24 rl-example-lan" in said
        e.net, e.subnet, e.bridge = f"{name}-lan", subnet, f"{name}0"
        e.network()
    try:
        step(f"{tool} -f examples/compose/compose.yaml up -d", *compose, "up", "-d")
        # Docker's network has a name service; Podman's CNI networks here have none: by address
        where = web if engine == "docker" else e.address_on(web, f"{name}-lan")
        # nginx up, and the name service of the network
        wait_until(lambda: e("exec", client, "curl", "-s", "-o", "/dev/null", f"http://{where}/",
                             check=False).returncode in (0, 22), 120, f"{client} reaching {where}'s nginx")
        assert "ratelimit --container rl-example-web --hosts container:rl-example-client1,container:rl-example-client2 " \
               "--profile modem-28k8" in said
        shape = "ratelimit --container rl-example-web --scenario examples/compose/audience.toml"
        assert shape in said
        audience = tmp_path / "audience.toml"  # the example's, with our names
        audience.write_text((EXAMPLE / "audience.toml").read_text().replace("rl-example", name))
        no_netem = [] if probe(["netem"])["netem"] else ["--delay", "0ms", "--jitter", "0ms", "--loss", "0%"]
        r = ratelimit("--container", web, "--scenario", str(audience), *no_netem, env=env)
        assert r.returncode == 0, r.stderr
        net = subnet.rsplit(".", 1)[0]
        assert f"{engine} container {web}" in r.stdout and f"{name}-client1 = {net}." in r.stdout
        assert f"{name}-client2 = {net}." in r.stdout
        if engine == "docker":
            assert "docker exec rl-example-client1 curl -sS -o /dev/null -w '%{time_total} s\\n' " \
                   "http://rl-example-web/10000.bin" in said
        else:
            assert "podman exec rl-example-client1 curl -sS -o /dev/null -w '%{time_total} s\\n' " \
                   "http://$web/10000.bin" in said
        d = fetch(e, where, client)
        applied = json.loads(ratelimit("--container", web, "--list", "--json", env=env).stdout)["applied"]
        cohorts = {c["name"]: c for c in applied["cohorts"]}
        assert {k: (c["profile"], c["named"]) for k, c in cohorts.items()} == {
            "modem": ("modem-28k8", {f"{name}-client1": [e.address_on(f"{name}-client1", f"{name}-lan")]}),
            "phone": ("3g", {f"{name}-client2": [e.address_on(f"{name}-client2", f"{name}-lan")]})}
        assert applied["links"] == 4
        expected = d.model_seconds(LinkModel.from_summary(applied, cohort="modem",
                                                          delay_stage=probe(["netem"])["netem"]))
        print(f"the compose example ({tool}): {d.seconds:.3f} s, the model {expected:.3f} s "
              f"({d.seconds / expected:.3f})")
        assert 0.97 < d.seconds / expected < 1.03, (d.seconds, expected)
        assert "ratelimit --container rl-example-web --clean" in said
        r = ratelimit("--container", web, "--clean", env=env)
        assert r.returncode == 0 and "removed what ratelimit installed" in r.stdout, r.stderr
        step(f"{tool} -f examples/compose/compose.yaml down -t 0", *compose, "down", "-t", "0")
        assert not e("ps", "-aq", "--filter", f"name={name}").stdout.strip()
        if engine == "docker":
            assert e("network", "ls", "-q", "--filter", f"name={name}-lan").stdout.strip() == ""
    finally:
        sh(*compose, "down", "-t", "0", check=False, env=env)
        if engine == "docker":
            sh("docker", "network", "rm", f"{name}-lan", check=False)
        else:
            for c in ("web", "client1", "client2"):
                e.rm(f"{name}-{c}")
            e.remove()
    assert not e("ps", "-aq", "--filter", f"name={name}").stdout.strip()


# ---------------------------------------------------------------- a daemon that is down


def test_a_docker_daemon_that_is_down_is_one_line_and_changes_nothing(engines_up, tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "RATELIMIT_STATE_DIR": str(state)}
    hint = ("start it (systemctl start docker; where no init system runs, dockerd: docs/lab.md, Container engines "
            "without an init system), or set DOCKER_HOST to its socket\n")
    pod = Engine("podman", engines_up)
    pod.network()
    try:
        pod.run(f"{P}pweb", pod.image, "sleep", "600")

        def router():
            records = sorted(str(p) for p in state.rglob("*.json")) if state.exists() else []
            return qdiscs(pod, f"{P}pweb"), run_dir(), records
        before = router()
        sh("sh", ENGINES_SH, "stop", timeout=60)
        try:
            down = "ratelimit: --container: docker is installed but its daemon does not answer (Cannot connect to " \
                   "the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?); "
            for argv in (["--profile", "modem-28k8"], ["--hosts", "container:x", "--rate", "1mbit"], ["--clean"],
                         ["--list"]):
                r = ratelimit("--container", f"{P}web", "--engine", "docker", *argv, env=env)
                assert (r.returncode, r.stdout, r.stderr) == (3, "", down + hint), (argv, r.stderr)
            r = ratelimit("--container", f"{P}web", "--profile", "modem-28k8", env=env)
            assert r.returncode == 3 and r.stderr.startswith(
                f"ratelimit: --container: no container '{P}web' in docker or podman (docker not asked: docker is "
                f"installed but its daemon does not answer (Cannot connect") and r.stderr.count("\n") == 1, r.stderr
            # Podman has no daemon: its containers are found while Docker's is down
            r = ratelimit("--container", f"{P}pweb", "--list", env=env)
            assert r.returncode == 0 and "nothing installed by ratelimit" in r.stdout, r.stderr
        finally:
            sh("sh", ENGINES_SH, "start", timeout=60)
        # a socket that is not there: the same, with its address
        gone = {**env, "DOCKER_HOST": f"unix:///run/{P}none.sock"}
        r = ratelimit("--container", f"{P}web", "--engine", "docker", "--profile", "modem-28k8", env=gone)
        assert (r.returncode, r.stdout) == (3, ""), r.stderr
        assert r.stderr == down.replace("/var/run/docker.sock", f"/run/{P}none.sock") + hint
        assert router() == before
    finally:
        pod.remove()


# ---------------------------------------------------------------- IPv6


@pytest.fixture
def engine6(request, engines_up):
    """The engine's network with IPv6 too (2001:db8::/32), removed after the test."""
    e = Engine(request.param, engines_up, ipv6=True)
    e.network()
    try:
        yield e
    finally:
        e.remove()


@pytest.mark.parametrize("engine6,use", [("podman", "server"), ("docker", "user")], indirect=["engine6"])
def test_a_v6_fetch_is_shaped_as_a_v4_one(engine6, use, ct_state):
    """On a network with IPv4 and IPv6, a container's two addresses are two links of the
    profile, and a fetch over each takes what the model gives for its packets."""
    e = engine6
    web4 = web_and_client(e, prefix=P)
    web6, client4, client6 = e.address6(f"{P}web"), e.address(f"{P}client"), e.address6(f"{P}client")
    assert web6.startswith("2001:db8:") and client6.startswith("2001:db8:"), (web6, client6)
    # the address is usable once duplicate address detection is over
    wait_until(lambda: e("exec", f"{P}client", "curl", "-sg", "-o", "/dev/null", f"http://[{web6}]/",
                         check=False).returncode == 0, 120, f"{P}client reaching [{web6}] (duplicate address detection)")
    if use == "user":  # docs/containers.md, "Segments": the server sends single segments
        single_segments(e, f"{P}web")
    before = qdiscs(e, f"{P}web", f"{P}client")
    shaped = f"{P}web" if use == "server" else f"{P}client"
    hosts = ["--hosts", f"container:{P}client"] if use == "server" else []
    r = ratelimit("--container", shaped, *hosts, "--profile", "modem-28k8", *delay_args())
    assert r.returncode == 0, r.stderr
    try:
        listed = json.loads(ratelimit("--container", shaped, "--list", "--json").stdout)
        applied = listed["applied"]
        assert listed["container"]["use"] == use and sorted(applied["hosts"]) == sorted([client4, client6])
        assert applied["links"] == 4  # each address its own link, each way
        v4 = model(applied)
        for web, m in ((web4, v4), (f"[{web6}]", dataclasses.replace(v4, ipv6=True))):
            d = fetch(e, web, f"{P}client")
            assert (d.http_code, d.bytes) == (200, 10_000)
            expected = d.model_seconds(m)
            print(f"{e.name}, {use}, IPv{6 if m.ipv6 else 4}: {d.seconds:.3f} s, the model {expected:.3f} s "
                  f"({d.seconds / expected:.3f})")
            assert 0.97 < d.seconds / expected < 1.03, (web, d.seconds, expected)
        rows = json.loads(ratelimit("--container", shaped, "--stats", "--json").stdout)["links"]
        carried = {r["host"]: r["bytes"] for r in rows if r["direction"] == "dest"}
        assert carried[client4] > 10_000 and carried[client6] > 10_000, carried
    finally:
        r = ratelimit("--container", shaped, "--clean")
    assert r.returncode == 0, r.stderr
    assert qdiscs(e, f"{P}web", f"{P}client") == before


# ---------------------------------------------------------------- restarts, save and restore


@pytest.mark.parametrize("engine", ["podman"], indirect=True)  # the same code with Docker: one engine's time
def test_restarts_save_and_restore_follow_the_containers(engine, ct_state, tmp_path):
    """A restarted server's links went with its veth: --list says so and forgets the record
    and its IFB device; ``save`` keeps both uses' links by container, ``restore`` puts them
    where the containers are now (new veths, addresses resolved again, the server's own
    device sending single segments again) and skips, with a notice, a container that is
    not running."""
    e = engine
    web_and_client(e, prefix=P)
    web, client = f"{P}web", f"{P}client"
    before = qdiscs(e, web, client)

    def listed(name):
        r = ratelimit("--container", name, "--list", "--json")
        assert r.returncode == 0, r.stderr
        return [json.loads(line) for line in r.stdout.splitlines()], r.stderr
    try:
        assert ratelimit("--container", web, "--hosts", f"container:{client}", "--rate", "1mbit",
                         "--mode", "shape").returncode == 0
        old_veth = listed(web)[0][0]["container"]["interface"]
        e("restart", "-t", "0", web)
        shown, said = listed(web)
        assert said == (f"ratelimit: podman container '{web}': the links recorded on {old_veth} went with that device "
                        f"(the container was restarted); record and IFB device removed\n")
        assert not Path(f"/sys/class/net/{ifb_name(old_veth)}").exists()
        assert not any(d["applied"] for d in shown) and not list(ct_state.rglob("*.json"))
        assert listed(web)[1] == ""  # said once
        # save both uses, restart both containers, restore
        for argv in ([web, "--hosts", f"container:{client}", "--rate", "1mbit"], [client, "--rate", "2mbit"]):
            r = ratelimit("--container", *argv, "--mode", "shape")
            assert r.returncode == 0, r.stderr
        veth = listed(client)[0][0]["container"]["interface"]
        saved = tmp_path / "links.json"
        r = ratelimit("save", str(saved))
        assert r.returncode == 0 and "saved 2 link configuration(s)" in r.stdout, r.stdout + r.stderr
        assert sorted(link["container"][4] for link in json.loads(saved.read_text())["links"]) == ["server", "user"]
        e("restart", "-t", "0", web, client)
        r = ratelimit("restore", str(saved))
        assert r.returncode == 0, r.stderr
        server_now, user_now = listed(web)[0][0], listed(client)[0][0]
        address = e.address(client)
        assert server_now["applied"]["named"] == {client: [address]} and server_now["applied"]["hosts"] == [address]
        assert server_now["container"]["use"] == "server" and server_now["applied"]["server_side"] is True
        assert gso_max_segs(e, web) == 1
        assert user_now["container"]["use"] == "user" and user_now["applied"]["hosts"] == [address]
        assert user_now["container"]["interface"] != veth  # the veth of this start, not the one saved
        assert not Path(f"/sys/class/net/{veth}").exists()
        # a container that is not running is skipped with a notice
        e("stop", "-t", "0", client)
        r = ratelimit("restore", str(saved))
        assert r.returncode == 3, r.stderr
        assert f"ratelimit: podman container '{client}' is not running (exited; start it first): its links are " \
               f"left out (run this again once it runs)\n" in r.stderr
        assert f"not restored (restore: cohort main: hosts: podman container '{client}' is not running" in r.stderr
    finally:
        e("start", client, check=False)  # a stopped user's IFB device goes with its record on its next run
        for name in (web, client):
            ratelimit("--container", name, "--clean")
    def host(text):  # the veths are the restarts' own
        return sorted(re.sub(r"dev veth\w+", "dev veth", line) for line in text.splitlines())
    assert host(qdiscs(e, web, client)[0]) == host(before[0]) and not list(ct_state.rglob("*.json"))


@pytest.mark.parametrize("engine", ["docker"], indirect=True)  # the README names no engine: Docker's, or Podman's
def test_the_readme_container_commands_run(engine, ct_state, tmp_path):
    """The README's container block, run as written with our containers' names (tests/readmekit.py),
    and without the profiles' delays where the kernel has no netem:
    the client as one 3G user, then the web server of that client over a modem; each is
    applied and listed, and cleaning both leaves nothing of ours."""
    import shlex
    from readmekit import commands
    e = engine
    web_and_client(e, prefix=P)
    before = leftovers(e, tmp_path / "state")
    # on a kernel without netem, every netem impairment of the profiles left out (as the lab's --no-delay)
    no_netem = [] if probe(["netem"])["netem"] else [
        *(a for k in ("delay", "jitter") for a in (f"--{k}", "0ms")),
        *(a for k in ("loss", "duplicate", "corrupt", "reorder") for a in (f"--{k}", "0%"))]
    lines = commands("container")
    assert lines, "the README has no container commands"
    for line in lines:
        ours = line.replace("container:client", f"container:{P}client").replace("--container client",
                                                                               f"--container {P}client")
        ours = ours.replace("--container web", f"--container {P}web")
        assert ours != line
        r = ratelimit(*shlex.split(ours)[1:], *no_netem)
        assert r.returncode == 0, f"{ours}: {r.stderr.strip()[-600:]}"
        name = shlex.split(ours)[2]
        listed = [json.loads(out) for out in ratelimit("--container", name, "--list", "--json").stdout.splitlines()]
        assert any(one["applied"] for one in listed), (ours, listed)
    for name in (f"{P}web", f"{P}client"):
        assert ratelimit("--container", name, "--clean").returncode == 0
    assert leftovers(e, tmp_path / "state") == before
