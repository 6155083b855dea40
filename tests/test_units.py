import pytest

from ratelimit.errors import FieldError
from ratelimit.spec.units import (format_rate, format_time, parse_percent, parse_rate_bps, parse_size_bytes,
                                  parse_time_us)


@pytest.mark.parametrize("text,bps", [
    ("28800", 28800), (28800, 28800), ("28.8kbit", 28800), ("1Mbit", 10**6), ("1mbit", 10**6),
    ("1.5gbit", 1_500_000_000), ("100bit", 100), ("1kibit", 1024), ("125kbps", 1_000_000), ("10bps", 80),
])
def test_rates_use_tc_meanings(text, bps):
    assert parse_rate_bps(text) == bps


@pytest.mark.parametrize("text", ["", "fast", "28.8 furlongs", "-5kbit", "1kbits", "0", True])
def test_bad_rates_name_the_field(text):
    with pytest.raises(FieldError) as info:
        parse_rate_bps(text, "--rate")
    assert str(info.value).startswith("--rate: ")


@pytest.mark.parametrize("text,us", [("400ms", 400_000), ("1.5s", 1_500_000), ("250us", 250), ("0ms", 0)])
def test_times(text, us):
    assert parse_time_us(text) == us


def test_a_time_needs_a_unit():
    with pytest.raises(FieldError, match=r"^--delay: '400' is not a time with a unit"):
        parse_time_us("400", "--delay")


@pytest.mark.parametrize("text,pct", [("0.5%", 0.5), ("1", 1.0), ("100%", 100.0), ("0%", 0.0)])
def test_percent(text, pct):
    assert parse_percent(text) == pct


@pytest.mark.parametrize("text", ["101%", "-1%", "5x"])
def test_bad_percent(text):
    with pytest.raises(FieldError):
        parse_percent(text, "--loss")


@pytest.mark.parametrize("text,size", [("1514", 1514), ("1514b", 1514), ("2kb", 2048), ("1k", 1024), ("1mb", 2**20)])
def test_sizes(text, size):
    assert parse_size_bytes(text) == size


def test_formats_round_trip_through_the_parsers():
    for bps in (28800, 14400, 56000, 10**6, 1_500_000, 9_000_000, 10**9, 33600, 8):
        assert parse_rate_bps(format_rate(bps)) == bps
    for us in (0, 250, 50_000, 200_000, 1_500):
        assert parse_time_us(format_time(us)) == us
