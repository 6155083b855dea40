"""The fleet's pure parts: an inventory read and checked, one request split into a request per
router (a mix's shares fleet-wide), and the one-line refusals."""

from ipaddress import ip_address

import pytest

from ratelimit.errors import FieldError, UsageError
from ratelimit.spec.fleet import partition, routers_of, scrape_targets
from ratelimit.profiles import scenario
from ratelimit.service import make_request

INVENTORY = {"r1": {"interface": "eth1", "clients": ["198.18.1.0/24", "2001:db8:1::/64"]},
             "r2": {"interface": "eth1", "clients": "198.18.2.0/24"},
             "r3": {"interface": "lan0", "netns": "rt3", "clients": ["198.18.3.0/24"]}}

SCENARIO = """
[cohort.modems]
description = "modems behind two routers"
hosts = ["198.18.1.2-198.18.1.41", "198.18.2.2-198.18.2.21"]
profile = "modem-56k"

[cohort.office]
description = "an office on one line"
hosts = "198.18.3.2-198.18.3.9"
per = "shared"
profile = "dsl"

[default]
description = "everyone else"
profile = "cable"
"""


def fleet(text=SCENARIO, **kw):
    return make_request("eth1", scenario=scenario.parse(text), **kw)


def test_each_router_gets_the_hosts_behind_it_on_its_own_interface():
    split = partition(fleet(), routers_of(INVENTORY))
    assert list(split) == ["r1", "r2", "r3"]
    r1, r2, r3 = split.values()
    assert [c.name for c in r1.cohorts] == ["modems", "default"] and len(r1.cohorts[0].hosts) == 40
    assert [c.name for c in r2.cohorts] == ["modems", "default"] and len(r2.cohorts[0].hosts) == 20
    assert [c.name for c in r3.cohorts] == ["office", "default"]
    assert (r3.interface, r3.netns, r1.netns) == ("lan0", "rt3", None)
    assert r1.cohorts[0].down == fleet().cohorts[0].down  # the cohort's link, unchanged
    whole = fleet()
    assert sum(len(r.cohorts[0].hosts) for r in split.values()) == sum(len(c.hosts) for c in whole.cohorts
                                                                        if not c.others)


def test_a_mix_is_worked_out_over_the_whole_fleet_before_the_split():
    """60% / 40% of 30 hosts: 18 and 12 fleet-wide, whatever each router's own count would round to."""
    hosts = "198.18.1.2-198.18.1.6,198.18.2.2-198.18.2.6,198.18.3.2-198.18.3.21"  # 5 + 5 + 20
    split = partition(make_request("eth1", hosts=hosts, mix="modem-28k8:60%,isdn-64k:40%"), routers_of(INVENTORY))
    counts = {(name, c.name): len(c.hosts) for name, req in split.items() for c in req.cohorts}
    assert sum(n for (_, cohort), n in counts.items() if cohort == "modem-28k8") == 18
    assert sum(n for (_, cohort), n in counts.items() if cohort == "isdn-64k") == 12
    assert counts == {("r1", "modem-28k8"): 5, ("r2", "modem-28k8"): 5, ("r3", "modem-28k8"): 8,
                      ("r3", "isdn-64k"): 12}  # the mix's sorted order: r1's and r2's hosts come first


def test_a_shared_link_behind_two_routers_is_refused_naming_them():
    text = SCENARIO.replace('"198.18.3.2-198.18.3.9"', '["198.18.3.2", "198.18.2.50"]')
    with pytest.raises(UsageError, match=r"^cohort office: one shared link for hosts behind r2, r3; a shared link "
                                         r"is behind one router \(split the cohort, one per router\)$"):
        partition(fleet(text), routers_of(INVENTORY))


def test_a_host_behind_no_router_or_two_is_refused():
    with pytest.raises(UsageError, match=r"^cohort modems: host 198.18.9.2 is behind no router \(r1, r2, r3: add "
                                         r"it to one's clients\)$"):
        partition(fleet(SCENARIO.replace("198.18.2.2-198.18.2.21", "198.18.9.2")), routers_of(INVENTORY))
    overlapping = dict(INVENTORY, r2={"interface": "eth1", "clients": ["198.18.0.0/16"]})
    with pytest.raises(UsageError, match=r"^cohort modems: host 198.18.1.2 is behind 2 routers \(r1, r2\)"):
        partition(fleet(), routers_of(overlapping))


def test_a_router_with_nothing_behind_it_is_refused():
    inventory = dict(INVENTORY, r4={"interface": "eth1", "clients": ["198.18.4.0/24"]})
    with pytest.raises(UsageError, match=r"^router r4: no host of the scenario is behind it \(198.18.4.0/24\)"):
        partition(fleet(), routers_of(inventory))


@pytest.mark.parametrize("inventory,message", [
    ({}, "inventory: names no router"),
    ({"r1": "eth1"}, "inventory r1: eth1 is not a table of interface, clients, netns and metrics"),
    ({"r1": {"interface": "eth1"}}, "inventory r1: ['interface'] lacks interface or clients"),
    ({"r1": {"interface": "eth1", "clients": ["198.18.1.300/24"]}},
     "inventory r1: clients: 198.18.1.300/24 is not an address or prefix"),
    ({"r1": {"interface": "eth1", "clients": ["198.18.1.0/24"], "port": 22}},
     "inventory r1: port: 22 is not a router setting (clients, interface, metrics, netns)"),
    ({"r1": {"interface": "eth 1", "clients": ["198.18.1.0/24"]}}, "--interface: 'eth 1'"),
    *(({"r1": {"interface": "eth1", "clients": ["198.18.1.0/24"], "metrics": bad}},
       f"inventory r1: metrics: {bad} is not HOST:PORT")
      for bad in ("198.19.0.11", "198.19.0.11:0", "198.19.0.11:65536", "999.19.0.11:80", "[198.19.0.11]:80",
                  "2001:db8::11:80", "a b:80", "x;reboot:80", "-x:80")),
])
def test_a_bad_inventory_is_one_line_naming_the_router_and_field(inventory, message):
    with pytest.raises((FieldError, UsageError)) as err:
        routers_of(inventory)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_fleets_prometheus_targets_are_the_routers_metrics_each_labelled_with_its_name():
    good = {name: dict(entry, metrics=metrics) for (name, entry), metrics in
            zip(INVENTORY.items(), ("198.19.0.11:8080", "[2001:db8::12]:8080", "router3.lab:9100"))}
    assert scrape_targets(routers_of(good)) == [
        {"targets": ["198.19.0.11:8080"], "labels": {"router": "r1"}},
        {"targets": ["[2001:db8::12]:8080"], "labels": {"router": "r2"}},
        {"targets": ["router3.lab:9100"], "labels": {"router": "r3"}}][:len(good)]
    without = dict(good, r1=INVENTORY["r1"])  # a router the fleet's sums would leave out
    with pytest.raises(UsageError, match=r"^inventory r1: no metrics \(give the HOST:PORT"):
        scrape_targets(routers_of(without))


def test_ipv6_hosts_go_to_the_router_of_their_prefix():
    text = '[cohort.v6]\ndescription = "both families"\nhosts = ["2001:db8:1::2", "198.18.2.2"]\nprofile = "dsl"\n'
    split = partition(fleet(text), routers_of({k: INVENTORY[k] for k in ("r1", "r2")}))
    assert split["r1"].cohorts[0].hosts == (ip_address("2001:db8:1::2"),)
    assert split["r2"].cohorts[0].hosts == (ip_address("198.18.2.2"),)


# ---------------------------------------------------------------- Kubernetes (pure)

from ratelimit.spec import k8s  # noqa: E402

PODS = [{"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web", "tier": "front"},
         "node": f"n{i % 3}", "ips": [f"198.18.{i % 3}.{10 + i}"]} for i in range(9)] + \
    [{"name": "db-0", "namespace": "shop", "labels": {"app": "db"}, "node": "n0", "ips": ["198.18.0.99"]},
     {"name": "web-pending", "namespace": "shop", "labels": {"app": "web"}, "node": None, "ips": []},
     {"name": "web-other", "namespace": "other", "labels": {"app": "web"}, "node": "n1", "ips": ["198.18.1.77"]}]
SPEC = {"cohorts": [{"name": "phones", "selector": {"matchLabels": {"app": "web"}}, "namespaces": ["shop"],
                     "profile": "3g", "per": "host"},
                    {"name": "office", "selector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                                          "values": ["db"]}]},
                     "per": "shared", "rate": "2mbit"}]}


def test_pods_become_one_assignment_per_node():
    out = k8s.assign(SPEC, PODS)
    assert list(out) == ["n0", "n1", "n2"]
    assert [c["name"] for c in out["n0"]["cohorts"]] == ["phones", "office"]
    assert out["n0"]["cohorts"][0]["hosts"] == ["198.18.0.10", "198.18.0.13", "198.18.0.16"]
    assert out["n0"]["cohorts"][0]["profile"] == "3g" and "selector" not in out["n0"]["cohorts"][0]
    assert out["n1"]["pods"] == 3  # web-other is in another namespace, web-pending on no node yet
    assert sum(len(c["hosts"]) for a in out.values() for c in a["cohorts"]) == 10


def test_a_pod_in_two_cohorts_and_a_shared_link_on_two_nodes_are_refused():
    twice = {"cohorts": SPEC["cohorts"] + [{"name": "front", "selector": {"matchLabels": {"tier": "front"}},
                                            "rate": "1mbit"}]}
    with pytest.raises(UsageError, match=r"^pod shop/web-0: selected by cohorts phones and front; a pod is in one"):
        k8s.assign(twice, PODS)
    spread = {"cohorts": [{"name": "office", "selector": {"matchLabels": {"app": "web"}}, "per": "shared",
                           "rate": "2mbit"}]}
    with pytest.raises(UsageError, match=r"^cohort office: one shared link for pods on nodes n0, n1, n2"):
        k8s.assign(spread, PODS)
    with pytest.raises(FieldError, match=r"^selector: operator: Near is not a selector operator"):
        k8s.assign({"cohorts": [{"name": "x", "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]},
                   PODS)


@pytest.mark.parametrize("labels,selector,selected", [
    ({"app": "web"}, {}, True),
    ({"app": "web"}, {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
    ({"app": "web"}, {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
    ({"app": "web"}, {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
    ({"app": "web", "tier": "a"}, {"matchLabels": {"app": "web"},
                                   "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, True),
])
def test_label_selectors_read_as_kubernetes_reads_them(labels, selector, selected):
    assert k8s.selects(selector, labels) is selected


def test_the_nodes_reports_become_one_status():
    nodes = k8s.assign(SPEC, PODS)
    staged = [{"node": n, "generation": 2, "phase": "Staged", "links": 6} for n in nodes]
    assert k8s.status(nodes, staged)["phase"] == "Staged"
    assert k8s.status(nodes, staged[:2])["phase"] == "Pending"
    old = [{"node": "n2", "generation": 1, "phase": "Committed", "links": 4}]
    assert k8s.status(nodes, staged[:2] + old)["nodes"]["Pending"] == 1  # an older generation's word is not this one's
    done = [dict(r, phase="Committed") for r in staged]
    assert k8s.status(nodes, done) == {"phase": "Committed", "generation": 2, "links": 18, "failures": {},
                                       "nodes": {"Pending": 0, "Staged": 0, "Committed": 3, "Failed": 0}}
    failed = done[:2] + [{"node": "n2", "generation": 2, "phase": "Failed", "error": "no device eth0"}]
    assert k8s.status(nodes, failed)["failures"] == {"n2": "no device eth0"}
    assert k8s.status(nodes, failed)["phase"] == "Failed"
