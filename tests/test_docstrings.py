"""Every example in a docstring of ``ratelimit`` and ``webui`` runs and shows what it says
(a docstring states the contract and gives one example: docs/design.md).  Pure."""

import doctest
import importlib
import pkgutil

import pytest

import ratelimit
from ratelimit import webui


def _modules() -> list[str]:
    names = []
    for pkg in (ratelimit, webui):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
                  if not m.name.endswith("__main__")]
    return names


@pytest.mark.parametrize("name", _modules())
def test_the_examples_of_each_module_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (see above)"
