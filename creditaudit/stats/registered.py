"""The statistics as named factories (kind ``"statistic"``, :mod:`creditaudit.stats.factories`).

A protocol names a statistic and its options; ``factories("statistic").spec(name, **options)``
binds them (defaults applied) into a frozen :class:`~creditaudit.stats.factories.FactorySpec` that the
protocol freezes and the ledger rebuilds from, and ``factories("statistic").create(spec)``
returns a :class:`ConfiguredStatistic`: the function with those options fixed, called with the
data (and, for a random statistic, the named ``rng`` stream). Only the keyword options are
part of a spec; the data and the random stream never are.

Examples
--------
>>> from creditaudit.stats.factories import factories
>>> import creditaudit.stats
>>> spec = factories("statistic").spec("wilson", confidence_level=0.9)
>>> spec.name, spec.args
('wilson', {'confidence_level': 0.9})
>>> round(factories("statistic").create(spec)(84, 139).ci[0], 3)
0.535
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from creditaudit.stats.factories import factories
from creditaudit.stats import association, divergence, equivalence, matrices, power, proportions, rank

__all__ = ["ConfiguredStatistic", "REGISTERED", "register_statistic"]

_KIND = "statistic"


@dataclass(frozen=True)
class ConfiguredStatistic:
    """A statistic with its options fixed: ``configured(*data, rng=stream)``.

    Attributes
    ----------
    name : str
        Registered name.
    function : callable
        The :mod:`creditaudit.stats` function.
    options : Mapping
        The keyword options (read-only).
    """

    name: str
    function: Callable[..., Any]
    options: Mapping[str, Any]

    @property
    def is_random(self) -> bool:
        return "rng" in inspect.signature(self.function).parameters

    def __call__(self, *data: Any, rng: Any = None) -> Any:
        if self.is_random:
            return self.function(*data, **self.options, rng=rng)
        if rng is not None:
            raise ValueError(f"statistic {self.name!r} is not random; it takes no `rng`")
        return self.function(*data, **self.options)


def _factory(function: Callable[..., Any]) -> Callable[..., ConfiguredStatistic]:
    options = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "rng"
    ]

    def factory(**kwargs: Any) -> ConfiguredStatistic:
        return ConfiguredStatistic(function.__name__, function, MappingProxyType(dict(kwargs)))

    factory.__signature__ = inspect.Signature(options)  # what Factories.spec binds against
    factory.__name__ = f"{function.__name__}_factory"
    factory.__qualname__ = factory.__name__
    factory.__doc__ = f"Registered factory of :func:`{function.__module__}.{function.__name__}` with its options fixed."
    factory.statistic = function
    return factory


def _same_statistic(factory: Callable[..., Any], function: Callable[..., Any]) -> bool:
    """Whether ``factory`` was made for ``function`` — or for the same function of a re-executed
    module (``pytest --doctest-modules --import-mode=importlib`` imports a module file a second
    time, creating new function objects with the same module and qualified name)."""
    known = getattr(factory, "statistic", None)
    return known is not None and (known.__module__, known.__qualname__) == (function.__module__, function.__qualname__)


def register_statistic(function: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``function`` as a statistic (kind ``"statistic"``, version 1) under its own name.

    For statistics defined outside :mod:`creditaudit.stats` — the audit's
    :func:`~creditaudit.audit.precision_at_pivotal_lift` registers itself when
    :mod:`creditaudit.audit.metrics` is imported. Returns ``function`` unchanged.
    """
    stats = factories(_KIND)
    if function.__name__ in stats.names() and _same_statistic(stats._entry(function.__name__).factory, function):
        return function  # already registered (a second execution of the defining module)
    stats.register(function.__name__, version=1)(_factory(function))
    return function


_FUNCTIONS = (
    rank.group_spearman,
    rank.median_spearman,
    proportions.wilson,
    proportions.holm,
    proportions.sign_agreement,
    equivalence.tost_paired,
    equivalence.tost_ind,
    equivalence.superiority_paired,
    equivalence.superiority_ind,
    power.mde,
    association.partial_corr,
    association.ols_standardized,
    association.cohens_kappa,
    divergence.js_divergence,
    divergence.js_divergence_matrix,
    matrices.partition_test,
    matrices.mantel,
    matrices.partial_mantel,
    proportions.resolution_bound,
)

for _function in _FUNCTIONS:
    register_statistic(_function)

#: Registered statistics, by name (the function's name).
REGISTERED: tuple[str, ...] = tuple(f.__name__ for f in _FUNCTIONS)
