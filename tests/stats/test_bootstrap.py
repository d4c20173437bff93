"""Cluster bootstrap: checked against scipy.stats.bootstrap (percentile) on the same draws."""

import numpy as np
import pytest
from scipy import stats

from creditaudit.stats import BootstrapResult, cluster_bootstrap


def _median(v):
    return np.median(v, axis=-1)


def test_matches_scipy_bootstrap_percentile_draw_for_draw():
    values = np.random.default_rng(5).normal(size=37)
    ours = cluster_bootstrap(values, _median, n_resamples=4000, rng=np.random.default_rng(11))
    ref = stats.bootstrap((values,), np.median, n_resamples=4000, method="percentile", rng=np.random.default_rng(11))
    np.testing.assert_allclose(ours.distribution, ref.bootstrap_distribution, rtol=0, atol=0)
    assert ours.ci == pytest.approx(tuple(ref.confidence_interval), abs=1e-15)
    assert ours.standard_error == pytest.approx(ref.standard_error, rel=1e-12)
    assert ours.statistic == np.median(values)


def test_confidence_interval_at_other_level_matches_scipy():
    values = np.random.default_rng(6).exponential(size=25)
    ours = cluster_bootstrap(values, _median, n_resamples=3000, rng=1)
    ref = stats.bootstrap(
        (values,),
        np.median,
        n_resamples=3000,
        method="percentile",
        confidence_level=0.8,
        rng=np.random.default_rng(1),
    )
    assert ours.confidence_interval(0.8) == pytest.approx(tuple(ref.confidence_interval), abs=1e-15)
    assert ours.confidence_interval() == ours.ci


def test_result_does_not_depend_on_batch_size():
    values = np.arange(20.0)
    a = cluster_bootstrap(values, _median, n_resamples=1001, rng=3)
    b = cluster_bootstrap(values, _median, n_resamples=1001, rng=3, batch=7)
    np.testing.assert_array_equal(a.distribution, b.distribution)


def test_paired_arrays_resample_the_same_groups():
    num = np.array([1.0, 2.0, 3.0, 4.0])
    den = np.array([10.0, 20.0, 30.0, 40.0])
    res = cluster_bootstrap((num, den), lambda n, d: n.sum(-1) / d.sum(-1), n_resamples=500, rng=0)
    # numerator and denominator always come from the same groups, so the ratio never moves
    np.testing.assert_allclose(res.distribution, 0.1)


def test_degenerate_resamples_are_counted_not_nan_interval():
    num = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    den = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # only group 0 defines the ratio
    res = cluster_bootstrap((num, den), lambda n, d: n.sum(-1) / d.sum(-1), n_resamples=2000, rng=2)
    # P(group 0 never drawn) = (5/6)**6 = 0.335
    assert 550 < res.n_degenerate < 790
    assert np.isnan(res.distribution).sum() == res.n_degenerate
    assert res.ci == (1.0, 1.0)


def test_seeded_generator_is_reproducible_and_rng_passes_through_default_rng():
    values = np.random.default_rng(0).normal(size=10)
    a = cluster_bootstrap(values, _median, n_resamples=300, rng=np.random.SeedSequence(9))
    b = cluster_bootstrap(values, _median, n_resamples=300, rng=np.random.SeedSequence(9))
    np.testing.assert_array_equal(a.distribution, b.distribution)


def test_result_is_frozen_and_framed():
    res = cluster_bootstrap(np.arange(5.0), _median, n_resamples=50, rng=0)
    assert isinstance(res, BootstrapResult)
    with pytest.raises(AttributeError):
        res.statistic = 0.0
    with pytest.raises(ValueError):
        res.distribution[0] = 1.0  # read-only evidence
    frame = res.to_frame()
    assert frame.shape[0] == 1
    assert {"statistic", "ci_low", "ci_high", "n_resamples", "n_degenerate", "method"} <= set(frame.columns)
    assert "distribution" not in frame.columns


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_resamples": 0}, "`n_resamples` must be an integer >= 1"),
        ({"confidence_level": 1.0}, r"`confidence_level` must be a number in the open interval \(0, 1\)"),
        ({"batch": 0}, "`batch` must be an integer >= 1"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cluster_bootstrap(np.arange(5.0), _median, **kwargs)


def test_bad_data():
    with pytest.raises(ValueError, match=r"`data\[0\]` contains 1 NaN"):
        cluster_bootstrap([1.0, np.nan, 2.0], _median)
    with pytest.raises(ValueError, match="same length"):
        cluster_bootstrap(([1.0, 2.0], [1.0]), lambda a, b: a.sum(-1))
    with pytest.raises(ValueError, match="undefined .* on the observed data"):
        cluster_bootstrap(([0.0, 0.0], [0.0, 0.0]), lambda a, b: a.sum(-1) / b.sum(-1))
