"""Executed replay: the estimator against planted effects."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from creditaudit.replay.engine import ReplaySettings, difference_interval, replay_trajectory
from creditaudit.replay.envs.planted import PlantedEnv
from creditaudit.replay.policies import PromptBuilder, SampledAction
from creditaudit.replay.rollout import advance, start_rollout
from creditaudit.stats import resolution_bound


class UniformPolicy:
    """The planted environment's reference policy: uniform over the admissible commands listed
    in the prompt, one seeded draw per row (so the planted effects are E[A_replay] exactly)."""

    prompt_builder = PromptBuilder(None, history_length=0)

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            line = [l for l in prompt.splitlines() if l.startswith("admissible actions: ")][-1]
            admissible = line[len("admissible actions: "):].split(" | ")
            choice = admissible[int(np.random.default_rng(seed).integers(len(admissible)))]
            out.append(SampledAction(choice, (), (), "eos", None, int(seed)))
        return out


def _planted_replays(n_tasks: int, settings: ReplaySettings):
    env, policy = PlantedEnv(n_steps=8, horizon=30), UniformPolicy()
    frames = []
    for index, task in enumerate(env.make_tasks(n_tasks, rng=np.random.default_rng(2026))):
        obs = env.reset(task)
        rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
        advance(env, policy, policy.prompt_builder, [rollout], seed_for=lambda r, i=index: 10_000 * i + r.steps,
                temperature=1.0)
        actions = [t.action for t in rollout.turns]
        trajectory = pd.DataFrame({
            "trajectory_id": f"t{index}", "action": actions,
            "state_signature": [t.state_signature for t in rollout.turns],
            "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0,
        })
        env.reset(task)
        truth = env.true_effects(actions)
        # the success probability of the factual arm at each turn (for the noise-floor prediction)
        env.reset(task)
        p_fact = []
        for action in actions:
            p_fact.append(env.q_value(action))
            env.step(action)
        result = replay_trajectory(env, policy, task=task, trajectory=trajectory, protocol_id="b" * 64,
                                   settings=settings)
        frame = result.turns.to_pandas()
        frame["truth"], frame["p"] = truth, p_fact
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def planted_replay():
    return _planted_replays(40, ReplaySettings())


def test_replay_recovers_planted_effects(planted_replay):
    turns = planted_replay
    assert (turns.status == "complete").all() and (turns.prefix_ok).all()
    assert len(turns) >= 200
    covered = (turns.ci_low <= turns.truth + 1e-12) & (turns.truth - 1e-12 <= turns.ci_high)
    assert covered.mean() >= 0.93, covered.mean()
    # the point estimates track the planted effects (rank agreement across all planted steps)
    assert np.corrcoef(turns.truth, turns.a_replay)[0, 1] > 0.5


def test_no_effect_steps_are_non_pivotal_at_the_rate_the_noise_floor_predicts(planted_replay):
    # With no effect, both arms draw outcomes with the same success probability p, so
    # P(A_replay = 0) = sum_k Binom(k; 3, p) * Binom(4k; 12, p) exactly (n_fact = 3, K * n_alt = 12).
    null = planted_replay[planted_replay.truth.abs() < 1e-12]
    assert len(null) >= 60
    k = np.arange(4)
    predicted = np.array([np.sum(binom.pmf(k, 3, p) * binom.pmf(4 * k, 12, p)) for p in null.p])
    observed = int((~null.pivotal.astype(bool)).sum())
    expected, sd = predicted.sum(), math.sqrt(np.sum(predicted * (1 - predicted)))
    assert abs(observed - expected) <= 3 * sd + 1, (observed, expected, sd)
    # decided states (p in {0, 1}) are never pivotal and have sigma_floor = 0
    decided = null[(null.p == 0) | (null.p == 1)]
    assert not decided.pivotal.any() and (decided.sigma_floor == 0).all()


def test_resolution_bound_and_per_turn_resolution(planted_replay):
    assert resolution_bound(3) == pytest.approx(0.6316, abs=1e-4)
    assert resolution_bound(12) == pytest.approx(1 - 0.05 ** (1 / 12))
    all_equal = planted_replay[planted_replay.fact_resolution.notna()]
    assert len(all_equal) and np.allclose(all_equal.fact_resolution, 1 - 0.05 ** (1 / 3))
    assert (all_equal.sigma_floor == 0).all()


def test_newcombe_interval_matches_statsmodels():
    from statsmodels.stats.proportion import confint_proportions_2indep

    for x1, n1, x2, n2 in [(56, 70, 48, 80), (3, 3, 4, 12), (0, 3, 12, 12), (1, 3, 6, 12), (9, 10, 3, 10)]:
        ref = confint_proportions_2indep(x1, n1, x2, n2, method="newcomb", compare="diff")
        assert difference_interval(x1, n1, x2, n2) == pytest.approx(ref, abs=1e-10)


def test_no_counterfactual_when_too_few_alternatives():
    settings = ReplaySettings(n_alternatives=4)
    env, policy = PlantedEnv(n_steps=3, n_actions=4, n_good=2), UniformPolicy()  # only 3 alternatives exist
    task = env.make_tasks(1, rng=np.random.default_rng(0))[0]
    obs = env.reset(task)
    rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
    advance(env, policy, policy.prompt_builder, [rollout], seed_for=lambda r: r.steps, temperature=1.0)
    frame = pd.DataFrame({"trajectory_id": "x", "action": [t.action for t in rollout.turns],
                          "state_signature": [t.state_signature for t in rollout.turns],
                          "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0})
    result = replay_trajectory(env, policy, task=task, trajectory=frame, protocol_id="c" * 64, settings=settings)
    turns = result.turns.to_pandas()
    assert (turns.status == "no_counterfactual").all() and turns.a_replay.isna().all()
    assert result.rollouts.num_rows == 0


def test_prefix_divergence_is_detected_and_counted():
    env, policy = PlantedEnv(n_steps=4), UniformPolicy()
    task = env.make_tasks(1, rng=np.random.default_rng(5))[0]
    obs = env.reset(task)
    rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
    advance(env, policy, policy.prompt_builder, [rollout], seed_for=lambda r: 100 + r.steps, temperature=1.0)
    signatures = [t.state_signature for t in rollout.turns]
    signatures[1] = "0" * 64  # the recorded state differs from what the engine reaches
    frame = pd.DataFrame({"trajectory_id": "y", "action": [t.action for t in rollout.turns],
                          "state_signature": signatures,
                          "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0})
    result = replay_trajectory(env, policy, task=task, trajectory=frame, protocol_id="d" * 64,
                               settings=ReplaySettings())
    turns = result.turns.to_pandas()
    assert result.counters["divergences"] == 1
    assert list(turns.status[:1]) == ["complete"] and (turns.status[1:] == "diverged").all()


def test_preregistered_turn_sampling_replays_the_same_turns_the_same_way(planted_replay):
    # A sample of k turns per trajectory: the sampled turns' rows equal full replay's (every turn's
    # rollouts come from its own seed streams), the rest are `not_sampled` with no rollouts, and the
    # sample is a function of the protocol id and the trajectory's length only.
    from dataclasses import replace

    sampled = _planted_replays(40, replace(ReplaySettings(), turns_per_trajectory=3))
    assert len(sampled) == len(planted_replay)
    per_traj = sampled.groupby("trajectory_id").status.apply(lambda s: int((s != "not_sampled").sum()))
    lengths = sampled.groupby("trajectory_id").size()
    assert (per_traj == lengths.clip(upper=3)).all()
    kept = sampled.status != "not_sampled"
    columns = ["trajectory_id", "turn", "status", "a_replay", "ci_low", "ci_high", "n_fact", "n_alt", "alternatives"]
    pd.testing.assert_frame_equal(sampled.loc[kept, columns].reset_index(drop=True),
                                  planted_replay.loc[kept, columns].reset_index(drop=True))
    assert (sampled.loc[~kept, "n_fact"] == 0).all() and sampled.loc[~kept, "a_replay"].isna().all()
    again = _planted_replays(40, replace(ReplaySettings(), turns_per_trajectory=3))
    assert (again.status == sampled.status).all()


def test_turn_sampling_is_a_protocol_field_outside_the_id_when_unset():
    from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict

    default = parse_protocol(default_template_text())
    assert default.replay.turns_per_trajectory is None
    data = protocol_dict(default)
    data["replay"]["turns_per_trajectory"] = 8
    sampled = protocol_from_dict(data)
    assert sampled.id != default.id
    assert ReplaySettings.from_protocol(sampled).turns_per_trajectory == 8


def test_the_measurability_map_is_of_the_sampled_turns(planted_replay):
    from dataclasses import replace

    import pyarrow as pa

    from creditaudit.audit.measurability import measurability_map
    from creditaudit.protocol.io import default_template_text, parse_protocol

    protocol = parse_protocol(default_template_text())
    sampled = _planted_replays(12, replace(ReplaySettings(), turns_per_trajectory=3))
    kept = sampled[sampled.status != "not_sampled"]
    with_rows = measurability_map(pa.Table.from_pandas(sampled, preserve_index=False), protocol_id="b" * 64,
                                  protocol=protocol)
    without = measurability_map(pa.Table.from_pandas(kept, preserve_index=False), protocol_id="b" * 64,
                                protocol=protocol)
    assert with_rows.n_not_sampled == len(sampled) - len(kept) > 0 and without.n_not_sampled == 0
    assert with_rows.n_turns == len(kept)
    assert replace(with_rows, n_not_sampled=0) == without


def test_a_tasks_trajectories_replayed_together_give_each_ones_own_tables():
    """A group (the replay's work unit: a task's G trajectories in one instance, one transition
    cache) gives every trajectory the turn and rollout tables it gets replayed alone, and executes
    fewer engine steps than the trajectories alone: they start in the same state and meet the same
    transitions."""
    from creditaudit.replay.engine import replay_group

    env, policy = PlantedEnv(n_steps=6, horizon=20), UniformPolicy()
    settings = ReplaySettings()
    fewer = 0
    for index, task in enumerate(env.make_tasks(3, rng=np.random.default_rng(7))):
        group = []
        for g in range(4):
            obs = env.reset(task)
            rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
            advance(env, policy, policy.prompt_builder, [rollout], temperature=1.0,
                    seed_for=lambda r, i=index, g=g: 100_000 * i + 1_000 * g + r.steps)
            group.append(pd.DataFrame({
                "trajectory_id": f"t{index}-{g}", "action": [t.action for t in rollout.turns],
                "state_signature": [t.state_signature for t in rollout.turns],
                "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0,
            }))
        alone = [replay_trajectory(env, policy, task=task, trajectory=f, protocol_id="c" * 64, settings=settings)
                 for f in group]
        together = replay_group(env, policy, task=task, trajectories=group, protocol_id="c" * 64, settings=settings)
        assert len(together) == len(group)
        for a, b in zip(alone, together):
            assert a.turns.equals(b.turns) and a.rollouts.equals(b.rollouts)
            assert a.counters["rollouts"] == b.counters["rollouts"] == b.rollouts.num_rows
            assert a.counters["restore_checks"] == b.counters["restore_checks"]
        # every transition is either executed or taken from the cache, alone or together
        steps = [sum(u.counters[k] for u in units) for units in (alone, together) for k in ("engine_steps", "cache_hits")]
        assert steps[0] + steps[1] == steps[2] + steps[3]
        assert steps[2] <= steps[0]
        fewer += steps[2] < steps[0]
    assert fewer >= 2
    with pytest.raises(ValueError, match="appears twice"):
        replay_group(env, policy, task=task, trajectories=[group[0], group[0]], protocol_id="c" * 64, settings=settings)
