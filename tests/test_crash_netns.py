"""Crash safety against the host kernel in throwaway namespaces (rlhd-*): SIGINT and SIGTERM
mid-apply roll back; a failed rollback says where the interface stands and how to recover,
and the record keeps saying so; what --force replaced is put back; a run killed mid-apply
(SIGKILL) leaves a marker the next run repairs from."""

import os
import signal
import subprocess
import sys
import time

import pytest

from ratelimit import service
from ratelimit.errors import ApplyError, StateError
from ratelimit.plan import placement
from ratelimit.plan.ops import Plan
from ratelimit.plan.shaping import HtbClass
from ratelimit.service import actions, readout
from ratelimit.state import installed, records
from tcdump import tc_dump

pytestmark = pytest.mark.netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVS = ("rlh0", "rl-rlh0")
BIG = ["-h", "198.18.1.2,198.18.1.3,198.18.1.4", "-p", "10000-17999", "--mode", "shape", "-d", "dest",
       "-r", "100kbit", "--bandwidth", "3gbit"]  # 24,000 links: a few seconds to apply


def request(ns, **kw):
    args = dict(hosts="198.18.1.2", ports="5000-5009", mode="shape", direction="both", rate="1mbit")
    args.update(kw)
    return service.make_request("rlh0", netns=ns, **args)


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def cli(ns, *argv):
    return subprocess.run([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def classes(ns) -> int:
    return len(sh("tc", "-n", ns, "class", "show", "dev", "rlh0").stdout.splitlines())


def start_big_apply(ns, *extra):
    """A ratelimit process applying 24,000 shaped links, returned running once it is mid-apply
    (its marker written and a good part of its classes in the kernel).  The classes are
    counted with the process stopped: a class dump beside a running apply contends with it
    for the kernel and walks a tree that grows under it (a measured 33 s and a million lines,
    by which time the apply had finished and there was nothing left to kill mid-way)."""
    proc = subprocess.Popen([sys.executable, "-m", "ratelimit", "--netns", ns, "--if", "rlh0", *BIG, *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the apply never got going"
        if records.marker_path(ns, "rlh0").exists():
            proc.send_signal(signal.SIGSTOP)
            try:
                if classes(ns) >= 800:
                    return proc
            finally:
                proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)


def with_a_duplicate_class(monkeypatch, only=lambda req: True):
    """compile_plan whose plans (for requests ``only`` picks) hold one class twice: the
    kernel refuses the second, a real failure in the middle of the plan.  The service
    compiles a new request with ``compile_plan`` (here, and in ``placement`` when it moves a plan
    over the installed one) and a recorded one with ``compiled`` (here and in ``installed``): all
    are replaced.  ``monkeypatch`` is a MonkeyPatch of its own: its undo() must not undo the
    fixtures' state directory."""
    real = actions.compile_plan

    def compile_plan(req):
        plan = real(req)
        if not only(req):
            return plan
        ops = list(plan.ops)
        dup = next(i for i, op in enumerate(ops) if isinstance(op, HtbClass) and op.classid & 0xFFFF >= 0x100)
        ops.insert(len(ops) * 2 // 3, ops[dup])
        return Plan(plan.request, tuple(ops), plan.flows)
    monkeypatch.setattr(actions, "compile_plan", compile_plan)
    monkeypatch.setattr(actions, "compiled", compile_plan)
    monkeypatch.setattr(placement, "compile_plan", compile_plan)
    monkeypatch.setattr(installed, "compiled", compile_plan)


@pytest.mark.parametrize("signum,code,previous", [(signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)],
                         ids=["SIGINT-over-a-plan", "SIGTERM-on-a-clean-interface"])
def test_a_signal_mid_apply_rolls_back(rlhd, signum, code, previous):
    ns = rlhd()
    if previous:
        service.apply(request(ns, direction="dest"))
    before = tc_dump(ns, *DEVS)
    record = records.load(ns, "rlh0")
    proc = start_big_apply(ns)
    busy = cli(ns, "--list")  # reads what is there only once the apply is done
    assert (busy.returncode, busy.stderr) == (6, f"ratelimit: --interface: {ns}/rlh0 is busy: another ratelimit "
                                                 "run is changing it; try again when it is done\n")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == code, err
    assert err == f"ratelimit: interrupted by {name} during the apply; rlh0 is back as it was\n"
    assert tc_dump(ns, *DEVS) == before
    assert records.load(ns, "rlh0") == record and not records.marker_path(ns, "rlh0").exists()


@pytest.mark.parametrize("next_run", ["--list", "--clean"])
def test_sigkill_mid_apply_is_repaired_by_the_next_run(rlhd, next_run):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    service.apply(request(ns, direction="dest"))
    before = tc_dump(ns, *DEVS)
    proc = start_big_apply(ns)
    proc.kill()
    proc.communicate(timeout=60)
    assert records.marker_path(ns, "rlh0").exists() and tc_dump(ns, *DEVS) != before  # half of each
    result = cli(ns, next_run)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"ratelimit: rlh0: a ratelimit run (pid {proc.pid}, apply started ")
    assert "was killed mid-apply; the plan before it is back: custom link (shape" in result.stderr
    assert result.stderr.count("\n") == 1 and not records.marker_path(ns, "rlh0").exists()
    if next_run == "--list":
        assert "ports 5000-5009: 10 links" in result.stdout
        assert tc_dump(ns, *DEVS) == before
    else:
        assert result.stdout == "rlh0: removed what ratelimit installed\n"
        assert tc_dump(ns, *DEVS) == pristine


def test_sigkill_on_a_clean_interface_is_cleaned_by_the_next_apply(rlhd):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    proc = start_big_apply(ns)
    proc.kill()
    proc.communicate(timeout=60)
    result = cli(ns, "-h", "198.18.1.2", "-p", "6000-6001", "--mode", "shape", "-d", "dest")
    assert result.returncode == 0, result.stderr
    assert "was killed mid-apply; removed what it had added (nothing of ratelimit's was there before)" in result.stderr
    assert classes(ns) == 3 + 2  # pool, group, group root and one class per port: the new plan alone
    assert service.clean("rlh0", ns) is True and tc_dump(ns, *DEVS) == pristine


def test_sigkill_of_a_forced_apply_brings_back_what_it_replaced(rlhd):
    ns = rlhd()
    sh("tc", "-n", ns, "qdisc", "add", "dev", "rlh0", "root", "handle", "9:", "tbf", "rate", "1mbit", "burst", "10kb",
       "latency", "50ms")
    before = tc_dump(ns, *DEVS)
    proc = start_big_apply(ns, "--force")
    proc.kill()
    proc.communicate(timeout=60)
    result = cli(ns, "--list")
    assert result.returncode == 0, result.stderr
    assert "removed what it had added (nothing of ratelimit's was there before); what its --force replaced is " \
           "restored" in result.stderr
    assert result.stdout == "rlh0: nothing installed by ratelimit\n"
    assert tc_dump(ns, *DEVS) == before


def test_a_failed_rollback_says_where_the_interface_is_and_the_record_keeps_saying_it(rlhd, monkeypatch):
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    service.apply(request(ns))
    with pytest.MonkeyPatch.context() as patch:
        with_a_duplicate_class(patch)  # the new plan fails, and so does putting the old one back
        with pytest.raises(StateError) as info:
            service.apply(request(ns, link="atm"))  # another link layer: a rebuild, neither in place nor beside
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 8
    assert message.startswith("step ") and "failed: File exists; putting rlh0 back failed too (step " in message
    assert "; rlh0 is half-configured: rlh0: root qdisc htb 52: with " in message
    assert message.endswith(f"to recover: ratelimit --clean --force --interface rlh0 --netns {ns}, then apply again")
    assert "back as it was" not in message
    assert records.load(ns, "rlh0").problem == message and not records.marker_path(ns, "rlh0").exists()
    for argv in (["--list"], ["--stats"], ["-h", "198.18.1.2", "-p", "5000", "--mode", "shape"], ["--clean"]):
        result = cli(ns, *argv)
        assert (result.returncode, result.stderr, result.stdout) == (8, f"ratelimit: {message}\n", ""), argv
    with pytest.raises(StateError):
        readout.statistics("rlh0", ns)
    from ratelimit.webui.stats import StatsSource
    dashboard = StatsSource([(ns, "rlh0")])
    dashboard.poll_once()
    assert dashboard.snapshot(ns, "rlh0").error == message  # the dashboard shows the same line
    assert cli(ns, "--clean", "--force").returncode == 0  # the way out the message names
    assert tc_dump(ns, *DEVS) == pristine and records.load(ns, "rlh0") is None


def test_a_failed_forced_apply_puts_back_what_force_replaced(rlhd, monkeypatch):
    ns = rlhd()
    sh("tc", "-n", ns, "qdisc", "add", "dev", "rlh0", "root", "handle", "9:", "htb", "default", "10")
    sh("tc", "-n", ns, "class", "add", "dev", "rlh0", "parent", "9:", "classid", "9:10", "htb", "rate", "3mbit")
    sh("tc", "-n", ns, "qdisc", "add", "dev", "rlh0", "parent", "9:10", "handle", "10:", "tbf", "rate", "1mbit",
       "burst", "10kb", "latency", "50ms")
    sh("tc", "-n", ns, "filter", "add", "dev", "rlh0", "parent", "9:", "prio", "1", "protocol", "ip", "u32",
       "match", "ip", "dst", "198.18.9.9/32", "classid", "9:10")
    sh("tc", "-n", ns, "qdisc", "add", "dev", "rlh0", "handle", "ffff:", "ingress")
    sh("tc", "-n", ns, "filter", "add", "dev", "rlh0", "parent", "ffff:", "prio", "3", "protocol", "ip", "u32",
       "match", "ip", "src", "198.18.9.9/32", "action", "mirred", "egress", "redirect", "dev", "rlh1")
    before = tc_dump(ns, *DEVS)
    with_a_duplicate_class(monkeypatch)
    with pytest.raises(ApplyError) as info:
        service.apply(request(ns), force=True)
    assert str(info.value).endswith("failed: File exists; rlh0 is back as it was (what --force replaced is restored)")
    assert tc_dump(ns, *DEVS) == before
    assert records.load(ns, "rlh0") is None


def test_a_forced_apply_over_a_redirect_to_a_device_that_is_gone_replaces_it(rlhd):
    """A redirect whose target device was deleted dumps device index 0, which the kernel
    refuses to look up: capturing it must not ask."""
    ns = rlhd()
    sh("ip", "-n", ns, "link", "add", "rlh9", "type", "veth", "peer", "name", "rlh8")
    sh("tc", "-n", ns, "qdisc", "add", "dev", "rlh0", "handle", "ffff:", "ingress")
    sh("tc", "-n", ns, "filter", "add", "dev", "rlh0", "parent", "ffff:", "prio", "3", "protocol", "ip", "u32",
       "match", "ip", "src", "198.18.9.9/32", "action", "mirred", "egress", "redirect", "dev", "rlh9")
    sh("ip", "-n", ns, "link", "del", "rlh9")
    assert "to device rlh9" not in sh("tc", "-n", ns, "filter", "show", "dev", "rlh0", "ingress").stdout
    plan = service.apply(request(ns), force=True)
    assert records.load(ns, "rlh0").request == plan.request
    assert "c6120909" not in tc_dump(ns, "rlh0")[3]  # 198.18.9.9's filter is gone: the ingress is ratelimit's


def test_a_forced_apply_that_cannot_put_back_says_so(rlhd, monkeypatch):
    ns = rlhd()
    sh("ip", "-n", ns, "link", "add", "rl-rlh0", "type", "veth", "peer", "name", "rlh2")  # not an IFB device
    with pytest.MonkeyPatch.context() as patch:
        with_a_duplicate_class(patch)
        with pytest.raises(StateError) as info:
            service.apply(request(ns), force=True)
    message = str(info.value)
    assert "back as it was" not in message and "\n" not in message
    assert message.endswith("failed: File exists; the new plan is removed, but what --force replaced on rlh0 is not "
                            "all back (device rl-rlh0 (veth) cannot be made again by ratelimit); re-create your own "
                            "configuration there (see: tc qdisc show dev rlh0)")
    result = cli(ns, "--list")
    assert (result.returncode, result.stderr) == (8, f"ratelimit: {message}\n")


def test_a_clean_killed_half_way_is_finished_by_the_next_run(rlhd):
    """A clean is a few removals; killed after the first (the marker says so), the next run
    removes the rest rather than leave a mix."""
    ns = rlhd()
    pristine = tc_dump(ns, *DEVS)
    plan = service.apply(request(ns))  # root, ingress and the IFB device
    records.write_marker(ns, "rlh0", "clean", old=plan.request, new=None)
    sh("tc", "-n", ns, "qdisc", "del", "dev", "rlh0", "root")  # as far as the killed clean got
    result = cli(ns, "--list")
    assert result.returncode == 0, result.stderr
    assert "was killed mid-clean; finished it (nothing of ratelimit's is left)" in result.stderr
    assert result.stdout == "rlh0: nothing installed by ratelimit\n"
    assert tc_dump(ns, *DEVS) == pristine and records.load(ns, "rlh0") is None


def test_a_marker_left_after_a_completed_apply_is_just_removed(rlhd):
    ns = rlhd()
    plan = service.apply(request(ns))
    before = tc_dump(ns, *DEVS)
    records.write_marker(ns, "rlh0", "apply", old=None, new=plan.request)  # killed between record and marker removal
    result = cli(ns, "--list")
    assert (result.returncode, result.stderr) == (0, "")
    assert tc_dump(ns, *DEVS) == before and not records.marker_path(ns, "rlh0").exists()


def test_a_read_repairs_a_killed_run_only_when_told_to(rlhd):
    """A reader changes nothing unless given ``repair=True`` (``--list``, ``--stats`` and the
    dashboard are): without it, a killed run's interface is refused in one line and left as
    it is, marker and all; with it, the interface is put back, as an apply would."""
    ns = rlhd()
    service.apply(request(ns, direction="dest"))
    before = tc_dump(ns, *DEVS)
    proc = start_big_apply(ns)
    proc.kill()
    proc.communicate(timeout=60)
    half = tc_dump(ns, *DEVS)
    assert records.marker_path(ns, "rlh0").exists() and half != before
    for read in (readout.applied, readout.counters, readout.statistics, lambda i, n: readout.Poller()(i, n)):
        with pytest.raises(StateError, match=r"^--interface: a ratelimit run on rlh0 was killed mid-change; "
                                             r"'ratelimit --if rlh0 --list' as root puts it back$"):
            read("rlh0", ns)
        assert tc_dump(ns, *DEVS) == half and records.marker_path(ns, "rlh0").exists()
    heard = []
    assert readout.statistics("rlh0", ns, notice=heard.append, repair=True)["applied"]["links"] == 10
    assert tc_dump(ns, *DEVS) == before and not records.marker_path(ns, "rlh0").exists()
    assert len(heard) == 1 and "was killed mid-apply; the plan before it is back" in heard[0]
