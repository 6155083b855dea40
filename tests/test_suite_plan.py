"""The suite's own scheduling and host check (tests/schedule.py, tests/hostcheck.py):
the pure parts, one real xdist run of a small suite, and a stale namespace (root)."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hostcheck
import schedule
from bench import sandbox

HERE = Path(__file__).resolve().parent


def test_longest_first_with_groups_as_blocks_and_alone_last():
    durations = {"a": 1.0, "b": 30.0, "k1": 5.0, "k2": 20.0, "c": 10.0, "s": 50.0}
    groups = {"k1": "kernel-vm", "k2": "kernel-vm"}
    order = schedule.plan_order(["a", "k1", "b", "s", "c", "k2", "new"], durations, groups, {"s": "alone"})
    # the group weighs 25 s, in its own order; an unmeasured test weighs nothing; alone is last
    assert order == ["b", "k1", "k2", "c", "a", "new", "s"]


def test_the_vm_and_the_tests_alone_on_the_host_come_before_the_alone_ones():
    durations = {"a": 1.0, "s": 50.0, "k1": 300.0, "h1": 10.0, "h2": 40.0, "x": 5.0}
    kinds = {"s": "alone", "k1": "own_cpu", "h1": "alone_on_host", "h2": "alone_on_host"}
    order = schedule.plan_order(["s", "h1", "a", "k1", "h2", "x"], durations, {}, kinds)
    assert order == ["x", "a", "k1", "h2", "h1", "s"]


def test_claims_let_only_the_vm_and_one_test_alone_on_the_host_run_together():
    sh, ex = schedule.fcntl.LOCK_SH, schedule.fcntl.LOCK_EX
    kinds = ("shared", "alone", "own_cpu", "alone_on_host")
    held = {k: schedule.claims(k, 2) for k in kinds}

    def together(a, b):  # no lock held by both, exclusive by either
        return not [n for n in held[a] if n in held[b] and ex in (held[a][n], held[b][n])]
    assert {(a, b) for a in kinds for b in kinds if together(a, b) and a <= b} == {
        ("shared", "shared"), ("alone_on_host", "own_cpu")}
    assert held["shared"] == {"machine": sh, "host": sh}
    # with one CPU there is none to give the VM: both are alone
    assert schedule.claims("own_cpu", 1) == schedule.claims("alone_on_host", 1) == schedule.claims("alone", 1)


def test_the_vm_gets_the_last_cpu_and_the_tests_alone_on_the_host_the_others():
    assert schedule.pinned_cpus("own_cpu", {0, 1, 2, 3}) == {3}
    assert schedule.pinned_cpus("alone_on_host", {0, 1, 2, 3}) == {0, 1, 2}
    assert schedule.pinned_cpus("own_cpu", {5, 7}) == {7}
    assert schedule.pinned_cpus("alone", {0, 1}) is None and schedule.pinned_cpus("shared", {0, 1}) is None
    assert schedule.pinned_cpus("own_cpu", {0}) is None and schedule.pinned_cpus("alone_on_host", {0}) is None


def test_units_put_a_group_in_one_unit_where_its_first_test_stands():
    assert schedule.units(["b", "k1", "c", "k2", "a"], {"k1": "g", "k2": "g"}) == [[0], [1, 3], [2], [4]]


def test_host_differences_name_what_changed():
    before = {"apt lists": ["a_Packages 10", "b_InRelease 5"], "sysctl": {"net.ipv4.ip_forward": "0", "fs.x": "1"},
              "netns": []}
    after = {"apt lists": [], "sysctl": {"net.ipv4.ip_forward": "1", "fs.x": "2"}, "netns": ["rl-lab-router"]}
    assert hostcheck.differences(before, after, volatile={"fs.x"}) == [
        "apt lists: gone: a_Packages 10, b_InRelease 5 (2)",
        "sysctl: net.ipv4.ip_forward was '0', now '1'",
        "netns: new: rl-lab-router (1)"]
    assert hostcheck.differences(before, before) == []


@pytest.mark.netns
def test_a_benchmarks_namespace_left_by_a_dead_process_is_no_host_change_when_a_benchmark_removes_it():
    dead = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 100_000  # above any pid in use
    name = f"{sandbox.NS_PREFIX}{dead}-1-hostcheck"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        stale = frozenset(sandbox.leftovers())
        assert name in stale
        before = hostcheck.picture(stale)
        assert name not in before["netns"]
        assert name in sandbox.remove_leftovers()  # what a benchmark does when it starts
        # (other tests' namespaces may come and go meanwhile: only this one's name counts)
        assert not [line for line in hostcheck.differences(before, hostcheck.picture(stale)) if name in line]
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


# a small suite's conftest: the kernel tests become ``own_cpu`` after the schedule has ordered
# them, as conftest's stand-ins for the VM's tests do
VM_CONFTEST = textwrap.dedent('''
    import pytest
    pytest_plugins = ["schedule"]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(items):
        for item in items:
            if item.get_closest_marker("kernel"):
                item.add_marker(pytest.mark.own_cpu)
''')


def _run_xdist(tmp_path, workers: int, returncode: int = 0) -> tuple[Path, str]:
    """Run the small suite written in ``tmp_path`` on ``workers`` xdist workers under this
    scheduler, to ``returncode``; its tests log their runs to the returned file; pytest's
    output with it."""
    log = tmp_path / "log.jsonl"
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]), "RATELIMIT_HOST_CHECK": "0"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "-p", "no:cacheprovider", "-q",
                        "-W", "ignore::pytest.PytestUnknownMarkWarning", "-p", "no:randomly", str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == returncode, r.stdout + r.stderr
    return log, r.stdout


def test_a_real_xdist_run_keeps_groups_together_and_runs_alone_tests_alone(tmp_path):
    """Two workers: the kernel group's tests share one worker; the alone test's run overlaps
    no other test's; every test runs once."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["schedule"]\n')
    (tmp_path / "test_small.py").write_text(textwrap.dedent('''
        import json, os, time
        import pytest

        def record(name, wait):
            start = time.monotonic()
            time.sleep(wait)
            with open(os.environ["LOG"], "a") as f:
                f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], start, time.monotonic()]) + "\\n")

        @pytest.mark.kernel
        def test_k1(): record("k1", 0.3)

        @pytest.mark.parametrize("n", range(6))
        def test_plain(n): record(f"p{n}", 0.4)

        @pytest.mark.kernel
        def test_k2(): record("k2", 0.3)

        @pytest.mark.alone
        def test_quiet(): record("alone", 0.5)

        @pytest.mark.parametrize("n", range(4))
        def test_more(n): record(f"m{n}", 0.4)
    '''))
    log, out = _run_xdist(tmp_path, 2)
    runs = {name: (worker, start, end) for name, worker, start, end in map(json.loads, log.read_text().splitlines())}
    assert len(runs) == 13 and len(log.read_text().splitlines()) == 13
    assert runs["k1"][0] == runs["k2"][0]
    _, a0, a1 = runs["alone"]
    assert [n for n, (_, s, e) in runs.items() if n != "alone" and s < a1 and e > a0] == []
    assert len({w for w, _, _ in runs.values()}) == 2  # side by side, not one after another
    tiers = re.search(r"ratelimit: tiers: quick (\d+) test\(s\), .* slow (\d+) test\(s\), .*; of them alone, one at a "
                      r"time, (\d+) test\(s\), ([\d.]+) s; the VM's 0 test\(s\), 0 s, beside 0 alone on the host", out)
    # the kernel tests are alone too: 0.3 + 0.3 + 0.5 s of sleep
    assert tiers and tiers.groups()[:3] == ("11", "2", "3") and float(tiers.group(4)) >= 1, out


def test_a_run_of_mostly_alone_tests_on_more_workers_than_pairs_of_units_ends(tmp_path):
    """Seven tests, six of them alone, on six workers: every worker is dealt a second unit
    before it starts its first, alone or not, so none waits for ever; no two alone tests
    overlap (it hung before: six workers held one unit each and the seventh was never dealt)."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["schedule"]\n')
    (tmp_path / "test_few.py").write_text(textwrap.dedent('''
        import json, os, time
        import pytest

        def record(name):
            start = time.monotonic()
            time.sleep(0.2)
            with open(os.environ["LOG"], "a") as f:
                f.write(json.dumps([name, start, time.monotonic()]) + "\\n")

        def test_plain(): record("plain")

        @pytest.mark.alone
        @pytest.mark.parametrize("n", range(6))
        def test_quiet(n): record(f"alone{n}")
    '''))
    log, _ = _run_xdist(tmp_path, 6)
    runs = sorted((start, end, name) for name, start, end in map(json.loads, log.read_text().splitlines()))
    assert len(runs) == 7
    alone = [(s, e) for s, e, name in runs if name.startswith("alone")]
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(alone, alone[1:]))


def test_the_vms_tests_run_beside_the_tests_alone_on_the_host_each_on_cpus_of_their_own(tmp_path):
    """The VM's tests (``own_cpu``) on the last CPU, the ``alone_on_host`` tests on the others,
    one at a time, beside them; neither beside a shared test or an ``alone`` one.  As in
    conftest, the kernel tests become ``own_cpu`` after the schedule has ordered them: they
    still start with the first test alone on the host (ordered as alone, they came after
    the tests alone on the host, and in a CI run 24 of those ran before the VM booted)."""
    allowed = sorted(os.sched_getaffinity(0))
    assert len(allowed) >= 2, "this test needs two CPUs"
    (tmp_path / "conftest.py").write_text(VM_CONFTEST)
    (tmp_path / "test_vm.py").write_text(textwrap.dedent('''
        import json, os, time
        import pytest

        def record(name, wait):
            start = time.monotonic()
            time.sleep(wait)
            with open(os.environ["LOG"], "a") as f:
                f.write(json.dumps([name, start, time.monotonic(), sorted(os.sched_getaffinity(0))]) + "\\n")

        @pytest.mark.kernel
        @pytest.mark.parametrize("n", range(2))
        def test_vm(n): record(f"vm{n}", 1.0)

        @pytest.mark.alone_on_host
        @pytest.mark.parametrize("n", range(6))
        def test_host(n): record(f"host{n}", 0.3)

        @pytest.mark.parametrize("n", range(6))
        def test_plain(n): record(f"plain{n}", 0.3)

        @pytest.mark.alone
        def test_quiet(): record("alone", 0.3)
    '''))
    log, out = _run_xdist(tmp_path, 3)
    runs = {name: (start, end, cpus) for name, start, end, cpus in map(json.loads, log.read_text().splitlines())}
    assert len(runs) == 15

    def beside(a, b):
        return runs[a][0] < runs[b][1] and runs[b][0] < runs[a][1]
    kind = {n: n.rstrip("0123456789") for n in runs}
    pairs = {(kind[a], kind[b]) for a in runs for b in runs if a < b and beside(a, b)}
    assert pairs <= {("plain", "plain"), ("host", "vm"), ("vm", "vm")}, pairs  # vm0 and vm1: one after another
    assert ("host", "vm") in pairs
    assert not beside("vm0", "vm1")
    assert runs["vm0"][0] < min(end for name, (_, end, _) in runs.items() if kind[name] == "host")
    for name, (_, _, cpus) in runs.items():
        assert cpus == {"vm": allowed[-1:], "host": allowed[:-1]}.get(kind[name], allowed), (name, cpus)
    assert re.search(r"the VM's 2 test\(s\), [\d.]+ s, beside 6 alone on the host, one at a time, [\d.]+ s", out), out


def test_the_vm_starts_once_every_shared_test_has_ended(tmp_path):
    """Three workers; two run a long shared test each, with a short one dealt after it; the
    third runs dry first and is dealt the VM's unit.  The VM took the machine before those
    short ones started, and they waited for its whole run, their workers with them: no test
    alone on the host ran beside the VM (a fresh-clone run of the suite, 2026-11-29: the
    VM's 576 s with the host's side idle).  Now every test that is not shared waits for the
    shared ones to end: the short ones run, then the VM with the tests alone on the host
    beside it."""
    allowed = sorted(os.sched_getaffinity(0))
    assert len(allowed) >= 2, "this test needs two CPUs"
    (tmp_path / "conftest.py").write_text(VM_CONFTEST)
    (tmp_path / "test_deal.py").write_text(textwrap.dedent('''
        import json, os, time
        import pytest

        def record(name, wait):
            start = time.monotonic()
            time.sleep(wait)
            with open(os.environ["LOG"], "a") as f:
                f.write(json.dumps([name, start, time.monotonic()]) + "\\n")

        @pytest.mark.parametrize("n", range(2))
        def test_long(n): record(f"long{n}", 1.5)

        @pytest.mark.parametrize("n", range(5))
        def test_short(n): record(f"short{n}", 0.1)

        @pytest.mark.kernel
        @pytest.mark.parametrize("n", range(2))
        def test_vm(n): record(f"vm{n}", 3.0 if n == 0 else 0.0)

        @pytest.mark.alone_on_host
        @pytest.mark.parametrize("n", range(6))
        def test_host(n): record(f"host{n}", 0.3)
    '''))
    log, _ = _run_xdist(tmp_path, 3)
    runs = {name: (start, end) for name, start, end in map(json.loads, log.read_text().splitlines())}
    assert len(runs) == 15
    vm_start, vm_end = runs["vm0"]
    shared = {n: s for n, (s, _) in runs.items() if n.startswith(("long", "short"))}
    assert max(shared.values()) < vm_start, (vm_start, shared)
    beside = [n for n, (s, e) in runs.items() if n.startswith("host") and s < vm_end and e > vm_start]
    assert len(beside) >= 3, (runs["vm0"], {n: runs[n] for n in runs if n.startswith("host")})


def test_a_worker_that_crashes_in_a_shared_test_leaves_the_others_to_run(tmp_path):
    """A shared test kills its worker: it is reported as crashed; the tests its worker held
    after it run on another worker, and the tests alone on the host, which wait for every
    shared test to end, run too (before, the tests it held were never dealt again, and the
    run never ended)."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["schedule"]\n')
    (tmp_path / "test_crash.py").write_text(textwrap.dedent('''
        import json, os, time
        import pytest

        def record(name):
            with open(os.environ["LOG"], "a") as f:
                f.write(json.dumps(name) + "\\n")
            time.sleep(0.2)

        def test_dies(): os._exit(3)

        @pytest.mark.parametrize("n", range(6))
        def test_plain(n): record(f"plain{n}")

        @pytest.mark.alone_on_host
        @pytest.mark.parametrize("n", range(2))
        def test_host(n): record(f"host{n}")
    '''))
    log, out = _run_xdist(tmp_path, 2, returncode=1)
    assert sorted(json.loads(line) for line in log.read_text().splitlines()) == \
        ["host0", "host1"] + [f"plain{n}" for n in range(6)]
    assert re.search(r"1 failed, 8 passed", out), out


def test_recorded_durations_go_over_the_files_and_keep_the_tests_not_run(tmp_path):
    """``--record-durations`` on a selection: the tests that ran get their new times, the
    file's other entries stay; a file not there yet is written."""
    recorded = tmp_path / "durations.json"
    schedule.record_durations(recorded, {"t.py::test_a": 99.0})
    assert json.loads(recorded.read_text()) == {"t.py::test_a": 99.0}
    schedule.record_durations(recorded, {"t.py::test_b": 0.004, "t.py::test_a": 0.216})
    assert json.loads(recorded.read_text()) == {"t.py::test_a": 0.22, "t.py::test_b": 0.0}
    schedule.record_durations(recorded, {"u.py::test_c": 7.0})
    assert json.loads(recorded.read_text()) == {"t.py::test_a": 0.22, "t.py::test_b": 0.0, "u.py::test_c": 7.0}
