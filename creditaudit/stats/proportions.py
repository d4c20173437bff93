"""Proportions and multiplicity: Wilson interval, Holm step-down adjustment, sign agreement, and
the resolution bound of identical replay outcomes.

Where the numbers come from: the Wilson interval is
:func:`statsmodels.stats.proportion.proportion_confint` (``method='wilson'``) and Holm's adjusted
p-values are :func:`statsmodels.stats.multitest.multipletests` (``method='holm'``); this module
validates (a NaN p-value is refused, never dropped), counts and wraps. The resolution bound is a
closed form (the exact one-sided Clopper-Pearson bound for zero events), kept as such. The tests
check these against published worked examples (Newcombe 1998; the paper's intervals; Holm's
procedure by hand) and against scipy's beta quantile — not against statsmodels alone.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    check_open_unit,
    check_same_length,
    readonly,
)

__all__ = [
    "WilsonResult",
    "HolmResult",
    "SignAgreementResult",
    "wilson",
    "holm",
    "sign_agreement",
    "resolution_bound",
]


def _wilson_bounds(successes: int, n: int, level: float) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, n, alpha=1.0 - level, method="wilson")
    return float(low), float(high)


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

    def _interval(self, level: float) -> tuple[float, float]:
        return _wilson_bounds(self.successes, self.n, level)


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

    computed by :func:`statsmodels.stats.proportion.proportion_confint` (``method='wilson'``),
    which clips float error to [0, 1].

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

    The adjusted p-values are :func:`statsmodels.stats.multitest.multipletests`'s
    (``method='holm'``); ``reject`` is ``pvalues_adjusted <= alpha`` on them, so that the decision
    and the adjusted p-value a ledger prints can never disagree (statsmodels' own ``reject``
    compares :math:`p_{(i)}` with :math:`\\alpha/(m-i+1)`, which can differ from it in the last
    bit at the boundary).

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
    from statsmodels.stats.multitest import multipletests

    p, alpha, names = _holm_iv(pvalues, alpha, names)
    m = p.size
    adjusted = np.asarray(multipletests(p, alpha=alpha, method="holm")[1], dtype=float)
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

    def _interval(self, level: float) -> tuple[float, float]:
        return _wilson_bounds(self.n_agree, self.n_both_nonzero, level)


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


def _resolution_bound_iv(n, alpha):
    a = np.asarray(n)
    if a.dtype.kind not in "iu" or (a < 1).any():
        raise ValueError(f"`n` must be a positive integer (or array of them); got {n!r}")
    return a, check_open_unit("alpha", alpha)


def resolution_bound(n, *, alpha: float = 0.05):
    """One-sided bound on the outcome rate ``n`` identical replay outcomes cannot exclude.

    Parameters
    ----------
    n : int or array_like of int
        Replay outcomes in the arm (all equal), at least 1.
    alpha : float, default 0.05

    Returns
    -------
    float or numpy.ndarray
        :math:`1 - \\alpha^{1/n}` — a plain number (or array, for per-turn use), since this is a
        closed-form bound, not a test with evidence to carry.

    Notes
    -----
    If an arm's :math:`n` Bernoulli outcomes are all 0, every rate :math:`q` with
    :math:`(1-q)^n < \\alpha` is excluded at level :math:`\\alpha`; the largest rate not
    excluded is :math:`1 - \\alpha^{1/n}` (the exact Clopper-Pearson one-sided bound). A replay
    zero is a statement at this resolution, never "no effect" (docs/design.md §3). Kept in closed form:
    it equals the upper end of ``statsmodels``' ``proportion_confint(0, n, alpha=2 * alpha,
    method='beta')`` (tested against :func:`scipy.stats.beta` quantiles), without a quantile
    solver in the way of an exact formula.

    References
    ----------
    .. [1] Clopper, C. J. & Pearson, E. S. (1934). The use of confidence or fiducial limits
       illustrated in the case of the binomial. *Biometrika* 26(4), 404-413.
    .. [2] Hanley, J. A. & Lippman-Hand, A. (1983). If nothing goes wrong, is everything all
       right? *JAMA* 249(13), 1743-1745.

    Examples
    --------
    >>> from creditaudit.stats import resolution_bound
    >>> round(resolution_bound(3), 3)
    0.632
    >>> [round(float(b), 3) for b in resolution_bound([1, 3, 8])]
    [0.95, 0.632, 0.312]
    """
    a, alpha = _resolution_bound_iv(n, alpha)
    value = 1.0 - alpha ** (1.0 / a.astype(float))
    return float(value) if value.ndim == 0 else readonly(value)
