"""The public surface of creditaudit.stats follows the house style."""

import inspect

import numpy as np
import pytest

import creditaudit.stats as cs
from creditaudit.audit import precision_at_pivotal_lift


def test_all_is_explicit_and_complete():
    assert len(cs.__all__) == len(set(cs.__all__))
    for name in cs.__all__:
        assert hasattr(cs, name), name
    public = {n for n, v in vars(cs).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))}
    assert public <= set(cs.__all__)


FUNCTIONS = [getattr(cs, n) for n in cs.__all__ if inspect.isfunction(getattr(cs, n))]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_options_are_keyword_only_and_documented(fn):
    for param in inspect.signature(fn).parameters.values():
        if param.default is not inspect.Parameter.empty:
            assert param.kind is inspect.Parameter.KEYWORD_ONLY, f"{fn.__name__}({param.name}=...)"
    doc = inspect.getdoc(fn)
    for section in ("Parameters", "Returns", "Notes", "References", "Examples"):
        assert f"\n{section}\n" in doc, f"{fn.__name__} lacks a {section} section"
    assert ">>> " in doc


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_random_functions_take_rng(fn):
    source = inspect.getsource(inspect.getmodule(fn))
    for banned in ("np.random.seed", "np.random.choice", "np.random.rand", "import random"):
        assert banned not in source
    params = inspect.signature(fn).parameters
    if "n_resamples" in params or "permutations" in params:
        assert "rng" in params and params["rng"].kind is inspect.Parameter.KEYWORD_ONLY


def test_results_are_frozen_with_one_row_frames():
    gen = np.random.default_rng(0)
    x, y = gen.normal(size=40), gen.normal(size=40)
    d = np.abs(x[:10, None] - x[None, :10])
    results = [
        cs.wilson(3, 10),
        cs.sign_agreement(x, y),
        cs.tost_paired(x, y, low=-0.5, high=0.5),
        cs.superiority_ind(x, y),
        cs.mde(40, sd=1.0, low=-0.5, high=0.5),
        cs.partial_corr(x, y, gen.normal(size=40)),
        cs.cohens_kappa(x > 0, y > 0),
        cs.js_divergence([0.5, 0.5], [0.2, 0.8]),
        cs.partition_test(d, [0] * 5 + [1] * 5, permutations=99, rng=0),
        cs.mantel(d, d**2, permutations=99, rng=0),
        cs.median_spearman(x, y, np.repeat(np.arange(8), 5), n_resamples=99, rng=0),
        precision_at_pivotal_lift(x, y > 0, np.repeat(np.arange(8), 5), top_fraction=0.2, n_resamples=99, rng=0),
    ]
    for res in results:
        frame = res.to_frame()
        assert frame.shape[0] == 1, type(res).__name__
        with pytest.raises(AttributeError):
            res.method = "changed"
        if hasattr(res, "ci"):
            assert {"ci_low", "ci_high"} <= set(frame.columns)


def test_one_confidence_interval_implementation():
    from creditaudit.stats._common import Result

    gen = np.random.default_rng(1)
    x, y = gen.normal(size=40), gen.normal(size=40)
    with_ci = [
        cs.wilson(3, 10),
        cs.sign_agreement(x, y),
        cs.tost_paired(x, y, low=-0.5, high=0.5),
        cs.superiority_ind(x, y),
        cs.partial_corr(x, y, gen.normal(size=40)),
        cs.cohens_kappa(x > 0, y > 0),
        cs.median_spearman(x, y, np.repeat(np.arange(8), 5), n_resamples=99, rng=0),
        cs.cluster_bootstrap(x, lambda v: v.mean(axis=-1), n_resamples=99, rng=0),
        precision_at_pivotal_lift(x, y > 0, np.repeat(np.arange(8), 5), top_fraction=0.2, n_resamples=99, rng=0),
    ]
    for res in with_ci:
        assert type(res).confidence_interval is Result.confidence_interval, type(res).__name__
        assert res.confidence_interval() == res.ci
        low, high = res.confidence_interval(0.5)
        assert low <= high
        with pytest.raises(ValueError, match=r"`level` must be a number in the open interval \(0, 1\)"):
            res.confidence_interval(1.5)
    ols = cs.ols_standardized(y, np.column_stack([x, gen.normal(size=40)]))
    assert type(ols).confidence_interval is Result.confidence_interval
    np.testing.assert_array_equal(ols.confidence_interval(), ols.confidence_interval(0.95))
    with pytest.raises(TypeError, match="MantelResult carries no confidence interval"):
        cs.mantel(np.abs(x[:6, None] - x[None, :6]), np.abs(y[:6, None] - y[None, :6]), permutations=9,
                  rng=0).confidence_interval(0.9)
