"""Jensen-Shannon divergence against scipy's jensenshannon (squared) and closed forms."""

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from creditaudit.stats import js_divergence, js_divergence_matrix


@pytest.mark.parametrize("base", [2.0, math.e, 10.0])
def test_equals_squared_scipy_distance(base):
    gen = np.random.default_rng(0)
    for _ in range(20):
        p, q = gen.dirichlet(np.ones(6)), gen.dirichlet(np.ones(6) * 0.3)
        res = js_divergence(p, q, base=base)
        assert res.statistic == pytest.approx(jensenshannon(p, q, base=base) ** 2, rel=1e-10, abs=1e-15)
        assert res.base == base


def test_closed_forms():
    assert js_divergence([1, 0], [0, 1]).statistic == pytest.approx(1.0, abs=1e-15)  # disjoint: 1 bit
    assert js_divergence([1, 0], [0, 1], base=math.e).statistic == pytest.approx(math.log(2), abs=1e-15)
    assert js_divergence([0.2, 0.8], [0.2, 0.8]).statistic == 0.0
    # [1, 0] vs [1/2, 1/2]: M = [3/4, 1/4]; JSD = 1/2 log2(4/3) + 1/2 (1/2 log2(2/3) + 1/2 log2 2)
    expected = 0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5)
    assert js_divergence([1, 0], [0.5, 0.5]).statistic == pytest.approx(expected, abs=1e-15)


def test_tiny_negatives_are_clamped_not_rejected():
    res = js_divergence([0.5 + 1e-12, 0.5, -1e-12], [0.5, 0.5, 0.0])
    assert res.statistic >= 0.0
    assert res.statistic < 1e-10


@pytest.mark.parametrize(
    ("p", "q", "kwargs", "match"),
    [
        ([0.5, 0.6], [0.5, 0.5], {}, r"`p` must sum to 1 .* not renormalised"),
        ([1.0, 1.0], [0.5, 0.5], {}, "`p` must sum to 1"),
        ([0.5, 0.5], [1.2, -0.2], {}, "`q` has negative probabilities"),
        ([0.5, np.nan], [0.5, 0.5], {}, "`p` contains NaN"),
        ([0.5, 0.5], [0.2, 0.3, 0.5], {}, "`p` and `q` must have the same support"),
        ([0.5, 0.5], [0.5, 0.5], {"base": 1.0}, "`base` must be positive and not 1"),
        ([0.5, 0.5], [0.5, 0.5], {"base": -2}, "`base` must be positive and not 1"),
    ],
)
def test_bad_input(p, q, kwargs, match):
    with pytest.raises(ValueError, match=match):
        js_divergence(p, q, **kwargs)


def test_matrix_is_symmetric_zero_diagonal_and_matches_pairs():
    dists = np.random.default_rng(2).dirichlet(np.ones(5), size=7)
    m = js_divergence_matrix(dists)
    assert m.shape == (7, 7)
    assert (m == m.T).all() and (np.diag(m) == 0).all()
    for i in range(7):
        for j in range(7):
            if i != j:
                assert m[i, j] == pytest.approx(jensenshannon(dists[i], dists[j], base=2) ** 2, rel=1e-10)
    with pytest.raises(ValueError, match="`distributions` must sum to 1"):
        js_divergence_matrix(dists * 2)
    with pytest.raises(ValueError, match="`distributions` must be 2-D"):
        js_divergence_matrix(dists[0])


# --- independent references ------------------------------------------------------------------
# The code computes the divergence with scipy's jensenshannon, so the tests above that compare
# with scipy only check the squaring; these check the definition and Lin (1991)'s entropy form
# with numpy's logarithms, and pin a value.


def _kl(a, b, base):
    nz = a > 0
    return float(np.sum(a[nz] * np.log(a[nz] / b[nz])) / np.log(base))


def _entropy(a, base):
    nz = a > 0
    return float(-np.sum(a[nz] * np.log(a[nz])) / np.log(base))


@pytest.mark.parametrize("base", [2.0, math.e, 10.0])
def test_matches_the_definition_and_the_entropy_form(base):
    gen = np.random.default_rng(1)
    for _ in range(20):
        p, q = gen.dirichlet(np.ones(5)), gen.dirichlet(np.ones(5) * 0.5)
        p[gen.integers(5)] = 0.0  # a zero-probability action
        p /= p.sum()
        m = 0.5 * (p + q)
        definition = 0.5 * _kl(p, m, base) + 0.5 * _kl(q, m, base)
        entropy_form = _entropy(m, base) - 0.5 * (_entropy(p, base) + _entropy(q, base))  # Lin (1991), eq. 4.1
        res = js_divergence(p, q, base=base)
        assert res.statistic == pytest.approx(definition, rel=1e-10, abs=1e-15)
        assert res.statistic == pytest.approx(entropy_form, rel=1e-9, abs=1e-14)


def test_pinned_values():
    # H(0.7, 0.3) - (H(0.5, 0.5) + H(0.9, 0.1)) / 2 in bits: 0.88129089923 - (1 + 0.46899559359) / 2
    assert js_divergence([0.5, 0.5], [0.9, 0.1]).statistic == pytest.approx(0.1467931024, abs=1e-10)
    m = js_divergence_matrix([[1, 0, 0], [0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], base=math.e)
    assert m[0, 1] == pytest.approx(math.log(2), abs=1e-15)  # disjoint supports: log 2
    # [1, 0, 0] vs uniform: M = [2/3, 1/6, 1/6]; KL(P|M) = ln(3/2),
    # KL(Q|M) = 1/3 ln(1/2) + 2/3 ln 2 = 1/3 ln 2; JSD = 1/2 ln(3/2) + 1/6 ln 2
    expected = 0.5 * math.log(1.5) + math.log(2) / 6
    assert m[0, 2] == pytest.approx(expected, abs=1e-15)
