"""A lab's clients spread over cohorts: ``--mix`` splits them, a scenario file names them.

Two ways to put an audience on a lab, both ending in ``scenario.Ask`` s (one per
cohort) that ``service.make_request`` turns into one request on the router:

* ``--mix PROFILE:SHARE,...`` splits the lab's **clients** between the profiles by
  largest remainder, as ``scenario.mix`` splits hosts: in order (client1 first, the
  order of their addresses), each cohort's count within one client of its share, the
  same clients always split the same way.  A client is one machine: its IPv4 and IPv6
  addresses go to the same cohort.  Each cohort's links are what ``--per`` says (a link
  per client, or per connection) on the lab's ports.
* ``--scenario FILE|NAME``: the cohorts select clients **by address**, as they would on
  any router: client *i* is 198.18.0.(*i*+1) (``topology``), so the shipped examples
  (100 clients, 198.18.0.2-198.18.0.101) fit a lab of 100 clients as written.  A cohort
  may also name a client as ``client3``.  Every host a
  cohort names must be a client of the lab; a client's IPv6 address joins the cohort of
  its IPv4 one; clients no cohort names keep unimpaired links.  Without ``--clients`` the
  lab has as many clients as the scenario's highest address needs.  Its ports and
  granularity are the file's (``--per`` does not apply).  To put a scenario's shares on
  fewer clients, give them as a ``--mix``.

``client_cohorts`` reads back, from what was applied, which cohort each client is in.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence
from ipaddress import ip_address

from ..errors import FieldError, UsageError
from ..profiles import scenario
from ..spec.selectors import parse_hosts
from . import topology

Client = tuple[str, str]  # (IPv4, IPv6) address of one lab client


def _where(spec) -> str:
    return "--mix" if spec.mix is not None else "--scenario"


def check(spec) -> None:
    """A mix or a scenario, not both, and no option the audience names itself."""
    if spec.mix is not None and spec.scenario is not None:
        raise UsageError("--scenario and --mix: give one of them")
    if spec.profile is not None:
        raise UsageError(f"--profile: {_where(spec)} names each cohort's profile")


def clients_needed(path: str) -> int:
    """The clients a lab needs for the scenario ``path``: up to its highest client address."""
    highest = 0
    for ask in scenario.load(path):
        for addr in parse_hosts(ask.hosts, f"{ask.where} hosts", resolve=_lab_names(topology.MAX_CLIENTS)):
            highest = max(highest, _client_index(addr, ask, topology.MAX_CLIENTS))
    return highest


def asks(spec, clients: Sequence[Client], ports: str) -> list[scenario.Ask]:
    """The cohorts of ``spec`` (a ``link.LinkSpec`` with ``mix`` or ``scenario``) over the
    lab's ``clients`` (their addresses, in order), whose ephemeral ports are ``ports``."""
    check(spec)
    if spec.mix is not None:
        return _mix(spec.mix, clients, ports, spec.per)
    return _scenario(spec.scenario, clients)


def _mix(text: str, clients: Sequence[Client], ports: str, per: str) -> list[scenario.Ask]:
    v4 = tuple(ip_address(a4) for a4, _ in clients)
    twin = {ip_address(a4): ip_address(a6) for a4, a6 in clients}
    split = scenario.mix(text, v4, None, "host")  # the clients, split by their IPv4 addresses
    named = [part.rpartition(":")[0].strip() for part in str(text).split(",")]
    empty = [name for name in named if name not in {a.name for a in split}]
    if empty:
        raise FieldError(f"--mix {empty[0]}", f"{len(clients)} client(s)",
                         f"leave this profile without a client (with {_fewest_clients(text, len(named))} "
                         f"clients every profile of the mix gets one)")
    out = []
    for ask in split:
        hosts = ask.hosts + tuple(twin[h] for h in ask.hosts)
        out.append(dataclasses.replace(ask, hosts=hosts, ports=ports, per=per))
    return out


def _fewest_clients(text: str, parts: int) -> int:
    """The fewest clients a mix splits so that every profile gets at least one."""
    for n in range(parts, topology.MAX_CLIENTS + 1):
        hosts = tuple(ip_address(f"{topology.LAN4}.{i + 2}") for i in range(n))
        if len(scenario.mix(text, hosts, None, "host")) == parts:
            return n
    return topology.MAX_CLIENTS


def _scenario(path: str, clients: Sequence[Client]) -> list[scenario.Ask]:
    n = len(clients)
    twin = {ip_address(a4): ip_address(a6) for a4, a6 in clients}
    twin.update({v6: v4 for v4, v6 in list(twin.items())})
    out = []
    for ask in scenario.load(path):
        named = parse_hosts(ask.hosts, f"{ask.where} hosts", resolve=_lab_names(topology.MAX_CLIENTS))
        for addr in named:
            _client_index(addr, ask, n)
        hosts = tuple(dict.fromkeys(a for h in named for a in sorted((h, twin[h]), key=lambda x: x.version)))
        out.append(dataclasses.replace(ask, hosts=hosts))
    return out


def _client_index(addr, ask, n: int) -> int:
    """The client number of a lab address; FieldError naming the cohort if it is none."""
    lan4 = ip_address(f"{topology.LAN4}.0")
    lan6 = ip_address(topology.LAN6)
    base = lan4 if addr.version == 4 else lan6
    i = int(addr) - int(base) - 1
    if not 1 <= i <= n:
        first, last = f"{topology.LAN4}.2", f"{topology.LAN4}.{n + 1}"
        raise FieldError(f"{ask.where} hosts", f"'{addr}'",
                         f"is not a client of the lab ({first}-{last}, client1-client{n}"
                         f"{'' if n == topology.MAX_CLIENTS else f'; --clients {n}'})")
    return i


def _lab_names(n: int):
    """A resolver for ``parse_hosts``: ``clientN`` is client N's IPv4 address; nothing else
    resolves (a lab's cohorts select its own clients)."""
    def resolve(name, *_):
        m = name[len("client"):] if name.startswith("client") else ""
        if m.isdigit() and 1 <= int(m) <= n:
            return [(socket.AF_INET, socket.SOCK_STREAM, 0, "", (f"{topology.LAN4}.{int(m) + 1}", 0))]
        raise socket.gaierror(f"{name}: not a lab client's name (client1-client{n})")
    return resolve


def client_cohorts(applied: dict, clients: Sequence[tuple[str, str, str]]) -> dict[str, dict | None]:
    """Which cohort each client is in: ``{client name: {"cohort", "profile"}}`` (None: no
    cohort selects it), from ``summary.summary`` of what was applied and the clients'
    ``(name, IPv4, IPv6)``."""
    by_host = {h: c for c in applied.get("cohorts", ()) for h in c["hosts"]}
    out = {}
    for name, a4, a6 in clients:
        c = by_host.get(a4) or by_host.get(a6)
        out[name] = {"cohort": c["name"], "profile": c["profile"]} if c else None
    return out
