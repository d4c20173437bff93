"""Partial correlation, standardised OLS and Cohen's kappa against pingouin and statsmodels."""

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from statsmodels.stats.inter_rater import cohens_kappa as sm_kappa

from creditaudit.stats import cohens_kappa, ols_standardized, partial_corr


def _fluency_data(seed=0, n=150):
    gen = np.random.default_rng(seed)
    fluency = gen.normal(size=n)
    increment = 0.4 * fluency + gen.normal(size=n)
    credit = 0.9 * fluency + 0.15 * increment + 0.5 * gen.normal(size=n)
    return credit, increment, fluency, gen.normal(size=n)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_partial_corr_matches_pingouin(method, alternative):
    credit, increment, fluency, other = _fluency_data()
    df = pd.DataFrame({"c": credit, "i": increment, "f": fluency, "o": other})
    for covar in (["f"], ["f", "o"]):
        ref = pg.partial_corr(df, x="c", y="i", covar=covar, method=method, alternative=alternative)
        res = partial_corr(credit, increment, df[covar].to_numpy(), method=method, alternative=alternative)
        assert res.statistic == pytest.approx(ref["r"].iloc[0], abs=1e-12)
        assert res.pvalue == pytest.approx(ref["p_val"].iloc[0], rel=1e-9)
        # pingouin rounds its CI95 column for display; its interval function, unrounded:
        k = len(covar)
        ref_ci = pg.compute_esci(
            stat=ref["r"].iloc[0], nx=150 - k, ny=150 - k, eftype="r", decimals=15, alternative=alternative
        )
        assert res.ci == pytest.approx(tuple(ref_ci), abs=1e-12)
        assert res.n == 150 and res.df == 150 - 2 - len(covar)


def test_partial_corr_removes_a_shared_cause():
    gen = np.random.default_rng(1)
    z = gen.normal(size=2000)
    x, y = z + 0.3 * gen.normal(size=2000), z + 0.3 * gen.normal(size=2000)
    assert np.corrcoef(x, y)[0, 1] > 0.8
    res = partial_corr(x, y, z)
    assert abs(res.statistic) < 0.06 and res.pvalue > 0.01


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([1.0, 2.0, np.nan, 4.0, 5.0], [1, 2, 3, 4, 5], [1, 3, 2, 5, 4]), {}, "`x` contains 1 NaN"),
        (([1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 4], [1, 3, 2, 5, 4]), {}, "`x` and `y` must have the same length"),
        (([1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 4, 5], [1, 3, 2]), {}, "`covar` must have one row per item"),
        (([1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 5, 4], [1, 3, np.nan, 5, 4]), {}, "`covar` contains NaN"),
        (
            ([1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 5, 4], [1, 3, 2, 5, 4]),
            {"method": "kendall"},
            r"`method` must be one of \{'pearson', 'spearman'\}",
        ),
        (
            ([1.0, 2.0, 3.0, 4.0, 5.0], [1, 2, 3, 5, 4], [1, 3, 2, 5, 4]),
            {"alternative": "greater-than"},
            r"`alternative` must be one of \{'two-sided', 'less', 'greater'\}",
        ),
    ],
)
def test_partial_corr_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        partial_corr(*args, **kwargs)


def test_ols_standardized_matches_pingouin_and_identity():
    credit, increment, fluency, _ = _fluency_data(seed=2, n=300)
    X = np.column_stack([fluency, increment])
    res = ols_standardized(credit, X, names=["fluency", "increment"])
    ref = pg.linear_regression(X, credit, add_intercept=True, as_dataframe=True)
    raw = ref["coef"].to_numpy()[1:]
    np.testing.assert_allclose(res.coefficients_raw, raw, rtol=1e-10)
    np.testing.assert_allclose(res.pvalues, ref["pval"].to_numpy()[1:], rtol=1e-8)
    assert res.intercept_raw == pytest.approx(ref["coef"].iloc[0], rel=1e-10, abs=1e-12)
    # standardised beta = b * sd_x / sd_y
    np.testing.assert_allclose(res.coefficients, raw * X.std(0, ddof=1) / credit.std(ddof=1), rtol=1e-10)
    assert res.r_squared == pytest.approx(ref["r2"].iloc[0], rel=1e-10)
    frame = res.to_frame()
    assert frame["name"].tolist() == ["fluency", "increment"]
    assert res.confidence_interval(0.95).shape == (2, 2)


def test_ols_bad_input():
    with pytest.raises(ValueError, match="`X` must have one row per item of `y`"):
        ols_standardized([1.0, 2.0, 3.0], np.ones((2, 1)))
    with pytest.raises(ValueError, match="`X` has a constant column"):
        ols_standardized([1.0, 2.0, 3.0, 4.0], np.column_stack([[1, 2, 4, 3], [1, 1, 1, 1]]))
    with pytest.raises(ValueError, match="`y` contains 1 NaN"):
        ols_standardized([1.0, np.nan, 3.0, 4.0], [1, 2, 4, 3])
    with pytest.raises(ValueError, match="`names` must have one entry per column"):
        ols_standardized([1.0, 2.0, 3.0, 4.0], [1, 2, 4, 3], names=["a", "b"])
    with pytest.raises(ValueError, match="rank-deficient"):
        ols_standardized([1.0, 2.0, 3.0, 5.0, 4.0], np.column_stack([[1, 2, 4, 3, 5], [2, 4, 8, 6, 10]]))


def _ratings(seed=0, n=200):
    gen = np.random.default_rng(seed)
    a = gen.choice([-1, 0, 1], size=n, p=[0.1, 0.6, 0.3])
    b = np.where(gen.uniform(size=n) < 0.7, a, gen.choice([-1, 0, 1], size=n))
    return a, b


@pytest.mark.parametrize("seed", range(3))
def test_kappa_matches_statsmodels(seed):
    a, b = _ratings(seed)
    table = pd.crosstab(a, b).reindex(index=[-1, 0, 1], columns=[-1, 0, 1], fill_value=0).to_numpy()
    ref = sm_kappa(table)
    res = cohens_kappa(a, b)
    assert res.statistic == pytest.approx(ref.kappa, abs=1e-12)
    assert res.se == pytest.approx(ref.std_kappa, rel=1e-10)
    assert res.ci == pytest.approx((ref.kappa_low, ref.kappa_upp), abs=1e-12)
    assert res.pvalue == pytest.approx(ref.pvalue_two_sided, rel=1e-10)
    assert res.agreement == pytest.approx(np.mean(a == b), abs=1e-15)
    assert res.n_agree == int(np.sum(a == b))
    assert res.categories == (-1, 0, 1)


def test_kappa_textbook_example_and_unused_category():
    # Cohen's kappa worked example (Wikipedia, "Cohen's kappa"): 20/5/10/15 -> 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    res = cohens_kappa(a, b)
    assert res.statistic == pytest.approx(0.4, abs=1e-12)
    assert (res.agreement, res.expected_agreement) == pytest.approx((0.7, 0.5))
    # an extra category nobody used changes neither kappa nor its SE
    res3 = cohens_kappa(a, b, categories=["yes", "no", "maybe"])
    assert res3.statistic == pytest.approx(0.4, abs=1e-12)
    assert res3.se == pytest.approx(res.se, rel=1e-12)
    assert res3.table.shape == (3, 3)


def test_kappa_bad_input():
    with pytest.raises(ValueError, match="`a` and `b` must have the same length"):
        cohens_kappa([1, 0], [1])
    with pytest.raises(ValueError, match="`a` contains NaN"):
        cohens_kappa([1.0, np.nan], [1.0, 0.0])
    with pytest.raises(ValueError, match="not in `categories`"):
        cohens_kappa([1, 0], [1, 2], categories=[0, 1])
    with pytest.raises(ValueError, match="kappa is undefined"):
        cohens_kappa([1, 1, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="`confidence_level`"):
        cohens_kappa([1, 0], [1, 0], confidence_level=2)
