"""JSON endpoints: what is watched, statistics, history, and apply/clean.

Every route returns a dict (Flask sends it as JSON); every refusal is
``{"error": "one line"}`` with a 4xx status (see errors.py).  The shapes are
documented in docs/webui.md.
"""

from flask import Blueprint, current_app, request

from ratelimit.profiles import catalog, scenario
from ratelimit.spec.names import target_name
from ratelimit.spec.selectors import parse_port_range
from ratelimit.service import IMPAIRMENTS
from ratelimit.spec.summary import summary

from .errors import WebError, field_error
from .params import boolean, check_query, integer, json_body, resolve_target, source
from .query import ASCENDING_FIRST, SORTABLE, STATE_FILTERS, LinkQuery, parse_share, select
from .stats import ALL_PORTS, port_text

bp = Blueprint("api", __name__, url_prefix="/api")

TARGET_QUERY = ("interface", "netns")
APPLY_FIELDS = ("interface", "netns", "profile", "hosts", "ports", "mode", "direction", "rate", "burst",
                "bandwidth", "mtu", "avpkt", "mpu", "queue", "per", "link", "mix", "scenario", "servers", "server_ports", *IMPAIRMENTS, "force")
CLEAN_FIELDS = ("interface", "netns", "force")


def target_info(snap) -> dict:
    return {
        "name": snap.name, "interface": snap.interface, "netns": snap.netns,
        "time": snap.time, "seq": snap.seq, "layout": snap.layout.id, "applied": snap.applied,
        "error": snap.error, "aggregate": snap.aggregate, "distribution": snap.distribution,
        "cohorts": snap.cohorts, "refresh_s": round(snap.refresh_s, 6),
        "driver": snap.driver, "tracking": snap.tracking,
    }


def _snapshot(args):
    netns, interface = resolve_target(args.get("interface"), args.get("netns"))
    return source().snapshot(netns, interface)


@bp.get("/targets")
def targets():
    src = source()
    return {
        "read_only": bool(current_app.config["READ_ONLY"]),
        "interval": getattr(src, "interval", None),
        "history_seconds": getattr(src, "history_seconds", None),
        "targets": [target_info(src.snapshot(n, i)) for n, i in src.targets()],
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
    if direction not in (None, "dest", "source"):
        raise field_error("direction", direction, "is not a direction (allowed: dest, source)")
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
    direction = args["direction"]
    if direction not in ("dest", "source"):
        raise field_error("direction", direction, "is not a direction (allowed: dest, source)")
    port = ALL_PORTS if args["port"] == "all" else integer("port", args["port"], 0, 1, 65535)
    key = (direction, args["host"], port)
    row = snap.layout.index.get(key)
    if row is None:
        raise field_error("link", f"{args['host']}:{port_text(port)} {direction}",
                          f"is not a link on {target_name(netns, interface)} (see /api/links)", status=404)
    series = src.link_history(netns, interface, row, snap.layout.id)
    if series is None:  # re-applied between the two reads: no history for the new layout yet
        series = {"time": [], "throughput_bps": [], "drops_per_s": [], "capacity_bps": []}
    return {"interface": interface, "netns": netns, "host": key[1], "port": None if port == ALL_PORTS else port,
            "direction": direction, "series": series}


# ---------------------------------------------------------------- control


def _value(name, value):
    """A JSON value for make_request: a string or number (hosts may be a list)."""
    if value is None or value == "":
        return None
    if name == "hosts" and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise field_error("hosts", value, "is not a list of names or addresses")
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise field_error(name, value, "is not a string or number")
    return value


def _log_change(what: str, detail: str) -> None:
    current_app.logger.warning("%s from %s: %s", what, request.remote_addr, detail)


def _changeable(netns, interface) -> None:
    """A container's target is watched, not changed, from here (webui.containers.owners)."""
    why = current_app.config["CONTAINER_TARGETS"].get((netns, interface))
    if why is not None:
        raise field_error("interface", target_name(netns, interface), why, status=409)


@bp.post("/apply")
def apply():
    data = json_body(APPLY_FIELDS)
    netns, interface = resolve_target(data.get("interface"), data.get("netns"))
    _changeable(netns, interface)
    force = boolean("force", data.get("force"), False)
    kwargs = {}
    for name in APPLY_FIELDS:
        if name in ("interface", "netns", "force", "scenario"):
            continue
        value = _value(name, data.get(name))
        if value is not None:
            kwargs[name] = value
    kwargs.setdefault("hosts", None)
    kwargs.setdefault("ports", None)
    if "profile" in kwargs:
        catalog.check_name(kwargs["profile"], "profile")  # a name, never a file on the router
    if data.get("scenario") is not None:  # a scenario's text: its profiles by name, never a path on the router
        kwargs["scenario"] = scenario.parse(data["scenario"], "scenario")
    if "mix" in kwargs and "per" not in kwargs:
        kwargs["per"] = "host"
    control = current_app.config["CONTROL"]
    req = control.make_request(interface, netns=netns, **kwargs)
    plan = control.apply(req, force=force, lock_timeout=current_app.config["LOCK_TIMEOUT"])
    src = source()
    if hasattr(src, "wake"):
        src.wake()
    applied = summary(plan.request)
    _log_change("apply", f"{target_name(netns, interface)} {applied}")
    sent = plan.ops if plan.changed is None else plan.changed
    return {"interface": interface, "netns": netns, "applied": applied, "operations": len(sent),
            "in_place": plan.how == "in place", "how": plan.how}


@bp.post("/clean")
def clean():
    data = json_body(CLEAN_FIELDS)
    netns, interface = resolve_target(data.get("interface"), data.get("netns"))
    _changeable(netns, interface)
    force = boolean("force", data.get("force"), False)
    cleaned = current_app.config["CONTROL"].clean(interface, netns, force=force,
                                                  lock_timeout=current_app.config["LOCK_TIMEOUT"])
    src = source()
    if hasattr(src, "wake"):
        src.wake()
    _log_change("clean", f"{target_name(netns, interface)} cleaned={cleaned}")
    return {"interface": interface, "netns": netns, "cleaned": bool(cleaned)}
