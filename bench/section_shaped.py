"""docs/benchmarks.md's section on backlogged links (``bench/shaped_load.py``): the router
alone with K links that all wait for tokens, one tx queue's tree against several."""

from __future__ import annotations

from .sections import machine_line, opening, table
from .shaped_load import softirq_us_per_packet

SATURATED = 0.95  # the machine's busy share from which a row is read as saturated
OTHER_WORK = 0.05  # user time above this in a window: something besides the router and pace.c ran


def _less(one: dict, r: dict) -> float:
    """How many times less CPU per packet ``r`` took than one tree's ``one``."""
    return one["cpu_us_per_packet"] / r["cpu_us_per_packet"]


def _shaped_found(doc: dict) -> str | None:
    rows = doc.get("rows", [])
    if not rows:
        return None
    k = max(r["links"] for r in rows)
    at = sorted((r for r in rows if r["links"] == k), key=lambda r: r["queues"])
    one, most = next((r for r in at if r["queues"] == 1), None), at[-1]
    if one is None or most is one:
        return None
    return (f"At {k:,} links one tree took {one['cpu_us_per_packet']:.1f} µs of CPU per delivered packet and "
            f"delivered {one['share_mean']:.2%} of the links' rate on average. {most['queues']} queues took "
            f"{most['cpu_us_per_packet']:.1f} µs ({_less(one, most):.2f}x less) and delivered {most['share_mean']:.2%}.")


def section_shaped(doc: dict | None) -> list[str]:
    out = opening("10. Backlogged links: one tree against one per tx queue", "The CPU per packet, and the share of "
                  "its rate each link gets, when K links all wait for tokens: one HTB tree against one per tx "
                  "queue.", doc, _shaped_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    rate = cfg.get("rate_bps", 0)
    out += [f"({machine_line(doc)})", "",
            f"The router alone (`python -m bench shaped-load [--flows K ...] [--queues Q ...]`): three namespaces, "
            f"a sender, the router and a sink. The router's sink-facing veth has Q tx queues, and ratelimit's "
            f"shape-mode plan on it gives K per-port links of one sink address a class each at {rate / 1000:g} "
            f"kbit/s (no size table, so HTB meters the {cfg.get('frame_bytes')}-byte frames as they are), with "
            f"`--queues Q` (Q = 1: one tree, today's default; groups of 256 links with one tree, 512 with several). Paced UDP senders (`bench/pace.c`, one per CPU) "
            f"offer every link {cfg.get('load', 0):g}x its rate in full-size datagrams, so every class always "
            f"waits for tokens: HTB's hard case, without a server or TCP in the way; the sink drops the packets "
            f"at its IP input. After {cfg.get('warm_s', 0):g} s of load one window of "
            f"{cfg.get('window_s', 0):g} s is scored: *delivered*, each link's class bytes over the window "
            f"against its rate (mean, 5th percentile, least; a link's count is whole packets, so its share moves "
            f"in steps of about one packet over the window, *step*); the machine's CPU from /proc/stat (*busy*, "
            f"*softirq*: the router's forwarding and shaping run there); the CPU time per delivered packet "
            f"(busy CPU-seconds over delivered packets, the senders' and the sink's work included) and the "
            f"softirq time per delivered packet (*softirq per packet*: the router's receiving, forwarding and "
            f"shaping, and the sink's IP input, the same in every row; the senders' sends are system time); perf's top "
            f"symbols (self time, all CPUs) over {cfg.get('perf_s', 0):g} s after the window, the load still on. "
            f"Every row runs in fresh namespaces, one after the other in one run.", ""]
    cpus = cfg.get("cpus") or 1
    body = []
    for r in doc.get("rows", []):
        m = r["cpu"]["machine"]
        top = ", ".join(f"`{s}` {p:.1f}%" for s, p in (r.get("perf_top") or [])[:4]) or "-"
        body.append([f"{r['links']:,}", str(r["queues"]), f"{r.get('group_links', 256):,}",
                     f"{r['share_mean']:.2%} / {r['share_p5']:.2%} / {r['share_min']:.2%}", f"{r['step']:.1%}",
                     f"{m['busy']:.1%}", f"{m['softirq']:.1%}", f"{r['cpu_us_per_packet']:.1f} µs",
                     f"{softirq_us_per_packet(r, cpus):.1f} µs",
                     f"{r['setup_s']:.1f} s", top])
    out += table(["links", "queues", "links per group", "delivered (mean / p5 / least)", "step", "busy", "softirq",
                  "CPU per packet", "softirq per packet", "setup", "top symbols"], body) + [""]
    return out + _reading(doc.get("rows", []), cpus)


def _reading(rows: list[dict], cpus: int) -> list[str]:
    """Per K: the CPU (and softirq) per packet of each queue count against one tree's, and
    what saturates."""
    lines = []
    for k in sorted({r["links"] for r in rows}):
        at = sorted((r for r in rows if r["links"] == k), key=lambda r: r["queues"])
        one = next((r for r in at if r["queues"] == 1), None)
        parts = []
        for r in at:
            m = r["cpu"]["machine"]
            soft = softirq_us_per_packet(r, cpus)
            what = (f"{r['queues']} queue{'s' if r['queues'] > 1 else ''}: {r['cpu_us_per_packet']:.1f} µs, "
                    f"{soft:.1f} µs softirq")
            if one is not None and r is not one:
                what += (f" ({_less(one, r):.2f}x and "
                         f"{softirq_us_per_packet(one, cpus) / soft:.2f}x less than one tree)")
            if m["busy"] >= SATURATED:
                what += (f", saturated: the machine {m['busy']:.0%} busy, {m['softirq']:.0%} of it in softirq "
                         f"(the router's shaping), {m['user']:.0%} user (the senders)")
            if m["user"] > OTHER_WORK:
                what += f" (the window had {m['user']:.0%} user time: something else ran)"
            parts.append(what)
        lines.append(f"{k:,} links: " + "; ".join(parts) + ".")
    if not lines:
        return []
    return ["Reading: " + " ".join(lines), ""]
