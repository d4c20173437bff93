"""Design sensitivity for the training-arm comparisons (docs/design.md §6): the minimum detectable effect.

Hand-written here: :func:`mde`'s root finding on scipy's noncentral t (see its Notes for why not
``statsmodels``' ``TTestPower.solve_power``) and the approximate TOST power at zero, which no
library offers for a t design. The tests check every number against R (``pwr::pwr.t.test``;
``tests/stats/reference/equivalence.R``), scipy and pingouin -- never against statsmodels alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

from creditaudit.stats._common import (
    Result,
    check_alternative,
    check_band,
    check_choice,
    check_finite_float,
    check_open_unit,
)

__all__ = ["MDEResult", "mde"]

_DESIGNS = ("paired", "independent")


@dataclass(frozen=True)
class MDEResult(Result):
    """Design minimum detectable effect.

    Attributes
    ----------
    mde : float
        Smallest true difference (raw units) the t-test of the design detects with probability
        ``power`` at level ``alpha``.
    se : float
        Standard error of the difference under the design, ``sd * sqrt(1/n1 [+ 1/n2])``.
    df : float
    n1, n2 : int
        ``n2`` is 0 for a paired design.
    sd : float
    alpha, power : float
    alternative : str
    design : str
    low, high : float or None
        Equivalence band, when given.
    equivalence_power : float or None
        Approximate probability that TOST declares equivalence within ``[low, high]`` when the
        true difference is 0.
    band_within_mde : bool or None
        True when the band's half-width (the smaller one) is below ``mde``: a difference-test
        null is then uninformative about differences of the size the band allows.
    method : str
    """

    mde: float
    se: float
    df: float
    n1: int
    n2: int
    sd: float
    alpha: float
    power: float
    alternative: str
    design: str
    low: float | None
    high: float | None
    equivalence_power: float | None
    band_within_mde: bool | None
    method: str


def _t_power(delta_over_se: float, df: float, alpha: float, alternative: str) -> float:
    if alternative == "two-sided":
        q = sps.t.ppf(1.0 - alpha / 2.0, df)
        return float(sps.nct.sf(q, df, delta_over_se) + sps.nct.cdf(-q, df, delta_over_se))
    q = sps.t.ppf(1.0 - alpha, df)
    if alternative == "greater":
        return float(sps.nct.sf(q, df, delta_over_se))
    return float(sps.nct.cdf(-q, df, delta_over_se))


def _mde_iv(n, sd, alpha, power, alternative, design, n2, low, high):
    design = check_choice("design", design, _DESIGNS)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2:
        raise ValueError(f"`n` must be an integer >= 2; got {n!r}")
    if design == "paired":
        if n2 is not None:
            raise ValueError("`n2` is only for design='independent'; a paired design has one `n`")
        n2 = 0
    elif n2 is None:
        n2 = int(n)
    elif isinstance(n2, bool) or not isinstance(n2, int | np.integer) or n2 < 2:
        raise ValueError(f"`n2` must be an integer >= 2; got {n2!r}")
    sd = check_finite_float("sd", sd)
    if sd <= 0:
        raise ValueError(f"`sd` must be positive; got {sd}")
    alpha = check_open_unit("alpha", alpha)
    power = check_open_unit("power", power)
    alternative = check_alternative(alternative)
    if power <= alpha:
        raise ValueError(
            f"`power` must exceed `alpha` (a test has power alpha at no effect); got power={power}, alpha={alpha}"
        )
    if (low is None) != (high is None):
        raise ValueError("give both `low` and `high` (the equivalence band) or neither")
    if low is not None:
        low, high = check_band(low, high)
        if not (low < 0 < high):
            raise ValueError(f"the band [`low`, `high`] must contain 0; got [{low}, {high}]")
    return int(n), int(n2), sd, alpha, power, alternative, design, low, high


def mde(
    n: int,
    *,
    sd: float,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: str = "two-sided",
    design: str = "paired",
    n2: int | None = None,
    low: float | None = None,
    high: float | None = None,
) -> MDEResult:
    """Design minimum detectable effect of a t-test, and the equivalence power of a band.

    Parameters
    ----------
    n : int
        Pairs (paired design) or size of the first group (independent design), at least 2.
    sd : float
        Standard deviation of the paired differences (paired) or of the outcome in each group
        (independent), assumed at design time. For paired binary outcomes with discordance rate
        :math:`\\pi_d` and true difference 0, :math:`sd = \\sqrt{\\pi_d}`.
    alpha : float, default 0.05
    power : float, default 0.8
    alternative : {'two-sided', 'less', 'greater'}, default 'two-sided'
    design : {'paired', 'independent'}, default 'paired'
    n2 : int, optional
        Size of the second group (independent design; defaults to ``n``).
    low, high : float, optional
        Equivalence band (raw units, ``low < 0 < high``); when given, the result carries the
        approximate TOST power at a true difference of 0 and whether the band is narrower than
        the MDE.

    Returns
    -------
    MDEResult

    Notes
    -----
    :math:`se = sd/\\sqrt n` (paired, :math:`df = n-1`) or
    :math:`sd\\sqrt{1/n_1 + 1/n_2}` (independent, :math:`df = n_1+n_2-2`). The MDE is the
    :math:`\\delta > 0` solving :math:`\\text{power}(\\delta) = 1-\\beta` under the noncentral
    t with noncentrality :math:`\\delta/se` (two-sided: both tails counted). For
    ``alternative='less'`` the MDE is reported as a positive magnitude.
    TOST power at 0 uses the standard approximation
    :math:`\\max\\{0, F_{df,(0-low)/se}^{>}(t_{1-\\alpha}) + F_{df,high/se}^{>}(t_{1-\\alpha}) - 1\\}`,
    with :math:`F^{>}` the noncentral-t survival function — exact for known variance.

    Hand-written on :data:`scipy.stats.nct`, not through ``statsmodels``: its
    ``TTestPower``/``TTestIndPower`` compute the same power function (the tests check the MDE
    against them and against R ``pwr.t.test``), but ``solve_power`` stops at a tolerance of about
    1e-5 (the MDE here hits the target power within 1e-9), and statsmodels evaluates the
    two-sided power at :math:`df = 1` where this function reports the MDE as undefined (its
    noncentral-t lower tail is NaN there), a behaviour the training-arm analysis reports and the
    tests pin. The TOST power has no library equivalent for a t design.

    References
    ----------
    .. [1] Cohen, J. (1988). *Statistical Power Analysis for the Behavioral Sciences*, 2nd ed.
    .. [2] Chow, S.-C., Shao, J. & Wang, H. (2008). *Sample Size Calculations in Clinical
       Research*, 2nd ed., §3.2 (equivalence).

    Examples
    --------
    >>> from creditaudit.stats import mde
    >>> res = mde(128, sd=0.5, low=-0.03, high=0.03)
    >>> round(res.mde, 3), res.band_within_mde
    (0.125, True)
    """
    n, n2, sd, alpha, power, alternative, design, low, high = _mde_iv(
        n, sd, alpha, power, alternative, design, n2, low, high
    )
    if design == "paired":
        se, df = sd / math.sqrt(n), float(n - 1)
    else:
        se, df = sd * math.sqrt(1.0 / n + 1.0 / n2), float(n + n2 - 2)
    sign = -1.0 if alternative == "less" else 1.0

    def gap(ncp: float) -> float:
        return _t_power(sign * ncp, df, alpha, alternative) - power

    hi = 1.0
    while gap(hi) < 0 and hi < 1e6:
        hi *= 2.0
    if not math.isfinite(gap(hi)) or gap(hi) < 0:
        raise ValueError(f"the design's power cannot be evaluated at df = {df:g} (n = {n}); the MDE is undefined "
                         "for so few units")
    ncp = optimize.brentq(gap, 0.0, hi, xtol=1e-12, rtol=1e-12)
    value = ncp * se
    eq_power = band_within = None
    if low is not None:
        q = sps.t.ppf(1.0 - alpha, df)
        eq_power = float(max(0.0, sps.nct.sf(q, df, -low / se) + sps.nct.sf(q, df, high / se) - 1.0))
        band_within = bool(min(-low, high) < value)
    return MDEResult(
        mde=float(value),
        se=float(se),
        df=df,
        n1=n,
        n2=n2,
        sd=sd,
        alpha=alpha,
        power=power,
        alternative=alternative,
        design=design,
        low=low,
        high=high,
        equivalence_power=eq_power,
        band_within_mde=band_within,
        method="noncentral t",
    )
