"""Statistics as registered factories: frozen specs that rebuild the same computation."""

import numpy as np
import pytest

import creditaudit.stats as cs
from creditaudit.stats.factories import FactorySpec, factories

STATS = factories("statistic")


def test_every_registered_name_is_a_public_function():
    assert set(cs.REGISTERED) <= set(STATS.names())
    for name in cs.REGISTERED:
        assert name in cs.__all__ and callable(getattr(cs, name))


def test_spec_binds_defaults_and_rebuilds_the_same_result():
    spec = STATS.spec("median_spearman", n_resamples=300)
    assert spec.args == {
        "n_resamples": 300,
        "confidence_level": 0.95,
        "batch": None,
        "constant": "exclude",
    }
    gen = np.random.default_rng(0)
    x, y, g = gen.normal(size=60), gen.normal(size=60), np.repeat(np.arange(10), 6)
    # the spec survives a round trip through its plain-data form (what a protocol stores)
    rebuilt = FactorySpec(**spec.to_dict())
    assert rebuilt.hash == spec.hash
    configured = STATS.create(rebuilt)
    a = configured(x, y, g, rng=np.random.default_rng(5))
    b = cs.median_spearman(x, y, g, n_resamples=300, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a.distribution, b.distribution)
    assert configured.is_random


def test_required_options_must_be_given_and_unknown_ones_are_refused():
    with pytest.raises(ValueError, match="missing a required argument: 'low'"):
        STATS.spec("tost_paired", high=0.03)
    with pytest.raises(ValueError, match="unexpected keyword argument 'bound'"):
        STATS.spec("tost_paired", low=-0.03, high=0.03, bound=0.03)
    spec = STATS.spec("tost_paired", low=-0.03, high=0.03)
    assert spec.args == {"low": -0.03, "high": 0.03, "alpha": 0.05}


def test_non_random_statistics_refuse_an_rng():
    configured = STATS.create("wilson", confidence_level=0.9)
    assert not configured.is_random
    assert configured(84, 139).confidence_level == 0.9
    with pytest.raises(ValueError, match="'wilson' is not random"):
        configured(84, 139, rng=0)


def test_spec_hash_changes_with_every_option():
    base = STATS.spec("partial_mantel", permutations=9999)
    assert STATS.spec("partial_mantel", permutations=9999).hash == base.hash
    assert STATS.spec("partial_mantel", permutations=999).hash != base.hash
    assert STATS.spec("partial_mantel", permutations=9999, method="spearman").hash != base.hash
