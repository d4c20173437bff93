"""Run the Examples of every creditaudit.training_arms module."""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit.training_arms

MODULES = sorted(name for _, name, _ in pkgutil.iter_modules(creditaudit.training_arms.__path__,
                                                             "creditaudit.training_arms."))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_public_api_is_exported():
    for name in creditaudit.training_arms.__all__:
        assert hasattr(creditaudit.training_arms, name), name
