"""Implicit credit (HCAPO rho_t): the extractor against a manual forward pass, and the
training-side quantities against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from creditaudit.signals.families.implicit import (
    ImplicitFamily,
    backward_smoothing,
    hcapo_advantages,
    hcapo_q_values,
    hindsight_builder,
    hindsight_prompts,
    hindsight_ratio,
    multiscale_advantage,
    pi_hind,
)


@pytest.fixture(scope="module")
def policy(judgeable_policy_dir):
    from creditaudit.replay.policies import load_policy

    return load_policy(judgeable_policy_dir, history_length=0)


def _manual_mean_logprob(directory, prompt: str, action: str) -> float:
    """log pi(y_j | prompt, y_<j) by one plain forward pass + log_softmax, averaged over y."""
    import torch
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(directory)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    action_ids = tokenizer(action, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + action_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    values = [float(logp[len(prompt_ids) - 1 + j, tok]) for j, tok in enumerate(action_ids)]
    return sum(values) / len(values)


def test_hindsight_ratio_matches_a_manual_forward_pass(judgeable_policy_dir, policy, trajectory_factory,
                                                       context_factory):
    from creditaudit.replay.policies import PromptBuilder, format_hindsight

    traj = trajectory_factory(n_turns=3, seed=4, outcome=1)
    family = ImplicitFamily(name="implicit", temperature=5.0, history_length=1)
    out = family.compute(context_factory([traj], policy=policy))

    # the hindsight prompts by hand: the outcome injected, one past turn shown
    builder = PromptBuilder(None, history_length=1)
    hindsight = format_hindsight(traj.turns[-1].feedback, True)
    pis = []
    for k, rec in enumerate(traj.turns):
        history = [(r.observation, r.action) for r in traj.turns[:k]]
        prompt = builder.build(traj.goal, rec.observation, rec.admissible, history, hindsight=hindsight)
        assert ("outcome: the task was completed successfully" in prompt) and prompt.endswith("action:")
        assert prompt.count("\naction: ") == min(k, 1)  # history length 1
        pis.append(math.exp(_manual_mean_logprob(judgeable_policy_dir, prompt, rec.action) / 5.0))
    ratio = np.array(pis) / np.mean(pis)
    rho = np.clip(ratio, 0.8, 1.2)

    diag = out.diagnostics.to_pandas()
    np.testing.assert_allclose(diag["pi_hind"], pis, rtol=0, atol=1e-6)
    np.testing.assert_allclose(diag["ratio"], ratio, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.credit["credit"], rho, rtol=0, atol=1e-6)
    assert out.credit["abstain_reason"].isna().all()
    assert out.report["history_length"] == 1 and out.report["temperature"] == 5.0


def test_hindsight_prompts_follow_the_policy_template_and_inject_the_outcome(policy, trajectory_factory):
    traj = trajectory_factory(n_turns=3, seed=1, outcome=0)
    prompts = hindsight_prompts(traj, hindsight_builder(policy, 2))
    assert len(prompts) == 3
    assert all("outcome: the task was not completed. final observation:" in p for p in prompts)
    assert all(" ".join(traj.turns[-1].feedback.split()) in p for p in prompts)
    assert [p.count("\naction: ") for p in prompts] == [0, 1, 2]


def test_an_empty_action_abstains_and_leaves_the_mean(policy, trajectory_factory, context_factory):
    import dataclasses

    traj = trajectory_factory(n_turns=3, seed=2)
    turns = list(traj.turns)
    turns[1] = dataclasses.replace(turns[1], action="", token_logprobs=(), mean_logprob=None)
    traj = dataclasses.replace(traj, turns=tuple(turns))
    out = ImplicitFamily(name="implicit").compute(context_factory([traj], policy=policy))
    assert out.credit["abstain_reason"].tolist()[1] == "empty_action"
    assert np.isnan(out.credit["credit"][1])
    diag = out.diagnostics.to_pandas()
    pis = diag["pi_hind"].to_numpy()
    np.testing.assert_allclose(diag["ratio"][[0, 2]], pis[[0, 2]] / pis[[0, 2]].mean())


def test_pi_hind_and_ratio_by_hand():
    assert pi_hind(-2.0, temperature=5.0) == pytest.approx(math.exp(-0.4))
    ratio, rho = hindsight_ratio([0.2, 0.4, 0.6, 0.8], clip_low=0.8, clip_high=1.2)
    np.testing.assert_allclose(ratio, [0.4, 0.8, 1.2, 1.6])
    np.testing.assert_allclose(rho, [0.8, 0.8, 1.2, 1.2])
    with pytest.raises(ValueError, match="`temperature`"):
        pi_hind(-1.0, temperature=0.0)
    with pytest.raises(ValueError, match="`pi_values`"):
        hindsight_ratio([])


def test_q_values_and_backward_smoothing_by_hand():
    q = hcapo_q_values([0.8, 1.0, 1.2], 1.0, gamma=0.95)
    np.testing.assert_allclose(q, [0.8 * 0.95**2, 1.0 * 0.95, 1.2])
    assert hcapo_q_values([1.1, 0.9], 0.0).tolist() == [0.0, 0.0]
    # Q~_2 = 1.2; Q~_1 = 0.5*0.95 + 0.5*1.2 = 1.075; Q~_0 = 0.5*0.722 + 0.5*1.075 = 0.8985
    np.testing.assert_allclose(backward_smoothing(q, alpha=0.5), [0.8985, 1.075, 1.2])
    np.testing.assert_allclose(backward_smoothing(q, alpha=0.0), q)


def test_multiscale_advantage_and_do_no_harm_by_hand():
    # group: a success with Q = [0, 1] and a failure with Q = [0, 0]
    outcomes = [1.0, 0.0]
    q = [np.array([0.0, 1.0]), np.array([0.0, 0.0])]
    macro = (np.array(outcomes) - 0.5) / (np.std(outcomes, ddof=1) + 1e-6)  # +-0.7071
    flat = np.array([0.0, 1.0, 0.0, 0.0])
    z = (flat - 0.25) / flat.std()  # [-1/sqrt(3), sqrt(3), -1/sqrt(3), -1/sqrt(3)]
    with_mask = multiscale_advantage(outcomes, q, omega=1.0, do_no_harm=True)
    np.testing.assert_allclose(with_mask[0], [macro[0] + 0.0, macro[0] + z[1]])  # negative micro zeroed (success)
    np.testing.assert_allclose(with_mask[1], [macro[1] + z[2], macro[1] + z[3]])  # failures keep it
    without = multiscale_advantage(outcomes, q, omega=0.5, do_no_harm=False)
    np.testing.assert_allclose(without[0], macro[0] + 0.5 * z[:2])


def test_hcapo_advantages_chain():
    res = hcapo_advantages([[1.0, 1.2], [0.8, 1.0]], [1.0, 0.0], gamma=0.9, smoothing_alpha=0.5)
    np.testing.assert_allclose(res.q[0], [0.9, 1.2])
    np.testing.assert_allclose(res.q_smoothed[0], [1.05, 1.2])
    np.testing.assert_allclose(res.q[1], [0.0, 0.0])
    expected = multiscale_advantage([1.0, 0.0], res.q_smoothed)
    for a, b in zip(res.advantage, expected):
        np.testing.assert_allclose(a, b)
