"""What the soak (``bench/soak.py``) reads while it runs -- two threads polling the
dashboard server's ``/metrics`` and ``/api/links``, the dashboard page in headless
Chromium, and every sample of the server's memory, CPU and links -- and what it makes of
them: the summary (RSS at ``MARKS``, its growth against ``GOAL_MIB``, the slope)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from . import procfs
from .dashboard import CHROMIUM, CHROMIUM_ARGS

SAMPLE_S = 10
POLL_S = 1.0
HTTP_TIMEOUT_S = 10
MARKS = (1, 5, 10, 20, 30, 40, 50, 60)  # minutes the summary reads RSS at
GOAL_MIB = 5.0  # growth from minute 10 to minute 60
LINKS_QUERY = "api/links?limit=10000"  # every active link (the API's largest page; 16,000 links in all)
PAGE_PROBE = """() => {
  const d = window.ratelimitDashboard, tick = d && d.state && d.state.lastTick;
  return {conn: (document.getElementById('conn') || {}).textContent || null,
          tick_age_s: tick ? (Date.now() - tick) / 1000 : null,
          js_heap_mib: performance.memory ? performance.memory.usedJSHeapSize / 1048576 : null,
          dom_nodes: document.getElementsByTagName('*').length};
}"""
_LABELS = re.compile(r'(\w+)="([^"]*)"')


def _mib(kb: float | None) -> float | None:
    return None if kb is None else round(kb / 1024, 2)


def parse_links(body: bytes) -> dict:
    doc = json.loads(body)
    return {"seq": doc.get("seq"), "total": doc.get("total"), "matched": doc.get("matched"),
            "bytes": {(r["direction"], r["host"], r["port"]): r.get("bytes") or 0 for r in doc.get("links", [])}}


def parse_metrics(body: bytes) -> dict:
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


class Poller(threading.Thread):
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


class Browser:
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


def _log_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text(errors="replace").splitlines() if line.strip())
    except OSError:
        return 0


def sample(t: float, web: subprocess.Popen, pollers: dict, prev_links: dict | None, browser,
            log: Path) -> tuple[dict, dict | None]:
    st = procfs.status_kb(web.pid)
    pss = procfs.pss_kb(web.pid)
    table = procfs.process_table()
    kids = procfs.descendants(web.pid, table)
    kids_rss = 0
    for pid in kids:
        try:
            kids_rss += procfs.status_kb(pid).get("VmRSS", 0)
        except OSError:
            pass
    chrome_pss = 0
    for pid in procfs.descendants(os.getpid(), table):
        if "chrom" in table[pid][1] or "headless" in table[pid][1]:
            chrome_pss += procfs.pss_kb(pid).get("Pss", 0)
    try:
        fds = len(os.listdir(f"/proc/{web.pid}/fd"))
    except OSError:
        fds = None
    row = {"t_s": round(t, 1), "rss_mib": _mib(st.get("VmRSS")), "hwm_mib": _mib(st.get("VmHWM")),
           "rss_anon_mib": _mib(st.get("RssAnon")), "rss_file_mib": _mib(st.get("RssFile")),
           "pss_mib": _mib(pss.get("Pss")), "pss_anon_mib": _mib(pss.get("Pss_Anon")),
           "cpu_s": round(procfs.cpu_s(web.pid), 2), "threads": st.get("Threads"), "fds": fds,
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
