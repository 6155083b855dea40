"""A reject, as nftables rules: pure.  A cohort with ``reject`` has every packet of its
flows answered as a refused connection: a TCP reset for TCP, ICMP port unreachable for
the rest (docs/faults.md, "A reject").  Its links stay as they are; the rules run before
they would see a packet.

The rules are one nftables table per interface, ``ratelimit_<interface>`` in the ``inet``
family, replaced whole in one nftables transaction (``kernel.nft``).  Packets to the hosts
are matched where they leave through the interface (forward and output hooks), packets
from them where they arrive on it (input and forward).  The resets and unreachables the
rules send leave through the output hook too, and pass.  Each direction of each cohort
counts what it refused in a named counter.

>>> table_name("eth1")
'ratelimit_eth1'
"""

from ..spec.model import Cohort, Request

HOOKS = {"dest": ("forward", "output"), "source": ("input", "forward")}  # where each direction's packets pass
PRIORITY = -10  # before iptables' and nft's filter chains (priority 0): a refusal answers first
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def table_name(interface: str) -> str:
    """The interface's table: its name with each character nft does not take in a name as
    ``_xx`` (hex), so that two interfaces never share one."""
    return "ratelimit_" + "".join(ch if ch in _SAFE - {"_"} else f"_{ord(ch):02x}" for ch in interface)


def counter_name(index: int, direction: str) -> str:
    """The named counter of the ``index``-th cohort (in the request's order) and a direction."""
    return f"c{index}_{'down' if direction == 'dest' else 'up'}"


def rejected(req: Request) -> list[tuple[int, Cohort]]:
    """The cohorts that reject, with their index in ``req.cohorts``."""
    return [(i, c) for i, c in enumerate(req.cohorts) if c.reject]


def _set(items) -> str:
    items = list(dict.fromkeys(items))
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _ports(ranges) -> str:
    return _set(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def _matches(req: Request, c: Cohort, direction: str) -> list[str]:
    """A match per address family the cohort's hosts have: the interface, the hosts, their
    ports and the far side (servers, their ports), in nft's words."""
    to_hosts = direction == "dest"
    dev = f'{"oifname" if to_hosts else "iifname"} "{req.interface}"'  # a router's side (validate)
    host_end, far_end = ("daddr", "saddr") if to_hosts else ("saddr", "daddr")
    host_port, far_port = ("dport", "sport") if to_hosts else ("sport", "dport")
    out = []
    for family, word in ((4, "ip"), (6, "ip6")):
        hosts = [str(h) for h in c.hosts if h.version == family]
        if not hosts:
            continue
        words = [dev, f"{word} {host_end} {_set(hosts)}"]
        if c.servers is not None:  # a host has servers of its family (validate)
            words.append(f"{word} {far_end} {_set(str(s) for s in c.servers if s.version == family)}")
        if c.ports is not None or c.server_ports is not None:
            words.append("meta l4proto { tcp, udp }")  # the protocols whose ports links match (u32tree.PROTOCOLS)
        if c.ports is not None:
            words.append(f"th {host_port} {_ports(c.ports)}")
        if c.server_ports is not None:
            words.append(f"th {far_port} {_ports(c.server_ports)}")
        out.append(" ".join(words))
    return out


def ruleset(req: Request) -> str | None:
    """The table's definition, as ``nft -f`` reads it (None: no cohort rejects).  It
    creates the table, empties it, and fills it, so that applying it replaces what was there
    in one transaction."""
    cohorts = rejected(req)
    if not cohorts:
        return None
    directions = ("dest", "source") if req.direction == "both" else (req.direction,)
    chains = {"input": [], "forward": [], "output": []}
    counters = []
    for index, c in cohorts:
        for direction in directions:
            name = counter_name(index, direction)
            counters.append(f"\tcounter {name} {{\n\t}}")
            for match in _matches(req, c, direction):
                for hook in HOOKS[direction]:
                    chains[hook] += [f"\t\t{match} meta l4proto tcp counter name {name} reject with tcp reset",
                                     f"\t\t{match} counter name {name} reject with icmpx type port-unreachable"]
    if chains["output"]:  # the answers of the rules themselves leave through the output hook
        dev = f'oifname "{req.interface}"'
        chains["output"][:0] = [f"\t\t{dev} tcp flags & rst == rst accept",
                                f"\t\t{dev} icmp type destination-unreachable accept",
                                f"\t\t{dev} icmpv6 type destination-unreachable accept"]
    table = f"inet {table_name(req.interface)}"
    body = "\n".join(counters + [f"\tchain {hook} {{\n\t\ttype filter hook {hook} priority {PRIORITY}; policy accept;\n"
                                 + "".join(rule + "\n" for rule in rules) + "\t}"
                                 for hook, rules in chains.items() if rules])
    return f"table {table}\ndelete table {table}\ntable {table} {{\n{body}\n}}\n"


def removal(interface: str) -> str:
    """What ``nft -f`` reads to remove the interface's table, whether or not it is there."""
    table = f"inet {table_name(interface)}"
    return f"table {table}\ndelete table {table}\n"
