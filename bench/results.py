"""Benchmark results: one JSON file per (benchmark, where, quick), with the machine and
the commit they measured."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .common import REPO

RESULTS_DIR = REPO / "bench" / "results"


def commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it ("" outside git)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return ""
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def machine() -> dict:
    """Where a result was measured."""
    def first_line(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=10)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return ""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal"))) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    return {"kernel": platform.release(), "cpus": os.cpu_count(), "cpu": cpu, "mem_bytes": mem,
            "loadavg": loadavg(),
            "python": platform.python_version(), "tc": first_line(["tc", "-V"]),
            "in_vm": os.environ.get("RATELIMIT_IN_VM") == "1"}


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def where() -> str:
    return "vm" if os.environ.get("RATELIMIT_IN_VM") == "1" else "host"


def result_path(name: str, place: str, quick: bool, outdir: Path | str = RESULTS_DIR) -> Path:
    return Path(outdir) / f"{name}-{place}{'-quick' if quick else ''}.json"


def new_result(name: str, quick: bool, command: Sequence[str] | None = None) -> dict:
    return {"benchmark": name, "where": where(), "quick": quick,
            "command": " ".join(command or ["python", "-m", "bench", *sys.argv[1:]]),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "commit": commit(),
            "machine": machine(), "rows": [], "notes": []}


def save(doc: dict, outdir: Path | str = RESULTS_DIR) -> Path:
    """Write ``doc`` to its results file (atomically) and return the path."""
    doc["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    path = result_path(doc["benchmark"], doc["where"], doc["quick"], outdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def load_results(outdir: Path | str = RESULTS_DIR, *, quick: bool | None = None) -> dict:
    """``{(name, where): doc}`` from ``outdir``.  With ``quick=None`` a full run's
    file wins over a quick one's; True/False take only that kind."""
    out: dict = {}
    for path in sorted(Path(outdir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or "benchmark" not in doc:
            continue
        if quick is not None and bool(doc.get("quick")) != quick:
            continue
        key = (doc["benchmark"], doc.get("where", "host"))
        if key in out and not out[key].get("quick") and doc.get("quick"):
            continue
        out[key] = doc
    return out


