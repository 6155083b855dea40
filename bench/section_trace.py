"""docs/benchmarks.md's section on links that follow a trace (``bench/trace.py``): how closely
they track it at 100 to 10,000 links, what the driver costs at each step, and a naive driver."""

from __future__ import annotations

from .sections import machine_line, notes_of, opening, table


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _bytes(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _links(r: dict) -> str:
    """A tracking row's links, and how many of them carried the load where not all did."""
    loaded = r.get("loaded", r["links"])
    return f"{r['links']:,}" + ("" if loaded == r["links"] else f" ({loaded:,} loaded)")


def _on_time(alone: list[dict]) -> dict[int, list[int]]:
    """The driver alone: per link count, the steps (ms) at which it missed none."""
    return {n: [r["step_ms"] for r in alone if r["links"] == n and r["missed_per_s"] == 0]
            for n in sorted({r["links"] for r in alone})}


def _trace_found(doc: dict) -> str | None:
    rows = doc.get("rows", [])
    track = [r for r in rows if r.get("kind") == "tracking" and r.get("loaded", r["links"]) == r["links"]]
    parts = []
    if track:
        within = [r for r in track if r["p95_tolerances_1000ms"] <= 1]
        if within:  # 95% of its 1 s windows within tolerance: p95 of the error, in tolerances, at most 1
            r = max(within, key=lambda r: (r["links"], -r["p95_tolerances_1000ms"]))
            parts.append(f"The largest row within tolerance in 95% of its 1 s windows: {_links(r)} links at a "
                         f"{r['step_ms']} ms step (mean {(r['mean_ratio'] - 1) * 100:+.2f}% against the capacity, "
                         f"1 s windows' p95 error {r['p95_tolerances_1000ms']:.2f} tolerances, "
                         f"{_bytes(r.get('p95_error_bytes_1000ms'))} bytes).")
        else:
            parts.append("No fully loaded row had 95% of its 1 s windows within tolerance.")
    ok = {n: steps for n, steps in _on_time([r for r in rows if r.get("kind") == "driver" and
                                             r.get("stepper", "arrays") == "arrays"]).items() if steps}
    if ok:
        n = max(ok)
        parts.append(f"The driver alone sent every step on time with {n:,} links from a {min(ok[n])} ms step.")
    return " ".join(parts) or None


def _beside(rows: list[dict]) -> list[str]:
    """The driver beside the shaping's softirq (``bench/tracebusy.py``)."""
    if not rows:
        return []
    out = ["**The driver beside the shaping** ([bench/tracebusy.py](../bench/tracebusy.py)): the links on a "
           "multi-queue layout, each sent full-size datagrams at its trace's mean capacity (pace.c, one sender per "
           "CPU), the driver at 100 ms. Over the window: the machine's CPU from `/proc/stat` (softirq: the router's "
           "forwarding and shaping, and the sink's drops; system: the senders' sends and the driver's netlink "
           "work), each CPU's busy share, and the driver's own CPU.", ""]
    body = [[f"{r['links']:,} on {r['queues']} queues", f"{r['offered_pps']:,}", f"{r['delivered_pps']:,}",
             _pct(r["cpu"]["machine"]["busy"]), _pct(r["cpu"]["machine"]["softirq"]),
             ", ".join(_pct(c["busy"]) for c in r["cpu"]["per_cpu"]),
             f"{_pct(r['driver_cpu'])} ({_pct(r['driver_user'])} user)", f"{r['missed_per_s']:g}"] for r in rows]
    out += table(["links", "offered, packets/s", "delivered, packets/s", "machine busy", "machine softirq",
                  "each CPU busy", "driver CPU (of it user)", "steps missed/s"], body) + [""]
    reading = []
    for r in rows:
        m = r["cpu"]["machine"]
        cores = len(r["cpu"]["per_cpu"])
        reading.append(f"{r['links']:,} links: softirq {m['softirq'] * cores:.2f} of a core and the driver "
                       f"{r['driver_cpu']:.2f}, of {cores} cores; the machine {_pct(m['busy'])} busy")
    return out + ["Reading: " + "; ".join(reading) + ".", ""]


def section_trace(doc: dict | None) -> list[str]:
    out = opening("11. Links that follow a trace", "How closely links that follow a trace deliver its capacity, and "
                  "what the driver costs at each step.", doc, _trace_found)
    if not doc:
        return out
    rows, cfg = doc.get("rows", []), doc.get("config", {})
    track = [r for r in rows if r.get("kind") == "tracking"]
    alone = [r for r in rows if r.get("kind") == "driver"]
    naive = [r for r in rows if r.get("kind") == "naive"]
    tcp = [r for r in rows if r.get("kind") == "tcp"]
    out += [f"({machine_line(doc)})", "",
            f"`{doc.get('command')}` ([bench/trace.py](../bench/trace.py)). Each row's links (a link per client "
            "port, in namespaces of the run's own) follow the synthetic LTE drive `lte-drive.down` at a scale, each "
            "link from its own phase, with the driver (`ratelimit follow`) at the row's step. *Tracking*: UDP "
            "senders pace every link at 1.1 times its capacity (two C processes, "
            "[bench/tracesend.c](../bench/tracesend.c), each sending its share of the links at the times a Python "
            "plan gives every datagram); a packet socket on the client's device records each datagram with the "
            "kernel's receive time ([bench/tracerecv.c](../bench/tracerecv.c), a receive ring); the bytes each link "
            "delivered (as its class meters them: the frame, at least 64 bytes) in 1 s and 100 ms windows at random "
            "offsets, against the trace's capacity in the same window (each opportunity one full-size frame), over a "
            f"run of {cfg.get('seconds', 0):g} s less its first {cfg.get('settle_s', 0):g} s and its last half "
            "second. An error in *tolerances*: the window's error over 5% (1 s) or 10% (100 ms) of its capacity, or "
            "one datagram, whichever is larger. The datagrams are small enough that a link's 1 s window holds 50 or "
            "more at the trace's mean where this machine forwards that many in all, and as many as it forwards "
            "beside the driver where it does not (column *a link's 1 s window*, datagrams at the trace's mean); a "
            "window where the trace is low holds fewer, and its tolerance is one datagram. Where the senders fall "
            "behind (below), a row reads the load as much as the driver. In a row of *N (K loaded)* links the "
            "driver follows all N while the senders pace only K of them (every (N/K)-th port), as many datagrams a "
            "window as in the row of K links: the tracking at the driver's full size, with a load this machine "
            "carries. *Driver CPU*: its user + system time (`/proc/PID/stat`: the kernel's work on its netlink "
            "messages is done in its own calls) over the run, as a share of one core.", ""]
    unscored = [r for r in rows if r.get("kind") == "unscored"]
    if unscored:
        out += ["Not scored on this machine: " + "; ".join(
            f"{_links(r)} links at {r['scale']:g} with {r['payload_bytes'] + 42}-byte frames ({r['why']})"
            for r in unscored) + ".", ""]
    if track:
        body = [[_links(r), f"{r['step_ms']} ms", f"{r['scale']:g}", f"{r['payload_bytes'] + 42}",
                 f"{r.get('datagrams_per_window', r['datagrams_per_link_s']):g}",
                 f"{r['datagrams_per_s']:,}", f"{r['mbit_s']:g}", f"{(r['mean_ratio'] - 1) * 100:+.2f}%",
                 f"{_pct(r['p95_error_1000ms'])} ({r['p95_tolerances_1000ms']:.2f})",
                 _bytes(r.get("p95_error_bytes_1000ms")),
                 f"{_pct(r['p95_error_100ms'])} ({r['p95_tolerances_100ms']:.2f})",
                 _pct(r.get("driver_cpu")), f"{r.get('missed', 0)}"] for r in track]
        out += table(["links", "step", "scale", "frame, bytes", "a link's 1 s window, datagrams", "in all, datagrams/s",
                      "Mbit/s", "mean vs capacity", "1 s windows: p95 error (tolerances)", "1 s windows: p95 error, bytes",
                      "100 ms windows: p95 (tolerances)", "driver CPU", "steps missed"], body) + [""]
        frames = [f"{_links(r)} links at {r['step_ms']} ms {r['p95_error_bytes_1000ms'] / 1514:.2f}" for r in track
                  if r.get("p95_error_bytes_1000ms") is not None]
        if frames:
            out += ["The 1 s windows' p95 error in full-size frames (1,514 bytes): " + ", ".join(frames) + ". "
                    "A frame is the unit the driver sets and pays a link's rate in; where the trace is low a 1 s "
                    "window holds only a few datagrams and its tolerance is one of them, so part of a frame counts "
                    "as several tolerances there "
                    "([traces-notes.md, section 7](traces-notes.md#7-50-datagrams-a-window-at-1000-links-a-load-"
                    "generator-in-c-2026-11-25)).", ""]
        from . import traceload
        load = [f"{_links(r)} links: {r['sender']['late_ms']:,.0f} ms at most, "
                f"{r['sender'].get('late_10ms', 0) / max(1, r['sender']['sent']) * 100:.0f}% over 10 ms, "
                f"{r['receiver_lost']:,} lost of {r['class_packets']:,}" for r in track if "receiver_lost" in r]
        if load:
            out += ["The load itself, each row: how late the senders sent (the most, and the share of datagrams "
                    "more than 10 ms after their time) and what the receiver missed of what the links' classes sent "
                    "(their packet counters, read once the queues had emptied, or after "
                    f"{traceload.DRAIN_S:g} s, before the receiver stopped): " + "; ".join(load) + ".", ""]
    everyone = alone
    alone = [r for r in alone if r.get("stepper", "arrays") == "arrays"]
    if alone:
        out += [f"The driver alone (the same links, no traffic), {cfg.get('alone_s', 0):g} s at each step after 2 s to "
                "settle: the array driver at each step, then the reference (`ratelimit follow --reference`: each link "
                "stepped in Python, the same changes) at 100 ms, on the same plan one after the other. *A change*: "
                "the driver's CPU over the changes it sent. Rows of *N on Q queues* use the multi-queue layout "
                "(`--queues Q`, a tree per tx queue: the layout of section 10's 40,000 busy links).", ""]
        body = [[_links(r) + (f" on {r['queues']} queues" if r.get("queues", 1) > 1 else ""),
                 r.get("stepper", "arrays"), f"{r['step_ms']} ms",
                 f"{_pct(r['cpu'])} ({_pct(r.get('user'))} user)", f"{r['changes_per_s']:,}",
                 "-" if r.get("us_per_change") is None else f"{r['us_per_change']:.2f} us",
                 f"{r['rounds_per_s']:g}", f"{r['missed_per_s']:g}", f"{r.get('round_ms') or 0:.1f} ms"]
                for r in everyone]
        out += table(["links", "driver", "step", "driver CPU (of it user)", "changes/s", "a change", "rounds/s",
                      "steps missed/s", "last round"], body) + [""]
        ratios = []
        for r in everyone:
            if r.get("stepper") == "reference" and r.get("us_per_change"):
                mine = next((a for a in alone if (a["links"], a.get("queues", 1), a["step_ms"]) ==
                             (r["links"], r.get("queues", 1), r["step_ms"]) and a.get("us_per_change")), None)
                if mine:
                    ratios.append(f"{r['links']:,} links {r['us_per_change'] / mine['us_per_change']:.1f}")
        if ratios:
            out += ["CPU a change, reference / arrays, side by side in this run: " + ", ".join(ratios) + ".", ""]
        reading = []
        for n, ok in _on_time(alone).items():
            short = [r for r in alone if r["links"] == n and r["missed_per_s"] > 0]
            text = f"{n:,} links: " + (f"every step from {min(ok)} ms sent on time" if ok else "no step sent on time")
            if short:
                r = min(short, key=lambda r: r["step_ms"])
                text += (f"; at {r['step_ms']} ms it missed {r['missed_per_s']:g} steps a second at "
                         f"{_pct(r['cpu'])} of a core")
            reading.append(text)
        for r in alone:
            if r["missed_per_s"] > 0 and r["rounds_per_s"]:
                r["_every"] = 1000 / r["rounds_per_s"]
        big = max(r["links"] for r in alone)
        late = [r for r in alone if r["links"] == big and "_every" in r]
        if late:
            r = max(late, key=lambda r: r["step_ms"])
            reading.append(f"so at {big:,} links this machine's driver makes a round about every {r['_every']:.0f} ms "
                           f"at most (at a {r['step_ms']} ms step it sent {r['rounds_per_s']:g} rounds a second)")
        out += ["Reading: " + "; ".join(reading) + ". The driver is one process of two threads, one making each "
                "step's changes while the other sends the last (so its CPU can pass a core): where it misses steps "
                "it is the saturated one. Its user time is its own Python and numpy: each link's rate, hold and "
                "payment for the step, and the messages. Its system time is the kernel's work on the messages: "
                "a link's class is found through its group's qdisc in the device's 16-bucket table of qdiscs "
                "([design.md, The qdisc hash](design.md#the-layout-on-a-device)). Both are sampled at the "
                "scheduler's ticks, so the split is rough.", ""]
    out += _beside([r for r in rows if r.get("kind") == "beside"])
    if naive:
        out += ["A **naive driver**, not at the same time: a shell in the router's namespace runs one "
                "`tc class change` process per link per step, each link's rate of that step, rounds back to back. "
                "A round's time is the shortest step it sustains; its CPU is the tc processes' (user + system).", ""]
        body = [[f"{r['links']:,}", f"{r['round_ms']:,.0f} ms", f"{r['per_change_ms']:.2f} ms", _pct(r["cpu"])]
                for r in naive]
        out += table(["links", "a round (the shortest step)", "a change", "CPU of the tc processes"], body) + [""]
    for r in tcp:
        out += [f"**TCP** over traced links: {r['links']} links at {r['scale']:g} of the trace, a TCP download each "
                f"(the kernel's default congestion control) for {r['seconds']:g} s; the segments each connection had "
                f"delivered after the first {cfg.get('settle_s', 0):g} s (the server's count: a segment counts once it "
                f"reaches the client, in order or not, and once however often it was sent) against the trace's "
                f"capacity then, each opportunity a full segment: "
                f"**{r['goodput_ratio_mean'] * 100:.1f}%** on average, {r['goodput_ratio_min'] * 100:.1f}% to "
                f"{r['goodput_ratio_max'] * 100:.1f}% by link, the driver {_pct(r['driver_cpu'])} of a core. Not the "
                f"client's reads: a lost segment holds every later one from the reader until its retransmission "
                f"arrives, so the reads over a window also count segments that crossed the link before it.", ""]
    out += notes_of(doc)
    return out
