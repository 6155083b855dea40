"""Audiences: scenario files, --mix, and plans of several cohorts (pure: no kernel).

What a plan of several cohorts must be: each cohort's links in groups of their own, its
link layer metered on its own classes, a whole host found by one filter on its address,
a flow in one cohort only; what a bad scenario or mix must get: one line naming where
(file, cohort, field), never a traceback.
"""

import dataclasses
import json
import random
import re
from collections import Counter
from ipaddress import ip_address

import pytest

from ratelimit import service
from ratelimit.errors import RatelimitError
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.filters import U32Filter
from ratelimit.plan.layout import GROUP_LINKS, major
from ratelimit.plan.ops import HtbQdisc
from ratelimit.plan.shaping import HtbClass
from ratelimit.profiles import scenario
from ratelimit.spec.linklayer import PPP_VJ
from ratelimit.spec.summary import describe, summary
from ratelimit.state import records

TWO = """
description = "two kinds of link"
[cohort.dialup]
description = "modems, a link per person"
hosts = "198.18.0.2-198.18.0.3"
profile = "modem-28k8"
[cohort.office]
source = "an office's cable line, a link per connection"
hosts = "198.18.0.10"
ports = "8000-8003"
per = "port"
profile = "cable"
"""


def request(text=TWO, **kw):
    return service.make_request("eth0", scenario=scenario.parse(text, "scenario t.toml"), **kw)


def test_a_scenario_is_a_plan_of_its_cohorts_in_its_order():
    req = request()
    assert [c.name for c in req.cohorts] == ["dialup", "office"]
    assert [(c.per, c.ports, c.profile, len(c.hosts)) for c in req.cohorts] == \
        [("host", None, "modem-28k8", 2), ("port", ((8000, 8003),), "cable", 1)]
    plan = compile_plan(req)
    by_cohort = Counter((f.cohort, f.direction) for f in plan.flows)
    assert by_cohort == {("dialup", "dest"): 2, ("dialup", "source"): 2, ("office", "dest"): 4, ("office", "source"): 4}
    s = summary(req)
    assert [c["name"] for c in s["cohorts"]] == ["dialup", "office"] and s["links"] == 12
    assert describe(s).startswith("2 cohorts (shape; dialup (modem-28k8, per host, ppp-vj): 4 links; office ")


def test_each_cohort_has_groups_of_its_own_and_its_link_layer_on_its_classes():
    plan = compile_plan(request(direction="dest"))
    root = next(op for op in plan.ops if type(op) is HtbQdisc and op.handle == 0x520000)
    assert root.stab.overhead_bytes == PPP_VJ.stab_overhead  # the device meters as the modems' frames
    groups = [op for op in plan.ops if type(op) is HtbClass and op.parent == 0x520001]
    assert [g.classid for g in groups] == [0x520010, 0x520011]  # one group each
    modem, cable = (next(c for c in plan.request.cohorts if c.name == n) for n in ("dialup", "office"))
    link_classes = [op for op in plan.ops if type(op) is HtbClass and op.classid & 0xFFFF >= 0x100]
    modem_classes = [c for c in link_classes if c.parent >> 16 == major(0xFFFE)]
    cable_classes = [c for c in link_classes if c.parent >> 16 == major(0xFFFD)]  # the second group's
    assert len(modem_classes) == 2 and len(cable_classes) == 4
    assert {c.overhead_bytes for c in modem_classes} == {0}
    # a cable frame is its IP packet plus the cable layer's header; the size table gives the
    # modem's (IP packet - 32): the class adds the difference
    assert {c.overhead_bytes for c in cable_classes} == {cable.link.overhead_bytes - modem.link.overhead_bytes}
    assert {c.mpu_bytes for c in cable_classes} == {64} and {c.mpu_bytes for c in modem_classes} == {0}


def test_a_whole_host_is_one_filter_on_its_address_that_takes_every_packet():
    req = service.make_request("eth0", hosts="198.18.0.2,2001:db8::2", per="host", rate="64kbit", mode="shape",
                               direction="dest")
    assert req.only.ports is None
    plan = compile_plan(req)
    exact = [op for op in plan.ops if type(op) is U32Filter and op.classid and op.classid & 0xFFFF >= 0x100]
    assert len(exact) == 2 and {op.prio for op in exact} == {3, 4}
    assert all(len(op.keys) == (1 if op.protocol == "ip" else 4) for op in exact)  # the address, nothing else
    roots = [op for op in plan.ops if type(op) is U32Filter and op.ht == 0 and op.prio in (3, 4)]
    assert roots and all(k.mask == 0 for op in roots for k in op.keys)  # any protocol, fragment, options
    assert [(f.host, f.port) for f in plan.flows] == [(ip_address("198.18.0.2"), None), (ip_address("2001:db8::2"), None)]


@pytest.mark.parametrize("ports, filters", [("all", 3), ("8000-8001", 6)])
def test_a_shared_cohort_is_one_link_every_filter_of_it_leads_to(ports, filters):
    req = service.make_request("eth0", hosts="198.18.0.2-198.18.0.4", ports=ports, per="shared", rate="1mbit",
                               mode="shape", direction="dest")
    assert req.link_count() == 1 and req.flow_count() == filters
    plan = compile_plan(req)
    links = [op for op in plan.ops if type(op) is HtbClass and op.classid & 0xFFFF >= 0x100]
    exact = [op for op in plan.ops if type(op) is U32Filter and op.classid and op.classid & 0xFFFF >= 0x100]
    assert len(links) == 1 and len(exact) == filters and {op.classid for op in exact} == {links[0].classid}
    assert [(str(f.host), f.port) for f in plan.flows] == [("198.18.0.2", None)]  # one link, named by its first host
    assert "one shared link" in describe(summary(req))
    police = compile_plan(service.make_request("eth0", hosts="198.18.0.2-198.18.0.4", ports=ports, per="shared",
                                               rate="1mbit", mode="police", direction="dest"))
    policers = {op.police.index for op in police.ops if type(op) is U32Filter and op.police}
    assert len(policers) == 1  # one policer for every filter of the link


def test_ten_thousand_whole_hosts_are_ten_thousand_exact_filters_a_direction():
    req = service.make_request("eth0", hosts="198.18.0.0/18", per="host", ports="all", rate="28800", mode="shape",
                               direction="dest")
    plan = compile_plan(req)
    exact = [op for op in plan.ops if type(op) is U32Filter and op.prio == 3 and op.classid
             and op.classid & 0xFFFF >= 0x100]
    assert len(exact) == 16384 and len(plan.flows) == 16384


def test_a_record_of_cohorts_reads_back_as_the_same_request():
    req = request()
    again = records.from_json(json.loads(json.dumps(records.to_json(req))))
    assert again == req


def test_a_record_from_before_cohorts_reads_as_one_cohort():
    old = {"interface": "eth0", "hosts": ["198.18.0.2"], "ports": [[1024, 1031]], "down": {"rate_bps": 28800},
           "up": {"rate_bps": 28800}, "mode": "police", "direction": "both", "netns": None, "bandwidth_bps": 100000000,
           "burst": {"amount": 5, "unit": "v03"}, "mtu_bytes": 1514, "avpkt_bytes": 1200, "mpu_bytes": 64,
           "profile": None, "link": None, "per": "port", "generation": 0}
    req = records.from_json(old)
    assert [c.name for c in req.cohorts] == ["main"] and req.only.ports == ((1024, 1031),) and req.only.mpu_bytes == 64
    # its qdiscs numbered and its groups sized as that ratelimit did (``Request.numbering``, ``group_links``)
    assert req == dataclasses.replace(service.make_request("eth0", hosts="198.18.0.2", ports="1024-1031"),
                                      numbering=0, group_links=256)


def test_one_cohort_compiles_as_the_command_line_always_did():
    one = service.make_request("eth0", hosts="198.18.0.2", ports="1024-1031", profile="modem-28k8")
    same = request("""
[cohort.main]
description = "the command line's link"
hosts = "198.18.0.2"
ports = "1024-1031"
per = "port"
profile = "modem-28k8"
""")
    assert compile_plan(one).ops == compile_plan(same).ops


@pytest.mark.parametrize("hosts", [[f"198.18.{i // 250}.{i % 250 + 2}" for i in range(n)] for n in (1, 7, 10, 99, 1000)])
def test_a_mix_splits_within_one_of_each_share_and_always_the_same_way(hosts):
    weights = {"modem-28k8": 60, "modem-56k": 30, "isdn-64k": 10}
    mix = ",".join(f"{k}:{v}%" for k, v in weights.items())
    shuffled = hosts[:]
    random.Random(len(hosts)).shuffle(shuffled)
    a = service.make_request("eth0", hosts=",".join(hosts), mix=mix, per="host")
    b = service.make_request("eth0", hosts=",".join(shuffled), mix=mix, per="host")
    assert a == b  # the split is over the sorted selection: the order given does not matter
    counts = {c.name: len(c.hosts) for c in a.cohorts}
    assert sum(counts.values()) == len(hosts)
    for name, w in weights.items():
        assert abs(counts.get(name, 0) - len(hosts) * w / 100) < 1
    assert all(c.per == "host" and c.ports is None and c.profile == c.name for c in a.cohorts)


def test_largest_remainder():
    assert scenario.largest_remainder(10, [1, 1, 1]) == [4, 3, 3]
    assert scenario.largest_remainder(7, [60, 30, 10]) == [4, 2, 1]
    assert scenario.largest_remainder(0, [1, 2]) == [0, 0]


def test_overlapping_cohorts_are_refused_naming_both_and_a_flow():
    text = TWO.replace('hosts = "198.18.0.10"', 'hosts = "198.18.0.3"')
    with pytest.raises(RatelimitError, match=r"cohorts 'dialup' and 'office' both select 198\.18\.0\.3 port 8000"):
        request(text)


def test_police_mode_refuses_cohorts_of_several_link_layers():
    with pytest.raises(RatelimitError, match="police mode meters every link of a device with one link layer"):
        request(mode="police", delay="0ms")


BAD_SCENARIOS = [
    ("", "no cohorts"),
    ("[cohort", "is not TOML"),
    ("cohorts = 1", "'cohorts' is not a field"),
    ("[cohort.a]\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'", "[cohort.a]: needs a description or its source"),
    ("[cohort.a]\ndescription = 'x'\nprofile = 'modem-28k8'", "[cohort.a]: hosts: none given"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'", "[cohort.a]: needs a profile, a rate, or traces"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = '../etc/passwd'", "[cohort.a] profile: '../etc/passwd' is not a profile name"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = '/etc/passwd'", "[cohort.a] profile"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'nope'", "nope"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nspeed = 3", "[cohort.a]: 'speed' is not a field"),
    ("[cohort.a]\ndescription = 'x'\nhosts = 5\nprofile = 'modem-28k8'", "[cohort.a] hosts: 5 is not text"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.0/8'\nprofile = 'modem-28k8'", "[cohort.a] hosts: '198.18.0.0/8' holds 16777216"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nports = '70000'\nper = 'port'\nprofile = 'modem-28k8'", "[cohort.a] ports: 70000 is not a port"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nper = 'street'\nprofile = 'modem-28k8'", "[cohort.a] per: street is not a link granularity"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nrate = '1e309kbit'", "[cohort.a] rate"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nrate = nan", "[cohort.a] rate"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\ndelay = '-5ms'", "[cohort.a] delay"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nqueue = '١٠p'", "[cohort.a] queue"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nmpu = 1e309", "[cohort.a] mpu"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nlink = 'carrier-pigeon'", "[cohort.a] link: 'carrier-pigeon' is not a link layer"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nper = 'port'\nports = 'all'\nprofile = 'modem-28k8'", 'needs per = "host"'),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\n[cohort.b]\ndescription = 'y'\nhosts = '198.18.0.2'\nprofile = 'cable'",
     "cohorts 'a' and 'b' both select 198.18.0.2"),
    ("[cohort.'a b']\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'", "cohort name: 'a b' is not a name"),
    ("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'\nburst = '1e400b'", "[cohort.a] burst"),
    ("description = 7\n[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nprofile = 'modem-28k8'", "description: 7 is not text"),
]


@pytest.mark.parametrize("text,says", BAD_SCENARIOS)
def test_a_bad_scenario_is_one_line_naming_where(text, says):
    with pytest.raises(RatelimitError) as err:
        request(text)
    message = str(err.value)
    assert "\n" not in message and says in message
    assert message.startswith("scenario t.toml") or "cohort" in message


BAD_MIXES = [
    ("", "--mix: '' is not a mix"),
    ("modem-28k8", "--mix: 'modem-28k8' is not PROFILE:WEIGHT"),
    ("modem-28k8:", "--mix modem-28k8: '' is not a weight"),
    ("modem-28k8:-5%", "is not a weight"),
    ("modem-28k8:nan", "is not a weight"),
    ("modem-28k8:1e309", "is not a weight"),
    ("modem-28k8:0", "is not a weight"),
    ("modem-28k8:50%,modem-28k8:50%", "'modem-28k8' is named twice"),
    ("../x:50%", "--mix: '../x' is not a profile name"),
    ("nope:100%", "--mix: 'nope' is not a profile (known:"),
    ("modem-28k8:10%,,cable:90%", "is not a mix"),
]


@pytest.mark.parametrize("text,says", BAD_MIXES)
def test_a_bad_mix_is_one_line_naming_it(text, says):
    with pytest.raises(RatelimitError) as err:
        service.make_request("eth0", hosts="198.18.0.2,198.18.0.3", mix=text, per="host")
    assert "\n" not in str(err.value) and says in str(err.value)


@pytest.mark.parametrize("hosts, ports", [(1, "5000-5009"), (3, "5000-5009"), (7, "5000-5002,6000-6012"),
                                          (40, "1024-1055")])
def test_a_mix_per_port_splits_the_links_within_one_of_each_share_and_always_the_same_way(hosts, ports):
    weights = {"modem-28k8": 50, "3g": 30, "cable": 20}
    text = ",".join(f"{k}:{v}%" for k, v in weights.items())
    addresses = [f"198.18.0.{2 + i}" for i in range(hosts)]
    req = service.make_request("eth0", hosts=",".join(addresses), ports=ports, mix=text, per="port")
    shuffled = addresses[:]
    random.Random(hosts).shuffle(shuffled)
    assert service.make_request("eth0", hosts=",".join(shuffled), ports=ports, mix=text, per="port") == req
    flows = [(str(h), p) for c in req.cohorts for h in c.hosts for lo, hi in c.ports for p in range(lo, hi + 1)]
    assert len(flows) == len(set(flows)) == req.link_count()  # every link once
    by_profile = Counter()
    for c in req.cohorts:
        assert c.per == "port" and c.name.split(".")[0] == c.profile
        by_profile[c.profile] += c.link_count()
    total = req.link_count()
    for name, share in weights.items():
        assert abs(by_profile[name] - total * share / 100) <= 1, (name, by_profile[name])
    assert len(req.cohorts) <= 3 * len(weights)
    # in the sorted (host, port) order, each profile's links are one run
    order = sorted(flows, key=lambda f: (ip_address(f[0]), f[1]))
    owner = {(str(h), p): c.profile for c in req.cohorts for h in c.hosts for lo, hi in c.ports
             for p in range(lo, hi + 1)}
    runs = [owner[f] for f in order]
    assert [k for i, k in enumerate(runs) if i == 0 or runs[i - 1] != k] == [n for n in weights if by_profile[n]]


def test_a_mix_needs_ports_per_port_and_is_no_shared_link():
    with pytest.raises(RatelimitError, match="--mix: a split per port needs --ports"):
        scenario.mix("modem-28k8:1", (ip_address("198.18.0.2"),), None, "port")
    with pytest.raises(RatelimitError, match="--mix: splits hosts or links between profiles; a shared link"):
        service.make_request("eth0", hosts="198.18.0.2", mix="modem-28k8:1", per="shared")


def test_a_scenario_file_is_read_and_only_it(tmp_path):
    f = tmp_path / "a.toml"
    f.write_text(TWO)
    asks = scenario.load(str(f))
    assert [a.name for a in asks] == ["dialup", "office"] and asks[0].where == f"scenario {f}: [cohort.dialup]"
    with pytest.raises(RatelimitError, match="--scenario: .* cannot be read"):
        scenario.load(str(tmp_path / "missing.toml"))
    big = tmp_path / "big.toml"
    big.write_text("#" * (scenario.MAX_BYTES + 1))
    with pytest.raises(RatelimitError, match="is larger than"):
        scenario.load(str(big))


def test_cohorts_of_whole_groups_must_fit_the_handles():
    req = request()
    many = dataclasses.replace(req, cohorts=tuple(
        dataclasses.replace(req.cohorts[0], name=f"c{i}", hosts=(ip_address(f"198.18.{i}.1"),)) for i in range(255)))
    compile_plan(many)  # 255 groups of one link: fits
    assert GROUP_LINKS == 256


@pytest.mark.parametrize("name", scenario.shipped())
def test_a_shipped_scenario_applies_and_keeps_its_cited_shares(name):
    """Each shipped audience compiles, has its sources, and gives each cohort the share its
    description cites (within one host of it)."""
    import re
    assert len(scenario.shipped()) >= 2
    req = service.make_request("eth0", scenario=scenario.load(name))
    compile_plan(req)
    text = scenario.find(name).read_text()
    assert "source = " in text and "http" in text
    total = sum(len(c.hosts) for c in req.cohorts)
    for ask, c in zip(scenario.load(name), req.cohorts):
        share = re.search(r"\((\d+(?:\.\d+)?)%\)", ask_description(text, c.name))
        assert share, c.name
        assert abs(len(c.hosts) - total * float(share.group(1)) / 100) <= 1, (c.name, len(c.hosts), share.group(1))


def ask_description(text: str, cohort: str) -> str:
    import tomllib
    return tomllib.loads(text)["cohort"][cohort]["description"]


@pytest.mark.parametrize("args", [
    dict(hosts="198.18.0.2,2001:db8::2", ports="1000-1299", mode="shape", rate="1mbit"),
    dict(hosts="198.18.0.0/24", ports="1000-1003", per="host", mode="shape", rate="1mbit"),
    dict(hosts="198.18.0.0/25", per="host", ports="all", mode="shape", rate="1mbit", direction="source"),
    dict(scenario="dialup-1999"),
], ids=["per port, v4 and v6", "per host with ports", "whole hosts, source", "a scenario"])
def test_statistics_find_each_links_class_without_compiling_its_filters(args):
    """``link_flows`` (what --stats reads in shape mode) names the same classes for the same
    links as the compiled plan's flows."""
    from ratelimit.plan.compile import link_flows
    if "scenario" in args:
        args = {"scenario": scenario.load(args["scenario"])}
    req = service.make_request("eth0", **args)

    def seen(flows):
        return sorted((f.direction, f.dev, f.classid, str(f.host), f.port or 0, f.cohort) for f in flows)
    assert seen(link_flows(req)) == seen(compile_plan(req).flows)


# ---------------------------------------------------------------- the far side


def servers_request(a_servers, b_servers, hosts_b="198.18.0.2"):
    text = f"""
[cohort.origin]
description = "x"
hosts = "198.18.0.2"
servers = {json.dumps(a_servers)}
profile = "3g"
[cohort.cdn]
description = "x"
hosts = "{hosts_b}"
servers = {json.dumps(b_servers)}
profile = "cable"
"""
    return service.make_request("eth0", scenario=scenario.parse(text, "scenario s.toml"), direction="both")


def test_server_prefixes_add_a_match_on_the_far_sides_address_each_way():
    req = servers_request("198.19.0.2", ["198.19.1.0/24", "198.19.2.1-198.19.2.2"])
    assert [str(s) for s in req.cohorts[1].servers] == ["198.19.1.0/24", "198.19.2.1/32", "198.19.2.2/32"]
    plan = compile_plan(req)
    exact = [op for op in plan.ops if type(op) is U32Filter and op.classid and op.classid & 0xFFFF >= 0x100]
    assert len(exact) == 2 * 4  # a filter per (host, server prefix), each direction
    to_host = {(k.off, k.value, k.mask) for op in exact if op.dev == "eth0" for k in op.keys}
    assert (12, int(ip_address("198.19.1.0")), 0xFFFFFF00) in to_host  # towards the host: the source address
    from_host = {(k.off, k.value, k.mask) for op in exact if op.dev != "eth0" for k in op.keys}
    assert (16, int(ip_address("198.19.0.2")), 0xFFFFFFFF) in from_host  # from the host: the destination
    assert Counter(f.cohort for f in plan.flows) == {"origin": 2, "cdn": 2}  # a link each way per cohort
    assert records.from_json(json.loads(json.dumps(records.to_json(req)))) == req
    assert summary(req)["cohorts"][1]["servers"] == ["198.19.1.0/24", "198.19.2.1/32", "198.19.2.2/32"]


def test_an_ipv6_server_prefix_matches_the_words_it_covers():
    req = service.make_request("eth0", hosts="2001:db8::2", per="host", rate="1mbit", mode="shape", direction="dest",
                               servers="2001:db8:1::/48")
    exact = [op for op in compile_plan(req).ops if type(op) is U32Filter and op.classid and op.classid & 0xFFFF >= 0x100]
    server_keys = [k for k in exact[0].keys if 8 <= k.off < 24]
    assert [(k.off, hex(k.value), hex(k.mask)) for k in server_keys] == [(8, "0x20010db8", "0xffffffff"),
                                                                          (12, "0x10000", "0xffff0000")]


@pytest.mark.parametrize("a, b, says", [
    ("198.19.0.0/16", "198.19.1.7", "cohorts 'origin' and 'cdn' both select 198.18.0.2 with server 198.19.1.7"),
    ("198.19.0.2", "198.19.0.0/30", "both select 198.18.0.2 with server 198.19.0.2"),
])
def test_overlapping_servers_of_one_host_are_refused_naming_both(a, b, says):
    with pytest.raises(RatelimitError, match=re.escape(says)):
        servers_request(a, b)


def test_cohorts_without_servers_still_overlap_with_any():
    text = TWO.replace('hosts = "198.18.0.10"', 'hosts = "198.18.0.2"').replace('ports = "8000-8003"\nper = "port"\n',
                                                                              'servers = "198.19.0.2"\n')
    with pytest.raises(RatelimitError, match="both select 198.18.0.2 with server 198.19.0.2"):
        request(text)


@pytest.mark.parametrize("servers, says", [
    ("example.org", "--servers: 'example.org' is not an address, prefix (198.18.1.0/24) or range"),
    ("198.19.0.9-198.19.0.2", "--servers: '198.19.0.9-198.19.0.2' is not a range"),
    ("", "--servers: none given"),
    ("2001:db8::1", "--servers: 2001:db8::1/128 hold no IPv4 server for host 198.18.0.2"),
])
def test_bad_servers_are_one_line_naming_the_field(servers, says):
    with pytest.raises(RatelimitError) as err:
        service.make_request("eth0", hosts="198.18.0.2", per="host", rate="1mbit", mode="shape", servers=servers)
    assert "\n" not in str(err.value) and says in str(err.value)


def test_a_scenario_names_its_own_servers():
    with pytest.raises(RatelimitError, match="--hosts/--ports/--servers: a scenario names each cohort's"):
        service.make_request("eth0", scenario=scenario.parse(TWO), servers="198.19.0.2")


# ---------------------------------------------------------------- the default cohort


DEFAULT = TWO + """
[default]
description = "everyone else, behind one cable line"
profile = "cable"
"""


def test_a_default_cohort_is_one_link_every_other_packet_falls_to():
    req = request(DEFAULT, direction="dest")
    assert [c.name for c in req.cohorts] == ["dialup", "office", "default"]
    default = req.cohorts[-1]
    assert (default.others, default.hosts, default.ports, default.per, default.link_count()) == \
        (True, (), None, "shared", 1)
    plan = compile_plan(req)
    catch = [op for op in plan.ops if type(op) is U32Filter and op.prio in (5, 6)]
    # on the root qdisc, to the default's group; in that group, to its one link; after every tree
    assert [(op.parent, op.protocol, op.keys[0].mask) for op in catch] == \
        [(major(0xFFFC) << 16, "ip", 0), (major(0xFFFC) << 16, "ipv6", 0), (0x520000, "ip", 0), (0x520000, "ipv6", 0)]
    assert {op.classid for op in catch if op.parent == 0x520000} == {0x520012}
    assert {op.classid for op in catch if op.parent != 0x520000} == {major(0xFFFC) << 16 | 0x100}
    assert max(op.prio for op in plan.ops if type(op) is U32Filter and op.parent == 0x520000 and op not in catch) < 5
    assert [(f.cohort, f.host, f.port) for f in plan.flows if f.cohort == "default"] == [("default", None, None)]
    assert records.from_json(json.loads(json.dumps(records.to_json(req)))) == req
    assert "default (cable, one shared link" in describe(summary(req))


@pytest.mark.parametrize("text, says", [
    (DEFAULT + 'hosts = "198.18.0.9"\n', "[default]: 'hosts' is not a field"),
    (DEFAULT + 'per = "host"\n', "[default]: 'per' is not a field"),
    (DEFAULT.replace('[default]\ndescription = "everyone else, behind one cable line"\n', '[default]\n'),
     "[default]: needs a description or its source"),
    (DEFAULT.replace('[default]', '[cohort.default]\nhosts = "198.18.0.40"\ndescription = "x"\nprofile = "3g"\n'
                     '[default]'), "cohort: 'default' is named twice"),
])
def test_a_bad_default_cohort_is_one_line(text, says):
    with pytest.raises(RatelimitError) as err:
        request(text)
    assert "\n" not in str(err.value) and says in str(err.value)


def test_a_default_cohort_needs_shape_mode():
    with pytest.raises(RatelimitError, match="a default cohort needs shape mode"):
        request("[cohort.a]\ndescription = 'x'\nhosts = '198.18.0.2'\nrate = '1mbit'\n"
                "[default]\ndescription = 'y'\nrate = '2mbit'\n", mode="police")


@pytest.mark.parametrize("lo, hi", [(80, 80), (8000, 8003), (1, 65535), (1023, 1025), (5000, 5999), (65535, 65535)])
def test_a_port_range_is_the_fewest_aligned_blocks_that_cover_it_exactly(lo, hi):
    from ratelimit.spec.model import port_blocks
    blocks = port_blocks(lo, hi)
    covered = [p for value, mask in blocks for p in range(value, value + (~mask & 0xFFFF) + 1)]
    assert covered == list(range(lo, hi + 1))
    assert all(value & ~mask & 0xFFFF == 0 for value, mask in blocks)  # aligned
    assert len(blocks) <= 2 * 16


def test_server_ports_add_a_match_on_the_far_sides_port_each_way():
    req = service.make_request("eth0", hosts="198.18.0.2", ports="10000", per="port", rate="1mbit", mode="shape",
                               server_ports="80,8000-8003")
    assert req.cohorts[0].server_ports == ((80, 80), (8000, 8003)) and req.flow_count() == 2
    exact = [op for op in compile_plan(req).ops if type(op) is U32Filter and op.classid and op.classid & 0xFFFF >= 0x100]
    to_host = {(k.value, k.mask) for op in exact if op.dev == "eth0" for k in op.keys if k.off == 20}
    assert {(80 << 16, 0xFFFF0000), (8000 << 16, 0xFFFC0000), (10000, 0xFFFF)} <= to_host  # source port: the server's
    from_host = {(k.value, k.mask) for op in exact if op.dev != "eth0" for k in op.keys if k.off == 20}
    assert {(80, 0xFFFF), (8000, 0xFFFC), (10000 << 16, 0xFFFF0000)} <= from_host
    assert records.from_json(json.loads(json.dumps(records.to_json(req)))) == req
    assert "server ports 80,8000-8003" in describe(summary(req))


def test_cohorts_apart_by_server_port_do_not_overlap_and_alike_do():
    def two(a, b):
        text = "".join(f"[cohort.{n}]\ndescription = 'x'\nhosts = '198.18.0.2'\nports = '10000-10009'\n"
                       f"server_ports = '{p}'\nrate = '1mbit'\n" for n, p in (("web", a), ("files", b)))
        return request(text)
    assert [c.server_ports for c in two("80", "8000-8003").cohorts] == [((80, 80),), ((8000, 8003),)]
    with pytest.raises(RatelimitError, match="cohorts 'web' and 'files' both select 198.18.0.2 port 10000"):
        two("80-8000", "8000-8003")


def test_server_ports_need_the_cohorts_own_ports():
    with pytest.raises(RatelimitError, match="--server-ports: need the cohort's own --ports"):
        service.make_request("eth0", hosts="198.18.0.2", per="host", rate="1mbit", mode="shape", server_ports="80")
