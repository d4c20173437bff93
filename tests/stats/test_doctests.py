"""Run the Examples of every creditaudit.stats module, so `pytest tests/stats` covers them too.

(`pytest creditaudit/stats` collects them directly through ``--doctest-modules``; the project's
``testpaths`` is ``tests``, so without this file a plain ``pytest`` would skip them.)
"""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit.stats

MODULES = sorted(name for _, name, _ in pkgutil.iter_modules(creditaudit.stats.__path__, "creditaudit.stats."))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_public_function_has_examples():
    finder = doctest.DocTestFinder()
    names = {t.name.rsplit(".", 1)[-1] for m in MODULES for t in finder.find(importlib.import_module(m)) if t.examples}
    functions = {n for n in creditaudit.stats.__all__ if callable(getattr(creditaudit.stats, n)) and n[0].islower()}
    assert functions <= names, sorted(functions - names)
