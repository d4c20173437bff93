"""Run the Examples of every creditaudit.signals module, so `pytest tests/signals` covers them too."""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit.signals

MODULES = sorted(name for _, name, _ in pkgutil.iter_modules(creditaudit.signals.__path__, "creditaudit.signals."))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_public_api_is_exported():
    for name in creditaudit.signals.__all__:
        assert hasattr(creditaudit.signals, name), name
