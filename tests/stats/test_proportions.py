"""Wilson, Holm, sign agreement and the resolution bound.

The code computes Wilson and Holm with statsmodels, so the tests comparing with statsmodels only
check the wrapping; the independent references are the published worked examples below
(Newcombe 1998, the paper's intervals) and Holm's procedure worked by hand.
"""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from creditaudit.stats import holm, resolution_bound, sign_agreement, wilson


@pytest.mark.parametrize(("k", "n"), [(267, 527), (84, 139), (0, 10), (10, 10), (1, 1), (3, 1000)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels(k, n, level):
    res = wilson(k, n, confidence_level=level)
    ref = proportion_confint(k, n, alpha=1 - level, method="wilson")
    assert res.ci == pytest.approx(ref, abs=1e-12)
    assert res.confidence_interval(0.8) == pytest.approx(
        proportion_confint(k, n, alpha=0.2, method="wilson"), abs=1e-12
    )


def test_wilson_reproduces_the_papers_sign_agreement_intervals():
    # docs/design.md §5: implicit 267/527 = 50.7% [46.4, 54.9]; judge 84/139 = 60.4% [52.1, 68.2]
    implicit, judge = wilson(267, 527), wilson(84, 139)
    assert round(100 * implicit.proportion, 1) == 50.7
    assert [round(100 * b, 1) for b in implicit.ci] == [46.4, 54.9]
    assert round(100 * judge.proportion, 1) == 60.4
    assert [round(100 * b, 1) for b in judge.ci] == [52.1, 68.2]


# Newcombe, R. G. (1998). Two-sided confidence intervals for the single proportion: comparison
# of seven methods. Stat. Med. 17, 857-872, Table II, method 3 (Wilson score, no continuity
# correction), 95%, printed to 4 decimals.
NEWCOMBE_1998 = [
    (81, 263, (0.2553, 0.3662)),
    (15, 148, (0.0624, 0.1605)),
    (0, 20, (0.0000, 0.1611)),
    (1, 29, (0.0061, 0.1718)),
    (29, 29, (0.8830, 1.0000)),
]


@pytest.mark.parametrize(("k", "n", "ci"), NEWCOMBE_1998)
def test_wilson_reproduces_newcombe_1998(k, n, ci):
    res = wilson(k, n)
    assert [round(b, 4) for b in res.ci] == pytest.approx(list(ci), abs=1e-12)
    assert res.confidence_interval() == res.ci
    assert 0.0 <= res.ci[0] <= res.proportion <= res.ci[1] <= 1.0


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((5, 0), {}, "`n` must be at least 1"),
        ((6, 5), {}, r"`successes` \(6\) must not exceed `n` \(5\)"),
        ((-1, 5), {}, "`successes` must be a non-negative integer"),
        ((2.5, 5), {}, "`successes` must be a non-negative integer"),
        ((2, 5), {"confidence_level": 0.0}, r"`confidence_level` must be a number in the open interval \(0, 1\)"),
    ],
)
def test_wilson_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        wilson(*args, **kwargs)


@pytest.mark.parametrize("seed", range(3))
def test_holm_matches_statsmodels(seed):
    gen = np.random.default_rng(seed)
    p = np.concatenate([gen.uniform(0, 0.05, 3), gen.uniform(0, 1, 5), [0.02, 0.02]])  # with ties
    for alpha in (0.01, 0.1):
        reject, adjusted, *_ = multipletests(p, alpha=alpha, method="holm")
        res = holm(p, alpha=alpha)
        np.testing.assert_allclose(res.pvalues_adjusted, adjusted, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(res.reject, reject)


def test_holm_worked_example_holm_1979_style():
    # m = 4: thresholds alpha/4, alpha/3, alpha/2, alpha; 0.01 <= 0.0125, 0.02 > 0.0167 stops.
    res = holm([0.01, 0.02, 0.03, 0.04], alpha=0.05)
    assert res.reject.tolist() == [True, False, False, False]
    assert res.pvalues_adjusted.tolist() == pytest.approx([0.04, 0.06, 0.06, 0.06])


@pytest.mark.parametrize(
    ("pvalues", "adjusted"),
    [
        # by hand: sorted p times (m, m-1, ..., 1), running maximum, capped at 1
        ([0.01, 0.02, 0.03, 0.04, 0.05], [0.05, 0.08, 0.09, 0.09, 0.09]),
        ([0.3, 0.6, 0.01, 0.3], [0.9, 0.9, 0.04, 0.9]),  # ties, input order kept
        ([0.5, 0.4], [0.8, 0.8]),
        ([0.6, 0.7], [1.0, 1.0]),  # capped
        ([0.001, 0.9, 0.012, 0.02], [0.004, 0.9, 0.036, 0.04]),
        ([0.2], [0.2]),  # a family of one is not adjusted
    ],
)
def test_holm_adjusted_values_worked_by_hand(pvalues, adjusted):
    res = holm(pvalues, alpha=0.05)
    assert res.pvalues_adjusted.tolist() == pytest.approx(adjusted, abs=1e-15)
    assert res.reject.tolist() == [a <= 0.05 for a in res.pvalues_adjusted]
    assert res.n_tests == len(pvalues)


def test_holm_refuses_nan():
    with pytest.raises(ValueError, match=r"`pvalues` contains NaN at position\(s\) \[1\]"):
        holm([0.01, np.nan, 0.2])


@pytest.mark.parametrize(
    ("pvalues", "kwargs", "match"),
    [
        ([0.1, 1.2], {}, r"`pvalues` must lie in \[0, 1\]"),
        ([], {}, "`pvalues` must be a non-empty 1-D array"),
        ([0.1], {"alpha": 1.5}, r"`alpha` must be a number in the open interval \(0, 1\)"),
        ([0.1], {"alpha": 0}, r"`alpha` must be a number in the open interval \(0, 1\)"),
        ([0.1, 0.2], {"names": ["C1"]}, "`names` must have one entry per p-value"),
    ],
)
def test_holm_bad_input(pvalues, kwargs, match):
    with pytest.raises(ValueError, match=match):
        holm(pvalues, **kwargs)


def test_holm_frame_has_a_row_per_hypothesis():
    frame = holm([0.01, 0.5], names=["C1", "C2"]).to_frame()
    assert frame["name"].tolist() == ["C1", "C2"]
    assert frame["reject"].tolist() == [True, False]


def test_sign_agreement_counts_and_interval():
    credit = np.array([0.2, -0.3, 0.0, 1.0, -1.0, 0.5, 0.0, 2.0])
    truth = np.array([1.0, -1.0, 1.0, -0.5, 0.0, 0.3, 0.0, 0.1])
    res = sign_agreement(credit, truth)
    # both nonzero: items 0, 1, 3, 5, 7; agree: 0, 1, 5, 7
    assert (res.n_agree, res.n_both_nonzero, res.n_items) == (4, 5, 8)
    assert (res.n_zero_x, res.n_zero_y) == (2, 2)
    assert res.proportion == 0.8
    assert res.ci == pytest.approx(proportion_confint(4, 5, alpha=0.05, method="wilson"), abs=1e-12)


def test_sign_agreement_bad_input():
    with pytest.raises(ValueError, match="`x` and `y` must have the same length"):
        sign_agreement([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="`y` contains 1 NaN"):
        sign_agreement([1.0, 2.0], [1.0, np.nan])
    with pytest.raises(ValueError, match="no item has both"):
        sign_agreement([0.0, 1.0], [1.0, 0.0])


# --- resolution bound (a one-sided Clopper-Pearson bound, so it lives with the proportions) ---


def test_resolution_bound_spec_value_and_definition():
    assert round(resolution_bound(3), 3) == 0.632  # docs/design.md §3
    # definition: the largest rate q with (1 - q)**n >= alpha
    for n in (1, 3, 8, 20):
        q = resolution_bound(n, alpha=0.05)
        assert (1 - q) ** n == pytest.approx(0.05, rel=1e-12)
        # the exact one-sided Clopper-Pearson upper bound for 0 successes out of n
        assert q == pytest.approx(stats.beta.ppf(0.95, 1, n), rel=1e-10)
    np.testing.assert_allclose(resolution_bound([1, 2, 3], alpha=0.1), 1 - 0.1 ** (1 / np.array([1, 2, 3])))


@pytest.mark.parametrize(
    ("n", "kwargs", "match"),
    [
        (0, {}, "`n` must be a positive integer"),
        (2.5, {}, "`n` must be a positive integer"),
        (3, {"alpha": 1.0}, r"`alpha` must be a number in the open interval \(0, 1\)"),
    ],
)
def test_resolution_bound_bad_input(n, kwargs, match):
    with pytest.raises(ValueError, match=match):
        resolution_bound(n, **kwargs)
