"""The report's sections: tables and readings for each benchmark, computed from the results.

Every sentence that compares numbers is computed from the results, so the
reading stays true when the numbers change.
"""

from __future__ import annotations

from .common import MODEM_BPS, fmt_time, ratio

MIN_CPU_S = 0.02  # CPU times below this are too coarse (scheduler ticks) to compare


# ---------------------------------------------------------------- formatting


def fmt_ratio(r: float | None, digits: int = 2) -> str:
    return "-" if r is None else f"{r:.{digits}f}"


def fmt_int(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _notes(doc: dict) -> list[str]:
    """A result's notes as a list, and a blank line after them (none without notes)."""
    return [f"- {n}" for n in doc.get("notes", [])] + ([""] if doc.get("notes") else [])


def _machine_line(doc: dict) -> str:
    m = doc.get("machine", {})
    load = m.get("loadavg") or []
    where = "full-kernel VM (software emulation)" if doc.get("where") == "vm" else "host"
    return (f"{where}: kernel {m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs ({m.get('cpu', '?')}), "
            f"{(m.get('mem_bytes') or 0) / 2**30:.0f} GiB; load average at start "
            f"{', '.join(f'{x:g}' for x in load) or '?'}; {doc.get('started', '?')} -> {doc.get('finished', '?')}"
            f"{' (QUICK run)' if doc.get('quick') else ''}")


def rows_of(doc, **match):
    return [r for r in doc.get("rows", []) if all(r.get(k) == v for k, v in match.items())]


def section_setup(docs: list[dict], img: str | None) -> list[str]:
    out = ["## 1. Setup time vs flows", ""]
    if not docs:
        return out + ["Not run.", ""]
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
            out += [f"**{mode} mode** ({_machine_line(doc)})", ""]
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
        out += _notes(doc)
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


def section_packet(doc: dict | None, img: str | None) -> list[str]:
    out = ["## 2. Per-packet cost vs flows", ""]
    if not doc:
        return out + ["Not run.", ""]
    out += [f"({_machine_line(doc)})", "",
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
    out += _notes(doc)
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


STATS_TOOLS = (("ratelimit", "Executor.stats"), ("service.statistics", "service.statistics"),
               ("service.statistics cold", "cold"), ("service.Poller", "Poller (dashboard)"),
               ("baseline service.statistics", "baseline"), ("ratelimit --stats --json", "CLI --stats --json"))


def _tool(rows: list[dict], name: str):
    r = next((r for r in rows if r["tool"] == name), None)
    return r and r.get("seconds")


def _tc_row(rows: list[dict]):
    return next((r for r in rows if r["tool"].startswith("tc ")), None)


def section_stats(docs: list[dict], img: str | None) -> list[str]:
    out = ["## 3. Statistics cost", ""]
    if not docs:
        return out + ["Not run.", ""]
    out += ["Seconds to read every link's counters with N links installed (shape mode: one direction while N fits "
            "one device, else both, N/2 each): `Executor.stats(plan)` (one dump per device, a row per link); "
            "`service.statistics` (what `--stats` calls: state, ownership check, the link table compiled once per "
            "request, the dumps, a dict per link; *cold* is its first call in a process); the dashboard's "
            "`service.Poller` (columns, readers kept open); the same `service.statistics` of the baseline revision; "
            "`ratelimit --stats --json` as a whole process, what a script polling it waits for; "
            "and the `tc -s` dump holding the same counters, as text (mapping it to links would cost more).  "
            "Best of several alternating runs.", ""]
    for doc in docs:
        base = doc.get("config", {}).get("baseline")
        for mode in doc.get("config", {}).get("modes", []):
            body = []
            for n in sorted({r["flows"] for r in rows_of(doc, mode=mode)}):
                rs = rows_of(doc, mode=mode, flows=n)
                times = [_tool(rs, name) for name, _ in STATS_TOOLS]
                tc = _tc_row(rs)
                ours = _tool(rs, "service.statistics")
                body.append([f"{n:,}"] + [fmt_time(t) for t in times] + [fmt_time(tc and tc["seconds"]),
                             fmt_ratio(ratio(_tool(rs, "baseline service.statistics"), ours), 1),
                             fmt_ratio(ratio(tc and tc["seconds"], ours))])
            if not body:
                continue
            out += [f"**{mode} mode** ({_machine_line(doc)}; baseline {base or 'none'})", ""]
            out += table(["links"] + [label for _, label in STATS_TOOLS] + ["tc -s", "baseline / ours", "tc / ours"],
                         body) + [""]
        dash = [r for r in doc.get("rows", []) if r["tool"].startswith("dashboard (")]
        if dash:
            body = []
            for source, n in sorted({(r["source"], r["flows"]) for r in dash}):
                rs = [r for r in dash if r["source"] == source and r["flows"] == n]
                ours = next((r["core_share"] for r in rs if r["tool"] == "dashboard (this checkout)"), None)
                theirs = next((r["core_share"] for r in rs if r["tool"] == "dashboard (baseline)"), None)
                what = "kernel counters (idle links)" if source == "kernel" else "synthetic, every link moving"
                body.append([what, f"{n:,}", "-" if ours is None else f"{ours:.1%}",
                             "-" if theirs is None else f"{theirs:.1%}", fmt_ratio(ratio(theirs, ours), 1)])
            out += ["**Dashboard server CPU at 1 Hz, one browser page open** (share of one core; best of the rounds)",
                    ""]
            out += table(["statistics", "links", "this checkout", "baseline", "baseline / ours"], body) + [""]
        out += _notes(doc)
    if img:
        out += [f"![statistics cost]({img})", ""]
    return out


def section_fidelity(docs: list[dict], img: str | None) -> list[str]:
    out = ["## 4. Link fidelity", ""]
    if not docs:
        return out + ["Not run.", ""]
    out += ["K concurrent downloads of the 1,000,000-byte file from nginx through `modem-28k8` links, a link "
            "per (client, port), measured over a window after a warm-up.  *Link*: the frame bytes each busy "
            "link sent (the router's class counters, metered as PPP frames) over the rate the frames get "
            "(93.3% of 28,800 bit/s: 26,864 bit/s) -- what the emulated link delivers (police mode: what the "
            "server offered it, for a policer counts every packet it sees, the ones it drops too).  *Goodput*: bytes "
            "received per connection, as a share of the link model's capacity for bulk TCP (1,460 payload "
            "bytes per 1,468-byte frame at that rate, 3,340 bytes/s) -- what TCP makes of it; the gap is the "
            "server's retransmissions (segments retransmitted / new segments sent in the window).  Queue: "
            "each link's backlog halfway through the window, as seconds at the frames' rate, against the "
            "profile's queue.  Clients: *1990s* is the link model's client (an 8,192-byte receive window, as "
            "Windows 95/98 and NT advertised, and no TCP timestamps); *today* is Linux's autotuned receive "
            "buffer, which lets TCP overfill the modem's queue: its losses and the spurious timeouts of a "
            "0.44 s packet against a handshake-sized retransmission timeout are what today's TCP does behind "
            "a real modem too.", ""]
    body = []
    for doc in docs:
        for r in doc.get("rows", []):
            g, c = r["goodput_ratio"], r.get("carried_ratio") or {}
            b = r.get("backlog") or {}
            offered = "offered " if r["mode"] == "police" and c.get("n") else ""
            body.append([r["mode"], "VM" if doc.get("where") == "vm" else "host", f"{r['links']:,}",
                         r.get("client", "-"), str(r.get("clients", "-")), offered + fmt_ratio(c.get("mean"), 3),
                         offered + fmt_ratio(c.get("p5"), 3),
                         fmt_ratio(g.get("mean"), 3), fmt_ratio(g.get("p5"), 3), fmt_ratio(g.get("p50"), 3),
                         fmt_ratio(g.get("p95"), 3), f"{r['failed']:,}",
                         fmt_time(b.get("queue_delay_s_p50")), fmt_time(b.get("queue_delay_s_p95")),
                         fmt_time(r.get("queue_s")), _burst_cell(r),
                         "-" if r.get("retransmitted") is None else f"{100 * r['retransmitted']:.1f}%",
                         "-" if r.get("cpu_busy") is None else f"{100 * r['cpu_busy']:.0f}%"])
    out += table(["mode", "where", "links", "clients", "client ns", "link mean", "link p5", "goodput mean", "p5", "p50",
                  "p95", "failed", "queue p50",
                  "queue p95", "profile's queue", "burst", "retransmitted", "CPU busy"], body) + [""]
    ccs = sorted({d.get("config", {}).get("server_congestion_control") or "?" for d in docs})
    out += _fidelity_reading(docs) + [f"The server's TCP congestion control: {', '.join(ccs)}.", ""]
    lat = [(d, row) for d in docs for row in d.get("latency", [])]
    if lat:
        out += ["**Latency classes** (netem, in the full-kernel VM): the fastest of a few TCP handshakes from a "
                "limited client port (the emulated delay is fixed; a busy CPU or the VM's software emulation only "
                "adds to it), against the configured round trip (both directions' delay); the median beside it. "
                "A second method, without the handshake's process wakeups: small datagrams each way from the same "
                "limited port, each read at the kernel's receive timestamp; the fastest one-way delay down plus "
                "the fastest up.", ""]
        out += table(["profile", "configured RTT", "handshake", "measured / configured", "excess", "median",
                      "datagrams", "excess"],
                     [[row["profile"], fmt_time(row["configured_rtt_s"]), fmt_time(row["measured_rtt_s"]),
                       fmt_ratio(row.get("ratio"), 3), f"{row['excess_ms']:+.1f} ms",
                       fmt_time(row.get("median_rtt_s")), fmt_time(row.get("probe_rtt_s")),
                       "-" if row.get("probe_excess_ms") is None else f"{row['probe_excess_ms']:+.1f} ms"]
                      for _, row in lat]) + [""]
    else:
        out += ["Latency classes: not measured in this run (they need netem: the VM part).", ""]
    for doc in docs:
        out += [f"- {_machine_line(doc)}"] + [f"- {n}" for n in doc.get("notes", [])]
    out += [""]
    if img:
        out += [f"![fidelity]({img})", ""]
    return out


def _burst_cell(row: dict) -> str:
    """A link's burst as given (``4pkt``, ``5``) and in line bytes."""
    if row.get("burst_bytes") is None:
        return "-"
    given, in_bytes = row.get("burst"), f"{row['burst_bytes']:,} B"
    return f"{given} ({in_bytes})" if given and given != f"{row['burst_bytes']}b" else in_bytes


def _fidelity_reading(docs: list[dict]) -> list[str]:
    rows = [r for d in docs for r in d.get("rows", [])]
    lines = []
    for r in rows:
        g, c, b = r["goodput_ratio"], r.get("carried_ratio") or {}, r.get("backlog") or {}
        if not g.get("n"):
            continue
        text = f"{r['mode']} mode, {r['links']:,} links, {r.get('client', '?')} clients: "
        if c.get("n") and r["mode"] == "police":  # a policer counts what it is offered, drops included
            text += f"the server offered {c['mean']:.1%} of the links' rate (p5 {c['p5']:.1%}); "
        elif c.get("n"):
            text += f"the links sent {c['mean']:.1%} of their rate (p5 {c['p5']:.1%}); "
        text += (f"goodput {g['mean']:.1%} of the model's capacity (p5 {g['p5']:.1%}), the server "
                 f"retransmitting {100 * (r.get('retransmitted') or 0):.1f}% of segments")
        if r["mode"] == "police" and r.get("burst_bytes") is not None:
            text += f", through policers of {_burst_cell(r)} burst"
        if b.get("queue_delay_s_p95") is not None and r.get("queue_s"):
            text += f"; p95 queueing {b['queue_delay_s_p95']:.2f} s of the profile's {r['queue_s']:.2f} s"
        lines.append(f"- {text}.")
    return ["Reading:", ""] + lines + [""] if lines else []


def _points_from_2000(row: dict) -> float:
    """How far a row's share of 0.36 x lies from the 2000 figure's, in percentage points."""
    return 100 * (row["ratio_to_theoretical"] - row["published"] / row["theoretical"])


def _dialup_v03(doc: dict | None) -> list[str]:
    """v0.3's settings (police, --burst 5, Ethernet framing, no delay) against the 2000 figures,
    read from httperf's totals as they were."""
    out = ["### With v0.3's settings", ""]
    if not doc:
        return out + ["Not run: they need act_police, which this host's kernel lacks (`python -m bench dialup` "
                      "runs them in the full-kernel VM unless `--no-vm`).", ""]
    from .dialup import CALLS
    rows = doc["rows"]
    if not rows:
        return out + ["No rows.", ""]
    first = rows[0]
    burst_s = first["burst_bytes"] * 8 / MODEM_BPS
    out += [f"({_machine_line(doc)})", "",
            f"Police mode, `--burst 5` (rate x 5 / 8 = {first['burst_bytes']:,} bytes), Ethernet frames metered at "
            "28,800 bit/s, no delay stage: the 2000 routers' links. httperf as in 2000, read as the 2000 figures "
            "were, from httperf's own totals: each of the four clients starts its sessions within the first "
            "second (`--rate` = its sessions) and runs each to its 20th reply; replies/s is the sum over the "
            "clients of replies / test duration. Each session is a new client port, so a policer whose bucket "
            f"starts full: the session's first {burst_s:.1f} s of line time pass at once. The model: a session "
            f"lasts its 20 calls on the link (the request up, the response's frames down) less the bucket, "
            f"{first['model_session_s']:.2f} s; its ceiling sums, per client, the calls over the last session's "
            "start plus one session. The second row's server starts its TCP as a 2000 server did (Reno, an "
            "initial window of 2 segments as RFC 2581 allowed, Linux's 200 ms floor).", ""]
    body = [[f"{r['x']:,}", r.get("server_tcp_start", "-"), f"{r.get('server_rto_min_ms', 0):,} ms",
             f"{r['completed_per_s']:.1f}", f"{100 * r['ratio_to_theoretical']:.1f}%",
             "-" if not r.get("published") else f"{r['published']} ({100 * r['published'] / r['theoretical']:.1f}%)",
             "-" if not r.get("published") else f"{_points_from_2000(r):+.1f}",
             f"{100 * r['ratio_to_model']:.1f}% ({r['model_ceiling']:.1f})",
             f"{r['session_s']:.2f} s ({r['model_session_s']:.2f} s)",
             fmt_int(r.get("errors")), fmt_int(r.get("sessions_total", 0) - r.get("sessions_ok", 0)),
             "-" if r.get("retransmitted") is None else
             f"{100 * r['retransmitted']:.1f}% ({r['server_tcp']['TcpExtTCPTimeouts']:,})",
             f"{100 * r.get('cpu', {}).get('machine_busy', 0):.0f}%"]
            for r in rows]
    out += table(["x", "server TCP", "server RTO floor", "replies/s", "of 0.36 x", "2000 (of 0.36 x)", "points",
                  "of the model's ceiling (ceiling)", "session: measured (model)", "errors", "sessions lost",
                  "retransmitted (timeouts)", "machine busy"], body)
    out += ["", "The VM emulates its CPUs in software (about 10x slower than the host): httperf's busy polling and "
            "the server share its two CPUs, so only x = 200 runs there (x = 1,000 was tried once, on 2026-11-22, and "
            "not kept: the sessions took 56.6-58.5 s on average per client against the model's 55.7 s, so the VM, "
            "not the link, set the pace).",
            ""]
    published = [r for r in rows if r.get("published")]
    points = [_points_from_2000(r) for r in published]
    no_bucket = first["x"] / (first["model_session_s"] + burst_s) * CALLS / first["theoretical"]
    per_second = 100 * first["ratio_to_theoretical"] / (first["model_session_s"] + 1)
    reading = (f"Reading: the sessions lasted {min(r['session_s'] for r in rows):.2f}-"
               f"{max(r['session_s'] for r in rows):.2f} s against the model's {first['model_session_s']:.2f} s, "
               f"and the rows reached {100 * min(r['ratio_to_model'] for r in rows):.1f}-"
               f"{100 * max(r['ratio_to_model'] for r in rows):.1f}% of its ceiling, so the router polices as it "
               f"claims.")
    if points:
        within = [abs(p) <= 2 for p in points]
        reading += (f" Read the 2000 way, the rows are {min(points):+.1f} to {max(points):+.1f} points from the "
                    f"2000 figure: " + ("all within 2 points." if all(within) else
                                        f"{sum(within)} of {len(within)} within 2 points."))
    reading += (f" Those figures ride the bucket: without it a session would take "
                f"{first['model_session_s'] + burst_s:.2f} s and the ceiling would be {100 * no_bucket:.1f}% of 0.36 x. "
                f"They also depend on how fast the sessions start: every second of spread adds a second to each "
                f"client's test duration, about {per_second:.1f} points here")
    if published:
        r = published[0]  # the spread at which the model gives the 2000 figure: x x 20 / (spread + session)
        spread = r["x"] * CALLS / r["published"] - r["model_session_s"]
        reading += f"; the model gives the 2000 figure for x = {r['x']:,} with the sessions started over {spread:.1f} s"
    reading += "."
    return out + [reading, ""]


def section_dialup(doc: dict | None, img: str | None, v03: dict | None = None,
                   transient: dict | None = None, wide: dict | None = None) -> list[str]:
    out = ["## 5. The dial-up table", ""]
    if not doc:
        return out + ["Not run.", ""]
    cfg = doc.get("config", {})
    stage = ("" if cfg.get("delay_stage") else
             " This kernel has no sch_netem, so the profile's 50 ms delays are left out and the link "
             "model is that of a token bucket without a delay stage (the last packet of each response "
             "leaves as soon as the ones before it are paid for).")
    out += [f"({_machine_line(doc)})", "",
            f"x simultaneous users, {cfg.get('clients', 4)} client namespaces, each user one persistent "
            f"HTTP/1.1 connection fetching the 10,000-byte file {cfg.get('calls', 20)} times in a row, every "
            f"connection its own emulated modem (profile `{cfg.get('profile')}`: PPP frames with compressed "
            f"headers at 93.3% of 28,800 bit/s; {cfg.get('mode')} mode, a link per (host, port); the router's "
            f"bandwidth {cfg.get('bandwidth')}). httperf as in 2000: `--wsess N,20,0 --burst-length 1` with the "
            f"sessions started by `--rate`, at most {cfg.get('per_httperf', 900)} per process; wrk: `-t1 -c N` "
            f"per client namespace. Replies read from the server's access log (status 200, 10,000 bytes) "
            f"in a window of {cfg.get('window_s', '?'):g} s starting {cfg.get('ramp_s', '?'):g} s after the "
            f"load, the same for every row; each connection's rate is its calls between its first and last "
            f"reply in the window over that time, and the row's replies/s their sum (a count of the replies "
            f"in the window would depend on where the window cuts wrk's waves of calls, which start "
            f"together). The server's TCP congestion control: "
            f"{cfg.get('server_congestion_control') or 'not recorded'}; its retransmission timeout floor: "
            f"RFC 6298's 1 s (`ip route ... rto_min 1s`), and Linux's own 200 ms in the row marked so.{stage}", "",
            "The link model's ceiling: each call puts the request on the uplink and the response's frames on "
            "the downlink (a " + f"{cfg.get('header_bytes', '?')}-byte header and 10,000 bytes in TCP segments "
            "of 1,460 bytes, each a PPP frame 8 bytes longer than its payload), so x users complete at most "
            "x / (seconds per call) replies per second.", ""]
    from .dialup import linux_floor, table_rows
    out += table(_DIALUP_COLUMNS, [_dialup_cells(r) for r in table_rows(doc) + [r for r in doc["rows"] if linux_floor(r)]])
    out += [""]
    out += ["Two readings of each row. *Window*: the rate in the window above, what the link sustains "
            "once every connection runs. *Whole run*: for httperf, the 2000 way, as the 2000 figures were "
            "read: a second run whose sessions all start within the first second and run to their 20th "
            "reply, httperf's replies over its test duration summed over the clients, against that run's "
            "model (the sessions' calls on the link, their start spread included, as in the v0.3 section "
            "below); for wrk, its own requests per second over its whole run, the ramp included (no model: "
            "wrk's waves of connections start together, so the rate over a run that is not a whole number "
            "of calls long depends on where it ends). A row's whole-run reading counts each connection's "
            "first calls, whose retransmission timer a handshake sets, so it is the one a slow start "
            "shows in.", "",
            "Retransmitted: the server's retransmitted segments as a share of the segments it sent in the "
            "window, and its retransmission timeouts (`nstat`); the probes' connections are among them. A "
            "modem's first 1,460-byte segment takes 0.44 s, while the handshake's small packets measure a "
            "round trip of tens of ms, so a 200 ms floor can fire before that segment is acknowledged. RFC "
            "6298 (2.4) rounds the timeout up to 1 s; the table's server does, and the row marked 200 ms "
            "shows Linux's own floor. While the modem's uplink still charged every packet at least 64 bytes "
            "(v0.3's `--mpu`, an Ethernet minimum), that row read 90.6-92.3% with 9-10% of segments sent "
            "again and a connection's first calls taking 5-8 s; with the link layer's own frames it does "
            "not (the row).",
            "",
            "CPU: load generators and server in shares of one core (their processes' user + system time; "
            "this kernel counts CPU time by the tick, so a process's share includes the softirq work that "
            "ran in its context); softirq and machine busy in shares of the whole machine (all its CPUs). "
            "Softirq is where the router's forwarding and shaping run: veth delivers in the sender's "
            "context. httperf busy-polls, so its share says nothing about the router.", "",
            "Probe: during the window, 10 curl processes in the first client namespace fetch the file "
            "over one connection each (their own links, left out of the row's rate) and time each call "
            "after the first in two parts: from the request to the response's first byte (the request on "
            "the uplink, the server, and what the downlink still owes for the previous response's last "
            "packet, which HTB charges after sending it) and from the first byte to the last (the "
            "response's frames on the downlink, which the link model predicts).", ""]
    out += _dialup_reading(doc) + [""]
    out += _notes(doc)
    out += _dialup_wide(wide)
    out += _dialup_v03(v03)
    out += _transient(transient)
    if img:
        out += [f"![dial-up table]({img})", ""]
    return out


_DIALUP_COLUMNS = ["load", "x", "server RTO floor", "window: replies/s", "window: of the model's ceiling",
                   "whole run: replies/s", "whole run: of its model", "model ceiling", "of 0.36 x",
                   "2000 (event-driven)", "errors", "sessions lost", "retransmitted (timeouts)", "CPU: load",
                   "CPU: server", "CPU: softirq", "machine busy", "probe: to first byte, p50 / p95",
                   "probe: first to last byte, p50 (model)"]


def _dialup_cells(r: dict) -> list[str]:
    """One row of the dial-up table (``_DIALUP_COLUMNS``)."""
    cpu = r.get("cpu", {})
    lost = r.get("sessions_total", 0) - r.get("sessions_ok", 0) if "sessions_total" in r else None
    floor = r.get("server_rto_min_ms")
    return [r["generator"], f"{r['x']:,}", "?" if floor is None else f"{floor:,} ms", f"{r['completed_per_s']:.1f}",
            f"{100 * r['ratio_to_model']:.1f}%", *_second_cells(r),
            f"{r['model_ceiling']:.1f} ({r['model_call_s']:.3f} s/call)",
            f"{100 * r['ratio_to_theoretical']:.1f}%", fmt_int(r.get("published")),
            fmt_int(r.get("errors")), "-" if lost is None else f"{lost:,}",
            "-" if r.get("retransmitted") is None else
            f"{100 * r['retransmitted']:.1f}% ({r['server_tcp']['TcpExtTCPTimeouts']:,})",
            f"{100 * cpu.get('load_generators', 0):.0f}%", f"{100 * cpu.get('server', 0):.0f}%",
            f"{100 * cpu.get('softirq', 0):.0f}%", f"{100 * cpu.get('machine_busy', 0):.0f}%",
            *_probe_cells(r)]


def _shares(values) -> str:
    return " / ".join(f"{100 * v:.0f}%" for v in values) or "-"


def _dialup_wide(doc: dict | None) -> list[str]:
    """The rows whose users need wider client port ranges than the table's lab (``dialup.WIDE_NAME``)."""
    if not doc or not doc.get("rows"):
        return []
    from .dialup import PER_HTTPERF, PORTS, table_rows
    cfg, rows = doc.get("config", {}), table_rows(doc)
    lo, hi = (int(p) for p in cfg.get("ports", PORTS).split("-"))
    plo, phi = (int(p) for p in PORTS.split("-"))
    xs = " and ".join(f"{r['x']:,}" for r in rows)
    out = [f"### x = {xs}, wrk", "", f"({_machine_line(doc)})", "",
           f"The table's method and columns in a lab of their own (`{doc.get('command', '')}`, commit "
           f"{str(doc.get('commit', '?'))[:7]}): each client's ports {lo}-{hi}, so {hi - lo + 1:,} links each way "
           f"per client, enough for the largest row's users and the probes (the table's lab has {plo}-{phi}: "
           f"{(phi - plo + 1) * cfg.get('clients', 4):,} users at most); the router's bandwidth "
           f"{cfg.get('bandwidth')}, its tx queues one tree each (`--queues auto`). httperf does not run at "
           f"these x: a client's share is more than the {cfg.get('per_httperf', PER_HTTPERF)} sessions one "
           f"httperf process's select() holds, and every process busy-polls a core. Beside the table's columns: "
           f"each CPU busy and the softirq share of each (of that CPU's time), and each process of the server "
           f"(nginx's master and workers) and of the load (one wrk per client) in shares of one core.", ""]
    body = [_dialup_cells(r) + [_shares(r["cpu"].get("per_cpu_busy", [])), _shares(r["cpu"].get("per_cpu_softirq", [])),
                                _shares(r["cpu"].get("server_each", [])), _shares(r["cpu"].get("load_each", []))]
            for r in rows]
    out += table(_DIALUP_COLUMNS + ["each CPU busy", "each CPU: softirq", "server processes", "wrk processes"],
                 body) + [""]
    reading = []
    for r in rows:
        cpu = r.get("cpu", {})
        reading.append(f"x = {r['x']:,}: {100 * r['ratio_to_model']:.1f}% of the model's ceiling in the window "
                       f"({r['completed_per_s']:.1f} of {r['model_ceiling']:.1f} replies/s), errors "
                       f"{fmt_int(r.get('errors'))}, connections with two calls or more in it "
                       f"{fmt_int(r.get('connections_counted'))} of {r['x']:,}; the machine {100 * cpu.get('machine_busy', 0):.0f}% busy (each "
                       f"CPU {_shares(cpu.get('per_cpu_busy', []))}), softirq {100 * cpu.get('softirq', 0):.0f}% "
                       f"of it, nginx's processes {100 * cpu.get('server', 0):.0f}% of a core, wrk's "
                       f"{100 * cpu.get('load_generators', 0):.0f}%")
    out += ["Reading: " + "; ".join(reading) + ".", ""]
    return out + _notes(doc)


def _transient(doc: dict | None) -> list[str]:
    """The start-up transient of one connection, with and without the delay stage (docs/lab.md)."""
    if not doc or not doc.get("rows"):
        return []
    out = ["### The start-up transient", "",
           f"One modem-28k8 link, one keep-alive connection fetching the 10,000-byte file {len(doc['rows'][0]['calls'])} "
           f"times, each call against the link model (`{doc.get('command', '')}`, in the full-kernel VM; commit "
           f"{str(doc.get('commit', '?'))[:7]}). With Linux's floor a whole-run reading includes one such call per "
           f"connection (the wrk row marked 200 ms above); with RFC 6298's there is none.", ""]
    body = []
    for r in doc["rows"]:
        calls = r["calls"]
        rest = calls[2:]
        body.append(["netem, 50 ms each way" if r["delay_stage"] else "none",
                     "Linux's 200 ms" if r["server_tcp"] == "linux" else "RFC 6298's 1 s",
                     f"{calls[0]['seconds']:.2f} s ({calls[0]['model_s']:.2f} s)",
                     f"{calls[1]['seconds']:.2f} s ({calls[1]['model_s']:.2f} s)",
                     f"{min(c['seconds'] for c in rest):.2f}-{max(c['seconds'] for c in rest):.2f} s "
                     f"({rest[0]['model_s']:.2f} s)"])
    return out + table(["delay stage", "server's RTO floor", "call 1 (model)", "call 2 (model)",
                        f"calls 3-{len(doc['rows'][0]['calls'])} (model)"], body) + [""]


def _second_cells(row: dict) -> list[str]:
    """The row's whole-run reading: httperf's totals (and that run's model), or wrk's own rate."""
    t = row.get("totals")
    if t:
        return [f"{t['completed_per_s']:.1f}", f"{100 * t['ratio_to_model']:.1f}% ({t['model_ceiling']:.1f})"]
    if row.get("whole_run_per_s") is not None:
        return [f"{row['whole_run_per_s']:.1f}", "-"]
    return ["-", "-"]


def _probe(row: dict, part: str) -> dict | None:
    """The row's probe summary of ``part`` (None when the row has no probe calls)."""
    summary = row.get("probe", {}).get(part) or {}
    return summary if summary.get("n") else None


def _probe_cells(row: dict) -> list[str]:
    first, rest = _probe(row, "first_byte_s"), _probe(row, "rest_s")
    if not (first and rest):
        return ["-", "-"]
    return [f"{1000 * first['p50']:.0f} / {1000 * first['p95']:.0f} ms",
            f"{rest['p50']:.3f} s ({row['probe']['rest_model_s']:.3f} s)"]


def _dialup_reading(doc: dict) -> list[str]:
    from .dialup import linux_floor, table_rows
    rows = table_rows(doc)
    if not rows:
        return []
    linux = [f"{r['generator']} at x = {r['x']:,} with Linux's 200 ms floor reached {100 * r['ratio_to_model']:.1f}%, "
             f"retransmitting {100 * (r.get('retransmitted') or 0):.1f}% of segments" for r in doc["rows"] if linux_floor(r)]
    worst = min(rows, key=lambda r: r["ratio_to_model"])
    errors = sum(r.get("errors") or 0 for r in rows)
    short = [r for r in rows if r["ratio_to_model"] < 0.98]
    out = (f"Reading: every row reached at least {100 * worst['ratio_to_model']:.1f}% of the link model's "
           f"ceiling (lowest: {worst['generator']} at x = {worst['x']:,}), with {errors} errors in all. The "
           f"model's ceiling is {100 * rows[0]['model_ceiling'] / rows[0]['theoretical']:.1f}% of 0.36 x: "
           f"a 28.8k modem's line carries PPP frames at 93.3% of its bit rate (V.42 framing and stuffing), "
           f"each call also puts its request and the response header on the link, and the 2000 links let "
           f"18 KB through at once (v0.3's --burst 5), which no modem did.")
    for r in short:
        cpu = r.get("cpu", {})
        out += (f" Below 98%: {r['generator']} at x = {r['x']:,}, with the machine {100 * cpu.get('machine_busy', 0):.0f}% "
                f"busy (the server's processes {100 * cpu.get('server', 0):.0f}% of a core, with the delivery and "
                f"shaping of what they send; softirq {100 * cpu.get('softirq', 0):.0f}% of the machine; the load generators "
                f"{100 * cpu.get('load_generators', 0):.0f}%).")
        least = min((q for q in rows if q["generator"] == r["generator"]), key=lambda q: q["x"])
        first, rest, calm = _probe(r, "first_byte_s"), _probe(r, "rest_s"), _probe(least, "first_byte_s")
        if first and rest and calm:
            model = r["probe"]["rest_model_s"]
            where = ("what the row lacks is lost between a response's end and the next one's first byte "
                     "(the request's way up and the server), not on the modems' downlinks"
                     if rest["p50"] <= model * 1.01 else "the downlinks were slower than the model too")
            out += (f" Its probes' responses took {rest['p50']:.3f} s from first to last byte (the model: "
                    f"{model:.3f} s) and waited {1000 * first['p50']:.0f} ms for the first byte (p95 "
                    f"{1000 * first['p95']:.0f} ms), against {1000 * calm['p50']:.0f} ms at x = {least['x']:,}: "
                    f"{where}.")
    if linux:
        out += f" For comparison, {'; '.join(linux)}."
    return [out]


def section_faults(doc: dict | None) -> list[str]:
    out = ["## 6. Fault injection", ""]
    if not doc:
        return out + ["Not run.", ""]
    out += [f"({_machine_line(doc)})", "",
            "A refusal at every step: before the k-th operation the executor sends, for every k, one the "
            "kernel refuses is slipped in (a class under a qdisc that does not exist while building, the "
            "removal of the loopback device while removing). Within a batch the kernel carries on past "
            "the refused message, so later operations of that batch do take effect. After each refusal the "
            "configuration dump (every qdisc, class and filter of the device and its IFB device, counters "
            "aside) must equal the dump before the call, the record must still name the old plan, and the "
            "error must say the interface is back as it was. Plans: 2 hosts (IPv4 and IPv6) x 4 ports, "
            "shape mode, both directions; in the two cohort cases, a second cohort of one host beside "
            "them (4 ports; its rate changed in place, or grown to 10 ports and built beside while the "
            "first stays where it stands).", ""]
    body = [[r["case"], f"{r['operations']:,}", f"{r['refusals']:,}", f"{r['refusals'] - len(r['bad']):,}",
             "; ".join(f"step {k + 1}: {why}" for k, why in r["bad"][:3]) or "-"] for r in doc.get("sweeps", [])]
    out += table(["call", "operations", "refusals injected", "left exactly as before", "otherwise"], body) + [""]
    kills = doc.get("kills", [])
    if kills:
        ok = sum(1 for r in kills if r["ok"])
        out += [f"SIGKILL: a 24,000-link apply (`ratelimit ... -h 3 hosts -p 10000-17999 --mode shape`), over a "
                f"small plan or on a clean interface, killed at a random moment within the time such an apply "
                f"took (\"of\"), then a random next command; the last row is a kill after the run ended. {ok} of "
                f"{len(kills)} left one whole plan: the old or the new (`--list`, `--stats`; over a plan the new "
                f"one is in the other generation of handles), nothing (`--clean`) or the next apply's plan.", ""]
        body = [["after it ended" if r["kill_after_s"] is None else f"{r['kill_after_s']:.2f} s",
                 f"{r['of_s']:.2f} s", "yes" if r["over_a_plan"] else "no", "yes" if r.get("finished_first") else "no",
                 f"`{r['next']}`", str(r["next_exit"]), r["holds"], "ok" if r["ok"] else "**NOT OK**"] for r in kills]
        out += table(["killed after", "of", "over a plan", "had ended", "next command", "its exit",
                      "the interface holds", ""], body) + [""]
    return out


def section_switch(doc: dict | None) -> list[str]:
    out = ["## 7. A profile switch under load", ""]
    if not doc:
        return out + ["Not run.", ""]
    cfg = doc.get("config", {})
    out += [f"({_machine_line(doc)})", "",
            f"The namespace lab with {cfg.get('links', 0):,} shaped links each way (one client with an IPv4 and an "
            f"IPv6 address, ports {cfg.get('ports')}, a link per (host, port)), `{cfg.get('old')}`; one download of `{cfg.get('file')}` runs "
            f"across a switch to `{cfg.get('new')}` (same hosts and ports). *In place* is an apply over the "
            f"installed plan; *rebuild* removes it and applies the new one (what every re-apply did before). "
            f"Read at the client, whose receive window (a few KB, a 1990s client's) never fills the modem's "
            f"queue, so the download loses nothing on its own: bytes received from {cfg.get('lead_s', 0):g} s "
            f"before the switch to "
            f"{cfg.get('tail_s', 0):g} s after it, against what the links allow (the old link's payload rate before "
            f"the switch, the new one's after it: `LinkModel.transfer_seconds`; the time the apply takes counted at "
            f"either rate gives the range, and the middle is the reference), the longest time nothing "
            f"arrived, and the server's retransmissions. The server's RTO floor is RFC 6298's 1 s, as in the "
            f"dial-up table.", ""]
    body = [[r["method"], f"{r['switch_s']:.2f} s", f"{r['received_bytes']:,}",
             f"{r['allowed_bytes']:,.0f}" + (" ({:,.0f}-{:,.0f})".format(*r["allowed_range"]) if "allowed_range" in r
                                             else ""),
             f"{100 * r['ratio']:.1f}%", f"{r['longest_stall_s']:.2f} s",
             f"{r['server_tcp'].get('TcpRetransSegs', 0):,}"] for r in doc.get("rows", [])]
    out += table(["switch", "time", "received", "the links allow", "ratio", "longest stall",
                  "server retransmissions"], body) + [""]
    rows = {r["method"]: r for r in doc.get("rows", [])}
    if "in place" in rows and "rebuild" in rows:
        a, b = rows["in place"], rows["rebuild"]
        out += [f"Reading: in place took {a['switch_s']:.2f} s against {b['switch_s']:.2f} s for the rebuild "
                f"({b['switch_s'] / a['switch_s']:.1f}x), and the download received {100 * a['ratio']:.1f}% of what "
                f"the links allow with {a['server_tcp'].get('TcpRetransSegs', 0)} retransmissions, against "
                f"{100 * b['ratio']:.1f}% and {b['server_tcp'].get('TcpRetransSegs', 0)} across the rebuild.", ""]
    return out


def section_cohorts(doc: dict | None) -> list[str]:
    out = ["## 9. What cohorts cost", ""]
    if not doc:
        return out + ["Not run.", ""]
    cfg = doc.get("config", {})
    rows = {r["what"]: r for r in doc.get("rows", [])}
    out += [f"({_machine_line(doc)})", "",
            f"Each pair is measured side by side in one run, alternating (A, B, A, B, ...; "
            f"{cfg.get('repeats')} installs each, the median counts), shape mode on the host "
            f"(`python -m bench cohorts`). *Setup*: our executor installing, on a fresh namespace, "
            f"{cfg.get('cohorts')} cohorts of {cfg.get('links_per_cohort', 0):,} links (hosts x "
            f"{cfg.get('ports_per_host')} ports each; each cohort its own rate and one of five framings: "
            f"Ethernet, PPP with compressed headers, synchronous PPP, ATM cells, DOCSIS) against one cohort "
            f"over the same flows. *Whole hosts*: {cfg.get('whole_hosts', 0):,} hosts with a link each from one "
            f"match on the address, against as many per-port links. *Per packet*: `bench packet`'s method "
            f"(64-byte UDP frames through the router, the best of {cfg.get('trials')} runs of "
            f"{cfg.get('seconds')} s) with the {cfg.get('cohorts')} cohorts against the one, every link at "
            f"10 Gbit/s.", ""]
    body = []
    if "setup" in rows:
        r = rows["setup"]
        body.append([f"setup, {r['a_links']:,} links", f"{r['a_s']:.2f} s ({cfg.get('cohorts')} cohorts)",
                     f"{r['b_s']:.2f} s (one)", fmt_ratio(r["ratio"], 3), "within 10%"])
    if "whole hosts" in rows:
        r = rows["whole hosts"]
        body.append([f"setup, {r['a_links']:,} links", f"{r['a_s']:.2f} s (whole hosts)",
                     f"{r['b_s']:.2f} s (per port)", fmt_ratio(r["ratio"], 3), "within 2x"])
    if "packet" in rows:
        r = rows["packet"]
        body.append([f"per packet, {r['links']:,} links", f"{r['many_pps']:,.0f} packets/s ({cfg.get('cohorts')} "
                     f"cohorts)", f"{r['one_pps']:,.0f} packets/s (one)", fmt_ratio(r["ratio"], 3), "within 5%"])
    out += table(["what", "A", "B", "A / B", "goal"], body) + [""]
    if "setup" in rows:
        r = rows["setup"]
        out += [f"The setup runs spread over {min(r['a_runs'] + r['b_runs']):.1f}-"
                f"{max(r['a_runs'] + r['b_runs']):.1f} s: at 64,512 links the kernel's time per class grows "
                f"with the qdiscs on the device (section 1), and the machine's other work adds to both sides.", ""]
    return out
