"""What ``--list`` and ``--stats`` print: a table, or one line of JSON, and a notice for
each container whose addresses have changed since the apply."""

import json
import time

from ..spec.summary import describe
from ..spec.units import format_duration, format_rate


def as_json(data: dict, action: str) -> str:
    """--list --json (the links without their counters) or --stats --json, as one line."""
    if action == "list":
        for row in data["links"]:
            for key in ("bytes", "packets", "drops", "overlimits", "backlog_bytes", "backlog_pkts"):
                row.pop(key, None)
    return json.dumps(data, separators=(",", ":"))  # compact: the C encoder (indent is Python's)


def strangers(data: dict, con) -> None:
    """A notice for each container named in the hosts that has other addresses now, or is
    not running (``life.strangers``)."""
    # start-up time: --list and --stats only, not --help (it loads the service)
    from ..containers.life import strangers as changed
    for line in changed(data["applied"]):
        con.notice(line)


def ends(expires_ms: int, now_s: float, watcher: bool | None, restores: bool = False) -> str:
    """When a plan that lasts (--for) ends, from ``now_s``, and what comes then; or that its
    end passed, and what to do when its watcher (``service.expiry``) is not running."""
    left_ms = expires_ms - now_s * 1000
    if left_ms > 0:
        stopped = "" if watcher in (None, True) else "; its watcher is not running: start it with 'ratelimit expire'"
        then = "the plan before it comes back" if restores else "removed"
        return f"ends in {format_duration(left_ms)} (then {then}){stopped}"
    return (f"its end passed {format_duration(-left_ms)} ago, and it was not removed (its watcher is not running): "
            "ratelimit --clean, or 'ratelimit expire' to let it")


def render_table(data: dict, counters: bool) -> str:
    applied, staged = data["applied"], data.get("staged")
    waiting = f"staged (no traffic until --commit): {describe(staged)}" if staged else ""
    if not applied:
        return "\n".join([f"{data['interface']}: nothing installed by ratelimit"] + [waiting] * bool(staged))
    head = f"{applied['interface']}: {describe(applied)}" + f"\n{waiting}" * bool(staged)
    if applied.get("expires_ms") is not None:
        head += "\n" + ends(applied["expires_ms"], data.get("time") or time.time(), data.get("expiry"),
                             applied.get("restores", False))
    driver = data.get("driver")
    if driver:
        head += "\n" + (f"trace driver: following (pid {driver['pid']}, a step every {driver['step_ms']} ms, at step "
                        f"{driver['step']}; {driver['shut']} of {driver['links']} traced links shut"
                        + (f", {driver['cells_shut']} of {driver['cells']} traced cells" if driver.get("cells") else "")
                        + ")"
                        if driver["running"] else f"trace driver: NOT RUNNING: {driver['notice']}")
    cols = ["direction", "host", "port", "rate"]
    if counters:
        cols += ["bytes", "packets", "drops", "overlimits", "backlog"]
    rows = []
    for link in data["links"]:
        rate = format_rate(link["rate_bps"]) if link["rate_bps"] else "unlimited"
        if link.get("trace"):
            now = link.get("trace_bps")
            rate = f"follows {link['trace']}" + ("" if now is None else f" (now {format_rate(now) if now else 'shut'})")
        row = [link["direction"], link["host"] or "others", "all" if link["port"] is None else str(link["port"]), rate]
        if counters:
            row += [str(link["bytes"]), str(link["packets"]), str(link["drops"]), str(link["overlimits"]),
                    f"{link['backlog_bytes']}b/{link['backlog_pkts']}p"]
        rows.append(row)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    for name, sides in (data.get("cells") or {}).items() if counters else ():
        for direction, c in sides.items():
            bps = c.get("trace_bps")
            now = "" if bps is None else f" (its trace's mean; now {format_rate(bps) if bps else 'shut'})"
            lines.append(f"cell {name} {direction}: {format_rate(c['capacity_bps'])}{now} shared by {c['users']} links; "
                         f"{c['bytes']} bytes, {c['packets']} packets, {c['drops']} drops so far")
    for name, sides in (data.get("rejected") or {}).items() if counters else ():
        lines.append(f"cohort {name} rejects: {sides['dest']} packets to its hosts refused, {sides['source']} from them")
    return "\n".join(lines)
