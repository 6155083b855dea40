"""Property test: random packets through a model of the compiled u32 tree.

Each packet of a selected (host, port) must land on exactly its own filter
(and, in shape mode, its own class); every other packet must pass untouched.
"""

import random
from ipaddress import IPv4Address, IPv6Address

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ratelimit.plan.compile import INGRESS_HANDLE, compile_plan, ifb_name
from ratelimit.plan.layout import ROOT
from ratelimit.plan.u32tree import LEAF_MAX
from ratelimit.spec.model import LinkParams, Request
from u32model import Htb, ipv4_packet, ipv6_packet

CLIENT4 = IPv4Address("198.19.0.9")
SERVER6 = IPv6Address("2001:db8:ffff::9")

# Hosts that often share a last octet or more, to force deep trees.
V4_LAST, V6_LAST = [1, 2, 255], [1, 0x101]


def _v4(a: int, b: int) -> IPv4Address:
    return IPv4Address(f"198.18.{a}.{b}")


def _v6(a: int, b: int) -> IPv6Address:
    return IPv6Address(f"2001:db8:{a:x}::{b:x}")


v4_hosts = st.builds(_v4, st.integers(0, 3), st.sampled_from(V4_LAST))
v6_hosts = st.builds(_v6, st.integers(0, 3), st.sampled_from(V6_LAST))


def _any_host(rng, selected):
    """One of ``selected``, or a host as ``v4_hosts`` / ``v6_hosts`` build them."""
    kind = rng.randrange(3)
    if kind == 0:
        return rng.choice(selected)
    if kind == 1:
        return _v4(rng.randrange(4), rng.choice(V4_LAST))
    return _v6(rng.randrange(4), rng.choice(V6_LAST))


port_ranges = st.lists(st.tuples(st.integers(1, 65535), st.integers(0, 300)).map(
    lambda t: (t[0], min(65535, t[0] + t[1]))), min_size=1, max_size=3)


def _request(hosts, ranges, mode, direction, delay, per="port"):
    merged = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    params = LinkParams(28800, delay_us=delay)
    return Request.single("eth0", tuple(dict.fromkeys(hosts)), tuple(merged), params, params,
                   mode=mode, direction=direction, per=per)


def _trees(plan):
    """(direction) -> the filters that classify it, as the kernel would reach them."""
    ops, dev = plan.ops, plan.request.interface
    trees = {"dest": Htb(ops, dev, ROOT)}
    if any(getattr(op, "name", None) == ifb_name(dev) for op in ops):
        trees["source"] = Htb(ops, ifb_name(dev), ROOT)
    else:
        trees["source"] = Htb(ops, dev, INGRESS_HANDLE)
    return trees


def _packet(direction, host, port, proto=6, other_port=443):
    if host.version == 4:
        src, dst = (CLIENT4, host) if direction == "dest" else (host, CLIENT4)
        sport, dport = (other_port, port) if direction == "dest" else (port, other_port)
        return ipv4_packet(src, dst, sport, dport, proto), "ip"
    src, dst = (SERVER6, host) if direction == "dest" else (host, SERVER6)
    sport, dport = (other_port, port) if direction == "dest" else (port, other_port)
    return ipv6_packet(src, dst, sport, dport, proto), "ipv6"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=st.lists(st.one_of(v4_hosts, v6_hosts), min_size=1, max_size=6), ranges=port_ranges,
       mode=st.sampled_from(["police", "shape"]), direction=st.sampled_from(["dest", "source", "both"]),
       delay=st.sampled_from([0, 50000]), per=st.sampled_from(["port", "host"]), probes=st.data())
def test_every_packet_lands_on_its_own_filter(hosts, ranges, mode, direction, delay, per, probes):
    """Per (host, port): the packet's own filter.  Per host: a filter of its own (host,
    port) that carries the host's class (shape) or the host's shared policer (police)."""
    req = _request(hosts, ranges, mode, direction, delay, per)
    assume(mode == "police" or req.link_count() <= 20000)
    plan = compile_plan(req)
    trees = _trees(plan)
    links = {(f.direction, f.host, f.port): f for f in plan.flows}
    assert len(links) == len(plan.flows)  # one statistics row per link and direction
    filters = {(op.dev, op.parent, op.prio, op.handle): op for op in plan.ops if type(op).__name__ == "U32Filter"}

    def check(d, host, port, hit):
        assert hit is not None, (d, host, port)
        if per == "port":
            flow = links[d, host, port]
            assert hit.handle == flow.handle, (d, host, port)
            if mode == "shape":
                assert hit.classid == flow.classid
            return
        flow = links[d, host, None]
        mine = filters[(flow.dev, hit.parent, flow.prio, flow.handle)]
        assert hit.keys[-1].value & hit.keys[-1].mask in (port, port << 16)  # its own port's filter
        if mode == "shape":
            assert hit.classid == flow.classid
        elif mine.police:
            assert hit.police == mine.police and hit.police.index  # one bucket for all its ports
    # the probes from one seed per example (drawing each of the 80 from Hypothesis took most of the test's time)
    rng = random.Random(probes.draw(st.integers(0, 2**32 - 1), label="probe seed"))
    directions = ["dest", "source"] if direction == "both" else [direction]
    ports = [p for lo, hi in req.only.ports for p in range(lo, hi + 1)]
    for _ in range(40):
        d, host, port, proto = rng.choice(directions), rng.choice(req.only.hosts), rng.choice(ports), rng.choice([6, 17])
        packet, ethertype = _packet(d, host, port, proto)
        check(d, host, port, trees[d].classify(packet, ethertype))
    # packets outside the selectors pass untouched
    port_set = set(ports)
    for _ in range(40):
        d, host = rng.choice(directions), _any_host(rng, req.only.hosts)
        port, proto = rng.randint(1, 65535), rng.choice([1, 6, 17, 132])
        packet, ethertype = _packet(d, host, port, proto)
        selected = host in req.only.hosts and port in port_set and proto in (6, 17)
        hit = trees[d].classify(packet, ethertype)
        if selected:
            check(d, host, port, hit)
        else:
            assert hit is None, (d, host, port, proto)


def test_wrong_direction_is_untouched():
    """A packet *from* a selected (host, port) is not limited by the dest tree."""
    req = _request([IPv4Address("198.18.0.2")], [(1024, 1100)], "shape", "dest", 0)
    tree = _trees(compile_plan(req))["dest"]
    packet, _ = _packet("source", IPv4Address("198.18.0.2"), 1030)
    assert tree.classify(packet, "ip") is None


def test_ip_options_and_later_fragments_pass_untouched():
    host = IPv4Address("198.18.0.2")
    tree = _trees(compile_plan(_request([host], [(1024, 1030)], "police", "dest", 0)))["dest"]
    assert tree.classify(ipv4_packet(CLIENT4, host, 80, 1024), "ip") is not None
    assert tree.classify(ipv4_packet(CLIENT4, host, 80, 1024, ihl=6), "ip") is None
    assert tree.classify(ipv4_packet(CLIENT4, host, 80, 1024, frag_off=0x0010), "ip") is None


def _bucket_sizes(plan):
    sizes = {}
    for f in plan.ops:
        if type(f).__name__ == "U32Filter" and f.ht:
            key = (f.dev, f.parent, f.ht, f.bucket)
            sizes[key] = sizes.get(key, 0) + 1
    return sizes


def test_large_plans_keep_every_bucket_small():
    hosts = tuple(IPv4Address(f"198.18.{i}.2") for i in range(16))
    req = Request.single("eth0", hosts, ((1024, 5119),), LinkParams(28800), LinkParams(28800), mode="police", direction="dest")
    plan = compile_plan(req)
    assert len(plan.flows) == 16 * 4096
    assert max(_bucket_sizes(plan).values()) <= LEAF_MAX
    one_host = Request.single("eth0", hosts[:1], ((1, 65535),), LinkParams(28800), LinkParams(28800), direction="dest")
    assert max(_bucket_sizes(compile_plan(one_host)).values()) <= LEAF_MAX
