"""The suite's own scheduling and host check (tests/schedule.py, tests/hostcheck.py):
the pure parts, and one real xdist run of a small suite."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import hostcheck
import schedule

HERE = Path(__file__).resolve().parent


def test_longest_first_with_groups_as_blocks_and_alone_last():
    durations = {"a": 1.0, "b": 30.0, "k1": 5.0, "k2": 20.0, "c": 10.0, "s": 50.0}
    groups = {"k1": "kernel-vm", "k2": "kernel-vm"}
    order = schedule.plan_order(["a", "k1", "b", "s", "c", "k2", "new"], durations, groups, frozenset({"s"}))
    # the group weighs 25 s, in its own order; an unmeasured test weighs nothing; alone is last
    assert order == ["b", "k1", "k2", "c", "a", "new", "s"]


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


def _run_xdist(tmp_path, workers: int) -> tuple[Path, str]:
    """Run the small suite written in ``tmp_path`` on ``workers`` xdist workers under this
    scheduler; its tests log their runs to the returned file; pytest's output with it."""
    log = tmp_path / "log.jsonl"
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]), "RATELIMIT_HOST_CHECK": "0"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "-p", "no:cacheprovider", "-q",
                        "-W", "ignore::pytest.PytestUnknownMarkWarning", "-p", "no:randomly", str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
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
                      r"time, (\d+) test\(s\), ([\d.]+) s; wall", out)
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
