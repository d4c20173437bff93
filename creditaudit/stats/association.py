"""Association beyond rank: partial correlation, OLS with standardised coefficients, Cohen's kappa.

The fluency-echo analysis (docs/design.md §5 T3) regresses credit on fluency and causal increment and asks
whether credit tracks the increment once fluency is held fixed; judge-vs-judge agreement uses
exact agreement and Cohen's kappa (docs/design.md §4).

Where the numbers come from: the partial correlation, its p-value and Fisher interval are
:func:`pingouin.partial_corr` and :func:`pingouin.compute_esci`; the regression is
:class:`statsmodels.regression.linear_model.OLS` on z-scores; Cohen's kappa and its asymptotic
standard errors are :func:`statsmodels.stats.inter_rater.cohens_kappa`. This module validates
(raising where the libraries would warn or return NaN), builds the contingency table and wraps the
numbers. The tests check them against R ``ppcor::pcor.test`` (pingouin's published reference
values), a SAS ``PROC FREQ`` kappa printout (statsmodels' published reference) and formulas
worked independently in the tests — not against the library the code calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.special import ndtri

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    check_alternative,
    check_choice,
    check_open_unit,
    readonly,
)

__all__ = [
    "PartialCorrResult",
    "OLSResult",
    "KappaResult",
    "partial_corr",
    "ols_standardized",
    "cohens_kappa",
]

_CORR_METHODS = ("pearson", "spearman")


@dataclass(frozen=True)
class PartialCorrResult(Result):
    """Partial correlation of ``x`` and ``y`` given covariates.

    Attributes
    ----------
    statistic : float
        The partial correlation :math:`r_{xy\\cdot Z}`.
    pvalue : float
    ci : tuple of float
        Fisher-z interval at ``confidence_level`` (two-sided; one-sided for a one-sided test).
    confidence_level : float
    n : int
    n_covariates : int
    df : int
        ``n - 2 - n_covariates``.
    alternative : str
    method : str
        ``'pearson'`` or ``'spearman'``.
    """

    statistic: float
    pvalue: float
    ci: tuple[float, float]
    confidence_level: float
    n: int
    n_covariates: int
    df: int
    alternative: str
    method: str

    def _interval(self, level: float) -> tuple[float, float]:
        return _fisher_ci(self.statistic, self.n - self.n_covariates, level, self.alternative)


def _fisher_ci(r: float, n_eff: int, level: float, alternative: str) -> tuple[float, float]:
    """pingouin's Fisher-z interval with ``n - k`` as the sample size (as ``pingouin.partial_corr``)."""
    if n_eff <= 3:
        return (-1.0, 1.0)  # no standard error: the whole range
    import pingouin as pg

    # pingouin rounds the interval to `decimals`; 15 keeps it to the last bits of a double in [-1, 1]
    low, high = pg.compute_esci(
        stat=r, nx=n_eff, ny=n_eff, eftype="r", confidence=float(level), decimals=15, alternative=alternative
    )
    return float(low), float(high)


def _as_covariates(covar, n: int) -> np.ndarray:
    try:
        z = np.asarray(covar, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("`covar` must be an array of numbers") from None
    if z.ndim == 1:
        z = z[:, None]
    if z.ndim != 2 or z.shape[0] != n:
        raise ValueError(f"`covar` must have one row per item ({n}); got shape {z.shape}")
    if z.shape[1] == 0:
        raise ValueError("`covar` must have at least one column")
    if not np.isfinite(z).all():
        raise ValueError("`covar` contains NaN or infinite values; exclude those items explicitly")
    if (np.ptp(z, axis=0) == 0).any():
        raise ValueError("`covar` has a constant column; drop it (the intercept is always included)")
    return z


def _partial_corr_iv(x, y, covar, method, alternative, confidence_level):
    x = as_1d_finite("x", x)
    y = as_1d_finite("y", y)
    if x.size != y.size:
        raise ValueError(f"`x` and `y` must have the same length; `x` has {x.size}, `y` has {y.size}")
    z = _as_covariates(covar, x.size)
    method = check_choice("method", method, _CORR_METHODS)
    alternative = check_alternative(alternative)
    confidence_level = check_open_unit("confidence_level", confidence_level)
    k = z.shape[1]
    if x.size - 2 - k < 1:
        raise ValueError(f"need more items than covariates + 2 (`x` has {x.size}, `covar` has {k} column(s))")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        raise ValueError("`x` or `y` is constant; the correlation is undefined")
    if method == "spearman":
        x, y = sps.rankdata(x), sps.rankdata(y)
        z = np.column_stack([sps.rankdata(c) for c in z.T])
    design = np.column_stack([np.ones(x.size), z])
    rank = np.linalg.matrix_rank(design)
    if rank < k + 1:
        raise ValueError(
            "`covar` is rank-deficient (collinear columns"
            + (", after ranking" if method == "spearman" else "")
            + "); drop the redundant columns"
        )
    if any(np.linalg.matrix_rank(np.column_stack([design, v])) == rank for v in (x, y)):
        raise ValueError("`x` or `y` is fully explained by `covar`; the partial correlation is undefined")
    return x, y, z, method, alternative, confidence_level


def partial_corr(
    x,
    y,
    covar,
    *,
    method: str = "pearson",
    alternative: str = "two-sided",
    confidence_level: float = 0.95,
) -> PartialCorrResult:
    """Partial correlation of ``x`` and ``y`` controlling for ``covar``, with its p-value.

    Parameters
    ----------
    x, y : array_like
        Paired values (e.g. credit and causal increment); no NaN.
    covar : array_like
        Covariates, shape ``(n,)`` or ``(n, k)`` (e.g. fluency); no NaN, no constant column.
    method : {'pearson', 'spearman'}, default 'pearson'
        ``'spearman'`` ranks every variable (average ranks) first.
    alternative : {'two-sided', 'less', 'greater'}, default 'two-sided'
    confidence_level : float, default 0.95

    Returns
    -------
    PartialCorrResult

    Notes
    -----
    :math:`r_{xy\\cdot Z}` is the correlation of the residuals of :math:`x` and :math:`y` after
    least-squares regression on :math:`[1, Z]`. With :math:`df = n - 2 - k`,
    :math:`t = r\\sqrt{df/(1-r^2)}` is referred to :math:`T_{df}`. The interval is Fisher's
    :math:`\\tanh(\\operatorname{atanh} r \\pm z_{1-\\alpha/2}/\\sqrt{n - k - 3})`.
    For Spearman the p-value is the usual t approximation on ranks. Computed by
    :func:`pingouin.partial_corr` (inverse covariance matrix) and :func:`pingouin.compute_esci`
    (unrounded); the covariates must have full rank and leave ``x`` and ``y`` some residual
    variation, else ``ValueError`` (pingouin would warn and use a pseudo-inverse).

    References
    ----------
    .. [1] Fisher, R. A. (1924). The distribution of the partial correlation coefficient.
       *Metron* 3, 329-332.
    .. [2] Vallat, R. (2018). Pingouin: statistics in Python. *JOSS* 3(31), 1026.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import partial_corr
    >>> gen = np.random.default_rng(0)
    >>> fluency = gen.normal(size=200)
    >>> increment = gen.normal(size=200)
    >>> credit = 2 * fluency + gen.normal(size=200)
    >>> res = partial_corr(credit, increment, fluency)
    >>> abs(res.statistic) < 0.2, res.df
    (True, 197)
    """
    import pingouin as pg

    x, y, z, method, alternative, confidence_level = _partial_corr_iv(
        x, y, covar, method, alternative, confidence_level
    )
    n, k = x.size, z.shape[1]
    covariates = [f"covar{j}" for j in range(k)]
    frame = pd.DataFrame(np.column_stack([x, y, z]), columns=["x", "y", *covariates])
    # (Spearman: the columns are ranks already; pingouin ranks them again, which changes nothing)
    out = pg.partial_corr(frame, x="x", y="y", covar=covariates, alternative=alternative, method=method)
    r, p = float(out["r"].iloc[0]), float(out["p_val"].iloc[0])
    df = n - 2 - k
    return PartialCorrResult(
        statistic=r,
        pvalue=p,
        ci=_fisher_ci(r, n - k, confidence_level, alternative),
        confidence_level=confidence_level,
        n=n,
        n_covariates=k,
        df=df,
        alternative=alternative,
        method=method,
    )


@dataclass(frozen=True)
class OLSResult(Result):
    """OLS fit with standardised coefficients.

    Attributes
    ----------
    names : tuple of str
        Predictor names (no intercept).
    coefficients : numpy.ndarray
        Standardised coefficients :math:`\\beta_j = b_j s_{x_j}/s_y`.
    coefficients_raw : numpy.ndarray
        Raw-unit slopes :math:`b_j`.
    intercept_raw : float
    se : numpy.ndarray
        Standard errors of the standardised coefficients.
    statistics, pvalues : numpy.ndarray
        t statistics and two-sided p-values (identical for raw and standardised slopes).
    r_squared : float
    n : int
    df_resid : int
    method : str
    """

    names: tuple[str, ...]
    coefficients: np.ndarray
    coefficients_raw: np.ndarray
    intercept_raw: float
    se: np.ndarray
    statistics: np.ndarray
    pvalues: np.ndarray
    r_squared: float
    n: int
    df_resid: int
    method: str

    #: :meth:`confidence_interval` without a level gives the 95% intervals (the result has no ``ci``).
    _default_level: ClassVar[float] = 0.95

    def _interval(self, level: float) -> np.ndarray:
        """``(k, 2)`` t intervals of the standardised coefficients."""
        q = float(sps.t.ppf(1.0 - (1.0 - level) / 2.0, self.df_resid))
        return np.column_stack([self.coefficients - q * self.se, self.coefficients + q * self.se])

    def to_frame(self) -> pd.DataFrame:
        """One row per predictor (a fit has several)."""
        return pd.DataFrame(
            {
                "name": list(self.names),
                "coefficient": self.coefficients,
                "coefficient_raw": self.coefficients_raw,
                "se": self.se,
                "statistic": self.statistics,
                "pvalue": self.pvalues,
                "r_squared": self.r_squared,
                "n": self.n,
            }
        )


def _ols_iv(y, X, names):
    y = as_1d_finite("y", y)
    try:
        X = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("`X` must be an array of numbers") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] != y.size:
        raise ValueError(f"`X` must have one row per item of `y` ({y.size}); got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("`X` contains NaN or infinite values; exclude those items explicitly")
    k = X.shape[1]
    if k == 0:
        raise ValueError("`X` must have at least one column")
    if (np.ptp(X, axis=0) == 0).any():
        raise ValueError("`X` has a constant column; standardised coefficients are undefined for it")
    if np.ptp(y) == 0:
        raise ValueError("`y` is constant; standardised coefficients are undefined")
    if y.size - k - 1 < 1:
        raise ValueError(f"need more items than predictors + 1 (`y` has {y.size}, `X` has {k} column(s))")
    if names is None:
        names = tuple(f"x{j}" for j in range(k))
    else:
        names = tuple(str(n) for n in names)
        if len(names) != k:
            raise ValueError(f"`names` must have one entry per column of `X` ({k}); got {len(names)}")
    return y, X, names


def ols_standardized(y, X, *, names=None) -> OLSResult:
    """Ordinary least squares of ``y`` on ``X`` (with intercept), reporting standardised betas.

    Parameters
    ----------
    y : array_like
        Response, shape ``(n,)``; no NaN, not constant.
    X : array_like
        Predictors, shape ``(n, k)`` or ``(n,)``; no NaN, no constant column (the intercept is
        added).
    names : sequence of str, optional
        Predictor names (default ``x0, x1, ...``).

    Returns
    -------
    OLSResult

    Notes
    -----
    Fits :math:`z_y = \\sum_j \\beta_j z_{x_j} + \\varepsilon` on z-scores (sample sd, ddof=1)
    with :mod:`statsmodels` OLS; :math:`\\beta_j = b_j s_{x_j}/s_y` where :math:`b_j` are the
    raw slopes. t statistics and p-values are invariant to the standardisation.

    References
    ----------
    .. [1] Seabold, S. & Perktold, J. (2010). statsmodels: econometric and statistical modeling
       with Python. *Proc. SciPy*.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import ols_standardized
    >>> gen = np.random.default_rng(0)
    >>> X = gen.normal(size=(500, 2))
    >>> y = 3 * X[:, 0] + 1 * X[:, 1] + gen.normal(size=500)
    >>> res = ols_standardized(y, X, names=["fluency", "increment"])
    >>> [round(float(b), 1) for b in res.coefficients]
    [0.9, 0.3]
    """
    import statsmodels.api as sm

    y, X, names = _ols_iv(y, X, names)
    sy = float(np.std(y, ddof=1))
    sx = np.std(X, axis=0, ddof=1)
    zy = (y - y.mean()) / sy
    zX = (X - X.mean(axis=0)) / sx
    if np.linalg.matrix_rank(zX) < X.shape[1]:
        raise ValueError("`X` is rank-deficient (collinear columns); coefficients are not identified")
    fit = sm.OLS(zy, sm.add_constant(zX, has_constant="add")).fit()
    beta = np.asarray(fit.params[1:])
    raw = beta * sy / sx
    intercept = float(y.mean() - raw @ X.mean(axis=0))
    return OLSResult(
        names=names,
        coefficients=readonly(beta),
        coefficients_raw=readonly(raw),
        intercept_raw=intercept,
        se=readonly(np.asarray(fit.bse[1:])),
        statistics=readonly(np.asarray(fit.tvalues[1:])),
        pvalues=readonly(np.asarray(fit.pvalues[1:])),
        r_squared=float(fit.rsquared),
        n=int(y.size),
        df_resid=int(fit.df_resid),
        method="OLS on z-scores (statsmodels)",
    )


@dataclass(frozen=True)
class KappaResult(Result):
    """Cohen's kappa and exact agreement of two raters.

    Attributes
    ----------
    statistic : float
        Cohen's kappa.
    se : float
        Asymptotic standard error (Fleiss, Cohen & Everitt 1969).
    ci : tuple of float
        Normal interval ``kappa ± z se`` at ``confidence_level``.
    confidence_level : float
    pvalue : float
        Two-sided z-test of kappa = 0 with the null standard error.
    agreement : float
        Exact (observed) agreement :math:`p_o`.
    expected_agreement : float
        Chance agreement :math:`p_e` from the marginals.
    n : int
    n_agree : int
    categories : tuple
    table : numpy.ndarray
        Contingency table, rows rater ``a``, columns rater ``b``, in ``categories`` order.
    method : str
    """

    statistic: float
    se: float
    ci: tuple[float, float]
    confidence_level: float
    pvalue: float
    agreement: float
    expected_agreement: float
    n: int
    n_agree: int
    categories: tuple
    table: np.ndarray
    method: str

    def _interval(self, level: float) -> tuple[float, float]:
        return _normal_interval(self.statistic, self.se, level)


def _normal_interval(estimate: float, se: float, level: float) -> tuple[float, float]:
    q = float(ndtri(1.0 - (1.0 - level) / 2.0))
    return float(estimate - q * se), float(estimate + q * se)


def _kappa_iv(a, b, categories, confidence_level):
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError("`a` and `b` must be 1-D arrays of category labels")
    if a.size != b.size:
        raise ValueError(f"`a` and `b` must have the same length; `a` has {a.size}, `b` has {b.size}")
    if a.size == 0:
        raise ValueError("`a` and `b` must not be empty")
    for name, v in (("a", a), ("b", b)):
        if v.dtype.kind == "f" and np.isnan(v).any():
            raise ValueError(f"`{name}` contains NaN; an abstention is not a category — exclude it explicitly")
        if v.dtype == object and any(e is None for e in v):
            raise ValueError(f"`{name}` contains None; an abstention is not a category — exclude it explicitly")
    if categories is None:
        categories = tuple(np.unique(np.concatenate([a, b])).tolist())
    else:
        categories = tuple(categories)
        if len(set(categories)) != len(categories):
            raise ValueError("`categories` must not repeat a category")
        unknown = sorted({str(v) for v in np.concatenate([a, b]).tolist() if v not in categories})
        if unknown:
            raise ValueError(f"labels {unknown} are not in `categories` {categories}")
    return a, b, categories, check_open_unit("confidence_level", confidence_level)


def cohens_kappa(a, b, *, categories=None, confidence_level: float = 0.95) -> KappaResult:
    """Cohen's kappa of two raters with its asymptotic CI, and exact agreement.

    Parameters
    ----------
    a, b : array_like
        Category given by each rater to each item (e.g. judge scores in {1, 0, -1}); no NaN.
    categories : sequence, optional
        All categories, fixing the table's order and including categories neither rater used
        (default: the sorted union of the labels).
    confidence_level : float, default 0.95

    Returns
    -------
    KappaResult

    Raises
    ------
    ValueError
        If chance agreement is 1 (both raters used one and the same category): kappa is
        undefined.

    Notes
    -----
    :math:`\\kappa = (p_o - p_e)/(1 - p_e)` with :math:`p_o = \\sum_i p_{ii}` and
    :math:`p_e = \\sum_i p_{i\\cdot}p_{\\cdot i}`. The standard error is Fleiss, Cohen & Everitt's:
    :math:`\\operatorname{Var}\\hat\\kappa = [\\sum_i p_{ii}(1-(p_{i\\cdot}+p_{\\cdot i})(1-\\kappa))^2
    + (1-\\kappa)^2\\sum_{i\\ne j}p_{ij}(p_{\\cdot i}+p_{j\\cdot})^2
    - (\\kappa - p_e(1-\\kappa))^2] / (n(1-p_e)^2)`; under :math:`\\kappa = 0`,
    :math:`\\operatorname{Var}_0 = [p_e + p_e^2 - \\sum_i p_{i\\cdot}p_{\\cdot i}
    (p_{i\\cdot}+p_{\\cdot i})]/(n(1-p_e)^2)`. Kappa, both variances and the p-value are
    :func:`statsmodels.stats.inter_rater.cohens_kappa`'s on the table built here (categories
    neither rater used are empty rows and columns). Its ``std_kappa`` is this Fleiss-Cohen-Everitt
    standard error; the interval is ``kappa ± z se`` at ``confidence_level`` (statsmodels'
    ``kappa_low``/``kappa_upp`` are the same interval at 95% only). The tests pin a SAS
    ``PROC FREQ`` printout (ASE 0.1380, 95% limits 0.2137 and 0.7547 for kappa 0.4842).

    References
    ----------
    .. [1] Cohen, J. (1960). A coefficient of agreement for nominal scales. *Educ. Psychol.
       Meas.* 20(1), 37-46.
    .. [2] Fleiss, J. L., Cohen, J. & Everitt, B. S. (1969). Large sample standard errors of
       kappa and weighted kappa. *Psychol. Bull.* 72(5), 323-327.

    Examples
    --------
    The textbook example (20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no): :math:`p_o = 0.7`,
    :math:`p_e = 0.5`, :math:`\\kappa = 0.4`.

    >>> from creditaudit.stats import cohens_kappa
    >>> a = ["yes"] * 25 + ["no"] * 25
    >>> b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    >>> res = cohens_kappa(a, b)
    >>> round(res.statistic, 6), res.agreement, res.expected_agreement
    (0.4, 0.7, 0.5)
    """
    from statsmodels.stats.inter_rater import cohens_kappa as sm_cohens_kappa

    a, b, categories, confidence_level = _kappa_iv(a, b, categories, confidence_level)
    index = {c: i for i, c in enumerate(categories)}
    m = len(categories)
    table = np.zeros((m, m))
    np.add.at(table, ([index[v] for v in a.tolist()], [index[v] for v in b.tolist()]), 1.0)
    n = int(a.size)
    p = table / n
    po = float(np.trace(p))
    pe = float(p.sum(axis=1) @ p.sum(axis=0))
    if pe >= 1.0 - 1e-15:
        raise ValueError("chance agreement is 1 (both raters used one category only); kappa is undefined")
    with np.errstate(invalid="ignore"):  # statsmodels takes sqrt of var_kappa; clamped below
        res = sm_cohens_kappa(table)
    kappa = float(res.kappa)
    se = math.sqrt(max(0.0, float(res.var_kappa)))  # float error leaves ~ -1e-17 at perfect agreement
    var0 = float(res.var_kappa0)
    pvalue = float(res.pvalue_two_sided) if var0 > 0 else float("nan")
    return KappaResult(
        statistic=kappa,
        se=se,
        ci=_normal_interval(kappa, se, confidence_level),
        confidence_level=confidence_level,
        pvalue=pvalue,
        agreement=po,
        expected_agreement=pe,
        n=n,
        n_agree=int(np.trace(table)),
        categories=categories,
        table=readonly(table.astype(np.int64)),
        method="cohen's kappa; Fleiss-Cohen-Everitt asymptotic SE",
    )
