"""Checking what a request carries: query strings and JSON bodies."""

from flask import current_app, request

from ratelimit.spec.names import target_name
from ratelimit.spec.units import whole_number

from .errors import field_error, WebError
from .snapshot import target_key


def source():
    return current_app.extensions["ratelimit_stats"]


def snapshots(src) -> list:
    """The latest snapshot of every target ``src`` (a statistics source) watches, in its order."""
    return [src.snapshot(n, i) for n, i in src.targets()]


def watched() -> str:
    return ", ".join(target_name(n, i) for n, i in source().targets())


def check_query(allowed) -> dict:
    """The query arguments, refusing any not in ``allowed`` or given twice."""
    args = request.args
    for name in args:
        if name not in allowed:
            raise field_error("query", name, f"is not a parameter here (allowed: {', '.join(allowed) or 'none'})")
        if len(args.getlist(name)) > 1:
            raise field_error(name, ",".join(args.getlist(name)), "is given more than once (give it once)")
    return args.to_dict()


def resolve_target(interface, netns):
    """(netns, interface) of a watched target; the only one when ``interface`` is omitted."""
    targets = source().targets()
    if interface in (None, ""):
        if len(targets) == 1 and netns in (None, "", targets[0][0]):
            return targets[0]
        raise WebError(400, f"interface: missing (watched: {watched()})")
    if not isinstance(interface, str):
        raise field_error("interface", interface, f"is not an interface name (watched: {watched()})")
    if netns is not None and not isinstance(netns, str):
        raise field_error("netns", netns, "is not a namespace name")
    key = target_key(netns, interface)
    if key in targets:
        return key
    if netns in (None, "") and sum(1 for t in targets if t[1] == interface) == 1:
        return next(t for t in targets if t[1] == interface)
    raise field_error("interface", target_name(*key),
                      f"is not watched by this dashboard (watched: {watched()})", status=404)


def boolean(name: str, value, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise field_error(name, value, "is not a boolean (allowed: true, false, 1, 0)")


def integer(name: str, value, default: int, lo: int, hi: int) -> int:
    if value is None or value == "":
        return default
    n = whole_number(value)
    if n is None:
        raise field_error(name, value, f"is not a whole number ({lo}-{hi})")
    if not lo <= n <= hi:
        raise field_error(name, n, f"is out of range ({lo}-{hi})")
    return n


def json_body(allowed) -> dict:
    """The JSON object in the body, refusing unknown fields."""
    data = request.get_json(silent=True)
    if data is None:
        raise WebError(400, "body: not a JSON object (send application/json like {\"interface\": \"eth0\"})")
    if not isinstance(data, dict):
        raise WebError(400, f"body: a JSON {type(data).__name__} is not allowed (allowed: a JSON object)")
    for name in data:
        if name not in allowed:
            raise field_error("field", name, f"is not a field here (allowed: {', '.join(allowed)})")
    return data
