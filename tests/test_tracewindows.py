"""The driver's windows of many traced links at once (``tracewindows``) are exactly what each
link's own ``Traced.upcoming`` gives, pure: every trace, phase, start, scale, link layer
and step tried, looping or not, from before the link's time 0 to days into the replay."""

import dataclasses
import random
from pathlib import Path

import pytest

from ratelimit.driver.steps import SPAN_WINDOWS, Stepper, traced_links
from ratelimit.plan.compile import compile_plan
from ratelimit.profiles import traced
from ratelimit.service import make_request
from ratelimit.spec.linklayer import LAYERS
from ratelimit.traces import tracefile, tracespec
from ratelimit.traces.windows import TraceWindows

ROOT = Path(__file__).resolve().parent.parent
SMALL = "0\n3\n3\n3\n17\n40\n40\n120\n250\n250\n"  # repeated stamps, two at the period's end


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", "")
    monkeypatch.setenv("HOME", "/nonexistent")


def links_of(trace, scale, count=40, seed=7):
    req = make_request("veth0", hosts="198.18.1.2", ports=f"2000-{1999 + count}", direction="dest",
                       trace_down=str(trace), trace_scale=str(scale), phase_seed=seed)
    req = tracespec.stamped(req, None, 0)
    loaded = traced.load_all(req)
    return traced_links(compile_plan(req), loaded)


def varied(links, rng):
    """The links with other starts (before and after the plan's), link layers and scales,
    some of them played once (nothing after the trace's end)."""
    out = []
    for link in links:
        cap = dataclasses.replace(link.capacity, scale=rng.choice([0.01, 0.37, 1.0, 3.5]),
                                  loop=rng.random() > 0.25)
        out.append(dataclasses.replace(link, capacity=cap, offset_ms=rng.randrange(-7_000, 7_000),
                                       layer=rng.choice(list(LAYERS.values()))))
    return out


@pytest.mark.parametrize("step_ms", [100, 37, 1000])
def test_the_windows_of_every_link_at_once_are_each_links_own(step_ms, tmp_path):
    small = tmp_path / "small.down"
    small.write_text(SMALL)
    rng = random.Random(step_ms)
    links = varied(links_of("lte-drive.down", 0.01) + links_of(small, 0.5, 9), rng)
    windows = TraceWindows(links, step_ms)
    assert windows.indexes == frozenset(range(len(links)))
    period = tracefile.load("profiles/traces/lte-drive.down").period_ms
    steps = [0, 1, 2, 3, 10, 9, 500, period // step_ms - 1, period // step_ms, 3 * period // step_ms + 5,
             86_400_000 // step_ms, 86_400_000 // step_ms + 1] + [rng.randrange(0, 10**6) for _ in range(20)]
    for k in steps:
        rows = windows.rows(k, SPAN_WINDOWS)
        own = [link.rates_from(k, SPAN_WINDOWS, step_ms) for link in links]
        assert rows == own, k
    assert any(r[0] == 0 for r in rows) and any(r[0] > 0 for r in rows)  # outages and capacity


def test_a_stepper_over_traces_and_a_schedule_takes_each_from_its_own():
    sched = make_request("veth0", hosts="198.18.1.3", ports="3000-3001", direction="dest",
                         schedule=str(ROOT / "tests" / "cases" / "traces" / "square.toml"))
    sched = tracespec.stamped(sched, None, 0)
    loaded = traced.load_all(sched)
    links = links_of("lte-drive.down", 0.01, 5) + traced_links(compile_plan(sched), loaded)
    stepper = Stepper(links, 100)
    assert stepper._windows.indexes == frozenset(range(5))  # the schedule's two links are left to upcoming
    alone = Stepper([dataclasses.replace(link, coming=[]) for link in links], 100)  # a list of its own
    alone._windows.rows = lambda k, count: [None] * len(links)  # the reference: every link by its own upcoming
    for k in (0, 1, 2, 5, 30, 31, 400):
        assert stepper.changes(k, k == 0) == alone.changes(k, k == 0)


def test_a_stepper_of_schedules_alone_does_not_import_numpy():
    """numpy's import takes seconds in a software-emulated VM: a driver that follows only
    schedules (whose windows ``upcoming`` computes) does not pay for it, one of traces does."""
    import subprocess
    import sys
    code = ("import sys; from pathlib import Path; from ratelimit.traces import tracespec; from ratelimit.profiles import traced; "
            "from ratelimit.plan.compile import compile_plan; from ratelimit.service import make_request; "
            "from ratelimit.driver.steps import Stepper, traced_links; "
            "req = tracespec.stamped(make_request('veth0', hosts='198.18.1.3', ports='3000-3001', direction='dest', "
            "**{sys.argv[1]: sys.argv[2]}), None, 0); "
            "loaded = traced.load_all(req); "
            "s = Stepper(traced_links(compile_plan(req), loaded), 100); s.changes(0, True); s.changes(1); "
            "print('numpy' in sys.modules)")
    for kind, path, imported in (("schedule", str(ROOT / "tests" / "cases" / "traces" / "square.toml"), "False"),
                                 ("trace_down", "lte-drive.down", "True")):
        out = subprocess.run([sys.executable, "-c", code, kind, path], cwd=ROOT, capture_output=True, text=True)
        assert (out.returncode, out.stdout.strip()) == (0, imported), out.stderr
