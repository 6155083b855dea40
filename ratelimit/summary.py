"""What an applied request is, as data and as one line: ``summary`` (for --list, --json,
the dashboard, /metrics, the lab and the record of a repair) and ``describe``.
"""

from .model import LinkParams, Request
from .selectors import format_ports
from .units import format_rate, format_time


def summary(req: Request) -> dict:
    """What is applied, as data (for --list, --json, the dashboard and /metrics): per side
    the link's numbers, its burst and queue (as given and in line bytes), and the link
    layer and granularity the links share."""
    def side(p: LinkParams) -> dict:
        out = {k: v for k, v in p.__dict__.items() if v and k not in ("queue", "burst")}
        if p.rate_bps:
            rate = req.link.carried_bps(p.rate_bps)
            out["frame_rate_bps"] = rate
            out["burst"] = req.burst_of(p).text()
            out["burst_bytes"] = req.burst_bytes(p, rate)
            if req.mode == "shape":
                out["queue_bytes"] = req.queue_bytes(p, rate)
                out["queue"] = p.queue.text() if p.queue else f"{out['queue_bytes']}b (default)"
        return out
    directions = 2 if req.direction == "both" else 1
    return {
        "interface": req.interface, "netns": req.netns, "profile": req.profile, "mode": req.mode,
        "direction": req.direction, "hosts": [str(h) for h in req.hosts], "ports": format_ports(req.ports),
        "per": req.per, "link": req.link.describe(),
        "flows": req.flow_count() * directions, "links": req.link_count() * directions,
        "down": side(req.down), "up": side(req.up),
    }


def describe(applied: dict) -> str:
    """One line for an applied link (``summary``): what, how, per what, each side's
    rate, delay, burst and queue, the link layer, the selectors and how many links."""
    sides = []
    for name, used in (("down", ("dest", "both")), ("up", ("source", "both"))):
        p = applied[name]
        if applied["direction"] not in used:
            continue
        text = f"{name} {format_rate(p['rate_bps']) if p.get('rate_bps') else 'unlimited'}"
        if p.get("delay_us"):
            text += f" +{format_time(p['delay_us'])}"
        if p.get("burst"):
            text += f" burst {p['burst']}"
        if p.get("queue"):
            text += f" queue {p['queue']}"
        sides.append(text)
    return (f"{applied['profile'] or 'custom link'} ({applied['mode']}, per {applied['per']}, "
            f"{applied['link']['layer']} framing; {', '.join(sides)}) for hosts {','.join(applied['hosts'])} "
            f"ports {applied['ports']}: {applied['links']} links")
