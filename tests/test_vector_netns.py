"""The array driver's rounds against the host kernel (namespaces ``rltr-<pid>-v<n>-*``, removed
even when a test fails; no traffic): a round sent from the templates leaves the kernel as the
same round sent op by op does, and a change the kernel refuses is named as the op it is."""

import itertools
import os
import subprocess

import pytest

from bench import traceload
from ratelimit import service
from ratelimit.driver.steps import traced_links
from ratelimit.driver.vector import VectorStepper
from ratelimit.kernel import rounds
from ratelimit.kernel.executor import Executor, StepFailed
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.ops import tc_handle
from ratelimit.profiles import traced
from ratelimit.state import records

pytestmark = pytest.mark.netns

_counter = itertools.count(1)
LINKS = 300


@pytest.fixture
def ns(tmp_path, monkeypatch):
    """A router with ``LINKS`` links following the LTE drive at 0.01, each at its own phase,
    no driver; gone at the end, whatever happened."""
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    tag = f"{os.getpid()}-v{next(_counter)}"
    names = traceload.topology(tag)
    try:
        service.apply(service.make_request(
            traceload.DEV, netns=names["rtr"], hosts=traceload.CLIENT,
            ports=f"{traceload.PORT0}-{traceload.PORT0 + LINKS - 1}", direction="dest", trace_down="lte-drive.down",
            trace_scale="0.01", phase="random"), follow=False)
        yield names
    finally:
        traceload.cleanup(tag)


def stepper_of(names):
    req = records.load(names["rtr"], traceload.DEV).request
    links = traced_links(compile_plan(req), traced.load_all(req))
    return VectorStepper(links, 100), rounds.Templates([link.klass for link in links], [link.gate for link in links])


def state(ex):
    return ex.capture({traceload.DEV: {"root"}})[traceload.DEV]["items"]


def test_a_round_from_the_templates_leaves_the_kernel_as_the_same_ops_do(ns):
    """From one state of the kernel, a round sent op by op; from the same state again, the
    same round from the templates: the kernel reads back alike.  (The messages' bytes:
    tests/test_vector.py.)"""
    stepper, templates = stepper_of(ns)
    elsewhere = stepper_of(ns)[0].changes(1000, True).ops()  # the same state to start from, each time
    with Executor(ns["rtr"]) as ex:
        for k, resend in ((0, True), (1, False), (2, False), (40, False)):
            step = stepper.changes(k, resend)
            assert len(step) > 0
            ex.apply(elsewhere)
            ex.apply(step.ops())
            by_ops = state(ex)
            ex.apply(elsewhere)
            assert state(ex) != by_ops
            rounds.apply_round(ex, step, templates)
            assert state(ex) == by_ops, k


def test_a_change_the_kernel_refuses_is_named_as_its_op(ns):
    """One link's gate removed behind the plan's back: the round fails at that gate's change."""
    stepper, templates = stepper_of(ns)
    victim = stepper.links[LINKS // 2]
    subprocess.run(["tc", "-n", ns["rtr"], "qdisc", "del", "dev", traceload.DEV, "parent",
                    tc_handle(victim.klass.classid)], check=True, capture_output=True)
    step = stepper.changes(0, True)
    with Executor(ns["rtr"]) as ex, pytest.raises(StepFailed) as failed:
        rounds.apply_round(ex, step, templates)
    assert failed.value.op == step.op(failed.value.index)
    assert failed.value.op.op.handle == victim.gate.handle  # the gate that is gone, and no other
    assert failed.value.total == len(step)
