"""Within-group Spearman and the median-Spearman cluster bootstrap, against scipy."""

import numpy as np
import pytest
from scipy import stats

from creditaudit.stats import group_spearman, median_spearman


def _data(seed=0, n_groups=12, size=8):
    gen = np.random.default_rng(seed)
    groups = np.repeat([f"traj-{g:02d}" for g in range(n_groups)], size)
    truth = gen.integers(-2, 3, size=groups.size).astype(float)  # tie-heavy, like A_replay
    credit = truth + gen.normal(size=groups.size)
    return credit, truth, groups


def test_per_group_values_equal_scipy_spearmanr_with_ties():
    credit, truth, groups = _data()
    res = group_spearman(credit, truth, groups)
    for label, rho in zip(res.groups, res.rho):
        m = groups == label
        assert rho == pytest.approx(stats.spearmanr(credit[m], truth[m]).statistic, abs=1e-12)
    assert res.n_groups + res.n_excluded_constant == 12


def test_constant_groups_are_excluded_and_counted():
    x = [1, 2, 3, 4, 5, 5, 5, 5, 1, 2, 3, 9]
    y = [1, 2, 3, 4, 1, 2, 3, 4, 7, 7, 7, 7]
    g = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    res = group_spearman(x, y, g)
    assert res.groups.tolist() == ["a"]
    assert res.excluded_groups.tolist() == ["b", "c"]
    assert res.n_excluded_constant == 2
    with pytest.raises(ValueError, match="group 'b' has constant"):
        group_spearman(x, y, g, constant="raise")


def test_single_item_group_has_no_rank_information():
    res = group_spearman([1, 2, 3, 4], [2, 1, 3, 0], [0, 0, 0, 1])
    assert res.groups.tolist() == [0]
    assert res.excluded_groups.tolist() == [1]


def test_median_and_ci_equal_scipy_bootstrap_of_per_group_values():
    credit, truth, groups = _data(seed=3, n_groups=30)
    res = median_spearman(credit, truth, groups, n_resamples=2000, rng=np.random.default_rng(42))
    per_group = np.array(
        [stats.spearmanr(credit[groups == g], truth[groups == g]).statistic for g in np.unique(groups)]
    )
    assert res.statistic == pytest.approx(np.median(per_group), abs=1e-12)
    ref = stats.bootstrap((per_group,), np.median, n_resamples=2000, method="percentile", rng=np.random.default_rng(42))
    assert res.ci == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert res.n_degenerate == 0
    assert res.n_resamples == 2000


def test_median_spearman_is_reproducible_from_a_named_stream():
    from creditaudit.protocol.seeds import rng

    credit, truth, groups = _data(seed=4)
    a = median_spearman(credit, truth, groups, n_resamples=500, rng=rng("p" * 64, "audit/bootstrap/implicit"))
    b = median_spearman(credit, truth, groups, n_resamples=500, rng=rng("p" * 64, "audit/bootstrap/implicit"))
    c = median_spearman(credit, truth, groups, n_resamples=500, rng=rng("p" * 64, "audit/bootstrap/judge"))
    np.testing.assert_array_equal(a.distribution, b.distribution)
    assert not np.array_equal(a.distribution, c.distribution)


def test_perfect_tracking_gives_one():
    x = np.tile(np.arange(5.0), 6)
    res = median_spearman(x, 2 * x + 1, np.repeat(np.arange(6), 5), n_resamples=100, rng=0)
    assert res.statistic == 1.0
    assert res.ci == (1.0, 1.0)


def test_no_group_with_rank_information_raises():
    with pytest.raises(ValueError, match="no group of `groups` has rank information"):
        median_spearman([1, 1, 2, 2], [1, 2, 3, 4], [0, 0, 1, 1])


def test_to_frame_and_level():
    credit, truth, groups = _data(seed=5)
    res = median_spearman(credit, truth, groups, n_resamples=400, rng=0)
    frame = res.to_frame()
    assert frame.shape[0] == 1
    assert frame.loc[0, "n_excluded_constant"] == res.n_excluded_constant
    lo80, hi80 = res.confidence_interval(0.8)
    assert res.ci[0] <= lo80 <= hi80 <= res.ci[1]


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([1.0, np.nan, 2.0], [1, 2, 3], [0, 0, 0]), {}, "`x` contains 1 NaN"),
        (([1.0, 2.0, 3.0], [1, 2], [0, 0, 0]), {}, "`x` and `y` must have the same length"),
        (([1.0, 2.0, 3.0], [1, 2, 3], [0, 0]), {}, r"`groups` must have one label per item"),
        (
            ([1.0, 2.0, 3.0], [1, 2, 3], [0, 0, 0]),
            {"constant": "drop"},
            r"`constant` must be one of \{'exclude', 'raise'\}",
        ),
        (([1.0, 2.0, 3.0], [1, 2, 3], [0, 0, 0]), {"confidence_level": 95}, "`confidence_level`"),
        (([1.0, 2.0, 3.0], [1, 2, 3], [0, 0, 0]), {"n_resamples": 1.5}, "`n_resamples`"),
    ],
)
def test_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        median_spearman(*args, **kwargs)


# --- more references for the per-group values -------------------------------------------------
# a published worked example, and average ranks computed without scipy (the code ranks with
# scipy.stats.rankdata)


def test_group_spearman_reproduces_a_published_worked_example():
    # Wikipedia, "Spearman's rank correlation coefficient", Example: IQ against hours of TV per
    # week for ten people; sum d^2 = 194, rho = 1 - 6 * 194 / (10 (10^2 - 1)) = -29/165 = -0.175757...
    iq = [106, 100, 86, 101, 99, 103, 97, 113, 112, 110]
    tv = [7, 27, 2, 50, 28, 29, 20, 12, 6, 17]
    res = group_spearman(iq, tv, ["person"] * 10)
    assert res.rho.tolist() == pytest.approx([-29 / 165], abs=1e-15)


def _average_ranks(v):
    v = np.asarray(v, dtype=float)
    ranks = np.empty(v.size)
    order = np.argsort(v, kind="stable")
    sorted_v = v[order]
    i = 0
    while i < v.size:  # ties get the mean of the 1-based positions they span
        j = i
        while j + 1 < v.size and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def test_group_spearman_equals_pearson_of_average_ranks_computed_by_hand():
    credit, truth, groups = _data(seed=3)
    res = group_spearman(credit, truth, groups)
    for label, rho in zip(res.groups, res.rho):
        m = groups == label
        rx, ry = _average_ranks(credit[m]), _average_ranks(truth[m])
        rx, ry = rx - rx.mean(), ry - ry.mean()
        assert rho == pytest.approx(rx @ ry / np.sqrt((rx @ rx) * (ry @ ry)), abs=1e-14)
