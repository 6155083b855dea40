"""save / restore without root: the file, its errors, the command line and the systemd unit."""

import configparser
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ratelimit.cli import persist
from ratelimit.cli.main import Console, main
from ratelimit.errors import NotFoundError, UsageError
from ratelimit.service import make_request
from ratelimit.state import records

UNIT = Path(__file__).resolve().parent.parent / "contrib" / "ratelimit-restore.service"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Console(out, err))
    return code, out.getvalue(), err.getvalue()


def test_the_default_file_is_under_etc_unless_overridden(monkeypatch, tmp_path):
    monkeypatch.delenv("RATELIMIT_CONFIG_DIR", raising=False)
    assert persist.default_file() == Path("/etc/ratelimit/links.json")
    monkeypatch.setenv("RATELIMIT_CONFIG_DIR", str(tmp_path))
    assert persist.default_file() == tmp_path / "links.json"


def test_a_saved_file_loads_as_the_requests(tmp_path):
    reqs = [make_request("rlh0", netns="rlhd-a", hosts="198.18.1.2,2001:db8::2", ports="5000-5009",
                         profile="modem-28k8", per="host"),
            make_request("eth1", hosts="198.18.1.3", ports="80", rate="14.4kbit", burst="3")]
    path = tmp_path / "links.json"
    path.write_text(json.dumps({"version": 1, "saved": "now", "links": [records.to_json(r) for r in reqs]}))
    assert persist.load(path) == reqs


@pytest.mark.parametrize("text,error,fragment", [
    (None, NotFoundError, "does not exist (write it with: ratelimit save)"),
    ("{", UsageError, "is not valid JSON"),
    ("{\"version\": 2, \"links\": []}", UsageError, "is not a file ratelimit save wrote (version 1, a list of links)"),
    ("{\"version\": 1, \"links\": [{\"interface\": \"eth0\"}]}", UsageError, "link 1: does not hold a ratelimit request"),
])
def test_a_bad_file_is_one_line(tmp_path, text, error, fragment):
    path = tmp_path / "links.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(error) as info:
        persist.load(path)
    assert str(info.value).startswith(f"restore: {path}") and fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("argv,message", [
    (["save", "--bogus"], "--bogus: not an option (see ratelimit save --help)"),
    (["save", "a", "b"], "save: 'b' is an argument too many (see ratelimit save --help)"),
    (["restore", "--forse"], "--forse: not an option (see ratelimit restore --help)"),
])
def test_save_and_restore_arguments(argv, message):
    code, out, err = run(*argv)
    assert (code, out, err) == (2, "", f"ratelimit: {message}\n")


def test_the_unit_restores_the_default_file_at_boot():
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str
    unit.read(UNIT)
    assert unit["Service"]["Type"] == "oneshot"
    assert unit["Service"]["ExecStart"].split()[-2:] == ["ratelimit", "restore"]
    assert unit["Unit"]["ConditionPathExists"] == "/etc/ratelimit/links.json" == str(
        Path("/etc/ratelimit") / persist.FILE_NAME)
    assert "network-online.target" in unit["Unit"]["After"] and unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd; .ci/install installs it)")
    result = subprocess.run([analyze, "verify", str(UNIT)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    broken = tmp_path / UNIT.name  # the check can fail: a unit with a typo does not pass
    broken.write_text(UNIT.read_text().replace("Type=oneshot", "Type=oneshott"))
    assert subprocess.run([analyze, "verify", str(broken)], capture_output=True, text=True).stderr
