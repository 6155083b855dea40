"""What a cohort that grows costs over an installed two-cohort plan: when free handles can
hold it (make-before-break, the other cohort untouched) and when they cannot (a near-full
plan: removed and rebuilt, its flows without links meanwhile).  Each case applies the plan,
applies it with cohort ``a`` grown, then a fresh apply of the grown plan for comparison.
Namespace ``rlnr``, a veth ``lan0``; both directions shaped (the IFB too), so each device
holds hosts x 1,000 ports links.  ``python -m bench.growth`` (a few minutes, root)."""
import json
import subprocess
import sys
import tempfile
import time

NS = "rlnr"

def sh(*a, check=True):
    return subprocess.run(a, check=check, capture_output=True, text=True)

def scenario(sizes):
    text = ""
    for k, (name, hosts) in enumerate(sizes):
        third = 0 if name == "a" else 1
        text += (f'[cohort.{name}]\ndescription = "x"\nhosts = "198.18.{third}.2-198.18.{third}.{1 + hosts}"\n'
                 f'ports = "10000-10999"\nper = "port"\nprofile = "modem-28k8"\ndelay = "0ms"\n\n')
    f = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    f.write(text)
    f.close()
    return f.name

def apply(path):
    t = time.monotonic()
    r = sh(sys.executable, "-m", "ratelimit", "--netns", NS, "--if", "lan0", "--scenario", path, check=False)
    return time.monotonic() - t, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-2:]

def case(label, before, after):
    sh("ip", "netns", "add", NS)
    try:
        sh("ip", "-n", NS, "link", "add", "lan0", "type", "veth", "peer", "name", "peer0")
        sh("ip", "-n", NS, "link", "set", "lan0", "up"); sh("ip", "-n", NS, "link", "set", "peer0", "up")
        t0 = apply(scenario(before))
        t1 = apply(scenario(after))
        sh(sys.executable, "-m", "ratelimit", "--netns", NS, "--if", "lan0", "--clean")
        t2 = apply(scenario(after))
        print(json.dumps({"case": label, "before": before, "after": after, "fresh_before_s": round(t0[0], 2),
                          "over_s": round(t1[0], 2), "over_out": t1[2], "fresh_after_s": round(t2[0], 2),
                          "rc": [t0[1], t1[1], t2[1]]}), flush=True)
    finally:
        sh("ip", "netns", "del", NS, check=False)

if __name__ == "__main__":
    case("room: 20,000 + 20,000, a grows to 22,000", [("a", 20), ("b", 20)], [("a", 22), ("b", 20)])
    case("no room: 30,000 + 30,000, a grows to 32,000", [("a", 30), ("b", 30)], [("a", 32), ("b", 30)])
