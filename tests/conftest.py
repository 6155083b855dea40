"""Three kinds of tests, one command (``python -m pytest -ra tests``):

- pure tests: no marker, no root;
- ``@pytest.mark.netns``: need root and network namespaces on the host kernel;
  without root they FAIL with the reason (they are never skipped silently);
- ``@pytest.mark.kernel`` (optionally ``@pytest.mark.kernel("netem", "police")``
  naming the probe features needed; default ``probe.FULL_KERNEL``): need a full
  kernel.  When the host kernel has the features they run on the host.
  Otherwise all of them run in ONE VM booted from the stock kernel
  (``ratelimit.kernel.vm``): ``python -m pytest -m kernel NODEIDS`` in the same
  checkout with the same interpreter, and each test here reports the VM's
  verdict for its node id (the VM's output, with the guest's ``uname -r``, is
  printed as it runs).  If no VM can be booted, each kernel test FAILS with
  the reason.  ``RATELIMIT_KERNEL_TESTS=host|vm`` forces either way;
  inside the VM (``RATELIMIT_IN_VM=1``) kernel tests simply run.

Fixtures: ``netns_name`` (unique names, cleaned up), ``netns`` (creates them),
``lab`` (an ``topology.Topology`` built and destroyed for the test).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile

import pytest

pytest_plugins = ("schedule", "hostcheck", "enginekit")  # tests/schedule.py: workers, order, tiers;
# tests/hostcheck.py; tests/enginekit.py: the container engines' fixtures

IN_VM = os.environ.get("RATELIMIT_IN_VM") == "1"
RESULTS_ENV = "RATELIMIT_VM_RESULTS"  # in the VM: where to write each test's verdict
MODE_ENV = "RATELIMIT_KERNEL_TESTS"  # auto (default), host or vm
TIMEOUT_ENV = "RATELIMIT_VM_TIMEOUT"
MEMORY_ENV = "RATELIMIT_VM_MEMORY"
DEFAULT_VM_TIMEOUT_S = 1500.0

_NETNS_PREFIX = os.environ.get("RATELIMIT_TEST_NETNS_PREFIX", "rlt-")  # a session of its own may pick another
_counter = itertools.count(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "netns: needs root and network namespaces on the host kernel")
    config.addinivalue_line(
        "markers", "kernel(*features): needs a full kernel (netem, police, ...); runs on the "
                   "host if it has the features, else inside the stock-kernel VM")
    config.addinivalue_line(
        "markers", "vagrant: boots the Vagrant lab as libvirt VMs (root; minutes); tests/test_vagrant_lab.py")
    config.addinivalue_line(
        "markers", "whole_machine(why): measures what the machine's CPUs carry (load generators that want a CPU "
                   "each); a run on a loaded machine may deselect it (-m 'not whole_machine'), and says why")


def pytest_deselected(items):
    """A test that needs the whole machine says so when a run leaves it out."""
    for item in items:
        mark = item.get_closest_marker("whole_machine")
        if mark is not None:
            print(f"ratelimit: deselected, it needs the whole machine: {item.nodeid}: {mark.args[0]}")


# --------------------------------------------------------------------------
# which kernel tests go to the VM

def _needed(item) -> tuple[str, ...]:
    from ratelimit.kernel.probe import FULL_KERNEL
    features: list[str] = []
    for mark in item.iter_markers("kernel"):
        features += mark.args
    return tuple(features) or FULL_KERNEL


def _host_lacks(features: tuple[str, ...]) -> tuple[str, ...] | str:
    """What the host lacks to run a test needing ``features``: the missing
    features, or why it cannot probe; empty if it can run the test."""
    if os.geteuid() != 0:
        return "not root on the host"
    from ratelimit.errors import RatelimitError
    from ratelimit.kernel.probe import missing
    try:
        return tuple(missing(features))
    except RatelimitError as e:
        return str(e)


# fixtures that make namespaces, devices or containers: a test that uses one needs root
ROOT_FIXTURES = {"netns", "router_pair", "lab", "rlhd", "engines_up", "engine", "emulated_link",
                 "make_emulated_link", "container_link", "make_container_link"}
ROOT_MARKS = ("netns", "kernel", "vagrant")


_UNMARKED: list[str] = []


def pytest_itemcollected(item):
    """The markers say what a test needs, so that ``-m "not netns and not kernel and not
    vagrant"`` is the tier that runs without root: a test that uses a fixture of
    ``ROOT_FIXTURES`` carries one of ``ROOT_MARKS``, and every test of a file whose name ends
    in ``_netns`` is marked ``netns``.  Anything else fails the collection, naming the test."""
    marks = {m for m in ROOT_MARKS if item.get_closest_marker(m)}
    if item.path.stem.endswith("_netns") and not marks & {"netns", "kernel"}:
        _UNMARKED.append(f"{item.nodeid}: in a _netns file but not marked netns")
    used = ROOT_FIXTURES & set(getattr(item, "fixturenames", ()))
    if used and not marks:
        _UNMARKED.append(f"{item.nodeid}: uses {', '.join(sorted(used))} (root) but is not marked "
                         f"{', '.join(ROOT_MARKS)}")


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only selected tests go to the VM
def pytest_collection_modifyitems(session, config, items):
    if _UNMARKED:
        raise pytest.UsageError("tests whose markers do not say they need root:\n  " + "\n  ".join(_UNMARKED))
    if IN_VM:
        return
    mode = os.environ.get(MODE_ENV, "auto")
    if mode not in ("auto", "host", "vm"):
        raise pytest.UsageError(f"{MODE_ENV}: {mode!r} is not auto, host or vm")
    delegated = []
    for i, item in enumerate(items):
        if item.get_closest_marker("kernel") is None or isinstance(item, KernelVMItem):
            continue
        why = f"forced by {MODE_ENV}=vm" if mode == "vm" else (
            "" if mode == "host" else _host_lacks(_needed(item)))
        if why:
            proxy = KernelVMItem.from_parent(item.parent, name=item.name, original=item, why=why)
            items[i] = proxy
            delegated.append(proxy)
    if delegated:
        lacking = sorted({f for p in delegated if isinstance(p.why, tuple) for f in p.why})
        whys = sorted({p.why for p in delegated if isinstance(p.why, str)})
        if lacking:
            whys.insert(0, f"the host kernel lacks {', '.join(lacking)}")
        config.stash[_VM_KEY] = _VMSession(config, [p.nodeid for p in delegated], whys)


# --------------------------------------------------------------------------
# the one VM session and the stand-ins that report its verdicts

_VM_KEY = pytest.StashKey["_VMSession"]()


class _Verdict(Exception):
    """A kernel test failed in the VM: the message is the VM's failure text."""


class KernelVMItem(pytest.Item):
    """Stands in on the host for a kernel test that runs in the VM."""

    def __init__(self, *, original, why, **kw):
        super().__init__(**kw)
        self._location = original.reportinfo()
        self.why = why
        for mark in original.iter_markers():
            if mark.name in ("kernel", "netns", "slow", "alone"):
                self.own_markers.append(mark)
                self.keywords[mark.name] = mark
        self.add_marker(pytest.mark.own_cpu)  # the schedule runs it on a CPU of its own (tests/schedule.py)

    def reportinfo(self):
        return self._location

    def runtest(self):
        session: _VMSession = self.config.stash[_VM_KEY]
        first = not session.ran
        session.run()
        if first and session.timing:  # the report carries it to the summary, from an xdist worker too
            self.user_properties.append((_TIMING_PROPERTY, session.timing))
        session.report(self.nodeid)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, _Verdict):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


class _VMSession:
    def __init__(self, config, nodeids, whys):
        self.config = config
        self.nodeids = nodeids
        self.whys = whys
        self.ran = False
        self.error = ""  # why the VM gave no verdicts
        self.result = None  # ratelimit.kernel.vm.VMResult
        self.timing = ""  # the summary's line on the VM's times
        self.records: dict[str, list[dict]] = {}
        self.tail: list[str] = []

    def _say(self, line: str) -> None:
        self.tail = (self.tail + [line])[-40:]
        tr = self._reporter()
        if tr is not None:
            tr.write_line(line)
        else:  # an xdist worker's stderr is the controller's: the lines show as they come
            print(line, file=sys.stderr, flush=True)

    def _reporter(self):
        if hasattr(self.config, "workerinput"):
            return None
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def run(self) -> None:
        if self.ran:
            return
        self.ran = True
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                self._run()
        else:
            self._run()

    def _run(self) -> None:
        from ratelimit.kernel import vm
        from ratelimit.errors import RatelimitError
        rootdir = str(self.config.rootpath)
        outdir = tempfile.mkdtemp(prefix="ratelimit-kernel-tests-", dir="/tmp")
        results = os.path.join(outdir, "results.jsonl")
        # Starting Python is slow in the VM (every file read crosses 9p under
        # software emulation), so the guest's pytest skips `site` (-S: no .pth
        # files run) and gets this interpreter's extra sys.path entries instead,
        # and leaves out the hypothesis plugin (kernel tests don't need it).
        # -rA: the output of passing tests too (what they measured) in the log.
        # Not pyproject's addopts: one process in the guest (no xdist workers), which prints
        # every test's duration.
        argv = [sys.executable, "-S", "-m", "pytest", "-o", "addopts=", "-m", "kernel", "-p", "no:cacheprovider",
                "-p", "no:hypothesispytest", "-v", "-rA", "--durations=0", "--durations-min=1",
                f"--rootdir={rootdir}", *self.nodeids]
        env = {RESULTS_ENV: results, "PYTHONPATH": os.pathsep.join(_site_path(rootdir))}
        tr = self._reporter()
        if tr is not None:
            tr.write_line("")
            tr.write_sep("-", f"{len(self.nodeids)} kernel test(s) in a VM ({'; '.join(self.whys)})")
        else:
            self._say(f"--- {len(self.nodeids)} kernel test(s) in a VM ({'; '.join(self.whys)})")
        self._say(f"ratelimit: booting the stock kernel in a VM for {len(self.nodeids)} kernel test(s)")
        try:
            self.result = vm.run_vm(
                argv, cwd=rootdir, rwdirs=[outdir], env=env,
                memory=os.environ.get(MEMORY_ENV, vm.DEFAULT_MEMORY),
                timeout_s=float(os.environ.get(TIMEOUT_ENV, DEFAULT_VM_TIMEOUT_S)),
                on_output=lambda line: self._say(f"[vm] {line}"))
        except RatelimitError as e:
            self.error = f"{type(e).__name__}: {e}"
            self._say(f"ratelimit: kernel tests could not run in the VM: {self.error}")
        else:
            r = self.result
            self._say(f"ratelimit: kernel tests ran in the VM (guest kernel {r.guest_release}): "
                      f"exit {r.exit_code}, boot+shutdown {r.boot_s:.1f} s, tests {r.command_s:.1f} s, "
                      f"wall {r.wall_s:.1f} s")
            self.timing = (f"ratelimit: kernel tests ran in a VM (guest kernel {r.guest_release}, {r.kernel}): "
                           f"boot+shutdown {r.boot_s:.1f} s, tests {r.command_s:.1f} s, wall {r.wall_s:.1f} s")
        try:
            with open(results) as f:
                for line in f:
                    rec = json.loads(line)
                    self.records.setdefault(rec["nodeid"], []).append(rec)
        except (OSError, ValueError):
            pass
        finally:
            shutil.rmtree(outdir, ignore_errors=True)

    def report(self, nodeid: str) -> None:
        """Turn the VM's reports for ``nodeid`` into this test's outcome."""
        recs = self.records.get(nodeid)
        where = (f"in the VM (guest kernel {self.result.guest_release})" if self.result
                 else "in the VM")
        if not recs:
            if self.error:
                raise _Verdict(f"kernel test could not run: {self.error}")
            code = self.result.exit_code if self.result else "?"
            raise _Verdict(f"kernel test gave no verdict {where} (VM pytest exit status {code}); "
                           f"last VM output:\n" + "\n".join(self.tail))
        for rec in recs:
            if rec["outcome"] == "failed":
                phase = "" if rec["when"] == "call" else f" (error in {rec['when']})"
                raise _Verdict(f"FAILED {where}{phase}:\n{rec['text']}")
        call = next((r for r in recs if r["when"] == "call"), None)
        for rec in recs:
            if rec["outcome"] == "skipped":
                if rec.get("wasxfail") is not None:
                    pytest.xfail(f"{where}: {rec['wasxfail'] or rec['text']}")
                pytest.skip(f"{where}: {rec['text']}")
        if call is None:
            raise _Verdict(f"kernel test has no call report {where}")


_TIMING_PROPERTY = "ratelimit-vm-timing"


def _site_path(rootdir: str) -> list[str]:
    """This interpreter's sys.path entries that ``python -S`` lacks (site-packages
    and what .pth files added), less the checkout, which the VM's pytest adds."""
    import subprocess
    bare = subprocess.run([sys.executable, "-S", "-c", "import sys; print('\\n'.join(sys.path))"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    root = os.path.realpath(rootdir)
    out = []
    for p in sys.path:
        real = os.path.realpath(p) if p else ""
        if (p and p not in bare and os.path.isdir(p) and p not in out
                and real != root and not real.startswith(root + os.sep)):
            out.append(p)
    existing = os.environ.get("PYTHONPATH")
    return out + ([existing] if existing else [])


def pytest_runtest_logreport(report):
    """In the VM: record every test phase's outcome for the host to read."""
    path = os.environ.get(RESULTS_ENV)
    if not (IN_VM and path):
        return
    text = ""
    if report.outcome != "passed":
        lr = report.longrepr
        text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else report.longreprtext
        if isinstance(text, str) and text.startswith("Skipped: "):
            text = text[len("Skipped: "):]
    rec = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "text": text, "wasxfail": getattr(report, "wasxfail", None), "duration": report.duration}
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for reports in terminalreporter.stats.values():
        for rep in reports:
            for name, value in getattr(rep, "user_properties", ()):
                if name == _TIMING_PROPERTY and rep.when == "call":
                    terminalreporter.write_line(value)


# --------------------------------------------------------------------------
# root checks

def pytest_runtest_setup(item):
    if isinstance(item, KernelVMItem):
        return
    needs_root = item.get_closest_marker("netns") or item.get_closest_marker("kernel")
    if needs_root and os.geteuid() != 0:
        pytest.fail(f"{item.nodeid} needs root (network namespaces); run the suite as root",
                    pytrace=False)


# --------------------------------------------------------------------------
# fixtures

@pytest.fixture
def netns_name():
    """Factory: ``netns_name()`` -> a fresh name ``rlt-<pid>-<n>`` (optionally
    ``netns_name("tag")`` -> ``rlt-<pid>-<n>-tag``; ``$RATELIMIT_TEST_NETNS_PREFIX``
    replaces ``rlt-``).  The namespace is not
    created; any namespace of that name is deleted (its processes killed) when
    the test ends."""
    from ratelimit.kernel import netns
    names: list[str] = []

    def make(tag: str = "") -> str:
        name = f"{_NETNS_PREFIX}{os.getpid()}-{next(_counter)}" + (f"-{tag}" if tag else "")
        names.append(name)
        return name

    yield make
    netns.delete_namespaces(names)


@pytest.fixture
def netns(netns_name):
    """Factory: ``netns()`` creates a fresh namespace (loopback up) and returns its
    name; it is deleted when the test ends."""
    import subprocess

    def make(tag: str = "") -> str:
        name = netns_name(tag)
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
        return name

    return make


HOST4, HOST6 = "198.18.1.2", "2001:db8:1::2"  # the client of router_pair
ROUTER4, ROUTER6 = "198.18.1.1", "2001:db8:1::1"


@pytest.fixture
def router_pair(netns_name):
    """A router namespace (device r0, facing the client) and a client namespace
    (device c0), joined by a veth pair with IPv4 and IPv6 addresses; removed at
    the end.  Yields (router, client)."""
    import subprocess
    subprocess.run(["modprobe", "-a", "sch_htb", "sch_netem", "sch_ingress", "cls_u32", "act_police",
                    "act_mirred", "ifb"], capture_output=True)  # a full kernel loads them on demand too

    def sh(*argv):
        subprocess.run(argv, check=True, capture_output=True, text=True)
    router, client = netns_name("r"), netns_name("c")
    for ns in (router, client):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", router, "link", "add", "r0", "type", "veth", "peer", "name", "c0", "netns", client)
    for ns, dev, a4, a6 in ((router, "r0", ROUTER4, ROUTER6), (client, "c0", HOST4, HOST6)):
        sh("ip", "-n", ns, "addr", "add", f"{a4}/24", "dev", dev)
        sh("ip", "-n", ns, "addr", "add", f"{a6}/64", "dev", dev, "nodad")
        sh("ip", "-n", ns, "link", "set", dev, "up")
    return router, client


@pytest.fixture
def lab():
    """Factory: ``lab(clients=1)`` -> a built ``topology.Topology`` with a unique
    name; destroyed (processes killed) when the test ends."""
    from ratelimit.lab import topology
    made = []

    def make(clients: int = 1, **kw):
        topo = topology.Topology.create(f"t{os.getpid()}_{next(_counter)}", clients, **kw)
        made.append(topo)
        return topo

    yield make
    for topo in made:
        topo.destroy()


@pytest.fixture
def rlhd(tmp_path, monkeypatch):
    """Factory for the hardening tests: ``rlhd(suffix="")`` makes a namespace
    ``rlhd-<pid>-<n><suffix>`` holding a veth pair (``rlh0``, facing the clients,
    and ``rlh1``), both up, and returns its name; ``rlhd(..., dev=NAME)`` names the
    first device.  A private state directory (``$RATELIMIT_STATE_DIR``) comes with
    it.  Every namespace it made is deleted when the test ends, passed or failed."""
    import subprocess
    from ratelimit.kernel import netns as kernel_netns
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    made: list[str] = []

    def make(suffix: str = "", dev: str = "rlh0") -> str:
        name = f"rlhd-{os.getpid()}-{next(_counter)}{suffix}"
        made.append(name)
        for argv in (["ip", "netns", "add", name],
                     ["ip", "-n", name, "link", "add", dev, "type", "veth", "peer", "name", "rlh1"],
                     ["ip", "-n", name, "link", "set", dev, "up"],
                     ["ip", "-n", name, "link", "set", "rlh1", "up"]):
            subprocess.run(argv, check=True, capture_output=True)
        return name

    yield make
    kernel_netns.delete_namespaces(made)
