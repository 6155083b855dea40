"""The package map is the code: each package's docstring says what it may import, and this
checks every import against it (docs/design.md, "The packages").  Pure: it reads the source.

- Every import of a module of ``ratelimit`` or ``webui``, at the top or inside a function,
  goes to its own package or to one its ``May import:`` line names (``ratelimit``'s own
  names, such as ``SOURCE_ROOT``, are everyone's).
- What the lines allow has no circle, and neither have the modules.
- A function-level import says why on its line or the one above it (or above the run of
  imports it is in): it saves start-up time, or it is of a part not every caller has.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("ratelimit", "webui")


def modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = modules()


def package(module: str) -> str | None:
    """``ratelimit.plan.ops`` -> ``plan``; ``webui.api`` -> ``webui``; the top (``ratelimit``,
    ``ratelimit.__main__``, ``ratelimit.errors``) -> None or ``errors``."""
    parts = module.split(".")
    if parts[0] == "webui":
        return "webui"
    if len(parts) == 1 or parts[1] == "__main__":
        return None
    return parts[1]


def allowed() -> dict[str, set[str]]:
    """Each package's ``May import:`` line, as a set of package names."""
    out = {"errors": set()}
    for name, path in MODULES.items():
        if path.name != "__init__.py" or name == "ratelimit":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found = re.search(r"^May import: (.*?)\.?$", doc, re.M)
        assert found, f"{path.relative_to(ROOT)}: its docstring has no 'May import:' line"
        names = re.sub(r"never .*", "", found.group(1)).replace("ratelimit's ", "")
        out[package(name)] = {w.strip() for w in names.replace(";", ",").split(",") if w.strip()}
    return out


def imports(module: str, path: Path):
    """(line number, imported module, at the top?, the lines around it) for each import of
    ours in ``module``."""
    source = path.read_text()
    tree = ast.parse(source)
    top = {id(node) for node in tree.body}
    lines = source.splitlines()
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in MODULES else origin for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        first = node.lineno - 1  # the import's first line, counted from 0
        while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
            first -= 1  # a run of imports shares the reason above its first line
        near = lines[max(0, first - 1):node.end_lineno]
        for target in dict.fromkeys(targets):
            if target in MODULES:
                yield node.lineno, target, id(node) in top, near


def test_every_package_says_what_it_may_import_and_imports_only_that():
    rules = allowed()
    wrong = []
    for module, path in MODULES.items():
        mine = package(module)
        for line, target, _, _ in imports(module, path):
            theirs = package(target)
            if mine is None or theirs is None or theirs == mine:
                continue
            if theirs not in rules.get(mine, set()):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {target} ({theirs} is not "
                             f"on its 'May import:' line)")
    assert not wrong, "\n".join(wrong)


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            return stack[stack.index(node):] + [node]
        if node in seen:
            return None
        seen.add(node)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt)
            if found:
                return found
        stack.pop()
        return None

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return None


def test_what_the_packages_may_import_has_no_circle():
    assert _circle(allowed()) is None


def test_no_module_imports_itself_through_others():
    graph = {m: {t for _, t, _, _ in imports(m, p) if t != m} for m, p in MODULES.items()}
    # a package imports its own modules only to re-export them (service): not a circle of code
    for m in graph:
        graph[m] = {t for t in graph[m] if not (MODULES[m].name == "__init__.py" and t.startswith(m + "."))}
        graph[m] = {t for t in graph[m] if not (MODULES[t].name == "__init__.py" and m.startswith(t + "."))}
    assert _circle(graph) is None


def test_a_function_level_import_says_why():
    silent = []
    for module, path in MODULES.items():
        for line, target, at_top, near in imports(module, path):
            if not at_top and not any("#" in text for text in near):
                silent.append(f"{path.relative_to(ROOT)}:{line}: imports {target} inside a function without a "
                              f"comment saying why")
    assert not silent, f"{len(silent)} function-level imports without a reason:\n" + "\n".join(silent)


@pytest.mark.parametrize("top", TOP)
def test_no_module_is_over_400_lines(top):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / top).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
