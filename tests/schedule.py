"""How the suite is scheduled (a pytest plugin, loaded by conftest).

Most of the suite's time is spent waiting on emulated links (a 10 kB file over a
28.8k modem takes its 3 s whatever the CPU), on the full-kernel VM and on the
Vagrant lab.  So the README's command runs the tests side by side in
pytest-xdist workers (``-n auto --dist loadgroup`` in pyproject's addopts):

- **Workers**: ``RATELIMIT_TEST_WORKERS``, else ``WORKERS`` (more than the cores:
  the tests mostly wait).  ``-n 0`` runs everything in one process, as before.
- **Order**: longest first, by the durations measured in ``tests/durations.json``
  (xdist hands out work in collection order, so the long poles start at once and
  the short tests fill in around them).
- **Groups** (``xdist_group``: one worker runs a group's tests one after another):
  ``kernel-vm``, every kernel test, so one VM boots for all of them; ``browser``,
  the dashboard's browser tests, which share one Chromium; ``pytest-plugin``, the
  fixture tests, which count the fixtures' labs on the whole machine.
- **Tiers**: a test measured at ``SLOW_S`` seconds or more is marked ``slow``, and
  so is every kernel test (on a kernel without netem they share one VM session,
  which takes minutes, boot included).  ``python -m pytest -m "not slow" tests`` is the quick tier for the
  edit loop.  A test not yet in the file counts as quick until it is measured:
  ``python -m pytest -ra tests --record-durations tests/durations.json`` writes
  the file from a full run.
- **Report**: the summary gives each tier's test count and summed durations next
  to the run's wall time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
SLOW_S = 5.0
WORKERS = 6
WORKERS_ENV = "RATELIMIT_TEST_WORKERS"
GROUP_OF_MODULE = {"test_webui_browser.py": "browser", "test_pytest_plugin.py": "pytest-plugin"}
KERNEL_GROUP = "kernel-vm"
_START = pytest.StashKey[float]()
_TIMES = pytest.StashKey[dict]()
_config = None  # pytest_runtest_logreport is given no config


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def base_nodeid(nodeid: str) -> str:
    """The node id without xdist's ``@group`` suffix."""
    at, bracket = nodeid.rfind("@"), nodeid.rfind("]")
    return nodeid[:at] if at > bracket else nodeid


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's duration (setup + call + teardown, in seconds) to PATH as JSON")


def pytest_configure(config):
    config.addinivalue_line("markers", f"slow: measured at {SLOW_S:g} s or more (tests/durations.json), "
                                       "or a kernel test run in the VM; -m 'not slow' is the quick tier")
    config.stash[_START] = time.monotonic()
    config.stash[_TIMES] = {}
    global _config
    _config = config


def pytest_xdist_auto_num_workers(config):
    value = os.environ.get(WORKERS_ENV, str(WORKERS))
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"{WORKERS_ENV}: {value!r} is not a number of workers (1 or more)")
    return int(value)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(session, config, items):
    durations = load_durations()
    for item in items:
        group = GROUP_OF_MODULE.get(item.path.name)
        if item.get_closest_marker("kernel") is not None:
            group = KERNEL_GROUP
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if group == KERNEL_GROUP or durations.get(item.nodeid, 0.0) >= SLOW_S:
            item.add_marker(pytest.mark.slow)
    # longest first; a group goes where its longest test would, as one block
    group_time: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark:
            group_time[mark.args[0]] = group_time.get(mark.args[0], 0.0) + durations.get(item.nodeid, 0.0)

    def weight(item):
        mark = item.get_closest_marker("xdist_group")
        return group_time[mark.args[0]] if mark else durations.get(item.nodeid, 0.0)
    items.sort(key=lambda item: -weight(item))


def pytest_runtest_logreport(report):
    times = _config.stash[_TIMES] if _config else None
    if times is not None:
        key = base_nodeid(report.nodeid)
        times[key] = times.get(key, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("record_durations")
    if path and not hasattr(session.config, "workerinput"):
        times = session.config.stash[_TIMES]
        Path(path).write_text(json.dumps({k: round(v, 2) for k, v in sorted(times.items())}, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tiers = {"quick": [0, 0.0], "slow": [0, 0.0]}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "when", None) != "call" and not (getattr(rep, "when", None) == "setup"
                                                              and rep.outcome != "passed"):
                continue
            tier = tiers["slow" if "slow" in getattr(rep, "keywords", {}) else "quick"]
            tier[0] += 1
            tier[1] += getattr(rep, "duration", 0.0)
    if not any(n for n, _ in tiers.values()):
        return
    wall = time.monotonic() - config.stash[_START]
    terminalreporter.write_line(
        "ratelimit: tiers: " + "; ".join(f"{name} {n} test(s), {s:.0f} s of test time" for name, (n, s) in tiers.items())
        + f"; wall {wall:.0f} s")
