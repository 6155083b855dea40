"""``python -m bench fleet``: what a fleet apply costs against one router applying its share.

Three routers (``fleetlab``: namespaces, each with its own sshd, ansible-playbook over SSH
from a controller namespace) take a scenario of 10,008 links, 3,336 per router.  Measured
side by side in one run, ``REPEATS`` times each, medians reported:

- the fleet: ``playbooks/apply.yml`` from nothing (partition, stage everywhere, commit
  everywhere), wall time of ansible-playbook;
- one router: ``ratelimit`` applying its own share on its own, from nothing, wall time of
  the command (its Python start-up included, as the module's is);
- the commit's skew: from the first router's commit starting to the last's (``started_at``
  of the links module; one clock, the routers share a machine), and the same for the ends;
- a second run with nothing to change, wall time;
- a change (every link's rate): the fleet again, staged beside and committed;
- Ansible's own skew, to check the commit's: the same spread for a task that only reads
  the clock on each router (``CLOCK_PLAY``), and that play's wall time (Ansible's floor);
- where a fleet run's time goes: until the first stage starts (ansible-playbook's start and
  the partition), from there to the last commit's end, and after it (the report).

Each fleet measurement twice: an SSH connection per task (as the fault tests run, so
that a stopped sshd is unreachable), and Ansible's default of one connection a router
kept open between tasks (ControlPersist).

Not in ``all``: it needs ansible-core and openssh-server (``.ci/install``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import say
from .fleetlab import Fleet, ROUTERS, report, sh
from .results import RESULTS_DIR, new_result, save

NAME = "fleet"
CONNECTIONS = {False: "a connection per task", True: "kept connections"}
REPEATS = 3
PORTS = (1000, 1833)  # 834 ports x 4 hosts = 3,336 links a router, 10,008 in the fleet
SCENARIO = """
description = "10,008 links over three routers"
[cohort.lines]
description = "slow lines, four hosts behind each router, a link per (host, port)"
hosts = ["198.18.1.2-198.18.1.5", "198.18.2.2-198.18.2.5", "198.18.3.2-198.18.3.5"]
ports = "{lo}-{hi}"
per = "port"
rate = "{rate}"
"""
OPTIONS = {"mode": "shape", "direction": "dest", "bandwidth": "3gbit"}
CLOCK_PLAY = """
- name: Read each router's clock in one task
  hosts: routers
  gather_facts: false
  tasks:
    - name: Read the clock
      ansible.builtin.command: "{{ ansible_python_interpreter }} -c 'import time; print(time.time())'"
      register: clock
      changed_when: false
    - name: Write the readings
      ansible.builtin.copy:
        content: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['clock', 'stdout']))) | to_json }}"
        dest: "{{ ratelimit_report }}"
        mode: "0644"
      delegate_to: localhost
      run_once: true
"""


def _scenario(work: Path, rate: str) -> Path:
    path = work / f"fleet-{rate}.toml"
    path.write_text(SCENARIO.format(lo=PORTS[0], hi=PORTS[1], rate=rate))
    return path


def _clean(fleet: Fleet) -> None:
    for r in ROUTERS:
        sh("ip", "netns", "exec", fleet.ns(r), sys.executable, "-m", "ratelimit", "--if", "r0", "--clean",
           env=dict(os.environ, RATELIMIT_STATE_DIR=str(fleet.state_dir(r))))


def _fleet_run(fleet: Fleet, path: Path, persist: bool) -> dict:
    t0, began = time.monotonic(), time.time()
    run = fleet.playbook(scenario=path, options=OPTIONS, persist=persist)
    wall, ended = time.monotonic() - t0, time.time()
    if run.returncode != 0:
        raise RuntimeError(f"the playbook failed: {run.stdout[-2000:]}")
    out = report(fleet)
    commits = [out[r]["commit"] for r in ROUTERS]
    stages = [out[r]["stage"] for r in ROUTERS]
    return {"wall_s": round(wall, 3),
            "until_the_stage_s": round(min(s["started_at"] for s in stages) - began, 3),
            "stage_to_commit_end_s": round(max(c["finished_at"] for c in commits) - min(s["started_at"] for s in stages),
                                           3),
            "after_the_commit_s": round(ended - max(c["finished_at"] for c in commits), 3),
            "stage_s": {r: round(out[r]["stage"]["seconds"], 3) for r in ROUTERS},
            "commit_s": {r: round(out[r]["commit"]["seconds"], 3) for r in ROUTERS},
            "commit_start_skew_s": round(max(c["started_at"] for c in commits) - min(c["started_at"] for c in commits), 3),
            "commit_end_skew_s": round(max(c["finished_at"] for c in commits) - min(c["finished_at"] for c in commits), 3),
            "how": {r: (out[r]["stage"]["how"], out[r]["commit"]["how"]) for r in ROUTERS}}


def _clock_skew(fleet: Fleet, play: Path, persist: bool) -> dict:
    t0 = time.monotonic()
    run = fleet.playbook(persist=persist, playbook=play)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        raise RuntimeError(f"the clock playbook failed: {run.stdout[-2000:]}")
    read = {r: float(t) for r, t in json.loads(fleet.report.read_text()).items()}
    return {"wall_s": round(wall, 3), "readings": read, "skew_s": round(max(read.values()) - min(read.values()), 3)}


def _one_router(fleet: Fleet, rate: str) -> dict:
    argv = ["ip", "netns", "exec", fleet.ns("r1"), sys.executable, "-m", "ratelimit", "--if", "r0", "-h",
            "198.18.1.2-198.18.1.5", "-p", f"{PORTS[0]}-{PORTS[1]}", "-r", rate, "--mode", "shape", "-d", "dest",
            "--bandwidth", "3gbit"]
    t0 = time.monotonic()
    run = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, RATELIMIT_STATE_DIR=str(
        fleet.state_dir("r1"))))
    wall = time.monotonic() - t0
    if run.returncode != 0:
        raise RuntimeError(f"the one-router apply failed: {run.stderr}")
    return {"wall_s": round(wall, 3), "says": run.stdout.strip()}


def measure(outdir=RESULTS_DIR) -> dict:
    doc = new_result(NAME, quick=False)
    with tempfile.TemporaryDirectory(prefix="rl-bench-fleet-") as tmp:
        fleet = Fleet(f"rlfb-{os.getpid()}-", Path(tmp))
        try:
            fleet.build()
            work = Path(tmp)
            slow, other = _scenario(work, "100kbit"), _scenario(work, "120kbit")
            play = work / "clock.yml"
            play.write_text(CLOCK_PLAY)
            rows = {"one router": []}
            for persist in (False, True):
                for what in ("fleet", "nothing to change", "a change", "a clock task"):
                    rows[f"{what}, {CONNECTIONS[persist]}"] = []
            for k in range(REPEATS):
                _clean(fleet)
                rows["one router"].append(_one_router(fleet, "100kbit"))
                for persist in (False, True):
                    _clean(fleet)
                    how = CONNECTIONS[persist]
                    rows[f"fleet, {how}"].append(_fleet_run(fleet, slow, persist))
                    rows[f"nothing to change, {how}"].append(_fleet_run(fleet, slow, persist))
                    rows[f"a change, {how}"].append(_fleet_run(fleet, other, persist))
                    rows[f"a clock task, {how}"].append(_clock_skew(fleet, play, persist))
                say(NAME, f"round {k + 1}: " + ", ".join(f"{what} {runs[-1]['wall_s']} s" for what, runs in rows.items()))
        finally:
            fleet.destroy()
    doc["rows"] = [{"what": what, "runs": runs, "median_wall_s": statistics.median(r["wall_s"] for r in runs)}
                   for what, runs in rows.items()]
    med = {row["what"]: row["median_wall_s"] for row in doc["rows"]}
    doc["summary"] = {"links": 3 * 4 * (PORTS[1] - PORTS[0] + 1), "medians_s": med}
    for how in CONNECTIONS.values():
        switched = rows[f"fleet, {how}"] + rows[f"a change, {how}"]
        doc["summary"][how] = {
            "fleet_over_one_router": round(med[f"fleet, {how}"] / med["one router"], 2),
            "commit_start_skew_s": statistics.median(r["commit_start_skew_s"] for r in switched),
            "commit_end_skew_s": statistics.median(r["commit_end_skew_s"] for r in switched),
            "clock_task_skew_s": statistics.median(r["skew_s"] for r in rows[f"a clock task, {how}"]),
            "until_the_stage_s": statistics.median(r["until_the_stage_s"] for r in rows[f"fleet, {how}"]),
            "stage_to_commit_end_s": statistics.median(r["stage_to_commit_end_s"] for r in rows[f"fleet, {how}"]),
            "after_the_commit_s": statistics.median(r["after_the_commit_s"] for r in rows[f"fleet, {how}"])}
    say(NAME, f"summary: {doc['summary']}")
    return doc


def main(args) -> int:
    outdir = args.out or RESULTS_DIR
    say(NAME, f"wrote {save(measure(outdir), outdir)}")
    return 0
