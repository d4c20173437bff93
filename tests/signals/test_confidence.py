"""Confidence: the per-token geometric-mean probability of the policy's own action."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from creditaudit.signals.families.confidence import ConfidenceFamily, geometric_mean_probability


def test_geometric_mean_by_hand():
    assert geometric_mean_probability([math.log(0.9)]) == pytest.approx(0.9)
    assert geometric_mean_probability([math.log(0.5), math.log(0.2)]) == pytest.approx(math.sqrt(0.1))
    with pytest.raises(ValueError, match="must not be empty"):
        geometric_mean_probability([])


def test_family_uses_the_collected_token_logprobs(trajectory_factory, context_factory):
    traj = trajectory_factory(n_turns=2)
    turns = [dataclasses.replace(traj.turns[0], token_logprobs=(math.log(0.25), math.log(0.5))),
             dataclasses.replace(traj.turns[1], token_logprobs=(), mean_logprob=None)]
    traj = dataclasses.replace(traj, turns=tuple(turns))
    out = ConfidenceFamily(name="confidence").compute(context_factory([traj]))
    assert out.credit.credit[0] == pytest.approx(math.sqrt(0.125))
    assert np.isnan(out.credit.credit[1]) and out.credit.abstain_reason.tolist() == [None, "no_action_tokens"]
    assert out.diagnostics.column("n_tokens").to_pylist() == [2, 0]
