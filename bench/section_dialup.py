"""docs/benchmarks.md's section on the dial-up table (``bench/dialup.py``): today's settings
and v0.3's against the 2000 figures, the wide rows, the transient and the probes.
"""

from __future__ import annotations

from .common import MODEM_BPS
from .dialup import table_rows
from .sections import fmt_int, machine_line, notes_of, opening, table


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
    out += [f"({machine_line(doc)})", "",
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


def dialup_headline(doc: dict) -> dict | None:
    """The table's rows (``dialup.table_rows``), the one furthest below the link model's ceiling
    and the errors in all; None without rows.  The headline, the section's finding and its
    reading all read it."""
    rows = table_rows(doc)
    if not rows:
        return None
    return {"rows": rows, "worst": min(rows, key=lambda r: r["ratio_to_model"]),
            "errors": sum(r.get("errors") or 0 for r in rows)}


def _dialup_found(doc: dict, wide: dict | None) -> str | None:
    h = dialup_headline(doc)
    if h is None:
        return None
    w = h["worst"]
    text = (f"Every row reached at least {100 * w['ratio_to_model']:.1f}% of the link model's ceiling in the "
            f"window (lowest: {w['generator']} at x = {w['x']:,}), with {h['errors']} errors in all.")
    wide_rows = table_rows(wide) if wide else []
    if wide_rows:
        tools = " and ".join(sorted({r["generator"] for r in wide_rows}))
        xs = " and ".join(f"{r['x']:,}" for r in wide_rows)
        reached = " and ".join(f"{100 * r['ratio_to_model']:.1f}%" for r in wide_rows)
        text += f" With wider port ranges, {tools} at x = {xs} reached {reached}."
    return text


def section_dialup(doc: dict | None, img: str | None, v03: dict | None = None,
                   transient: dict | None = None, wide: dict | None = None) -> list[str]:
    out = opening("5. The dial-up table", "How many replies per second x users, each behind a 28.8k modem of its "
                  "own, complete against the link model's ceiling and the 2000 figures.", doc,
                  lambda d: _dialup_found(d, wide))
    if not doc:
        return out
    cfg = doc.get("config", {})
    stage = ("" if cfg.get("delay_stage") else
             " This kernel has no sch_netem, so the profile's 50 ms delays are left out and the link "
             "model is that of a token bucket without a delay stage (the last packet of each response "
             "leaves as soon as the ones before it are paid for).")
    out += [f"({machine_line(doc)})", "",
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
    from .dialup import linux_floor
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
    out += notes_of(doc)
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
            *probe_cells(r)]


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
    out = [f"### x = {xs}, wrk", "", f"({machine_line(doc)})", "",
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
    return out + notes_of(doc)


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


def probe_of(row: dict, part: str) -> dict | None:
    """The row's probe summary of ``part`` (None when the row has no probe calls)."""
    summary = row.get("probe", {}).get(part) or {}
    return summary if summary.get("n") else None


def probe_cells(row: dict) -> list[str]:
    first, rest = probe_of(row, "first_byte_s"), probe_of(row, "rest_s")
    if not (first and rest):
        return ["-", "-"]
    return [f"{1000 * first['p50']:.0f} / {1000 * first['p95']:.0f} ms",
            f"{rest['p50']:.3f} s ({row['probe']['rest_model_s']:.3f} s)"]


def _dialup_reading(doc: dict) -> list[str]:
    from .dialup import linux_floor
    h = dialup_headline(doc)
    if h is None:
        return []
    rows, worst, errors = h["rows"], h["worst"], h["errors"]
    linux = [f"{r['generator']} at x = {r['x']:,} with Linux's 200 ms floor reached {100 * r['ratio_to_model']:.1f}%, "
             f"retransmitting {100 * (r.get('retransmitted') or 0):.1f}% of segments" for r in doc["rows"] if linux_floor(r)]
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
        first, rest, calm = probe_of(r, "first_byte_s"), probe_of(r, "rest_s"), probe_of(least, "first_byte_s")
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
