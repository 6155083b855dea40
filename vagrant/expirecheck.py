"""In a router VM of the Vagrant lab: a plan applied ``--for`` outlives ``kill -9`` of every
ratelimit process, and is still removed on time.

    sudo /opt/ratelimit/bin/python /vagrant/vagrant/expirecheck.py --interface eth1 --host 198.18.1.11 --for 45

1. removes the interface's plan (``--clean``), so that the plan applied next ends by being
   removed: what is timed is the watcher, not a plan put back (an apply of its own, seconds
   for the lab's 2,000 links in a software-emulated VM);
2. applies ``--profile modem-28k8 --for SECONDS`` to ``--host``, with the ``ratelimit``
   installed here (``RL_RATELIMIT``, as for provision/router.sh);
3. at once sends SIGKILL to every process whose command is ratelimit's (this script
   aside): the plan's watcher, and the dashboard (``ratelimit web``);
4. waits for systemd to start the watcher's unit again (``service.expiry.unit_name``), and
   for the watcher to hold its lock;
5. reads the record every 20 ms until there is none, then looks for ratelimit's qdisc.

It prints one JSON object: the processes killed, the unit's state and ``NRestarts`` after
the kill, how long before the end the kill came, how long systemd took to start the watcher
again (``restarted_s``) and the watcher to hold its lock (``watching_s``),
how long after the end the plan was gone (``lag_s``), and whether the kernel has none of it
left.  tests/test_vagrant_lab.py (stage "expire") asserts on it.  Exit status: 0, or 1 with a
one-line reason.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from ratelimit.service import expiry
from ratelimit.state import records

RATELIMIT = os.environ.get("RL_RATELIMIT", "/usr/local/bin/ratelimit")  # router.sh links it to /opt/ratelimit's
POLL_S = 0.02


def ratelimit_processes() -> dict[int, list[str]]:
    """Every process running ratelimit (``ratelimit ...`` or ``python -m ratelimit ...``),
    by pid, but this one and its ancestors."""
    mine, pid = set(), os.getpid()
    while pid > 1:
        mine.add(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if any(os.path.basename(a) == "ratelimit" for a in argv[:2]) or argv[1:3] == ["-m", "ratelimit"]:
            out[int(entry)] = argv
    return out


def unit_state(unit: str) -> dict:
    r = subprocess.run(["systemctl", "show", "-p", "ActiveState,SubState,NRestarts,MainPID", unit],
                       capture_output=True, text=True, timeout=30)
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def check(interface: str, host: str, seconds: int, profile: str) -> dict:
    cleaned = subprocess.run([RATELIMIT, "--if", interface, "--clean"], capture_output=True, text=True, timeout=300)
    if cleaned.returncode != 0:
        raise SystemExit(f"expirecheck: --clean failed: {cleaned.stderr.strip()[-300:]}")
    applied = subprocess.run([RATELIMIT, "--if", interface, "-h", host, "--per", "host", "--profile", profile,
                              "--for", f"{seconds}s"], capture_output=True, text=True, timeout=120)
    if applied.returncode != 0:
        raise SystemExit(f"expirecheck: the apply --for {seconds}s failed: {applied.stderr.strip()[-300:]}")
    end_s = records.load(None, interface).request.expires_ms / 1000
    killed = ratelimit_processes()
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    killed_at = time.time()
    unit = expiry.unit_name(None, interface)
    restarted_s = watching_s = None  # after the kill: systemd started the unit again; its watcher holds its lock
    state = unit_state(unit)
    while watching_s is None and time.time() < end_s + 10:
        if restarted_s is None and state.get("ActiveState") == "active" and int(state.get("NRestarts") or 0) >= 1:
            restarted_s, restarted = time.time() - killed_at, state
        if restarted_s is not None and expiry.alive(None, interface):
            watching_s = time.time() - killed_at
        time.sleep(POLL_S)
        state = state if restarted_s is not None else unit_state(unit)
    while records.load(None, interface) is not None and time.time() < end_s + 10:
        time.sleep(POLL_S)
    gone = time.time()
    qdiscs = subprocess.run(["tc", "qdisc", "show", "dev", interface], capture_output=True, text=True).stdout
    return {"interface": interface, "host": host, "profile": profile, "for_s": seconds,
            "killed": {str(pid): " ".join(argv)[:200] for pid, argv in killed.items()},
            "unit": unit, "unit_after_kill": restarted if restarted_s is not None else state,
            "killed_before_end_s": round(end_s - killed_at, 3),
            "restarted_s": restarted_s and round(restarted_s, 3), "watching_s": watching_s and round(watching_s, 3),
            "lag_s": round(gone - end_s, 3),
            "removed": records.load(None, interface) is None and " htb " not in qdiscs, "qdiscs": qdiscs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interface", default="eth1")
    ap.add_argument("--host", required=True, help="the client whose link is applied --for")
    ap.add_argument("--for", dest="seconds", type=int, default=45, help="the plan's duration, s (default 45)")
    ap.add_argument("--profile", default="modem-28k8", help="the plan's profile (default modem-28k8)")
    args = ap.parse_args(argv)
    print(json.dumps(check(args.interface, args.host, args.seconds, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
