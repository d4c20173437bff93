"""Precision-at-pivotal lift (moved with the metric from ``creditaudit.stats``)."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from creditaudit.audit import precision_at_pivotal_lift


def _expected_precision_by_enumeration(credit, pivotal, k):
    """Average top-k pivotal share over every tie-breaking order (brute force)."""
    credit, pivotal = np.asarray(credit), np.asarray(pivotal)
    shares = []
    for order in itertools.permutations(range(len(credit))):
        # a stable sort by decreasing credit of the items in this order breaks ties by `order`
        ranked = sorted(order, key=lambda i: -credit[i])
        shares.append(pivotal[ranked[:k]].sum())
    return np.mean(shares)


def test_ties_at_the_cutoff_share_the_slots():
    credit = [1.0, 0.0, 0.0, 0.0, -1.0]  # judge-like scores
    pivotal = [False, True, False, False, True]
    res = precision_at_pivotal_lift(credit, pivotal, [0] * 5, top_fraction=0.4, n_resamples=10, rng=0)
    # k = 2: item 0 (not pivotal) + one of three tied items, one of which is pivotal -> 1/3 hit
    expected_hits = _expected_precision_by_enumeration(credit, pivotal, 2)
    assert expected_hits == pytest.approx(1 / 3)
    assert res.precision == pytest.approx(expected_hits / 2, abs=1e-12)
    assert res.base_rate == pytest.approx(2 / 5)
    assert res.statistic == pytest.approx((1 / 6) / (2 / 5), abs=1e-12)


def test_perfect_and_chance_credit():
    gen = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 10)
    pivotal = gen.uniform(size=400) < 0.2
    perfect = precision_at_pivotal_lift(
        pivotal.astype(float) + 0.01 * gen.uniform(size=400), pivotal, groups, top_fraction=0.1, n_resamples=500, rng=1
    )
    assert perfect.precision > 0.85 and perfect.statistic > 3
    constant = precision_at_pivotal_lift(np.zeros(400), pivotal, groups, top_fraction=0.1, n_resamples=500, rng=1)
    assert constant.statistic == pytest.approx(1.0, abs=1e-12)  # all tied: exactly chance


def test_group_sizes_and_k_rule():
    # groups of 3 and 5 with top_fraction 0.3: k = ceil(0.9) = 1 and ceil(1.5) = 2
    credit = [3, 2, 1, 5, 4, 3, 2, 1]
    pivotal = [1, 0, 0, 0, 1, 0, 0, 1]
    res = precision_at_pivotal_lift(credit, pivotal, [0, 0, 0, 1, 1, 1, 1, 1], top_fraction=0.3, n_resamples=20, rng=0)
    assert res.n_top == 3
    assert res.precision == pytest.approx(2 / 3)
    chance = (1 * 1 / 3 + 2 * 2 / 5) / 3
    assert res.base_rate == pytest.approx(chance)
    assert res.statistic == pytest.approx((2 / 3) / chance)


def test_bootstrap_matches_scipy_paired_bootstrap():
    gen = np.random.default_rng(4)
    groups = np.repeat(np.arange(30), 8)
    pivotal = gen.uniform(size=240) < 0.5
    credit = pivotal + gen.normal(size=240)
    res = precision_at_pivotal_lift(
        credit, pivotal, groups, top_fraction=0.25, n_resamples=3000, rng=np.random.default_rng(17)
    )
    assert res.n_degenerate == 0
    # group-level hits and chance hits, computed independently (no ties in continuous credit)
    hits, chance = [], []
    for g in range(30):
        c, p = credit[groups == g], pivotal[groups == g]
        hits.append(p[np.argsort(-c)[:2]].sum())
        chance.append(2 * p.sum() / 8)
    hits, chance = np.array(hits, float), np.array(chance)
    assert res.statistic == pytest.approx(hits.sum() / chance.sum(), abs=1e-12)
    ref = stats.bootstrap(
        (hits, chance),
        lambda h, c, axis=-1: h.sum(axis) / c.sum(axis),
        paired=True,
        n_resamples=3000,
        method="percentile",
        rng=np.random.default_rng(17),
    )
    assert res.ci == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)


def test_degenerate_resamples_are_counted():
    pivotal = np.zeros(60, bool)
    pivotal[0] = True  # one pivotal turn, in group 0 of 6
    res = precision_at_pivotal_lift(
        np.arange(60.0), pivotal, np.repeat(np.arange(6), 10), top_fraction=0.5, n_resamples=2000, rng=0
    )
    assert 550 < res.n_degenerate < 790  # P(group 0 never drawn) = (5/6)**6 = 0.335
    assert math.isfinite(res.ci[0]) and math.isfinite(res.ci[1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"top_fraction": 0.0}, r"`top_fraction` must be a number in \(0, 1\]"),
        ({"top_fraction": 1.5}, r"`top_fraction` must be a number in \(0, 1\]"),
        ({"top_fraction": 0.5, "n_resamples": 0}, "`n_resamples` must be an integer >= 1"),
        ({"top_fraction": 0.5, "confidence_level": 1}, "`confidence_level`"),
    ],
)
def test_lift_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        precision_at_pivotal_lift([1.0, 2.0], [True, False], [0, 0], **kwargs)


def test_lift_bad_data():
    with pytest.raises(ValueError, match="`credit` contains 1 NaN"):
        precision_at_pivotal_lift([1.0, np.nan], [True, False], [0, 0], top_fraction=0.5)
    with pytest.raises(ValueError, match="`pivotal` must be 1-D with one entry per item"):
        precision_at_pivotal_lift([1.0, 2.0], [True], [0, 0], top_fraction=0.5)
    with pytest.raises(ValueError, match="`pivotal` must be boolean"):
        precision_at_pivotal_lift([1.0, 2.0], [0.5, 1.0], [0, 0], top_fraction=0.5)
    with pytest.raises(ValueError, match="`pivotal` has no pivotal item"):
        precision_at_pivotal_lift([1.0, 2.0], [False, False], [0, 0], top_fraction=0.5)


def test_the_lift_is_registered_as_a_statistic_and_exported_by_the_audit():
    import inspect

    import creditaudit.audit as ca
    import creditaudit.stats as cs
    from creditaudit.stats.factories import factories

    assert "precision_at_pivotal_lift" in ca.__all__ and "LiftResult" in ca.__all__
    assert not hasattr(cs, "precision_at_pivotal_lift")  # the audit's metric, not a stats export
    spec = factories("statistic").spec("precision_at_pivotal_lift", top_fraction=0.25, n_resamples=50)
    assert spec.args == {"top_fraction": 0.25, "n_resamples": 50, "confidence_level": 0.95, "batch": None}
    configured = factories("statistic").create(spec)
    assert configured.function is precision_at_pivotal_lift and configured.is_random
    credit = [0.9, 0.1, 0.2, 0.3, 0.8, 0.1, 0.0, 0.2]
    pivotal = [True, False, False, False, True, False, False, False]
    res = configured(credit, pivotal, [0, 0, 0, 0, 1, 1, 1, 1], rng=np.random.default_rng(3))
    ref = precision_at_pivotal_lift(credit, pivotal, [0, 0, 0, 0, 1, 1, 1, 1], top_fraction=0.25, n_resamples=50,
                                    rng=np.random.default_rng(3))
    np.testing.assert_array_equal(res.distribution, ref.distribution)
    # house style: options keyword-only, numpydoc sections, an rng for a random function
    for param in inspect.signature(precision_at_pivotal_lift).parameters.values():
        if param.default is not inspect.Parameter.empty:
            assert param.kind is inspect.Parameter.KEYWORD_ONLY
    doc = inspect.getdoc(precision_at_pivotal_lift)
    for section in ("Parameters", "Returns", "Notes", "References", "Examples"):
        assert f"\n{section}\n" in doc
    assert res.confidence_interval() == res.ci
    assert res.confidence_interval(0.5)[0] >= res.ci[0]
