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
  the short tests fill in around them; the alone tests after them (below).
- **Groups**: one worker runs a group's tests one after another, as one unit:
  ``kernel-vm``, every kernel test, so that one VM boots for all of them (after
  the shared tests, on a CPU of its own: see below); ``browser``, the dashboard's
  browser tests, which share one Chromium; ``containers``, the tests with real
  engines, which share one dockerd (and are all ``alone_on_host``: they time
  downloads).
- **Dealing** (``LongestFirst``, through xdist's ``pytest_xdist_make_scheduler``
  hook): an xdist worker starts a test only once it holds the one after it, and
  that one waits for the first to end.  So each worker is first dealt the next
  longest unit together with the shortest test left, and afterwards one unit at
  a time as it runs dry.  (xdist's own ``--dist loadgroup`` does not group under
  pytest 9.2, whose node ids no longer come from the ``_nodeid`` it rewrites; its
  ``load`` deals the first two dozen tests, the longest, to one worker.)
- **Shared first**: the tests that are not shared (the kinds below) start once
  every shared test has ended (the scheduler's file ``SHARED_LEFT`` is there
  until then), holding no lock while they wait.  No shared test is dealt after
  them (the plan puts the shared tests first), so none waits behind them on its
  worker.  Without this, a test that took a lock exclusive (the VM's tests, for
  576 s) kept out the shared tests that workers held but had not started, and
  those workers with them: in one fresh-clone run every worker but the VM's, so
  that no test alone on the host ran beside it.  Holding back the VM's unit while
  such a test waited did not do: the Vagrant lab's worker holds one for the
  lab's 9 minutes, and the tests alone on the host kept it out at the host's gate
  for 3 minutes more.
- **Alone**: a test marked ``alone`` times something that a busy neighbour would
  stretch (a switch of 8,000 links against a flow through it; httperf, which
  busy-polls a core per process; paced senders that read the machine's CPUs), so
  it runs when nothing else does: it comes last, and it waits for every other
  running test to end while the tests that would start after it wait for it
  (shared and exclusive ``flock``s, ``claims``).
- **Alone on the host**: a test marked ``alone_on_host`` times downloads against
  their link model from userspace (the fixtures' tests also count the labs on the
  whole machine), so no other host test runs beside it; but the kernel VM's tests
  may, each side on CPUs of its own.  The VM's tests (``own_cpu``, set by
  conftest) run on the last CPU this process may use, in a guest with one vCPU,
  and an ``alone_on_host`` test on the others.  Measured on 2 CPUs: 41 such tests
  passed on CPU 0 beside the VM's tests on CPU 1; side by side with the rest of
  the suite, unpinned, the VM's tests took 700-800 s instead of 505 s and two
  runs in three failed a timing assertion in there (in the software-emulated VM a
  guest whose CPUs wait for the host's loses time).  With one CPU both are
  simply ``alone``.  Order: the VM's tests and the ``alone_on_host`` tests come
  after the others, longest first (the VM first), and the ``alone`` tests last.
  In a fresh-clone run on 2 CPUs the VM's tests took 564 s with 343 s of those
  tests beside them, and the suite 1,615 s instead of 1,956 s.  The trace
  driver's four timing tests, once ``alone``, passed 8 runs of 8 on CPU 0 beside
  the VM's tests on CPU 1 (2026-11-29: the square wave's p95 at most 0.93 of its
  tolerance, 0.85-0.91 alone; the cellular trace's 1 s p95 error 3.7-3.8%,
  3.6% alone; bound 5%), so they are ``alone_on_host``; the token bucket's
  outage test failed 1 of 8 there (its sampler read the opening 0.86 s late,
  bound 0.5 s) and stays ``alone``.
- **Background**: a test marked ``background`` burns CPU but asserts nothing about
  time (the faults benchmark kills applies over and over), so it runs at nice
  ``BACKGROUND_NICE``, and so do the processes it starts: the tests beside it get
  the CPU first.
- **The whole machine**: a test marked ``whole_machine`` measures what the machine's CPUs
  carry (load generators that want a CPU each). A run on a loaded machine may leave those out
  (``-m "not whole_machine"``), and each says why as it is deselected (conftest).
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
  the alone tests' of each kind (a floor under the wall time: the ``alone``
  tests' sum, plus the longer of the VM's and the ``alone_on_host`` tests'), next
  to the run's wall time.
"""

from __future__ import annotations

import contextlib
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
# how a test shares the machine (``kind_of``): the order they come in, the locks they hold
SHARED, OWN_CPU, ALONE_ON_HOST, ALONE = "shared", "own_cpu", "alone_on_host", "alone"
RANK = {SHARED: 0, OWN_CPU: 1, ALONE_ON_HOST: 1, ALONE: 2}
PRECEDENCE = (OWN_CPU, ALONE, ALONE_ON_HOST)  # a test with several of these markers is the first
MACHINE, HOST = "machine", "host"  # the run's locks, taken in this order
BACKGROUND_NICE = 10
SHARED_LEFT = "shared.left"  # in the run's shared directory while a shared test has not ended
POLL_S = 0.2
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
               kinds: dict[str, str] | None = None) -> list[str]:
    """By kind (``RANK``: the shared tests first, the ``alone`` ones last; a test not in
    ``kinds`` is shared), then longest first; a group's tests together, where the group's
    summed time puts them, in their own order (pure)."""
    kinds = kinds or {}
    weight: dict[str, float] = {}
    for n in nodeids:
        key = groups.get(n, n)
        weight[key] = weight.get(key, 0.0) + durations.get(n, 0.0)
    return sorted(nodeids, key=lambda n: (RANK[kinds.get(n, SHARED)], -weight[groups.get(n, n)]))


def kind_of(item) -> str:
    """How a test shares the machine, from its markers: the VM's tests (``own_cpu``) before
    ``alone`` (the schedule marks every kernel test so), then ``alone_on_host``."""
    for kind in PRECEDENCE:
        if item.get_closest_marker(kind) is not None:
            return kind
    return SHARED


def claims(kind: str, cpus: int) -> dict[str, int]:
    """The locks a test of ``kind`` holds while it runs, shared or exclusive, on a machine
    where the run may use ``cpus`` CPUs (pure).  A shared test holds both shared; an
    ``alone`` test both exclusive; the VM's tests the machine, so that only the
    ``alone_on_host`` tests, which hold the host, run beside them.  With one CPU there
    is none to give the VM: its tests and the ``alone_on_host`` ones are ``alone``."""
    if cpus < 2 and kind in (OWN_CPU, ALONE_ON_HOST):
        kind = ALONE
    sh, ex = fcntl.LOCK_SH, fcntl.LOCK_EX
    return {SHARED: {MACHINE: sh, HOST: sh}, ALONE: {MACHINE: ex, HOST: ex},
            OWN_CPU: {MACHINE: ex}, ALONE_ON_HOST: {HOST: ex}}[kind]


def pinned_cpus(kind: str, allowed: set[int]) -> set[int] | None:
    """The CPUs a test of ``kind`` runs on, of the ``allowed`` ones; None: all (pure).
    The VM's tests get the last one, the ``alone_on_host`` tests the others."""
    if len(allowed) < 2:
        return None
    last = max(allowed)
    return {OWN_CPU: {last}, ALONE_ON_HOST: allowed - {last}}.get(kind)


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
    config.addinivalue_line("markers", "alone_on_host: times the host's links: no other host test runs beside it, "
                                       "only the kernel VM's, each on CPUs of its own (tests/schedule.py)")
    config.addinivalue_line("markers", "own_cpu: a kernel test run in the VM, on a CPU of its own; the alone_on_host "
                                       "tests may run beside it (set by conftest; tests/schedule.py)")
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
    # the kernel tests come with the VM's wherever they run: conftest makes the VM's stand-ins
    # (own_cpu) after this hook, and on a host with a full kernel they are alone either way
    kinds = {i.nodeid: OWN_CPU if group[i.nodeid] == KERNEL_GROUP else kind_of(i) for i in items}
    kinds = {n: kind for n, kind in kinds.items() if kind != SHARED}
    # a group of alone tests and others runs beside the rest: its alone tests leave it
    mixed = {group[n] for n in kinds} & {g for n, g in group.items() if n not in kinds}
    groups = {n: g for n, g in group.items() if g and not (g in mixed and n in kinds)}
    rank = {n: i for i, n in enumerate(plan_order([i.nodeid for i in items], durations, groups, kinds))}
    items.sort(key=lambda item: rank[item.nodeid])
    shared = _shared_dir(config)
    if shared is not None and hasattr(config, "workerinput"):  # for the controller's scheduler
        shared.mkdir(exist_ok=True)
        tmp = shared / f"groups.{os.getpid()}"
        tmp.write_text(json.dumps({"groups": groups, "alone": sorted(kinds)}))
        tmp.replace(shared / "groups.json")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Hold the run's locks for the whole test (``claims``), on the test's CPUs
    (``pinned_cpus``); a ``background`` test at a lower priority.  The processes the test
    starts inherit both."""
    kind = kind_of(item)
    allowed = os.sched_getaffinity(0)
    cpus = pinned_cpus(kind, allowed)
    before = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's, on Linux
    if item.get_closest_marker("background") is not None:
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        return (yield from _locked(item, kind, claims(kind, len(allowed))))
    finally:
        os.sched_setaffinity(0, allowed)
        os.setpriority(os.PRIO_PROCESS, 0, before)


def _locked(item, kind: str, held: dict[str, int]):
    """Take the run's locks in ``held``, in one order, a test that is not shared once the
    shared ones have ended.  Each lock has a gate: a test that waits for a lock exclusive
    holds its gate until it ends, and a test that takes a lock shared first passes its
    gate, so that a waiting exclusive test keeps new ones out."""
    shared = _shared_dir(item.config)
    if shared is None:
        return (yield)
    shared.mkdir(exist_ok=True)
    while kind != SHARED and (shared / SHARED_LEFT).exists():
        time.sleep(POLL_S)
    with contextlib.ExitStack() as stack:
        files = {(name, part): stack.enter_context(open(shared / f"{name}.{part}", "a"))
                 for name in held for part in ("gate", "lock")}
        if fcntl.LOCK_EX in held.values():
            for name in (MACHINE, HOST):  # holding one while it waits for the next: only alone does
                if held.get(name) == fcntl.LOCK_EX:
                    fcntl.flock(files[name, "gate"], fcntl.LOCK_EX)
                if name in held:
                    fcntl.flock(files[name, "lock"], held[name])
        else:
            names = [name for name in (MACHINE, HOST) if name in held]
            _take_shared([files[n, "gate"] for n in names], [files[n, "lock"] for n in names])
        return (yield)  # closing the files lets go of the locks


def _take_shared(gates: list, locks: list) -> None:
    """Every lock shared, or none while it waits: a shared test that held the machine
    while it waited for the host would keep the VM's tests waiting as the tests alone on
    the host went by one after another."""
    while True:
        for gate in gates:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        for i, lock in enumerate(locks):
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                for taken in locks[:i]:
                    fcntl.flock(taken, fcntl.LOCK_UN)
                fcntl.flock(lock, fcntl.LOCK_SH)  # until it is free, holding none
                fcntl.flock(lock, fcntl.LOCK_UN)
                break
        else:
            return


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
    kinds = {kind: [0, 0.0] for kind in PRECEDENCE}
    for rep in _reports(config):
        if rep.when == "call":
            kind = next((k for k in PRECEDENCE if k in rep.keywords), None)  # as kind_of
            for tally in [tiers["slow" if "slow" in rep.keywords else "quick"]] + ([kinds[kind]] if kind else []):
                tally[0] += 1
                tally[1] += rep.duration
    if not any(n for n, _ in tiers.values()):
        return
    wall = time.monotonic() - config.stash[_START]
    (n_vm, s_vm), (n_alone, s_alone), (n_host, s_host) = kinds.values()
    terminalreporter.write_line(
        "ratelimit: tiers: " + "; ".join(f"{name} {n} test(s), {s:.0f} s of test time" for name, (n, s) in tiers.items())
        + f"; of them alone, one at a time, {n_alone} test(s), {s_alone:.0f} s; the VM's {n_vm} test(s), "
          f"{s_vm:.0f} s, beside {n_host} alone on the host, one at a time, {s_host:.0f} s; wall {wall:.0f} s")


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
        self.shared_left: set[int] = set()  # the shared tests that have not ended

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
        self.shared_left = set(range(len(self.collection))) - alone
        if shared is not None and self.shared_left:
            shared.mkdir(exist_ok=True)
            (shared / SHARED_LEFT).touch()
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

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self._ended(item_index)
        super().mark_test_complete(node, item_index, duration)

    def _ended(self, index: int) -> None:
        if index in self.shared_left:
            self.shared_left.discard(index)
            shared = _shared_dir(self.config)
            if not self.shared_left and shared is not None:
                (shared / SHARED_LEFT).unlink(missing_ok=True)

    def remove_node(self, node) -> str | None:
        """A worker that crashed: its test is reported, not run again; the tests it held
        after it go to the front, as one unit."""
        held = self.node2pending.pop(node)
        if not held:
            return None
        self._ended(held[0])
        if held[1:]:
            self.pending[:0] = held[1:]
            self.units.insert(0, held[1:])
        for other in self.node2pending:
            self.check_schedule(other)
        return self.collection[held[0]]

    def mark_test_pending(self, item: str) -> None:  # a crashed worker's test, to run again
        index = self.collection.index(item)
        self.pending.insert(0, index)
        self.units.insert(0, [index])
        for node in self.node2pending:
            self.check_schedule(node)
