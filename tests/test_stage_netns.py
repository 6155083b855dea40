"""Staged applies against the host kernel, in throwaway namespaces (rlhd-*): a stage builds
the new plan beside the installed one while every packet stays on the installed plan
(counted by the kernel); a commit leaves the kernel as a fresh apply of the new request
would; an abort, a refused stage and a killed stage leave it byte for byte as before."""

import os
import signal
import subprocess
import sys
import time

import pytest

from ratelimit import service
from ratelimit.errors import ApplyError, ConflictError
from ratelimit.plan import diff
from ratelimit.service import staging
from ratelimit.state import records
from tcdump import tc_dump

pytestmark = pytest.mark.netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVS = ("rlh0", "rl-rlh0")
HOST = "198.18.1.2"


def request(ns, **kw):
    args = dict(hosts=HOST, ports="5000-5009", mode="shape", direction="both", rate="1mbit")
    args.update(kw)
    return service.make_request("rlh0", netns=ns, **args)


def sh(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True)


def cli(ns, *argv):
    return subprocess.run([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def wired(ns):
    """The namespace sends to HOST out of rlh0 (a neighbour entry stands in for the client)."""
    sh("ip", "-n", ns, "addr", "add", "198.18.1.1/24", "dev", "rlh0")
    mac = sh("ip", "-n", ns, "-br", "link", "show", "rlh1").stdout.split()[2]
    sh("ip", "-n", ns, "neigh", "replace", HOST, "lladdr", mac, "dev", "rlh0", "nud", "permanent")
    return ns


def send(ns, port: int, count: int = 20) -> None:
    code = (f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({count}): s.sendto(b'x' * 200, ('{HOST}', {port}))\n")
    sh("ip", "netns", "exec", ns, sys.executable, "-c", code)
    time.sleep(0.3)  # 20 packets of 228 bytes take 37 ms at 1 Mbit/s to leave their link's queue


def class_packets(ns) -> dict:
    """Packets sent per HTB class of rlh0 ({classid: packets})."""
    out, cls = {}, None
    for line in sh("tc", "-n", ns, "-s", "class", "show", "dev", "rlh0").stdout.splitlines():
        words = line.split()
        if words[:2] == ["class", "htb"]:
            cls = words[2]
        elif words[:1] == ["Sent"] and cls:
            out[cls] = int(words[3])
    return out


def link_packets(ns) -> dict:
    """Packets per (direction, port) of the installed plan's links, as --stats reads them."""
    return {(row["direction"], row["port"]): row["packets"] for row in service_stats(ns)["links"]}


def service_stats(ns):
    from ratelimit.service.readout import statistics
    return statistics("rlh0", ns)


def test_a_stage_carries_no_traffic_until_its_commit(rlhd):
    ns = wired(rlhd())
    service.apply(request(ns))
    before = tc_dump(ns, *DEVS)
    new = request(ns, ports="5000-5019", rate="2mbit")  # grown: built beside in the other generation
    plan = staging.stage(new)
    assert plan.how == "staged" and plan.request.generation == 1 and plan.changed
    assert records.load(ns, "rlh0").staged == plan.request
    staged_classes = {f"{op.classid >> 16:x}:{op.classid & 0xFFFF:x}" for op in plan.changed
                      if type(op).__name__ == "HtbClass"}
    assert staged_classes and tc_dump(ns, *DEVS) != before
    send(ns, 5005)
    counted = class_packets(ns)
    assert link_packets(ns)[("dest", 5005)] == 20  # the installed plan's link took them
    assert sum(counted.get(c, 0) for c in staged_classes) == 0  # and none reached the staged plan
    listed = cli(ns, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "staged (no traffic until --commit): custom link (shape" in listed.stdout and "ports 5000-5019" in \
        listed.stdout
    committed = staging.commit("rlh0", ns)
    assert committed.how == "committed" and records.load(ns, "rlh0").staged is None
    assert records.load(ns, "rlh0").request == committed.request
    send(ns, 5015, 7)
    assert link_packets(ns)[("dest", 5015)] == 7  # the new plan carries traffic now
    switched = tc_dump(ns, *DEVS)
    service.clean("rlh0", ns)
    service.apply(committed.request)
    assert tc_dump(ns, *DEVS) == switched  # what a fresh apply of the committed plan leaves


def test_an_abort_leaves_the_kernel_as_before_the_stage(rlhd):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    for installed in (None, request(ns)):  # over nothing, then over a plan
        if installed is not None:
            service.apply(installed)
        before, record = tc_dump(ns, *DEVS), records.load(ns, "rlh0")
        staging.stage(request(ns, hosts="198.18.1.3,2001:db8::3", per="host", rate="3mbit"))
        assert tc_dump(ns, *DEVS) != before
        assert staging.abort("rlh0", ns).cohorts[0].hosts[0].compressed == "198.18.1.3"
        assert tc_dump(ns, *DEVS) == before
        assert records.load(ns, "rlh0") == record
        assert staging.abort("rlh0", ns) is None  # nothing staged any more
    service.clean("rlh0", ns)
    assert tc_dump(ns, *DEVS) == pristine


def test_a_stage_over_nothing_commits_to_a_fresh_apply(rlhd):
    ns = wired(rlhd())
    pristine = tc_dump(ns, *DEVS)
    req = request(ns)
    staging.stage(req)
    assert records.load(ns, "rlh0").request is None
    send(ns, 5005)
    assert service_stats(ns)["applied"] is None and service_stats(ns)["staged"]["links"] == 20
    assert not any(class_packets(ns).values())  # htb default 0: past every class
    staging.commit("rlh0", ns)
    fresh = tc_dump(ns, *DEVS)
    service.clean("rlh0", ns)
    assert tc_dump(ns, *DEVS) == pristine
    service.apply(req)
    assert tc_dump(ns, *DEVS) == fresh


def test_changes_in_place_stage_as_a_switch_when_it_fits(rlhd):
    ns = rlhd()
    service.apply(request(ns))
    plan = staging.stage(request(ns, rate="2mbit"))  # the same selectors: beside, not in place
    assert plan.request.generation == 1
    switch = diff.staging(service.actions.compiled(request(ns)), plan)
    assert switch.build and switch.roots


def test_a_staged_interface_refuses_an_apply_and_a_second_stage_replaces_the_first(rlhd):
    ns = rlhd()
    service.apply(request(ns))
    first = staging.stage(request(ns, ports="5000-5019"))
    assert staging.stage(request(ns, ports="5000-5019")).how == "already staged"
    with pytest.raises(ConflictError, match=r"has a staged plan \(custom link .*; commit it \(ratelimit --commit "
                                            rf"--interface rlh0 --netns {ns}\) or abort it \(--abort\) first"):
        service.apply(request(ns, rate="5mbit"))
    second = staging.stage(request(ns, ports="6000-6009"))
    assert second.how == "staged" and records.load(ns, "rlh0").staged == second.request != first.request
    staging.commit("rlh0", ns)
    assert [r["port"] for r in service_stats(ns)["links"] if r["direction"] == "dest"] == list(range(6000, 6010))


def test_a_clean_removes_a_staged_plan_too(rlhd):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    service.apply(request(ns))
    staging.stage(request(ns, ports="7000-7099"))
    assert service.clean("rlh0", ns)
    assert tc_dump(ns, *DEVS) == pristine and records.load(ns, "rlh0") is None
    staging.stage(request(ns))  # over nothing
    assert service.clean("rlh0", ns)
    assert tc_dump(ns, *DEVS) == pristine and records.load(ns, "rlh0") is None


def test_a_stage_that_cannot_stand_beside_is_refused_in_one_line(rlhd):
    ns = rlhd()
    service.apply(request(ns))
    before = tc_dump(ns, *DEVS)
    result = cli(ns, "--stage", "-h", HOST, "-p", "5000-5009", "--mode", "shape", "-d", "dest", "-r", "1mbit",
                 "--link", "atm")  # another direction and link layer: only a rebuild does it
    assert result.returncode == 6 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("ratelimit: --stage: ") and "cannot be built beside the plan installed on " \
        "rlh0" in result.stderr
    assert tc_dump(ns, *DEVS) == before and records.load(ns, "rlh0").staged is None


def test_the_command_line_stages_commits_and_aborts(rlhd):
    ns = rlhd()
    assert cli(ns, "-h", HOST, "-p", "5000-5009", "-r", "1mbit", "--mode", "shape").returncode == 0
    staged = cli(ns, "--stage", "-h", HOST, "-p", "5000-5019", "-r", "1mbit", "--mode", "shape")
    assert staged.returncode == 0, staged.stderr
    assert "; staged (" in staged.stdout and f"until: ratelimit --commit --interface rlh0 --netns {ns}" in \
        staged.stdout
    dry = cli(ns, "--dry-run", "--stage", "-h", HOST, "-p", "5000-5019", "-r", "1mbit", "--mode", "shape")
    assert dry.returncode == 0 and "# staged: built beside the installed plan" in dry.stdout, dry.stderr
    done = cli(ns, "--commit")
    assert done.returncode == 0 and "ports 5000-5019: 40 links; committed (" in done.stdout, done.stderr
    nothing = cli(ns, "--commit")
    assert (nothing.returncode, nothing.stderr) == (3, "ratelimit: --commit: nothing is staged on rlh0 (stage a "
                                                       "plan with --stage)\n")
    assert cli(ns, "--abort").stdout == "rlh0: nothing was staged\n"
    both = cli(ns, "--stage", "--force", "-h", HOST, "-p", "80")
    assert (both.returncode, both.stderr) == (2, "ratelimit: --stage: it stages an apply; leave out --force and "
                                                 "the actions (--force)\n")


def test_a_refused_stage_changes_nothing(rlhd, monkeypatch):
    """The kernel refuses a class of the staged plan (one sent twice): the stage is removed
    and the installed plan's dump and record are as before."""
    from ratelimit.plan.shaping import HtbClass
    ns = rlhd()
    service.apply(request(ns))
    before, record = tc_dump(ns, *DEVS), records.load(ns, "rlh0")
    real = staging.diff.staging

    def staging_twice(old, new):
        switch = real(old, new)
        build = list(switch.build)
        dup = next(i for i, op in enumerate(build) if isinstance(op, HtbClass) and op.classid & 0xFFFF >= 0x100)
        build.insert(len(build) * 2 // 3, build[dup])
        return diff.Switch(switch.changes, tuple(build), switch.held, switch.roots, switch.removal,
                           switch.undo_removal, switch.undo_changes, switch.undo_pins)
    with monkeypatch.context() as m:
        m.setattr(staging.diff, "staging", staging_twice)
        with pytest.raises(ApplyError, match="; nothing is staged on rlh0, and the installed plan carries traffic "
                                             "as before$"):
            staging.stage(request(ns, ports="5000-5019"))
    assert tc_dump(ns, *DEVS) == before and records.load(ns, "rlh0") == record
    assert not records.marker_path(ns, "rlh0").exists()


def classes(ns) -> int:
    return len(sh("tc", "-n", ns, "class", "show", "dev", "rlh0").stdout.splitlines())


def test_a_killed_stage_is_taken_away_by_the_next_run(rlhd):
    ns = rlhd()
    service.apply(request(ns, direction="dest"))
    before, record, had = tc_dump(ns, *DEVS), records.load(ns, "rlh0"), classes(ns)
    big = ["--stage", "-h", "198.18.1.2,198.18.1.3,198.18.1.4", "-p", "10000-17999", "--mode", "shape", "-d", "dest",
           "-r", "100kbit", "--bandwidth", "3gbit"]  # 24,000 links: seconds to stage
    proc = subprocess.Popen([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", *big], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:  # stopped while its classes are counted (see test_crash_netns.start_big_apply)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        if records.marker_path(ns, "rlh0").exists():
            proc.send_signal(signal.SIGSTOP)
            if classes(ns) >= had + 800:
                break
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    proc.kill()
    proc.communicate(timeout=60)
    assert records.load(ns, "rlh0") == record and tc_dump(ns, *DEVS) != before  # half a stage, not recorded
    result = cli(ns, "--list")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"ratelimit: rlh0: a ratelimit run (pid {proc.pid}) was killed mid-stage; removed what "
                             "it had staged (the installed plan carries traffic as before)\n")
    assert tc_dump(ns, *DEVS) == before and records.load(ns, "rlh0") == record
    assert not records.marker_path(ns, "rlh0").exists()
