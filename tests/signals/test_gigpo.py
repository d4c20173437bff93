"""GiGPO step credit (Feng et al. 2025), checked by hand and against torch's unbiased std.

The expected values below are written out from the paper's definitions (episode advantage over
the task group, step advantage over turns sharing an anchor state, discounted returns with the
outcome as the last step's reward), not computed by the module under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from creditaudit.plugins import get
from creditaudit.replay.records import Trajectory, TurnRecord
from creditaudit.signals.families.gigpo import discounted_returns, gigpo_group

EPS = 1e-6


def _std1(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_a_three_rollout_group_by_hand():
    # rollout 0 wins through s0 -> s1 -> s2; rollout 1 fails through s0 -> s3; rollout 2 fails through s0 -> s1
    gamma = 0.9
    g = gigpo_group([1.0, 0.0, 0.0], [["s0", "s1", "s2"], ["s0", "s3"], ["s0", "s1"]], gamma=gamma, omega=0.5)

    f_episode = _std1([1.0, 0.0, 0.0]) + EPS
    assert g.episode.tolist() == pytest.approx([(2 / 3) / f_episode, (-1 / 3) / f_episode, (-1 / 3) / f_episode])

    assert g.returns[0].tolist() == pytest.approx([0.81, 0.9, 1.0])
    assert g.returns[1].tolist() == [0.0, 0.0] and g.returns[2].tolist() == [0.0, 0.0]

    # step group s0: returns 0.81, 0, 0 (mean 0.27); s1: 0.9, 0 (mean 0.45); s2, s3 are singletons
    f_s0, f_s1 = _std1([0.81, 0.0, 0.0]) + EPS, _std1([0.9, 0.0]) + EPS
    assert g.step[0].tolist() == pytest.approx([0.54 / f_s0, 0.45 / f_s1, 0.0])
    assert g.step[1].tolist() == pytest.approx([-0.27 / f_s0, 0.0])
    assert g.step[2].tolist() == pytest.approx([-0.27 / f_s0, -0.45 / f_s1])
    assert [s.tolist() for s in g.group_size] == [[3, 2, 1], [3, 1], [3, 2]]
    for i in range(3):
        np.testing.assert_allclose(g.credit[i], g.episode[i] + 0.5 * g.step[i])


def test_the_scale_is_torch_unbiased_std_plus_eps():
    # verl-agent normalises with torch.std (unbiased) + epsilon: an independent implementation
    torch = pytest.importorskip("torch")
    outcomes = [1.0, 0.0, 1.0, 1.0, 0.0]
    g = gigpo_group(outcomes, [["x"]] * 5, gamma=1.0)
    r = torch.tensor(outcomes, dtype=torch.float64)
    expected = (r - r.mean()) / (r.std() + EPS)
    np.testing.assert_allclose(g.episode, expected.numpy(), rtol=1e-12)
    # one shared anchor and gamma = 1: the step advantage is the episode advantage again
    np.testing.assert_allclose([s[0] for s in g.step], expected.numpy(), rtol=1e-12)


def test_normalize_none_and_discounting():
    assert discounted_returns([0.0, 0.0, 0.0, 1.0], gamma=0.5).tolist() == [0.125, 0.25, 0.5, 1.0]
    g = gigpo_group([1.0, 0.0], [["a", "b"], ["a", "c"]], gamma=0.5, normalize="none")
    assert g.episode.tolist() == [0.5, -0.5]
    assert g.step[0].tolist() == [0.25, 0.0] and g.step[1].tolist() == [-0.25, 0.0]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="G >= 2"):
        gigpo_group([1.0], [["a"]])
    with pytest.raises(ValueError, match="normalize"):
        gigpo_group([1.0, 0.0], [["a"], ["a"]], normalize="rank")


def _turn(t, observation, signature):
    return TurnRecord(t, observation, ("go",), "go", (-0.1,), -0.1, "ok", state_signature=signature)


def _traj(tid, task, outcome, observations, signatures):
    turns = tuple(_turn(t, o, s) for t, (o, s) in enumerate(zip(observations, signatures)))
    return Trajectory(tid, task, int(tid[-1]), "goal", outcome, turns)


def test_the_family_groups_by_observation_or_signature_and_abstains_on_a_group_of_one(context_factory):
    context_for = context_factory
    # both rollouts see the same text at turn 1, but the environment's state differs there
    trajs = [_traj("a0", "A", 1, ["start", "a room"], ["h0", "h1"]),
             _traj("a1", "A", 0, ["start", "a room"], ["h0", "h2"]),
             _traj("b0", "B", 1, ["start"], ["h0"])]
    plugin = get("family", "gigpo")
    by_text = plugin.create(plugin.bind({"gamma": 0.5, "normalize": "none"}), name="g")
    by_state = plugin.create(plugin.bind({"gamma": 0.5, "normalize": "none", "anchor": "signature"}),
                             name="g")

    text = by_text.compute(context_for(trajs)).credit.set_index(["trajectory_id", "turn"])
    state = by_state.compute(context_for(trajs)).credit.set_index(["trajectory_id", "turn"])
    # A_E = +-0.5; returns a0: [0.5, 1], a1: [0, 0]; turn 0 groups both (mean 0.25), turn 1 groups
    # both by text (mean 0.5) and neither by signature (singletons: A_S = 0)
    assert text.loc[("a0", 0), "credit"] == pytest.approx(0.5 + 0.25)
    assert text.loc[("a0", 1), "credit"] == pytest.approx(0.5 + 0.5)
    assert text.loc[("a1", 1), "credit"] == pytest.approx(-0.5 - 0.5)
    assert state.loc[("a0", 1), "credit"] == pytest.approx(0.5)
    assert state.loc[("a1", 1), "credit"] == pytest.approx(-0.5)
    assert text.loc[("b0", 0), "abstain_reason"] == "group_of_one"
    assert math.isnan(text.loc[("b0", 0), "credit"])

    report = by_state.compute(context_for(trajs)).report
    assert report["n_singleton_turns"] == 2 and report["singleton_share"] == pytest.approx(0.5)
