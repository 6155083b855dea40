"""Profiles people already know (issue 21, part 3): Chrome DevTools', Lighthouse's and
WebPageTest's presets, each checked against the numbers of the file its ``source`` cites.

The tables below copy each source's numbers as the source writes them (DevTools' and
Lighthouse's expressions, WebPageTest's ini lines); the conversion to rate and one-way delay
is done here, so a profile with a wrong conversion fails.
"""

import configparser
import io
import re

import pytest

from ratelimit.cli.main import Console, main
from ratelimit.profiles import catalog
from ratelimit.spec.units import format_rate


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Console(out, err))
    return code, out.getvalue(), err.getvalue()


# ChromeDevTools/devtools-frontend, front_end/core/sdk/NetworkManager.ts (commit
# 00d120bf0e61feb60bf7c31cf879454577904b77): download and upload in bytes/s, already scaled by
# DevTools' adjustment factor; latency per request = the target RTT x a multiplier.
DEVTOOLS_FILE = "front_end/core/sdk/NetworkManager.ts"
DEVTOOLS = {
    # profile: (constant, download, upload, targetLatency ms, latency multiplier)
    "devtools-slow-3g": ("Slow3GConditions", 500 * 1000 / 8 * .8, 500 * 1000 / 8 * .8, 400, 5),
    "devtools-slow-4g": ("Slow4GConditions", 1.6 * 1000 * 1000 / 8 * .9, 750 * 1000 / 8 * .9, 150, 3.75),
    "devtools-fast-4g": ("Fast4GConditions", 9 * 1000 * 1000 / 8 * .9, 1.5 * 1000 * 1000 / 8 * .9, 60, 2.75),
}

# GoogleChrome/lighthouse docs/throttling.md: the default is mobileSlow4G, simulated; its numbers
# are throttling.mobileSlow4G of core/config/constants.js (now lantern's Constants.ts, the same).
LIGHTHOUSE_FILES = ("docs/throttling.md", "core/config/constants.js")
DEVTOOLS_THROUGHPUT_ADJUSTMENT_FACTOR = 0.9
DEVTOOLS_RTT_ADJUSTMENT_FACTOR = 3.75
MOBILE_SLOW_4G = {
    "rttMs": 150,
    "throughputKbps": 1.6 * 1024,
    "requestLatencyMs": 150 * DEVTOOLS_RTT_ADJUSTMENT_FACTOR,
    "downloadThroughputKbps": 1.6 * 1024 * DEVTOOLS_THROUGHPUT_ADJUSTMENT_FACTOR,
    "uploadThroughputKbps": 750 * DEVTOOLS_THROUGHPUT_ADJUSTMENT_FACTOR,
}
LIGHTHOUSE_KBPS = 1024  # bit/s: the simulator runs at throughputKbps * 1024 (simulator.js)

# WPO-Foundation/webpagetest www/settings/connectivity.ini.sample (commit
# b85d6562cd7e4a9c22365902de1a47726b2497a8), the five presets as written there.
WPT_FILE = "www/settings/connectivity.ini.sample"
WPT_INI = """
[Cable]
label="Cable (5/1 Mbps 28ms RTT)"
bwIn=5000000
bwOut=1000000
latency=28
plr=0

[DSL]
label="DSL (1.5 Mbps/384 Kbps 50ms RTT)"
bwIn=1500000
bwOut=384000
latency=50
plr=0

[3GSlow]
label="3G Slow (400 Kbps, 400ms RTT)"
bwIn=400000
bwOut=400000
latency=400
plr=0
timeout=480

[3G]
label="3G (1.6 Mbps/768 Kbps 300ms RTT)"
bwIn=1600000
bwOut=768000
latency=300
plr=0
timeout=120

[LTE]
label="LTE (12 Mbps, 70ms RTT)"
bwIn=12000000
bwOut=12000000
latency=70
plr=0
"""
WPT = {"wpt-3g": "3G", "wpt-3g-slow": "3GSlow", "wpt-lte": "LTE", "wpt-cable": "Cable", "wpt-dsl": "DSL"}

# the shipped profile whose queue each new one takes (its comparable link)
QUEUE_AS = {"devtools-slow-3g": "3g", "devtools-slow-4g": "4g", "devtools-fast-4g": "4g", "lighthouse-mobile": "4g",
            "wpt-3g": "3g", "wpt-3g-slow": "3g", "wpt-lte": "lte", "wpt-cable": "cable", "wpt-dsl": "dsl"}
NEW = list(QUEUE_AS)


def expected():
    """profile -> (down bit/s, up bit/s, one-way delay us, loss %), converted from the sources."""
    table = {}
    for name, (_, download, upload, target_ms, _) in DEVTOOLS.items():
        # the scaled throughput (bytes/s -> bit/s) and the target RTT, half each way
        table[name] = (round(download * 8), round(upload * 8), round(target_ms * 1000 / 2), 0.0)
    # simulated (the default): unscaled; the upload before DevTools' factor
    lh = MOBILE_SLOW_4G
    table["lighthouse-mobile"] = (round(lh["throughputKbps"] * LIGHTHOUSE_KBPS),
                                  round(lh["uploadThroughputKbps"] / DEVTOOLS_THROUGHPUT_ADJUSTMENT_FACTOR * LIGHTHOUSE_KBPS),
                                  round(lh["rttMs"] * 1000 / 2), 0.0)
    ini = configparser.ConfigParser(interpolation=None)
    ini.optionxform = str
    ini.read_string(WPT_INI)
    for name, section in WPT.items():
        s = ini[section]
        # bwIn/bwOut in bit/s; latency a round trip in ms, half each way (wptagent); plr in percent
        table[name] = (int(s["bwIn"]), int(s["bwOut"]), round(int(s["latency"]) * 1000 / 2), float(s["plr"]))
    return table


EXPECTED = expected()


def test_the_sources_numbers_as_people_know_them():
    # the conversion above gives the figures the presets are known by
    assert EXPECTED["devtools-slow-3g"] == (400_000, 400_000, 200_000, 0.0)
    assert EXPECTED["devtools-slow-4g"] == (1_440_000, 675_000, 75_000, 0.0)
    assert EXPECTED["devtools-fast-4g"] == (8_100_000, 1_350_000, 30_000, 0.0)
    assert EXPECTED["lighthouse-mobile"] == (1_677_722, 768_000, 75_000, 0.0)
    assert EXPECTED["wpt-3g"] == (1_600_000, 768_000, 150_000, 0.0)
    assert EXPECTED["wpt-3g-slow"] == (400_000, 400_000, 200_000, 0.0)
    assert EXPECTED["wpt-lte"] == (12_000_000, 12_000_000, 35_000, 0.0)
    assert EXPECTED["wpt-cable"] == (5_000_000, 1_000_000, 14_000, 0.0)
    assert EXPECTED["wpt-dsl"] == (1_500_000, 384_000, 25_000, 0.0)
    # DevTools' per-request latency is a multiple of its target RTT, which is what we use
    assert [t * m for _, _, _, t, m in DEVTOOLS.values()] == [2000, 562.5, 165]
    assert MOBILE_SLOW_4G["requestLatencyMs"] == 562.5


def test_new_names_do_not_replace_ours():
    shipped = catalog.available()
    for name in NEW:
        assert shipped[name].parent == catalog.SHIPPED
    for old in ("3g", "4g", "lte", "cable", "dsl"):
        assert old not in NEW and old in shipped


@pytest.mark.parametrize("name", NEW)
def test_profile_numbers_are_the_sources(name):
    p = catalog.load(name)
    down_bps, up_bps, delay_us, loss_pct = EXPECTED[name]
    assert (p.down.rate_bps, p.up.rate_bps) == (down_bps, up_bps)
    assert (p.down.delay_us, p.up.delay_us) == (delay_us, delay_us)
    assert (p.down.loss_pct, p.up.loss_pct) == (loss_pct, loss_pct)
    # none of the sources has jitter or any other impairment
    for side in (p.down, p.up):
        assert (side.jitter_us, side.duplicate_pct, side.corrupt_pct, side.reorder_pct) == (0, 0, 0, 0)
    assert p.link.name == "ethernet" and p.link.overhead_bytes == 14  # IP packet + Ethernet header, no FCS
    comparable = catalog.load(QUEUE_AS[name])
    assert (p.down.queue, p.up.queue) == (comparable.down.queue, comparable.up.queue)
    assert p.down.burst is None and p.up.burst is None
    assert p.description


@pytest.mark.parametrize("name", NEW)
def test_source_names_its_file_and_commit(name):
    source = catalog.load(name).source
    if name in DEVTOOLS:
        files = (DEVTOOLS_FILE, DEVTOOLS[name][0])
    elif name in WPT:
        files = (WPT_FILE, f"[{WPT[name]}]", "traffic_shaping.py")
    else:
        files = LIGHTHOUSE_FILES
    for f in files:
        assert f in source
    assert re.search(r"\b[0-9a-f]{40}\b", source)  # the commit read
    assert "half each way" in source or "half of it in each direction" in source


@pytest.mark.parametrize("name", NEW)
def test_dry_run(name):
    code, out, err = run("--if", "eth0", "-h", "198.18.0.2", "-p", "1024", "--profile", name, "--dry-run")
    assert code == 0, err
    down_bps, up_bps, delay_us, _ = EXPECTED[name]
    assert f"htb rate {format_rate(down_bps)} " in out and f"htb rate {format_rate(up_bps)} " in out
    assert out.count(f"delay {delay_us // 1000}ms") == 2
    assert "stab" not in out  # Ethernet framing: no size table


def test_listed():
    code, out, _ = run("profiles")
    assert code == 0
    for name in NEW:
        assert f"\n{name} " in out
