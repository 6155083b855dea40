"""The array driver (``driver.vector``) gives the reference's changes, change for change, and
its messages are the encoder's, byte for byte: pure.

``steps.Stepper`` is the reference: each link's rules in Python, one link at a time.  Every
step of both is compared: the operations (the same links, rates and order), the links'
state, what each owes; over the shipped traces, the test schedules (the square waves,
the outage) and random traces and schedules (hypothesis), with the round's timing
(``landed``), the links' packets (``learn``), resends, missed steps and steps back in
time all varied.
"""

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ratelimit.driver.steps import Stepper, traced_links
from ratelimit.driver.vector import UNKNOWN, VectorStepper
from ratelimit.kernel.encode import Encoder
from ratelimit.kernel.rates import Clock
from ratelimit.kernel.rounds import ROW, Templates, stamp
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.ops import Change
from ratelimit.profiles import traced
from ratelimit.service import make_request
from ratelimit.traces import tracespec
from ratelimit.traces.windows import Ring

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases" / "traces"
SHIPPED = sorted(p.name for p in (ROOT / "profiles" / "traces").glob("*.down")) + \
    sorted(p.name for p in (ROOT / "profiles" / "traces").glob("*.up"))
SCHEDULES = ("square.toml", "square-frames.toml", "outage.toml", "tunnel.toml")


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", "")
    monkeypatch.setenv("HOME", "/nonexistent")


def both(step_ms=100, count=60, direction="dest", **source):
    """A reference and an array stepper over links of their own, of one request."""
    req = tracespec.stamped(make_request("veth0", hosts="198.18.1.2", ports=f"2000-{1999 + count}",
                                         direction=direction, phase="random", bandwidth="10gbit", **source), None, 0)
    loaded = traced.load_all(req)
    plan = compile_plan(req)
    return Stepper(traced_links(plan, loaded), step_ms), VectorStepper(traced_links(plan, loaded), step_ms)


def state(stepper):
    """Each link's (class rate, gate, what it owes, its counted window, its packets)."""
    if isinstance(stepper, Stepper):
        return [(link.rate_bps, link.gate_bps, link.ahead_bytes, link.counted, link.packet_bytes)
                for link in stepper.links]
    def known(v):
        return None if v == UNKNOWN else int(v)
    return [(known(r), known(g), float(a), known(c), None if np.isnan(p) else float(p))
            for r, g, a, c, p in zip(stepper.rate, stepper.gate, stepper.ahead, stepper.counted, stepper.packet)]


def run_both(ref, vec, steps: int, seed: int) -> dict:
    """Step both alike for ``steps`` rounds, asserting that they agree at each; what was seen."""
    rng, k, seen = random.Random(seed), 0, {"changes": 0, "shut": 0, "held": 0, "span": 0, "back": 0}
    size = len(ref.links)
    for n in range(steps):
        resend = n == 0 or rng.random() < 0.03
        want, got = ref.changes(k, resend), vec.changes(k, resend)
        assert got.ops() == want, f"step {k} (round {n})"
        assert len(got) == len(want)
        assert (vec.reopened, vec.shut_count(), vec.held_count()) == \
            (ref.reopened, ref.shut_count(), ref.held_count()), k
        seen["changes"] += len(want)
        seen["shut"] += ref.shut_count()
        seen["held"] += ref.held_count()
        first_ms, round_ms = rng.uniform(-30, 60), rng.uniform(0, 20)
        ref.landed(first_ms, round_ms)
        vec.landed(first_ms, round_ms)
        if rng.random() < 0.2:  # a reading of the classes' counters: packets of some sizes, some links idle
            nbytes = [rng.randrange(0, 10**5) * (n + 1) for _ in range(size)]
            npackets = [b // rng.choice([40, 202, 700, 1514, 10**9]) for b in nbytes]
            ref.learn(nbytes, npackets)
            vec.learn(nbytes, npackets)
            assert vec.learnt == ref.learnt
        if rng.random() < 0.01:
            ref.forget()
            vec.forget()
        assert state(vec) == state(ref), f"after step {k}"
        r = rng.random()
        k = max(0, k - rng.randrange(1, 30)) if r < 0.02 else k + (rng.randrange(2, 40) if r < 0.1 else 1)
        seen["back"] += r < 0.02
    seen["span"] = sum(1 for link in ref.links if (link.packet_bytes or link.gate.burst_bytes) * 8000 >
                       (link.rate_bps or 0) * ref.step_ms)
    return seen


@pytest.mark.parametrize("trace", SHIPPED)
@pytest.mark.parametrize("scale", [0.002, 0.05, 1.0])
def test_the_arrays_give_the_references_changes_on_every_shipped_trace(trace, scale):
    down = trace.endswith(".down")
    ref, vec = both(direction="dest" if down else "source",
                    **{"trace_down" if down else "trace_up": trace, "trace_scale": str(scale)})
    seen = run_both(ref, vec, 150, seed=hash((trace, scale)) % 1000)
    assert seen["changes"] > 150  # the rates do change


def test_the_comparison_meets_holds_spans_and_outages():
    """The cases where the rules differ, met at least once (else the equality above is weak)."""
    ref, vec = both(trace_down="lte-drive.down", trace_scale="0.002")
    assert run_both(ref, vec, 200, seed=3)["span"] > 0  # frames longer than a window
    ref, vec = both(schedule=str(CASES / "square.toml"))
    assert run_both(ref, vec, 200, seed=4)["held"] > 0  # the 10:1 rise the gate holds
    ref, vec = both(schedule=str(CASES / "outage.toml"))
    assert run_both(ref, vec, 200, seed=5)["shut"] > 0


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("step_ms", [100, 37])
def test_the_arrays_give_the_references_changes_on_the_test_schedules(schedule, step_ms):
    ref, vec = both(step_ms, schedule=str(CASES / schedule))
    run_both(ref, vec, 200, seed=step_ms)


def with_period(stamps):
    """The stamps, and a period after the last of them (a trace lasts longer than 0 ms)."""
    return stamps + [stamps[-1] + 1 + stamps[-1] % 97]


stamps = st.lists(st.integers(0, 3000), min_size=1, max_size=200).map(sorted).map(with_period)


@settings(max_examples=40, deadline=None)
@given(stamps=stamps, scale=st.sampled_from([0.001, 0.01, 0.3, 2.0]), step_ms=st.sampled_from([10, 100, 250]),
       seed=st.integers(0, 10**6))
def test_the_arrays_give_the_references_changes_on_random_traces(tmp_path_factory, stamps, scale, step_ms, seed):
    path = tmp_path_factory.mktemp("trace") / "random.down"
    path.write_text("".join(f"{t}\n" for t in stamps))
    ref, vec = both(step_ms, count=12, trace_down=str(path), trace_scale=str(scale))
    run_both(ref, vec, 80, seed)


steps_strategy = st.lists(st.tuples(st.integers(1, 5000), st.sampled_from([0, 8, 1000, 40_000, 400_000, 2_000_000,
                                                                          30_000_000])), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(steps=steps_strategy, loop=st.booleans(), step_ms=st.sampled_from([10, 100, 250]), seed=st.integers(0, 10**6))
def test_the_arrays_give_the_references_changes_on_random_schedules(tmp_path_factory, steps, loop, step_ms, seed):
    path = tmp_path_factory.mktemp("schedule") / "random.toml"
    path.write_text(f"loop = {'true' if loop else 'false'}\n" + "".join(
        f'[[step]]\nduration = "{ms}ms"\ndown = {{ rate = "{bps}bit" }}\nup = {{ rate = "{bps}bit" }}\n'
        for ms, bps in steps))
    ref, vec = both(step_ms, count=12, schedule=str(path))
    run_both(ref, vec, 80, seed)


def test_the_ring_holds_each_links_own_windows_as_the_steps_go_on_jump_and_go_back():
    ref, vec = both(trace_down="lte-drive.down", trace_scale="0.01")
    ring = Ring(ref.links, 100, 20)
    for k in (0, 1, 2, 3, 7, 30, 29, 5000, 5001, 4999, 0):
        ring.at(k)
        held = np.stack([ring.column(j) for j in range(k, k + 20)], axis=1)
        assert held.tolist() == [link.rates_from(k, 20, 100) for link in ref.links], k


def encoder():
    devices = {"veth0": 7, "ifb3": 12}
    return Encoder(lambda name: devices[name], Clock("000003e8 00000040 000f4240 3b9aca00\n"))


def test_the_templates_messages_are_the_encoders_byte_for_byte():
    """Every rate a class or a gate can be given, as the encoder packs it."""
    _, vec = both(trace_down="lte-drive.down", trace_scale="0.01")
    links, enc = vec.links, encoder()
    rng = random.Random(9)
    templates = Templates([link.klass for link in links], [link.gate for link in links])
    templates.ready(enc)
    rows = np.array(sorted(rng.sample(range(len(links)), 40)))
    rates = [rng.choice([8, 9, 64, 1000, 40_000, 1_234_567, 10**9, 10**10, 34 * 10**9]) + rng.randrange(0, 7)
             for _ in rows]
    bursts = [rng.choice([1, 250, 1514, 12_345, 10**6]) for _ in rows]
    ceils = [max(r, rng.choice([r, 10**9])) for r in rates]
    msgs = templates.messages([("gate", rows, (np.array(rates),)),
                               ("class", rows, (np.array(rates), np.array(ceils), np.array(bursts)))])
    want = [enc.change(Change.of(links[i].gate_at(r)), 0, 1) for i, r in zip(rows, rates)] + \
        [enc.change(Change.of(links[i].klass.with_rates(r, c, b)), 0, 1)
         for i, r, c, b in zip(rows, rates, ceils, bursts)]
    assert msgs.shape == (80, ROW)
    assert [bytes(m) for m in msgs] == want


def test_a_rate_that_needs_64_bits_sends_the_round_op_by_op():
    _, vec = both(trace_down="lte-drive.down", trace_scale="0.01")
    templates = Templates([link.klass for link in vec.links], [link.gate for link in vec.links])
    templates.ready(encoder())
    rows = np.array([0, 1])
    assert templates.messages([("class", rows, (np.array([8, 35 * 10**9]),) * 2 + (np.array([1, 1]),))]) is None


def test_a_rounds_messages_are_numbered_with_one_acknowledgement_a_batch():
    msgs = np.zeros((5, ROW), dtype=np.uint8)
    stamp(msgs, 100, 2)
    assert msgs.view(np.uint32)[:, 2].tolist() == [100, 101, 102, 103, 104]
    assert (msgs.view(np.uint16)[:, 3] & 4).tolist() == [0, 4, 0, 4, 4]  # NLM_F_ACK: each batch's last


def test_a_moved_device_is_followed_in_its_rows():
    _, vec = both(trace_down="lte-drive.down", trace_scale="0.01")
    templates = Templates([link.klass for link in vec.links], [link.gate for link in vec.links])
    templates.ready(encoder())
    templates.follow({"veth0": 31}.get)
    assert set(templates.classes.view(np.int32)[:, 5].tolist()) == {31}
    assert set(templates.gates.view(np.int32)[:, 5].tolist()) == {31}


def test_the_reference_driver_is_one_flag_away():
    """``ratelimit follow --reference`` runs the reference; ``follow.start`` passes it on."""
    from ratelimit.cli.subcommands import _follow_parser
    from ratelimit.driver import follow
    assert follow.command("rl-ns", "eth1", 100, reference=True) == \
        ["ratelimit", "follow", "--interface", "eth1", "--netns", "rl-ns", "--reference"]
    assert "--reference" not in follow.command("rl-ns", "eth1", 100)
    assert _follow_parser().parse_args(["--interface", "eth1", "--reference"]).reference
    assert not _follow_parser().parse_args(["--interface", "eth1"]).reference
