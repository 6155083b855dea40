"""Golden cases: request (as a person types it) -> exact plan script or exact error.

Each ``tests/cases/golden/*.json`` is one test (``generation``: the request's, default 0; ``server_side``: a
server's links on its host-side veth, as ``--container`` makes them).  Set ``UPDATE_GOLDEN=1`` to
rewrite the expected ``.sh`` files after a deliberate change: such a run fails every case it
rewrites, so review the diff and run the tests again without it.
"""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ratelimit.errors import RatelimitError
from ratelimit.plan.compile import compile_plan
from ratelimit.plan.script import script
from ratelimit.service import make_request

CASES = Path(__file__).parent / "cases" / "golden"
ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("path", sorted(CASES.glob("*.json")), ids=lambda p: p.stem)
def test_golden(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RATELIMIT_PROFILE_PATH", "")
    monkeypatch.setenv("HOME", "/nonexistent")
    case = json.loads(path.read_text())
    if "script" not in case:
        with pytest.raises(RatelimitError) as info:
            make_request(**case["request"])
        message = str(info.value)
        if "error" in case:
            assert message == case["error"]
        else:
            assert message.startswith(case["error_startswith"])
        assert "\n" not in message
        assert info.value.exit_code == case["exit_code"]
        return
    req = dataclasses.replace(make_request(**case["request"]), generation=case.get("generation", 0),
                              server_side=case.get("server_side", False))
    text = script(compile_plan(req).ops, req.netns)
    expected = CASES / case["script"]
    if os.environ.get("UPDATE_GOLDEN"):  # an update run never counts as a pass
        expected.write_text(text)
        pytest.fail(f"{expected.relative_to(ROOT)} rewritten from the compiler's output: review the diff, then "
                    f"run the tests without UPDATE_GOLDEN", pytrace=False)
    assert text == expected.read_text()


def test_an_update_run_rewrites_the_script_and_fails(tmp_path):
    """``UPDATE_GOLDEN=1`` writes the compiler's script over the expected one and fails, so an
    update run can never pass; the next run without it passes on the new file."""
    import shutil
    import subprocess
    import sys
    (tmp_path / "tests" / "cases" / "golden").mkdir(parents=True)
    shutil.copy(Path(__file__), tmp_path / "tests" / "test_compile_golden.py")
    case = next(p for p in sorted(CASES.glob("*.json")) if "script" in json.loads(p.read_text()))
    shutil.copy(case, tmp_path / "tests" / "cases" / "golden" / case.name)
    stale = tmp_path / "tests" / "cases" / "golden" / json.loads(case.read_text())["script"]
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("# an old script\n")

    def run(**env):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                               "-k", "test_golden", str(tmp_path / "tests" / "test_compile_golden.py")],
                              cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **env})
    updated = run(UPDATE_GOLDEN="1")
    assert updated.returncode == 1 and "rewritten from the compiler's output" in updated.stdout, updated.stdout
    assert stale.read_text() == (CASES / stale.name).read_text()
    again = run()
    assert again.returncode == 0, again.stdout
