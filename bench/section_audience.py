"""docs/benchmarks.md's section on an audience (``bench/audience.py``): the dial-up table's
method with the server behind a mix of links, each cohort against its own model."""

from __future__ import annotations

from .audience import MIN_RATIO
from .section_dialup import probe_cells, probe_of
from .sections import machine_line, notes_of, opening, table


def _dialup_mix(doc: dict) -> dict | None:
    """Behind the dial-up mix: each (row, cohort), the one furthest below its model's ceiling,
    the errors in all (window and totals) and whether the target is met; None without the mix.
    The section's finding and its reading both read it."""
    rows = [r for r in doc.get("rows", []) if r.get("mix_name") == "dialup"]
    if not rows:
        return None
    cohorts = [(r, c) for r in rows for c in r["cohorts"]]
    worst_r, worst = min(cohorts, key=lambda rc: rc[1]["ratio_to_model"])
    errors = sum(r["errors"] + r.get("totals", {}).get("errors", 0) for r in rows)
    return {"rows": rows, "cohorts": cohorts, "worst_row": worst_r, "worst": worst, "errors": errors,
            "met": all(c["ratio_to_model"] >= MIN_RATIO for _, c in cohorts) and errors == 0}


def _audience_found(doc: dict) -> str | None:
    parts = []
    mix = _dialup_mix(doc)
    if mix:
        parts.append(f"Behind the dial-up mix every cohort reached at least {100 * mix['worst']['ratio_to_model']:.1f}% "
                     f"of its own model's ceiling in the window, with {mix['errors']} errors: the target "
                     f"({100 * MIN_RATIO:.0f}% and no errors) is {'met' if mix['met'] else '**not met**'}.")
    for name in dict.fromkeys(r["mix_name"] for r in doc.get("rows", []) if r.get("mix_name") != "dialup"):
        r, c = min(((r, c) for r in doc["rows"] if r.get("mix_name") == name for c in r["cohorts"]),
                   key=lambda rc: rc[1]["ratio_to_model"])
        parts.append(f"Behind the {name} mix (no target) the lowest was {c['cohort']} at x = {r['x']:,}: "
                     f"{100 * c['ratio_to_model']:.1f}%.")
    return " ".join(parts) or None


def section_audience(doc: dict | None) -> list[str]:
    out = opening("8. An audience: the dial-up table behind a mix of links", "The dial-up table's method with the "
                  "server behind a mix of profiles, each cohort read against its own link model.", doc,
                  _audience_found)
    if not doc:
        return out
    cfg = doc.get("config", {})
    stage = ("" if cfg.get("delay_stage") else
             " This kernel has no sch_netem, so the profiles' delays (and 3G's jitter and loss) are left out "
             "(`--no-delay`): each cohort's model is its token bucket without a delay stage.")
    bandwidth = ", ".join(f"{k} {v}" for k, v in cfg.get("bandwidth", {}).items())
    queues = sorted({r.get("queues", 1) for r in doc.get("rows", [])})
    bandwidth += f"; tx queues: {', '.join(map(str, queues))} (one HTB tree each)" if queues != [1] else ""
    out += [f"({machine_line(doc)})", "",
            f"The dial-up table's method (section 5: nginx, httperf sessions as in 2000, the same two readings) "
            f"with the server behind a **mix** instead of one profile: `ratelimit lab up --clients "
            f"{cfg.get('clients')} --mix MIX --per port`, so the mix splits the {cfg.get('clients')} client "
            f"namespaces between profiles by largest remainder and every connection is its own emulated link of "
            f"its client's profile (shape mode; ports {cfg.get('ports')}; the router's bandwidth: {bandwidth}). "
            f"x users are spread evenly over the client namespaces, so each cohort has its share of them; each row "
            f"runs in a lab of its own. "
            f"Mixes: " + "; ".join(f"*{k}* `{v}`" for k, v in cfg.get("mixes", {}).items()) + ". "
            f"Each cohort is read against **its own** link model: *window*, its connections' replies in the "
            f"server's access log over a {cfg.get('window_s', 0):g} s window starting {cfg.get('ramp_s', 0):g} s "
            f"after the load (each connection's calls between its first and last reply there), against x / "
            f"(seconds per call) of its model; sessions there make {cfg.get('calls', 20)} calls where those span "
            f"the window (the 28.8k modems) and more on faster links, whose 20 calls would end before it. "
            f"*httperf's totals*, as in 2000: sessions of {cfg.get('calls', 20)} calls all started within the "
            f"first second and run to their end, a cohort's rate the sum over its clients of httperf's replies "
            f"over its test duration, against that run's model. The server's TCP: RFC 6298's 1 s RTO floor; "
            f"congestion control {cfg.get('server_congestion_control') or 'not recorded'}.{stage}", ""]
    body = []
    for r in doc.get("rows", []):
        totals = {t["cohort"]: t for t in r.get("totals", {}).get("cohorts", [])}
        cpu = r.get("cpu", {})
        for k, c in enumerate(r["cohorts"]):
            t = totals.get(c["cohort"], {})
            body.append([f"{r['mix_name']}, x = {r['x']:,}" if k == 0 else "",
                         f"{c['cohort']}", f"{c['x']:,} ({len(c['clients'])})", f"{c['calls_per_session']:,}",
                         f"{c['completed_per_s']:.1f}", f"{c['model_ceiling']:.1f} ({c['model_call_s']:.3f} s/call)",
                         f"**{100 * c['ratio_to_model']:.1f}%**",
                         f"{t.get('completed_per_s', 0):.1f}", f"{100 * t.get('ratio_to_model', 0):.1f}%",
                         f"{c['errors']:,} / {t.get('errors', 0):,}",
                         *([f"{100 * (r.get('retransmitted') or 0):.1f}%",
                            f"{100 * cpu.get('load_generators', 0):.0f}%", f"{100 * cpu.get('server', 0):.0f}%",
                            f"{100 * cpu.get('softirq', 0):.0f}%",
                            " / ".join(f"{100 * b:.0f}%" for b in cpu.get("per_cpu_busy", [])),
                            *probe_cells(r)]
                           if k == 0 else [""] * 7)])
    out += table(["mix, x", "cohort", "users (clients)", "calls/session (window)", "window: replies/s",
                  "its model's ceiling", "window: of the ceiling", "httperf's totals: replies/s",
                  "totals: of its model", "errors (window / totals)", "retransmitted", "CPU: load", "CPU: server",
                  "CPU: softirq", "each CPU busy", "probe: to first byte, p50 / p95",
                  "probe: first to last byte, p50 (model)"], body) + [""]
    wrk = [(r, c) for r in doc.get("rows", []) for c in r.get("wrk", {}).get("cohorts", [])]
    if wrk:
        out += ["The same window read a second way, with wrk (one persistent connection per user, epoll, "
                "calling for the whole run) in place of httperf's busy-polling sessions:", ""]
        out += table(["mix, x", "cohort", "wrk window: replies/s", "its model's ceiling", "of the ceiling", "errors",
                      "CPU: load", "each CPU busy"],
                     [[f"{r['mix_name']}, x = {r['x']:,}", c["cohort"], f"{c['completed_per_s']:.1f}",
                       f"{c['model_ceiling']:.1f}", f"**{100 * c['ratio_to_model']:.1f}%**", f"{c['errors']:,}",
                       f"{100 * r['wrk']['cpu'].get('load_generators', 0):.0f}%",
                       " / ".join(f"{100 * b:.0f}%" for b in r["wrk"]["cpu"].get("per_cpu_busy", []))]
                      for r, c in wrk]) + [""]
    out += ["CPU columns as in section 5: shares of one core (httperf busy-polls, so its share says nothing "
            "about the router); *each CPU busy*: the window's busy share of each of the machine's CPUs. "
            "Probe, as in section 5: 10 curl connections in client 1 (a 28.8k modem each), left out of the "
            "rates, each call timed from the request to the first byte and from there to the last.", ""]
    out += _reading(doc) + [""]
    out += notes_of(doc)
    return out


def _reading(doc: dict) -> list[str]:
    mix = _dialup_mix(doc)
    if mix is None:
        return []
    rows, cohorts, worst_r, worst = mix["rows"], mix["cohorts"], mix["worst_row"], mix["worst"]
    errors, met = mix["errors"], mix["met"]
    text = (f"Reading: behind the dial-up mix every cohort reached at least {100 * worst['ratio_to_model']:.1f}% of "
            f"its own model's ceiling in the window (lowest: {worst['cohort']} at x = {worst_r['x']:,}), with "
            f"{errors} errors in all; the target ({100 * MIN_RATIO:.0f}% and no errors) is "
            f"{'met' if met else '**not met**'}.")
    for r in sorted({id(r): r for r, c in cohorts if c["ratio_to_model"] < MIN_RATIO}.values(), key=lambda r: r["x"]):
        text += " " + _shortfall(r)
    for r in rows:
        second = r.get("wrk", {}).get("cohorts", [])
        if second:
            low = min(second, key=lambda c: c["ratio_to_model"])
            holds = low["ratio_to_model"] >= MIN_RATIO and not r["wrk"]["errors"]
            short = any(c["ratio_to_model"] < MIN_RATIO for c in r["cohorts"])  # httperf's window
            text += (f" Read with wrk instead (epoll, the machine {100 * r['wrk']['cpu'].get('machine_busy', 0):.0f}% "
                     f"busy), the x = {r['x']:,} window has every cohort at {100 * low['ratio_to_model']:.1f}% or more "
                     f"of its model ({r['wrk']['errors']} errors): " +
                     {(True, True): "the target holds for the links; the shortfall above is httperf's.",
                      (True, False): "the target holds with this tool too.",
                      (False, True): "short of the target with this tool too.",
                      (False, False): "short of the target with this tool."}[holds, short])
    out = [text]
    for r in doc.get("rows", []):
        if r.get("mix_name") != "dialup" and any(c["ratio_to_model"] < MIN_RATIO for c in r["cohorts"]):
            out += ["", f"Behind the {r['mix_name']} mix (no target: its fast links' calls take milliseconds, so "
                        f"whatever a call costs besides the link weighs on them): " + _shortfall(r)]
    return out


def _shortfall(r: dict) -> str:
    """Where a row's missing replies went, from its own CPU and probe readings."""
    cpu = r.get("cpu", {})
    short = ", ".join(f"{c['cohort']} {100 * c['ratio_to_model']:.1f}% ({c['model_call_s']:.2f} s a call: "
                      f"{1000 * c['model_call_s'] * (1 / c['ratio_to_model'] - 1):.0f} ms more per call)"
                      for c in r["cohorts"])
    text = (f"At x = {r['x']:,}: {short}; the CPUs were "
            + " and ".join(f"{100 * b:.0f}%" for b in cpu.get("per_cpu_busy", [])) + " busy, httperf's processes "
            f"{100 * cpu.get('load_generators', 0):.0f}% of a core, nginx {100 * cpu.get('server', 0):.0f}%, "
            f"softirq {100 * cpu.get('softirq', 0):.0f}% of the machine"
            + (f"; httperf's processes waited {cpu['load_wait_per_turn_ms']:.2f} ms for a CPU before each turn on one"
               if "load_wait_per_turn_ms" in cpu else "") + ".")
    first, rest = probe_of(r, "first_byte_s"), probe_of(r, "rest_s")
    if first and rest:
        model = r["probe"]["rest_model_s"]
        text += (f" The probes' responses ({r['probe'].get('cohort')}) took {rest['p50']:.3f} s from first to last "
                 f"byte (the model: {model:.3f} s) and came {1000 * first['p50']:.0f} ms after the request (p95 "
                 f"{1000 * first['p95']:.0f} ms)")
        if rest["p50"] <= model * 1.01:
            text += (": the links ran at their models and the server answered at once, so what the rows lack "
                     "is lost in the load generators, between a reply and the next request.")
        else:
            text += "."
    return text
