"""docs/benchmarks.md's sections on setup time and the per-packet cost (``bench/setup_time.py``,
``bench/packet.py``).
"""

from __future__ import annotations

from .common import MIN_CPU_S, fmt_time, ratio
from .sections import fmt_ratio, machine_line, notes_of, opening, rows_of, sentence, table, where_of


def setup_headline(doc: dict, mode: str) -> dict | None:
    """The largest N our executor installed in ``mode``, and each tool's row there (``by``);
    None without our executor's rows.  The headline and the section's finding both read it."""
    ns = [r["flows"] for r in rows_of(doc, mode=mode) if r["tool"] == "ratelimit"]
    if not ns:
        return None
    n = max(ns)
    return {"flows": n, "where": where_of(doc), "by": {r["tool"]: r for r in rows_of(doc, mode=mode, flows=n)}}


def _setup_found(docs: list[dict]) -> str | None:
    parts = []
    for doc in docs:
        for mode in doc.get("config", {}).get("modes", []):
            h = setup_headline(doc, mode)
            if h is None:
                continue
            by = h["by"]
            ours = by["ratelimit"]["seconds"]
            text = f"{mode} mode ({h['where']}), {h['flows']:,} flows: ours took {fmt_time(ours)}"
            if "tc-batch" in by:
                text += f", tc -batch {fmt_ratio(ratio(by['tc-batch']['seconds'], ours))}x as long"
            if "tc-per-rule" in by:
                text += (f", one tc per rule {fmt_ratio(ratio(by['tc-per-rule']['seconds'], ours), 0)}x"
                         + (" (extrapolated)" if by["tc-per-rule"].get("extrapolated") else ""))
            parts.append(sentence(text + "."))
    return " ".join(parts) or None


def section_setup(docs: list[dict], img: str | None) -> list[str]:
    out = opening("1. Setup time vs flows", "How long installing N (host, port) flows takes: our executor, the CLI "
                  "as a whole, `tc -batch`, one `tc` per rule and tcconfig.", docs, _setup_found)
    if not docs:
        return out
    out += ["Seconds to install N (host, port) flows (direction `dest`, 1,024 ports per host) on a fresh veth "
            "in a fresh namespace; the best of several runs for N <= 4,096 (other work on the machine only "
            "ever adds time), one run above.  `ratelimit` is our executor (`Executor(netns).apply`, socket "
            "opening included); *the CLI, whole* is `ratelimit` applying the same request as a user waits for it (a "
            "process: start, compile, lock and record, the kernel, the read-back); `tc -batch` gets the same plan as text rendered beforehand (not timed); "
            "*one tc per rule* runs one `tc` process per operation from `sh`; tcconfig runs one `tcset` per "
            "flow.  Italics: extrapolated (see notes); tcconfig figures are lower bounds.  CPU: user + system "
            "time of the installing process and its children (the kernel handles netlink requests in the "
            "sender's system call, so its work is included; time spent waiting is not), shown as a ratio "
            "only when both are at least 20 ms.  Shape mode spreads its links over HTB qdiscs of 256 "
            "(docs/design.md); *one qdisc* is our executor with every link's class in one HTB qdisc, the "
            "layout before (the kernel walks all of a qdisc's classes for each class it adds).  Teardown: "
            "our removal of the plan; kernel memory: `Slab` in /proc/meminfo after our apply minus before.", ""]
    for doc in docs:
        for mode in doc.get("config", {}).get("modes", []):
            out += [f"**{mode} mode** ({machine_line(doc)})", ""]
            flows = sorted({r["flows"] for r in rows_of(doc, mode=mode)})
            body = []
            for n in flows:
                by = {r["tool"]: r for r in rows_of(doc, mode=mode, flows=n)}
                ours = by.get("ratelimit", {}).get("seconds")

                def cell(tool):
                    r = by.get(tool)
                    if r is None:
                        return "-"
                    text = fmt_time(r["seconds"])
                    if r.get("lower_bound"):
                        text = ">= " + text
                    return f"*{text}*" if r.get("extrapolated") else text

                cpu_o = by.get("ratelimit", {}).get("cpu_s")
                cpu_b = by.get("tc-batch", {}).get("cpu_s")
                cpu_r = ratio(cpu_b, cpu_o) if cpu_o and cpu_b and min(cpu_o, cpu_b) >= MIN_CPU_S else None
                mem = by.get("ratelimit", {}).get("kernel_memory_bytes")
                body.append([f"{n:,}", f"{by.get('ratelimit', {}).get('ops', 0):,}", cell("ratelimit"),
                             cell("ratelimit CLI"), cell("ratelimit-1qdisc"),
                             fmt_ratio(ratio(by.get("ratelimit-1qdisc", {}).get("seconds"), ours)),
                             fmt_time(by.get("ratelimit", {}).get("teardown_s")),
                             "-" if mem is None else f"{mem / 2**20:.1f} MiB",
                             cell("tc-batch"), cell("tc-per-rule"), cell("tcconfig"),
                             f"**{fmt_ratio(ratio(by.get('tc-batch', {}).get('seconds'), ours))}**",
                             f"{fmt_time(cpu_o)} / {fmt_time(cpu_b)}", fmt_ratio(cpu_r),
                             fmt_ratio(ratio(by.get("tc-per-rule", {}).get("seconds"), ours), 0),
                             fmt_ratio(ratio(by.get("tcconfig", {}).get("seconds"), ours), 0)])
            out += table(["flows", "ops", "ratelimit", "the CLI, whole", "one qdisc", "one qdisc / ours", "teardown", "kernel memory",
                          "tc -batch", "one tc per rule", "tcconfig",
                          "tc -batch / ours", "CPU: ours / tc -batch", "CPU ratio", "per rule / ours",
                          "tcconfig / ours"], body)
            out += [""] + _setup_reading(doc, mode) + [""]
        notes = [f"{r['tool']} at {r['flows']:,}: {r['basis']}" for r in doc["rows"] if r.get("basis")]
        if notes:
            out += ["Extrapolated figures:", ""] + [f"- {b}" for b in notes] + [""]
        if "identical_state" in doc:
            out += [f"Kernel state after our executor and after tc -batch at the smallest N: "
                    f"{'identical' if doc['identical_state'] else 'DIFFERENT'} (`Executor.snapshot`).", ""]
        out += notes_of(doc)
    if img:
        out += [f"![setup time]({img})", ""]
    return out


def _setup_reading(doc: dict, mode: str) -> list[str]:
    pairs = []
    for n in sorted({r["flows"] for r in rows_of(doc, mode=mode)}):
        by = {r["tool"]: r for r in rows_of(doc, mode=mode, flows=n)}
        if "ratelimit" in by and "tc-batch" in by:
            pairs.append((n, ratio(by["tc-batch"]["seconds"], by["ratelimit"]["seconds"])))
    if not pairs:
        return []
    faster = [n for n, r in pairs if r and r > 1.05]
    slower = [n for n, r in pairs if r and r < 0.95]
    even = [n for n, r in pairs if r and 0.95 <= r <= 1.05]
    lo = min(r for _, r in pairs)
    hi = max(r for _, r in pairs)
    text = (f"Reading: tc -batch took {lo:.2f}x to {hi:.2f}x our executor's wall time. ")
    cpus = []
    for n in sorted({r["flows"] for r in rows_of(doc, mode=mode)}):
        by = {r["tool"]: r for r in rows_of(doc, mode=mode, flows=n)}
        o, b = by.get("ratelimit", {}).get("cpu_s"), by.get("tc-batch", {}).get("cpu_s")
        if o and b and min(o, b) >= MIN_CPU_S:
            cpus.append((n, b / o))
    if cpus:
        text += (f"In CPU time (which other work on the machine inflates less) tc -batch used "
                 f"{min(r for _, r in cpus):.2f}x to {max(r for _, r in cpus):.2f}x ours "
                 f"(at {', '.join(f'{n:,}' for n, _ in cpus)} flows). ")
    if faster:
        text += f"Ours was faster at {', '.join(f'{n:,}' for n in faster)} flows. "
    if even:
        text += f"Within 5% at {', '.join(f'{n:,}' for n in even)}. "
    if slower:
        text += f"**Ours was slower at {', '.join(f'{n:,}' for n in slower)} flows.** "
    big = [r for r in rows_of(doc, mode=mode, tool="tc-batch") if r["flows"] >= 16384]
    small = [r for r in rows_of(doc, mode=mode, tool="tc-batch") if r["flows"] <= 4096]
    if mode == "shape" and big and small:
        b, s = max(big, key=lambda r: r["flows"]), max(small, key=lambda r: r["flows"])
        growth = b["seconds"] / s["seconds"]
        text += (f"From {s['flows']:,} to {b['flows']:,} flows ({b['flows'] / s['flows']:.0f}x) the time grew "
                 f"{growth:.0f}x for both, CPU time (nearly all in the kernel) alike.  Groups of 256 classes "
                 "keep HTB's class walk short (*one qdisc*: every class under one HTB qdisc, where each new "
                 "class walks all the others, `tc_bind_tclass()`); what grows faster than N above that is "
                 "the links' own queues: every qdisc with a handle goes into one 16-bucket hash table per "
                 "device, and adding one walks its bucket (`qdisc_lookup()` in net/sched/sch_api.c), so N "
                 "leaf queues cost N^2/32 list steps whatever sends the requests (docs/design.md, 'Why "
                 "groups').")
    return [text]


PACKET_LAYOUTS = ("hashed", "flat", "shaped")


def packet_headline(doc: dict) -> dict | None:
    """At the most flows, the hashed tree's and the flat list's rows for a packet that matches
    no flow; None where either is missing.  The headline and the section's finding both read it."""
    big = max((r["flows"] for r in doc.get("rows", []) if r["layout"] != "none"), default=0)
    h = next(iter(rows_of(doc, layout="hashed", target="miss", flows=big)), None)
    f = next(iter(rows_of(doc, layout="flat", target="miss", flows=big)), None)
    return {"flows": big, "hashed": h, "flat": f} if big > 1 and h and f else None


def _packet_found(doc: dict) -> str | None:
    p = packet_headline(doc)
    if p is None:
        return None
    h, f = p["hashed"], p["flat"]
    text = (f"At {p['flows']:,} flows, for a packet that matches no flow, the hashed tree forwarded "
            f"{h['pps']:,.0f} packets/s ({fmt_ratio(h.get('ratio_to_1flow'))} of its one-flow rate) and the flat "
            f"list {f['pps']:,.0f} ({fmt_ratio(f.get('ratio_to_1flow'))}).")
    if f["pps"]:
        text += f" The tree forwards {h['pps'] / f['pps']:,.0f}x as many."
    return text


def section_packet(doc: dict | None, img: str | None) -> list[str]:
    out = opening("2. Per-packet cost vs flows", "How many packets per second the router forwards with N flows "
                  "installed: our hashed u32 tree, a flat filter list, and the shape-mode plan.", doc, _packet_found)
    if not doc:
        return out
    out += [f"({machine_line(doc)})", "",
            "64-byte UDP frames (18-byte payload) sent as fast as the kernel takes them from the server "
            "namespace through the router to a client; forwarded packets/s counted at the client "
            "(best of the trials).  *hashed* (ratelimit's u32 tree) and *flat* (tcconfig's list) classify "
            "every packet into one 10 Gbit/s class with no policer (classification cost only); *shaped* is "
            "ratelimit's shape-mode plan, a class and a byte queue per link, every link at 10 Gbit/s so none "
            "limits (65,536 requested is 64,512 links, the most one device takes).  *hit*: a flow in the "
            "middle of the list; *miss*: a port "
            "outside the limited set (the flat list then tries every filter).  In parentheses: ratio to the "
            "same layout and target with one flow.  Police mode's per-packet cost (a policer action on "
            "each matched packet) is not measured: the host kernel has no act_police and packet rates under "
            "the VM's software emulation say little about a real router.", ""]
    body = []
    for n in sorted({r["flows"] for r in doc["rows"] if r["layout"] != "none"}):
        cells = [f"{n:,}"]
        for layout in PACKET_LAYOUTS:
            for target in ("hit", "miss"):
                r = next((r for r in rows_of(doc, layout=layout, target=target, flows=n)), None)
                cells.append("-" if r is None else f"{r['pps']:,.0f} ({fmt_ratio(r.get('ratio_to_1flow'))})")
        body.append(cells)
    out += table(["flows"] + [f"{layout}, {target}" for layout in PACKET_LAYOUTS for target in ("hit", "miss")],
                 body)
    bare = [r["pps"] for r in rows_of(doc, layout="none")]
    if bare:
        out += ["", f"No qdisc at all: {max(bare):,.0f} packets/s."]
    out += [""] + _packet_reading(doc) + [""]
    sender = {r.get("sender") for r in doc["rows"]}
    if "python" in sender:
        out += ["The Python sender was used (no C compiler): it spends more per packet than the router, "
                "so the ratios are flattened.", ""]
    out += notes_of(doc)
    if img:
        out += [f"![per-packet cost]({img})", ""]
    return out


def _packet_reading(doc: dict) -> list[str]:
    big = max((r["flows"] for r in doc["rows"] if r["layout"] != "none"), default=None)
    if not big or big == 1:
        return []
    h = {t: next((r for r in rows_of(doc, layout="hashed", target=t, flows=big)), None) for t in ("hit", "miss")}
    f = {t: next((r for r in rows_of(doc, layout="flat", target=t, flows=big)), None) for t in ("hit", "miss")}
    parts = []
    if h["hit"] and h["miss"]:
        parts.append(f"With {big:,} flows the hashed tree forwards {h['hit']['ratio_to_1flow']:.2f}x (hit) and "
                     f"{h['miss']['ratio_to_1flow']:.2f}x (miss) of its one-flow rate")
    if f["hit"] and f["miss"]:
        parts.append(f"the flat list {f['hit']['ratio_to_1flow']:.3f}x and {f['miss']['ratio_to_1flow']:.3f}x")
    if h["miss"] and f["miss"] and f["miss"]["pps"]:
        parts.append(f"so for a packet that matches no flow the tree is "
                     f"{h['miss']['pps'] / f['miss']['pps']:,.0f}x faster than the flat list")
    s = next((r for r in rows_of(doc, layout="shaped", target="hit", flows=big)), None)
    if s and s.get("ratio_to_1flow"):
        parts.append(f"with {s.get('links', big):,} shaped links installed a shaped flow forwards "
                     f"{s['ratio_to_1flow']:.2f}x of its rate with one shaped link")
    return ["Reading: " + "; ".join(parts) + "."] if parts else []
