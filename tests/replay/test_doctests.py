"""Run the Examples of every creditaudit.replay module and subpackage module, so `pytest tests/replay`
covers them too."""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit.replay

MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(creditaudit.replay.__path__, "creditaudit.replay."))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
