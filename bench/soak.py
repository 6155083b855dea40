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
import json
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
import urllib.request
from pathlib import Path

from .common import MODEM_BPS, REPO, BenchError, Steps, need_tool, say
from .dashboard import CHROMIUM, CHROMIUM_ARGS, _cpu_s
from .results import new_result, save

NAME = "soak"
LAB_NAME = "rlsoak"  # rl-rlsoak-* namespaces: this benchmark's only
CLIENTS = 4
CONNS = 250  # wrk connections per client namespace: CLIENTS x CONNS busy links
PROFILE = "modem-28k8"
BANDWIDTH = "100mbit"  # the router's: 1,000 modems ask for 28.8 Mbit/s
DEFAULT_MINUTES = 60
QUICK_MINUTES = 3
SAMPLE_S = 10
POLL_S = 1.0
HTTP_TIMEOUT_S = 10
STOP_GRACE_S = 3
WRK_MARGIN_S = 180  # wrk runs this much past the soak (setup time): it is stopped at the end
MARKS = (1, 5, 10, 20, 30, 40, 50, 60)  # minutes the summary reads RSS at
GOAL_MIB = 5.0  # growth from minute 10 to minute 60
TOKEN_ENV = "RATELIMIT_WEB_TOKEN"
LINKS_QUERY = "api/links?limit=10000"  # every active link (the API's largest page; 16,000 links in all)
PAGE_PROBE = """() => {
  const d = window.ratelimitDashboard, tick = d && d.state && d.state.lastTick;
  return {conn: (document.getElementById('conn') || {}).textContent || null,
          tick_age_s: tick ? (Date.now() - tick) / 1000 : null,
          js_heap_mib: performance.memory ? performance.memory.usedJSHeapSize / 1048576 : null,
          dom_nodes: document.getElementsByTagName('*').length};
}"""

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _LIBC = None


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when this benchmark dies, even by SIGKILL."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# ---------------------------------------------------------------- /proc


def _status_kb(pid: int) -> dict:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem (KiB) and Threads of ``pid``."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(rest.split()[0])
    return out


def _pss_kb(pid: int) -> dict:
    """Pss and Pss_Anon (KiB) from ``smaps_rollup`` (empty where the kernel has none)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Pss_Anon"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        fields = tail.split()
        if len(fields) > 1:
            table[int(entry)] = (int(fields[1]), head.partition("(")[2])
    return table


def _descendants(root: int, table: dict) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _mib(kb: float | None) -> float | None:
    return None if kb is None else round(kb / 1024, 2)


# ---------------------------------------------------------------- pollers


def _parse_links(body: bytes) -> dict:
    doc = json.loads(body)
    return {"seq": doc.get("seq"), "total": doc.get("total"), "matched": doc.get("matched"),
            "bytes": {(r["direction"], r["host"], r["port"]): r.get("bytes") or 0 for r in doc.get("links", [])}}


_LABELS = re.compile(r'(\w+)="([^"]*)"')


def _parse_metrics(body: bytes) -> dict:
    """``ratelimit_bytes_total`` per direction and ``ratelimit_stats_up`` from a scrape."""
    out: dict = {"bytes": {}}
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith(("ratelimit_bytes_total{", "ratelimit_stats_up{")):
            labels, _, value = line.rpartition("} ")
            if line.startswith("ratelimit_stats_up"):
                out["stats_up"] = float(value)
            else:
                out["bytes"][dict(_LABELS.findall(labels)).get("direction", "")] = int(float(value))
    return out


class _Poller(threading.Thread):
    """GET ``url`` once every ``POLL_S`` seconds until ``stop`` is set; counts answers and errors
    and keeps the last answer, parsed."""

    def __init__(self, name: str, url: str, parse, stop: threading.Event):
        super().__init__(name=f"soak-{name}", daemon=True)
        self.label, self.url, self.parse, self.stop = name, url, parse, stop
        self.lock = threading.Lock()
        self.ok = self.errors = 0
        self.first_errors: list[str] = []
        self.latest = None
        self._times: list[float] = []
        self.body_bytes = 0

    def run(self) -> None:
        t0 = next_t = time.monotonic()
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=HTTP_TIMEOUT_S) as r:
                    body = r.read()
                parsed = self.parse(body)
                with self.lock:
                    self.ok += 1
                    self.latest = parsed
                    self.body_bytes = len(body)
                    self._times.append(time.monotonic() - start)
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                with self.lock:
                    self.errors += 1
                    if len(self.first_errors) < 20:
                        self.first_errors.append(f"{start - t0:.0f} s: {type(e).__name__}: {e}"[:300])
            next_t += POLL_S
            now = time.monotonic()
            if next_t < now:  # an answer took longer than the period: go on from now
                next_t = now
            self.stop.wait(next_t - now)

    def take(self) -> dict:
        """Counts so far and the answer times since the last take."""
        with self.lock:
            times, self._times = self._times, []
            return {"ok": self.ok, "errors": self.errors, "body_bytes": self.body_bytes,
                    "answer_s_max": round(max(times), 4) if times else None,
                    "answer_s_mean": round(sum(times) / len(times), 4) if times else None}, self.latest


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


class _Browser:
    """Headless Chromium with the dashboard page open; page errors and console errors counted."""

    def __init__(self, url: str, token: str):
        from playwright.sync_api import sync_playwright
        self.errors: list[str] = []
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            self.page = self._browser.new_page(viewport={"width": 1400, "height": 1250})
            self.page.on("pageerror", lambda e: self._error(f"pageerror: {e}"))
            self.page.on("console", lambda m: self._error(f"console: {m.text}")
                         if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
            self.page.goto(url + "#token=" + token)
            self.page.wait_for_function("() => document.getElementById('conn').textContent === 'live'",
                                        timeout=60000)
        except BaseException:
            self.close()
            raise

    def _error(self, text: str) -> None:
        self.errors.append(text[:300])

    def wait(self, seconds: float) -> None:
        """Sleep, letting Playwright handle the page's events meanwhile."""
        if seconds > 0:
            self.page.wait_for_timeout(seconds * 1000)

    def probe(self) -> dict:
        try:
            got = self.page.evaluate(PAGE_PROBE)
            if got.get("js_heap_mib") is not None:
                got["js_heap_mib"] = round(got["js_heap_mib"], 2)
            return got
        except Exception as e:  # noqa: BLE001
            return {"error": f"{type(e).__name__}: {e}"[:300]}

    def close(self) -> None:
        for step in (lambda: self._browser.close(), lambda: self._pw.stop()):
            try:
                step()
            except Exception:  # noqa: BLE001 - best effort: the process goes either way
                pass


# ---------------------------------------------------------------- samples


def _log_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text(errors="replace").splitlines() if line.strip())
    except OSError:
        return 0


def _sample(t: float, web: subprocess.Popen, pollers: dict, prev_links: dict | None, browser,
            log: Path) -> tuple[dict, dict | None]:
    st = _status_kb(web.pid)
    pss = _pss_kb(web.pid)
    table = _process_table()
    kids = _descendants(web.pid, table)
    kids_rss = 0
    for pid in kids:
        try:
            kids_rss += _status_kb(pid).get("VmRSS", 0)
        except OSError:
            pass
    chrome_pss = 0
    for pid in _descendants(os.getpid(), table):
        if "chrom" in table[pid][1] or "headless" in table[pid][1]:
            chrome_pss += _pss_kb(pid).get("Pss", 0)
    try:
        fds = len(os.listdir(f"/proc/{web.pid}/fd"))
    except OSError:
        fds = None
    row = {"t_s": round(t, 1), "rss_mib": _mib(st.get("VmRSS")), "hwm_mib": _mib(st.get("VmHWM")),
           "rss_anon_mib": _mib(st.get("RssAnon")), "rss_file_mib": _mib(st.get("RssFile")),
           "pss_mib": _mib(pss.get("Pss")), "pss_anon_mib": _mib(pss.get("Pss_Anon")),
           "cpu_s": round(_cpu_s(web.pid), 2), "threads": st.get("Threads"), "fds": fds,
           "children": len(kids), "children_rss_mib": _mib(kids_rss), "browser_pss_mib": _mib(chrome_pss)}
    latest_links = None
    for name, poller in pollers.items():
        counts, latest = poller.take()
        row[name] = counts
        if name == "links":
            latest_links = latest
        elif latest is not None:
            row["metrics_bytes"] = latest.get("bytes")
            row["stats_up"] = latest.get("stats_up")
    if latest_links is not None:
        b = latest_links["bytes"]
        row["links_total"] = latest_links["total"]
        row["links_matched"] = latest_links["matched"]
        row["links_returned"] = len(b)
        row["links_seq"] = latest_links["seq"]
        for d, short in (("dest", "down"), ("source", "up")):
            row[f"bytes_{short}"] = sum(v for k, v in b.items() if k[0] == d)
            row[f"used_{short}"] = sum(1 for k, v in b.items() if k[0] == d and v > 0)
            if prev_links is not None:
                pb = prev_links["bytes"]
                row[f"rising_{short}"] = sum(1 for k, v in b.items() if k[0] == d and v > pb.get(k, 0))
    row["web_log_lines"] = _log_lines(log)
    row["page"] = browser.probe() if browser is not None else None
    row["page_errors"] = len(browser.errors) if browser is not None else None
    return row, latest_links


def _rss_at(rows: list[dict], minute: float) -> float | None:
    """RSS of the sample nearest ``minute`` (within one sample period)."""
    if not rows:
        return None
    best = min(rows, key=lambda r: abs(r["t_s"] - minute * 60))
    return best["rss_mib"] if abs(best["t_s"] - minute * 60) <= SAMPLE_S else None


def _slope_per_min(rows: list[dict]) -> float | None:
    """Least-squares slope of RSS over ``rows``, MiB per minute."""
    pts = [(r["t_s"] / 60, r["rss_mib"]) for r in rows if r.get("rss_mib") is not None]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return None if den == 0 else sum((x - mx) * (y - my) for x, y in pts) / den


def summarize_run(rows: list[dict], expected_links: int, wrk: list[dict], web_log: str,
                  page_errors: list[str]) -> dict:
    """The summary of a run: RSS at the marks, growth, slope, counters, errors.  ``web_log`` is all
    the server logged; the lines up to the last sample count as logged during the run."""
    duration = rows[-1]["t_s"] if rows else 0.0
    at = {m: _rss_at(rows, m) for m in MARKS if m * 60 <= duration + SAMPLE_S / 2}
    last = rows[-1]["rss_mib"] if rows else None
    base10 = _rss_at(rows, 10)
    s: dict = {"duration_s": duration, "rss_mib_at_minute": at, "rss_mib_end": last,
               "rss_mib_max": max((r["rss_mib"] for r in rows), default=None),
               "growth_mib_10_to_end": None if base10 is None or last is None or duration < 11 * 60 else
               round(last - base10, 2),
               "slope_mib_per_min_last_half": None}
    half = [r for r in rows if r["t_s"] >= duration / 2]
    slope = _slope_per_min(half)
    s["slope_mib_per_min_last_half"] = None if slope is None else round(slope, 3)
    if at.get(60) is not None and base10 is not None:
        s["growth_mib_10_to_60"] = round(at[60] - base10, 2)
        s["goal_met"] = s["growth_mib_10_to_60"] <= GOAL_MIB
    # counters: after the first minute, the total rose in every interval and (nearly) every busy link did
    steady = [r for r in rows if r["t_s"] >= 60 and "rising_down" in r]
    totals = [(r["t_s"], r.get("metrics_bytes") or {}) for r in rows]
    totals_rose = all(all(b.get(d, 0) > a.get(d, 0) for d in ("dest", "source"))
                      for (_, a), (t, b) in zip(totals, totals[1:]) if t >= 60)
    min_down = min((r["rising_down"] for r in steady), default=None)
    min_up = min((r["rising_up"] for r in steady), default=None)
    s["counters"] = {"expected_links_per_direction": expected_links, "totals_rose_every_interval": totals_rose,
                     "min_rising_down": min_down, "min_rising_up": min_up,
                     "used_down_end": rows[-1].get("used_down") if rows else None,
                     "links_answer_truncated": any((r.get("links_matched") or 0) > (r.get("links_returned") or 0)
                                                   for r in rows),
                     "kept_rising": bool(steady) and totals_rose and min_down is not None
                     and min_down >= 0.95 * expected_links}
    polls = {k: rows[-1].get(k, {}) for k in ("metrics", "links")} if rows else {}
    log_lines = [ln for ln in web_log.splitlines() if ln.strip()]
    during = rows[-1].get("web_log_lines", len(log_lines)) if rows else len(log_lines)
    s["errors"] = {"metrics_polls": polls.get("metrics", {}).get("errors"),
                   "links_polls": polls.get("links", {}).get("errors"),
                   "polls_ok": {k: v.get("ok") for k, v in polls.items()},
                   "wrk": sum(w["errors"] for w in wrk), "wrk_requests": sum(w["requests"] or 0 for w in wrk),
                   "wrk_read": [w["read"] for w in wrk],
                   "page": len(page_errors), "web_log_lines": during,
                   "web_log_lines_at_stop": len(log_lines) - during}
    s["errors"]["none"] = not any(s["errors"][k] for k in ("metrics_polls", "links_polls", "wrk", "page",
                                                            "web_log_lines"))
    return s


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
    from ratelimit.lab.core import DEFAULT_PORTS, Lab
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
    pollers: dict[str, _Poller] = {}
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
        pollers = {"metrics": _Poller("metrics", url + "metrics", _parse_metrics, stop_polls),
                   "links": _Poller("links", url + LINKS_QUERY, _parse_links, stop_polls)}
        for p in pollers.values():
            p.start()
        browser = _Browser(url, token)
        steps(f"pollers at {1 / POLL_S:g} Hz on /metrics and /{LINKS_QUERY}; Chromium has the dashboard open; "
              f"sampling every {SAMPLE_S} s for {minutes:g} min")
        prev = None
        last_minute = 0
        for k in range(seconds // SAMPLE_S + 1):
            browser.wait(t0 + k * SAMPLE_S - time.monotonic())
            if web.poll() is not None:
                raise BenchError(f"ratelimit web exited {web.returncode} after {time.monotonic() - t0:.0f} s: "
                                 + " ".join((logdir / "web.log").read_text(errors="replace").split())[-400:])
            row, latest = _sample(time.monotonic() - t0, web, pollers, prev, browser, logdir / "web.log")
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
