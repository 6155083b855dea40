"""Audiences in the namespace lab: ``lab up --mix`` / ``--scenario`` spread the clients over
cohorts, each client's downloads follow its own cohort's link model (within 5%), the
router's statistics name each link's cohort and profile, and bad audiences are one line
that leaves nothing behind.

Lab names are the tests' own (``au<pid>_<tag>``) with a private state directory; whatever
a test made is removed after it, passed or failed (``names`` from test_lab).
"""

import json
import subprocess
import sys
from ipaddress import ip_address

import pytest

from ratelimit.kernel.probe import probe
from ratelimit.errors import FieldError, UsageError
from ratelimit.lab import audience, topology
from ratelimit.lab.core import LabError
from ratelimit.lab.link import LinkSpec
from ratelimit.spec.linkmodel import LinkModel
import test_lab
from test_lab import ROOT, leftovers, ok, one_line_error, run_lab

names, state_dir = test_lab.names, test_lab.state_dir  # the fixtures: lab names of the test's own, removed after it

MIX = "modem-28k8:60%,modem-56k:30%,isdn-64k:10%"


def clients(n):
    return [(f"{topology.LAN4}.{i + 1}", f"{topology.LAN6}{i + 1:x}") for i in range(1, n + 1)]


def no_delay():
    return [] if probe(["netem"])["netem"] else ["--no-delay"]


# ---------------------------------------------------------------- pure


def test_a_mix_splits_the_clients_each_with_both_addresses():
    asks = audience.asks(LinkSpec(mix=MIX, per="port"), clients(10), "10000-10999")
    assert [(a.name, a.profile, a.per, a.ports) for a in asks] == [
        ("modem-28k8", "modem-28k8", "port", "10000-10999"), ("modem-56k", "modem-56k", "port", "10000-10999"),
        ("isdn-64k", "isdn-64k", "port", "10000-10999")]
    assert [len(a.hosts) for a in asks] == [12, 6, 2]  # 6, 3 and 1 clients, IPv4 and IPv6 each
    assert asks[2].hosts == (ip_address("198.18.0.11"), ip_address("2001:db8:18::b"))  # client10


def test_a_scenario_selects_clients_by_address_or_name():
    assert audience.clients_needed("dialup-1999") == audience.clients_needed("home-2001") == 100


@pytest.mark.parametrize("spec,n,says", [
    (LinkSpec(mix=MIX), 2, "--mix isdn-64k: 2 client(s) leave this profile without a client "
                           "(with 4 clients every profile of the mix gets one)"),
    (LinkSpec(mix=MIX, scenario="home-2001"), 10, "--scenario and --mix: give one of them"),
    (LinkSpec(mix=MIX, profile="3g"), 10, "--profile: --mix names each cohort's profile"),
    (LinkSpec(scenario="home-2001"), 10, "scenario home-2001: [cohort.dialup] hosts: '198.18.0.12' is not a "
                                         "client of the lab (198.18.0.2-198.18.0.11, client1-client10; --clients 10)"),
    (LinkSpec(mix="modem-28k8:50%,3g"), 4, "--mix: '3g' is not PROFILE:WEIGHT (e.g. modem-28k8:60%)"),
])
def test_bad_audiences_name_the_field_the_value_and_what_is_allowed(spec, n, says):
    with pytest.raises(UsageError) as err:  # FieldError is one: the field, the value, what is allowed
        audience.asks(spec, clients(n), "10000-10999")
    assert str(err.value) == says and err.value.exit_code == 2


def test_a_scenario_naming_clients(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[cohort.slow]\ndescription = "x"\nhosts = ["client2", "198.18.0.4"]\nprofile = "modem-28k8"\n'
                 '[cohort.fast]\ndescription = "y"\nhosts = "client1"\nprofile = "cable"\n')
    slow, fast = audience.asks(LinkSpec(scenario=str(f)), clients(3), "10000-10999")
    assert [str(h) for h in slow.hosts] == ["198.18.0.3", "2001:db8:18::3", "198.18.0.4", "2001:db8:18::4"]
    assert [str(h) for h in fast.hosts] == ["198.18.0.2", "2001:db8:18::2"]
    with pytest.raises(FieldError, match=r"\[cohort.slow\] hosts: '198.18.0.3' is not a client of the lab \(198.18.0.2-198.18.0.2, client1-client1; --clients 1\)"):
        audience.asks(LinkSpec(scenario=str(f)), clients(1), "10000-10999")


@pytest.mark.parametrize("argv,needle", [
    (["up", "--mix", MIX, "--profile", "3g"], "--profile: --mix names each cohort's profile"),
    (["up", "--scenario", "home-2001", "--per", "port"], "--per: a scenario names each cohort's granularity"),
    (["up", "--scenario", "nosuch"], "--scenario: 'nosuch' is not a file or a shipped scenario (dialup-1999"),
    (["up", "--scenario", "home-2001", "--clients", "20"],
     "[cohort.dialup] hosts: '198.18.0.22' is not a client of the lab (198.18.0.2-198.18.0.21"),
    (["up", "--clients", "2", "--mix", MIX], "--mix isdn-64k: 2 client(s) leave this profile without a client"),
    (["up", "--clients", "4", "--mix", "modem-28k8:50%,modem-99k:50%"], "--mix: 'modem-99k' is not a profile (known:"),
])
@pytest.mark.netns
def test_bad_audiences_are_one_line_and_build_nothing(argv, needle, names):
    name = names("bad")
    one_line_error(run_lab(*argv, "--name", name), 2, needle)
    assert leftovers(name) == []


# ---------------------------------------------------------------- for real


def ratelimit(*argv):
    return subprocess.run([sys.executable, "-m", "ratelimit", *argv], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.netns
@pytest.mark.slow  # 8 s: two applies of 10 clients
def test_a_mix_in_the_lab_status_and_stats_name_each_clients_cohort(names):
    """``lab up --mix`` over 10 clients: 6, 3 and 1 by client order; ``lab status`` and the
    router's ``--stats --json`` name each client's cohort and profile; ``lab apply --mix``
    changes them live; ``Lab.link_model(client)`` is the client's cohort's."""
    from ratelimit.lab.core import Lab
    name = names("mix")
    ok("up", "--name", name, "--clients", "10", "--mix", MIX, "--server", "none", *no_delay())
    status = json.loads(ok("status", "--name", name, "--json").stdout)
    cohort = {h["name"]: (h["cohort"], h["profile"]) for h in status["hosts"] if h["name"].startswith("client")}
    assert cohort == {**{f"client{i}": ("modem-28k8", "modem-28k8") for i in range(1, 7)},
                      **{f"client{i}": ("modem-56k", "modem-56k") for i in range(7, 10)},
                      "client10": ("isdn-64k", "isdn-64k")}
    assert {(t["client"], t["cohort"]) for t in status["totals"]} == {(c, p[0]) for c, p in cohort.items()}
    text = ok("status", "--name", name).stdout
    assert "client10  198.18.0.11   2001:db8:18::b     " in text and text.rstrip().endswith("isdn-64k")

    stats = json.loads(ratelimit("--if", "lan0", "--netns", topology.lab_prefix(name) + "router",
                                 "--stats", "--json").stdout)
    by_host = {(r["host"], r["direction"]): (r["cohort"], r["profile"]) for r in stats["links"]}
    assert len(by_host) == 10 * 2 * 2  # IPv4 and IPv6 per client, each way
    for i, (a4, a6) in enumerate(clients(10), 1):
        for host in (a4, a6):
            assert by_host[(host, "dest")] == by_host[(host, "source")] == cohort[f"client{i}"]

    lab = Lab.open(name)
    assert lab.link_model(10) == LinkModel.from_summary(status["link"]["summary"], cohort="isdn-64k",
                                                        delay_stage=probe(["netem"])["netem"])
    with pytest.raises(LabError, match=r"^lab '[^']+' applies 3 cohorts \(.*\): "):
        lab.link_model()
    ok("apply", "--name", name, "--mix", "isdn-64k:1,modem-28k8:1", *no_delay())
    assert Lab.open(name).cohort_of(1) == "isdn-64k" and Lab.open(name).cohort_of("client10") == "modem-28k8"
    ok("down", "--name", name)
    assert leftovers(name) == []


def _sized(model, target_s: float = 2.2) -> int:
    """The fewest bytes (a multiple of 1,000) the link ``model`` takes ``target_s`` or more to fetch."""
    n = 1000
    while model.fetch_seconds(n) < target_s:
        n += 1000
    return n


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.alone_on_host  # downloads timed from userspace against each cohort's link model, within 5%
def test_a_shipped_scenario_each_cohort_downloads_at_its_own_model(names):
    """``lab up --scenario dialup-1999`` (100 clients, four cohorts: 14.4k, 28.8k and 56k
    modems and DSL): one client of each cohort fetches, all at once, a part of the
    1,000,000-byte file sized for at least 2 s at its cohort's rate; each within 5% of its
    own cohort's model for exactly that download."""
    from ratelimit.lab.core import Lab
    name = names("ship")
    ok("up", "--name", name, "--scenario", "dialup-1999", "--server", "nginx", "--server-tcp", "rfc6298",
       *no_delay(), timeout=300)
    lab = Lab.open(name)
    assert len(lab.clients) == 100
    first = {}  # the first client of each cohort
    for i in range(1, 101):
        first.setdefault(lab.cohort_of(i), i)
    assert first == {"modem-14k4": 1, "modem-28k8": 9, "modem-56k": 52, "broadband": 94}
    sizes = {c: _sized(lab.link_model(i)) for c, i in first.items()}

    def fetch_all() -> dict:
        procs = {c: lab.client(i).popen(
            ["curl", "-sS", "-o", "/dev/null", "-r", f"0-{sizes[c] - 1}", "-w",
             "%{http_code} %{size_download} %{size_header} %{size_request} %{time_total}",
             lab.url("/1000000.bin")], stdout=subprocess.PIPE, text=True) for c, i in first.items()}
        return {c: p.communicate(timeout=120)[0].split() for c, p in procs.items()}
    fetch_all()  # once before: a lab's first fetch after an apply takes longer (tests/test_cohorts_netns.py)
    lab.wait_idle()  # TCP's spurious copies of the last fetch would delay the next handshake
    for c, (code, size, header, request, seconds) in fetch_all().items():
        model = lab.link_model(first[c])
        expected = model.fetch_seconds(int(size), header=int(header), request=int(request))
        print(f"{c} (client{first[c]}): {int(size):,} bytes in {float(seconds):.2f} s, its model {expected:.2f} s")
        assert code == "206" and int(size) == sizes[c] and expected >= 2.0
        assert 0.95 < float(seconds) / expected < 1.05, c
    ok("down", "--name", name)
    assert leftovers(name) == []
