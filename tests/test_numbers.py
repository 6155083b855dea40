"""Every number a user gives: a value within the field's bounds, or the field's own one-line
error -- never a traceback, never another field's message, never exit 70.

What each kind of hostile number gets (docs/numbers.md):

- other scripts' digits (``٣``, full-width ``１２``), ``_`` separators, hex, a sign on text
  (``-0``, ``+5``), the words ``inf`` and ``nan``: "is not a <what the field takes>";
- NaN as a JSON or TOML number: the same;
- numbers no float holds (``1e309``, a JSON or TOML infinity, an int of 400 digits):
  "is out of range (<the field's range>)";
- ``-0.0`` as a JSON or TOML number: 0, then the field's range decides (0% loss is fine,
  a rate of 0 is out of range).

Property tests run every parser in ``units.py`` (and the selectors and web parsers built on
it) over any string or JSON value; the table tests run hostile values through the command
line, the web API and profile files as a user would.
"""

import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit.cli.main import Console, main
from ratelimit.errors import EXIT_USAGE, FieldError
from ratelimit.lab.provision import check_clients
from ratelimit.spec import linklayer, units
from ratelimit.spec.model import Burst, Queue
from ratelimit.spec.selectors import parse_port_range, parse_ports
from ratelimit.webui.cli import web_main
from ratelimit.webui.query import parse_share

# ---------------------------------------------------------------- values a user (or a script) may send

_UNITS = ["", "bit", "kbit", "mbit", "gbit", "tbit", "kibit", "bps", "kbps", "b", "k", "kb", "mb", "gb", "us", "ms",
          "s", "sec", "%", "p", "pkt", "packets", "x", "e", "inf", "nan"]
_DIGITS = st.sampled_from("0123456789") | st.characters(categories=["Nd"])  # every script's digits
_NUMBERISH = st.builds(
    lambda sign, a, dot, b, exp, unit, pad: f"{pad}{sign}{a}{dot}{b}{exp}{unit}{pad}",
    st.sampled_from(["", "", "-", "+"]), st.text(_DIGITS, max_size=6), st.sampled_from(["", "", "."]),
    st.text(_DIGITS, max_size=4), st.sampled_from(["", "", "e309", "E-3", "e99999", "e+2"]), st.sampled_from(_UNITS),
    st.sampled_from(["", "", " ", "\t", "\u2003"]))
ANY_VALUE = (_NUMBERISH | st.text(max_size=30) | st.sampled_from(["inf", "-inf", "nan", "1_000", "0x10", "9" * 400])
             | st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.integers(min_value=10**300)
             | st.booleans() | st.none() | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(), st.integers()))


def _field_error_or(parse, field, value):
    """``parse(value)``'s result, or None after checking it raised the field's own error."""
    try:
        return parse(value)
    except FieldError as err:
        text = str(err)
        assert err.field == field and text.startswith(f"{field}: "), text
        assert "\n" not in text and len(text) < 300, text
        return None


# ---------------------------------------------------------------- properties of each parser

@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_rates_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_rate_bps(v, "--rate"), "--rate", value)
    assert got is None or (type(got) is int and 8 <= got <= units.MAX_RATE_BPS)


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_sizes_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_size_bytes(v, "--mtu"), "--mtu", value)
    assert got is None or (type(got) is int and 1 <= got < 2**32)


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_times_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_time_us(v, "--delay"), "--delay", value)
    assert got is None or (type(got) is int and 0 <= got <= 3600 * 10**6)


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_percentages_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_percent(v, "--loss"), "--loss", value)
    assert got is None or (0 <= got <= 100 and math.copysign(1, got) == 1)  # never -0%


AMOUNTS = {"v03": (1, 100000), "pkts": (1, 1_000_000), "us": (1, 3600 * 10**6), "bytes": (1, 2**32 - 1)}


@pytest.mark.parametrize("parse,field,kind,units_taken", [(units.parse_burst, "--burst", Burst, {"v03", "us", "bytes"}),
                                                          (units.parse_queue, "--queue", Queue, {"pkts", "us", "bytes"})])
@settings(max_examples=400, deadline=None)
@given(value=ANY_VALUE)
def test_bursts_and_queues_are_within_bounds_or_refused(parse, field, kind, units_taken, value):
    got = _field_error_or(parse, field, value)
    assert got is None or isinstance(got, kind)
    if got is not None:
        lo, hi = AMOUNTS[got.unit]
        assert got.unit in units_taken and lo <= got.amount <= hi, got


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_counts_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_count(v, "--mpu", 0, 65535), "--mpu", value)
    assert got is None or (type(got) is int and 0 <= got <= 65535)


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_seconds_are_within_bounds_or_refused(value):
    got = _field_error_or(lambda v: units.parse_seconds(v, "--interval", 0.2, 60), "--interval", value)
    assert got is None or (type(got) is float and 0.2 <= got <= 60)


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_bare_numbers_are_finite_or_none(value):
    got = units.decimal(value)
    assert got is None or (type(got) is float and math.isfinite(got))
    whole = units.whole_number(value)
    assert whole is None or type(whole) is int
    if isinstance(value, str) and not value.isascii():
        assert got is None and whole is None  # other scripts' digits are refused


@settings(max_examples=400, deadline=None)
@given(ANY_VALUE)
def test_ports_are_within_bounds_or_refused(value):
    got = _field_error_or(parse_ports, "--ports", value) if isinstance(value, str) and value.strip() else None
    for lo, hi in got or ():
        assert 1 <= lo <= hi <= 65535
    one = _field_error_or(parse_port_range, "--ports", value)
    assert one is None or 1 <= one[0] <= one[1] <= 65535


@settings(max_examples=300, deadline=None)
@given(ANY_VALUE)
def test_lab_clients_are_within_bounds_or_refused(value):
    got = _field_error_or(check_clients, "--clients", value)
    assert got is None or 1 <= got <= 253


@settings(max_examples=300, deadline=None)
@given(ANY_VALUE)
def test_link_overheads_are_within_bounds_or_refused(value):
    overhead = value if isinstance(value, int) and not isinstance(value, bool) else None
    got = _field_error_or(lambda v: linklayer.layer(v, overhead, "--link"), "--link", value)
    got = got or _field_error_or(lambda v: linklayer.layer("atm", v, "--link"), "--link overhead", overhead)
    assert got is None or -linklayer.IP_TCP_HEADER_BYTES <= got.overhead_bytes <= 256


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20) | _NUMBERISH.map(lambda s: f"{s}-{s}"))
def test_rate_share_ranges_are_finite_and_ordered_or_refused(text):
    try:
        lo, hi = parse_share(text)
    except ValueError as err:
        assert "is not a range of rate shares" in str(err) and "\n" not in str(err)
        return
    assert math.isfinite(lo) and 0 <= lo < hi


# ---------------------------------------------------------------- the answers written down, per class

@pytest.mark.parametrize("value,expected", [
    ("٣٠٠", "is not a rate"), ("１２", "is not a rate"), ("1_000", "is not a rate"), ("0x10", "is not a rate"),
    ("-0", "is not a rate"), ("+5", "is not a rate"), ("inf", "is not a rate"), ("nan", "is not a rate"),
    (float("nan"), "is not a rate"), ("1e309", "is out of range"), (math.inf, "is out of range"),
    (-math.inf, "is out of range"), (10**400, "is out of range"), (-0.0, "is out of range"), ("9" * 400, "is out of range"),
])
def test_each_class_of_hostile_rate_gets_its_answer(value, expected):
    with pytest.raises(FieldError, match=f"^--rate: .*{expected}"):
        units.parse_rate_bps(value, "--rate")


def test_minus_zero_from_a_document_is_zero():
    assert units.parse_percent(-0.0, "loss") == 0 and math.copysign(1, units.parse_percent(-0.0, "loss")) == 1
    assert units.parse_count(-0.0, "--mpu", 0, 10) == 0


def test_long_and_unprintable_values_are_shortened_to_one_line():
    with pytest.raises(FieldError) as err:
        units.parse_rate_bps("1\n2" + "3" * 500, "--rate")
    text = str(err.value)
    assert "\n" not in text and "(503 characters)" in text and len(text) < 200, text


@pytest.mark.parametrize("text,expected", [
    ("9" * 60000, "is out of range"), ("9" * 60000 + "x!", "is not a rate"), (" " * 60000 + "5x!", "is not a rate"),
    ("1" + " " * 30000 + "kbit", "is not a rate"),
])
def test_a_value_as_long_as_a_request_body_is_refused_like_a_short_one(text, expected):
    with pytest.raises(FieldError, match=f"^--rate: .*\\({len(text)} characters\\) {expected}"):
        units.parse_rate_bps(text, "--rate")


# ---------------------------------------------------------------- hostile numbers as a user gives them

HOSTILE = ["1e309", "-1e309", "inf", "nan", "NaN", "٣", "１２", "1_000", "0x1f", "-0", "9" * 400, "1e99999"]
CLI_FIELDS = ["--rate", "--burst", "--bandwidth", "--mtu", "--avpkt", "--mpu", "--queue", "--delay", "--jitter",
              "--loss", "--delay-correlation", "--duplicate", "--corrupt", "--reorder"]


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Console(out, err))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("option", CLI_FIELDS)
def test_the_command_line_names_the_option_of_a_hostile_number(option, value):
    code, out, err = _cli("--if", "eth0", "-h", "198.18.0.2", "-p", "1024", "--delay", "10ms", "--mode", "shape",
                          option, value, "--dry-run")
    assert code == EXIT_USAGE and out == "", (code, err)
    assert err.startswith(f"ratelimit: {option}: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["٣", "1e309", "nan", "0x10", "1_0", "²"])
def test_ports_and_lab_clients_refuse_hostile_numbers(value):
    code, _, err = _cli("--if", "eth0", "-h", "198.18.0.2", "-p", value, "--dry-run")
    assert code == EXIT_USAGE and err.startswith("ratelimit: --ports: ") and err.count("\n") == 1, err
    code, _, err = _cli("lab", "up", "--name", "rlnum", "--clients", value)
    assert code == EXIT_USAGE and err.startswith("ratelimit: --clients: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("argv,field", [
    (["--interval", "nan"], "--interval"), (["--interval", "inf"], "--interval"), (["--interval", "1e309"], "--interval"),
    (["--interval", "٣"], "--interval"), (["--history", "-0"], "--history"), (["--history", "9" * 400], "--history"),
    (["--listen", "127.0.0.1:²"], "--listen"), (["--listen", "127.0.0.1:٨٠"], "--listen"),
    (["--listen", "127.0.0.1:1e3"], "--listen"),
])
def test_the_dashboard_command_refuses_hostile_numbers(argv, field):
    out, err = io.StringIO(), io.StringIO()
    code = web_main(argv, stdout=out, stderr=err, serve=lambda *a: pytest.fail("served"))
    assert code == EXIT_USAGE and err.getvalue().startswith(f"ratelimit web: {field}: "), err.getvalue()
    assert err.getvalue().count("\n") == 1


@pytest.mark.parametrize("argv,field", [
    (["--cpus", "٣"], "--cpus"), (["--cpus", "1e309"], "--cpus"), (["--cpus", "0"], "--cpus"),
    (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"), (["--timeout", "-0"], "--timeout"),
])
def test_the_vm_command_refuses_hostile_numbers(argv, field):
    code, _, err = _cli("vm", *argv, "--", "true")
    assert code == EXIT_USAGE and err.startswith(f"ratelimit: {field}: ") and err.count("\n") == 1, err


PROFILE_VALUES = [("rate", "inf"), ("rate", "nan"), ("rate", "-inf"), ("rate", "1e309"), ("rate", "-0.0"),
                  ("rate", "99999999999999999999999"), ("delay", "1e309"), ("delay", "nan"), ("loss", "inf"),
                  ("loss", "nan"), ("queue", "1e309"), ("burst", "inf"), ("rate", '"٣kbit"')]


@pytest.mark.parametrize("key,value", PROFILE_VALUES)
def test_profile_files_name_the_field_of_a_hostile_number(tmp_path, key, value):
    path = tmp_path / "hostile.toml"
    path.write_text(f"[down]\nrate = \"28.8kbit\"\n{key} = {value}\n" if key != "rate" else f"[down]\n{key} = {value}\n")
    code, _, err = _cli("--if", "eth0", "-h", "198.18.0.2", "-p", "1024", "--profile", str(path), "--dry-run")
    assert code == EXIT_USAGE, err
    assert err.startswith(f"ratelimit: profile {path}: [down] {key}: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("overhead", ["inf", "nan", "1e309", "99999999999999999999999", "-0.0", '"٣"'])
def test_profile_link_overheads_refuse_hostile_numbers(tmp_path, overhead):
    path = tmp_path / "hostile.toml"
    path.write_text(f"[link]\nlayer = \"atm\"\noverhead = {overhead}\n[down]\nrate = \"1mbit\"\n")
    code, _, err = _cli("--if", "eth0", "-h", "198.18.0.2", "-p", "1024", "--profile", str(path), "--dry-run")
    assert code == EXIT_USAGE and err.startswith(f"ratelimit: profile {path}: [link] overhead: "), err


# ---------------------------------------------------------------- the web API

API_FIELDS = ["rate", "burst", "bandwidth", "mtu", "avpkt", "mpu", "queue", "delay", "jitter", "loss", "duplicate",
              "corrupt", "reorder", "delay_correlation"]
API_HOSTILE = ["1e309", "-1e309", "NaN", "Infinity", "-Infinity", "1" + "0" * 400, '"٣"', '"1e309"', '"nan"']


@pytest.fixture
def api():
    from test_webui import TOKEN, FakeControl, FakeReader, make_app
    app, _ = make_app(FakeReader(), FakeControl())
    client = app.test_client()

    def post(body: str):
        return client.post("/api/apply", data=body, content_type="application/json",
                           headers={"X-Ratelimit-Token": TOKEN})
    return post


@pytest.mark.parametrize("value", API_HOSTILE)
@pytest.mark.parametrize("field", API_FIELDS)
def test_the_api_names_the_field_of_a_hostile_number(api, field, value):
    extra = ', "delay": "10ms"' if field in ("jitter", "reorder", "delay_correlation") else ""
    resp = api(f'{{"interface": "eth0", "hosts": "198.18.0.2", "ports": "1024", "mode": "shape"{extra}, '
               f'"{field}": {value}}}')
    assert resp.status_code == 400, resp.get_data(as_text=True)
    message = resp.get_json()["error"]
    assert message.startswith(f"--{field.replace('_', '-')}: ") and "\n" not in message, message


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(API_FIELDS), ANY_VALUE)
def test_any_json_value_in_an_api_field_is_applied_or_refused_by_that_field(field, value):
    from test_webui import TOKEN, FakeControl, FakeReader, make_app
    app, _ = make_app(FakeReader(), FakeControl())
    body = {"interface": "eth0", "hosts": "198.18.0.2", "ports": "1024", "mode": "shape", "delay": "10ms", field: value}
    resp = app.test_client().post("/api/apply", data=json.dumps(body), content_type="application/json",
                                  headers={"X-Ratelimit-Token": TOKEN})
    if resp.status_code == 200:
        return
    message = resp.get_json()["error"]
    assert resp.status_code == 400 and "\n" not in message, (resp.status_code, message)
    assert message.startswith((f"--{field.replace('_', '-')}: ", f"{field}: ")), message


@pytest.mark.parametrize("query,field", [
    ("limit=1e309", "limit"), ("limit=%D9%A3", "limit"), ("offset=nan", "offset"), ("offset=-0", "offset"),
    ("limit=99999999999999999999999", "limit"), ("share=nan-1", "share"), ("share=inf-", "share"),
    ("share=%EF%BC%91-2", "share"), ("port=%C2%B2", "port"), ("port=1e3", "port"),
])
def test_the_api_query_refuses_hostile_numbers(query, field):
    from test_webui import FakeControl, FakeReader, make_app
    app, _ = make_app(FakeReader(), FakeControl())
    resp = app.test_client().get(f"/api/links?{query}")
    assert resp.status_code == 400, resp.get_data(as_text=True)
    message = resp.get_json()["error"]
    assert message.startswith(f"{field}: ") and "\n" not in message, message
