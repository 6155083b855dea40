"""Traced links' inputs (pure: no kernel): mahimahi trace files and schedules.

What a good file must give (mm-link's rules: one opportunity a line, repeats, the
period), and what a bad one must get: one line naming the file and the line (a trace)
or the step and the field (a schedule), never a traceback, and for a path that is not a
regular file, no read at all.
"""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ratelimit.errors import RatelimitError
from ratelimit.profiles.catalog import load_named
from ratelimit.traces import schedulefile, tracefile

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def load_schedule(path):
    """A schedule file, its steps' profiles found as the command line finds them."""
    return schedulefile.load(path, load_named)


def refused(load, path, *parts: str) -> str:
    """The error ``load(path)`` raises: one line, naming ``path`` and each of ``parts``."""
    with pytest.raises(RatelimitError) as err:
        load(str(path))
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    assert str(path) in message, message
    for part in parts:
        assert re.search(part, message), (part, message)
    return message


def test_a_trace_is_its_opportunities_and_its_period(tmp_path):
    trace = tracefile.load(str(write(tmp_path, "t.down", "0\n5\n5\n0000000000012")))  # no newline at the end: read
    assert list(trace.timestamps_ms) == [0, 5, 5, 12]
    assert (trace.period_ms, trace.opportunities, trace.name) == (12, 4, "t.down")
    assert trace.mean_bps == pytest.approx(4 * 1504 * 8 / 0.012)
    assert tracefile.PACKET_BYTES == 1504  # mahimahi's PACKET_SIZE (src/frontend/link_queue.hh)


def test_the_size_limits_leave_room_for_mahimahis_largest_trace():
    # Verizon-LTE-driving.down: about 1.1 million lines in 7.8 MB; the longest lasts 1,064,718 ms
    assert tracefile.MAX_LINES >= 3 * 1_100_000 and tracefile.MAX_BYTES >= 3 * 7_844_811
    assert tracefile.MAX_PERIOD_MS >= 60 * 1_064_718


TRACE_CASES = {
    # name: (file bytes, patterns the message must hold)
    "empty": (b"", [r"holds no timestamps"]),
    "only a newline": (b"\n", [r"line 1: is empty"]),
    "decreasing": (b"1\n3\n2\n", [r"line 3: 2 is less than 3 on line 2", "never decrease"]),
    "not a number": (b"1\nabc\n", [r"line 2: abc is not a timestamp"]),
    "ends at 0": (b"0\n0\n", [r"line 2: 0 is the last timestamp", "longer than 0"]),
    "empty line inside": (b"1\n\n2\n", [r"line 2: is empty"]),
    "blank line at the end": (b"1\n2\n\n", [r"line 3: is empty"]),
    "windows line ends": (b"1\r\n2\r\n", [r"line 1: .*carriage return"]),
    "a byte that is not ascii": (b"1\n\xff\n", [r"line 2: .*0xff.*not ASCII"]),
    "other scripts' digits": ("1\n\u0663\n".encode(), [r"line 2: .*not ASCII"]),
    "a sign": (b"1\n-5\n", [r"line 2: -5 is not a timestamp"]),
    "a fraction": (b"1\n1.5\n", [r"line 2: 1.5 is not a timestamp"]),
    "a leading space": (b" 5\n", [r"line 1:  5 is not a timestamp"]),
    "a nul byte": (b"1\n2\x00\n", [r"line 2: .*is not a timestamp"]),
    "beyond a day": (b"1\n86400001\n", [r"line 2: 86400001 is beyond 86,400,000 ms"]),
    "a huge number": (b"1\n" + b"9" * 40 + b"\n", [r"line 2: .*is beyond"]),
}


@pytest.mark.parametrize("name", TRACE_CASES)
def test_a_bad_trace_gets_one_line_naming_the_file_and_the_line(tmp_path, name):
    data, parts = TRACE_CASES[name]
    refused(tracefile.load, write(tmp_path, "bad.down", data), *parts)


def test_a_trace_over_the_line_limit_is_refused_at_the_first_line_too_many(tmp_path):
    path = write(tmp_path, "long.down", b"1\n" * (tracefile.MAX_LINES + 1))
    refused(tracefile.load, path, rf"line {tracefile.MAX_LINES + 1:,}: is past {tracefile.MAX_LINES:,} lines")
    assert len(tracefile.load(str(write(tmp_path, "ok.down", b"1\n" * tracefile.MAX_LINES))).timestamps_ms) \
        == tracefile.MAX_LINES


def test_a_trace_over_the_byte_limit_is_refused_on_its_size_unread(tmp_path):
    path = tmp_path / "big.down"
    with path.open("wb") as f:
        f.truncate(tracefile.MAX_BYTES + 1)  # sparse: nothing is written, and nothing must be read
    refused(tracefile.load, path, rf"is {tracefile.MAX_BYTES + 1:,} bytes, more than the {tracefile.MAX_BYTES:,}")


@pytest.mark.parametrize("kind", ["directory", "character device", "FIFO", "socket", "missing"])
def test_a_path_that_is_not_a_regular_file_is_refused_before_reading(tmp_path, kind):
    if kind == "directory":
        path, why = tmp_path, "is a directory"
    elif kind == "character device":
        path, why = Path("/dev/zero"), "is a character device"  # reading it would never end
    elif kind == "FIFO":
        path, why = tmp_path / "fifo", "is a FIFO"  # opening it for reading would wait for a writer
        os.mkfifo(path)
    elif kind == "socket":
        path, why = tmp_path / "sock", "is a socket"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
    else:
        path, why = tmp_path / "nothing.down", r"cannot be opened \(No such file or directory\)"
    refused(tracefile.load, path, why)
    refused(load_schedule, path, why)


def test_an_unreadable_trace_is_refused(tmp_path):
    path = write(tmp_path, "secret.down", b"1\n")
    path.chmod(0)
    # root reads any file: the loader runs without the capabilities that let it
    code = ("import sys\nfrom ratelimit.traces import tracefile\nfrom ratelimit.errors import RatelimitError\n"
            "try:\n    tracefile.load(sys.argv[1])\nexcept RatelimitError as e:\n    print(e)")
    out = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c", code,
                          str(path)], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out == f"trace {path}: cannot be opened (Permission denied)\n"


TRAIN = REPO / "profiles" / "schedules" / "train.toml"


def test_a_schedule_takes_its_profiles_numbers_and_its_own(tmp_path):
    s = load_schedule(str(TRAIN))
    assert (s.loop, s.period_ms, s.name, len(s.steps)) == (True, 55_000, "train.toml", 3)
    cable, tunnel, g3 = s.steps
    assert (cable.duration_ms, cable.down, cable.up) == \
        (20_000, schedulefile.Side(5_000_000, 14_000, 0.0), schedulefile.Side(1_000_000, 14_000, 0.0))
    assert (tunnel.down.rate_bps, tunnel.up.rate_bps, tunnel.description) == (0, 0, "the tunnel")
    assert g3.down == schedulefile.Side(1_600_000, 150_000, 0.5) and g3.up == schedulefile.Side(768_000, 150_000, 0.5)
    assert s.needs_netem()
    own = TRAIN.read_text().replace('profile = "3g"', 'profile = "3g"\ndown = { loss = "0%", rate = "2mbit" }')
    g3 = load_schedule(str(write(tmp_path, "own.toml", own))).steps[2]
    assert g3.down == schedulefile.Side(2_000_000, 150_000, 0.0) and g3.up.loss_pct == 0.5
    plain = schedulefile.parse('[[step]]\nduration = "1s"\ndown = { rate = "1mbit" }\nup = { rate = "64kbit" }', load_named)
    assert plain.loop and not plain.needs_netem()  # loops by default, as mm-link does


STEP = '[[step]]\nduration = "5s"\nprofile = "3g"\n'
SCHEDULE_CASES = {
    "negative duration": ('[[step]]\nduration = "-5s"\nprofile = "3g"', [r"step 1 duration: '-5s' is negative"]),
    "negative number": ('[[step]]\nduration = -5\nprofile = "3g"', [r"step 1 duration: '-5' is negative"]),
    "zero duration": (STEP + '[[step]]\nduration = "0s"\nprofile = "3g"', [r"step 2 duration: '0s' is not whole"]),
    "a fraction of a millisecond": ('[[step]]\nduration = "1500us"\nprofile = "3g"', [r"step 1 duration: '1500us'"]),
    "no unit": ('[[step]]\nduration = 5\nprofile = "3g"', [r"step 1 duration: 5 is not a time with a unit"]),
    "over an hour": ('[[step]]\nduration = "2h"\nprofile = "3g"', [r"step 1 duration: '2h' is not a time"]),
    "no duration": ('[[step]]\nprofile = "3g"', [r"step 1: duration: none given"]),
    "unknown top key": ('loops = true\n' + STEP, [r"'loops' is not a field \(allowed: description, source, loop"]),
    "unknown step key": (STEP + 'rate = "1mbit"\n', [r"step 1: 'rate' is not a field \(allowed: duration"]),
    "unknown side key": (STEP + 'down = { jitter = "5ms" }\n', [r"step 1 down: 'jitter' is not a field"]),
    "unknown profile": ('[[step]]\nduration = "5s"\nprofile = "5g"', [r"step 1 profile: '5g' is not a profile"]),
    "a path for a profile": ('[[step]]\nduration = "5s"\nprofile = "../3g"', [r"step 1 profile: .* is not a profile"]),
    "rate out of range": (STEP + 'up = { rate = "5bit" }', [r"step 1 up.rate: '5bit' is out of range \(0, or 8bit"]),
    "rate not a rate": (STEP + 'down = { rate = "fast" }', [r"step 1 down.rate: 'fast' is not a rate"]),
    "negative rate": (STEP + 'down = { rate = "-1mbit" }', [r"step 1 down.rate: '-1mbit' is not a rate"]),
    "no rate": ('[[step]]\nduration = "5s"\ndown = { rate = "1mbit" }', [r"step 1 up.rate: none given"]),
    "a profile without a rate": ('[[step]]\nduration = "5s"\nprofile = "lan-0ms"', [r"step 1 down.rate: none given"]),
    "loss out of range": (STEP + 'down = { loss = "120%" }', [r"step 1 down.loss: '120%' is not a percentage"]),
    "negative delay": (STEP + 'down = { delay = "-5ms" }', [r"step 1 down.delay: '-5ms' is negative"]),
    "a delay without a unit": (STEP + 'up = { delay = 5 }', [r"step 1 up.delay: 5 is not a time with a unit"]),
    "a delay over an hour": (STEP + 'down = { delay = "3601s" }', [r"step 1 down.delay: '3601s' is out of range"]),
    "negative loss": (STEP + 'up = { loss = "-1%" }', [r"step 1 up.loss: '-1%' is not a percentage from 0%"]),
    "loss over 100%": (STEP + 'down = { loss = "100.5%" }', [r"step 1 down.loss: '100.5%' is not a percentage"]),
    "loss not a number": (STEP + 'down = { loss = "lots" }', [r"step 1 down.loss: 'lots' is not a loss \(a percentage as in 0.5%, or a model"]),
    "no steps": ('description = "nothing"', [r"no steps"]),
    "blackhole not a boolean": (STEP + 'blackhole = "yes"\n', [r"step 1 blackhole: yes is not true or false"]),
    "blackhole and a loss": (STEP + 'blackhole = true\nup = { loss = "1%" }\n',
                             [r"step 1 up.loss: not with blackhole = true"]),
    "loop not a boolean": ('loop = "yes"\n' + STEP, [r"loop: yes is not true or false"]),
    "a step that is not a table": ('step = [1]', [r"step 1: int is not a table"]),
    "not toml": ('[[step]\nduration = "5s"', [r"is not TOML"]),
    "not utf-8": (b'description = "\xff"\n' + STEP.encode(), [r"is not UTF-8 text"]),
}


@pytest.mark.parametrize("name", SCHEDULE_CASES)
def test_a_bad_schedule_gets_one_line_naming_the_file_step_and_field(tmp_path, name):
    text, parts = SCHEDULE_CASES[name]
    refused(load_schedule, write(tmp_path, "bad.toml", text), *parts)


def test_a_blackholed_step_loses_every_packet_both_ways_at_its_rate_and_delay(tmp_path):
    """Its rate and delay stay (its profile's here): what the link held still leaves; its
    loss is 100% each way, which gives its sides a netem stage."""
    sched = load_schedule(write(tmp_path, "dark.toml", STEP + STEP + 'blackhole = true\n'))
    lit, dark = sched.steps
    assert dark.blackhole and not lit.blackhole
    for d in ("down", "up"):
        assert dark.side(d).loss_pct == schedulefile.BLACKHOLE_LOSS_PCT == 100.0 and dark.side(d).loss_model is None
        assert (dark.side(d).rate_bps, dark.side(d).delay_us) == (lit.side(d).rate_bps, lit.side(d).delay_us)
        assert sched.needs_netem(d)


def test_a_schedule_over_its_limits_is_refused(tmp_path):
    many = STEP * (schedulefile.MAX_STEPS + 1)
    refused(load_schedule, write(tmp_path, "many.toml", many), rf"has {schedulefile.MAX_STEPS + 1:,} steps")
    day = '[[step]]\nduration = "3600s"\ndown = { rate = "1mbit" }\nup = { rate = "1mbit" }\n' * 25
    refused(load_schedule, write(tmp_path, "long.toml", day), r"lasts 90,000,000 ms; .* at most 86,400,000 ms")
    path = tmp_path / "big.toml"
    with path.open("wb") as f:
        f.truncate(schedulefile.MAX_BYTES + 1)
    refused(load_schedule, path, r"bytes, more than the")
