"""The statistics as registered factories (registry kind ``"statistic"``).

A protocol names a statistic and its options; ``registry("statistic").spec(name, **options)``
binds them (defaults applied) into a frozen :class:`~creditaudit.registry.FactorySpec` that the
protocol freezes and the ledger rebuilds from, and ``registry("statistic").create(spec)``
returns a :class:`ConfiguredStatistic`: the function with those options fixed, called with the
data (and, for a random statistic, the named ``rng`` stream). Only the keyword options are
part of a spec; the data and the random stream never are.

Examples
--------
>>> from creditaudit.registry import registry
>>> import creditaudit.stats
>>> spec = registry("statistic").spec("wilson", confidence_level=0.9)
>>> spec.name, spec.args
('wilson', {'confidence_level': 0.9})
>>> round(registry("statistic").create(spec)(84, 139).ci[0], 3)
0.535
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from creditaudit.registry import registry
from creditaudit.stats import association, divergence, equivalence, matrices, proportions, rank, replay_helpers

__all__ = ["ConfiguredStatistic", "REGISTERED"]

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

    factory.__signature__ = inspect.Signature(options)  # what Registry.spec binds against
    factory.__name__ = f"{function.__name__}_factory"
    factory.__qualname__ = factory.__name__
    factory.__doc__ = f"Registered factory of :func:`creditaudit.stats.{function.__name__}` with its options fixed."
    return factory


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
    equivalence.mde,
    association.partial_corr,
    association.ols_standardized,
    association.cohens_kappa,
    divergence.js_divergence,
    divergence.js_divergence_matrix,
    matrices.partition_test,
    matrices.mantel,
    matrices.partial_mantel,
    replay_helpers.resolution_bound,
    replay_helpers.precision_at_pivotal_lift,
)

for _function in _FUNCTIONS:
    registry(_KIND).register(_function.__name__, version=1)(_factory(_function))

#: Registered statistics, by name (the function's name).
REGISTERED: tuple[str, ...] = tuple(f.__name__ for f in _FUNCTIONS)
