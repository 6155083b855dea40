"""Audiences on a real kernel: a plan of several cohorts applied, read and removed; bad
scenarios and mixes leave the router as it was; each cohort's links behave like its own
link model, measured through the namespace lab (within 5%); a whole-host link carries
every connection and every packet of its host.

Namespaces come from conftest and the lab fixture and are removed even when a test fails.
"""

import json
import os
import subprocess
import sys

import pytest

from bench.common import listening, wait_until
from ratelimit import service
from ratelimit.kernel import netns as kernel_netns
from ratelimit.kernel.probe import probe
from ratelimit.lab.core import Lab
from ratelimit.lab.link import LinkSpec
from ratelimit.profiles import scenario
from ratelimit.spec.linkmodel import LinkModel
from ratelimit.spec.summary import summary
from tcdump import tc_dump
from test_scenario import BAD_MIXES, BAD_SCENARIOS

pytestmark = pytest.mark.netns
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AUDIENCE = """
description = "a scenario of two cohorts"
[cohort.dialup]
description = "a modem per person"
hosts = "198.18.1.2"
profile = "modem-28k8"
[cohort.office]
source = "an office's line, a link per connection"
hosts = "198.18.1.3,2001:db8::3"
ports = "10000-10009"
per = "port"
profile = "cable"
"""


def ratelimit(*argv):
    return subprocess.run([sys.executable, "-m", "ratelimit", *argv], capture_output=True, text=True, cwd=ROOT)


def no_delay() -> list[str]:
    return [] if probe(["netem"])["netem"] else ["--delay", "0ms"]  # this kernel has no delay stage


def test_a_scenario_is_applied_listed_with_its_cohorts_and_removed(rlhd, tmp_path):
    ns = rlhd()
    f = tmp_path / "audience.toml"
    f.write_text(AUDIENCE)
    done = ratelimit("--if", "rlh0", "--netns", ns, "--scenario", str(f), *no_delay())
    assert done.returncode == 0, done.stderr
    assert "2 cohorts (shape; dialup (modem-28k8, per host, ppp-vj): 2 links; office (cable, per port" in done.stdout
    stats = json.loads(ratelimit("--if", "rlh0", "--netns", ns, "--stats", "--json").stdout)
    seen = {(r["cohort"], r["profile"], r["direction"], r["host"], r["port"]) for r in stats["links"]}
    assert ("dialup", "modem-28k8", "dest", "198.18.1.2", None) in seen
    assert ("office", "cable", "source", "2001:db8::3", 10009) in seen and len(seen) == 2 + 40
    assert [c["name"] for c in stats["applied"]["cohorts"]] == ["dialup", "office"]
    listed = ratelimit("--if", "rlh0", "--netns", ns, "--list")
    assert listed.returncode == 0 and "198.18.1.2" in listed.stdout
    assert ratelimit("--if", "rlh0", "--netns", ns, "--clean").returncode == 0
    assert "htb" not in subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "rlh0"], capture_output=True,
                                       text=True).stdout


SCENARIO_CASES = BAD_SCENARIOS[::2]  # every other one: the pure tests have them all
MIX_CASES = BAD_MIXES[::2]


@pytest.mark.parametrize("kind,text,says", [("scenario", t, s) for t, s in SCENARIO_CASES] +
                         [("mix", t, s) for t, s in MIX_CASES])
def test_a_bad_scenario_or_mix_leaves_the_router_as_it_was(rlhd, tmp_path, kind, text, says):
    ns = rlhd()
    service.apply(service.make_request("rlh0", netns=ns, hosts="198.18.1.2", ports="10000-10009", mode="shape",
                                       rate="200kbit"))
    before = tc_dump(ns, "rlh0", "rl-rlh0")
    if kind == "scenario":
        f = tmp_path / "bad.toml"
        f.write_text(text)
        argv = ["--scenario", str(f)]
    else:
        argv = ["-h", "198.18.1.2,198.18.1.3", "--mix", text]
    result = ratelimit("--if", "rlh0", "--netns", ns, *argv)
    assert result.returncode in (2, 3), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and says in result.stderr
    assert tc_dump(ns, "rlh0", "rl-rlh0") == before


@pytest.fixture
def lab3(tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    made = []

    def make(tag, clients=3):
        # RFC 6298's 1 s RTO floor: Linux's 200 ms fires while an ISDN line still sends a
        # full segment (0.19 s), so its server sends again what is on the way (docs/lab.md)
        lab = Lab.up(f"tc{os.getpid() % 100000}_{tag}", clients=clients, ports="10000-10009",
                     link=LinkSpec(profile="modem-28k8", no_delay=not probe(["netem"])["netem"]), server_tcp="rfc6298")
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.down()


def _apply(lab, text, **names):
    """The scenario ``text`` (with {c1}.. for the clients' addresses, and ``names``) on the
    lab's router; each client made the host its cohort's model assumes (no TCP timestamps
    behind header compression); returns the request."""
    text = text.format(**{f"c{i}": lab.client(i).address for i in range(1, len(lab.clients) + 1)}, **names)
    extra = {} if probe(["netem"])["netem"] else {"delay": "0ms", "jitter": "0ms", "loss": "0%"}
    req = service.make_request(lab.topo.router_client_if, netns=lab.topo.router,
                               scenario=scenario.parse(text, "test scenario"), **extra)
    service.apply(req)
    for c in req.cohorts:
        for i in range(1, len(lab.clients) + 1):
            if any(str(h) == lab.client(i).address for h in c.hosts):
                kernel_netns.set_sysctl(lab.client(i).netns, "net.ipv4.tcp_timestamps", 0 if c.link.vj else 1)
    return req


THREE_LAYERS = """
description = "three link layers on one router"
[cohort.modems]
description = "28.8k modems (PPP, VJ header compression)"
hosts = "{c1}"
profile = "modem-28k8"
queue = "64kb"
[cohort.isdn]
description = "ISDN B channels (synchronous PPP)"
hosts = "{c2}"
profile = "isdn-64k"
queue = "64kb"
[cohort.adsl]
description = "ADSL (ATM cells), held at 400 kbit/s so a download takes seconds"
hosts = "{c3}"
profile = "dsl"
rate = "400kbit"
queue = "128kb"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against each cohort's link model, within 5%
def test_each_cohort_is_its_own_link_model_at_once(lab3):
    """Three cohorts of three link layers (PPP with compressed headers, synchronous PPP,
    ATM cells over the modems' size table) downloading at the same time: each within 5%
    of its own cohort's model (files sized for at least 2 s at its rate)."""
    lab = lab3("three")
    req = _apply(lab, THREE_LAYERS)
    _each_within_its_model(lab, req, {"modems": (1, lab.url("/10000.bin")), "isdn": (2, lab.url("/100000.bin")),
                                      "adsl": (3, lab.url("/100000.bin"))})


def _each_within_its_model(lab, req, fetches: dict) -> None:
    """Fetch ``fetches`` (cohort -> (client, url)) all at once, twice: the second time each
    is within 5% of its cohort's model, and sized for at least 2 s of it."""
    delay_stage = probe(["netem"])["netem"]
    models = {c.name: LinkModel.from_summary(summary(req), cohort=c.name, delay_stage=delay_stage) for c in req.cohorts}

    def fetch_all() -> dict:
        procs = {name: lab.client(client).popen(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{size_header} %{size_request} %{time_total}",
             url], stdout=subprocess.PIPE, text=True) for name, (client, url) in fetches.items()}
        return {name: p.communicate(timeout=120)[0].split() for name, p in procs.items()}
    fetch_all()  # once before: a lab's first fetch after an apply takes longer (measured without cohorts too)
    for name, (size, header, request, seconds) in fetch_all().items():
        expected = models[name].fetch_seconds(int(size), header=int(header), request=int(request))
        print(f"{name}: {int(size):,} bytes in {float(seconds):.2f} s, its model {expected:.2f} s")
        assert expected >= 2.0
        assert 0.95 < float(seconds) / expected < 1.05, name


WHOLE_HOST = """
description = "one person behind one modem, whatever ports their programs use"
[cohort.person]
description = "a 28.8k modem"
hosts = "{c1}"
ports = "all"
profile = "modem-28k8"
queue = "64kb"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_a_whole_host_link_carries_every_connection_and_a_ping(lab3):
    """Per host without ports: six parallel fetches on whatever ports the client's kernel
    picks share one modem (the time one modem needs for all their frames, within 5%), and
    a ping from that client crosses the same link."""
    lab = lab3("whole", clients=1)
    req = _apply(lab, WHOLE_HOST)
    model = LinkModel.from_summary(summary(req), delay_stage=probe(["netem"])["netem"])
    kernel_netns.set_sysctl(lab.client(1).netns, "net.ipv4.ip_local_port_range", "20000 60999")  # not the lab's
    lab.download(f"/{10_000}.bin")  # once before (see above)
    n, size = 6, 10_000
    r = lab.client(1).run(["curl", "-sS", "--parallel", "--parallel-immediate", "--parallel-max", str(n),
                           "-w", "%{size_download} %{size_header} %{time_total} %{local_port}\\n",
                           *sum((["-o", "/dev/null", lab.url(f"/{size}.bin")] for _ in range(n)), [])], timeout=300)
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    assert r.returncode == 0 and len(rows) == n, r.stderr
    assert all(20000 <= int(port) <= 60999 for *_, port in rows)  # ports the lab's link would not select
    frames = sum(model.response_frame_bytes(size, header=int(h)) for _, h, _, _ in rows)
    expected = model.connect_seconds() + frames * 8 / model.layer.carried_bps(model.down_bps)
    seconds = max(float(t) for _, _, t, _ in rows)
    print(f"{n} x {size:,} bytes on ephemeral ports through one modem: {seconds:.2f} s, the model {expected:.2f} s")
    assert 0.95 < seconds / expected < 1.05
    _ping_crosses(lab, 1, lambda r: r["host"] == lab.client(1).address)


def _ping_crosses(lab, client: int, mine) -> None:
    """Three pings from client ``client`` to the server each cross the links whose statistics
    rows ``mine`` picks, both ways (their packet counters grow by three or more)."""
    def packets():
        return {r["direction"]: r["packets"] for r in lab.statistics()["links"] if mine(r)}
    before = packets()
    ping = lab.client(client).run(["ping", "-c", "3", "-i", "0.2", "-w", "20", lab.server.address], timeout=60)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    after = packets()
    assert after["dest"] - before["dest"] >= 3 and after["source"] - before["source"] >= 3


OFFICE = """
description = "an office of two people behind one line"
[cohort.office]
description = "one 28.8k modem shared by everyone in the office"
hosts = ["{c1}", "{c2}"]
per = "shared"
profile = "modem-28k8"
queue = "64kb"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against the link model, within 5%
def test_a_shared_link_carries_every_host_of_its_cohort(lab3):
    """One link for a whole cohort: two clients fetching at once take the time one modem
    needs for both their frames (within 5%), and the statistics show one link each way."""
    lab = lab3("office", clients=2)
    req = _apply(lab, OFFICE)
    model = LinkModel.from_summary(summary(req), delay_stage=probe(["netem"])["netem"])
    assert [(r["cohort"], r["port"]) for r in lab.statistics()["links"]] == [("office", None)] * 2  # dest, source
    size = 10_000
    for i in (1, 2):
        lab.download(f"/{size}.bin", client=i)  # once before (see above)
    procs = [lab.client(i).popen(["curl", "-sS", "-o", "/dev/null", "-w", "%{size_header} %{time_total}",
                                  lab.url(f"/{size}.bin")], stdout=subprocess.PIPE, text=True) for i in (1, 2)]
    rows = [p.communicate(timeout=120)[0].split() for p in procs]
    frames = sum(model.response_frame_bytes(size, header=int(h)) for h, _ in rows)
    expected = model.connect_seconds() + frames * 8 / model.layer.carried_bps(model.down_bps)
    seconds = max(float(t) for _, t in rows)
    print(f"2 x {size:,} bytes from two hosts through one shared modem: {seconds:.2f} s, the model {expected:.2f} s")
    assert expected >= 2.0
    assert 0.95 < seconds / expected < 1.05


TWO_SERVERS = """
description = "one person, two servers: the origin far away over a phone, the CDN near over cable"
[cohort.origin]
description = "the origin server, reached over 3G"
hosts = "{c1}"
servers = "{origin}"
profile = "3g"
[cohort.cdn]
description = "the CDN node, reached over cable (held at 3 Mbit/s so a download takes seconds)"
hosts = "{c1}"
servers = "{cdn}/32"
profile = "cable"
rate = "3mbit"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against each cohort's link model, within 5%
def test_server_side_selectors_give_one_client_a_link_per_server(lab3):
    """One client, two servers (two addresses of the lab's server): the fetch from each,
    at the same time, is within 5% of its own cohort's model (at least 2 s at its rate)."""
    lab = lab3("servers", clients=1)
    cdn = lab.server.address.rsplit(".", 1)[0] + ".3"  # a second server address on the same host
    subprocess.run(["ip", "-n", lab.server.netns, "addr", "add", f"{cdn}/24", "dev", "eth0"], check=True)
    req = _apply(lab, TWO_SERVERS, origin=lab.server.address, cdn=cdn)
    url = lab.url("/1000000.bin")
    _each_within_its_model(lab, req, {"origin": (1, url), "cdn": (1, url.replace(lab.server.address, cdn))})
    rows = lab.statistics()["links"]
    assert sorted((r["cohort"], r["direction"]) for r in rows) == \
        [("cdn", "dest"), ("cdn", "source"), ("origin", "dest"), ("origin", "source")]


WITH_DEFAULT = """
description = "the modems named, everyone else behind one line"
[cohort.modems]
description = "a 28.8k modem"
hosts = "{c1}"
profile = "modem-28k8"
queue = "64kb"
[default]
description = "every other client, through one cable line (held at 3 Mbit/s so a download takes seconds)"
profile = "cable"
rate = "3mbit"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against each cohort's link model, within 5%
def test_a_default_cohort_takes_every_flow_no_cohort_selects(lab3):
    """A client no cohort names goes through the default cohort's one link, at its model,
    while a named one keeps its own; a ping of the unnamed client crosses the default link."""
    lab = lab3("default", clients=2)
    req = _apply(lab, WITH_DEFAULT)
    assert sorted((r["cohort"], r["host"] or "") for r in lab.statistics()["links"]) == \
        [("default", "")] * 2 + [("modems", lab.client(1).address)] * 2
    _each_within_its_model(lab, req, {"modems": (1, lab.url("/10000.bin")), "default": (2, lab.url("/1000000.bin"))})
    _ping_crosses(lab, 2, lambda r: r["cohort"] == "default")


TWO_SERVICES = """
description = "one person, two services on one server: the web over cable, a download service over a modem"
[cohort.web]
description = "the web server's port, over cable (held at 3 Mbit/s so a download takes seconds)"
hosts = "{c1}"
ports = "10000-10009"
per = "host"
server_ports = "80"
profile = "cable"
rate = "3mbit"
[cohort.downloads]
description = "the download service's ports, over a 56k modem"
hosts = "{c1}"
ports = "10000-10009"
per = "host"
server_ports = "8000-8003"
profile = "modem-56k"
queue = "64kb"
"""


@pytest.mark.alone_on_host  # downloads timed from userspace against each cohort's link model, within 5%
def test_server_ports_give_one_client_a_link_per_service(lab3):
    """One client and one server with two services (port 80, port 8001): a fetch from each
    at the same time is within 5% of its own cohort's model."""
    lab = lab3("sports", clients=1)
    www = os.path.join(lab.info["dir"], "www")
    server = lab.server.popen([sys.executable, "-m", "ratelimit.lab.docroot", "serve", "--root", www,
                               "--bind", lab.server.address, "--port", "8001"],
                              env={"PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: listening(lab.server.netns, 8001), 60, "the second service to listen on port 8001")
        req = _apply(lab, TWO_SERVICES)
        _each_within_its_model(lab, req, {"web": (1, lab.url("/1000000.bin")),
                                          "downloads": (1, f"http://{lab.server.address}:8001/100000.bin")})
    finally:
        server.terminate()
        server.wait(10)
