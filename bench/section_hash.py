"""docs/benchmarks.md's section on the device's qdisc hash (``bench/qdisc_hash.py``): a plan
numbered with the groups in a bucket of their own against the same plan in slot order."""

from __future__ import annotations

from .sections import fmt_ratio, machine_line, opening, table


def _hash_found(doc: dict) -> str | None:
    rows = doc.get("rows", [])
    if not rows:
        return None
    r = max(rows, key=lambda r: r["links"])
    return (f"At {r['links']:,} links slot order took {fmt_ratio(r['install_ratio'])}x as long to install and "
            f"{fmt_ratio(r['round_ratio'])}x as long for a round of rate changes ({fmt_ratio(r['cpu_ratio'])}x "
            f"the CPU).")


def section_qdisc_hash(doc: dict | None) -> list[str]:
    out = opening("12. The qdisc hash: the groups in a bucket of their own", "What numbering the groups' qdiscs into "
                  "a hash bucket of their own saves against slot order: installing a plan, and a round of rate "
                  "changes.", doc, _hash_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    out += [f"({machine_line(doc)})", "",
            f"`python -m bench qdisc-hash`: one plan of K per-port links (a bfifo queue each, shape mode), numbered "
            f"as ratelimit numbers it (*bucketed*: the groups' qdiscs in a bucket of the device's qdisc hash that "
            f"the links' queues leave alone) and in slot order (as before), side by side. *Install*: our executor "
            f"installing the whole plan on a fresh namespace, {cfg.get('installs')} times each, alternately, the "
            f"median. *A round*: with both plans installed, a change of every link's class to a new rate (the "
            f"messages the trace driver sends each step), {cfg.get('rounds')} rounds each, alternately: the "
            f"median round's wall time and CPU (the sending thread's user + system: the kernel handles the messages in "
            f"our send calls). docs/design.md, \"The qdisc hash\", says why.", ""]
    body = []
    for r in doc.get("rows", []):
        inst, chg = r["install_s"], r["changes"]
        body.append([f"{r['links']:,}", f"{inst['bucketed']:.2f} s", f"{inst['slot order']:.2f} s",
                     fmt_ratio(r["install_ratio"]), _round(chg["bucketed"], r["links"]),
                     _round(chg["slot order"], r["links"]), fmt_ratio(r["round_ratio"]), fmt_ratio(r["cpu_ratio"])])
    out += table(["links", "install, bucketed", "install, slot order", "slot order / bucketed",
                  "a round, bucketed", "a round, slot order", "slot order / bucketed (wall)", "(CPU)"], body)
    return out + [""]


def _round(side: dict, links: int) -> str:
    return f"{side['round_s'] * 1e3:.1f} ms ({side['round_s'] / links * 1e6:.2f} µs a change)"
