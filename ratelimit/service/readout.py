"""Reading what ratelimit installed: the request (``applied``, ``status``) and every
link's counters (``counters`` as columns, ``statistics`` as rows, ``Poller`` for a reader
that asks again and again).

A read changes nothing unless it is told to: where a run was killed mid-change, a reader
given ``repair=True`` puts the interface back first, as an apply would (``--list``,
``--stats`` and the dashboard do); one without refuses in one line.
"""

import copy
import functools
import os
import time
from dataclasses import dataclass, field

from ..driver import follow
from ..driver.cells import now_bps as cells_now_bps
from ..driver.steps import now_bps
from ..driver.tracerates import TraceRates
from ..errors import NotFoundError, StateError
from ..kernel import nft
from ..kernel.counters import FlowTable
from ..plan import reject
from ..plan.compile import compiled, link_flows
from ..spec.model import Request
from ..spec.names import check_target
from ..spec.summary import shared_cells, summary
from ..state import records, recovery
from ..state.installed import check_interface, executor, find_installed
from . import expiry


def _readable(ex, netns, interface, notice, repair: bool):
    """What is on ``interface`` (``Installed``: our request, and a plan staged beside it).  A killed run's marker is repaired first with ``repair``
    (which needs root and the lock: a run in progress makes this busy), else refused; a
    half-configured interface or an unreadable record is reported, never read as "nothing
    installed"."""
    if records.read_marker(netns, interface) is not None:
        if not repair:
            raise StateError(f"--interface: a ratelimit run on {interface} was killed mid-change; "
                             f"'ratelimit --if {interface} --list' as root puts it back")
        if os.geteuid() != 0:
            raise StateError(f"--interface: a ratelimit run on {interface} was killed mid-change; run this as "
                             "root to put it back")
        with records.lock(netns, interface, timeout=0):
            recovery.repair(ex, netns, interface, notice)
    return find_installed(ex, netns, interface, force=False, classes=False)


def installed(interface: str, netns: str | None = None, notice=None, *, repair: bool = False):
    """What ratelimit has on ``interface`` (``state.installed.Installed``: the request
    applied and a request staged beside it, or None), checked against the kernel;
    ``repair``: see the module's docstring."""
    interface, netns = check_target(interface, netns)
    with executor(netns) as ex:
        check_interface(ex, interface, netns)
        return _readable(ex, netns, interface, notice, repair)


def applied(interface: str, netns: str | None = None, notice=None, *, repair: bool = False) -> Request | None:
    """The request ratelimit has applied on ``interface`` (``installed``'s)."""
    return installed(interface, netns, notice, repair=repair).request


def status(interface: str, netns: str | None = None, notice=None, *, repair: bool = False) -> dict | None:
    """The summary of what ratelimit has on ``interface``, or None."""
    req = applied(interface, netns, notice, repair=repair)
    return summary(req) if req else None


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class LinkTable:
    """What reading statistics needs of an applied request, compiled once per request:
    each link's (direction, host, port or None, device) and configured rate, in the order
    of the plan's flows, and where the kernel keeps its counters."""

    summary: dict
    keys: tuple
    rate_bps: tuple
    cohorts: tuple  # each link's (cohort, profile)
    flows: object  # kernel.counters.FlowTable
    traces: tuple = ()  # each link's trace or schedule (its file's name), None for a static rate

    def __len__(self) -> int:
        return len(self.keys)


@functools.lru_cache(maxsize=4)
def link_table(req: Request) -> LinkTable:
    """The request's LinkTable, built once per request: in shape mode from its layout (each
    link's class, without building the plan's filters), in police mode from its plan (a
    link's counters are its filter's)."""
    plan = compiled(req) if req.mode == "police" else _Flows(link_flows(req))
    keys = tuple((f.direction, None if f.host is None else str(f.host), f.port, f.dev) for f in plan.flows)
    cohort = {c.name: c for c in req.cohorts}
    rates = {(c.name, "dest"): c.down.rate_bps for c in req.cohorts} | \
        {(c.name, "source"): c.up.rate_bps for c in req.cohorts}
    traces = {(c.name, d): None if c.trace is None or c.trace.source(d) is None else c.trace.source(d).name
              for c in req.cohorts for d in ("dest", "source")}
    return LinkTable(summary(req), keys,
                     tuple(None if traces[f.cohort, f.direction] else rates[f.cohort, f.direction] for f in plan.flows),
                     tuple((f.cohort, cohort[f.cohort].profile) for f in plan.flows), FlowTable.of(plan),
                     tuple(traces[f.cohort, f.direction] for f in plan.flows))


@dataclass(frozen=True)
class _Flows:
    flows: tuple


@dataclass(frozen=True)
class Counters:
    """Every link's counters on an interface, as columns (``counters``): link ``i`` is
    ``keys[i]`` = (direction, host, port or None, device), configured at ``rate_bps[i]`` (None:
    no rate, or a traced one), in ``cohorts[i]`` = (cohort, profile), and its counters are
    ``counters[name][i]`` for bytes, packets, drops, overlimits, backlog_bytes and
    backlog_pkts.  ``applied`` is the applied request's ``summary`` (None: nothing is, and
    the rest is empty); ``traces[i]`` names the trace a link follows (None: a static rate);
    ``driver`` is ``follow.report`` of a traced plan's driver, and ``trace_rates`` its links'
    capacity over a window of the clock (``tracerates.TraceRates``), both None otherwise.
    ``keys`` and ``rate_bps`` are the same objects while the configuration stays."""

    interface: str
    netns: str | None
    time: float
    applied: dict | None = None
    keys: tuple = ()
    rate_bps: tuple = ()
    cohorts: tuple = ()
    counters: dict = field(default_factory=dict)
    traces: tuple = ()
    driver: dict | None = None
    trace_rates: object = None
    staged: dict | None = None  # the ``summary`` of a plan staged beside it, waiting for a commit


def _read_counters(ex, interface: str, netns: str | None, notice, repair: bool) -> Counters:
    check_interface(ex, interface, netns)
    installed = _readable(ex, netns, interface, notice, repair)
    req = installed.request
    staged = None if installed.staged is None else summary(installed.staged)
    if req is None:
        return Counters(interface, netns, time.time(), staged=staged)
    table = link_table(req)
    cols = ex.counters(table.flows)
    driver, rates = follow.report(req, netns, interface), None
    if driver:
        try:
            rates = trace_rates(req)
        except StateError as err:
            driver["trace_now_error"] = str(err)
    return Counters(interface, netns, time.time(), copy.deepcopy(table.summary), table.keys, table.rate_bps,
                    table.cohorts, cols, table.traces, driver, rates, staged)


@functools.lru_cache(maxsize=4)
def trace_rates(req: Request):
    """The traced links' capacity over any window (``tracerates.TraceRates``), in the order of
    ``link_table(req).keys``; built once per request (it reads the trace files)."""
    return TraceRates(req, link_table(req).keys)


def counters(interface: str, netns: str | None = None, notice=None, *, repair: bool = False) -> Counters:
    """Counters of every link as columns (``Counters``), read in one dump per device.  The
    record is checked against the kernel first (root and ingress qdiscs); with ``repair``,
    a run killed mid-change is repaired first (``notice`` hears of it)."""
    interface, netns = check_target(interface, netns)
    with executor(netns) as ex:
        return _read_counters(ex, interface, netns, notice, repair)


class Poller:
    """``counters`` for a reader that asks again and again (the dashboard): it keeps one
    open netlink reader per namespace, so a read costs the dumps and nothing else.  A read
    that fails on a kept reader (the namespace or device was remade) is tried once more on
    a fresh one.  ``repair``: as ``counters``'.  ``close()`` when done."""

    def __init__(self, *, repair: bool = False):
        self._readers: dict = {}
        self.repair = repair

    def __call__(self, interface: str, netns: str | None = None) -> dict:
        for attempt in (0, 1):
            ex = self._readers.get(netns)
            if ex is None:
                ex = self._readers[netns] = executor(netns)
            try:
                return _read_counters(ex, interface, netns, None, self.repair)
            except (NotFoundError, OSError):
                self._drop(netns)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _drop(self, netns) -> None:
        ex = self._readers.pop(netns, None)
        if ex is not None:
            ex.close()

    def close(self) -> None:
        for netns in list(self._readers):
            self._drop(netns)


def statistics(interface: str, netns: str | None = None, notice=None, *, repair: bool = False) -> dict:
    """Counters per (host, port, direction), as one dict per link (``--stats``, ``--json``,
    the lab); see ``counters``."""
    c = counters(interface, netns, notice, repair=repair)
    data = {"interface": c.interface, "netns": c.netns, "time": c.time, "applied": c.applied, "staged": c.staged}
    if (c.applied or {}).get("expires_ms") is not None:
        data["expiry"] = expiry.alive(netns, interface)  # whether its watcher runs
    if c.applied is not None:
        data["driver"] = c.driver
    names = tuple(c.counters)
    data["links"] = [{"direction": d, "host": h, "port": p, "dev": dev, **dict(zip(names, values)), "rate_bps": r,
                      "cohort": cohort, "profile": profile, **({"trace": trace} if trace else {})}
                     for (d, h, p, dev), r, (cohort, profile), trace, *values
                     in zip(c.keys, c.rate_bps, c.cohorts, c.traces or (None,) * len(c.keys), *c.counters.values())]
    cells = cell_totals(data["links"], c.applied)
    if cells:
        data["cells"] = cells
    refused = rejected(c.applied, interface, netns)
    if refused:
        data["rejected"] = refused
    if data.get("driver"):
        _trace_now(data, interface, netns)
    return data


def rejected(applied: dict | None, interface: str, netns: str | None) -> dict:
    """Per cohort that rejects (docs/faults.md, "A reject"): the packets its rules refused,
    to its hosts (dest) and from them (source); {} for a plan without a reject."""
    cohorts = [(i, co["name"]) for i, co in enumerate((applied or {}).get("cohorts") or ()) if co.get("reject")]
    if not cohorts:
        return {}
    counts = nft.counters(netns, reject.table_name(interface))
    return {name: {d: counts.get(reject.counter_name(i, d), 0) for d in ("dest", "source")} for i, name in cohorts}


def cell_totals(links: list, applied: dict | None) -> dict:
    """Per cell and direction it shares (docs/cells.md): its capacity, its users (links) and
    the sums of their counters so far; {} for a plan without cells.

    >>> applied = {"cohorts": [{"name": "a", "cell": {"name": "t", "down_bps": 8000, "up_bps": None}}]}
    >>> links = [{"cohort": "a", "direction": "dest", "bytes": 5, "packets": 1, "drops": 0},
    ...          {"cohort": "a", "direction": "source", "bytes": 9, "packets": 2, "drops": 0}]
    >>> cell_totals(links, applied)
    {'t': {'dest': {'capacity_bps': 8000, 'users': 1, 'bytes': 5, 'packets': 1, 'drops': 0}}}
    """
    shared = shared_cells(applied)
    out: dict = {}
    for row in links if shared else ():  # a plan without cells: no pass over its links
        cell = shared.get((row["cohort"], row["direction"]))
        if cell is None:
            continue
        name, capacity = cell
        sums = out.setdefault(name, {}).setdefault(row["direction"], {
            "capacity_bps": capacity, "users": 0, "bytes": 0, "packets": 0, "drops": 0})
        sums["users"] += 1
        for key in ("bytes", "packets", "drops"):
            sums[key] += row[key]
    return out


def listing(req: Request | None, staged: Request | None = None) -> dict:
    """What ``--list --json`` says of ``req`` applied (and ``staged`` beside it), without the
    clock, the driver and the counters, worked out from the requests alone (pure): the
    fleet's before and after.  ``listing(None)`` is an interface with nothing installed."""
    rows = []
    if req is not None:
        table = link_table(req)
        for (d, h, p, dev), r, (cohort, profile), trace in zip(table.keys, table.rate_bps, table.cohorts,
                                                              table.traces or (None,) * len(table)):
            rows.append({"direction": d, "host": h, "port": p, "dev": dev, "rate_bps": r, "cohort": cohort,
                         "profile": profile, **({"trace": trace} if trace else {})})
    return {"applied": None if req is None else summary(req), "staged": None if staged is None else summary(staged),
            "links": rows}


def _trace_now(data: dict, interface: str, netns) -> None:
    """Each traced link's (and cell's) ``trace_bps``: its class rate for the step of the
    clock now, as the trace gives it (the driver's step length), for ``--stats`` beside its
    counters."""
    try:
        req = records.load(netns, interface).request
        at_ms, step_ms = data["time"] * 1000, data["driver"]["step_ms"] or follow.DEFAULT_STEP_MS
        now, cells_now = now_bps(req, at_ms, step_ms), cells_now_bps(req, at_ms, step_ms)
    except (StateError, AttributeError) as err:
        data["driver"]["trace_now_error"] = str(err)
        return
    for row in data["links"]:
        if row.get("trace"):
            row["trace_bps"] = now.get((row["direction"], row["host"], row["port"]))
    for (name, direction), bps in cells_now.items():
        if direction in data.get("cells", {}).get(name, {}):
            data["cells"][name][direction]["trace_bps"] = bps
