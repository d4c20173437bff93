"""TOST, superiority and MDE against statsmodels, pingouin, scipy and simulation."""

import numpy as np
import pingouin as pg
import pytest
from scipy import stats
from statsmodels.stats.power import TTestIndPower, TTestPower
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from creditaudit.stats import (
    READINGS,
    equivalence_reading,
    mde,
    superiority_ind,
    superiority_paired,
    tost_ind,
    tost_paired,
)


def _arms(seed, n=128, p=(0.55, 0.52)):
    gen = np.random.default_rng(seed)
    return (gen.uniform(size=n) < p[0]).astype(float), (gen.uniform(size=n) < p[1]).astype(float)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("low", "high"), [(-0.03, 0.03), (-0.1, 0.05)])
def test_tost_paired_matches_statsmodels(seed, low, high):
    x, y = _arms(seed)
    res = tost_paired(x, y, low=low, high=high)
    p, (t1, p1, df1), (t2, p2, df2) = ttost_paired(x, y, low, high)
    assert res.pvalue == pytest.approx(p, rel=1e-10)
    assert (res.statistic_lower, res.pvalue_lower) == pytest.approx((t1, p1), rel=1e-10)
    assert (res.statistic_upper, res.pvalue_upper) == pytest.approx((t2, p2), rel=1e-10)
    assert res.df == df1 == df2
    assert res.difference_pvalue == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-10)


@pytest.mark.parametrize("usevar", ["pooled", "unequal"])
@pytest.mark.parametrize("seed", range(3))
def test_tost_ind_matches_statsmodels(usevar, seed):
    gen = np.random.default_rng(seed)
    x, y = gen.normal(0.5, 1.0, 40), gen.normal(0.4, 2.0, 25)
    res = tost_ind(x, y, low=-0.5, high=0.7, usevar=usevar)
    p, (t1, p1, df1), (t2, p2, df2) = ttost_ind(x, y, -0.5, 0.7, usevar=usevar)
    assert res.pvalue == pytest.approx(p, rel=1e-10)
    assert (res.statistic_lower, res.pvalue_lower, res.df) == pytest.approx((t1, p1, df1), rel=1e-10)
    assert (res.statistic_upper, res.pvalue_upper) == pytest.approx((t2, p2), rel=1e-10)
    ref = stats.ttest_ind(x, y, equal_var=usevar == "pooled")
    assert res.difference_pvalue == pytest.approx(ref.pvalue, rel=1e-10)


def test_tost_reproduces_pingouins_published_examples():
    # pingouin.tost docstring: independent bound 1 -> 0.965097; paired bound 0.5 -> 0.954854
    a = [4, 7, 8, 6, 3, 2]
    b = [6, 8, 7, 10, 11, 9]
    assert round(tost_ind(a, b, low=-1, high=1).pvalue, 6) == 0.965097
    assert round(tost_paired(a, b, low=-0.5, high=0.5).pvalue, 6) == 0.954854
    # and against pingouin at run time on other data
    x, y = _arms(7)
    ref = pg.tost(x, y, bound=0.03, paired=True)
    assert tost_paired(x, y, low=-0.03, high=0.03).pvalue == pytest.approx(ref.at["TOST", "pval"], rel=1e-10)


def test_tost_interval_and_readings():
    gen = np.random.default_rng(0)
    base = gen.normal(size=400)
    same = tost_paired(base + gen.normal(0, 0.05, 400), base, low=-0.03, high=0.03)
    assert same.reading == "equivalent" and equivalence_reading(same) == "equivalent"
    assert same.low < same.ci[0] < same.ci[1] < same.high
    far = tost_paired(base + 0.5 + gen.normal(0, 0.05, 400), base, low=-0.03, high=0.03)
    assert far.reading == "different"
    small = tost_paired([1, 0, 1, 1, 0, 1, 0, 0], [0, 0, 1, 0, 1, 1, 1, 0], low=-0.03, high=0.03)
    assert small.reading == "inconclusive"
    assert {same.reading, far.reading, small.reading} == set(READINGS)
    # the TOST interval is the 1 - 2 alpha t interval
    d = np.asarray([1, 0, 1, 1, 0, 1, 0, 0]) - np.asarray([0, 0, 1, 0, 1, 1, 1, 0])
    ref = stats.t.interval(0.9, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert small.ci == pytest.approx(ref, rel=1e-12)
    assert small.confidence_interval(0.95) == pytest.approx(
        stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d)), rel=1e-12
    )


@pytest.mark.parametrize("margin", [0.0, 0.02, -0.05])
def test_superiority_paired_matches_scipy(margin):
    x, y = _arms(3, p=(0.6, 0.5))
    res = superiority_paired(x, y, margin=margin)
    ref = stats.ttest_1samp(x - y, popmean=margin, alternative="greater")
    assert (res.statistic, res.pvalue) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-10)
    assert res.ci[0] == pytest.approx(ref.confidence_interval(0.95).low, rel=1e-10)
    assert res.superior == (ref.pvalue <= 0.05)


@pytest.mark.parametrize("usevar", ["pooled", "unequal"])
def test_superiority_ind_matches_scipy(usevar):
    gen = np.random.default_rng(1)
    x, y = gen.normal(1.0, 1.0, 30), gen.normal(0.5, 1.5, 20)
    res = superiority_ind(x, y, usevar=usevar)
    ref = stats.ttest_ind(x, y, equal_var=usevar == "pooled", alternative="greater")
    assert (res.statistic, res.pvalue, res.df) == pytest.approx((ref.statistic, ref.pvalue, ref.df), rel=1e-10)


@pytest.mark.parametrize("alternative", ["two-sided", "larger"])
@pytest.mark.parametrize(("n", "alpha", "power"), [(128, 0.05, 0.8), (20, 0.01, 0.9)])
def test_mde_paired_matches_statsmodels(alternative, n, alpha, power):
    ours = mde(
        n, sd=0.5, alpha=alpha, power=power, alternative="two-sided" if alternative == "two-sided" else "greater"
    )
    # statsmodels' power at our MDE is the target power (its own root-finder stops at ~1e-5)
    achieved = TTestPower().power(effect_size=ours.mde / 0.5, nobs=n, alpha=alpha, alternative=alternative)
    assert achieved == pytest.approx(power, abs=1e-9)
    d = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative=alternative)
    assert ours.mde == pytest.approx(0.5 * d, rel=1e-4)


def test_mde_less_is_a_positive_magnitude_equal_to_greater():
    assert mde(30, sd=1.0, alternative="less").mde == pytest.approx(mde(30, sd=1.0, alternative="greater").mde)


def test_mde_independent_matches_statsmodels():
    ours = mde(64, sd=0.5, design="independent", n2=96)
    achieved = TTestIndPower().power(effect_size=ours.mde / 0.5, nobs1=64, ratio=96 / 64, alpha=0.05)
    assert achieved == pytest.approx(0.8, abs=1e-9)
    d = TTestIndPower().solve_power(effect_size=None, nobs1=64, ratio=96 / 64, alpha=0.05, power=0.8)
    assert ours.mde == pytest.approx(0.5 * d, rel=1e-4)


def test_mde_equivalence_power_against_simulation():
    # paired design, n = 30, sd = 1, band +-0.6: simulate TOST at true difference 0
    n, sd, low, high = 30, 1.0, -0.6, 0.6
    res = mde(n, sd=sd, low=low, high=high)
    gen = np.random.default_rng(123)
    d = gen.normal(0.0, sd, size=(20000, n))
    m, se = d.mean(1), d.std(1, ddof=1) / np.sqrt(n)
    q = stats.t.ppf(0.95, n - 1)
    simulated = np.mean(((m - low) / se > q) & ((m - high) / se < -q))
    assert res.equivalence_power == pytest.approx(simulated, abs=0.015)
    # MDE = (t_.975 + ~t_.8) * 1/sqrt(30) ~ 0.53 < 0.6: the band is wider than the MDE
    assert 0.5 < res.mde < 0.56
    assert res.band_within_mde is False


def test_mde_band_flag():
    assert mde(128, sd=0.5, low=-0.03, high=0.03).band_within_mde is True
    assert mde(10000, sd=0.1, low=-0.03, high=0.03).band_within_mde is False


@pytest.mark.parametrize(
    ("fn", "kwargs", "match"),
    [
        (tost_paired, {"low": 0.03, "high": -0.03}, "`low` must be below `high`"),
        (tost_paired, {"low": 0.03, "high": 0.03}, "`low` must be below `high`"),
        (
            tost_paired,
            {"low": -0.03, "high": 0.03, "alpha": 1.2},
            r"`alpha` must be a number in the open interval \(0, 1\)",
        ),
        (tost_ind, {"low": -0.03, "high": 0.03, "usevar": "welch"}, r"`usevar` must be one of \{'pooled', 'unequal'\}"),
        (superiority_paired, {"alpha": 0.0}, "`alpha`"),
        (superiority_paired, {"margin": np.nan}, "`margin` must be a finite number"),
    ],
)
def test_bad_options(fn, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn([0.1, 0.5, 0.3, 0.9], [0.2, 0.4, 0.6, 0.1], **kwargs)


def test_bad_data():
    with pytest.raises(ValueError, match="`x` and `y` must have the same length"):
        tost_paired([1, 0, 1], [1, 0], low=-0.03, high=0.03)
    with pytest.raises(ValueError, match="`y` contains 1 NaN"):
        tost_paired([1, 0, 1], [1, np.nan, 0], low=-0.03, high=0.03)
    with pytest.raises(ValueError, match="zero variance"):
        tost_paired([1, 0, 1], [1, 0, 1], low=-0.03, high=0.03)
    with pytest.raises(ValueError, match="`x` contains 1 NaN"):
        superiority_ind([1, np.nan, 1], [1, 0, 0])
    with pytest.raises(ValueError, match="`result` must be a TostResult"):
        equivalence_reading(superiority_paired([1, 0, 1], [0, 0, 1]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sd": -1.0}, "`sd` must be positive"),
        ({"sd": 1.0, "power": 1.0}, "`power` must be a number in the open interval"),
        ({"sd": 1.0, "alpha": -0.1}, "`alpha` must be a number in the open interval"),
        ({"sd": 1.0, "alternative": "both"}, r"`alternative` must be one of \{'two-sided', 'less', 'greater'\}"),
        ({"sd": 1.0, "design": "crossover"}, r"`design` must be one of \{'paired', 'independent'\}"),
        ({"sd": 1.0, "low": 0.03, "high": -0.03}, "`low` must be below `high`"),
        ({"sd": 1.0, "low": 0.01, "high": 0.03}, "must contain 0"),
        ({"sd": 1.0, "low": -0.03}, "give both `low` and `high`"),
        ({"sd": 1.0, "n2": 10}, "`n2` is only for design='independent'"),
        ({"sd": 1.0, "power": 0.04}, "`power` must exceed `alpha`"),
        ({"sd": 1.0, "design": "independent", "n2": 1}, "`n2` must be an integer >= 2"),
    ],
)
def test_mde_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mde(128, **kwargs)
    with pytest.raises(ValueError, match="`n` must be an integer >= 2"):
        mde(1, sd=1.0)


def test_mde_refuses_a_design_whose_power_cannot_be_evaluated():
    # two paired units leave one degree of freedom, where the noncentral t's tail is NaN far out
    from creditaudit.stats import mde

    with pytest.raises(ValueError, match="MDE is undefined"):
        mde(2, sd=0.5, low=-0.03, high=0.03)
