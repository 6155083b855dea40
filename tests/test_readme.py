"""The README and the docs' index hold what a newcomer needs, and every command in them runs.

The pure checks are here: its length, its links, the docs' index, and that each of its
commands is one that a check runs (``readmekit.KINDS``):

- ``router`` lines: tests/kernel/test_readme_kernel.py, in a namespace with an ``eth0`` of its
  own, in the full-kernel VM (the profiles' delays need netem);
- ``dashboard`` lines: ``test_the_readme_dashboard_commands_show_the_labs_link`` below;
- the ``python`` block: ``test_the_pytest_example_passes`` below;
- ``container`` lines: tests/test_containers_uses.py, on containers of its own names;
- ``install``: tests/test_install.py, on a fresh Debian root file system;
- ``tests``: CI runs it (``.ci/run``), and this file checks that it is the command there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request

import pytest

from readmekit import README, ROOT, commands, python_blocks, shell_lines, unchecked

DOCS = ROOT / "docs"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def test_the_readme_reads_in_two_minutes():
    text = README.read_text()
    assert len(text.splitlines()) <= 150 and len(text.split()) <= 1500, (len(text.splitlines()), len(text.split()))


def test_the_docs_index_lists_every_doc():
    index = (DOCS / "README.md").read_text()
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, missing


@pytest.mark.parametrize("doc", [README, DOCS / "README.md", DOCS / "cli.md"], ids=lambda p: p.name)
def test_every_link_of_the_readme_and_the_index_leads_somewhere(doc):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(), re.M)}
            if anchor not in anchors:
                broken.append(target)
    assert not broken, broken


def test_every_command_of_the_readme_is_one_a_check_runs():
    assert shell_lines() and not unchecked(), unchecked()
    assert commands("router") and commands("container") and commands("dashboard") and commands("install")
    assert len(python_blocks()) == 1


def test_the_readme_test_command_is_the_one_ci_runs():
    (test_command,) = commands("tests")
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command == "bash .ci/install && python -m pytest -ra tests"
    assert "bash .ci/install" in ci and "exec python -m pytest -ra tests" in ci


@pytest.mark.netns
def test_the_pytest_example_passes(tmp_path):
    """The README's test, as a file of a user's suite; the plugin comes with the install
    (here, from the checkout)."""
    from test_pytest_plugin import run_pytest
    (example,) = python_blocks()
    path = tmp_path / "test_readme_example.py"
    path.write_text(example)
    r = run_pytest(tmp_path, "-p", "no:xdist", str(path), cwd=tmp_path)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.mark.netns
def test_the_readme_dashboard_commands_show_the_labs_link(tmp_path):
    """The lab with a name of the test's own (and ``--no-delay``: the host has no netem), the
    dashboard on a port of its own: its ``/api/status`` shows the lab's link."""
    up, web = commands("dashboard")
    name = f"rmd{os.getpid() % 100000}"
    env = {**os.environ, "RATELIMIT_STATE_DIR": str(tmp_path / "state")}
    up = up.replace("ratelimit lab up", f"ratelimit lab up --name {name}", 1) + " --no-delay"  # the host: no netem
    web = web.replace("rl-lab-", f"rl-{name}-") + " --listen 127.0.0.1:0 --read-only"
    r = subprocess.run(_argv(up), env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, f"{up}: {r.stderr.strip()[-600:]}"
    proc = None
    try:
        proc = subprocess.Popen(_argv(web), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        deadline = time.monotonic() + 300
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"{web}: ended: {proc.stderr.read()[-600:]}"
            if "serving " in line:
                url = line.split("serving ", 1)[1].split()[0]
        assert url, f"{web}: said nothing of where it serves"
        for _ in range(100):  # its first poll
            status = json.load(urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=30))
            if status.get("applied"):
                break
            time.sleep(0.2)
        # 4 clients, an IPv4 and an IPv6 address each, one link per host each way
        assert status["applied"]["profile"] == "modem-28k8" and status["applied"]["links"] == 16, status["applied"]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        subprocess.run(_argv(f"ratelimit lab down --name {name}"), env=env, capture_output=True, timeout=300, cwd=ROOT)


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "ratelimit", line
    return [sys.executable, "-m", "ratelimit", *words[1:]]
