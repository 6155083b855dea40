"""State you can trust, against the host kernel in throwaway namespaces (rlhd-*): a stale
or damaged record never makes ratelimit touch what it did not install."""

import json
import os
import subprocess
import sys

import pytest

from ratelimit import service
from ratelimit.errors import ConflictError
from ratelimit.service import readout
from ratelimit.state import fingerprint, records
from tcdump import tc_dump

pytestmark = pytest.mark.netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVS = ("rlh0", "rl-rlh0")


def tc(ns, *argv):
    subprocess.run(["tc", "-n", ns, *argv], check=True, capture_output=True)


def request(ns, **kw):
    args = dict(hosts="198.18.1.2", ports="5000-5009", mode="shape", direction="both", rate="1mbit")
    args.update(kw)
    return service.make_request("rlh0", netns=ns, **args)


def cli(ns, *argv):
    return subprocess.run([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def user_htb_52(ns):
    """What a user's own shaping might be: an htb with ratelimit's handle, a class, a filter."""
    tc(ns, "qdisc", "add", "dev", "rlh0", "root", "handle", "52:", "htb", "default", "1")
    tc(ns, "class", "add", "dev", "rlh0", "parent", "52:", "classid", "52:1", "htb", "rate", "5mbit")
    tc(ns, "filter", "add", "dev", "rlh0", "parent", "52:", "prio", "1", "protocol", "ip", "u32",
       "match", "ip", "dst", "198.18.9.9/32", "classid", "52:1")


def test_the_record_carries_the_fingerprint_of_what_was_installed(rlhd):
    ns = rlhd()
    plan = service.apply(request(ns))
    record = records.load(ns, "rlh0")
    assert record.version == records.VERSION and record.request == plan.request
    assert record.fingerprint == fingerprint.of_plan(plan)  # read from the kernel, as the plan says it should be


@pytest.mark.parametrize("foreign", ["htb-52", "tbf-52"])
def test_a_stale_record_and_a_foreign_root_qdisc_refuse_clean_and_apply(rlhd, foreign):
    ns = rlhd()
    service.apply(request(ns, direction="dest"))
    # someone removes ratelimit's tree behind its back and puts their own there, same handle
    tc(ns, "qdisc", "del", "dev", "rlh0", "root")
    if foreign == "htb-52":
        user_htb_52(ns)
    else:
        tc(ns, "qdisc", "add", "dev", "rlh0", "root", "handle", "52:", "tbf", "rate", "1mbit", "burst", "10kb",
           "latency", "50ms")
    before = tc_dump(ns, *DEVS)
    with pytest.raises(ConflictError) as info:
        service.clean("rlh0", ns)
    assert "--interface: rlh0 does not hold what ratelimit recorded (" in str(info.value)
    assert "nothing changed (use --force to replace whatever is there)" in str(info.value)
    with pytest.raises(ConflictError, match="does not hold what ratelimit recorded"):
        service.apply(request(ns, direction="dest", rate="2mbit"))
    for argv in (["--clean"], ["-h", "198.18.1.2", "-p", "5000", "--mode", "shape"]):
        result = cli(ns, *argv)
        assert result.returncode == 6 and result.stderr.count("\n") == 1, result.stderr
        assert "does not hold what ratelimit recorded" in result.stderr
    assert tc_dump(ns, *DEVS) == before
    assert records.load(ns, "rlh0") is not None  # the record is kept: the user decides


def test_no_record_and_a_user_htb_52_is_left_alone(rlhd):
    ns = rlhd()
    user_htb_52(ns)
    before = tc_dump(ns, *DEVS)
    with pytest.raises(ConflictError, match=r"root qdisc ratelimit did not install \(htb 52:\); left alone"):
        service.clean("rlh0", ns)
    with pytest.raises(ConflictError, match=r"has a root qdisc ratelimit did not install \(htb 52:\); use --force"):
        service.apply(request(ns))
    assert tc_dump(ns, *DEVS) == before
    assert readout.status("rlh0", ns) is None


def test_a_record_whose_tree_is_gone_is_stale_not_an_error(rlhd):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    service.apply(request(ns))
    tc(ns, "qdisc", "del", "dev", "rlh0", "root")
    tc(ns, "qdisc", "del", "dev", "rlh0", "ingress")
    subprocess.run(["ip", "-n", ns, "link", "del", "rl-rlh0"], check=True)
    assert readout.status("rlh0", ns) is None
    assert service.clean("rlh0", ns) is False and records.load(ns, "rlh0") is None
    assert tc_dump(ns, *DEVS) == pristine
    service.apply(request(ns))
    assert readout.status("rlh0", ns)["flows"] == 20


@pytest.mark.parametrize("text,fragment", [
    ("{\"version\": 2, \"request\": {\"interf", "is not valid JSON"),
    ("{\"version\": 7, \"request\": null}", "version 7 is not one this ratelimit reads (1, 2)"),
])
def test_a_damaged_record_is_reported_and_changes_nothing(rlhd, text, fragment):
    ns = rlhd()
    service.apply(request(ns))
    before = tc_dump(ns, *DEVS)
    path = records.record_path(ns, "rlh0")
    path.write_text(text)
    for argv in (["--list"], ["--stats"], ["--clean"], ["-h", "198.18.1.2", "-p", "6000", "--mode", "shape"]):
        result = cli(ns, *argv)
        assert result.returncode == 8, (argv, result.stderr)
        assert result.stderr.startswith(f"ratelimit: state file {path}: ") and fragment in result.stderr
        assert result.stderr.rstrip("\n").endswith(f"ratelimit --clean --force --interface rlh0 --netns {ns}")
        assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert tc_dump(ns, *DEVS) == before
    # the way out the message names: remove whatever is there
    result = cli(ns, "--clean", "--force")
    assert result.returncode == 0, result.stderr
    assert records.load(ns, "rlh0") is None
    assert "qdisc htb" not in subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "rlh0"],
                                             capture_output=True, text=True).stdout


def test_a_version_1_record_is_still_ours(rlhd):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    plan = service.apply(request(ns))
    path = records.record_path(ns, "rlh0")
    path.write_text(json.dumps(records.to_json(plan.request)))  # as the release before wrote it
    assert readout.status("rlh0", ns)["flows"] == 20
    assert service.clean("rlh0", ns) is True
    assert tc_dump(ns, *DEVS) == pristine


def test_a_version_1_record_and_a_foreign_tree_refuse(rlhd):
    ns = rlhd()
    plan = service.apply(request(ns, direction="dest"))
    records.record_path(ns, "rlh0").write_text(json.dumps(records.to_json(plan.request)))
    tc(ns, "qdisc", "del", "dev", "rlh0", "root")
    user_htb_52(ns)
    before = tc_dump(ns, *DEVS)
    with pytest.raises(ConflictError, match="rlh0 has 1 HTB classes where ratelimit recorded 13"):
        service.clean("rlh0", ns)
    assert tc_dump(ns, *DEVS) == before


def test_a_foreign_ingress_qdisc_beside_ours_is_left_alone(rlhd):
    ns = rlhd()
    service.apply(request(ns, direction="dest"))
    tc(ns, "qdisc", "add", "dev", "rlh0", "handle", "ffff:", "ingress")
    assert readout.status("rlh0", ns)["flows"] == 10
    assert service.clean("rlh0", ns) is True
    out = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "rlh0"], capture_output=True, text=True).stdout
    assert "qdisc ingress ffff:" in out and "htb" not in out
