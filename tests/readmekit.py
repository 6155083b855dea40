"""The README's code blocks, as the doc checks read them (tests/test_readme*.py, tests/kernel).

``blocks()`` gives each fenced block with its language; ``commands(kind)`` the README's shell
lines of one kind, by their first words.  A check runs them as written, with the changes it
names (its own lab name, a namespace of its own), so none can rot.

>>> any("ratelimit lab demo" in c for c in commands("install"))
True
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def blocks(path: Path = README) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of ``path``, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M)]


def shell_lines(path: Path = README) -> list[str]:
    """Every command of the ``sh`` blocks, comments and blank lines left out."""
    out = []
    for lang, text in blocks(path):
        if lang == "sh":
            for line in text.splitlines():
                command = line.split("  #")[0].strip()
                if command and not command.startswith("#"):
                    out.append(command)
    return out


KINDS = {
    "install": lambda c: "pip install" in c,
    "tests": lambda c: c.startswith("bash .ci/install"),
    "container": lambda c: c.startswith("ratelimit --container"),
    "router": lambda c: c.startswith("ratelimit --if eth0"),
    "dashboard": lambda c: c.startswith(("ratelimit lab up", "ratelimit web")),
}


def commands(kind: str) -> list[str]:
    """The README's shell commands of ``kind`` (a ``KINDS`` key), in order."""
    return [c for c in shell_lines() if KINDS[kind](c)]


def unchecked() -> list[str]:
    """The README's shell commands no kind takes: none may be left unchecked."""
    return [c for c in shell_lines() if not any(test(c) for test in KINDS.values())]


def python_blocks() -> list[str]:
    return [text for lang, text in blocks() if lang == "python"]
