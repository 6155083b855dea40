"""docs/benchmarks.md's section on cells (``bench/cells.py``): users sharing a cell's
capacity, side by side with the same links without cells."""

from __future__ import annotations

from .sections import fmt_ratio, machine_line, opening, table


def _cells_found(doc: dict) -> str | None:
    loads = [r for r in doc.get("rows", []) if r["what"] == "load"]
    setup = next((r for r in doc.get("rows", []) if r["what"] == "setup"), None)
    if not loads:
        return None
    big = max(loads, key=lambda r: r["users"])
    c = big["with_cells"]
    text = (f"{big['users']:,} users in {big['cells']} cells: every cell delivered {c['utilisation']['min']:.2%} "
            f"or more of its capacity, Jain's index at least {c['jain']['min']:.4f}, and the cells took "
            f"{fmt_ratio(big['cpu_ratio'], 3)} of the CPU per packet of the same links without cells.")
    if setup:
        text += (f" {setup['links']:,} links in {setup['cells']} cells installed in "
                 f"{fmt_ratio(setup['ratio'], 3)} of the time without cells.")
    return text


def section_cells(doc: dict | None) -> list[str]:
    out = opening("13. Cells: users sharing one capacity", "Whether busy users share a cell fairly and fill it, and "
                  "what cells cost at setup and per packet, side by side with the same links without cells.",
                  doc, _cells_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    share = cfg.get("share_bps", 0)
    out += [f"({machine_line(doc)})", "",
            f"`python -m bench cells`, each pair in one run. *Setup*: our executor installing on a fresh "
            f"namespace, alternately, the median of {cfg.get('repeats')}: cells of {cfg.get('cell_links')} "
            f"per-port links, each cell its own cohort, against one cohort of the same links. *Load*: paced UDP "
            f"(`pace.c`) through the router to per-port links; each cell's capacity gives its users "
            f"{share / 1000:g} kbit/s each, below their own caps (twice that), and each user is offered "
            f"{cfg.get('offered')} times that. Beside it the same links without cells, each capped at "
            f"{share / 1000:g} kbit/s, deliver as many packets. Over a window of {cfg.get('window_s')} s: each "
            f"cell's utilisation (delivered / capacity), Jain's index of its users' rates, each user's rate "
            f"over the fair share (frames of {cfg.get('frame_bytes')} bytes: a step of one frame is "
            f"{cfg.get('frame_bytes', 0) * 8 / max(cfg.get('window_s', 1), 1) / max(share, 1):.1%}), the "
            f"machine's CPU per delivered packet, and how often HTB found a user's class over its limit per "
            f"packet (its overlimits).", ""]
    body = []
    for r in doc.get("rows", []):
        if r["what"] == "setup":
            body.append([f"setup, {r['links']:,} links", f"{r['cells_s']:.2f} s ({r['cells']} cells)",
                         f"{r['none_s']:.2f} s (none)", fmt_ratio(r["ratio"], 3)])
        else:
            c, n = r["with_cells"], r["without"]
            body.append([f"{r['users']:,} users, {r['cells']} cells",
                         f"utilisation min {c['utilisation']['min']:.3f}, Jain min {c['jain']['min']:.4f}, user p5 "
                         f"{c['share']['p5']:.3f} mean {c['share']['mean']:.3f}; {c['cpu_us_per_packet']:.1f} µs "
                         f"CPU a packet ({c['softirq_us_per_packet']:.1f} softirq), user overlimits "
                         f"{c['user_overlimits_per_packet']:.2f} a packet",
                         f"user p5 {n['share']['p5']:.3f} mean {n['share']['mean']:.3f}; "
                         f"{n['cpu_us_per_packet']:.1f} µs CPU a packet ({n['softirq_us_per_packet']:.1f} softirq), "
                         f"user overlimits {n['user_overlimits_per_packet']:.2f} a packet",
                         fmt_ratio(r["cpu_ratio"], 3)])
    out += table(["what", "A: with cells", "B: without", "A / B (time, CPU a packet)"], body) + [""]
    return out
