"""Benchmark 8: the dial-up table's method with the server behind an audience, in the namespace lab.

The dial-up table (``dialup``) puts every user behind the same 28.8k modem.  Here the
server sits behind a **mix** (``ratelimit lab up --mix``): the lab's ``CLIENTS`` client
namespaces split between profiles by largest remainder, each connection of a client its
own emulated link of its client's profile (shape mode, a link per (host, port)), and x
users spread evenly over the client namespaces, so each cohort has its share of them:

* ``dialup``: 60% 28.8k modems, 30% 56k modems, 10% ISDN lines, at x = 1,000 and 5,000
  (line rates summing to 40 and 202 Mbit/s);
* ``broadband``: 28.8k and 56k modems with 3G phones and cable modems, at x = 200.

Each row runs in a lab of its own, as a run of that row alone would: after the x = 1,000 row,
the same lab's x = 5,000 row read 1-3 points less (nginx 74% of a core against 48% alone,
probes' first byte p95 149 ms against 28-34 ms), cause not found.

The method is the dial-up table's (``bench/httpload.py``): httperf sessions as in 2000 (each user one
persistent connection, ``--burst-length 1``, the sessions started by ``--rate``), nginx,
and two readings per row, per cohort, each against **its own** link model's ceiling:

* *window*: replies in the server's access log over a steady-state window
  (``httpload.run_window``, ``httpload.rate_in_window``), a cohort's clients' connections only.
  Its sessions are long enough to span the window: ``CALLS`` calls (2000's 20) where that
  suffices (the 28.8k modems), more on faster links (``window_calls``), whose 20 calls end
  before the window does;
* *httperf's totals*, as in 2000 (``httpload.run_sessions``): every session of 20 calls
  started within the first second and run to its end; a cohort's rate is the sum over its
  clients of httperf's replies over its test duration, against ``httpload.totals_ceiling``.

Errors are httperf's, per cohort; CPU is the row's (the load generators, the server,
softirq, each CPU).  Where a call's time goes: ``dialup.PROBES`` curl probes in client 1
(its cohort's links; left out of the rates), each call timed to its first byte and from
there to its last (``httpload.probe_summary``).  The server's TCP: RFC 6298's 1 s RTO floor, as the dial-up table's.
On a kernel without netem the profiles' delays are left out (``--no-delay``).  The row
records how long httperf's processes waited for a CPU before each turn on one
(``load_wait_per_turn_ms``): the lab runs one busy-polling httperf per client namespace, 10
of them on this machine's 2 CPUs, where 2000's ran one per client machine.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from . import dialup, httperf, httpload
from .common import RFC_RTO_MIN_MS, BenchError, ratio, say, server_route, Steps
from .results import new_result, save

NAME = "audience"
CLIENTS = 10  # client namespaces: 60/30/10 split them exactly
MIXES = {"dialup": "modem-28k8:60%,modem-56k:30%,isdn-64k:10%",
         "broadband": "modem-28k8:40%,modem-56k:30%,3g:20%,cable:10%"}
PORTS = "10000-11499"  # per client: 500 sessions (x = 5,000) twice within TIME_WAIT, and room
QUICK_PORTS = "10000-10199"
CALLS = httpload.CALLS
QUICK_WINDOW_S = 24.0
MIN_RATIO = 0.98  # the target: every cohort at least this share of its model's ceiling (window)


@dataclass(frozen=True)
class Config:
    points: tuple[tuple[str, int], ...]  # (mix name, x)
    ramp_s: float
    window_s: float
    ports: str


def config(quick: bool, clients=None) -> Config:
    if quick:  # a 24 s window: a stop of the whole machine for 0.4 s reads as links 1.7% slow (3.3% in 12 s)
        return Config(tuple(("dialup", x) for x in clients or (40,)), 8.0, QUICK_WINDOW_S, QUICK_PORTS)
    if clients:  # x of the dial-up mix only
        return Config(tuple(("dialup", x) for x in clients), 12.0, 40.0, PORTS)
    return Config((("dialup", 1000), ("dialup", 5000), ("broadband", 200)), 12.0, 40.0, PORTS)


def window_calls(call_s: float, cfg: Config) -> int:
    """Calls per session for the window reading: 2000's 20 where they outlast the ramp and the
    window (with a seventh to spare), else as many as do."""
    return max(CALLS, math.ceil((cfg.ramp_s + cfg.window_s) * 1.15 / call_s))


def line_bps(mix: str, x: int, clients: int = CLIENTS) -> float:
    """The sum of the line rates of x users behind ``mix`` (each user a link: the download rate)."""
    from ratelimit.profiles import catalog
    from ratelimit.profiles.scenario import largest_remainder
    parts = [p.rpartition(":") for p in mix.split(",")]
    counts = largest_remainder(clients, [float(w.rstrip("%")) for _, _, w in parts])
    users = dialup.shares(x, clients)
    total, start = 0.0, 0
    for (name, _, _), n in zip(parts, counts):
        total += sum(users[start:start + n]) * catalog.load(name).down.rate_bps
        start += n
    return total


@dataclass(frozen=True)
class Cohort:
    """One cohort of a row: its clients (numbers), users per client, link model and what
    each call and session puts on its link."""

    name: str
    profile: str
    clients: tuple[int, ...]
    users: tuple[int, ...]
    model: object
    call_s: float
    session_s: float  # 20 calls, the 2000 way
    burst_bytes: int

    @property
    def x(self) -> int:
        return sum(self.users)


def cohorts(lab, x: int, header: int) -> list[Cohort]:
    """The applied mix's cohorts with x users spread over the clients."""
    users = dialup.shares(x, len(lab.clients))
    request = httpload.request_bytes("httperf", lab)
    by_name = {c["name"]: c for c in lab.info["link"]["summary"]["cohorts"]}
    out = []
    for name, c in by_name.items():
        members = tuple(i for i in range(1, len(lab.clients) + 1) if lab.cohort_of(i) == name)
        model = lab.link_model(cohort=name)
        burst = c["down"]["burst_bytes"]
        out.append(Cohort(name, c["profile"], members, tuple(users[i - 1] for i in members), model,
                          model.call_seconds(httpload.FILE_BYTES, header=header, request=request),
                          httpload.session_seconds(model, burst, header=header, request=request), burst))
    return out


def run_point(lab, mix: str, x: int, cfg: Config, log: Path, header: int) -> dict:
    """One row: the window reading, then httperf's totals, each per cohort."""
    groups = cohorts(lab, x, header)
    calls = {c.name: window_calls(c.call_s, cfg) for c in groups}
    duration = max(cfg.ramp_s + cfg.window_s + 5, *(calls[c.name] * c.call_s + cfg.ramp_s for c in groups))
    loads = [(i, httpload.load_argv("httperf", lab.server.address, n, duration, cfg.ramp_s, calls[c.name]))
             for c in groups for i, n in zip(c.clients, c.users) if n]
    probed = next(c for c in groups if 1 in c.clients)  # the probes run in client 1 (httpload.probe_calls)
    probe_n = max(2, int(cfg.window_s / probed.call_s) - 1)
    w = httpload.run_window(lab, "httperf", loads, cfg, log, duration_s=duration, probes=dialup.PROBES,
                          probe_n=probe_n, probe_timeout_s=probe_n * probed.call_s * 3 + 60)
    outputs = dict(zip((i for i, _ in loads), w.outputs))
    rows = []
    for c in groups:
        mine = {lab.client(i).address for i in c.clients}
        rates = httpload.connection_rates([d for d in w.completions if d.client in mine], w.start, w.end)
        rate, counted = sum(rates), len(rates)
        if counted < c.x * 0.95:
            raise BenchError(f"{c.name} x={x}: only {counted} of {c.x} connections finished two calls in the window")
        rep = httperf.combine([httperf.parse(outputs[i]) for i, n in zip(c.clients, c.users) if n])
        ceiling = c.x / c.call_s
        rows.append({"cohort": c.name, "profile": c.profile, "clients": list(c.clients), "x": c.x,
                     "calls_per_session": calls[c.name], "model_call_s": c.call_s, "model_ceiling": ceiling,
                     "completed_per_s": rate, "ratio_to_model": ratio(rate, ceiling), "connections_counted": counted,
                     "slowest_connection_ratio": min(rates) * c.call_s,
                     "errors": rep.get("errors", {}).get("total", 0), "generator_report": rep})
    row = {"mix_name": next(k for k, v in MIXES.items() if v == mix), "mix": mix, "x": x,
           "users_per_client": dialup.shares(x, len(lab.clients)), "window_s": w.end - w.start,
           "cohorts": rows, "errors": sum(r["errors"] for r in rows), "cpu": w.cpu, "cpu_run": w.cpu_run, **w.tcp,
           "probe": {"cohort": probed.name, **httpload.probe_summary(w, probed.model, header, probe_n)}}
    row["totals"] = run_totals(lab, groups)  # once the window's connections and queues are gone (httpload.quiet)
    if x >= WRK_FROM:  # a second tool for the same window: wrk (epoll) beside httperf (busy-polling)
        row["wrk"] = run_wrk_window(lab, groups, cfg, log)
    return row


WRK_FROM = 5000  # rows this large also read the window with wrk


def run_wrk_window(lab, groups: list[Cohort], cfg: Config, log: Path) -> dict:
    """The window reading again with wrk's persistent connections (each user one, calling
    for the whole run): per cohort, replies/s in the window against its model's ceiling."""
    duration = cfg.ramp_s + cfg.window_s + 5
    loads = [(i, httpload.load_argv("wrk", lab.server.address, n, duration, cfg.ramp_s))
             for c in groups for i, n in zip(c.clients, c.users) if n]
    w = httpload.run_window(lab, "wrk", loads, cfg, log, duration_s=duration)
    outputs = dict(zip((i for i, _ in loads), w.outputs))
    rows = []
    for c in groups:
        mine = {lab.client(i).address for i in c.clients}
        rate, counted = httpload.rate_in_window([d for d in w.completions if d.client in mine], w.start, w.end)
        ceiling = c.x / c.call_s
        errors = httpload.generator_totals("wrk", [outputs[i] for i, n in zip(c.clients, c.users) if n])["errors"]
        rows.append({"cohort": c.name, "completed_per_s": rate, "model_ceiling": ceiling,
                     "ratio_to_model": ratio(rate, ceiling), "connections_counted": counted, "errors": errors})
    return {"cohorts": rows, "errors": sum(r["errors"] for r in rows), "cpu": w.cpu}


def run_totals(lab, groups: list[Cohort]) -> dict:
    """httperf's totals, the 2000 way: sessions of 20 calls started within the first second,
    run to their end; per cohort, the sum over its clients of replies / test duration."""
    timeout_s = max(c.session_s for c in groups) * 3 + 60
    loads = [(i, httpload.totals_argv(lab, n, CALLS, timeout_s)) for c in groups for i, n in zip(c.clients, c.users) if n]
    run = httpload.run_sessions(lab, loads, timeout_s)
    reports = dict(zip((i for i, _ in loads), run.reports))
    rows = []
    for c in groups:
        mine = [reports[i] for i, n in zip(c.clients, c.users) if n]
        rate = sum(r["replies"] / r["duration_s"] for r in mine)
        ceiling = httpload.totals_ceiling(list(c.users), c.session_s)
        rep = httperf.combine(mine)
        rows.append({"cohort": c.name, "completed_per_s": rate, "model_ceiling": ceiling,
                     "ratio_to_model": ratio(rate, ceiling), "model_session_s": c.session_s,
                     "session_s": rep.get("conn_time_ms", {}).get("avg", math.nan) / 1000,
                     "errors": rep.get("errors", {}).get("total", 0), "sessions_ok": rep.get("sessions_ok"),
                     "sessions_total": rep.get("sessions_total")})
    return {"cohorts": rows, "errors": sum(r["errors"] for r in rows), "cpu": run.cpu, **run.tcp}


def measure(quick: bool, *, clients=None, outdir=None) -> dict:
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.link import LinkSpec
    cfg = config(quick, clients)
    netem = probe(["netem"])["netem"]
    doc = new_result(NAME, quick)
    doc["config"] = {"points": [list(p) for p in cfg.points], "mixes": MIXES, "ramp_s": cfg.ramp_s,
                     "window_s": cfg.window_s, "calls": CALLS, "clients": CLIENTS, "ports": cfg.ports,
                     "uri": httpload.URI, "mode": "shape", "per": "port", "delay_stage": netem,
                     "server_rto_min_ms": RFC_RTO_MIN_MS, "bandwidth": {}}
    steps = Steps(NAME, len(cfg.points))
    for mix_name, x in cfg.points:  # each row in a lab of its own, as a run of that row alone would be
        mix = MIXES[mix_name]
        bandwidth = doc["config"]["bandwidth"][mix_name] = dialup.bandwidth_for(
            line_bps(mix, max(x for m, x in cfg.points if m == mix_name)))
        link = LinkSpec(mix=mix, mode="shape", per="port", no_delay=not netem, bandwidth=bandwidth)
        with dialup.nginx_lab(f"ba{os.getpid()}", link, doc, clients=CLIENTS, ports=cfg.ports,
                              part=NAME) as (lab, header):
            log = Path(lab.info["dir"]) / "nginx" / "access.log"
            server_route(lab, RFC_RTO_MIN_MS)
            row = run_point(lab, mix, x, cfg, log, header)
            row["queues"] = lab.info["link"]["summary"].get("queues", 1)  # the trees the links are spread over
        row["bandwidth"] = bandwidth
        doc["rows"].append(row)
        steps(f"{mix_name} x={x:,}: " + "; ".join(_cohort_text(c, t) for c, t in
                                                  zip(row["cohorts"], row["totals"]["cohorts"]))
              + f"; machine {100 * row['cpu']['machine_busy']:.0f}% busy (CPUs "
              + ", ".join(f"{100 * b:.0f}%" for b in row["cpu"]["per_cpu_busy"]) + ")")
        if outdir:
            save(doc, outdir)
    return doc


def _cohort_text(c: dict, t: dict) -> str:
    return (f"{c['cohort']} ({c['x']:,} users) {c['completed_per_s']:.1f}/s = {100 * c['ratio_to_model']:.1f}% "
            f"of {c['model_ceiling']:.1f} (httperf's totals {100 * t['ratio_to_model']:.1f}%), "
            f"errors {c['errors']}+{t['errors']}")


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    doc = measure(args.quick, clients=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
