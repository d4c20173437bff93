"""Shared validation helpers and the result base class of :mod:`creditaudit.stats`.

Nothing here is public; every public function validates its arguments in its own ``_..._iv``
function, built from these helpers, so that every message names the offending parameter in
backticks and, where the values are a closed set, lists the allowed ones.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import pandas as pd

ALTERNATIVES = ("two-sided", "less", "greater")

#: Tolerance for ties between a permuted statistic and the observed one. Permuted statistics that
#: equal the observed one mathematically can differ from it in the last bits; R vegan's
#: ``mantel``/``mantel.partial`` count ``perm >= statistic - sqrt(.Machine$double.eps)``, and so do we.
TIE_EPS = math.sqrt(np.finfo(float).eps)


def allowed(values) -> str:
    """``{'a', 'b'}`` — the set notation used in every message."""
    return "{" + ", ".join(repr(v) for v in values) + "}"


def check_choice(name: str, value: Any, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {allowed(choices)}; got {value!r}")
    return value


def check_alternative(alternative: Any) -> str:
    return check_choice("alternative", alternative, ALTERNATIVES)


def check_open_unit(name: str, value: Any) -> float:
    """A float strictly inside (0, 1): alpha, power, confidence levels."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a number in the open interval (0, 1); got {value!r}") from None
    if not (0.0 < v < 1.0):
        raise ValueError(f"`{name}` must be a number in the open interval (0, 1); got {value!r}")
    return v


def check_positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_batch(batch: Any) -> int | None:
    if batch is None:
        return None
    return check_positive_int("batch", batch)


def check_finite_float(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a finite number; got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"`{name}` must be a finite number; got {value!r}")
    return v


def as_1d_finite(name: str, x: Any, *, min_size: int = 1) -> np.ndarray:
    """A 1-D float array without NaN or infinities, of at least ``min_size`` elements."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a 1-D array of numbers") from None
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D; got an array of shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        shown = ", ".join(str(i) for i in bad[:5]) + (", ..." if bad.size > 5 else "")
        raise ValueError(
            f"`{name}` contains {bad.size} NaN or infinite value(s) (positions {shown}); "
            "exclude those items explicitly before calling"
        )
    if a.size < min_size:
        raise ValueError(f"`{name}` must have at least {min_size} element(s); got {a.size}")
    return a


def check_same_length(**arrays: np.ndarray) -> int:
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"`{k}` has {n}" for k, n in lengths.items())
        raise ValueError(f"{' and '.join(f'`{k}`' for k in lengths)} must have the same length; {desc}")
    return next(iter(lengths.values()))


def as_labels(name: str, labels: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Group labels -> (sorted unique labels, integer codes) for ``n`` items."""
    a = np.asarray(labels)
    if a.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D; got an array of shape {a.shape}")
    if a.size != n:
        raise ValueError(f"`{name}` must have one label per item ({n}); got {a.size}")
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise ValueError(f"`{name}` contains NaN labels")
    if a.dtype == object and any(v is None for v in a):
        raise ValueError(f"`{name}` contains None labels")
    try:
        uniques, codes = np.unique(a, return_inverse=True)
    except TypeError:
        raise ValueError(f"`{name}` labels must be mutually comparable (all str or all int)") from None
    return uniques, codes.reshape(-1)


def readonly(a: Any, dtype=None) -> np.ndarray:
    """A read-only copy, so that a frozen result cannot be changed through its arrays."""
    out = np.array(a, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """Two-sided percentile interval of the finite ``values`` (linear interpolation, R type 7)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        raise ValueError("every resample was degenerate; no interval can be formed")
    a = (1.0 - level) / 2.0
    low, high = np.quantile(finite, [a, 1.0 - a])
    return float(low), float(high)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, bool, numbers.Number, np.generic))


@dataclass(frozen=True)
class Result:
    """Base of every result: frozen, with a one-row :meth:`to_frame` view for notebooks.

    Scalars become columns; the interval field ``ci`` becomes ``ci_low``/``ci_high``; arrays
    (null or bootstrap distributions, per-group values) stay on the object and are left out of
    the frame.

    A result that carries an interval implements :meth:`_interval` (the interval at a validated
    level); :meth:`confidence_interval` is the one public entry point for all of them.
    """

    #: Level :meth:`confidence_interval` uses when none is given; ``None`` means "the interval
    #: the result was computed at", its ``ci`` field.
    _default_level: ClassVar[float | None] = None

    def confidence_interval(self, level: float | None = None):
        """The confidence interval at ``level``.

        Parameters
        ----------
        level : float, optional
            In (0, 1). Default: the interval the result carries (its ``ci`` field, at the level it
            was computed at) — or, for a result without one, its class's default level.

        Returns
        -------
        tuple of float
            ``(low, high)``; an array of such rows for a result with several estimates
            (:class:`~creditaudit.stats.OLSResult`).
        """
        if level is None:
            if self._default_level is None:
                if not any(f.name == "ci" for f in fields(self)):
                    return self._interval(None)  # a result without an interval says so
                return self.ci
            level = self._default_level
        return self._interval(check_open_unit("level", level))

    def _interval(self, level: float | None):
        raise TypeError(f"{type(self).__name__} carries no confidence interval")

    def _frame_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "ci" and isinstance(v, tuple) and len(v) == 2:
                row[f"{f.name}_low"], row[f"{f.name}_high"] = v
            elif _is_scalar(v):
                row[f.name] = v
        return row

    def to_frame(self) -> pd.DataFrame:
        """One-row :class:`pandas.DataFrame` of the scalar fields (intervals split in two)."""
        return pd.DataFrame([self._frame_row()])


def check_band(low, high):
    """An equivalence band ``[low, high]`` of finite floats with ``low < high``."""
    low = check_finite_float("low", low)
    high = check_finite_float("high", high)
    if not low < high:
        raise ValueError(f"`low` must be below `high` (the band is [low, high]); got low={low}, high={high}")
    return low, high
