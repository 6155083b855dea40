"""What an applied request is, as data and as one line: ``summary`` (for --list, --json,
the dashboard, /metrics, the lab and the record of a repair) and ``describe``.
"""

from .model import Cohort, LinkParams, Request
from .selectors import format_ports
from .units import format_rate, format_time


def summary(req: Request) -> dict:
    """What is applied, as data (for --list, --json, the dashboard and /metrics): per
    cohort (``cohorts``) its selectors, granularity and link layer, and per side the
    link's numbers, its burst and queue (as given and in line bytes).  A request of one
    cohort also has that cohort's fields at the top, as before cohorts; one of several
    has its hosts there and no profile, sides or link of its own."""
    directions = 2 if req.direction == "both" else 1
    cohorts = [_cohort(req, c, directions) for c in req.cohorts]
    out = {"interface": req.interface, "netns": req.netns, "mode": req.mode, "direction": req.direction,
           "flows": req.flow_count() * directions, "links": req.link_count() * directions}
    if len(cohorts) == 1:
        out.update({k: v for k, v in cohorts[0].items() if k not in ("name", "flows", "links")})
    else:
        out.update(profile=None, hosts=[h for c in cohorts for h in c["hosts"]], ports=None, per=None, link=None,
                   down={}, up={})
    out["cohorts"] = cohorts
    if req.container is not None:
        out["container"] = dict(zip(("engine", "name", "id", "network", "use"), req.container))
    if req.queues > 1:
        out["queues"] = req.queues
    if req.server_side:
        out["server_side"] = True  # down arrives on the interface (its IFB device), up leaves it
    if req.lasting_ms is not None:
        out["lasting_ms"], out["expires_ms"] = req.lasting_ms, req.expires_ms  # it ends by itself (--for)
        out["restores"] = req.restores is not None  # and the plan before it comes back then
    return out


def _cohort(req: Request, c: Cohort, directions: int) -> dict:
    def side(p: LinkParams) -> dict:
        out = {k: v for k, v in p.__dict__.items() if v and k not in ("queue", "burst", "loss_model", "slot", "aqm")}
        if p.loss_model is not None:
            out["loss_model"] = {**p.loss_model.as_dict(), "lost_pct": round(p.loss_model.loss_rate() * 100, 6),
                                 "burst_packets": round(p.loss_model.mean_burst_packets(), 6)}
        if p.slot is not None:
            out["slot"] = p.slot.text()
        if p.aqm is not None:
            out["aqm"] = p.aqm.text()
        if p.rate_bps:
            rate = c.link.carried_bps(p.rate_bps)
            out["frame_rate_bps"] = rate
            out["burst"] = req.burst_of(p, c).text()
            out["burst_bytes"] = req.burst_bytes(p, rate, c)
            if req.mode == "shape":
                out["queue_bytes"] = req.queue_bytes(p, rate, c)
                out["queue"] = p.queue.text() if p.queue else f"{out['queue_bytes']}b (default)"
        return out
    return {"name": c.name, "profile": c.profile, "hosts": [str(h) for h in c.hosts],
            "ports": "all" if c.ports is None else format_ports(c.ports), "per": c.per, "link": c.link.describe(),
            "servers": None if c.servers is None else [str(s) for s in c.servers],
            "server_ports": None if c.server_ports is None else format_ports(c.server_ports),
            "flows": c.flow_count() * directions, "links": c.link_count() * directions,
            "down": side(c.down), "up": side(c.up), **({"named": {n: list(a) for n, a in c.named}} if c.named else {}),
            **({"trace": _trace(c.trace)} if c.trace is not None else {}),
            **({"cell": _cell_of(c.cell)} if c.cell is not None else {}), **({"blackhole": True} if c.dark else {}),
            **({"reject": True} if c.reject else {})}


def _cell_of(cell) -> dict:
    """A cohort's cell, as data: its name and capacity each way (a traced side's: its trace's
    mean, and ``trace`` says what it follows)."""
    out = {"name": cell.name, "down_bps": cell.side_bps("dest"), "up_bps": cell.side_bps("source")}
    return {**out, "trace": _trace(cell.trace)} if cell.trace is not None else out


def _trace(spec) -> dict:
    """A traced cohort's traces, as data: per side the file it follows (kind, name, path,
    period, mean), the scale, the phases and the start."""
    def source(s):
        return None if s is None else {"kind": s.kind, "name": s.name, "path": s.path, "period_ms": s.period_ms,
                                       "mean_bps": s.mean_bps}
    return {"down": source(spec.down), "up": source(spec.up), "scale": spec.scale, "phase": spec.phase.text(),
            "seed": spec.seed, "started_ms": spec.started_ms, "text": spec.text()}


def describe(applied: dict) -> str:
    """One line for an applied link (``summary``): what, how, per what, each side's
    rate, delay, burst and queue, the link layer, the selectors and how many links; for
    several cohorts, each one's name, profile and links."""
    if len(applied.get("cohorts", ())) > 1:
        parts = [f"{c['name']} ({c['profile'] or 'custom link'}, {_grain(c['per'])}, {c['link']['layer']}): "
                 f"{c['links']} links{_cell(c)}{_dark(c)}" for c in applied["cohorts"]]
        return f"{len(parts)} cohorts ({applied['mode']}; {'; '.join(parts)}): {applied['links']} links" + \
            _container(applied)
    return _single(applied) + _container(applied)


def _container(applied: dict) -> str:
    """The tx queues the links are spread over (several), which container the links are for,
    and the hosts given by name (--hosts container:NAME)."""
    c = applied.get("container")
    text = f" on {applied['queues']} tx queues" if applied.get("queues") else ""
    text += "" if c is None else (f"; {c['engine']} container {c['name']} ({c['id'][:12]}) on {c['network']}, as "
                                 + ("the server" if c["use"] == "server" else "one user")
                                 + (" (its host-side veth: down arrives on it)" if applied.get("server_side") else ""))
    named = {n: a for co in applied.get("cohorts", ()) for n, a in (co.get("named") or {}).items()}
    return text + "".join(f"; {n} = {','.join(a)}" for n, a in named.items())


def _single(applied: dict) -> str:
    sides = []
    for name, used in (("down", ("dest", "both")), ("up", ("source", "both"))):
        p = applied[name]
        if applied["direction"] not in used:
            continue
        traced = (applied.get("trace") or {}).get(name)
        if traced:
            sides.append(f"{name} follows {traced['kind']} {traced['name']}")
            continue
        text = f"{name} {format_rate(p['rate_bps']) if p.get('rate_bps') else 'unlimited'}"
        if p.get("delay_us"):
            text += f" +{format_time(p['delay_us'])}"
        if p.get("loss_model"):
            m = p["loss_model"]
            text += f" loss {m['lost_pct']:.4g}% {m['model']} ({m['burst_packets']:.3g} in a row)"
        if p.get("slot"):
            text += f" slot {p['slot']}"
        if p.get("burst"):
            text += f" burst {p['burst']}"
        if p.get("queue"):
            text += f" queue {p['queue']}"
        if p.get("aqm"):
            text += f" managed by {p['aqm']}"
        sides.append(text)
    return (f"{applied['profile'] or 'custom link'} ({applied['mode']}, {_grain(applied['per'])}, "
            f"{applied['link']['layer']} framing; {', '.join(sides)}) for hosts {','.join(applied['hosts'])} "
            f"ports {applied['ports']}{_servers(applied)}: {applied['links']} links{_cell(applied)}{_dark(applied)}")


def _dark(cohort: dict) -> str:
    """A blackholed or rejecting cohort's mark (docs/faults.md)."""
    if cohort.get("reject"):
        return ", REJECTED (every connection refused)"
    return ", BLACKHOLED (every packet dropped)" if cohort.get("blackhole") else ""


def shared_cells(applied: dict | None) -> dict:
    """From a ``summary``: (cell name, capacity) by (cohort, direction), for each direction
    a cohort's cell shares (the read-outs sum a cell's links by it).

    >>> shared_cells({"cohorts": [{"name": "a", "cell": {"name": "t", "down_bps": 8000, "up_bps": None}}]})
    {('a', 'dest'): ('t', 8000)}
    """
    out = {}
    for c in (applied or {}).get("cohorts", ()):
        cell = c.get("cell")
        for direction, key in (("dest", "down_bps"), ("source", "up_bps")):
            if cell and cell[key]:
                out[c["name"], direction] = (cell["name"], cell[key])
    return out


def _cell(cohort: dict) -> str:
    """Where a cohort's links share a cell: its name and capacities."""
    cell = cohort.get("cell")
    if not cell:
        return ""
    sides = [f"{name} {format_rate(cell[key])}" for name, key in (("down", "down_bps"), ("up", "up_bps")) if cell[key]]
    trace = cell.get("trace") or {}
    sources = dict.fromkeys(f"{s['kind']} {s['name']}" for s in (trace.get("down"), trace.get("up")) if s)
    follows = f": the mean of {' and '.join(sources)}" if sources else ""
    return f", in cell {cell['name']} ({', '.join(sides)}{follows})"


def _grain(per: str) -> str:
    return "one shared link" if per == "shared" else f"per {per}"


def _servers(applied: dict) -> str:
    text = f" servers {','.join(applied['servers'])}" if applied.get("servers") else ""
    return text + (f" server ports {applied['server_ports']}" if applied.get("server_ports") else "")
