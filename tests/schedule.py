"""How the suite is scheduled (a pytest plugin, loaded by conftest).

Most of the suite's time is spent waiting on emulated links (a 10 kB file over a
28.8k modem takes its 3 s whatever the CPU), on the full-kernel VM and on the
Vagrant lab.  So the README's command runs the tests side by side in
pytest-xdist workers (``-n auto`` in pyproject's addopts):

- **Workers**: ``RATELIMIT_TEST_WORKERS``, else ``WORKERS`` (more than the cores:
  the tests mostly wait).  ``-n 0`` runs everything in one process, in the same
  order.
- **Order**: longest first, by the durations measured in ``tests/durations.json``,
  so that the long poles (the Vagrant lab, the quick benchmarks) start at once and
  the short tests fill in around them; the ``alone`` tests last.
- **Groups**: one worker runs a group's tests one after another, as one unit:
  ``kernel-vm``, every kernel test, so that one VM boots for all of them (at the
  end, alone: see below); ``browser``, the dashboard's browser tests, which share
  one Chromium; ``containers``, the tests with real engines, which share one dockerd
  (and are all ``alone``: they time downloads).
- **Dealing** (``LongestFirst``, through xdist's ``pytest_xdist_make_scheduler``
  hook): an xdist worker starts a test only once it holds the one after it, and
  that one waits for the first to end.  So each worker is first dealt the next
  longest unit together with the shortest test left, and afterwards one unit at
  a time as it runs dry.  (xdist's own ``--dist loadgroup`` does not group under
  pytest 9.2, whose node ids no longer come from the ``_nodeid`` it rewrites; its
  ``load`` deals the first two dozen tests, the longest, to one worker.)
- **Alone**: a test marked ``alone`` times something that a busy neighbour would
  stretch (a switch of 8,000 links against a flow through it; httperf, which
  busy-polls a core per process; a download timed from userspace, as in the fixture
  tests, which also count the fixtures' labs on the whole machine), so it runs when
  nothing else does: it comes last, and it waits for every other running test to
  end while the tests that would start after it wait for it (shared and exclusive
  ``flock``s on one file of the run's).  Every kernel test is alone too: in the
  software-emulated VM a guest whose CPUs wait for the host's loses time, and side
  by side with the rest of the suite the VM's tests took 700-800 s instead of 505 s
  and two runs in three failed a timing assertion in there.
- **Background**: a test marked ``background`` burns CPU but asserts nothing about
  time (the faults benchmark kills applies over and over), so it runs at nice
  ``BACKGROUND_NICE``, and so do the processes it starts: the tests beside it get
  the CPU first.
- **Tiers**: a test measured at ``SLOW_S`` seconds or more is marked ``slow``, and
  so is every kernel test (on a kernel without netem they share one VM session,
  which takes minutes, boot included).  ``python -m pytest -m "not slow" tests``
  is the quick tier for the edit loop.  A test not yet in the file counts as
  quick until it is measured: ``python -m pytest -n 0 -ra tests
  --record-durations tests/durations.json`` times each test alone, in one process,
  as the file's are (25 minutes on 2 cores; a run side by side gives each test's
  time under load instead), and writes the times into the file over those it had:
  a selection (``-m "not slow"``, a module) measures just its own tests.
- **Report**: the summary gives each tier's test count and summed test time, and
  the ``alone`` tests' (their sum is a floor under the wall time), next to the
  run's wall time.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "durations.json"
SLOW_S = 5.0
WORKERS = 6
WORKERS_ENV = "RATELIMIT_TEST_WORKERS"
GROUP_OF_MODULE = {"test_webui_browser.py": "browser", "test_containers_engines.py": "containers",
                   "test_containers_uses.py": "containers",
                   "test_containers_dashboard.py": "containers"}
KERNEL_GROUP = "kernel-vm"
BACKGROUND_NICE = 10
_START = pytest.StashKey[float]()


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def record_durations(path: Path, times: dict[str, float]) -> None:
    """Write ``times`` (node id -> seconds) into the file at ``path`` over its own: the
    entries of the tests that did not run stay."""
    merged = load_durations(path) | times
    path.write_text(json.dumps({k: round(v, 2) for k, v in sorted(merged.items())}, indent=1) + "\n")


def group_of(item) -> str | None:
    if item.get_closest_marker("kernel") is not None:
        return KERNEL_GROUP
    return GROUP_OF_MODULE.get(item.path.name)


def plan_order(nodeids: list[str], durations: dict[str, float], groups: dict[str, str],
               alone: frozenset[str] = frozenset()) -> list[str]:
    """Longest first; a group's tests together, where the group's summed time puts
    them, in their own order; the ``alone`` tests last (pure)."""
    weight: dict[str, float] = {}
    for n in nodeids:
        key = groups.get(n, n)
        weight[key] = weight.get(key, 0.0) + durations.get(n, 0.0)
    return sorted(nodeids, key=lambda n: (n in alone, -weight[groups.get(n, n)]))


def units(nodeids: list[str], groups: dict[str, str]) -> list[list[int]]:
    """Indexes of ``nodeids`` in units: a group's tests make one unit, any other test
    its own, in the order the tests come (pure)."""
    out: list[list[int]] = []
    where: dict[str, list[int]] = {}
    for i, n in enumerate(nodeids):
        group = groups.get(n)
        if group is None:
            out.append([i])
        elif group in where:
            where[group].append(i)
        else:
            where[group] = [i]
            out.append(where[group])
    return out


# ------------------------------------------------------------------ hooks


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's duration (setup + call + teardown, in seconds) to PATH as JSON")


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: its assertions depend on CPU time: runs last, with no other test "
                                       "running (tests/schedule.py)")
    config.addinivalue_line("markers", f"background: CPU-bound, asserts nothing about time: runs at nice "
                                       f"{BACKGROUND_NICE} (tests/schedule.py)")
    config.addinivalue_line("markers", f"slow: measured at {SLOW_S:g} s or more (tests/durations.json), "
                                       "or a kernel test; -m 'not slow' is the quick tier")
    config.stash[_START] = time.monotonic()
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "testrunuid", "") is None:
        config.option.testrunuid = uuid.uuid4().hex  # the workers' and the scheduler's shared directory


def _shared_dir(config) -> Path | None:
    """A directory the controller and its workers share for this run (xdist only)."""
    uid = config.workerinput["testrunuid"] if hasattr(config, "workerinput") else \
        getattr(config.option, "testrunuid", None)
    return Path(tempfile.gettempdir()) / f"ratelimit-tests-{uid}" if uid else None


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: the suite also runs without it
def pytest_xdist_auto_num_workers(config):
    value = os.environ.get(WORKERS_ENV, str(WORKERS))
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"{WORKERS_ENV}: {value!r} is not a number of workers (1 or more)")
    return int(value)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None  # a --dist the user chose
    return LongestFirst(config, log)


@pytest.hookimpl(tryfirst=True)  # before -m/-k deselect: the order and the tiers are the whole suite's
def pytest_collection_modifyitems(session, config, items):
    durations = load_durations()
    group = {item.nodeid: group_of(item) for item in items}
    for item in items:
        if group[item.nodeid] == KERNEL_GROUP:
            item.add_marker(pytest.mark.alone)
        if group[item.nodeid] == KERNEL_GROUP or durations.get(item.nodeid, 0.0) >= SLOW_S:
            item.add_marker(pytest.mark.slow)
    alone = frozenset(i.nodeid for i in items if i.get_closest_marker("alone"))
    # a group of alone tests and others runs beside the rest: its alone tests leave it
    mixed = {group[n] for n in alone} & {g for n, g in group.items() if n not in alone}
    groups = {n: g for n, g in group.items() if g and not (g in mixed and n in alone)}
    rank = {n: i for i, n in enumerate(plan_order([i.nodeid for i in items], durations, groups, alone))}
    items.sort(key=lambda item: rank[item.nodeid])
    shared = _shared_dir(config)
    if shared is not None and hasattr(config, "workerinput"):  # for the controller's scheduler
        shared.mkdir(exist_ok=True)
        tmp = shared / f"groups.{os.getpid()}"
        tmp.write_text(json.dumps({"groups": groups, "alone": sorted(alone)}))
        tmp.replace(shared / "groups.json")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Hold the run's lock for the whole test: shared, or exclusive for an ``alone`` test.
    The gate, held exclusive by an ``alone`` test while it waits, keeps new tests out."""
    if item.get_closest_marker("background") is not None:
        before = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's, on Linux; children inherit it
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
        try:
            return (yield from _locked(item))
        finally:
            os.setpriority(os.PRIO_PROCESS, 0, before)
    return (yield from _locked(item))


def _locked(item):
    shared = _shared_dir(item.config)
    if shared is None:
        return (yield)
    shared.mkdir(exist_ok=True)
    alone = item.get_closest_marker("alone") is not None
    with open(shared / "gate.lock", "a") as gate, open(shared / "run.lock", "a") as run:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    path = config.getoption("record_durations")
    if path:  # every phase's report, as the terminal reporter keeps them
        times: dict[str, float] = {}
        for rep in _reports(config):
            times[rep.nodeid] = times.get(rep.nodeid, 0.0) + rep.duration
        record_durations(Path(path), times)
    shared = _shared_dir(config)
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("RATELIMIT_IN_VM") == "1":
        return  # the host's summary counts the VM's tests
    tiers = {"quick": [0, 0.0], "slow": [0, 0.0]}
    alone = [0, 0.0]  # run one at a time: a floor under the wall time whatever the workers
    for rep in _reports(config):
        if rep.when == "call":
            tallies = [tiers["slow" if "slow" in rep.keywords else "quick"]] + ([alone] if "alone" in rep.keywords
                                                                                else [])
            for tally in tallies:
                tally[0] += 1
                tally[1] += rep.duration
    if not any(n for n, _ in tiers.values()):
        return
    wall = time.monotonic() - config.stash[_START]
    terminalreporter.write_line(
        "ratelimit: tiers: " + "; ".join(f"{name} {n} test(s), {s:.0f} s of test time" for name, (n, s) in tiers.items())
        + f"; of them alone, one at a time, {alone[0]} test(s), {alone[1]:.0f} s; wall {wall:.0f} s")


def _reports(config):
    """The run's test reports (setup, call, teardown), from the terminal reporter."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for reports in (reporter.stats.values() if reporter else ()):
        yield from (r for r in reports if isinstance(r, pytest.TestReport))


# ------------------------------------------------------------------ the scheduler

try:
    from xdist.scheduler import LoadScheduling
except ImportError:  # without xdist the suite runs in one process
    LoadScheduling = object


class LongestFirst(LoadScheduling):
    """xdist's ``load`` scheduling, dealt as the module docstring says."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.units: list[list[int]] = []

    def schedule(self) -> None:
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.node2collection.values())))
        self.pending[:] = range(len(self.collection))
        plan = {"groups": {}, "alone": []}
        shared = _shared_dir(self.config)
        if shared is not None and (shared / "groups.json").exists():
            plan = json.loads((shared / "groups.json").read_text())
        self.units = units(self.collection, plan["groups"])
        alone = {self.collection.index(n) for n in plan["alone"] if n in self.collection}
        for node in self.nodes:
            if self.units:
                self._deal(node, self.units.pop(0))
            # a worker starts its first unit once it holds a second: the shortest that is not
            # alone, else the last (with fewer units than twice the workers all may be alone)
            short = [k for k, unit in enumerate(self.units) if unit[0] not in alone] or list(range(len(self.units)))
            if short and len(self.node2pending[node]) < 2:
                self._deal(node, self.units.pop(short[-1]))
        for node in self.nodes:
            if not self.pending:
                node.shutdown()

    def _deal(self, node, unit: list[int]) -> None:
        for i in unit:
            self.pending.remove(i)
        self.node2pending[node].extend(unit)
        node.send_runtest_some(unit)

    def check_schedule(self, node, duration: float = 0) -> None:
        if node.shutting_down:
            return
        while self.units and len(self.node2pending[node]) < 2:
            self._deal(node, self.units.pop(0))
        if not self.pending:
            node.shutdown()

    def mark_test_pending(self, item: str) -> None:  # a crashed worker's test, to run again
        index = self.collection.index(item)
        self.pending.insert(0, index)
        self.units.insert(0, [index])
        for node in self.node2pending:
            self.check_schedule(node)
