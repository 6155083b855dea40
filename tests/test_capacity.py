"""The capacity of traced and scheduled links, and their phases (pure).

The trace model is checked against a direct simulation of mm-link's loop (its
``LinkQueue`` steps through the trace one opportunity at a time and shifts its base
time by the last timestamp when it wraps): both must count the same opportunities in
any window, at any phase.  Then golden cases: a square wave, repeated timestamps,
looping, once, scale, a schedule with a tunnel, and the shipped traces.
"""

import random
from array import array
from pathlib import Path

import pytest

from ratelimit.errors import RatelimitError
from ratelimit.profiles.catalog import load_named
from ratelimit.spec import linklayer
from ratelimit.traces import capacity, phases, schedulefile, tracefile
from ratelimit.traces.capacity import ScheduleCapacity, TraceCapacity

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "profiles" / "traces"


def step_rates_bps(capacity, step_ms: float, count: int, start_ms: float = 0.0) -> list[float]:
    """The rates a driver stepping every ``step_ms`` would set, from ``start_ms``: each
    step's average capacity, ``capacity.rate_bps`` over [start + k x step, start + (k+1) x step)."""
    if not step_ms > 0:
        raise ValueError(f"step {step_ms!r} ms is not positive")
    return [capacity.rate_bps(start_ms + k * step_ms, start_ms + (k + 1) * step_ms) for k in range(count)]


def trace(stamps) -> tracefile.Trace:
    return tracefile.Trace("t", array("q", stamps))


def mm_link_times(stamps, until_ms: float, loop: bool = True) -> list[int]:
    """The opportunities' times as mm-link uses them: its schedule index steps on, and on
    wrapping to 0 the base time moves on by the last timestamp (or, ``--once``, stops)."""
    out, base, i = [], 0, 0
    while stamps[i] + base < until_ms:
        out.append(stamps[i] + base)
        i = (i + 1) % len(stamps)
        if i == 0:
            if not loop:
                break
            base += stamps[-1]
    return out


@pytest.mark.parametrize("loop", [True, False])
def test_the_model_counts_what_mm_link_delivers_in_any_window(loop):
    rng = random.Random(7)
    for _ in range(40):
        stamps = sorted(rng.choice([0, rng.randrange(0, 50)]) for _ in range(rng.randrange(1, 30)))
        if stamps[-1] == 0:
            stamps[-1] = rng.randrange(1, 60)
        stamps.sort()
        times = mm_link_times(stamps, 1000, loop)
        phase = rng.randrange(0, 200)
        cap = TraceCapacity(trace(stamps), phase_ms=phase, loop=loop)
        for _ in range(30):
            t0 = rng.uniform(0, 500) if rng.random() < 0.5 else rng.randrange(0, 500)
            t1 = t0 + (rng.uniform(0, 300) if rng.random() < 0.5 else rng.randrange(0, 300))
            expected = sum(1 for t in times if t0 + phase <= t < t1 + phase)
            assert cap.opportunities(t0, t1) == expected, (stamps, phase, t0, t1)


def test_repeated_timestamps_are_several_opportunities_and_the_loop_adds_the_period():
    cap = TraceCapacity(trace([0, 5, 5, 10]))
    # 0 | 5 5 | 10 (the last line) and 10 (the first again, shifted by 10) | 15 15 | 20 20 ...
    assert [cap.opportunities(0, t) for t in (1, 5, 6, 10, 11, 15, 16, 21)] == [1, 1, 3, 3, 5, 5, 7, 9]
    assert cap.bytes(5, 6) == 2 * 1504
    assert cap.rate_bps(1, 1001) == 400 * 1504 * 8  # 4 opportunities per 10 ms (5, 5, 10, 10, ...)


def square_wave() -> tracefile.Trace:
    """High for 2 s, low for 2 s, 10:1: ten opportunities every millisecond of 1-2000 ms,
    one every millisecond of 2001-4000 ms (period 4,000 ms)."""
    return trace([ms for ms in range(1, 2001) for _ in range(10)] + list(range(2001, 4001)))


def test_a_square_wave_steps_between_its_two_rates_and_loops():
    cap = TraceCapacity(square_wave(), phase_ms=1)  # the link's 0 is the trace's 1 ms: windows align
    high, low = 10 * 1504 * 8 * 1000, 1504 * 8 * 1000
    rates = step_rates_bps(cap, 100, 80)
    assert rates == [high] * 20 + [low] * 20 + [high] * 20 + [low] * 20
    assert cap.bytes(0, 4000) == (20_000 + 2_000) * 1504
    assert cap.bytes(0, 40_000) == 10 * cap.bytes(0, 4000)
    # a step across the edge averages the two; at a 1 s step the same
    assert cap.rate_bps(1950, 2050) == pytest.approx((high + low) / 2)
    assert step_rates_bps(cap, 1000, 4, start_ms=500) == [high, (high + low) / 2, low, (high + low) / 2]


def test_scale_and_phase():
    cap = TraceCapacity(square_wave(), phase_ms=1)
    small = TraceCapacity(square_wave(), scale=0.01, phase_ms=1)
    assert small.bytes(0, 4000) == pytest.approx(cap.bytes(0, 4000) * 0.01)
    assert step_rates_bps(small, 100, 40) == pytest.approx([r * 0.01 for r in step_rates_bps(cap, 100, 40)])
    later = TraceCapacity(square_wave(), phase_ms=2001)  # half a period on: low first
    assert step_rates_bps(later, 100, 40) == step_rates_bps(cap, 100, 40)[20:] + step_rates_bps(cap, 100, 40)[:20]
    with pytest.raises(ValueError):
        TraceCapacity(square_wave(), scale=0)


def test_once_stops_at_the_end_as_mm_link_once_does():
    cap = TraceCapacity(square_wave(), phase_ms=1, loop=False)
    assert cap.bytes(0, 3999) == (20_000 + 1_999) * 1504
    assert cap.opportunities(3999, 10_000) == 1  # the last line, at 4,000 ms; then nothing
    assert cap.rate_bps(5000, 6000) == 0


def test_a_class_passes_full_size_packets_at_mm_links_packet_rate():
    # an opportunity per millisecond: mm-link passes 1,000 packets of 1,500 bytes a second
    mm_bps = 1504 * 8 * 1000
    eth = TraceCapacity.class_rate_bps(mm_bps, linklayer.ETHERNET)
    assert eth == 1514 * 8 * 1000  # each of them metered as its 1,514-byte frame
    cable = linklayer.layer("ethernet", 18)
    assert TraceCapacity.class_rate_bps(mm_bps, cable) == 1518 * 8 * 1000
    assert TraceCapacity.class_rate_bps(0, linklayer.ETHERNET) == 0  # an outage stays one

    def packet_rate_ratio(ip):  # ours / mm-link's, for packets of ``ip`` bytes at the full-size rate
        return (eth / 8 / capacity.metered_bytes(ip, linklayer.ETHERNET)) / (mm_bps / 8 / (ip + 4))

    # the numbers the module's docstring gives
    assert round(packet_rate_ratio(200), 2) == 0.96 and round(packet_rate_ratio(40), 2) == 0.69
    assert TraceCapacity.class_rate_bps(mm_bps, linklayer.ETHERNET, ip_bytes=200) == round(mm_bps * 214 / 204)


TRAIN = (REPO / "profiles" / "schedules" / "train.toml").read_text()


def test_a_schedule_is_its_steps_rates_with_a_tunnel_between():
    s = schedulefile.parse(TRAIN, load_named, "schedule train.toml")
    down = ScheduleCapacity(s, "down")
    assert down.bytes(0, 20_000) == 5_000_000 * 20 / 8
    assert down.bytes(20_000, 25_000) == 0
    assert down.rate_bps(25_000, 55_000) == 1_600_000
    assert down.rate_bps(19_000, 21_000) == 2_500_000  # half cable, half tunnel
    assert down.rate_bps(55_000, 75_000) == 5_000_000  # it loops
    assert down.bytes(0, 550_000) == pytest.approx(10 * down.bytes(0, 55_000))
    assert down.at(22_000).down.rate_bps == 0 and down.at(56_000).profile == "cable"
    up = ScheduleCapacity(s, "up", phase_ms=20_000)  # starts in the tunnel
    assert step_rates_bps(up, 1000, 7) == [0] * 5 + [768_000] * 2
    assert ScheduleCapacity.class_rate_bps(1_000_000, linklayer.PPP_VJ) == linklayer.PPP_VJ.carried_bps(1_000_000)
    assert ScheduleCapacity.class_rate_bps(0, linklayer.PPP_VJ) == 0


def test_a_schedule_run_once_keeps_its_last_step():
    s = schedulefile.parse(TRAIN.replace("loop = true", "loop = false"), load_named, "schedule train.toml")
    down = ScheduleCapacity(s, "down")
    assert down.rate_bps(55_000, 100_000) == 1_600_000 and down.at(1e6).profile == "3g"
    assert down.bytes(0, 65_000) == (5_000_000 * 20 + 1_600_000 * 40) / 8


def test_phases_are_spread_deterministic_and_reported_per_link():
    links = [phases.identity("cohort", f"198.18.0.{h}", p) for h in range(2, 12) for p in range(1024, 1124)]
    spread = phases.phases(phases.Phase(), 42, links, 60_000)
    assert spread == phases.phases(phases.Phase(), 42, links, 60_000)  # the same seed, the same phases
    values = list(spread.values())
    assert all(0 <= v < 60_000 for v in values) and len(set(values)) > 900
    assert sum(values) / len(values) == pytest.approx(30_000, rel=0.05)  # uniform over the period
    assert sum(1 for v in values if v < 6_000) == pytest.approx(100, abs=40)
    other = phases.phases(phases.Phase(), 43, links, 60_000)
    assert sum(1 for k in links if other[k] == spread[k]) < 5
    assert set(phases.phases(phases.parse_phase("same"), 42, links, 60_000).values()) == {0}
    assert phases.link_phase_ms(phases.parse_phase("70s"), 42, links[0], 60_000) == 10_000
    assert phases.identity("c", "2001:db8::1", 80) == "c/[2001:db8::1]:80" and phases.identity("c", "10.0.0.1") == "c/10.0.0.1"


@pytest.mark.parametrize("text", ["sometimes", "-5s", "1.5ms", 5, ""])
def test_a_bad_phase_or_seed_names_its_field(text):
    with pytest.raises(RatelimitError) as err:
        phases.parse_phase(text, "cohort x phase")
    assert str(err.value).startswith("cohort x phase: ")
    with pytest.raises(RatelimitError) as err:
        phases.parse_seed("-1", "seed")
    assert str(err.value).startswith("seed: ")


SHIPPED_MEANS = {  # mean capacity over one period, mm-link's Mbit/s (docs/profiles.md, "Traces")
    "lte-drive.down": 8.304, "lte-drive.up": 1.384, "3g-walk.down": 1.481, "3g-walk.up": 0.711,
    "tunnel.down": 6.500, "tunnel.up": 1.083,
}


def test_the_shipped_traces_are_what_their_script_makes(tmp_path):
    import runpy
    runpy.run_path(str(SHIPPED / "make.py"))["make"](tmp_path)
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(SHIPPED_MEANS)
    for name in made:
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name
        t = tracefile.load(str(SHIPPED / name))
        assert round(t.mean_bps / 1e6, 3) == SHIPPED_MEANS[name]


def test_the_tunnel_trace_has_its_ten_seconds_of_nothing():
    cap = TraceCapacity(tracefile.load(str(SHIPPED / "tunnel.down")))
    rates = step_rates_bps(cap, 1000, 45)
    assert rates[18:28] == [0] * 10 and all(r > 0 for r in rates[:17] + rates[31:])
