"""Running httperf (Debian 0.9.0) and reading what it prints.

``parse(text)`` turns httperf's closing report into a dict (missing lines give
missing keys, so a report cut short still parses); ``combine(reports)`` adds
up the reports of several httperf processes run side by side.

``session_argv`` builds the load of the 2000 dial-up experiment: S sessions,
each fetching the same URI C times one after another on one persistent
connection (``--burst-length 1``), started at ``--rate`` sessions per second.
``--hog`` is never used: it binds client ports itself, outside
``ip_local_port_range``, so connections would escape the router's per-port
limits.  httperf waits with select(), so one process handles at most about
1,000 connections (FD_SETSIZE 1,024): spread the sessions over several
processes (client namespaces).
"""

from __future__ import annotations

import re

from .common import BenchError

FD_SAFE = 900  # sessions per httperf process, well under FD_SETSIZE (1024)

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def session_argv(server: str, port: int, uri: str, sessions: int, calls: int, *, rate: float,
                 timeout_s: float = 120.0) -> list[str]:
    """httperf arguments for ``sessions`` sessions of ``calls`` fetches each on one persistent
    connection, started at ``rate`` sessions per second."""
    if sessions < 1 or calls < 1:
        raise BenchError("httperf: at least one session of one call")
    if sessions > FD_SAFE:
        raise BenchError(f"httperf: {sessions} sessions in one process exceed {FD_SAFE} (select() limit)")
    return ["httperf", "--server", server, "--port", str(port), "--uri", uri, f"--wsess={sessions},{calls},0",
            "--burst-length", "1", "--rate", f"{rate:g}", "--timeout", f"{timeout_s:g}"]


def _grab(pattern: str, text: str, cast=float):
    m = re.search(pattern, text, re.MULTILINE)
    return cast(m.group(1)) if m else None


def parse(text: str) -> dict:
    """httperf's report -> numbers.  Keys: connections, requests, replies,
    duration_s, conn_rate, max_concurrent, conn_time_ms{min,avg,max,median,stddev},
    connect_ms, reply_rate{min,avg,max,stddev,samples}, status{1xx..5xx},
    errors{total,client-timo,...}, sessions_ok, sessions_total, session_rate."""
    out: dict = {}
    m = re.search(rf"^Total: connections {_NUM} requests {_NUM} replies {_NUM} test-duration {_NUM} s",
                  text, re.MULTILINE)
    if m:
        out.update(connections=int(float(m.group(1))), requests=int(float(m.group(2))),
                   replies=int(float(m.group(3))), duration_s=float(m.group(4)))
    m = re.search(rf"^Connection rate: {_NUM} conn/s \({_NUM} ms/conn, <={_NUM} concurrent connections\)",
                  text, re.MULTILINE)
    if m:
        out.update(conn_rate=float(m.group(1)), max_concurrent=int(float(m.group(3))))
    m = re.search(rf"^Connection time \[ms\]: min {_NUM} avg {_NUM} max {_NUM} median {_NUM} stddev {_NUM}",
                  text, re.MULTILINE)
    if m:
        out["conn_time_ms"] = dict(zip(("min", "avg", "max", "median", "stddev"), map(float, m.groups())))
    v = _grab(rf"^Connection time \[ms\]: connect {_NUM}", text)
    if v is not None:
        out["connect_ms"] = v
    m = re.search(rf"^Reply rate \[replies/s\]: min {_NUM} avg {_NUM} max {_NUM} stddev {_NUM} \({_NUM} samples\)",
                  text, re.MULTILINE)
    if m:
        out["reply_rate"] = {"min": float(m.group(1)), "avg": float(m.group(2)), "max": float(m.group(3)),
                             "stddev": float(m.group(4)), "samples": int(float(m.group(5)))}
    m = re.search(r"^Reply status: 1xx=(\d+) 2xx=(\d+) 3xx=(\d+) 4xx=(\d+) 5xx=(\d+)", text, re.MULTILINE)
    if m:
        out["status"] = dict(zip(("1xx", "2xx", "3xx", "4xx", "5xx"), map(int, m.groups())))
    errors = {}
    for line in re.findall(r"^Errors: (.*)$", text, re.MULTILINE):
        for key, value in re.findall(r"([a-z-]+) (\d+)", line):
            errors[key] = int(value)
    if errors:
        out["errors"] = errors
    m = re.search(rf"^Session rate \[sess/s\]: min {_NUM} avg {_NUM} max {_NUM} stddev {_NUM} \((\d+)/(\d+)\)",
                  text, re.MULTILINE)
    if m:
        out.update(session_rate=float(m.group(2)), sessions_ok=int(m.group(5)), sessions_total=int(m.group(6)))
    return out


def combine(reports: list[dict]) -> dict:
    """Reports of httperf processes run side by side -> one: counts and rates
    added up, the longest duration, errors summed, connection times averaged
    weighted by connections (min of mins, max of maxes)."""
    out: dict = {"processes": len(reports)}
    for key in ("connections", "requests", "replies", "sessions_ok", "sessions_total", "max_concurrent"):
        vals = [r[key] for r in reports if key in r]
        if vals:
            out[key] = sum(vals)
    for key in ("conn_rate", "session_rate"):
        vals = [r[key] for r in reports if key in r]
        if vals:
            out[key] = sum(vals)
    durations = [r["duration_s"] for r in reports if "duration_s" in r]
    if durations:
        out["duration_s"] = max(durations)
    status: dict = {}
    errors: dict = {}
    for r in reports:
        for k, v in r.get("status", {}).items():
            status[k] = status.get(k, 0) + v
        for k, v in r.get("errors", {}).items():
            errors[k] = errors.get(k, 0) + v
    if status:
        out["status"] = status
    if errors:
        out["errors"] = errors
    timed = [r for r in reports if "conn_time_ms" in r and r.get("connections")]
    if timed:
        n = sum(r["connections"] for r in timed)
        out["conn_time_ms"] = {
            "min": min(r["conn_time_ms"]["min"] for r in timed),
            "avg": sum(r["conn_time_ms"]["avg"] * r["connections"] for r in timed) / n,
            "max": max(r["conn_time_ms"]["max"] for r in timed),
        }
    return out
