"""save, a simulated reboot, restore: the same links again (rlhd-* namespaces)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ratelimit import service
from ratelimit.state import records
from tcdump import tc_dump

pytestmark = pytest.mark.netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVS = ("rlh0", "rl-rlh0")


def ratelimit(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "ratelimit", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env)


def reboot(namespaces, state_dir):
    """What a reboot takes: every qdisc and IFB device, and /run (the state directory)."""
    for ns in namespaces:
        for argv in (["tc", "-n", ns, "qdisc", "del", "dev", "rlh0", "root"],
                     ["tc", "-n", ns, "qdisc", "del", "dev", "rlh0", "ingress"],
                     ["ip", "-n", ns, "link", "del", "rl-rlh0"]):
            subprocess.run(argv, capture_output=True)
    shutil.rmtree(state_dir)


def test_save_then_reboot_then_restore_brings_back_the_same_plans(rlhd, tmp_path, monkeypatch):
    monkeypatch.setenv("RATELIMIT_CONFIG_DIR", str(tmp_path / "etc"))
    one, two = rlhd(), rlhd()
    service.apply(service.make_request("rlh0", netns=one, hosts="198.18.1.2,2001:db8::2", ports="5000-5099",
                                       mode="shape", direction="both", rate="1mbit", bandwidth="200mbit"))
    service.apply(service.make_request("rlh0", netns=two, hosts="198.18.2.2,198.18.2.3,198.18.2.4", ports="40000-40999",
                                       mode="shape", direction="dest", per="host", link="atm", rate="2mbit",
                                       queue="30ms"))
    before = {ns: tc_dump(ns, *DEVS) for ns in (one, two)}
    lists = {ns: ratelimit("--netns", ns, "--if", "rlh0", "--list").stdout for ns in (one, two)}

    saved = ratelimit("save")
    assert saved.returncode == 0, saved.stderr
    path = tmp_path / "etc" / "links.json"
    assert saved.stdout.splitlines()[-1] == f"saved 2 link configuration(s) to {path}"
    assert [(link["netns"], link["interface"]) for link in json.loads(path.read_text())["links"]] == \
        sorted([(one, "rlh0"), (two, "rlh0")])

    reboot((one, two), os.environ["RATELIMIT_STATE_DIR"])
    assert all(tc_dump(ns, *DEVS) != before[ns] for ns in (one, two))
    assert records.targets() == []

    restored = ratelimit("restore")
    assert restored.returncode == 0, restored.stderr
    assert restored.stderr == "" and len(restored.stdout.splitlines()) == 2
    for ns in (one, two):
        assert tc_dump(ns, *DEVS) == before[ns]
        assert ratelimit("--netns", ns, "--if", "rlh0", "--list").stdout == lists[ns]


def test_restore_goes_on_past_a_link_it_cannot_apply(rlhd, tmp_path):
    one = rlhd()
    gone = rlhd()
    service.apply(service.make_request("rlh0", netns=one, hosts="198.18.1.2", ports="5000-5009", mode="shape",
                                       direction="dest"))
    service.apply(service.make_request("rlh0", netns=gone, hosts="198.18.1.2", ports="5000-5009", mode="shape",
                                       direction="dest"))
    before = tc_dump(one, *DEVS)
    path = tmp_path / "links.json"
    assert ratelimit("save", str(path)).returncode == 0
    subprocess.run(["ip", "netns", "del", gone], check=True)  # its namespace does not come back after the reboot
    reboot([one], os.environ["RATELIMIT_STATE_DIR"])
    restored = ratelimit("restore", str(path))
    assert restored.returncode == 3
    assert restored.stderr == f"ratelimit: {gone}/rlh0: not restored (--netns: '{gone}' does not exist " \
                              "(see: ip netns list))\n"
    assert tc_dump(one, *DEVS) == before
