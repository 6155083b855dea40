"""One request for a whole fleet, split into one request per router (pure).

A client's packets cross only its own router, as in the 2000 experiment and the Vagrant
lab.  So each router gets, of every cohort, the hosts behind it; a ``--mix`` was worked
out over the whole fleet's hosts before the split (``service.request_of``), so its
shares hold fleet-wide.  Refused in one line, naming the cohort and the routers:

- a shared link (``per = "shared"``) whose hosts are behind several routers: one DSL
  line cannot be two;
- a host behind no router, or behind two.

A router may name where its ``ratelimit web`` serves ``/metrics`` (``metrics``,
HOST:PORT); ``scrape_targets`` makes the fleet's Prometheus targets of them.

    >>> r = routers_of({"r1": {"interface": "eth1", "clients": ["198.18.1.0/24"]}})
    >>> r[0].name, r[0].interface, [str(c) for c in r[0].clients]
    ('r1', 'eth1', ['198.18.1.0/24'])
"""

import re
from dataclasses import dataclass, replace
from ipaddress import ip_address, ip_network

from ..errors import FieldError, UsageError
from .model import Request
from .names import check_target


@dataclass(frozen=True)
class Router:
    """One router of the fleet: where its links go (``interface`` in ``netns``), the
    client prefixes whose packets cross it, and where its ``/metrics`` is served."""

    name: str
    interface: str
    clients: tuple
    netns: str | None = None
    metrics: str | None = None  # HOST:PORT of its ratelimit web


ROUTER_KEYS = {"interface", "netns", "clients", "metrics"}
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def routers_of(inventory: dict) -> tuple[Router, ...]:
    """The routers of ``inventory`` ({name: {"interface": ..., "clients": [prefix, ...],
    "netns": optional, "metrics": optional HOST:PORT}}), in its order; a bad entry is a FieldError naming the router and
    the field."""
    if not isinstance(inventory, dict) or not inventory:
        raise UsageError("inventory: names no router (give each its interface and clients)")
    out = []
    for name, entry in inventory.items():
        where = f"inventory {name}"
        if not isinstance(entry, dict):
            raise FieldError(where, entry, "is not a table of interface, clients, netns and metrics")
        unknown = set(entry) - ROUTER_KEYS
        if unknown:
            raise FieldError(f"{where}: {sorted(unknown)[0]}", entry[sorted(unknown)[0]],
                             f"is not a router setting ({', '.join(sorted(ROUTER_KEYS))})")
        if "interface" not in entry or "clients" not in entry:
            raise FieldError(where, sorted(entry), "lacks interface or clients")
        clients = entry["clients"]
        if isinstance(clients, str):
            clients = [c for c in clients.split(",") if c.strip()]
        if not isinstance(clients, list) or not clients:
            raise FieldError(f"{where}: clients", clients, "is not a list of client prefixes")
        prefixes = []
        for text in clients:
            try:
                prefixes.append(ip_network(str(text).strip(), strict=False))
            except ValueError:
                raise FieldError(f"{where}: clients", text, "is not an address or prefix "
                                 "(198.18.1.0/24, 2001:db8:1::/64)") from None
        interface, netns = check_target(str(entry["interface"]), entry.get("netns"))
        metrics = entry.get("metrics")
        out.append(Router(str(name), interface, tuple(prefixes), netns or None,
                          None if metrics is None else _host_port(f"{where}: metrics", metrics)))
    return tuple(out)


def _host_port(field: str, text) -> str:
    """``text`` if it is HOST:PORT (an IPv4 address, [IPv6] or a host name; a port 1-65535)."""
    host, _, port = str(text).rpartition(":")
    ok = port.isdigit() and 1 <= int(port) <= 65535
    if host.startswith("[") and host.endswith("]"):
        ok = ok and _is_address(host[1:-1], 6)
    else:
        name = _HOST_NAME.fullmatch(host) is not None and not host.replace(".", "").isdigit()
        ok = ok and (_is_address(host, 4) or name)
    if not ok:
        raise FieldError(field, text, "is not HOST:PORT (198.19.0.11:8080, [2001:db8::11]:8080, router1:8080)")
    return str(text)


def _is_address(text: str, version: int) -> bool:
    try:
        return ip_address(text).version == version
    except ValueError:
        return False


def scrape_targets(routers: tuple[Router, ...]) -> list[dict]:
    """Prometheus' targets for the fleet's ``/metrics``, one per router labelled with its
    name (the JSON of a ``file_sd_configs`` file); a router without ``metrics`` is refused,
    for the fleet's sums would leave it out.

    >>> scrape_targets(routers_of({"r1": {"interface": "eth1", "clients": "198.18.1.0/24",
    ...                                   "metrics": "198.19.0.11:8080"}}))
    [{'targets': ['198.19.0.11:8080'], 'labels': {'router': 'r1'}}]
    """
    missing = [r.name for r in routers if r.metrics is None]
    if missing:
        raise UsageError(f"inventory {missing[0]}: no metrics (give the HOST:PORT where its ratelimit web "
                         "serves /metrics)")
    return [{"targets": [r.metrics], "labels": {"router": r.name}} for r in routers]


def _behind(host, routers) -> list[str]:
    return [r.name for r in routers if any(host.version == p.version and host in p for p in r.clients)]


def partition(req: Request, routers: tuple[Router, ...]) -> dict[str, Request]:
    """``req`` (the whole fleet's links) as one request per router, on its interface, each
    with its cohorts' hosts behind it (a cohort with none there is left out; the default
    cohort, every flow no other selects, goes to every router).  A router with no host of
    ``req`` behind it is refused: it would carry nothing of the scenario."""
    owner: dict = {}
    for c in req.cohorts:
        for h in c.hosts:
            if h in owner:
                continue
            names = _behind(h, routers)
            if not names:
                raise UsageError(f"cohort {c.name}: host {h} is behind no router "
                                 f"({', '.join(r.name for r in routers)}: add it to one's clients)")
            if len(names) > 1:
                raise UsageError(f"cohort {c.name}: host {h} is behind {len(names)} routers ({', '.join(names)}); "
                                 "a client's packets cross one router: give each its own prefixes")
            owner[h] = names[0]
        if c.per == "shared":
            shared = sorted({owner[h] for h in c.hosts})
            if len(shared) > 1:
                raise UsageError(f"cohort {c.name}: one shared link for hosts behind {', '.join(shared)}; a "
                                 "shared link is behind one router (split the cohort, one per router)")
    out = {}
    for r in routers:
        cohorts = []
        for c in req.cohorts:
            if c.others:
                cohorts.append(c)
                continue
            hosts = tuple(h for h in c.hosts if owner[h] == r.name)
            if hosts:
                cohorts.append(replace(c, hosts=hosts, named=tuple((n, a) for n, a in c.named
                                                                   if any(ip_address(x) in hosts for x in a))))
        if not any(not c.others for c in cohorts):
            raise UsageError(f"router {r.name}: no host of the scenario is behind it ({', '.join(map(str, r.clients))}); "
                             "leave it out of the fleet, or give it clients")
        out[r.name] = replace(req, interface=r.interface, netns=r.netns, cohorts=tuple(cohorts))
    return out
