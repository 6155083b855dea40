"""Soak: the dashboard server's memory over a long run, under load and watched.

    python -m bench soak [--minutes N] [--out DIR]     N: 60 by default, 3 with --quick

A namespace lab of its own (``rlsoak``): four client namespaces, modem-28k8 in shape mode
with one link per (host, port) (without the profile's delay, jitter and loss where the kernel
lacks sch_netem), the clients' ports 10000-10999: 16,000 links (each client's IPv4 and IPv6
address x 1,000 ports x 2 directions).  In each client namespace wrk keeps 250 keep-alive
connections fetching the lab server's largest file (1,000,000 bytes: some 280 s a response at
28.8k, so wrk completes few requests and the links stay busy) for the whole run: 1,000 busy
modem links.  ``ratelimit web`` (its own process; ``--interval 1 --history 300``, the
defaults) watches the router's client-facing interface; two threads fetch ``/metrics`` and
``/api/links`` (every active link: ``limit=10000``, the API's largest page) once a second
each, and headless Chromium (Playwright) keeps the dashboard page open for the whole run, the
token in the URL fragment as the browser tests pass it.

Every ``SAMPLE_S`` seconds, from the moment the server serves: its RSS (``VmRSS``, with
``RssAnon``/``RssFile`` and ``Pss`` from ``smaps_rollup``), CPU seconds, threads, open
descriptors and any children; how many links' byte counters rose since the sample before
(from the last ``/api/links`` answer) and the totals over all links ``/metrics`` gives; the
pollers' answers and errors; the lines in the server's log; the page's connection badge, the
age of its last tick and its JS heap; Chromium's Pss.  At the end: wrk's own totals and
errors, and what the server logged while it stopped (kept apart from what it logged during
the run).  MiB is 1,024 KiB, as /proc counts.

The summary: RSS at minutes 1, 5, 10, 20, ... 60 (as far as the run goes), its growth from
minute 10 to the end, the slope over the last half of the run (MiB per minute), whether the
counters kept rising and whether anything saw an error.  The goal (issue: the dashboard's
memory over hours): at most ``GOAL_MIB`` of growth from minute 10 to minute 60.

Results: ``soak-host.json`` (runs under an hour: ``soak-host-quick.json``), saved every minute
so a run that is stopped keeps what it measured.  Everything the run makes -- the lab, the
server, wrk, the browser -- is removed at the end, also after Ctrl-C or an error; a lab that a
killed run left is removed at the next start.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import MODEM_BPS, REPO, BenchError, need_tool, say, Steps
from .dashboard import CHROMIUM
from .results import new_result, save
from .soak_readings import (GOAL_MIB, HTTP_TIMEOUT_S, LINKS_QUERY, POLL_S, SAMPLE_S, Browser, parse_links,
                            parse_metrics, Poller, sample, summarize_run)

NAME = "soak"
LAB_NAME = "rlsoak"  # rl-rlsoak-* namespaces: this benchmark's only
CLIENTS = 4
CONNS = 250  # wrk connections per client namespace: CLIENTS x CONNS busy links
PROFILE = "modem-28k8"
BANDWIDTH = "100mbit"  # the router's: 1,000 modems ask for 28.8 Mbit/s
DEFAULT_MINUTES = 60
QUICK_MINUTES = 3
STOP_GRACE_S = 3
WRK_MARGIN_S = 180  # wrk runs this much past the soak (setup time): it is stopped at the end
TOKEN_ENV = "RATELIMIT_WEB_TOKEN"

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _LIBC = None


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when this benchmark dies, even by SIGKILL."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# ---------------------------------------------------------------- the parts


def _remove_leftover_lab() -> bool:
    """Remove lab ``LAB_NAME`` if a run that is gone left it; refuse if a live process owns it."""
    from ratelimit.lab import store, topology
    info = store.read_state(LAB_NAME)
    if info is None and not topology.lab_namespaces(LAB_NAME):
        return False
    pid = (info or {}).get("pid")
    if pid and pid != os.getpid() and os.path.exists(f"/proc/{pid}"):
        raise BenchError(f"lab '{LAB_NAME}' belongs to process {pid}, which is running (another soak?); "
                         f"if it is not one: ratelimit lab down --name {LAB_NAME}")
    store.down(LAB_NAME)
    return True


def _largest_file() -> tuple[str, int]:
    from ratelimit.lab import docroot
    name = max(docroot.SIZES, key=docroot.SIZES.get)
    return name, docroot.SIZES[name]


def _check_browser() -> None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        raise BenchError("Playwright is missing (pip install playwright): the soak keeps the dashboard "
                         "open in a real browser") from None
    if not os.path.exists(CHROMIUM):
        raise BenchError(f"{CHROMIUM} is missing: apt-get install chromium")


def _start_web(lab, token: str, logdir: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """``ratelimit web`` on a free loopback port, watching the router's client-facing interface;
    returns the process, its URL and the list its stdout lines go to."""
    argv = [sys.executable, "-m", "ratelimit", "web", "--netns", lab.topo.router, "--if", lab.topo.router_client_if,
            "--listen", "127.0.0.1:0", "--interval", "1", "--history", "300"]
    env = {**os.environ, "PYTHONPATH": str(REPO), TOKEN_ENV: token}
    with open(logdir / "web.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=str(REPO), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log, text=True, start_new_session=True, preexec_fn=_die_with_parent)
    lines: list[str] = []
    found: dict = {}
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
            if m and not ready.is_set():
                found["url"] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, name="soak-web-stdout", daemon=True).start()
    ready.wait(60)
    if "url" not in found:
        from ratelimit.kernel.proc import stop
        stop(proc, 10)
        log_text = (logdir / "web.log").read_text(errors="replace")
        said = " ".join((log_text or " ".join(lines)).split())
        raise BenchError(f"ratelimit web did not start serving: {said[-400:]}")
    return proc, found["url"], lines


def _start_wrk(lab, url: str, seconds: int, timeout_s: int, logdir: Path) -> list[tuple[str, subprocess.Popen]]:
    procs = []
    for c in lab.clients:
        with open(logdir / f"wrk-{c.name}.out", "w") as out:
            p = c.popen(["wrk", "-t1", f"-c{CONNS}", f"-d{seconds}s", "--timeout", f"{timeout_s}s", url],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                        preexec_fn=_die_with_parent)
        procs.append((c.name, p))
    return procs


def _stop_wrk(procs, logdir: Path) -> list[dict]:
    """SIGINT (wrk then prints its totals), then SIGKILL; each client's totals and errors."""
    for _, p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    out = []
    for name, p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        try:
            text = (logdir / f"wrk-{name}.out").read_text(errors="replace")
        except OSError:
            text = ""
        out.append({"client": name, "exit": p.returncode, **_wrk_totals(text), "tail": text[-600:]})
    return out


def _wrk_totals(text: str) -> dict:
    out: dict = {"requests": None, "read": None, "errors": 0, "socket_errors": None, "non_2xx": 0}
    m = re.search(r"(\d+) requests in ([\d.]+\w+), ([\d.]+\w+) read", text)
    if m:
        out["requests"], out["read"] = int(m.group(1)), m.group(3)
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
        out["errors"] += sum(out["socket_errors"].values())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        out["non_2xx"] = int(m.group(1))
        out["errors"] += out["non_2xx"]
    if out["requests"] is None:  # no totals: wrk failed or was killed
        out["errors"] += 1
    return out


def _print_summary(s: dict) -> None:
    marks = ", ".join(f"min {m}: {v:.1f}" for m, v in s["rss_mib_at_minute"].items() if v is not None)
    say(NAME, f"RSS (MiB) {marks}; end ({s['duration_s'] / 60:.1f} min): {s['rss_mib_end']:.1f}; "
              f"max {s['rss_mib_max']:.1f}")
    g = s["growth_mib_10_to_end"]
    slope = s["slope_mib_per_min_last_half"]
    say(NAME, "growth from minute 10 to the end: " + ("- (the run is shorter than 11 minutes)" if g is None
                                                      else f"{g:+.1f} MiB")
        + "; slope over the last half: " + ("-" if slope is None else f"{slope:+.3f} MiB/min"))
    if "goal_met" in s:
        say(NAME, f"goal (at most {GOAL_MIB:g} MiB from minute 10 to 60): {s['growth_mib_10_to_60']:+.1f} MiB, "
                  + ("met" if s["goal_met"] else "NOT met"))
    c = s["counters"]
    say(NAME, f"counters: {'kept rising' if c['kept_rising'] else 'did NOT keep rising'} (totals rose every "
              f"interval: {c['totals_rose_every_interval']}; fewest links rising in a {SAMPLE_S} s interval after "
              f"minute 1: {c['min_rising_down']} down, {c['min_rising_up']} up, "
              f"of {c['expected_links_per_direction']})")
    e = s["errors"]
    say(NAME, f"errors: {'none' if e['none'] else 'SOME'} (polls /metrics {e['metrics_polls']} of "
              f"{(e['polls_ok'].get('metrics') or 0) + (e['metrics_polls'] or 0)}, /api/links {e['links_polls']} of "
              f"{(e['polls_ok'].get('links') or 0) + (e['links_polls'] or 0)}; wrk {e['wrk']} over "
              f"{e['wrk_requests']:,} complete requests ({', '.join(r or '?' for r in e['wrk_read'])} read); "
              f"page {e['page']}; server log {e['web_log_lines']} line(s) during the run, "
              f"{e['web_log_lines_at_stop']} while it stopped)")


# ---------------------------------------------------------------- the run


def measure(minutes: float, *, quick: bool, outdir) -> dict:
    from ratelimit.kernel.probe import probe
    from ratelimit.kernel.proc import stop
    from ratelimit.lab import topology
    from ratelimit.lab.core import Lab
    from ratelimit.lab.provision import DEFAULT_PORTS
    from ratelimit.lab.link import LinkSpec
    from .sandbox import track_topology, untrack_topology

    if os.geteuid() != 0:
        raise BenchError("the soak needs root (network namespaces)")
    need_tool("wrk", "wrk")
    _check_browser()
    if minutes <= 0:
        raise BenchError(f"--minutes: {minutes:g} is not a duration (more than 0)")
    seconds = int(round(minutes * 60))
    netem = probe(["netem"])["netem"]
    path, size = _largest_file()
    wrk_timeout = math.ceil(size * 8 / MODEM_BPS * 3) + 60  # a response takes size x 8 / 28,800 s and more
    doc = new_result(NAME, quick)
    doc["config"] = {"minutes": minutes, "clients": CLIENTS, "connections_per_client": CONNS, "profile": PROFILE,
                     "mode": "shape", "per": "port", "ports": DEFAULT_PORTS, "bandwidth": BANDWIDTH,
                     "delay_stage": netem, "uri": "/" + path, "file_bytes": size, "wrk_timeout_s": wrk_timeout,
                     "web": {"interval_s": 1, "history_s": 300}, "poll_s": POLL_S, "sample_s": SAMPLE_S,
                     "polled": ["metrics", LINKS_QUERY], "browser": CHROMIUM, "goal_mib_10_to_60": GOAL_MIB,
                     "lab": LAB_NAME}
    steps = Steps(NAME, 5 + math.ceil(minutes))
    if _remove_leftover_lab():
        say(NAME, f"removed lab '{LAB_NAME}' left by a killed run")
    logdir = Path(tempfile.mkdtemp(prefix="rlsoak-"))
    token = secrets.token_urlsafe(24)
    lab = web = browser = None
    wrk: list = []
    pollers: dict[str, Poller] = {}
    stop_polls = threading.Event()
    rows = doc["rows"]
    web_log = ""
    try:
        link = LinkSpec(profile=PROFILE, mode="shape", per="port", no_delay=not netem, bandwidth=BANDWIDTH)
        lab = Lab.up(LAB_NAME, clients=CLIENTS, link=link, server="auto", ports=DEFAULT_PORTS,
                     say=lambda m: say(NAME, m))
        track_topology(lab)
        doc["config"]["server"] = lab.info["server"]["kind"]
        steps(f"lab '{LAB_NAME}' up: {CLIENTS} clients, {PROFILE} per port"
              + ("" if netem else " without its delay (no sch_netem)") + f", {lab.info['server']['kind']} server")
        wrk = _start_wrk(lab, lab.url("/" + path), seconds + WRK_MARGIN_S, wrk_timeout, logdir)
        steps(f"wrk -t1 -c{CONNS} on each of {CLIENTS} clients: {CLIENTS * CONNS:,} connections fetching "
              f"/{path} ({size:,} bytes, about {size * 8 / MODEM_BPS:.0f} s each at 28.8k)")
        web, url, web_out = _start_web(lab, token, logdir)
        t0 = time.monotonic()
        doc["config"]["web_argv"] = web.args
        doc["web_stdout"] = web_out
        steps(f"ratelimit web (pid {web.pid}) serving {url}, watching {lab.topo.router}/{lab.topo.router_client_if}")
        pollers = {"metrics": Poller("metrics", url + "metrics", parse_metrics, stop_polls),
                   "links": Poller("links", url + LINKS_QUERY, parse_links, stop_polls)}
        for p in pollers.values():
            p.start()
        browser = Browser(url, token)
        steps(f"pollers at {1 / POLL_S:g} Hz on /metrics and /{LINKS_QUERY}; Chromium has the dashboard open; "
              f"sampling every {SAMPLE_S} s for {minutes:g} min")
        prev = None
        last_minute = 0
        for k in range(seconds // SAMPLE_S + 1):
            browser.wait(t0 + k * SAMPLE_S - time.monotonic())
            if web.poll() is not None:
                raise BenchError(f"ratelimit web exited {web.returncode} after {time.monotonic() - t0:.0f} s: "
                                 + " ".join((logdir / "web.log").read_text(errors="replace").split())[-400:])
            row, latest = sample(time.monotonic() - t0, web, pollers, prev, browser, logdir / "web.log")
            prev = latest or prev
            rows.append(row)
            gone = [name for name, p in wrk if p.poll() is not None]
            if gone and not doc.get("wrk_ended_early"):
                doc["wrk_ended_early"] = {"t_s": row["t_s"], "clients": gone}
                say(NAME, f"wrk on {', '.join(gone)} ended early (after {row['t_s']:.0f} s)")
            minute = int(row["t_s"] // 60)
            if minute > last_minute:
                last_minute = minute
                page = row.get("page") or {}
                steps(f"minute {minute}: RSS {row['rss_mib']:.1f} MiB (Pss {row['pss_mib'] or 0:.1f}, "
                      f"anon {row['rss_anon_mib'] or 0:.1f}), CPU {row['cpu_s']:.0f} s, {row['threads']} threads, "
                      f"{row['fds']} fds; links rising {row.get('rising_down', '-')} down / "
                      f"{row.get('rising_up', '-')} up; polls ok {row['metrics']['ok']}+{row['links']['ok']}, "
                      f"errors {row['metrics']['errors'] + row['links']['errors']}; page {page.get('conn')}, "
                      f"JS heap {page.get('js_heap_mib')} MiB, Chromium {row['browser_pss_mib']:.0f} MiB")
                save(doc, outdir)
    finally:
        page_errors = browser.errors if browser is not None else []
        if browser is not None:
            browser.close()
            if web is not None and web.poll() is None:
                time.sleep(STOP_GRACE_S)  # the page's stream ends before the server does
        stop_polls.set()
        for p in pollers.values():
            p.join(HTTP_TIMEOUT_S + 5)
        if web is not None:
            stop(web, 10)
            doc["web_exit"] = web.returncode
            try:
                web_log = (logdir / "web.log").read_text(errors="replace")
            except OSError:
                web_log = ""
        wrk_totals = _stop_wrk(wrk, logdir) if wrk else []
        if lab is not None:
            lab.down()
            untrack_topology(lab)
            left = topology.lab_namespaces(LAB_NAME)
            if left:
                say(NAME, f"namespaces left after lab down: {', '.join(left)}")
        shutil.rmtree(logdir, ignore_errors=True)
        doc["wrk"] = wrk_totals
        doc["web_log_tail"] = web_log[-4000:]
        doc["page_errors"] = page_errors[:50]
        doc["poll_errors"] = {k: p.first_errors for k, p in pollers.items()}
        if rows:  # also when stopped early: what was measured, summarized and saved
            doc["completed"] = rows[-1]["t_s"] >= seconds - SAMPLE_S
            doc["summary"] = summarize_run(rows, CLIENTS * CONNS, wrk_totals, web_log, page_errors)
            saved = save(doc, outdir)
            if not doc["completed"]:
                say(NAME, f"stopped after {rows[-1]['t_s']:.0f} s; what it measured is in {saved}")
    steps(f"done: {len(rows)} samples; everything of lab '{LAB_NAME}' removed")
    _print_summary(doc["summary"])
    return doc


def main(args) -> int:
    from .results import RESULTS_DIR
    outdir = args.out or RESULTS_DIR
    minutes = getattr(args, "minutes", None)
    if minutes is None:
        minutes = QUICK_MINUTES if args.quick else DEFAULT_MINUTES
    doc = measure(minutes, quick=args.quick or minutes < DEFAULT_MINUTES, outdir=outdir)
    say(NAME, f"wrote {save(doc, outdir)}")
    return 0
