"""``python -m bench trace --quick`` on the host (namespaces ``rltr-tb<pid>*``, removed by the
benchmark even when it fails; traffic in 198.18.70.0/24 and 198.18.71.0/24 only): 100 links on
the LTE drive, the driver alone, and the naive driver."""

import json
import os

import pytest

from bench.__main__ import main as bench_main

pytestmark = pytest.mark.netns


@pytest.mark.alone  # paced senders and the driver's timing against the clock
@pytest.mark.whole_machine("paced senders, a CPU each, and the driver beside them")
def test_quick_trace_benchmark_tracks_the_trace_and_the_driver_beats_tc_per_link(tmp_path):
    assert bench_main(["trace", "--quick", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "trace-host-quick.json").read_text())["rows"]
    track = [r for r in rows if r["kind"] == "tracking"]
    alone = [r for r in rows if r["kind"] == "driver"]
    naive = [r for r in rows if r["kind"] == "naive"]
    assert [r["links"] for r in track] == [100] and [r["links"] for r in naive] == [100], rows
    t = track[0]
    assert t["datagrams_per_link_s"] >= 50  # every 1 s window holds 50 datagrams or more
    assert t["datagrams_per_window"] >= 50 and t["receiver_lost"] == 0 and t["sender"]["late_ms"] < 100, t
    assert abs(t["mean_ratio"] - 1) <= 0.02, t
    assert t["p95_tolerances_1000ms"] <= 1.0 and t["p95_tolerances_100ms"] <= 1.5, t
    assert t["driver_cpu"] < 0.3 and t["missed"] == 0, t
    d = alone[0]
    assert d["step_ms"] == 100 and d["missed_per_s"] == 0 and 50 <= d["changes_per_s"] <= 2 * 100 * 10, d
    assert naive[0]["rounds"] >= 2
    # a tc process per change costs far more than a change of the driver's
    assert naive[0]["per_change_ms"] > 10 * 1000 * d["cpu"] / d["changes_per_s"], (naive, d)
    tcp = [r for r in rows if r["kind"] == "tcp"][0]
    # TCP gets its capacity on average, and no link carries more than its trace allows (the
    # server's count of segments delivered: 0.989-0.998 on average, 1.002-1.011 at most in 10 runs)
    assert 0.3 <= tcp["goodput_ratio_min"] and 0.95 <= tcp["goodput_ratio_mean"] <= 1.01, tcp
    assert tcp["goodput_ratio_max"] <= 1.03 and abs(tcp["window_s"] - 5) < 0.1, tcp
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"rltr-tb{os.getpid()}")]
