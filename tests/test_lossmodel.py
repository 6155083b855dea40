"""Burst loss models (``spec.lossmodel``): how they are given, refused, merged and recorded,
and their long-run values, checked by formula and by running the kernel's algorithm.

The kernel's algorithm (net/sched/sch_netem.c, Linux 6.1) is run here in Python, packet by
packet, as a second method for the closed forms: the Gilbert-Elliott model decides a packet
by the state it finds, then moves; the 4-state model moves, and loses the packet if the new
state is 3 or 4.  The kernel itself is measured in tests/kernel/test_burst_loss_kernel.py.
"""

import random

import pytest

from ratelimit import service
from ratelimit.errors import RatelimitError, UsageError
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.shaping import NetemQdisc
from ratelimit.profiles import scenario
from ratelimit.spec.lossmodel import LossModel, parse_loss
from ratelimit.spec.model import LinkParams
from ratelimit.state import records

GILBERT = "gemodel p=1% r=25%"


def test_gilbert_loses_p_over_p_plus_r_in_bursts_of_one_over_r():
    m = parse_loss(GILBERT)
    assert m == LossModel("gemodel", (1.0, 25.0, 0.0, 100.0))  # h 0%, k 100%: Gilbert's model
    assert m.loss_rate() == pytest.approx(0.01 / 0.26)
    assert m.mean_burst_packets() == pytest.approx(4.0)


def test_gilbert_elliott_with_both_states_lossy():
    m = parse_loss("gemodel p=2% r=20% h=20% k=99.8%")
    bad = 0.02 / 0.22
    assert m.loss_rate() == pytest.approx((1 - bad) * 0.002 + bad * 0.8)


def test_the_4_state_model_as_tc_fills_it_in_is_random_loss():
    """tc's ``loss state P13`` alone is Bernoulli loss: p31 = 1 - p13, so the next packet
    forgets the last."""
    m = parse_loss("state p13=5% p31=95%")
    assert m.loss_rate() == pytest.approx(0.05)
    assert m.mean_burst_packets() == pytest.approx(1 / 0.95)


def _run_kernel_algorithm(m: LossModel, n: int, seed: int) -> list[bool]:
    rng = random.Random(seed)
    matrix, loss = m.chain()
    state, out = 0, []
    for _ in range(n):
        if m.model == "gemodel":
            out.append(rng.random() < loss[state])
            state = 1 - state if rng.random() < matrix[state][1 - state] else state
        else:
            r, acc = rng.random(), 0.0
            for j, p in enumerate(matrix[state]):
                acc += p
                if r < acc:
                    state = j
                    break
            out.append(bool(loss[state]))
    return out


@pytest.mark.parametrize("text", ["gemodel p=2% r=20% h=20% k=99.8%", "state p13=2% p31=40% p32=8% p23=50% p14=1%",
                                  "state p13=1% p31=30% p32=5% p23=40% p14=0.5%"])
def test_the_closed_forms_are_what_the_kernels_algorithm_gives(text):
    m = parse_loss(text)
    lost = _run_kernel_algorithm(m, 400_000, 7)
    starts = sum(1 for i, x in enumerate(lost) if x and not (i and lost[i - 1]))
    rate, burst = sum(lost) / len(lost), sum(lost) / starts
    assert rate == pytest.approx(m.loss_rate(), rel=0.06), (rate, m.loss_rate())
    assert burst == pytest.approx(m.mean_burst_packets(), rel=0.04), (burst, m.mean_burst_packets())


@pytest.mark.parametrize("given, message", [
    ("gemodel p=1%", "--loss: gemodel needs p and r (r is missing"),
    ("gemodel p=120% r=2%", "--loss: p='120%' is not a percentage from 0% to 100%"),
    ("gemodel p=-1% r=2%", "--loss: p='-1%' is not a percentage from 0% to 100%"),
    ("gemodel p=1% r=2% x=3%", "--loss: x='3%' is not a parameter of gemodel (allowed: p, r, h, k)"),
    ("markov p=1%", "--loss: 'markov p=1%' is not a loss (a percentage as in 0.5%, or a model"),
    ("gemodel p1%", "--loss: 'gemodel p1%' is not a loss"),
    ("gemodel p=1% r=2% p=3%", "--loss: 'gemodel p=1% r=2% p=3%' is not a loss"),  # twice: a typo
    ({"model": {}}, "--loss: model={} is not a loss model"),
    ("state p13=60% p31=30% p14=50%", "--loss: p13+p14=110% is over 100%"),
    ("state p13=1% p31=70% p32=40%", "--loss: p31+p32=110% is over 100%"),
    ({"model": "gilbert", "p": "1%"}, "--loss: model='gilbert' is not a loss model (allowed: gemodel, state)"),
])
def test_a_bad_model_gets_one_line_naming_the_field_and_what_is_allowed(given, message):
    with pytest.raises(UsageError) as err:
        parse_loss(given, "--loss")
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def _request(**kw):
    return service.make_request("eth0", hosts="198.18.1.2", ports="80", mode="shape", **kw)


def test_the_command_line_the_api_and_a_table_say_the_same_model():
    text = _request(loss="gemodel p=1%, r=25%").only.down.loss_model
    table = _request(loss={"model": "gemodel", "p": "1%", "r": "25%"}).only.down.loss_model
    assert text == table == parse_loss(GILBERT)


def test_a_model_is_a_netem_stage_with_tcs_words():
    plan = compile_plan(_request(rate="1mbit", loss=GILBERT))
    stages = [op for op in plan.ops if isinstance(op, NetemQdisc)]
    assert stages and all(op.params.loss_model == parse_loss(GILBERT) for op in stages)
    assert "loss gemodel 1% 25% 100% 0%" in stages[0].tc()  # tc takes 1-h and 1-k


def test_loss_is_one_choice_a_percentage_or_a_model():
    with_model = LinkParams(loss_model=parse_loss(GILBERT))
    assert with_model.merged(loss_pct=1.0).loss_model is None
    assert LinkParams(loss_pct=1, loss_corr_pct=25).merged(loss_model=parse_loss(GILBERT)) == with_model
    with pytest.raises(UsageError, match=r"--loss-correlation: applies to a percentage loss"):
        compile_plan(_request(loss=GILBERT, loss_correlation="25%"))


def test_a_scenario_cohort_over_a_profile_with_a_percentage():
    text = ('[cohort.phones]\ndescription = "phones losing in bursts"\nprofile = "3g"\nhosts = "198.18.1.2"\nports = "80"\n'
            'loss = { model = "state", p13 = "2%", p31 = "40%" }\n')
    req = service.make_request("eth0", scenario=scenario.parse(text, "scenario t.toml"))
    c = req.cohorts[0]
    assert c.down.loss_model == c.up.loss_model == parse_loss("state p13=2% p31=40%")
    assert c.down.loss_pct == 0 and c.down.delay_us  # the profile's delay stays


def test_a_record_keeps_the_model():
    req = _request(loss="state p13=2% p31=40% p32=8% p23=50% p14=1%")
    back = records.from_json(records.to_json(req))
    assert back.only.down.loss_model == req.only.down.loss_model


def test_a_tampered_record_is_refused():
    data = records.to_json(_request(loss=GILBERT))
    data["cohorts"][0]["down"]["loss_model"]["pct"] = [1, 250, 0, 100]
    with pytest.raises(RatelimitError, match="loss"):
        records.request_from_json(data, "record")
