"""Containers, the pure half (``ratelimit.containers``): names checked before an engine
runs, ``inspect`` JSON read into a ``Container`` (tests/cases/containers/ holds what the
real engines printed), the one-line refusals, and the network two containers share.
The half that runs engines is tests/test_containers_engines.py."""

import dataclasses
import json
from pathlib import Path

import pytest

from ratelimit.containers import lookup
from ratelimit.containers.lookup import Container, ContainerError, Endpoint
from ratelimit.errors import FieldError

CASES = Path(__file__).parent / "cases" / "containers"


def case(name):
    """(engine, the inspect JSON text) of a case captured from a real engine."""
    data = json.loads((CASES / f"{name}.json").read_text())
    return data["engine"], json.dumps(data["inspect"])


@pytest.mark.parametrize("name", ["web", "rlct-web", "a", "web_1.b-2", "0123456789ab", "A" * 128])
def test_names_the_engines_take_pass(name):
    assert lookup.check_name(name) == name


@pytest.mark.parametrize("name", ["", "-web", ".web", "_web", "web;reboot", "web$(id)", "we b", "web/x",
                                  "web\n", "`id`", "A" * 129, "café", "web:1", None])
def test_other_names_are_refused_before_anything_runs(name):
    with pytest.raises(FieldError) as e:
        lookup.check_name(name)
    assert str(e.value).startswith("--container: ")
    assert "is not a container name or id" in str(e.value) and "\n" not in str(e.value)


def test_an_engine_not_installed_is_one_line():
    with pytest.raises(ContainerError) as e:
        lookup.engines("podman", which=lambda name: None)
    assert str(e.value) == "--container: podman is not installed (apt-get install podman)"
    with pytest.raises(ContainerError) as e:
        lookup.engines(None, which=lambda name: None)
    assert str(e.value) == "--container: no container engine (docker or podman) is installed"
    assert [e.name for e in lookup.engines(None, which=lambda n: f"/usr/bin/{n}" if n == "podman" else None)] \
        == ["podman"]
    with pytest.raises(FieldError):
        lookup.engines("lxc")


@pytest.mark.parametrize("name", sorted(p.stem for p in CASES.glob("*.json")))
def test_real_inspect_output_reads_as_the_engine_said(name):
    engine, text = case(name)
    expected = json.loads((CASES / f"{name}.json").read_text())["expected"]
    c = lookup.parse_inspect(engine, text, "x")
    assert (c.engine, c.name, c.status, c.network_mode, c.id[:12]) == \
        (engine, expected["name"], expected["status"], expected["network_mode"], expected["id12"])
    assert (c.pid > 0) == (expected["status"] == "running")
    assert [(e.network, e.ipv4, e.mac is not None) for e in c.networks] == \
        [tuple(n) for n in expected["networks"]]
    assert lookup.refusal(c) == (expected["refusal"].format(engine=engine) if expected["refusal"] else None)


def test_inspect_output_of_another_shape_is_one_line():
    with pytest.raises(ContainerError) as e:
        lookup.parse_inspect("docker", "[]", "web")
    assert str(e.value).startswith("--container: docker inspect 'web' did not answer as expected (IndexError")
    with pytest.raises(ContainerError):
        lookup.parse_inspect("podman", "not json", "web")


def make(name="web", status="running", pid=42, mode="rlct-net", nets=("rlct-net",), rootless=False):
    return Container("podman", "ab" * 32, name, status, pid if status == "running" else 0, mode,
                     tuple(Endpoint(n, f"198.18.240.{i + 2}", None, f"02:00:00:00:00:0{i}") for i, n in enumerate(nets)),
                     rootless)


@pytest.mark.parametrize("c,says", [
    (make(status="exited"), "podman container 'web' is not running (exited; start it first)"),
    (make(status="created"), "podman container 'web' is not running (created; start it first)"),
    (make(mode="host", nets=()), "podman container 'web' uses host networking: it has no interface of its own "
                                 "(use --interface on the host's device instead)"),
    (make(mode="none", nets=()), "podman container 'web' has no network (--network none)"),
    (make(mode="slirp4netns", nets=()), "podman container 'web' uses user-mode networking (slirp4netns): it has "
                                        "no host-side veth; run it on a bridge network, or shape inside it with "
                                        "--netns after binding /proc/PID/ns/net (docs/containers.md, Rootless Podman)"),
    (make(rootless=True), "podman container 'web' belongs to rootless Podman, whose containers have no host-side "
                          "veth and whose namespaces only their user may enter; run ratelimit and the container as "
                          "root (docs/containers.md, Rootless Podman)"),
    (make(mode="bridge", nets=()), "podman container 'web' is on no network"),
    (make(), None),
    (make(mode="container:" + "cd" * 32, nets=()), None),  # followed to the owner by resolve
])
def test_refusals_name_the_container_and_say_why(c, says):
    assert lookup.refusal(c) == says


def test_the_network_is_the_only_one_or_the_one_named():
    one, two = make(), make(nets=("front", "back"))
    assert lookup.choose_network(one, None).network == "rlct-net"
    assert lookup.choose_network(two, "back").ipv4 == "198.18.240.3"
    with pytest.raises(ContainerError) as e:
        lookup.choose_network(two, None)
    assert str(e.value) == "--container: podman container 'web' is on 2 networks (front, back); name one with --network"
    with pytest.raises(ContainerError) as e:
        lookup.choose_network(two, "middle")
    assert str(e.value) == "--network: podman container 'web' is not on network 'middle' (it is on: front, back)"


def test_a_client_container_resolves_on_the_network_it_shares_with_the_server():
    server, client = make(nets=("front", "back")), make("client", nets=("back", "other"))
    assert lookup.shared_network(server, client, None) == "back"
    assert lookup.shared_network(server, client, "back") == "back"
    with pytest.raises(ContainerError) as e:
        lookup.shared_network(server, make("far", nets=("elsewhere",)), None)
    assert str(e.value) == "--hosts: podman container 'far' and podman container 'web' share no network"
    both = make("both", nets=("front", "back"))
    with pytest.raises(ContainerError) as e:
        lookup.shared_network(server, both, None)
    assert str(e.value) == ("--hosts: podman container 'both' and podman container 'web' share 2 networks "
                            "(front, back); name one with --network")


def test_the_namespace_name_is_ratelimits_and_the_owners():
    assert lookup.netns_name(make()) == "rl-ct-abababababab"
    from ratelimit.spec.names import check_netns
    assert check_netns(lookup.netns_name(make())) == "rl-ct-abababababab"


def test_the_record_keeps_the_container_and_the_names_of_its_hosts():
    from ratelimit import service
    from ratelimit.state import records
    from ratelimit.spec.summary import describe, summary
    req = service.make_request("eth0", hosts=["198.18.240.3"], per="host", profile="modem-28k8", netns="rl-ct-ab")
    req = service.for_container(req, ("podman", "rlct-web", "ab" * 32, "rlct-net", "server"),
                                (("rlct-client", ("198.18.240.3",)),))
    back = records.from_json(json.loads(json.dumps(records.to_json(req))))
    assert back == req and back.only.named == (("rlct-client", ("198.18.240.3",)),)
    s = summary(back)
    assert s["container"] == {"engine": "podman", "name": "rlct-web", "id": "ab" * 32, "network": "rlct-net",
                              "use": "server"}
    assert s["named"] == {"rlct-client": ["198.18.240.3"]}
    assert describe(s).endswith("; podman container rlct-web (abababababab) on rlct-net, as the server; "
                                "rlct-client = 198.18.240.3")


def test_a_servers_record_on_its_veth_faces_it_and_reads_back_so():
    """The server use on the host-side veth: the record says the links face the server
    (``server_side``), and a record from before (no field) reads back as a router's side."""
    from ratelimit import service
    from ratelimit.state import records
    from ratelimit.plan.compile import compile_plan, device_of, ifb_name
    from ratelimit.spec.summary import describe, summary
    req = service.make_request("veth1a2b3c4", hosts=["198.18.240.3"], per="host", profile="modem-28k8", delay="0ms")
    req = service.for_container(req, ("podman", "rlct-web", "ab" * 32, "rlct-net", "server"),
                                (("rlct-client", ("198.18.240.3",)),), server_side=True)
    assert req.server_side
    back = records.from_json(json.loads(json.dumps(records.to_json(req))))
    assert back == req and summary(back)["server_side"] is True
    assert describe(summary(back)).endswith("as the server (its host-side veth: down arrives on it); "
                                            "rlct-client = 198.18.240.3")
    before = records.to_json(req)
    del before["server_side"]
    assert records.from_json(before).server_side is False
    plan = compile_plan(req)
    assert {f.direction: f.dev for f in plan.flows} == {"dest": ifb_name("veth1a2b3c4"), "source": "veth1a2b3c4"}
    assert [device_of(req, d) for d in ("dest", "source")] == [ifb_name("veth1a2b3c4"), "veth1a2b3c4"]
    # a user's links (and a router's) are the other way round
    user = service.for_container(req, ("podman", "rlct-client", "ab" * 32, "rlct-net", "user"), ())
    assert not user.server_side
    assert {f.direction: f.dev for f in compile_plan(user).flows} == {"dest": "veth1a2b3c4",
                                                                     "source": ifb_name("veth1a2b3c4")}
    with pytest.raises(FieldError) as e:
        compile_plan(dataclasses.replace(req, mode="shape", queues=2))
    assert str(e.value) == ("--queues: 2 spreads the links a device sends, and a server's links come in on its "
                            "host-side veth (through an IFB device); use --queues 1")


DOCKER_DOWN = "Cannot connect to the Docker daemon at unix:///run/rlct2-none.sock. Is the docker daemon running?"


def fake_engine(tmp_path, name, stderr, code=1):
    """An engine's command that answers every call as the real one did with its daemon down."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {json.dumps(stderr)} >&2\nexit {code}\n")
    path.chmod(0o755)
    return lookup.Engine(name, str(path))


def test_a_docker_daemon_that_does_not_answer_is_one_line_saying_what_to_do(tmp_path, monkeypatch):
    docker = fake_engine(tmp_path, "docker", DOCKER_DOWN)
    with pytest.raises(ContainerError) as e:
        docker.inspect("web")
    assert str(e.value) == (f"--container: docker is installed but its daemon does not answer ({DOCKER_DOWN}); "
                            f"start it (systemctl start docker; where no init system runs, dockerd: docs/lab.md, "
                            f"Container engines without an init system), or set DOCKER_HOST to its socket")
    # without --engine, podman is asked all the same, and the line says why docker was not
    podman = fake_engine(tmp_path, "podman", "Error: no container with name or id \"web\" found: no such container",
                         code=125)
    monkeypatch.setattr(lookup, "engines", lambda engine=None: [docker, podman] if engine is None else [docker])
    monkeypatch.setattr(lookup.os, "geteuid", lambda: 0)  # what root reads
    with pytest.raises(ContainerError) as e:
        lookup.find("web")
    says = str(e.value)
    assert says.startswith("--container: no container 'web' in docker or podman (docker not asked: docker is "
                           "installed but its daemon does not answer (Cannot connect") and "\n" not in says
    assert says.endswith("or set DOCKER_HOST to its socket)")
    monkeypatch.setattr(lookup.os, "geteuid", lambda: 1000)  # another user is told where rootless Podman's are
    with pytest.raises(ContainerError) as e:
        lookup.find("web")
    assert str(e.value) == says + " (rootless Podman's containers are seen only by their own user)"
    with pytest.raises(ContainerError) as e:
        lookup.find("web", "docker", "--hosts")
    assert str(e.value).startswith("--hosts: docker is installed but its daemon does not answer")


# ---------------------------------------------------------------- container:NAME in a scenario's cohorts

SCENARIO = """
description = "two modems and a 3G phone, as containers"
[cohort.modems]
description = "28.8k modems"
hosts = {modems}
profile = "modem-28k8"
[cohort.phone]
description = "a 3G phone"
hosts = {phone}
profile = "3g"
"""


def fake_engine_with(monkeypatch, tmp_path, *known):
    """containers.find answering from ``known`` (Containers in this process's namespace, so
    that resolve's check of their namespaces holds), as one engine would."""
    import os
    by_name = {c.name: dataclasses.replace(c, pid=os.getpid()) for c in known}

    def find(name, engine=None, field_name="--container"):
        lookup.check_name(name, field_name)
        if name not in by_name:
            raise ContainerError(f"{field_name}: no container '{name}' in podman")
        return by_name[name]
    monkeypatch.setattr(lookup, "find", find)
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))


def dry_run(tmp_path, modems, phone, *extra):
    import io
    from ratelimit.cli.main import Console, main
    path = tmp_path / "audience.toml"
    path.write_text(SCENARIO.format(modems=modems, phone=phone))
    out, err = io.StringIO(), io.StringIO()
    code = main(["--interface", "veth1", "--scenario", str(path), "--dry-run", *extra], Console(out, err))
    return code, out.getvalue(), err.getvalue().strip(), str(path)


def clients(*names, nets=("rlct-net",)):
    return [Container("podman", f"{i:02d}" * 32, n, "running", 1, nets[0],
                      tuple(Endpoint(net, f"198.18.24{j}.{i + 2}", None, "02:00:00:00:00:01") for j, net in enumerate(nets)))
            for i, n in enumerate(names)]


def test_a_scenario_naming_containers_plans_what_their_addresses_plan(monkeypatch, tmp_path):
    fake_engine_with(monkeypatch, tmp_path, *clients("modem1", "modem2", "phone"))
    code, named, err, _ = dry_run(tmp_path, '["container:modem1", "container:modem2"]', '"container:phone"')
    assert code == 0, err
    code, plain, err, _ = dry_run(tmp_path, '["198.18.240.2", "198.18.240.3"]', '"198.18.240.4"')
    assert code == 0, err
    strip = [line for line in named.splitlines() if not line.startswith("# ratelimit")]
    assert strip == [line for line in plain.splitlines() if not line.startswith("# ratelimit")]
    head = named.splitlines()[0]
    assert "modem1 = 198.18.240.2; modem2 = 198.18.240.3; phone = 198.18.240.4" in head, head


def test_each_cohort_keeps_the_names_of_its_containers(monkeypatch, tmp_path):
    from ratelimit.profiles import scenario
    from ratelimit import service
    from ratelimit.spec.summary import summary
    from ratelimit.containers.targets import scenario_hosts
    fake_engine_with(monkeypatch, tmp_path, *clients("modem1", "modem2", "phone"))
    text = SCENARIO.format(modems='["container:modem1", "198.18.0.9"]', phone='"container:phone"')
    asks = scenario_hosts(scenario.parse(text, "scenario a.toml"), None, network=None, engine=None)
    assert [(a.hosts, a.named) for a in asks] == [
        (["198.18.240.2", "198.18.0.9"], (("modem1", ("198.18.240.2",)),)),
        (["198.18.240.4"], (("phone", ("198.18.240.4",)),))]
    s = summary(service.make_request("veth1", scenario=asks))
    assert [c.get("named") for c in s["cohorts"]] == [{"modem1": ["198.18.240.2"]}, {"phone": ["198.18.240.4"]}]
    plain = scenario.parse(SCENARIO.format(modems='"198.18.0.9"', phone='"198.18.0.10"'))
    assert scenario_hosts(plain, None, network=None, engine=None) is plain  # no container: no engine asked


@pytest.mark.parametrize("modems,extra,says", [
    ('["container:modem1", "container:bad;name"]', [],
     "hosts: 'bad;name' is not a container name or id (a letter or digit, then letters, digits, '_', '.' or '-'; "
     "128 at most)"),
    ('"container:nobody"', [], "hosts: no container 'nobody' in podman"),
    ('"container:twonets"', [], "hosts: podman container 'twonets' is on 2 networks (rlct-net, other); "
                                "name one with --network"),
    ('"container:twonets"', ["--network", "elsewhere"],
     "--network: podman container 'twonets' is not on network 'elsewhere' (it is on: rlct-net, other)"),
])
def test_a_cohorts_container_that_cannot_be_resolved_names_the_field(monkeypatch, tmp_path, modems, extra, says):
    fake_engine_with(monkeypatch, tmp_path, *clients("modem1", "phone"), *clients("twonets", nets=("rlct-net", "other")))
    code, out, err, path = dry_run(tmp_path, modems, '"container:phone"', *extra)
    where = "" if says.startswith("--network") else f"scenario {path}: [cohort.modems] "
    assert (code, out, err) == (3 if "podman" in says else 2, "", f"ratelimit: {where}{says}")


def test_engine_and_network_need_a_container_somewhere(monkeypatch, tmp_path):
    fake_engine_with(monkeypatch, tmp_path)
    code, out, err, _ = dry_run(tmp_path, '"198.18.0.9"', '"198.18.0.10"', "--network", "rlct-net")
    assert (code, out, err) == (2, "", "ratelimit: --engine/--network: they go with --container, or container:NAME "
                                       "in --hosts or a scenario's hosts")
