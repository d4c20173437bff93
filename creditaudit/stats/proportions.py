"""Proportions and multiplicity: Wilson interval, Holm step-down adjustment, sign agreement."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtri

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    check_open_unit,
    check_same_length,
    readonly,
)

__all__ = ["WilsonResult", "HolmResult", "SignAgreementResult", "wilson", "holm", "sign_agreement"]


def _wilson_bounds(successes: int, n: int, level: float) -> tuple[float, float]:
    z = float(ndtri(1.0 - (1.0 - level) / 2.0))
    p = successes / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n))
    return float(max(0.0, center - half)), float(min(1.0, center + half))


@dataclass(frozen=True)
class WilsonResult(Result):
    """A proportion with its Wilson score interval.

    Attributes
    ----------
    proportion : float
        ``successes / n``.
    ci : tuple of float
        Wilson interval at ``confidence_level``.
    successes, n : int
    confidence_level : float
    method : str
    """

    proportion: float
    ci: tuple[float, float]
    successes: int
    n: int
    confidence_level: float
    method: str

    def confidence_interval(self, level: float | None = None) -> tuple[float, float]:
        """Wilson interval at ``level`` (default: the level computed at)."""
        if level is None:
            return self.ci
        return _wilson_bounds(self.successes, self.n, check_open_unit("level", level))


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer):
        raise ValueError(f"`{name}` must be a non-negative integer count; got {value!r}")
    if value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer count; got {value!r}")
    return int(value)


def _wilson_iv(successes, n, confidence_level):
    successes = _count("successes", successes)
    n = _count("n", n)
    if n == 0:
        raise ValueError("`n` must be at least 1; a proportion of zero items is undefined")
    if successes > n:
        raise ValueError(f"`successes` ({successes}) must not exceed `n` ({n})")
    return successes, n, check_open_unit("confidence_level", confidence_level)


def wilson(successes: int, n: int, *, confidence_level: float = 0.95) -> WilsonResult:
    """Proportion with the Wilson score interval.

    Parameters
    ----------
    successes : int
        Count of successes, ``0 <= successes <= n``.
    n : int
        Number of trials, at least 1.
    confidence_level : float, default 0.95

    Returns
    -------
    WilsonResult

    Notes
    -----
    With :math:`\\hat p = s/n` and :math:`z = \\Phi^{-1}(1 - \\alpha/2)`:

    .. math:: \\frac{\\hat p + z^2/2n}{1 + z^2/n} \\pm \\frac{z}{1 + z^2/n}
              \\sqrt{\\frac{\\hat p(1-\\hat p)}{n} + \\frac{z^2}{4n^2}}

    References
    ----------
    .. [1] Wilson, E. B. (1927). Probable inference, the law of succession, and statistical
       inference. *JASA* 22(158), 209-212.
    .. [2] Newcombe, R. G. (1998). Two-sided confidence intervals for the single proportion.
       *Stat. Med.* 17(8), 857-872.

    Examples
    --------
    The judge family's sign agreement in the paper, 84 of 139 (60.4% [52.1, 68.2]):

    >>> from creditaudit.stats import wilson
    >>> res = wilson(84, 139)
    >>> round(res.proportion, 3), tuple(round(b, 3) for b in res.ci)
    (0.604, (0.521, 0.682))
    """
    successes, n, confidence_level = _wilson_iv(successes, n, confidence_level)
    return WilsonResult(
        proportion=successes / n,
        ci=_wilson_bounds(successes, n, confidence_level),
        successes=successes,
        n=n,
        confidence_level=confidence_level,
        method="wilson",
    )


@dataclass(frozen=True)
class HolmResult(Result):
    """Holm step-down adjustment of a family of p-values.

    Attributes
    ----------
    pvalues : numpy.ndarray
        The p-values as given (input order).
    pvalues_adjusted : numpy.ndarray
        Holm-adjusted p-values (input order).
    reject : numpy.ndarray of bool
        ``pvalues_adjusted <= alpha``.
    alpha : float
        Family-wise error rate.
    n_tests : int
    names : tuple of str or None
    method : str
    """

    pvalues: np.ndarray
    pvalues_adjusted: np.ndarray
    reject: np.ndarray
    alpha: float
    n_tests: int
    names: tuple[str, ...] | None
    method: str

    def to_frame(self) -> pd.DataFrame:
        """One row per hypothesis (a family has several), in input order."""
        frame = pd.DataFrame(
            {
                "pvalue": self.pvalues,
                "pvalue_adjusted": self.pvalues_adjusted,
                "reject": self.reject,
                "alpha": self.alpha,
                "method": self.method,
            }
        )
        if self.names is not None:
            frame.insert(0, "name", list(self.names))
        return frame


def _holm_iv(pvalues, alpha, names):
    try:
        p = np.asarray(pvalues, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("`pvalues` must be a 1-D array of numbers") from None
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"`pvalues` must be a non-empty 1-D array; got shape {p.shape}")
    nan = np.flatnonzero(np.isnan(p))
    if nan.size:
        raise ValueError(
            f"`pvalues` contains NaN at position(s) {nan.tolist()}: a confirmatory test that did not "
            "produce a p-value must be resolved (or removed from the family by a protocol amendment), "
            "not silently dropped"
        )
    if ((p < 0) | (p > 1)).any():
        raise ValueError("`pvalues` must lie in [0, 1]")
    alpha = check_open_unit("alpha", alpha)
    if names is not None:
        names = tuple(str(n) for n in names)
        if len(names) != p.size:
            raise ValueError(f"`names` must have one entry per p-value ({p.size}); got {len(names)}")
    return p, alpha, names


def holm(pvalues, *, alpha: float = 0.05, names=None) -> HolmResult:
    """Holm's step-down adjustment (strong family-wise error control).

    Parameters
    ----------
    pvalues : array_like
        One p-value per hypothesis of the family, in [0, 1]. NaN is refused (see Notes).
    alpha : float, default 0.05
        Family-wise error rate, in (0, 1).
    names : sequence of str, optional
        Hypothesis names (e.g. ``["C1", ..., "C6"]``), carried into :meth:`HolmResult.to_frame`.

    Returns
    -------
    HolmResult

    Notes
    -----
    Sort :math:`p_{(1)} \\le \\dots \\le p_{(m)}`; the adjusted values are
    :math:`\\tilde p_{(i)} = \\max_{j \\le i} \\min\\{1, (m - j + 1) p_{(j)}\\}`, and
    hypothesis :math:`(i)` is rejected when :math:`\\tilde p_{(i)} \\le \\alpha` (equivalently,
    step down while :math:`p_{(i)} \\le \\alpha/(m-i+1)`). Ties keep input order (the adjusted
    values of tied p-values are equal either way).

    NaN policy: a NaN p-value raises ``ValueError``. Passing it through would silently shrink
    the family (``m``) and so loosen every other test's threshold; in a preregistered family a
    test that produced no p-value must be resolved explicitly.

    References
    ----------
    .. [1] Holm, S. (1979). A simple sequentially rejective multiple test procedure.
       *Scand. J. Stat.* 6(2), 65-70.

    Examples
    --------
    >>> from creditaudit.stats import holm
    >>> res = holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    >>> [round(float(p), 3) for p in res.pvalues_adjusted]
    [0.03, 0.06, 0.06, 0.02]
    >>> res.reject.tolist()
    [True, False, False, True]
    """
    p, alpha, names = _holm_iv(pvalues, alpha, names)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted_sorted = np.maximum.accumulate(scaled)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return HolmResult(
        pvalues=readonly(p),
        pvalues_adjusted=readonly(adjusted),
        reject=readonly(adjusted <= alpha),
        alpha=alpha,
        n_tests=m,
        names=names,
        method="holm",
    )


@dataclass(frozen=True)
class SignAgreementResult(Result):
    """Share of items whose two signs agree, among items where both are nonzero.

    Attributes
    ----------
    proportion : float
        ``n_agree / n_both_nonzero``.
    ci : tuple of float
        Wilson interval at ``confidence_level``.
    n_agree : int
        Items with both signs nonzero and equal.
    n_both_nonzero : int
        Items where both signs are nonzero (the denominator).
    n_items : int
        All items given.
    n_zero_x, n_zero_y : int
        Items where ``x`` (resp. ``y``) is zero (an item can be in both).
    confidence_level : float
    method : str
    """

    proportion: float
    ci: tuple[float, float]
    n_agree: int
    n_both_nonzero: int
    n_items: int
    n_zero_x: int
    n_zero_y: int
    confidence_level: float
    method: str

    def confidence_interval(self, level: float | None = None) -> tuple[float, float]:
        """Wilson interval at ``level`` (default: the level computed at)."""
        if level is None:
            return self.ci
        return _wilson_bounds(self.n_agree, self.n_both_nonzero, check_open_unit("level", level))


def _sign_agreement_iv(x, y, confidence_level):
    x = as_1d_finite("x", x)
    y = as_1d_finite("y", y)
    check_same_length(x=x, y=y)
    return x, y, check_open_unit("confidence_level", confidence_level)


def sign_agreement(x, y, *, confidence_level: float = 0.95) -> SignAgreementResult:
    """Sign agreement between two per-item signals (credit and ``A_replay``) with a Wilson CI.

    Parameters
    ----------
    x, y : array_like
        Paired values; no NaN. Only signs matter; exact zeros have no sign.
    confidence_level : float, default 0.95

    Returns
    -------
    SignAgreementResult

    Raises
    ------
    ValueError
        If no item has both signs nonzero (the share is undefined).

    Notes
    -----
    :math:`\\hat a = \\#\\{i: \\operatorname{sign} x_i = \\operatorname{sign} y_i \\ne 0\\} /
    \\#\\{i: x_i \\ne 0, y_i \\ne 0\\}`, with the Wilson interval of :func:`wilson`.
    Chance agreement is not 0.5 in general; compare against the controls run through the same
    function.

    References
    ----------
    .. [1] Wilson, E. B. (1927). *JASA* 22(158), 209-212.

    Examples
    --------
    >>> from creditaudit.stats import sign_agreement
    >>> res = sign_agreement([0.5, -1.0, 0.0, 2.0, -0.1], [1.0, -0.5, 1.0, -1.0, 0.0])
    >>> res.n_agree, res.n_both_nonzero, res.n_items
    (2, 3, 5)
    """
    x, y, confidence_level = _sign_agreement_iv(x, y, confidence_level)
    sx, sy = np.sign(x), np.sign(y)
    both = (sx != 0) & (sy != 0)
    n_both = int(both.sum())
    if n_both == 0:
        raise ValueError("no item has both `x` and `y` nonzero; sign agreement is undefined")
    n_agree = int((both & (sx == sy)).sum())
    return SignAgreementResult(
        proportion=n_agree / n_both,
        ci=_wilson_bounds(n_agree, n_both, confidence_level),
        n_agree=n_agree,
        n_both_nonzero=n_both,
        n_items=int(x.size),
        n_zero_x=int((sx == 0).sum()),
        n_zero_y=int((sy == 0).sum()),
        confidence_level=confidence_level,
        method="sign agreement; wilson interval",
    )
