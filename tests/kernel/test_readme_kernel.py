"""The README's commands for a router and for the dashboard, run as written (tests/readmekit.py):
in the full-kernel VM, where the profiles' delays have netem.

- A ``router`` line runs in a namespace of the test's own with an ``eth0`` of its own (a veth),
  through ``ip netns exec``, with a private state directory; each must succeed, one after
  the other, and the last ``--clean`` leaves the device as it was.
- The ``dashboard`` lines run with a lab name of the test's own, and the dashboard on a port of
  its own: its ``/api/status`` shows the lab's link.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request

import pytest

from readmekit import ROOT, commands


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "ratelimit", line
    return [sys.executable, "-m", "ratelimit", *words[1:]]


def _qdiscs(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "-d", "qdisc", "show"], capture_output=True, text=True, check=True).stdout


@pytest.mark.kernel("netem", "police", "ifb", "mirred")
def test_the_readme_router_commands_run_one_after_the_other(netns, tmp_path):
    ns = netns("rdm")
    for argv in (["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"],
                 ["ip", "-n", ns, "link", "set", "eth0", "up"], ["ip", "-n", ns, "link", "set", "eth1", "up"]):
        subprocess.run(argv, check=True, capture_output=True)
    before = _qdiscs(ns)
    env = {**os.environ, "RATELIMIT_STATE_DIR": str(tmp_path / "state")}
    lines = commands("router")
    assert lines[-1] != "ratelimit --if eth0 --clean"  # the last block applies: clean after it
    for line in [*lines, "ratelimit --if eth0 --clean"]:
        r = subprocess.run(["ip", "netns", "exec", ns, *_argv(line)], env=env, capture_output=True, text=True,
                           timeout=600, cwd=ROOT)
        assert r.returncode == 0, f"{line}: exit {r.returncode}: {r.stderr.strip()[-600:]}"
        if "--stats --json" in line:
            assert json.loads(r.stdout)["applied"] is not None
    assert _qdiscs(ns) == before


@pytest.mark.kernel("netem")
def test_the_readme_dashboard_commands_show_the_labs_link(tmp_path):
    up, web = commands("dashboard")
    name = f"rmd{os.getpid() % 100000}"
    env = {**os.environ, "RATELIMIT_STATE_DIR": str(tmp_path / "state")}
    up = up.replace("ratelimit lab up", f"ratelimit lab up --name {name}", 1)
    web = web.replace("rl-lab-", f"rl-{name}-") + " --listen 127.0.0.1:0 --read-only"
    r = subprocess.run(_argv(up), env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, f"{up}: {r.stderr.strip()[-600:]}"
    proc = None
    try:
        proc = subprocess.Popen(_argv(web), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        deadline = time.monotonic() + 300
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"{web}: ended: {proc.stderr.read()[-600:]}"
            if "serving " in line:
                url = line.split("serving ", 1)[1].split()[0]
        assert url, f"{web}: said nothing of where it serves"
        for _ in range(100):  # its first poll
            status = json.load(urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=30))
            if status.get("applied"):
                break
            time.sleep(0.2)
        # 4 clients, an IPv4 and an IPv6 address each, one link per host each way
        assert status["applied"]["profile"] == "modem-28k8" and status["applied"]["links"] == 16, status["applied"]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        subprocess.run(_argv(f"ratelimit lab down --name {name}"), env=env, capture_output=True, timeout=300, cwd=ROOT)
