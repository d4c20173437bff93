"""The arms' credit rules: weights, dropped samples, partitions, the registry."""

from __future__ import annotations

import numpy as np
import pytest

from creditaudit import plugins
from creditaudit.training_arms.rules import (
    ARM_NAMES,
    GroupCredit,
    arm_rule,
    effective_advantages,
    information_labels,
    instrument_labels,
)


def _group(credit=None, outcomes=(1.0, 0.0, 1.0), turns=(3, 3, 3), seed=0):
    rngs = [np.random.default_rng([seed, i]) for i in range(len(turns))]
    return GroupCredit(np.array(outcomes), credit, list(turns), rngs)


def test_every_arm_is_registered_with_a_frozen_spec():
    assert set(ARM_NAMES) <= set(plugins.names("arm_rule"))
    plugin = plugins.get("arm_rule", "inverted_implicit")
    args = plugin.bind({"clip_low": 0.7, "clip_high": 1.3})
    assert args == {"clip_low": 0.7, "clip_high": 1.3}
    assert plugin.create(args).clip_high == 1.3


def test_outcome_only_broadcasts_the_grpo_advantage():
    A, w, a = effective_advantages(arm_rule("outcome_only"), _group())
    assert all((x == 1).all() for x in w)
    assert A[0] > 0 > A[1] and A[0] == A[2]
    assert a[1].tolist() == [A[1]] * 3


def test_constant_outcomes_give_zero_advantage_in_every_arm():
    rho = [np.array([0.8, 1.0, 1.2])] * 3
    for arm in ("outcome_only", "implicit", "inverted_implicit"):
        _, _, a = effective_advantages(arm_rule(arm), _group(rho, outcomes=(1.0, 1.0, 1.0)))
        assert all((x == 0).all() for x in a), arm


def test_implicit_weights_are_rho_and_inverted_mirrors_them_inside_the_clip_range():
    rho = [np.array([0.8, 1.0, 1.2]), np.array([1.1, 0.9, 1.0]), np.array([1.0, 1.0, 1.0])]
    _, w, _ = effective_advantages(arm_rule("implicit"), _group(rho))
    assert [x.tolist() for x in w] == [r.tolist() for r in rho]
    _, wi, _ = effective_advantages(arm_rule("inverted_implicit"), _group(rho))
    np.testing.assert_allclose(wi[0], [1.2, 1.0, 0.8])
    assert all(((x >= 0.8 - 1e-12) & (x <= 1.2 + 1e-12)).all() for x in wi)


def test_shuffled_arms_keep_each_trajectorys_marginal():
    rho = [np.array([0.8, 1.0, 1.2]), np.array([1.1, 0.9, 1.0]), np.array([0.85, 1.15, 1.0])]
    _, w, _ = effective_advantages(arm_rule("shuffled_implicit"), _group(rho, seed=3))
    assert [sorted(x.tolist()) for x in w] == [sorted(r.tolist()) for r in rho]
    assert any(x.tolist() != r.tolist() for x, r in zip(w, rho))


def test_judge_credits_the_turns_it_holds_responsible_and_drops_the_rest():
    scores = [np.array([1.0, 0.0, -1.0]), np.array([1.0, -1.0, 0.0]), np.array([0.0, 0.0, 0.0])]
    A, w, a = effective_advantages(arm_rule("judge"), _group(scores))
    assert w[0].tolist() == [1.0, 0.0, 0.0]  # success: helpful turn kept
    assert w[1].tolist() == [0.0, 1.0, 0.0]  # failure: the mistake kept
    assert w[2].tolist() == [0.0, 0.0, 0.0]
    assert a[1][1] == A[1] < 0


def test_abstained_credit_gets_weight_zero():
    rho = [np.array([np.nan, 1.0, 1.1]), np.array([1.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0])]
    _, w, _ = effective_advantages(arm_rule("implicit"), _group(rho))
    assert w[0].tolist() == [0.0, 1.0, 1.1]


def test_pivotal_masked_keeps_only_pivotal_turns():
    pivotal = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 0.0])]
    _, w, _ = effective_advantages(arm_rule("pivotal_masked"), _group(pivotal))
    assert [x.tolist() for x in w] == [p.tolist() for p in pivotal]


def test_credit_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="rollout 0 has 3 turns"):
        effective_advantages(arm_rule("implicit"), _group([np.ones(2)] * 3))
    with pytest.raises(ValueError, match="unknown arm rule 'bogus'; installed: "):
        arm_rule("bogus")


def test_partitions_cover_every_arm():
    assert instrument_labels(["implicit", "shuffled_implicit", "judge"]) == ["implicit", "implicit", "judge"]
    assert information_labels(["implicit", "shuffled_implicit", "outcome_only"]) == ["informative", "scrambled", "outcome"]
    assert len(set(instrument_labels(ARM_NAMES))) == 4
