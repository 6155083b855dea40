"""Property test: the queue program with its map (several tx queues) takes exactly the
packets the root u32 tree takes with one queue, each to the same link.

Random packets -- selected flows, other ports and hosts, ICMP, IPv4 with options, later
fragments, IPv6 with an extension header, ARP, headers outside the linear part -- go
through a model of the compiled u32 trees of a one-queue plan (``u32model``) and through
a model of the kernel running the program (``bpfmodel``) on the same request with
several queues, then through the group's own tree.  Both must end on the same link class
or both on none; a hit names its group's class in the tree of the queue it picks.
"""

from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit.plan.compile import compile_plan, ifb_name
from ratelimit.plan.layout import QUEUE_GROUP_LINKS, ROOT, TREE_BASE, Layout
from ratelimit.plan.ops import HtbQdisc
from ratelimit.plan.queuepin import program, QueueEntry
from ratelimit.spec.model import Cohort, LinkParams, Request
from bpfmodel import Skb, run, value_of
from u32model import Htb, ipv4_packet, ipv6_packet

FAR4, FAR6 = IPv4Address("198.19.255.9"), IPv6Address("2001:db8:ffff::9")
v4_hosts = st.builds(lambda a, b: IPv4Address(f"198.18.{a}.{b}"), st.integers(0, 2), st.sampled_from([1, 2, 255]))
v6_hosts = st.builds(lambda a: IPv6Address(f"2001:db8:{a:x}::1"), st.integers(0, 2))
whole4 = st.builds(lambda b: IPv4Address(f"198.19.7.{b}"), st.integers(1, 4))
whole6 = st.builds(lambda b: IPv6Address(f"2001:db8:7::{b:x}"), st.integers(1, 4))


def _request(hosts, ports, per, wholes, others, direction) -> Request:
    link = LinkParams(28800)
    cohorts = [Cohort("ports", tuple(dict.fromkeys(hosts)), (ports,), link, link, per=per)]
    if wholes:
        cohorts.append(Cohort("hosts", tuple(dict.fromkeys(wholes)), None, link, link, per="host"))
    if others:
        cohorts.append(Cohort("rest", (), None, link, link, per="shared", others=True))
    return Request("eth0", tuple(cohorts), mode="shape", direction=direction)


def _packet(direction, host, port, kind):
    far = FAR4 if host.version == 4 else FAR6
    src, dst = (far, host) if direction == "dest" else (host, far)
    sport, dport = (443, port) if direction == "dest" else (port, 443)
    if host.version == 4:
        proto, ihl, frag = {"tcp": (6, 5, 0), "udp": (17, 5, 0), "icmp": (1, 5, 0), "options": (6, 6, 0),
                            "fragment": (17, 5, 185), "first-fragment": (17, 5, 0x2000)}.get(kind, (6, 5, 0))
        return ipv4_packet(src, dst, sport, dport, proto, ihl, frag), "ip"
    next_header = {"udp": 17, "icmp": 58, "options": 0, "fragment": 44}.get(kind, 6)
    return ipv6_packet(src, dst, sport, dport, next_header), "ipv6"


def _device(plan, direction):
    return plan.request.interface if direction == "dest" else ifb_name(plan.request.interface)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=st.lists(st.one_of(v4_hosts, v6_hosts), min_size=1, max_size=4),
       first=st.integers(1, 65000), width=st.integers(0, 400), per=st.sampled_from(["port", "host"]),
       wholes=st.lists(st.one_of(whole4, whole6), max_size=3), others=st.booleans(),
       direction=st.sampled_from(["dest", "source"]), queues=st.integers(2, 4), probes=st.data())
def test_the_program_takes_what_the_u32_tree_takes_to_the_same_link(hosts, first, width, per, wholes, others,
                                                                     direction, queues, probes):
    req = _request(hosts, (first, min(65535, first + width)), per, wholes, others, direction)
    # the same groups on one queue: the trees differ, each link's class does not
    one, many = compile_plan(replace(req, group_links=QUEUE_GROUP_LINKS)), compile_plan(replace(req, queues=queues))
    dev = _device(one, direction)
    tree = Htb(one.ops, dev, ROOT)
    entries = {op.key(): op.value() for op in many.ops if type(op) is QueueEntry and op.dev == dev}
    groups = {op.parent: op.handle for op in many.ops if type(op) is HtbQdisc and op.dev == dev}
    lay = Layout.of(replace(req, queues=queues))
    code = program(direction)
    candidates = list(req.cohorts[0].hosts) + list(wholes) + [IPv4Address("198.18.9.9"), IPv6Address("2001:db8:9::9")]
    for _ in range(12):
        host = probes.draw(st.sampled_from(candidates))
        port = probes.draw(st.one_of(st.integers(first, min(65535, first + width)), st.integers(1, 65535)))
        kind = probes.draw(st.sampled_from(["tcp", "udp", "icmp", "options", "fragment", "first-fragment"]))
        packet, ethertype = _packet(direction, host, port, kind)
        linear = probes.draw(st.sampled_from([None, 20, 40]))  # headers past it: pulled in first
        hit = tree.classify(packet, ethertype)
        skb = Skb(packet, ethertype, linear=linear)
        assert run(code, skb, entries) == 0  # TC_ACT_OK: every packet goes on
        if hit is None:
            assert (skb.queue_mapping, skb.priority) == (0, 0), (host, port, kind)
            continue
        assert skb.queue_mapping, (host, port, kind)
        group = skb.priority
        assert group >> 16 == TREE_BASE + skb.queue_mapping - 1
        assert group in {lay.group_class(link) for link in range(lay.links)}
        link = Htb(many.ops, dev, groups[group]).classify(packet, ethertype)
        assert link is not None and link.classid == hit.classid, (host, port, kind)


def test_other_ethertypes_pass_and_a_stale_class_of_ours_is_cleared():
    """ARP goes on untouched; a miss clears a priority that names a class of one of
    ratelimit's trees (left by the program of another device), and keeps any other."""
    req = _request([IPv4Address("198.18.0.2")], (1000, 1000), "port", [], False, "dest")
    plan = compile_plan(replace(req, queues=2))
    entries = {op.key(): op.value() for op in plan.ops if type(op) is QueueEntry}
    assert list(map(value_of, entries.values())) == [(1, 0x540010)] or list(map(value_of, entries.values())) == \
        [(2, 0x550010)]
    arp = Skb(bytes(28), "arp", priority=0x550010)
    run(program("dest"), arp, entries)
    assert (arp.queue_mapping, arp.priority) == (0, 0)
    packet, _ = _packet("dest", IPv4Address("198.18.0.3"), 1000, "tcp")
    for priority, left in ((0x540012, 0), (0xD3FFFF, 0), (6, 6), (0x520010, 0x520010), (0xD40001, 0xD40001)):
        skb = Skb(packet, "ip", priority=priority)
        run(program("dest"), skb, entries)
        assert (skb.queue_mapping, skb.priority) == (0, left)
