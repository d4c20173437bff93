"""One doctest collector for the whole package: run the Examples of every ``creditaudit`` module and
check that every package's ``__all__`` names exist.

The project's ``testpaths`` is ``tests``, so ``--doctest-modules`` alone would skip the package's
docstrings; this file collects them for a plain ``pytest``.
"""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit
import creditaudit.stats

MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(creditaudit.__path__, "creditaudit."))
PACKAGES = sorted(name for _, name, ispkg in pkgutil.walk_packages(creditaudit.__path__, "creditaudit.") if ispkg)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", PACKAGES)
def test_public_api_is_exported(name):
    package = importlib.import_module(name)
    for exported in getattr(package, "__all__", ()):
        assert hasattr(package, exported), f"{name}.__all__ names {exported!r}, which it does not define"


def test_every_public_statistics_function_has_examples():
    finder = doctest.DocTestFinder()
    stats_modules = [m for m in MODULES if m.startswith("creditaudit.stats.")]
    names = {t.name.rsplit(".", 1)[-1] for m in stats_modules for t in finder.find(importlib.import_module(m))
             if t.examples}
    functions = {n for n in creditaudit.stats.__all__ if callable(getattr(creditaudit.stats, n)) and n[0].islower()}
    assert functions <= names, sorted(functions - names)
