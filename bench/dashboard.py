"""The dashboard's server-side cost with one browser watching, and a baseline checkout to
set it (and the statistics read) beside.

``baseline_tree(rev)`` extracts ``ratelimit/`` and ``webui/`` of a git revision into a
temporary directory (with this checkout's vendored chart library, which git does not
hold), so the same run can start the old code next to the new.  ``server_cpu`` starts a
dashboard server (a command that prints ``serving URL``), opens its page in headless
Chromium (Playwright; without it, a client that reads the live stream), lets it warm
up, and measures the server process's CPU time (user + system, its threads and the
children it waited for) over a window: the share of one core it keeps busy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from ratelimit.kernel.proc import stop

from . import procfs
from .common import REPO, BenchError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SIDE = REPO / "bench" / "side.py"


def baseline_tree(rev: str) -> Path | None:
    """``ratelimit/`` and ``webui/`` of ``rev`` in a new temporary directory, or None when git
    cannot give them (not a git checkout, unknown revision).  The caller removes it."""
    out = Path(tempfile.mkdtemp(prefix="rlbench-baseline-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "ratelimit", "webui"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        return None
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True, capture_output=True)
    vendor = REPO / "webui" / "static" / "vendor"
    if vendor.is_dir():
        shutil.copytree(vendor, out / "webui" / "static" / "vendor", dirs_exist_ok=True)
    return out


def env_for(tree: Path, **extra) -> dict:
    """The environment that makes ``python`` import ratelimit and webui from ``tree`` (run it
    with ``cwd=tree`` too: ``python -m`` looks in the working directory first)."""
    return {**os.environ, "PYTHONPATH": str(tree), **extra}


class _Browser:
    """One headless Chromium for all measurements of a run (None: Playwright is missing)."""

    def __init__(self):
        self._pw = self._browser = None
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            return
        if not os.path.exists(CHROMIUM):
            return
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

    @property
    def real(self) -> bool:
        return self._browser is not None

    def open(self, url: str):
        if self._browser is None:
            return _StreamReader(url)
        page = self._browser.new_page(viewport={"width": 1400, "height": 1250})
        page.goto(url)
        return page

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._pw.stop()


class _StreamReader:
    """Without a browser: a client that keeps the live stream open and reads it."""

    def __init__(self, url: str):
        self._stop = False
        self._resp = urllib.request.urlopen(url + "api/stream", timeout=30)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while not self._stop and self._resp.readline():
                pass
        except OSError:
            pass

    def close(self):
        self._stop = True
        self._resp.close()


def browser():
    return _Browser()


def server_cpu(argv: list[str], env: dict, client: _Browser, *, warmup_s: float, window_s: float) -> dict:
    """Start the server ``argv``, watch it with ``client`` for ``warmup_s`` + ``window_s``;
    the server's CPU over the window as a share of one core."""
    proc = subprocess.Popen(argv, env=env, cwd=env["PYTHONPATH"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    page = None
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(r"serving (http://[0-9.:]+/)", line)
            url = m.group(1) if m else None
        if url is None:
            raise BenchError(f"{' '.join(argv[:4])} ... did not start serving")
        page = client.open(url)
        # the page's first load (its files, the first snapshot) before the window; fixed, for the
        # page's state is the web UI's (and the baseline's): on a slow machine a first load that
        # spills into the window adds to the share, it does not hide one
        time.sleep(warmup_s)
        c0, t0 = procfs.cpu_s(proc.pid), time.monotonic()
        time.sleep(window_s)  # the window
        cpu, wall = procfs.cpu_s(proc.pid) - c0, time.monotonic() - t0
        return {"cpu_s": cpu, "wall_s": wall, "core_share": cpu / wall}
    finally:
        if page is not None:
            page.close()
        stop(proc, 15)


def webui_argv(netns: str, interface: str) -> list[str]:
    """The dashboard of the tree on the path: ``webui`` is its source folder's name in every
    revision (installed, it is ``ratelimit.webui``), so a baseline's runs the same way."""
    return [sys.executable, "-m", "webui", "--interface", f"{netns}/{interface}", "--listen", "127.0.0.1:0",
            "--read-only", "--interval", "1"]


def synthetic_argv(links: int, fmt: str) -> list[str]:
    return [sys.executable, str(SIDE), "serve-synthetic", str(links), fmt]


class BaselineStats:
    """``bench/side.py stats`` under the baseline tree: one timed ``service.statistics`` per call."""

    def __init__(self, tree: Path, netns: str, interface: str, env_extra: dict):
        self.proc = subprocess.Popen([sys.executable, str(SIDE), "stats", netns, interface],
                                     env=env_for(tree, **env_extra), cwd=str(tree), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __call__(self) -> dict:
        import json
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"the baseline's statistics worker stopped: {self.proc.stderr.read()[-400:]}")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
