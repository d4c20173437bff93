"""GRPO and RLOO base advantages against hand-computed values, and their families."""

from __future__ import annotations

import math

import numpy as np
import pytest

from creditaudit.signals.families.advantages import BaseAdvantageFamily, grpo_advantages, rloo_advantages, zscore


def test_grpo_by_hand():
    # R = [1, 0, 0, 0]: mean 0.25, sample sd = sqrt(0.25) = 0.5
    np.testing.assert_allclose(grpo_advantages([1, 0, 0, 0]), np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6))
    assert grpo_advantages([1, 1, 1]).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="at least 2 rollouts"):
        grpo_advantages([1])


def test_rloo_by_hand():
    np.testing.assert_allclose(rloo_advantages([1, 0, 0, 1]), [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])
    r = np.array([0.3, 0.9, 0.0])
    np.testing.assert_allclose(rloo_advantages(r), 3 / 2 * (r - r.mean()))
    with pytest.raises(ValueError, match="`outcomes` must be finite"):
        rloo_advantages([1, math.nan])


def test_zscore_constant_is_zero():
    assert zscore([2.0, 2.0]).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_families_broadcast_to_turns_and_abstain_on_a_group_of_one(method, trajectory_factory, context_factory):
    trajs = [trajectory_factory("a0", "A", n_turns=2, outcome=1), trajectory_factory("a1", "A", n_turns=3, outcome=0),
             trajectory_factory("a2", "A", n_turns=1, outcome=0), trajectory_factory("b0", "B", n_turns=2, outcome=1)]
    out = BaseAdvantageFamily(name=method, method=method).compute(context_factory(trajs))
    expected = (grpo_advantages if method == "grpo" else rloo_advantages)([1, 0, 0])
    credit = out.credit
    for tid, value in zip(["a0", "a1", "a2"], expected):
        np.testing.assert_allclose(credit[credit.trajectory_id == tid].credit, value)
    assert credit[credit.trajectory_id == "b0"].abstain_reason.tolist() == ["group_of_one"] * 2
    diag = out.diagnostics.to_pandas()
    assert diag.group_size.tolist() == [3, 3, 3, 1]
