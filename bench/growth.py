"""What a cohort that grows costs over an installed two-cohort plan: when free handles can
hold it (make-before-break, the other cohort untouched) and when they cannot (a near-full
plan: removed and rebuilt, its flows without links meanwhile).  Each case applies the plan,
applies it with cohort ``a`` grown, then a fresh apply of the grown plan for comparison.
Namespace ``rlnr``, a veth ``lan0``; both directions shaped (the IFB too), so each device
holds hosts x 1,000 ports links.  ``python -m bench.growth`` (a few minutes, root)."""

import json
import os
import subprocess
import sys
import tempfile
import time

NS = "rlnr"
PORTS = "10000-10999"  # each host's 1,000 ports: a link per (host, port) each way


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _scenario(directory: str, label: str, sizes: list[tuple[str, int]]) -> str:
    """A scenario file of modem-28k8 cohorts, ``hosts`` hosts each (cohort ``a`` in
    198.18.0.0/24, the other in 198.18.1.0/24), without the profile's delays."""
    text = ""
    for name, hosts in sizes:
        third = 0 if name == "a" else 1
        text += (f'[cohort.{name}]\ndescription = "{hosts} hosts x 1,000 ports"\n'
                 f'hosts = "198.18.{third}.2-198.18.{third}.{1 + hosts}"\nports = "{PORTS}"\nper = "port"\n'
                 f'profile = "modem-28k8"\ndelay = "0ms"\n\n')
    path = os.path.join(directory, f"{label}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _apply(path: str) -> tuple[float, int, str]:
    """Apply the scenario: (seconds, exit status, the last line ratelimit printed)."""
    t = time.monotonic()
    r = _run(sys.executable, "-m", "ratelimit", "--netns", NS, "--if", "lan0", "--scenario", path, check=False)
    lines = (r.stdout + r.stderr).strip().splitlines()
    return time.monotonic() - t, r.returncode, lines[-1] if lines else ""


def case(label: str, before: list, after: list) -> dict:
    """Apply ``before``, then ``after`` over it, then ``after`` afresh; the times and how."""
    _run("ip", "netns", "add", NS)
    try:
        _run("ip", "-n", NS, "link", "add", "lan0", "type", "veth", "peer", "name", "peer0")
        for dev in ("lan0", "peer0"):
            _run("ip", "-n", NS, "link", "set", dev, "up")
        with tempfile.TemporaryDirectory() as d:
            first = _apply(_scenario(d, "before", before))
            over = _apply(_scenario(d, "after", after))
            _run(sys.executable, "-m", "ratelimit", "--netns", NS, "--if", "lan0", "--clean")
            fresh = _apply(_scenario(d, "after", after))
        return {"case": label, "before": before, "after": after, "fresh_before_s": round(first[0], 2),
                "over_s": round(over[0], 2), "over_said": over[2], "fresh_after_s": round(fresh[0], 2),
                "exit": [first[1], over[1], fresh[1]]}
    finally:
        _run("ip", "netns", "del", NS, check=False)


if __name__ == "__main__":
    for args in (("room: 20,000 + 20,000, a grows to 22,000", [("a", 20), ("b", 20)], [("a", 22), ("b", 20)]),
                 ("no room: 30,000 + 30,000, a grows to 32,000", [("a", 30), ("b", 30)], [("a", 32), ("b", 30)])):
        print(json.dumps(case(*args)), flush=True)
