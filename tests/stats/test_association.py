"""Partial correlation, standardised OLS and Cohen's kappa against R, SAS, closed forms, pingouin and
statsmodels."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from scipy import stats
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


# --- independent references ------------------------------------------------------------------
# The code computes the partial correlation with pingouin and kappa with statsmodels, so the tests
# above that compare with those libraries only check the wrapping. These pin R ppcor's and SAS's
# published numbers and check the formulas worked out here without either library.
REFERENCE = Path(__file__).parent / "reference"


@pytest.mark.parametrize(
    ("covar", "method", "r", "p"),
    [
        (["cv1"], "pearson", 0.5681692, 0.001303059),
        (["cv1", "cv2"], "pearson", 0.5344372, 0.003392904),
        (["cv1", "cv2", "cv3"], "pearson", 0.4926007, 0.009044164),
        (["cv1", "cv2", "cv3"], "spearman", 0.5209208, 0.005336187),
    ],
)
def test_partial_corr_reproduces_r_ppcor(covar, method, r, p):
    # R ppcor::pcor.test, tests/stats/reference/partial_corr.R (printed to 7 and 10 significant digits)
    df = pd.read_csv(REFERENCE / "partial_corr.csv")
    res = partial_corr(df["x"], df["y"], df[covar].to_numpy(), method=method)
    assert res.statistic == pytest.approx(r, abs=5e-8)
    assert res.pvalue == pytest.approx(p, abs=5e-10)
    assert res.df == 30 - 2 - len(covar)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_partial_corr_against_residual_regression_and_fisher_formula(alternative):
    # independent of pingouin: correlation of least-squares residuals on [1, Z], its t-test with
    # n - 2 - k df (scipy), and Fisher's interval with n - k as the sample size
    credit, increment, fluency, other = _fluency_data(seed=4)
    z = np.column_stack([fluency, other])
    design = np.column_stack([np.ones(150), z])
    rx = credit - design @ np.linalg.lstsq(design, credit, rcond=None)[0]
    ry = increment - design @ np.linalg.lstsq(design, increment, rcond=None)[0]
    r = float(rx @ ry / np.sqrt((rx @ rx) * (ry @ ry)))
    df = 150 - 2 - 2
    t = r * math.sqrt(df / (1 - r * r))
    p = {"two-sided": 2 * stats.t.sf(abs(t), df), "greater": stats.t.sf(t, df), "less": stats.t.cdf(t, df)}[alternative]
    res = partial_corr(credit, increment, z, alternative=alternative, confidence_level=0.9)
    assert res.statistic == pytest.approx(r, abs=1e-12)
    assert res.pvalue == pytest.approx(p, rel=1e-9)
    se = 1 / math.sqrt(150 - 2 - 3)
    if alternative == "two-sided":
        q = stats.norm.ppf(0.95)
        ci = (math.tanh(math.atanh(r) - q * se), math.tanh(math.atanh(r) + q * se))
    elif alternative == "greater":
        ci = (math.tanh(math.atanh(r) - stats.norm.ppf(0.9) * se), 1.0)
    else:
        ci = (-1.0, math.tanh(math.atanh(r) + stats.norm.ppf(0.9) * se))
    assert res.ci == pytest.approx(ci, abs=1e-12)
    assert res.confidence_interval() == res.ci


def test_partial_corr_refuses_collinear_covariates_and_an_explained_variable():
    credit, increment, fluency, other = _fluency_data(seed=5)
    with pytest.raises(ValueError, match=r"`covar` is rank-deficient \(collinear columns\)"):
        partial_corr(credit, increment, np.column_stack([fluency, other, fluency + other]))
    with pytest.raises(ValueError, match="after ranking"):  # a monotone transform has the same ranks
        partial_corr(credit, increment, np.column_stack([fluency, fluency**3]), method="spearman")
    with pytest.raises(ValueError, match="`x` or `y` is fully explained by `covar`"):
        partial_corr(2 * fluency - other + 1, increment, np.column_stack([fluency, other]))


def test_ols_standardized_closed_form():
    # one predictor: the standardised slope is Pearson's r. x = 1..5, y = 2, 1, 4, 3, 5:
    # sum dx dy = 8, sum dx^2 = sum dy^2 = 10, so r = 0.8; t = r sqrt(3 / (1 - r^2)) = 0.8 sqrt(25/3)
    res = ols_standardized([2.0, 1.0, 4.0, 3.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert res.coefficients.tolist() == pytest.approx([0.8], abs=1e-14)
    assert res.coefficients_raw.tolist() == pytest.approx([0.8], abs=1e-14)  # sd_x = sd_y
    assert res.intercept_raw == pytest.approx(0.6, abs=1e-14)  # 3 - 0.8 * 3
    assert res.r_squared == pytest.approx(0.64, abs=1e-14)
    t = 0.8 * math.sqrt(25 / 3)
    assert res.statistics.tolist() == pytest.approx([t], rel=1e-12)
    assert res.pvalues.tolist() == pytest.approx([2 * stats.t.sf(t, 3)], rel=1e-10)
    assert res.df_resid == 3
    # the coefficient's interval: beta +- t_{3, 0.975} * se, se = beta / t
    q = stats.t.ppf(0.975, 3)
    np.testing.assert_allclose(res.confidence_interval(), [[0.8 - q * 0.8 / t, 0.8 + q * 0.8 / t]], rtol=1e-12)
    np.testing.assert_allclose(res.confidence_interval(0.95), res.confidence_interval(), rtol=0)


def _ratings_from_table(table):
    a, b = [], []
    for i, row in enumerate(table):
        for j, count in enumerate(row):
            a += [i] * count
            b += [j] * count
    return a, b


def test_kappa_reproduces_sas_proc_freq():
    # SAS PROC FREQ printout for this table, published with statsmodels' test suite
    # (statsmodels/stats/tests/test_inter_rater.py, TestUnweightedCohens): kappa 0.4842, ASE 0.1380,
    # 95% limits 0.2137 and 0.7547; under H0 ASE 0.1484, Z 3.2626, two-sided Pr > |Z| 0.0011.
    # Rater b never uses category 0: an empty column.
    a, b = _ratings_from_table([[0, 4, 1], [0, 8, 0], [0, 1, 5]])
    res = cohens_kappa(a, b, categories=[0, 1, 2])
    assert res.statistic == pytest.approx(0.4842, abs=5e-5)
    assert res.se == pytest.approx(0.1380, abs=5e-5)
    assert res.ci == pytest.approx((0.2137, 0.7547), abs=5e-5)
    assert res.pvalue == pytest.approx(0.0011, abs=5e-5)
    assert res.statistic / 3.2626 == pytest.approx(0.1484, abs=5e-5)  # kappa / Z = ASE under H0
    assert (res.n, res.n_agree) == (19, 13)


def test_kappa_against_the_fleiss_cohen_everitt_formula():
    # the asymptotic variances worked out here, independently of statsmodels
    a, b = _ratings(7)
    res = cohens_kappa(a, b, confidence_level=0.9)
    table = pd.crosstab(a, b).reindex(index=[-1, 0, 1], columns=[-1, 0, 1], fill_value=0).to_numpy()
    p = table / table.sum()
    row, col = p.sum(1), p.sum(0)
    po, pe = np.trace(p), row @ col
    k = (po - pe) / (1 - pe)
    term_a = (np.diag(p) * (1 - (row + col) * (1 - k)) ** 2).sum()
    off = p * (col[:, None] + row[None, :]) ** 2
    np.fill_diagonal(off, 0)
    var = (term_a + (1 - k) ** 2 * off.sum() - (k - pe * (1 - k)) ** 2) / ((1 - pe) ** 2 * 200)
    var0 = (pe + pe**2 - (row * col * (row + col)).sum()) / ((1 - pe) ** 2 * 200)
    assert res.statistic == pytest.approx(k, abs=1e-12)
    assert res.se == pytest.approx(math.sqrt(var), rel=1e-10)
    q = stats.norm.ppf(0.95)
    assert res.ci == pytest.approx((k - q * math.sqrt(var), k + q * math.sqrt(var)), abs=1e-12)
    assert res.pvalue == pytest.approx(2 * stats.norm.sf(abs(k) / math.sqrt(var0)), rel=1e-10)
    assert res.confidence_interval(0.95) == pytest.approx(
        (k - stats.norm.ppf(0.975) * math.sqrt(var), k + stats.norm.ppf(0.975) * math.sqrt(var)), abs=1e-12
    )


def test_kappa_perfect_agreement_has_zero_standard_error():
    # the variance is 0 up to float error, which can fall either side of 0: never a NaN
    res = cohens_kappa([0, 1, 2, 0, 1, 2, 0], [0, 1, 2, 0, 1, 2, 0])
    assert res.statistic == pytest.approx(1.0)
    assert res.se == pytest.approx(0.0, abs=1e-7) and res.ci == pytest.approx((1.0, 1.0), abs=1e-6)
