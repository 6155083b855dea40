"""Audiences: several cohorts on one interface, as a person says them (the edge).

Two ways, both ending in a list of ``Ask`` (one cohort each, its fields as typed) that
``service.make_request`` turns into a request:

* a scenario file (TOML, strict like a profile), one table per cohort, in the order its
  links take handles::

      description = "Mostly modems, a few ISDN lines"
      source = "where the shares come from"

      [cohort.dialup]
      description = "28.8k modems"
      hosts = "198.18.0.2-198.18.0.61"    # addresses, ranges, prefixes; or a list
      ports = "all"                       # the default: every packet of each host (per host)
      servers = "198.18.1.0/24"           # optional: only flows to/from these servers (any by default)
      server_ports = "80,443"             # optional, with ports: only flows to/from these server ports
      per = "host"                        # "port": a link per (host, port); "shared": one for all
      profile = "modem-28k8"              # and/or link options: rate, delay, queue, burst, ...

      cell = "tower-1"                    # optional: the links share a cell's capacity too

      [cell.tower-1]                      # optional: a capacity a cohort's links share
      description = "one LTE cell"
      down = "20mbit"                     # and/or up; or trace_down, trace_up, schedule (and trace_scale)
      [default]                           # optional: one link for every flow no cohort selects
      description = "everyone else"
      profile = "cable"

  A top-level ``for = "10m"`` makes the plan end by itself (docs/faults.md).
  ``parse`` reads the text (the API gives text, never a path); ``load`` reads the one
  file the user named (a bare name: a shipped example, ``profiles/scenarios/``).
  Profiles come from the profile search path by name only.
* ``--mix modem-28k8:60%,modem-56k:30%,isdn-64k:10%``: the selected hosts, sorted
  (IPv4 before IPv6, then by address), split between profiles by weight, by largest
  remainder, so each count is within one of its share; cohorts are named after their
  profiles and keep the mix's order.  Adding a host moves the boundaries after it:
  the hosts from its place on may change cohort (the counts move by at most one each).
  Per port, the (host, port) links (hosts in that order, each one's ports ascending) are
  split the same way; a profile's share then takes up to three cohorts (``_port_pieces``).
"""

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .. import SHIPPED as SHIPPED_PROFILES
from ..errors import FieldError, UsageError
from ..spec.cells import cell_table, TRACE_KEYS
from ..spec.model import GRANULARITIES
from ..spec.units import decimal
from ..traces import tracespec
from .catalog import SIDE_FIELDS, check_name

COHORT_KEYS = {"description", "source", "hosts", "ports", "servers", "server_ports", "per", "profile", "link",
               "mpu", "cell", "blackhole", "reject"} | set(SIDE_FIELDS) | set(tracespec.KEYS)
TOP_KEYS = {"description", "source", "cohort", "default", "cell", "for"}
NOT_DEFAULT_KEYS = {"hosts", "ports", "servers", "server_ports", "per"}  # the default cohort takes what no cohort selects, as one link
MAX_BYTES = 1 << 20  # a scenario file or API text larger than this is refused unread
SHIPPED = SHIPPED_PROFILES / "scenarios"  # the example audiences (``--scenario NAME``)


@dataclass(frozen=True)
class Ask:
    """One cohort as given: ``where`` names it in errors ("scenario F: [cohort.NAME]")."""

    name: str
    where: str
    hosts: object  # text or list of texts, or a tuple of addresses (--mix)
    ports: object = None  # text, or None: every port ("all")
    per: str = "host"
    profile: str | None = None
    link: str | None = None
    mpu: object = None
    options: dict = field(default_factory=dict)  # SIDE_FIELDS keys -> values, over the profile's (both sides)
    servers: object = None  # text or list of texts: the far side's addresses or prefixes (None: any)
    others: bool = False  # the default cohort: every flow no other cohort selects, one link
    server_ports: object = None  # text: the far side's port ranges (None: any)
    trace: object = None  # a tracespec.TraceAsk: traces or a schedule over the profile's
    named: tuple = ()  # ((container name, (address, ...)), ...): hosts given as container:NAME, for the record
    cell: object = None  # a spec.model.Cell: a capacity the cohort's links share
    cell_trace: object = None  # a tracespec.TraceAsk: the cell's capacity follows traces or a schedule
    blackhole: bool = False  # its links drop every packet (docs/faults.md)
    reject: bool = False  # its flows are refused (docs/faults.md)
    lasting: object = None  # the scenario's ``for``: how long the plan lasts (text, read by the request)


def find(value: str) -> Path:
    """A path as given, or a bare name (no ``/``, no ``.toml``): a shipped example."""
    if "/" in value or value.endswith(".toml"):
        return Path(value)
    check_name(value, "--scenario")
    return SHIPPED / f"{value}.toml"


def shipped() -> list[str]:
    """The names of the shipped example scenarios."""
    return sorted(p.stem for p in SHIPPED.glob("*.toml"))


def load(path: str) -> list[Ask]:
    """The cohorts of the scenario file ``path``, or of the shipped example so named (only
    that file is read)."""
    p = find(str(path))
    if not p.is_file() and p.parent == SHIPPED:
        raise FieldError("--scenario", f"'{path}'", f"is not a file or a shipped scenario ({', '.join(shipped())})")
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise FieldError("--scenario", f"'{path}'", f"cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_BYTES:
        raise FieldError("--scenario", f"'{path}'", f"is larger than {MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FieldError("--scenario", f"'{path}'", "is not UTF-8 text") from None
    return parse(text, f"scenario {path}", str(p.parent))


def parse(text, where: str = "scenario", base: str = "") -> list[Ask]:
    """The cohorts of a scenario's TOML ``text``; ``where`` starts every error; a trace's
    relative path starts from ``base`` (the file's directory)."""
    if not isinstance(text, str):
        raise FieldError(where, type(text).__name__, "is not text (a scenario is TOML text)")
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        raise FieldError(where, f"{len(text)} characters", f"are more than a scenario holds ({MAX_BYTES} bytes)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: is not TOML ({' '.join(str(e).split())})") from None
    for key in data:
        if key not in TOP_KEYS:
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {', '.join(sorted(TOP_KEYS))})")
    for key in ("description", "source"):
        if not isinstance(data.get(key, ""), str):
            raise FieldError(f"{where}: {key}", data[key], "is not text")
    tables = data.get("cohort")
    if not isinstance(tables, dict) or not tables:
        raise UsageError(f"{where}: no cohorts (each is a table [cohort.NAME] with hosts and a profile)")
    cells = data.get("cell", {})
    if not isinstance(cells, dict):
        raise FieldError(f"{where}: cell", cells, "is not a table of cells ([cell.NAME] with down and/or up)")
    cells = {name: (cell_table(name, body, f"{where}: [cell.{name}]"),
                    tracespec.ask(body, TRACE_KEYS, base, f"{where}: [cell.{name}] "))
             for name, body in cells.items()}
    asks = [_ask(name, body, f"{where}: [cohort.{name}]", base=base, cells=cells) for name, body in tables.items()]
    if "default" in data:
        asks.append(_ask(DEFAULT_COHORT, data["default"], f"{where}: [default]", default=True, base=base))
    if "for" in data:  # the whole plan's: each cohort carries it to the request
        lasting = (data["for"], f"{where}: for")
        asks = [dataclasses.replace(a, lasting=lasting) for a in asks]
    return asks


DEFAULT_COHORT = "default"


def _ask(name: str, body, where: str, default: bool = False, base: str = "", cells=None) -> Ask:
    if not isinstance(body, dict):
        raise FieldError(where, type(body).__name__, "is not a table (hosts = ..., profile = ...)")
    allowed = COHORT_KEYS - NOT_DEFAULT_KEYS - {"cell"} if default else COHORT_KEYS
    for key in body:
        if key not in allowed:
            why = " (the default cohort is one link for every flow no cohort selects)" if default else ""
            raise FieldError(where, f"'{key}'", f"is not a field (allowed: {', '.join(sorted(allowed))}){why}")
    if default:
        body = {**body, "hosts": [], "per": "shared"}
    for key in ("description", "source", "per", "profile", "link"):
        if key in body and not isinstance(body[key], str):
            raise FieldError(f"{where} {key}", body[key], "is not text")
    if not (body.get("description") or body.get("source")):
        raise UsageError(f"{where}: needs a description or its source (who these links stand for)")
    if "hosts" not in body:
        raise UsageError(f"{where}: hosts: none given (addresses, ranges like 198.18.0.2-198.18.0.9, prefixes)")
    hosts = body["hosts"]
    if not isinstance(hosts, str) and not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
        raise FieldError(f"{where} hosts", hosts, "is not text or a list of texts")
    ports = body.get("ports", "all")
    if not isinstance(ports, (str, int)) or isinstance(ports, bool):
        raise FieldError(f"{where} ports", ports, "is not text (ranges like 1024-2047, or all)")
    if "profile" not in body and "rate" not in body and not any(k in body for k in tracespec.SOURCES):
        raise UsageError(f"{where}: needs a profile, a rate, or traces")
    profile = check_name(body["profile"], f"{where} profile") if "profile" in body else None
    per = body.get("per", "host")
    if per not in GRANULARITIES:
        raise FieldError(f"{where} per", per, f"is not a link granularity ({', '.join(GRANULARITIES)})")
    if _ports(ports) is None and per == "port":
        raise UsageError(f'{where} ports: all (every packet of a host) needs per = "host" or "shared"')
    options = {k: v for k, v in body.items() if k in SIDE_FIELDS}
    servers = body.get("servers")
    if servers is not None and not isinstance(servers, str) and \
            not (isinstance(servers, list) and all(isinstance(s, str) for s in servers)):
        raise FieldError(f"{where} servers", servers, "is not text or a list of texts")
    server_ports = body.get("server_ports")
    if server_ports is not None and (not isinstance(server_ports, (str, int)) or isinstance(server_ports, bool)):
        raise FieldError(f"{where} server_ports", server_ports, "is not text (ranges like 80,443 or 8000-8099)")
    blackhole, refused = body.get("blackhole", False), body.get("reject", False)
    for key, value in (("blackhole", blackhole), ("reject", refused)):
        if not isinstance(value, bool):
            raise FieldError(f"{where} {key}", value, "is not true or false")
    cell = body.get("cell")
    if cell is not None and cell not in (cells or {}):
        raise FieldError(f"{where} cell", cell,
                         f"is not a cell of the scenario ({', '.join(cells or ()) or 'none: add [cell.NAME]'})")
    return Ask(name, where, () if default else hosts, _ports(ports), per, profile, body.get("link"),
               body.get("mpu"), options, servers, default, None if server_ports is None else str(server_ports),
               tracespec.ask(body, tracespec.KEYS, base, f"{where} "), cell=None if cell is None else cells[cell][0],
               cell_trace=None if cell is None else cells[cell][1], blackhole=blackhole,
               reject=refused)


def _ports(value):
    text = str(value).strip()
    return None if text.lower() == "all" else text


def mix(text, hosts: tuple, ports, per: str) -> list[Ask]:
    """``--mix NAME:WEIGHT,...``: ``hosts`` (addresses) split between the profiles by weight
    (per host), or their (host, port) links (per port: see ``_port_pieces``)."""
    if per == "shared":
        raise UsageError("--mix: splits hosts or links between profiles; a shared link is one link (use a scenario)")
    if per == "port" and ports is None:
        raise UsageError("--mix: a split per port needs --ports (ranges like 1024-2047)")
    parts = [p.strip() for p in str(text or "").split(",")]
    if not parts or not all(parts):
        raise FieldError("--mix", f"'{text}'", "is not a mix (PROFILE:WEIGHT,... e.g. modem-28k8:60%,isdn-64k:40%)")
    names, weights = [], []
    for part in parts:
        name, colon, weight = part.rpartition(":")
        if not colon or not name:
            raise FieldError("--mix", f"'{part}'", "is not PROFILE:WEIGHT (e.g. modem-28k8:60%)")
        check_name(name, "--mix")
        if name in names:
            raise FieldError("--mix", f"'{name}'", "is named twice")
        value = decimal(weight[:-1] if weight.endswith("%") else weight)
        if value is None or not math.isfinite(value) or not 0 < value <= 1e6:
            raise FieldError(f"--mix {name}", f"'{weight}'", "is not a weight (a number or percentage above 0)")
        names.append(name)
        weights.append(value)
    ordered = sorted(hosts, key=lambda h: (h.version, int(h)))
    if per == "port":
        port_list = [p for lo, hi in ports for p in range(lo, hi + 1)]
        counts = largest_remainder(len(ordered) * len(port_list), weights)
    else:
        counts = largest_remainder(len(ordered), weights)
    asks, start = [], 0
    for name, count in zip(names, counts):
        if not count:
            continue
        if per == "port":
            for k, (piece_hosts, piece_ports) in enumerate(_port_pieces(ordered, port_list, start, start + count)):
                asks.append(Ask(name if k == 0 else f"{name}.{k + 1}", f"--mix {name}", piece_hosts, piece_ports,
                                per, name))
        else:
            asks.append(Ask(name, f"--mix {name}", tuple(ordered[start:start + count]), ports, per, name))
        start += count
    return asks


def _port_pieces(hosts: list, ports: list, start: int, end: int) -> list[tuple]:
    """Links ``start``..``end - 1`` of the (host, port) list (hosts in order, each one's
    ``ports`` ascending) as cohorts' selectors: (hosts, port ranges) pieces -- a first host's
    last ports, the whole hosts after it, a last host's first ports -- consecutive hosts
    with the same ports in one piece.  A cohort is hosts x ports, so one share of links may
    take up to three cohorts: the first is named after the profile, the others NAME.2, NAME.3."""
    n, pieces = len(ports), []
    for i in range(start // n, -(-end // n)):
        lo, hi = max(start, i * n) - i * n, min(end, (i + 1) * n) - i * n
        ranges = _ranges(ports[lo:hi])
        if pieces and pieces[-1][1] == ranges:
            pieces[-1][0].append(hosts[i])
        else:
            pieces.append(([hosts[i]], ranges))
    return [(tuple(h), r) for h, r in pieces]


def _ranges(ports: list) -> tuple:
    """Ascending ports as (low, high) runs."""
    out: list = []
    for p in ports:
        if out and out[-1][1] == p - 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return tuple(tuple(r) for r in out)


def largest_remainder(n: int, weights: list[float]) -> list[int]:
    """``n`` split by ``weights``: each its floor, then one more to the largest remainders
    (earlier first on a tie), so each count is within one of its exact share."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:n - sum(counts)]:
        counts[i] += 1
    return counts
