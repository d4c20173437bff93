"""Equivalence and superiority for the training-arm comparisons (docs/design.md §6); the minimum
detectable effect is :mod:`creditaudit.stats.power`.

Readings are "equivalent", "different" or "inconclusive" — a non-significant difference test is
never read as "no difference". Bounds are in the raw units of the outcome: the ±3 pp band on a
success rate is ``low=-0.03, high=0.03``.

Where the numbers come from: the TOST and superiority t-tests, their standard errors, degrees of
freedom and intervals are computed by :mod:`statsmodels.stats.weightstats` (``ttost_paired``,
``CompareMeans.ttost_ind``, ``DescrStatsW.ttest_mean``, ``CompareMeans.ttest_ind``,
``tconfint_mean``/``tconfint_diff``); this module validates, wraps the numbers in frozen results
and applies the reading rule. The tests check every number against R (``equivalence::tost``,
``t.test``; values published with statsmodels' test suite), scipy and pingouin — never against
statsmodels alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    check_band,
    check_choice,
    check_finite_float,
    check_open_unit,
    check_same_length,
)

__all__ = [
    "READINGS",
    "TostResult",
    "SuperiorityResult",
    "tost_paired",
    "tost_ind",
    "superiority_paired",
    "superiority_ind",
    "equivalence_reading",
]

#: The only readings a comparison may receive.
READINGS = ("equivalent", "different", "inconclusive")
_USEVAR = ("pooled", "unequal")


@dataclass(frozen=True)
class TostResult(Result):
    """Two one-sided tests (TOST) for equivalence within ``[low, high]``.

    Attributes
    ----------
    estimate : float
        Mean difference (``mean(x - y)`` paired, ``mean(x) - mean(y)`` independent).
    pvalue : float
        TOST p-value, ``max(pvalue_lower, pvalue_upper)``.
    statistic_lower, pvalue_lower : float
        t and p of H0: difference <= ``low``.
    statistic_upper, pvalue_upper : float
        t and p of H0: difference >= ``high``.
    difference_statistic, difference_pvalue : float
        Two-sided t-test of H0: difference = 0 (for the reading rule).
    se : float
    df : float
    low, high : float
        The equivalence band (raw units).
    alpha : float
    ci : tuple of float
        The ``1 - 2 alpha`` interval of the difference (equivalence iff it lies inside the band).
    n1, n2 : int
        Sample sizes (equal for a paired test).
    reading : str
        ``equivalence_reading`` of this result.
    method : str
    """

    estimate: float
    pvalue: float
    statistic_lower: float
    pvalue_lower: float
    statistic_upper: float
    pvalue_upper: float
    difference_statistic: float
    difference_pvalue: float
    se: float
    df: float
    low: float
    high: float
    alpha: float
    ci: tuple[float, float]
    n1: int
    n2: int
    reading: str
    method: str

    @property
    def equivalent(self) -> bool:
        return self.pvalue <= self.alpha

    def _interval(self, level: float) -> tuple[float, float]:
        """Two-sided t interval of the difference (``ci`` is the one at ``1 - 2 alpha``)."""
        q = float(sps.t.ppf(1.0 - (1.0 - level) / 2.0, self.df))
        return self.estimate - q * self.se, self.estimate + q * self.se


@dataclass(frozen=True)
class SuperiorityResult(Result):
    """One-sided t-test of H1: difference > ``margin``.

    Attributes
    ----------
    estimate : float
        Mean difference.
    statistic : float
        ``(estimate - margin) / se``.
    pvalue : float
        One-sided p-value.
    margin : float
        Superiority margin in raw units (0 for plain superiority; negative for non-inferiority).
    se, df : float
    alpha : float
    ci : tuple of float
        One-sided ``1 - alpha`` interval ``(lower bound, inf)``.
    superior : bool
        ``pvalue <= alpha``.
    n1, n2 : int
    method : str
    """

    estimate: float
    statistic: float
    pvalue: float
    margin: float
    se: float
    df: float
    alpha: float
    ci: tuple[float, float]
    superior: bool
    n1: int
    n2: int
    method: str

    def _interval(self, level: float) -> tuple[float, float]:
        """One-sided interval ``(lower, inf)`` (``ci`` is the one at ``1 - alpha``)."""
        return self.estimate - float(sps.t.ppf(level, self.df)) * self.se, math.inf


def _paired_iv(x, y):
    x = as_1d_finite("x", x, min_size=2)
    y = as_1d_finite("y", y, min_size=2)
    check_same_length(x=x, y=y)
    if np.ptp(x - y) == 0.0:
        raise ValueError("the paired differences `x - y` are all equal (zero variance): the t statistic is undefined")
    return x, y


def _ind_iv(x, y, usevar):
    x = as_1d_finite("x", x, min_size=2)
    y = as_1d_finite("y", y, min_size=2)
    usevar = check_choice("usevar", usevar, _USEVAR)
    if np.ptp(x) == 0.0 and np.ptp(y) == 0.0:
        raise ValueError("`x` and `y` are both constant (zero variance): the t statistic is undefined")
    return x, y, usevar


def _compare_means(x, y):
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    return CompareMeans(DescrStatsW(x), DescrStatsW(y))


def _ind_se_df(cm, usevar: str) -> tuple[float, float]:
    if usevar == "pooled":
        return float(cm.std_meandiff_pooledvar), float(cm.d1.nobs + cm.d2.nobs - 2)
    return float(cm.std_meandiff_separatevar), float(cm.dof_satt())


def _tost_result(estimate, se, df, tost, difference, ci, low, high, alpha, n1, n2, method) -> TostResult:
    pvalue, (t_low, p_low, _), (t_high, p_high, _) = tost
    t0, p0, _ = difference
    pvalue = float(pvalue)
    return TostResult(
        estimate=float(estimate),
        pvalue=pvalue,
        statistic_lower=float(t_low),
        pvalue_lower=float(p_low),
        statistic_upper=float(t_high),
        pvalue_upper=float(p_high),
        difference_statistic=float(t0),
        difference_pvalue=float(p0),
        se=float(se),
        df=float(df),
        low=low,
        high=high,
        alpha=alpha,
        ci=(float(ci[0]), float(ci[1])),
        n1=n1,
        n2=n2,
        reading=_reading(pvalue, float(p0), alpha),
        method=method,
    )


def _reading(tost_pvalue: float, difference_pvalue: float, alpha: float) -> str:
    if tost_pvalue <= alpha:
        return "equivalent"
    if difference_pvalue <= alpha:
        return "different"
    return "inconclusive"


def tost_paired(x, y, *, low: float, high: float, alpha: float = 0.05) -> TostResult:
    """Paired two one-sided t-tests for equivalence of ``mean(x - y)`` within ``[low, high]``.

    Parameters
    ----------
    x, y : array_like
        Paired outcomes (e.g. per-task success of two arms on the same held-out tasks); no NaN,
        same length, at least 2.
    low, high : float
        Equivalence band in raw units, ``low < high`` (±3 pp: ``low=-0.03, high=0.03``).
    alpha : float, default 0.05
        Level of each one-sided test.

    Returns
    -------
    TostResult

    Notes
    -----
    With :math:`d = x - y`, :math:`\\bar d`, :math:`se = s_d/\\sqrt n`, :math:`df = n - 1`:
    :math:`t_L = (\\bar d - low)/se`, :math:`p_L = P(T_{df} > t_L)`;
    :math:`t_U = (\\bar d - high)/se`, :math:`p_U = P(T_{df} < t_U)`;
    :math:`p = \\max(p_L, p_U)`. Equivalence at level alpha iff the :math:`1-2\\alpha` interval
    lies inside the band. See :func:`equivalence_reading` for the reading. Computed by
    :func:`statsmodels.stats.weightstats.ttost_paired` (the two one-sided tests) and
    ``DescrStatsW`` (mean, standard error, difference test, interval).

    References
    ----------
    .. [1] Schuirmann, D. J. (1987). A comparison of the two one-sided tests procedure and the
       power approach for assessing the equivalence of average bioavailability.
       *J. Pharmacokinet. Biopharm.* 15(6), 657-680.
    .. [2] Lakens, D. (2017). Equivalence tests. *Soc. Psychol. Personal. Sci.* 8(4), 355-362.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import tost_paired
    >>> x = np.array([0.50, 0.52, 0.48, 0.51, 0.49, 0.50, 0.53, 0.47])
    >>> y = np.array([0.50, 0.51, 0.49, 0.50, 0.50, 0.49, 0.52, 0.48])
    >>> res = tost_paired(x, y, low=-0.03, high=0.03)
    >>> res.reading, bool(res.pvalue < 0.001)
    ('equivalent', True)
    """
    from statsmodels.stats.weightstats import DescrStatsW, ttost_paired

    low, high = check_band(low, high)
    alpha = check_open_unit("alpha", alpha)
    x, y = _paired_iv(x, y)
    d = DescrStatsW(x - y)
    n = x.size
    return _tost_result(
        d.mean,
        d.std_mean,
        n - 1,
        ttost_paired(x, y, low, high),
        d.ttest_mean(0.0),
        d.tconfint_mean(alpha=2.0 * alpha),
        low,
        high,
        alpha,
        n,
        n,
        "paired TOST (t)",
    )


def tost_ind(x, y, *, low: float, high: float, alpha: float = 0.05, usevar: str = "pooled") -> TostResult:
    """Independent-samples two one-sided t-tests for equivalence of ``mean(x) - mean(y)``.

    Parameters
    ----------
    x, y : array_like
        Independent samples; no NaN; at least 2 each.
    low, high : float
        Equivalence band in raw units, ``low < high``.
    alpha : float, default 0.05
    usevar : {'pooled', 'unequal'}, default 'pooled'
        Pooled-variance (Student) or Welch-Satterthwaite standard error and df.

    Returns
    -------
    TostResult

    Notes
    -----
    Pooled: :math:`se = s_p\\sqrt{1/n_1 + 1/n_2}`, :math:`df = n_1 + n_2 - 2`. Unequal:
    :math:`se = \\sqrt{s_1^2/n_1 + s_2^2/n_2}`, Welch-Satterthwaite df. Then as
    :func:`tost_paired`. Computed by :func:`statsmodels.stats.weightstats.ttost_ind` and
    ``CompareMeans`` (``ttest_ind``, ``tconfint_diff``).

    References
    ----------
    .. [1] Schuirmann, D. J. (1987). *J. Pharmacokinet. Biopharm.* 15(6), 657-680.

    Examples
    --------
    >>> from creditaudit.stats import tost_ind
    >>> res = tost_ind([0.1, 0.2, 0.3, 0.4], [0.6, 0.7, 0.8, 0.9], low=-0.03, high=0.03)
    >>> res.reading, round(res.estimate, 2)
    ('different', -0.5)
    """
    from statsmodels.stats.weightstats import ttost_ind

    low, high = check_band(low, high)
    alpha = check_open_unit("alpha", alpha)
    x, y, usevar = _ind_iv(x, y, usevar)
    cm = _compare_means(x, y)
    se, df = _ind_se_df(cm, usevar)
    return _tost_result(
        cm.d1.mean - cm.d2.mean,
        se,
        df,
        ttost_ind(x, y, low, high, usevar=usevar),
        cm.ttest_ind(alternative="two-sided", usevar=usevar, value=0.0),
        cm.tconfint_diff(alpha=2.0 * alpha, alternative="two-sided", usevar=usevar),
        low,
        high,
        alpha,
        x.size,
        y.size,
        f"independent TOST (t, {usevar} variance)",
    )


def _superiority_result(estimate, se, df, test, ci, margin, alpha, n1, n2, method) -> SuperiorityResult:
    t, p, _ = test
    p = float(p)
    return SuperiorityResult(
        estimate=float(estimate),
        statistic=float(t),
        pvalue=p,
        margin=margin,
        se=float(se),
        df=float(df),
        alpha=alpha,
        ci=(float(ci[0]), math.inf),
        superior=p <= alpha,
        n1=n1,
        n2=n2,
        method=method,
    )


def superiority_paired(x, y, *, margin: float = 0.0, alpha: float = 0.05) -> SuperiorityResult:
    """One-sided paired t-test of H1: ``mean(x - y) > margin``.

    Parameters
    ----------
    x, y : array_like
        Paired outcomes, same length, at least 2; no NaN.
    margin : float, default 0.0
        Raw-unit margin; 0 is plain superiority, a negative value a non-inferiority test.
    alpha : float, default 0.05

    Returns
    -------
    SuperiorityResult

    Notes
    -----
    :math:`t = (\\bar d - margin)/(s_d/\\sqrt n)`, :math:`p = P(T_{n-1} > t)`; computed by
    ``statsmodels``' ``DescrStatsW.ttest_mean(margin, alternative='larger')``.

    References
    ----------
    .. [1] Student (1908). The probable error of a mean. *Biometrika* 6(1), 1-25.

    Examples
    --------
    >>> from creditaudit.stats import superiority_paired
    >>> res = superiority_paired([1, 1, 1, 0, 1, 1, 0, 1], [0, 1, 0, 0, 1, 0, 0, 1])
    >>> round(res.estimate, 3), res.superior
    (0.375, True)
    """
    from statsmodels.stats.weightstats import DescrStatsW

    margin = check_finite_float("margin", margin)
    alpha = check_open_unit("alpha", alpha)
    x, y = _paired_iv(x, y)
    d = DescrStatsW(x - y)
    n = x.size
    return _superiority_result(
        d.mean,
        d.std_mean,
        n - 1,
        d.ttest_mean(margin, alternative="larger"),
        d.tconfint_mean(alpha=alpha, alternative="larger"),
        margin,
        alpha,
        n,
        n,
        "paired one-sided t (superiority)",
    )


def superiority_ind(x, y, *, margin: float = 0.0, alpha: float = 0.05, usevar: str = "pooled") -> SuperiorityResult:
    """One-sided independent-samples t-test of H1: ``mean(x) - mean(y) > margin``.

    Parameters
    ----------
    x, y : array_like
        Independent samples, at least 2 each; no NaN.
    margin : float, default 0.0
    alpha : float, default 0.05
    usevar : {'pooled', 'unequal'}, default 'pooled'

    Returns
    -------
    SuperiorityResult

    Notes
    -----
    :math:`t = (\\bar x - \\bar y - margin)/se` with the standard error and df of
    :func:`tost_ind`; :math:`p = P(T_{df} > t)`; computed by ``statsmodels``'
    ``CompareMeans.ttest_ind(alternative='larger', value=margin)``.

    References
    ----------
    .. [1] Welch, B. L. (1947). The generalization of Student's problem when several different
       population variances are involved. *Biometrika* 34, 28-35.

    Examples
    --------
    >>> from creditaudit.stats import superiority_ind
    >>> res = superiority_ind([0.6, 0.7, 0.8], [0.1, 0.2, 0.3])
    >>> res.superior, round(res.estimate, 2)
    (True, 0.5)
    """
    margin = check_finite_float("margin", margin)
    alpha = check_open_unit("alpha", alpha)
    x, y, usevar = _ind_iv(x, y, usevar)
    cm = _compare_means(x, y)
    se, df = _ind_se_df(cm, usevar)
    return _superiority_result(
        cm.d1.mean - cm.d2.mean,
        se,
        df,
        cm.ttest_ind(alternative="larger", usevar=usevar, value=margin),
        cm.tconfint_diff(alpha=alpha, alternative="larger", usevar=usevar),
        margin,
        alpha,
        x.size,
        y.size,
        f"independent one-sided t (superiority, {usevar} variance)",
    )


def equivalence_reading(result: TostResult) -> str:
    """The reading of a TOST result: "equivalent", "different" or "inconclusive".

    Parameters
    ----------
    result : TostResult
        From :func:`tost_paired` or :func:`tost_ind`.

    Returns
    -------
    str
        One of :data:`READINGS`.

    Notes
    -----
    "equivalent" when the TOST p-value is <= alpha (the :math:`1-2\\alpha` interval lies inside
    the band) — also when the difference test is significant too: a difference inside the
    preregistered band is, by the band's definition, negligible; the result still carries
    ``difference_pvalue`` for that case. Otherwise "different" when the two-sided difference
    test has p <= alpha, else "inconclusive". Never "no difference": a non-significant difference
    test alone supports no claim.

    References
    ----------
    .. [1] Lakens, D., Scheel, A. M. & Isager, P. M. (2018). Equivalence testing for
       psychological research: a tutorial. *AMPPS* 1(2), 259-269.

    Examples
    --------
    >>> from creditaudit.stats import tost_paired, equivalence_reading
    >>> res = tost_paired([1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 1, 1], low=-0.03, high=0.03)
    >>> equivalence_reading(res)
    'inconclusive'
    """
    if not isinstance(result, TostResult):
        raise ValueError(f"`result` must be a TostResult; got {type(result).__name__}")
    return _reading(result.pvalue, result.difference_pvalue, result.alpha)
