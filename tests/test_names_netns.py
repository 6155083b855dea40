"""Hostile names through a real --dry-run script, run in a throwaway namespace."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_dry_run_script_of_hostile_names_runs_nothing_extra(rlhd, tmp_path):
    # valid names for the kernel and for ip netns, each full of shell syntax
    dev = "x;touch${IFS}P"  # 14 bytes
    ns = rlhd("$(touch${IFS}PWNED)`touch${IFS}PWNED2`;touch${IFS}PWNED3", dev=dev)
    cli = [sys.executable, "-m", "ratelimit", "--netns", ns, "--if", dev, "-h", "198.18.1.2", "-p", "5000-5003",
           "--mode", "shape"]
    dry = subprocess.run(cli + ["--dry-run"], capture_output=True, text=True, cwd=ROOT)
    assert dry.returncode == 0, dry.stderr
    script = tmp_path / "plan.sh"
    script.write_text(dry.stdout)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    work = tmp_path / "cwd"
    work.mkdir()
    run = subprocess.run(["sh", str(script)], capture_output=True, text=True, cwd=work)
    assert run.returncode == 0, run.stderr
    assert sorted(os.listdir(work)) == []  # no P, PWNED, PWNED2, PWNED3
    qdiscs = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
    assert "qdisc htb 52: root" in qdiscs and "qdisc ingress ffff:" in qdiscs
    classes = subprocess.run(["tc", "-n", ns, "class", "show", "dev", dev], capture_output=True, text=True).stdout
    assert len(classes.splitlines()) == 3 + 4  # pool, group, group root and one class per port: the whole plan ran
    links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True, text=True).stdout
    assert "rl-x;to54560d0c" in links
