"""The README's commands for a router, run as written (tests/readmekit.py): in the full-kernel
VM, where the profiles' delays have netem and police mode its policer.

- A ``router`` line runs in a namespace of the test's own with an ``eth0`` of its own (a veth),
  as ``--netns`` names it, with a private state directory; each must succeed, one after the
  other, and the last ``--clean`` leaves the device as it was.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from readmekit import commands


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "ratelimit", line
    return [sys.executable, "-m", "ratelimit", *words[1:]]


def _qdiscs(ns: str) -> str:
    return subprocess.run(["tc", "-n", ns, "-d", "qdisc", "show"], capture_output=True, text=True, check=True).stdout


@pytest.mark.kernel("netem", "police", "ifb", "mirred")
def test_the_readme_router_commands_run_one_after_the_other(netns, tmp_path, monkeypatch):
    """Each line through the command line's ``main`` in this process, with ``--netns``: a
    process per line took 14-39 s in the emulated VM, most of it starting Python."""
    import io
    from ratelimit.cli.main import Console, main
    ns = netns("rdm")
    for argv in (["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"],
                 ["ip", "-n", ns, "link", "set", "eth0", "up"], ["ip", "-n", ns, "link", "set", "eth1", "up"]):
        subprocess.run(argv, check=True, capture_output=True)
    monkeypatch.setenv("RATELIMIT_STATE_DIR", str(tmp_path / "state"))
    before = _qdiscs(ns)
    lines = commands("router")
    assert lines[-1] != "ratelimit --if eth0 --clean"  # the last block applies: clean after it
    for line in [*lines, "ratelimit --if eth0 --clean"]:
        out, err = io.StringIO(), io.StringIO()
        code = main([*_argv(line)[3:], "--netns", ns], Console(out, err))
        assert code == 0, f"{line}: exit {code}: {err.getvalue().strip()[-600:]}"
        if "--stats --json" in line:
            assert json.loads(out.getvalue())["applied"] is not None
    assert _qdiscs(ns) == before
