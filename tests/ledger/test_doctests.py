"""Run the Examples of every creditaudit.ledger module, and check the public API is exported."""

import doctest
import importlib
import pkgutil

import pytest

import creditaudit.ledger
import creditaudit.ledger.producers

MODULES = sorted(
    [name for _, name, _ in pkgutil.iter_modules(creditaudit.ledger.__path__, "creditaudit.ledger.")]
    + [name for _, name, _ in pkgutil.iter_modules(creditaudit.ledger.producers.__path__, "creditaudit.ledger.producers.")]
)


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_public_api_is_exported():
    for name in creditaudit.ledger.__all__:
        assert hasattr(creditaudit.ledger, name), name
