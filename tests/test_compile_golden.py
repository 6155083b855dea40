"""Golden cases: request (as a person types it) -> exact plan script or exact error.

Each ``tests/cases/golden/*.json`` is one test (``generation``: the request's, default 0; ``server_side``: a
server's links on its host-side veth, as ``--container`` makes them).  Set ``UPDATE_GOLDEN=1`` to
rewrite the expected ``.sh`` files after a deliberate change, then review the diff.
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
    if os.environ.get("UPDATE_GOLDEN"):
        expected.write_text(text)
    assert text == expected.read_text()
