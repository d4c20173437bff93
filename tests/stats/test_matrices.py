"""Partition test, Mantel and partial Mantel.

Partial Mantel has no Python reference: the pinned numbers below come from R vegan 2.6-4's
``mantel.partial`` (and ``mantel``) run by ``tests/stats/reference/partial_mantel.R`` on the
matrices that script defines (rebuilt here). With the same explicit permutation matrix (all
7! permutations, lexicographic) vegan and this implementation must agree exactly; with random
permutations the p-values agree within Monte Carlo error. R is not needed at test time.
"""

import itertools

import numpy as np
import pytest
from skbio.stats.distance import mantel as skbio_mantel

from creditaudit.stats import mantel, partial_mantel, partition_test


def _euclid(*coords):
    return np.sqrt(sum((np.asarray(c)[:, None] - np.asarray(c)[None, :]) ** 2 for c in coords))


# --- the matrices of tests/stats/reference/partial_mantel.R --------------------------------
A7 = [0.0, 1.3, 2.1, 3.7, 4.2, 6.0, 7.5]
B7 = [2.0, 0.5, 3.1, 1.2, 4.4, 0.9, 2.8]
C7 = [1.0, 3.2, 0.4, 2.5, 1.9, 0.7, 2.2]
ARM7 = np.array([1, 1, 2, 2, 3, 3, 3])
X7, Y7 = _euclid(A7, B7), _euclid(C7, B7)
Z7 = (ARM7[:, None] != ARM7[None, :]).astype(float)
ALL7 = np.array(list(itertools.permutations(range(7))))  # R: perms(1:7), same order

A12 = [0.3, 1.1, 1.9, 2.2, 3.4, 3.9, 5.0, 5.2, 6.6, 7.1, 8.3, 9.0]
B12 = [1.5, 0.2, 2.7, 0.9, 1.8, 3.3, 0.4, 2.2, 1.1, 3.0, 0.7, 2.5]
C12 = [2.1, 2.9, 0.8, 1.7, 2.4, 0.3, 1.4, 3.2, 0.6, 1.9, 2.6, 1.0]
X12, Y12, Z12 = _euclid(B12, C12), _euclid(A12, B12), _euclid(C12)

# Output of `Rscript tests/stats/reference/partial_mantel.R` (R 4.2.2, vegan 2.6-4).
VEGAN = {
    "pearson": {
        "n7_partial": -0.021293458763053323,
        "n7_partial_signif_exact": 0.50347153342590756,
        "n7_partial_perm": {
            2: -0.030194927952619969,
            100: 0.12573261634346172,
            2500: 0.13203742723163353,
            5040: -0.046348471778885084,
        },
        "n7_mantel": -0.10708831360277171,
        "n7_mantel_signif_exact": 0.65800436421344977,
        "n12_partial": 0.055550515562058769,
        "n12_partial_signif_99999": 0.30130000000000001,
    },
    "spearman": {
        "n7_partial": 0.074879118749324319,
        "n7_partial_signif_exact": 0.35171592937909146,
        "n7_partial_perm": {
            2: 0.098544618008370014,
            100: 0.14366517958369085,
            2500: 0.25323366659765206,
            5040: 0.13656531848735337,
        },
        "n7_mantel": -0.046753246753246755,
        "n7_mantel_signif_exact": 0.56754612180122987,
        "n12_partial": 0.065361066063825107,
        "n12_partial_signif_99999": 0.27353,
    },
}


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_partial_mantel_statistic_matches_vegan(method):
    ref = VEGAN[method]
    for args, key in (((X7, Y7, Z7), "n7_partial"), ((X12, Y12, Z12), "n12_partial")):
        res = partial_mantel(*args, method=method, permutations=10, rng=0)
        assert res.statistic == pytest.approx(ref[key], abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_partial_mantel_exact_enumeration_matches_vegan(method):
    ref = VEGAN[method]
    res = partial_mantel(X7, Y7, Z7, method=method, permutations=ALL7)
    assert res.permutations == 5040
    assert res.pvalue == pytest.approx(ref["n7_partial_signif_exact"], abs=1e-15)
    for k, value in ref["n7_partial_perm"].items():  # R's 1-based row k
        assert res.null_distribution[k - 1] == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_mantel_exact_enumeration_matches_vegan(method):
    ref = VEGAN[method]
    res = mantel(X7, Y7, method=method, permutations=ALL7)
    assert res.statistic == pytest.approx(ref["n7_mantel"], abs=1e-12)
    assert res.pvalue == pytest.approx(ref["n7_mantel_signif_exact"], abs=1e-15)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_partial_mantel_random_permutation_pvalue_agrees_with_vegan(method):
    res = partial_mantel(X12, Y12, Z12, method=method, permutations=20000, rng=np.random.default_rng(8))
    # Monte Carlo SE: ~0.0032 (ours) and ~0.0015 (vegan, 99999); 0.015 is > 4 combined SE
    assert res.pvalue == pytest.approx(VEGAN[method]["n12_partial_signif_99999"], abs=0.015)
    assert res.n_degenerate == 0


def test_partial_mantel_random_p_converges_to_exact_p():
    exact = partial_mantel(X7, Y7, Z7, permutations=ALL7).pvalue
    approx = partial_mantel(X7, Y7, Z7, permutations=20000, rng=5).pvalue
    assert approx == pytest.approx(exact, abs=0.015)


def _unit(v):
    v = v - v.mean()
    return v / np.linalg.norm(v)


def test_partial_mantel_equals_correlation_of_residuals():
    # independent formula: partial r = corr of residuals of x and y on [1, z]
    iu = np.triu_indices(12, 1)
    x, y, z = X12[iu], Y12[iu], Z12[iu]
    design = np.column_stack([np.ones_like(z), z])
    rx = x - design @ np.linalg.lstsq(design, x, rcond=None)[0]
    ry = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    expected = float(_unit(rx) @ _unit(ry))
    assert partial_mantel(X12, Y12, Z12, permutations=1, rng=0).statistic == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("method", ["pearson", "spearman"])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_mantel_matches_scikit_bio(method, alternative):
    gen = np.random.default_rng(3)
    pts = gen.normal(size=(15, 2))
    x = _euclid(pts[:, 0], pts[:, 1])
    y = _euclid(pts[:, 0] + gen.normal(scale=2.0, size=15))
    r_ref, p_ref, n_ref = skbio_mantel(x, y, method=method, permutations=9999, alternative=alternative, seed=1)
    res = mantel(x, y, method=method, permutations=9999, alternative=alternative, rng=2)
    assert res.statistic == pytest.approx(r_ref, abs=1e-12)
    assert res.n == n_ref
    assert res.pvalue == pytest.approx(p_ref, abs=0.02)  # two independent 9999-permutation streams


def test_results_do_not_depend_on_batch_size():
    a = partial_mantel(X12, Y12, Z12, permutations=999, rng=4)
    b = partial_mantel(X12, Y12, Z12, permutations=999, rng=4, batch=13)
    # same permutations; the matrix products may round differently by batch shape (last bit)
    np.testing.assert_allclose(a.null_distribution, b.null_distribution, rtol=0, atol=1e-13)
    assert a.pvalue == b.pvalue
    c = partition_test(X12, [0] * 6 + [1] * 6, permutations=999, rng=4)
    d = partition_test(X12, [0] * 6 + [1] * 6, permutations=999, rng=4, batch=10)
    np.testing.assert_allclose(c.null_distribution, d.null_distribution, rtol=0, atol=1e-13)
    assert c.pvalue == d.pvalue


def _partition_stat(d, labels):
    between, within = [], []
    for i in range(len(labels)):
        for j in range(i + 1, len(labels)):
            (within if labels[i] == labels[j] else between).append(d[i, j])
    return np.mean(between) - np.mean(within), np.mean(between), np.mean(within)


def test_partition_test_exact_enumeration_by_hand():
    gen = np.random.default_rng(0)
    pts = np.concatenate([gen.normal(0, 1, 3), gen.normal(1.0, 1, 4)])
    d = _euclid(pts)
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    observed, between, within = _partition_stat(d, labels)
    null = np.array([_partition_stat(d, labels[list(p)])[0] for p in ALL7])
    exact_p = (np.sum(null >= observed - 1e-12) + 1) / (len(null) + 1)
    res = partition_test(d, labels, permutations=ALL7)
    assert (res.statistic, res.mean_between, res.mean_within) == pytest.approx((observed, between, within), abs=1e-12)
    np.testing.assert_allclose(res.null_distribution, null, atol=1e-12)
    assert res.pvalue == pytest.approx(exact_p, abs=1e-15)
    assert (res.n_within_pairs, res.n_between_pairs) == (3 + 6, 12)
    # random permutations converge to the exact tail share
    tail = np.mean(null >= observed - 1e-12)
    assert partition_test(d, labels, permutations=20000, rng=1).pvalue == pytest.approx(tail, abs=0.015)


def test_partition_test_separated_groups():
    pts = np.array([0.0, 0.1, 0.2, 0.3, 5.0, 5.1, 5.2, 5.3, 10.0, 10.1])
    res = partition_test(_euclid(pts), list("aaaabbbbcc"), permutations=1999, rng=0)
    assert res.mean_between > 4 and res.mean_within < 0.2
    assert res.pvalue < 0.01
    assert res.n_groups == 3
    frame = res.to_frame()
    assert frame.shape[0] == 1 and "null_distribution" not in frame.columns


GOOD = X7


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.ones((3, 4)), "`x` must be a square matrix"),
        (GOOD + np.triu(np.ones((7, 7)), 1), "`x` must be symmetric"),
        (GOOD + np.eye(7), "`x` must have a zero diagonal"),
        (np.where(np.eye(7) == 1, 0.0, np.where(np.arange(49).reshape(7, 7) == 1, np.nan, GOOD)), "`x` contains NaN"),
        (np.zeros((2, 2)), "`x` must be at least 3 x 3"),
    ],
)
def test_bad_matrices(bad, match):
    with pytest.raises(ValueError, match=match):
        mantel(bad, GOOD)
    with pytest.raises(ValueError, match=match):
        partial_mantel(bad, GOOD, Z7)


def test_bad_options():
    with pytest.raises(ValueError, match=r"`method` must be one of \{'pearson', 'spearman'\}"):
        mantel(X7, Y7, method="kendall")
    with pytest.raises(ValueError, match=r"`alternative` must be one of \{'two-sided', 'less', 'greater'\}"):
        partial_mantel(X7, Y7, Z7, alternative="upper")
    with pytest.raises(ValueError, match="`permutations` must be an integer >= 1"):
        mantel(X7, Y7, permutations=0)
    with pytest.raises(ValueError, match="every row of `permutations` must be a permutation"):
        mantel(X7, Y7, permutations=np.zeros((2, 7), dtype=int))
    with pytest.raises(ValueError, match=r"`permutations` must be a positive integer or an integer array of shape"):
        mantel(X7, Y7, permutations=np.zeros((2, 6), dtype=int))
    with pytest.raises(ValueError, match="`z` must have the shape of `x`"):
        partial_mantel(X7, Y7, X12)
    with pytest.raises(ValueError, match="`y` and `z` are perfectly correlated"):
        partial_mantel(X7, Y7, 2 * Y7)
    with pytest.raises(ValueError, match="`y` has constant off-diagonal entries"):
        mantel(X7, 1.0 - np.eye(7))
    with pytest.raises(ValueError, match="`labels` must define at least 2 groups"):
        partition_test(X7, [0] * 7)
    with pytest.raises(ValueError, match="`labels` must put at least two objects in one group"):
        partition_test(X7, list(range(7)))
    with pytest.raises(ValueError, match="`labels` must have one label per item"):
        partition_test(X7, [0, 1])
    with pytest.raises(ValueError, match="`distances` must be symmetric"):
        partition_test(X7 + np.triu(np.ones((7, 7)), 1), [0, 0, 0, 1, 1, 1, 1])


# --- plain Mantel: statistic from scikit-bio, permutations from the shared engine ---------------


@pytest.mark.parametrize("method", ["pearson", "spearman"])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_mantel_draws_scikit_bios_permutations(method, alternative):
    # given the same generator both draw Generator.permutation(n) per permutation, so on untied
    # data the p-values are equal, not just close
    gen = np.random.default_rng(6)
    pts = gen.normal(size=(14, 2))
    x = _euclid(pts[:, 0], pts[:, 1])
    y = _euclid(pts[:, 0] + gen.normal(scale=1.5, size=14))
    r_ref, p_ref, _ = skbio_mantel(x, y, method=method, permutations=999, alternative=alternative,
                                   seed=np.random.default_rng(21))
    res = mantel(x, y, method=method, permutations=999, alternative=alternative, rng=np.random.default_rng(21))
    assert res.statistic == pytest.approx(r_ref, abs=1e-15)
    assert res.pvalue == p_ref


def test_mantel_counts_ties_as_vegan_does_on_a_design_matrix():
    # a binary design matrix (1 = different arm) against distances, Spearman: many permutations
    # give a statistic equal to the observed one up to float error. The p-value must count them
    # (vegan: within sqrt(eps)); recomputed here permutation by permutation with scipy.
    from scipy.stats import spearmanr

    arm = np.array([1, 1, 2, 2, 3, 3, 3, 4, 4])
    design = (arm[:, None] != arm[None, :]).astype(float)
    pts = np.random.default_rng(0).normal(size=(9, 2))
    dist = _euclid(pts[:, 0], pts[:, 1])
    iu = np.triu_indices(9, 1)
    observed = spearmanr(design[iu], dist[iu]).statistic
    gen = np.random.default_rng(3)
    null = np.array([spearmanr(design[np.ix_(p, p)][iu], dist[iu]).statistic
                     for p in (gen.permutation(9) for _ in range(2000))])
    res = mantel(design, dist, method="spearman", permutations=2000, alternative="less", rng=np.random.default_rng(3))
    np.testing.assert_allclose(res.null_distribution, null, atol=1e-12)
    tied = np.abs(null - observed) < 1e-9
    assert tied.sum() > 10  # the case this test is about (28 of 2000 here)
    assert res.pvalue == (np.sum(null <= observed + 1e-9) + 1) / 2001


def test_mantel_leaves_the_global_rng_alone():
    state = np.random.get_state()  # noqa: NPY002 - the legacy global RNG is what this test watches
    mantel(X7, Y7, permutations=99, rng=1)
    partial_mantel(X7, Y7, Z7, permutations=99, rng=1)
    after = np.random.get_state()  # noqa: NPY002
    assert state[0] == after[0] and (state[1] == after[1]).all() and state[2:] == after[2:]
