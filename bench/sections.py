"""The report's sections: tables and readings for each benchmark, computed from the results.

Every sentence that compares numbers is computed from the results, so the
reading stays true when the numbers change.  Here: what every section uses (its
opening lines, tables, notes, the machine line), and the sections on statistics,
fidelity, faults, the switch and cohorts; the others are in ``section_*.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from .common import fmt_time, ratio

# ---------------------------------------------------------------- a section's opening

NOT_RECORDED = "not recorded: these results lack the fields it is read from."


def opening(title: str, measures: str, results, found: Callable[..., str | None]) -> list[str]:
    """A section's heading and its two opening lines: what it measures, what it found.

    ``measures`` is the section's fixed sentence.  ``found(results)`` computes the finding
    from the results, with each number formatted as the section's own tables show it; it
    returns None, or fails on a missing field, where the results cannot give it, and the line
    then says so instead of guessing.  Empty ``results``: the finding is "Not run.".

    >>> opening("9. Cost", "What it costs.", {"s": 1.5}, lambda d: f"{d['s']:.2f} s.")[2:]
    ['**What it measures:** What it costs.', '', '**What it found:** 1.50 s.', '']
    >>> opening("9. Cost", "What it costs.", {}, lambda d: "-")[4]
    '**What it found:** Not run.'
    >>> opening("9. Cost", "What it costs.", {"rows": []}, lambda d: d["s"])[4]
    '**What it found:** not recorded: these results lack the fields it is read from.'
    """
    if not results:
        text = "Not run."
    else:
        try:
            text = found(results) or NOT_RECORDED
        except (KeyError, TypeError, ZeroDivisionError):  # a result without a field the finding reads
            text = NOT_RECORDED
    return [f"## {title}", "", f"**What it measures:** {measures}", "", f"**What it found:** {text}", ""]


def sentence(text: str) -> str:
    """``text`` with a capital first letter: ``'shape mode'`` -> ``'Shape mode'``."""
    return text[:1].upper() + text[1:]


def where_of(doc: dict) -> str:
    return "VM" if doc.get("where") == "vm" else "host"


# ---------------------------------------------------------------- formatting


def fmt_ratio(r: float | None, digits: int = 2) -> str:
    return "-" if r is None else f"{r:.{digits}f}"


def fmt_int(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def notes_of(doc: dict) -> list[str]:
    """A result's notes as a list, and a blank line after them (none without notes)."""
    return [f"- {n}" for n in doc.get("notes", [])] + ([""] if doc.get("notes") else [])


def machine_line(doc: dict) -> str:
    m = doc.get("machine", {})
    load = m.get("loadavg") or []
    where = "full-kernel VM (software emulation)" if doc.get("where") == "vm" else "host"
    return (f"{where}: kernel {m.get('kernel', '?')}, {m.get('cpus', '?')} CPUs ({m.get('cpu', '?')}), "
            f"{(m.get('mem_bytes') or 0) / 2**30:.0f} GiB; load average at start "
            f"{', '.join(f'{x:g}' for x in load) or '?'}; {doc.get('started', '?')} -> {doc.get('finished', '?')}"
            f"{' (QUICK run)' if doc.get('quick') else ''}")


def rows_of(doc, **match):
    return [r for r in doc.get("rows", []) if all(r.get(k) == v for k, v in match.items())]


STATS_TOOLS = (("ratelimit", "Executor.stats"), ("service.statistics", "service.statistics"),
               ("service.statistics cold", "cold"), ("service.Poller", "Poller (dashboard)"),
               ("baseline service.statistics", "baseline"), ("ratelimit --stats --json", "CLI --stats --json"))


def _tool(rows: list[dict], name: str):
    r = next((r for r in rows if r["tool"] == name), None)
    return r and r.get("seconds")


def _tc_row(rows: list[dict]):
    return next((r for r in rows if r["tool"].startswith("tc ")), None)


def stats_headline(doc: dict, mode: str) -> dict | None:
    """The largest N of ``mode`` with ``service.statistics`` and a ``tc -s`` row: the links, our
    seconds, the baseline's (or None) and the ``tc`` row; None where either is missing.  The
    headline and the section's finding both read it."""
    rows = [r for r in rows_of(doc, mode=mode) if r.get("seconds") is not None]
    if not rows:
        return None
    n = max(r["flows"] for r in rows)
    at = rows_of(doc, mode=mode, flows=n)
    ours, tc = _tool(at, "service.statistics"), _tc_row(at)
    if not (ours and tc):
        return None
    return {"flows": n, "where": where_of(doc), "ours": ours, "baseline": _tool(at, "baseline service.statistics"),
            "tc": tc}


def _stats_found(docs: list[dict]) -> str | None:
    parts = []
    for doc in docs:
        for mode in doc.get("config", {}).get("modes", []):
            h = stats_headline(doc, mode)
            if h is None:
                continue
            o, b, t = h["ours"], h["baseline"], h["tc"]
            text = f"{mode} mode ({h['where']}), {h['flows']:,} links: `service.statistics` took {fmt_time(o)}; "
            if b:
                text += f"the baseline took {fmt_ratio(ratio(b, o), 1)}x as long, "
            parts.append(sentence(text + f"the `{t['tool']}` dump {fmt_ratio(ratio(t['seconds'], o))}x."))
    return " ".join(parts) or None


def section_stats(docs: list[dict], img: str | None) -> list[str]:
    out = opening("3. Statistics cost", "How long reading every link's counters takes with N links installed, "
                  "against the baseline revision and a `tc -s` dump.", docs, _stats_found)
    if not docs:
        return out
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
            out += [f"**{mode} mode** ({machine_line(doc)}; baseline {base or 'none'})", ""]
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
        out += notes_of(doc)
    if img:
        out += [f"![statistics cost]({img})", ""]
    return out


def fidelity_rows(doc: dict) -> list[dict]:
    """The rows with a goodput reading: the headline's and the section finding's."""
    return [r for r in doc.get("rows", []) if r["goodput_ratio"].get("n")]


def latency_headline(doc: dict) -> dict | None:
    """The latency classes' fastest handshake / configured round trip (lowest, highest), and the
    datagrams' excess over it (lowest, highest, or None); None without a ratio."""
    lat = doc.get("latency", [])
    rs = [x["ratio"] for x in lat if x.get("ratio")]
    if not rs:
        return None
    probes = [x["probe_excess_ms"] for x in lat if x.get("probe_excess_ms") is not None]
    return {"ratio": (min(rs), max(rs)), "probe_excess_ms": (min(probes), max(probes)) if probes else None}


def _fidelity_found(docs: list[dict]) -> str | None:
    rows = [r for d in docs for r in fidelity_rows(d)]
    parts = []
    if rows:
        means = [r["goodput_ratio"]["mean"] for r in rows]
        links = sorted({r["links"] for r in rows})
        span = f"{links[0]:,}" if len(links) == 1 else f"{links[0]:,} to {links[-1]:,}"
        parts.append(f"In the table's {len(rows)} rows ({span} links), goodput averaged {fmt_ratio(min(means), 3)} to "
                     f"{fmt_ratio(max(means), 3)} of the link model's capacity (p5 "
                     f"{fmt_ratio(min(r['goodput_ratio']['p5'] for r in rows), 3)} or more).")
    lat = [h for h in map(latency_headline, docs) if h]
    if lat:
        parts.append(f"The fastest handshake took {fmt_ratio(min(h['ratio'][0] for h in lat), 3)} to "
                     f"{fmt_ratio(max(h['ratio'][1] for h in lat), 3)} of the configured round trip.")
    return " ".join(parts) or None


def section_fidelity(docs: list[dict], img: str | None) -> list[str]:
    out = opening("4. Link fidelity", "How much of the link model's capacity downloads through `modem-28k8` links "
                  "get, and how close each latency class comes to its configured round trip.", docs, _fidelity_found)
    if not docs:
        return out
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
        out += [f"- {machine_line(doc)}"] + [f"- {n}" for n in doc.get("notes", [])]
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


def _kills_ok(kills: list[dict]) -> int:
    """How many kills left one whole plan."""
    return sum(1 for r in kills if r["ok"])


def _faults_found(doc: dict) -> str | None:
    sweeps, kills = doc.get("sweeps", []), doc.get("kills", [])
    parts = []
    if sweeps:
        refusals = sum(r["refusals"] for r in sweeps)
        left = sum(r["refusals"] - len(r["bad"]) for r in sweeps)
        parts.append(f"{left:,} of {refusals:,} refusals injected into {len(sweeps)} calls left the interface "
                     f"exactly as before.")
    if kills:
        parts.append(f"{_kills_ok(kills)} of {len(kills)} SIGKILLs left one whole plan.")
    return " ".join(parts) or None


def section_faults(doc: dict | None) -> list[str]:
    out = opening("6. Fault injection", "Whether a call the kernel refuses at any step, or a SIGKILL during an "
                  "apply, leaves the interface with one whole plan.", doc, _faults_found)
    if not doc:
        return out
    out += [f"({machine_line(doc)})", "",
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
        ok = _kills_ok(kills)
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


def _switch_found(doc: dict) -> str | None:
    rows = doc.get("rows", [])
    if not rows:
        return None
    first = rows[0]
    text = (f"{first['method']}, the switch took {first['switch_s']:.2f} s and the download received "
            f"{100 * first['ratio']:.1f}% of what the links allow")
    return sentence("; ".join([text] + [f"{r['method']}, {r['switch_s']:.2f} s and {100 * r['ratio']:.1f}%"
                                         for r in rows[1:]]) + ".")


def section_switch(doc: dict | None) -> list[str]:
    out = opening("7. A profile switch under load", "What a running download receives across a profile switch: "
                  "the plan changed in place against removed and rebuilt.", doc, _switch_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    out += [f"({machine_line(doc)})", "",
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


def _cohorts_found(doc: dict) -> str | None:
    cfg, rows = doc.get("config", {}), {r["what"]: r for r in doc.get("rows", [])}
    many = f"{cfg.get('cohorts')} cohorts"
    parts = []
    if "setup" in rows:
        parts.append(f"{many} took {fmt_ratio(rows['setup']['ratio'], 3)} of one cohort's setup time")
    if "packet" in rows:
        parts.append(("" if parts else f"{many} ") + f"forwarded {fmt_ratio(rows['packet']['ratio'], 3)} of "
                     + ("its" if parts else "one cohort's") + " packets/s")
    if parts:
        parts = [" and ".join(parts) + "."]
    if "whole hosts" in rows:
        parts.append(f"Links for whole hosts took {fmt_ratio(rows['whole hosts']['ratio'], 3)} of per-port links' "
                     f"setup time.")
    return " ".join(parts) or None


def section_cohorts(doc: dict | None) -> list[str]:
    out = opening("9. What cohorts cost", "What splitting the links into cohorts, or giving whole hosts a link, "
                  "costs at setup and per packet, side by side with one cohort.", doc, _cohorts_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    rows = {r["what"]: r for r in doc.get("rows", [])}
    out += [f"({machine_line(doc)})", "",
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
