"""Benchmark 5: the dial-up table of the 2000 experiments, the 2000 way, in the namespace lab.

x simultaneous users, each one persistent HTTP/1.1 connection fetching the
10,000-byte file 20 times in a row, every connection its own emulated 28.8k
modem (``modem-28k8``: PPP frames with compressed headers over V.42, shaped
per (host, port) -- one connection is one user, as in 2000).  Two load
generators, each in four client namespaces (the 2000 lab had four clients):

* httperf, as in 2000: ``--wsess N,20,0 --burst-length 1`` with the sessions
  started by ``--rate`` over a few seconds, each keeping one connection for its
  20 calls; at most ``PER_HTTPERF`` sessions per process (select() caps a
  process near 1,024 descriptors, and httperf busy-polls: every process keeps a
  core busy whatever its load);
* wrk (epoll): ``-t1 -c N`` per client namespace, N keep-alive connections
  each fetching back to back; it also runs x = 10,000, where httperf would need
  a dozen spinning processes on two cores.

Each client's ephemeral range is ``PORTS`` (every port an emulated link each way), which holds
12,000 users; wrk at ``WIDE_XS`` (15,000 and 20,000) runs in a lab of its own whose ranges are
widened as far as its users need (``ports_for``), a result of its own (``WIDE_NAME``), so the
table's rows keep their lab.

Measurement window: replies (status 200, 10,000 bytes) in the server's access log,
from ``ramp`` after the start (every session connected and past its first call) for
``window`` seconds, the same window for every row; each connection's rate is the
number of its calls between its first and last reply in the window over that time
(``rate_in_window``: counting replies in the window instead would depend on where it
cuts wrk's waves of calls), and the row's rate is their sum.  Theory: a fetch needs at least 10,000 x 8 / 28,800 =
2.78 s, so x users complete at most 0.36 x fetches per second (the published
formula).  The link model's ceiling counts what each call puts on the link:
the request up, the response's frames down (``LinkModel.call_seconds``), at
the rate the PPP frames get; so x users complete at most x / call_seconds.

v0.3's settings (police mode, ``--burst 5``, Ethernet framing) run where the kernel has
act_police: on the host if it has it, else in the full-kernel VM (``--no-vm`` skips it),
measured as the 2000 figures were read, from httperf's own totals (``run_totals``): every
client starts its sessions within the first second, each runs its 20 calls to the end, and
the row's rate is the sum over clients of replies / test duration.  Each session is a new
port, so a policer whose 18,000-byte bucket starts full: the session model
(``session_seconds``) takes the bucket off the session's time on the link.

Where a call's time goes: during each row's window, ``PROBES`` curl processes in the
first client namespace fetch the file ``probe_calls`` times each over one connection
(each its own link, left out of the row's rate) and time each call in two parts:
request to first byte (the request up, the server, and what the link still owes for the
packet before) and first byte to last byte (the response's frames down, which the link
model predicts: ``rest_model_s``).

CPU: the load generators' and the server's processes (utime + stime from
/proc), and the kernel's softirq time over all CPUs.  The measuring (the window,
the probes, whole sessions, the CPU) is ``bench/httpload.py``'s, which the
audience benchmark shares; this module is the table: its rows, labs and readings.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from . import httperf
from .common import (LINUX_RTO_MIN_MS, MODEM_BPS, RFC_RTO_MIN_MS, SERVER_2000, SERVER_CC, BenchError, ratio, say,
                     server_congestion_control, server_route, Steps)
from .httpload import (CALLS, FILE_BYTES, URI, generator_totals, load_argv, probe_summary, rate_in_window,
                       request_bytes, response_header_bytes, run_sessions, run_window, session_seconds, totals_argv,
                       totals_ceiling)
from .results import new_result, save
from .sandbox import track_topology, untrack_topology

NAME = "dialup"
VM_WORK = True  # v0.3's settings (police mode) where the host lacks act_police
CLIENTS = 4  # client namespaces (the 2000 lab's four client machines)
PER_HTTPERF = httperf.FD_SAFE  # sessions per httperf process: below FD_SETSIZE
PORTS = "10000-12999"  # each client's ephemeral range, every port an emulated link
PROFILE = "modem-28k8"
# x -> event-driven server's completed connections/s measured in 2000 (the published benchmark ratelimit v0.3 was written for)
PUBLISHED = {200: 69, 1000: 349, 2000: 697, 3600: 1239}
THEORY_FACTOR = MODEM_BPS / (FILE_BYTES * 8)  # 0.36 completions/s per user


@dataclass(frozen=True)
class Config:
    # (load generator, x, the server's RTO floor in ms: RFC_RTO_MIN_MS, or None for Linux's 200 ms)
    points: tuple[tuple[str, int, int | None], ...]
    ramp_s: float
    window_s: float
    ports: str = PORTS  # each client's ephemeral range (``ports_for``)


TABLE_XS = (200, 1000, 2000, 3600)  # the 2000 table's x
WIDE_NAME = f"{NAME}-wide"  # the rows whose users need more than PORTS: a lab of their own
WIDE_XS = (15_000, 20_000)  # wrk only: a client's share is several httperf processes' (``PER_HTTPERF``)
PROBES = 10  # probe connections per row (curl, in the first client namespace)


def config(quick: bool, clients=None) -> Config:
    """httperf and wrk at each x with the RFC's 1 s RTO floor (httperf only where a
    client's share fits one process: ``PER_HTTPERF``); the default table also has wrk at
    x = 10,000 and one wrk row with Linux's 200 ms floor to show what it costs."""
    if quick:
        xs = tuple(clients or (40,))
        # a 12 s window: with Linux's floor a connection's third call can come 8.5 s after its second
        return Config(tuple((g, x, RFC_RTO_MIN_MS) for g in ("httperf", "wrk") for x in xs) + (("wrk", xs[0], None),),
                      8.0, 12.0, ports_for(max(xs)))
    xs = tuple(clients or TABLE_XS)
    points = (tuple(("httperf", x, RFC_RTO_MIN_MS) for x in xs if shares(x)[0] <= PER_HTTPERF)
              + tuple(("wrk", x, RFC_RTO_MIN_MS) for x in (xs if clients else (*xs, 10_000))))
    if not clients:
        points += (("wrk", xs[1], None),)
    return Config(points, 12.0, 40.0, ports_for(max(xs)))


def wide_config() -> Config:
    """wrk at ``WIDE_XS``, in a lab whose clients' ranges hold the largest one's users."""
    return Config(tuple(("wrk", x, RFC_RTO_MIN_MS) for x in WIDE_XS), 12.0, 40.0, ports_for(max(WIDE_XS)))


def ports_for(x: int) -> str:
    """Each client's ephemeral range for x users: ``PORTS`` where a client's share and the
    probes fit in it, else ``PORTS`` widened at its top by whole 500s as far as they need
    (every port is an emulated link each way, so no further)."""
    lo, hi = (int(p) for p in PORTS.split("-"))
    need = shares(x)[0] + PROBES
    return PORTS if need <= hi - lo + 1 else f"{lo}-{lo + math.ceil(need / 500) * 500 - 1}"


def linux_floor(row: dict) -> bool:
    """A comparison row: the server kept Linux's 200 ms RTO floor."""
    return row.get("server_rto_min_ms") == LINUX_RTO_MIN_MS


def table_rows(doc: dict, generator: str | None = None) -> list[dict]:
    """The table's rows (the server at the RFC's floor), by generator and x."""
    return sorted((r for r in doc.get("rows", []) if not linux_floor(r) and generator in (None, r["generator"])),
                  key=lambda r: (r["generator"], r["x"]))


def theoretical(x: int) -> float:
    """The published ceiling: 0.36 x completed fetches per second."""
    return x * THEORY_FACTOR


def shares(x: int, n: int = CLIENTS) -> list[int]:
    """x users over n client namespaces, as evenly as possible."""
    return [x // n + (1 if i < x % n else 0) for i in range(n)]


# ---------------------------------------------------------------- one row


def run_point(lab, model, generator: str, x: int, rto_min_ms: int, cfg: Config, log: Path,
              header_bytes: int) -> dict:
    """One (generator, x): start the load in every client namespace, count completions at
    the server over the window, stop the load, read each generator's own totals."""
    users = shares(x)
    session_s = CALLS * model.call_seconds(FILE_BYTES)
    duration = cfg.ramp_s + cfg.window_s + 5
    if generator == "httperf":  # sessions end after 20 calls: the window must fit in them
        duration = max(duration, session_s + cfg.ramp_s)
    probe_n = max(2, int(cfg.window_s / session_s * CALLS) - 1)
    w = run_window(lab, generator, [(i + 1, load_argv(generator, lab.server.address, n, duration, cfg.ramp_s))
                                    for i, n in enumerate(users) if n], cfg, log, duration_s=duration,
                   probes=PROBES, probe_n=probe_n, probe_timeout_s=probe_n * session_s / CALLS * 3 + 60)
    rate, counted = rate_in_window(w.completions, w.start, w.end)
    if counted < x / 2:  # a machine that saturates leaves some with one call or none: the row says how many
        raise BenchError(f"{generator} x={x}: only {counted} connections finished two calls in the window "
                         "(is the server's access log in the lab's format, with $msec and $remote_port?)")
    request = request_bytes(generator, lab)
    call_s = model.call_seconds(FILE_BYTES, header=header_bytes, request=request)
    ceiling = x / call_s
    row = {"generator": generator, "x": x, "users_per_client": users, "completed_per_s": rate,
           "connections_counted": counted, "window_s": w.end - w.start, "theoretical": theoretical(x),
           "ratio_to_theoretical": ratio(rate, theoretical(x)),
           "model_call_s": call_s, "model_ceiling": ceiling, "ratio_to_model": ratio(rate, ceiling),
           "request_bytes": request, "server_rto_min_ms": rto_min_ms,
           "published": PUBLISHED.get(x) if generator == "httperf" else None,
           "cpu": w.cpu, "cpu_run": w.cpu_run, **w.tcp, "probe": probe_summary(w, model, header_bytes, probe_n)}
    row.update(generator_totals(generator, w.outputs))
    return row


# ---------------------------------------------------------------- the table


V03_X = (200,)  # the VM emulates its CPUs in software: the smallest row of the 2000 table
V03_SERVER = {"cc": SERVER_2000.congestion_control, "initcwnd": SERVER_2000.initcwnd_segments}  # RFC 2581's IW
# (RTO floor, server stack): today's server, and one whose TCP starts as 2000's did with Linux's floor
V03_STACKS = ((RFC_RTO_MIN_MS, None), (None, V03_SERVER))


def run_totals(lab, model, x: int, rto_min_ms: int, header_bytes: int, burst_bytes: int) -> dict:
    """x users the 2000 way, read as the 2000 figures were: each client's httperf starts
    its sessions within the first second (``--rate`` = its sessions) and runs every one
    to its end; the row's rate is the sum over clients of httperf's replies / test duration."""
    users = shares(x)
    request = request_bytes("httperf", lab)
    session_s = session_seconds(model, burst_bytes, header=header_bytes, request=request)
    timeout_s = session_s * 3 + 60
    run = run_sessions(lab, [(i + 1, totals_argv(lab, n, CALLS, timeout_s)) for i, n in enumerate(users) if n],
                       timeout_s)
    rate = sum(r["replies"] / r["duration_s"] for r in run.reports)
    ceiling = totals_ceiling(users, session_s)
    row = {"generator": "httperf", "window": "httperf totals", "x": x, "users_per_client": users,
           "completed_per_s": rate, "theoretical": theoretical(x), "ratio_to_theoretical": ratio(rate, theoretical(x)),
           "model_session_s": session_s, "model_ceiling": ceiling, "ratio_to_model": ratio(rate, ceiling),
           "burst_bytes": burst_bytes, "request_bytes": request, "server_rto_min_ms": rto_min_ms,
           "published": PUBLISHED.get(x), "cpu": run.cpu, **run.tcp}
    row.update(generator_totals("httperf", run.outputs))
    # one persistent connection a session: httperf's connection time is the session's
    row["session_s"] = row["generator_report"].get("conn_time_ms", {}).get("avg", math.nan) / 1000
    return row


def measure(quick: bool, *, clients=None, outdir=None, cfg: Config | None = None) -> dict:
    """The table: modem-28k8 in shape mode, per (host, port), every row in the same window
    (``cfg``: instead of ``config(quick, clients)``).  A lab whose clients' ranges are wider
    than ``PORTS`` is a result of its own, ``WIDE_NAME``: the table's rows keep their lab."""
    from ratelimit.kernel.probe import probe
    from ratelimit.lab.link import LinkSpec
    cfg = cfg or config(quick, clients)
    bandwidth = _bandwidth(max(x for _, x, _ in cfg.points))
    netem = probe(["netem"])["netem"]
    doc = new_result(NAME if cfg.ports == PORTS else WIDE_NAME, quick)
    doc["config"] = {"points": [list(p) for p in cfg.points], "ramp_s": cfg.ramp_s, "window_s": cfg.window_s,
                     "calls": CALLS, "clients": CLIENTS, "per_httperf": PER_HTTPERF, "ports": cfg.ports,
                     "uri": URI, "profile": PROFILE, "mode": "shape", "per": "port", "bandwidth": bandwidth,
                     "delay_stage": netem}
    link = LinkSpec(profile=PROFILE, mode="shape", per="port", no_delay=not netem, bandwidth=bandwidth)
    with _lab(link, doc, cfg.ports) as (lab, model, header):
        log = Path(lab.info["dir"]) / "nginx" / "access.log"
        burst_bytes = lab.info["link"]["summary"]["down"]["burst_bytes"]
        steps = Steps(NAME, len(cfg.points))
        for generator, x, floor in cfg.points:
            rto_min_ms = server_route(lab, floor)
            row = run_point(lab, model, generator, x, rto_min_ms, cfg, log, header)
            if generator == "httperf":  # the 2000 reading beside the window: sessions run whole, httperf's totals
                row["totals"] = _second_reading(run_totals(lab, model, x, rto_min_ms, header, burst_bytes))
            doc["rows"].append(row)
            steps(f"{generator} x={x:,} (RTO floor {rto_min_ms} ms): "
                  f"{row['completed_per_s']:.1f} replies/s = {100 * row['ratio_to_model']:.1f}% "
                  f"of the link model's {row['model_ceiling']:.1f}, {100 * row['ratio_to_theoretical']:.1f}% of 0.36x; "
                  f"errors {row['errors']}; server retransmitted {100 * (row['retransmitted'] or 0):.1f}% of "
                  f"segments ({row['server_tcp']['TcpExtTCPTimeouts']} timeouts); "
                  f"machine {100 * row['cpu']['machine_busy']:.0f}% busy; probes: first byte after "
                  f"{1000 * row['probe']['first_byte_s'].get('p50', math.nan):.0f} ms (p50), the rest "
                  f"{row['probe']['rest_s'].get('p50', math.nan):.3f} s (model {row['probe']['rest_model_s']:.3f} s)"
                  + _second_text(row))
            if outdir:
                save(doc, outdir)  # the next row waits for this one's connections and queues to go (httpload.quiet)
    return doc


def _second_reading(totals: dict) -> dict:
    """What a dial-up row keeps of its httperf-totals run (``run_totals``)."""
    keep = ("completed_per_s", "model_ceiling", "ratio_to_model", "ratio_to_theoretical", "session_s",
            "model_session_s", "errors", "sessions_total", "sessions_ok", "retransmitted", "server_tcp")
    return {k: totals.get(k) for k in keep}


def _second_text(row: dict) -> str:
    t = row.get("totals")
    if t:
        return (f"; read as in 2000 (httperf's totals, sessions whole): {t['completed_per_s']:.1f} replies/s = "
                f"{100 * t['ratio_to_model']:.1f}% of the model's {t['model_ceiling']:.1f}, sessions "
                f"{t['session_s']:.2f} s (model {t['model_session_s']:.2f} s), errors {t['errors']}")
    if row.get("whole_run_per_s") is not None:
        return f"; wrk's whole run: {row['whole_run_per_s']:.1f} replies/s"
    return ""


def _published_share(x: int) -> str:
    """The 2000 figure at ``x`` as a share of 0.36 x, as " (2000: N%)"; empty where there is none."""
    return f" (2000: {100 * PUBLISHED[x] / theoretical(x):.1f}%)" if x in PUBLISHED else ""


def measure_v03(quick: bool, *, outdir=None) -> dict:
    """v0.3's settings -- police mode, ``--burst 5``, Ethernet framing, no delay, as the
    2000 routers ran them -- read from httperf's totals, with today's server TCP and a 2000 one."""
    from ratelimit.lab.link import LinkSpec
    from ratelimit.service import V03_BURST
    xs = (40,) if quick else V03_X
    bandwidth = _bandwidth(max(xs))
    doc = new_result(f"{NAME}-v03", quick)
    doc["config"] = {"xs": list(xs), "calls": CALLS, "clients": CLIENTS, "ports": PORTS, "uri": URI,
                     "profile": None, "mode": "police", "per": "port", "burst": V03_BURST, "bandwidth": bandwidth,
                     "delay_stage": False, "window": "httperf totals"}
    link = LinkSpec(rate=str(MODEM_BPS), mode="police", per="port", burst=V03_BURST, bandwidth=bandwidth)
    with _lab(link, doc) as (lab, model, header):
        burst_bytes = lab.info["link"]["summary"]["down"]["burst_bytes"]
        steps = Steps(f"{NAME}-v03", len(xs) * len(V03_STACKS))
        for x in xs:
            for floor, stack in V03_STACKS:
                rto_min_ms = server_route(lab, floor, initcwnd=stack and stack["initcwnd"])
                cc = server_congestion_control(lab, stack["cc"] if stack else SERVER_CC)
                row = run_totals(lab, model, x, rto_min_ms, header, burst_bytes)
                row["server_tcp_start"] = f"{cc}, initial window {stack['initcwnd'] if stack else 10}"
                doc["rows"].append(row)
                steps(f"httperf x={x:,} ({row['server_tcp_start']}, RTO floor {rto_min_ms} ms): "
                      f"{row['completed_per_s']:.1f} replies/s (httperf's totals) = "
                      f"{100 * row['ratio_to_theoretical']:.1f}% of 0.36x{_published_share(x)}, "
                      f"{100 * row['ratio_to_model']:.1f}% "
                      f"of the model's {row['model_ceiling']:.1f}; sessions {row['session_s']:.2f} s (model "
                      f"{row['model_session_s']:.2f} s); errors {row['errors']}; server retransmitted "
                      f"{100 * (row['retransmitted'] or 0):.1f}% of segments "
                      f"({row['server_tcp']['TcpExtTCPTimeouts']} timeouts)")
                if outdir:
                    save(doc, outdir)  # the next waits for this one's connections to go (httpload.quiet)
    return doc


def _bandwidth(x: int) -> str:
    """The router's --bandwidth for x modems at once, with room (v0.3's 100 Mbit at least)."""
    return bandwidth_for(x * MODEM_BPS)


def bandwidth_for(line_bps: float) -> str:
    """The router's --bandwidth for links whose line rates sum to ``line_bps``, with a fifth
    more for room (v0.3's 100 Mbit at least)."""
    return f"{max(100, math.ceil(line_bps * 1.2 / 1e6))}mbit"


@contextlib.contextmanager
def _lab(link, doc: dict, ports: str = PORTS):
    """The four-client lab with nginx behind ``link``: (lab, its link model, the response header's bytes)."""
    with nginx_lab(f"bd{os.getpid()}", link, doc, clients=CLIENTS, ports=ports, part=NAME) as (lab, header):
        yield lab, lab.link_model(), header


@contextlib.contextmanager
def nginx_lab(name: str, link, doc: dict, *, clients: int, ports: str, part: str):
    """A lab of ``clients`` client namespaces with nginx behind ``link``, removed afterwards
    (also when the run is killed: ``sandbox``): (lab, the response header's bytes)."""
    from ratelimit.lab.core import Lab
    lab = Lab.up(name, clients=clients, link=link, server="nginx", ports=ports, say=lambda m: say(part, m))
    track_topology(lab)
    try:
        doc["config"]["server_congestion_control"] = server_congestion_control(lab)
        header = doc["config"]["header_bytes"] = response_header_bytes(lab)
        yield lab, header
    finally:
        lab.down()
        untrack_topology(lab)


def main(args) -> int:
    from .results import RESULTS_DIR
    from .sandbox import host_has, in_vm, load_modules, run_vm_part
    outdir = args.out or RESULTS_DIR
    if in_vm():
        load_modules()
        say(NAME, f"wrote {save(measure_v03(args.quick, outdir=outdir), outdir)}")
        return 0
    doc = measure(args.quick, clients=args.clients, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    if not (args.quick or args.clients):
        say(NAME, f"wrote {save(measure(False, outdir=outdir, cfg=wide_config()), outdir)}")
    if host_has("police"):
        say(NAME, f"wrote {save(measure_v03(args.quick, outdir=outdir), outdir)}")
    elif args.vm:
        rc = run_vm_part(NAME, ["--quick"] if args.quick else [], outdir=outdir)
        if rc != 0:
            raise BenchError(f"the VM part of {NAME} exited {rc}")
    return 0

