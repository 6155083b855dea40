"""JSON endpoints: what is watched, statistics, history, and apply/clean.

Every route returns a dict (Flask sends it as JSON); every refusal is
``{"error": "one line"}`` with a 4xx status (see errors.py).  The shapes are
documented in docs/webui.md.
"""

import dataclasses

from flask import Blueprint, current_app, request

from ratelimit.profiles import catalog, scenario, traced
from ratelimit.service.request import FIELDS
from ratelimit.spec.names import target_name
from ratelimit.spec.selectors import parse_port_range
from ratelimit.spec.summary import summary

from .errors import field_error, WebError
from .history import no_link_series
from .params import boolean, check_query, integer, json_body, resolve_target, snapshots, source
from .query import ASCENDING_FIRST, SORTABLE, STATE_FILTERS, LinkQuery, parse_share, select
from .snapshot import ALL_PORTS, port_json, port_text

bp = Blueprint("api", __name__, url_prefix="/api")

TARGET_QUERY = ("interface", "netns")
# every option of a request (``service.request.Options``) but the lab's own, and force
APPLY_FIELDS = (*(name for name in FIELDS if name != "device_queues"), "force")
ALIASES = {"for": "lasting"}  # the API's (and a scenario's) word for an option whose Python name differs
CLEAN_FIELDS = ("interface", "netns", "force")


def target_info(snap) -> dict:
    return {
        "name": snap.name, "interface": snap.interface, "netns": snap.netns,
        "time": snap.time, "seq": snap.seq, "layout": snap.layout.id, "applied": snap.applied,
        "error": snap.error, "aggregate": snap.aggregate, "distribution": snap.distribution,
        "cohorts": snap.cohorts, "cells": snap.cells, "refresh_s": round(snap.refresh_s, 6),
        "driver": snap.driver, "tracking": snap.tracking,
    }


def _snapshot(args):
    netns, interface = resolve_target(args.get("interface"), args.get("netns"))
    return source().snapshot(netns, interface)


def _direction(value):
    """``value`` if it is a direction (dest, source); else the one-line refusal."""
    if value not in ("dest", "source"):
        raise field_error("direction", value, "is not a direction (allowed: dest, source)")
    return value


@bp.get("/targets")
def targets():
    src = source()
    return {
        "read_only": bool(current_app.config["READ_ONLY"]),
        "interval": getattr(src, "interval", None),
        "history_seconds": getattr(src, "history_seconds", None),
        "targets": [target_info(s) for s in snapshots(src)],
    }


@bp.get("/profiles")
def profile_list():
    check_query(())
    out = []
    for name in catalog.available():
        try:
            prof = catalog.load(name)
        except Exception as err:  # a broken profile file must not hide the others
            out.append({"name": name, "error": " ".join(str(err).split())})
            continue
        out.append(prof.as_dict())
    return {"profiles": out}


@bp.get("/status")
def status():
    args = check_query(TARGET_QUERY)
    return target_info(_snapshot(args))


@bp.get("/links")
def links():
    args = check_query(TARGET_QUERY + ("host", "port", "direction", "active", "state", "share", "sort", "order",
                                       "offset", "limit"))
    snap = _snapshot(args)
    ports = parse_port_range(args["port"], "port") if args.get("port", "").strip() else None
    direction = args.get("direction") or None
    if direction is not None:
        _direction(direction)
    state = args.get("state") or None
    if state not in (None, *STATE_FILTERS):
        raise field_error("state", state, f"is not a link state (allowed: {', '.join(STATE_FILTERS)})")
    share = None
    if args.get("share", "").strip():
        try:
            share = parse_share(args["share"].strip())
        except ValueError as err:
            raise WebError(400, f"share: {err}") from None
    sort = args.get("sort") or "throughput_bps"
    if sort not in SORTABLE:
        raise field_error("sort", sort, f"is not a column (allowed: {', '.join(SORTABLE)})")
    order = args.get("order") or ("asc" if sort in ASCENDING_FIRST else "desc")
    if order not in ("asc", "desc"):
        raise field_error("order", order, "is not an order (allowed: asc, desc)")
    offset = integer("offset", args.get("offset"), 0, 0, 1 << 24)
    limit = integer("limit", args.get("limit"), 100, 1, 10000)
    query = LinkQuery(host=args.get("host", "").strip() or None, ports=ports, direction=direction,
                      active=boolean("active", args.get("active"), True), state=state, share=share,
                      sort=sort, desc=order == "desc")
    rows = select(snap, query)
    return {
        "interface": snap.interface, "netns": snap.netns, "time": snap.time, "seq": snap.seq,
        "layout": snap.layout.id, "total": len(snap.layout), "matched": len(rows), "offset": offset,
        "links": [snap.row(i) for i in rows[offset:offset + limit]],
    }


@bp.get("/history")
def history():
    args = check_query(TARGET_QUERY)
    netns, interface = resolve_target(args.get("interface"), args.get("netns"))
    src = source()
    return {"interface": interface, "netns": netns, "interval": getattr(src, "interval", None),
            "series": src.history(netns, interface)}


@bp.get("/links/history")
def link_history():
    args = check_query(TARGET_QUERY + ("host", "port", "direction"))
    netns, interface = resolve_target(args.get("interface"), args.get("netns"))
    src = source()
    snap = src.snapshot(netns, interface)
    for name in ("host", "port", "direction"):
        if not args.get(name):
            raise WebError(400, f"{name}: missing (a link is host, port and direction)")
    direction = _direction(args["direction"])
    port = ALL_PORTS if args["port"] == "all" else integer("port", args["port"], 0, 1, 65535)
    key = (direction, args["host"], port)
    row = snap.layout.index.get(key)
    if row is None:
        raise field_error("link", f"{args['host']}:{port_text(port)} {direction}",
                          f"is not a link on {target_name(netns, interface)} (see /api/links)", status=404)
    series = src.link_history(netns, interface, row, snap.layout.id)
    if series is None:  # re-applied between the two reads: no history for the new layout yet
        series = no_link_series()
    return {"interface": interface, "netns": netns, "host": key[1], "port": port_json(port),
            "direction": direction, "series": series}


# ---------------------------------------------------------------- control


def _value(name, value):
    """A JSON value for make_request: a string or number (hosts may be a list, a loss a
    model's object: ``{"model": "gemodel", "p": "1%", "r": "25%"}``)."""
    if value is None or value == "":
        return None
    if name in ("loss", "slot", "aqm") and isinstance(value, dict):
        return value
    if name == "hosts" and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise field_error("hosts", value, "is not a list of names or addresses")
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise field_error(name, value, "is not a string or number")
    return value


def _changed(what: str, detail: str) -> None:
    """After an apply or a clean: the poller reads now (a source that can be woken), and the log says who."""
    src = source()
    if hasattr(src, "wake"):
        src.wake()
    current_app.logger.warning("%s from %s: %s", what, request.remote_addr, detail)


def _change(fields) -> tuple:
    """A change's body (of ``fields``), its target and its ``force``: (data, netns, interface,
    force).  A container's target is watched, not changed, from here (webui.containers.owners)."""
    data = json_body(fields)
    netns, interface = resolve_target(data.get("interface"), data.get("netns"))
    why = current_app.config["CONTAINER_TARGETS"].get((netns, interface))
    if why is not None:
        raise field_error("interface", target_name(netns, interface), why, status=409)
    return data, netns, interface, boolean("force", data.get("force"), False)


def _shipped_traces(ask):
    """A scenario's cohort whose traces and schedule, and its cell's, are shipped ones, named
    (``traced.shipped``)."""
    def shipped(trace):
        if trace is None:
            return None
        values = tuple((k, traced.shipped(k, v, trace.field(k)) if k in traced.SHIPPED_DIRS else v)
                       for k, v in trace.values)
        return dataclasses.replace(trace, values=values)
    return dataclasses.replace(ask, trace=shipped(ask.trace), cell_trace=shipped(ask.cell_trace))


@bp.post("/apply")
def apply():
    data, netns, interface, force = _change((*APPLY_FIELDS, *ALIASES))
    for alias, name in ALIASES.items():
        if alias in data:
            data[name] = data.pop(alias)
    kwargs = {}
    for name in APPLY_FIELDS:
        if name in ("interface", "netns", "force", "scenario", "blackhole", "reject"):
            continue
        value = _value(name, data.get(name))
        if value is not None:
            kwargs[name] = value
    for name in ("blackhole", "reject"):
        if data.get(name) is not None:
            kwargs[name] = boolean(name, data[name], False)
    kwargs.setdefault("hosts", None)
    kwargs.setdefault("ports", None)
    if "profile" in kwargs:
        catalog.check_name(kwargs["profile"], "profile")  # a name, never a file on the router
    for key in traced.SHIPPED_DIRS:  # shipped traces and schedules by name, never a file on the router
        if key in kwargs:
            kwargs[key] = traced.shipped(key, kwargs[key], key)
    if data.get("scenario") is not None:  # a scenario's text: its profiles and traces by name, never a path
        kwargs["scenario"] = [_shipped_traces(a) for a in scenario.parse(data["scenario"], "scenario")]
    control = current_app.config["CONTROL"]
    req = control.make_request(interface, netns=netns, **kwargs)
    plan = control.apply(req, force=force, lock_timeout=current_app.config["LOCK_TIMEOUT"])
    applied = summary(plan.request)
    _changed("apply", f"{target_name(netns, interface)} {applied}")
    sent = plan.ops if plan.changed is None else plan.changed
    return {"interface": interface, "netns": netns, "applied": applied, "operations": len(sent),
            "in_place": plan.how == "in place", "how": plan.how}


@bp.post("/clean")
def clean():
    _, netns, interface, force = _change(CLEAN_FIELDS)
    cleaned = current_app.config["CONTROL"].clean(interface, netns, force=force,
                                                  lock_timeout=current_app.config["LOCK_TIMEOUT"])
    _changed("clean", f"{target_name(netns, interface)} cleaned={cleaned}")
    return {"interface": interface, "netns": netns, "cleaned": bool(cleaned)}
