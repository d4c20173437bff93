"""Executed replay: the estimator against planted effects, the stage's resume and executors."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from scipy.stats import binom

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.planted import PlantedEnv
from creditaudit.replay.policy import PromptBuilder, SampledAction
from creditaudit.replay.replay import ReplaySettings, difference_interval, replay_trajectory
from creditaudit.stats import resolution_bound
from creditaudit.replay.rollout import advance, start_rollout
from creditaudit.replay.stage import ROLLOUTS, TURNS, run_replay


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


# ----------------------------------------------------------------------------- the stage


def _make_run(root: Path, policy_dir: Path) -> tuple[Path, object]:
    from helpers import make_run

    return make_run(root, policy_dir)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, planted_policy_dir):
    run, signer = _make_run(tmp_path_factory.mktemp("ref"), planted_policy_dir)
    summary = run_replay(run / "protocol.yaml", signer, executor="inline")
    return run, summary


def test_stage_outputs_and_counters(reference_run):
    run, summary = reference_run
    turns = pq.read_table(run / TURNS).to_pandas()
    rollouts = pq.read_table(run / ROLLOUTS).to_pandas()
    assert summary.divergences == 0 and summary.restore_failures == 0 and rollouts.restore_ok.all()
    assert len(turns) == summary.n_turns and len(rollouts) == summary.n_rollouts
    complete = turns[turns.status == "complete"]
    assert len(complete) > 0
    per_turn = rollouts.groupby(["trajectory_id", "turn", "arm"]).size().unstack()
    assert (per_turn["fact"] == 3).all() and (per_turn["alt"] == 12).all()
    # A_replay is the difference of the arms' mean outcomes, recomputed from the stored rollouts
    means = rollouts.groupby(["trajectory_id", "turn", "arm"]).outcome.mean().unstack()
    merged = complete.set_index(["trajectory_id", "turn"]).join(means)
    np.testing.assert_allclose(merged.a_replay, merged["fact"] - merged["alt"])
    # every rollout of the factual arm starts with the factual action, alternatives with theirs
    first = rollouts.assign(first=rollouts.actions.map(lambda a: a[0]))
    facts = first[first.arm == "fact"].set_index(["trajectory_id", "turn"]).first
    assert (facts == turns.set_index(["trajectory_id", "turn"]).action.reindex(facts.index)).all()
    assert summary.engine_steps > 0 and summary.cache_hits > 0


def test_local_workers_give_identical_bytes(tmp_path, planted_policy_dir, reference_run):
    ref, _ = reference_run
    run, signer = _make_run(tmp_path, planted_policy_dir)
    run_replay(run / "protocol.yaml", signer, executor="local", workers=2)
    for rel in (TURNS, ROLLOUTS):
        assert sha256_file(run / rel) == sha256_file(ref / rel), rel


@pytest.mark.slow
def test_kill_9_then_resume_is_byte_identical(tmp_path, planted_policy_dir, reference_run):
    ref, _ = reference_run
    run, _ = _make_run(tmp_path, planted_policy_dir)
    cmd = [sys.executable, "-m", "creditaudit", "replay", "--run", str(run), "--executor", "inline", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    shards = run / "replay" / "shards"
    deadline = time.time() + 240
    while time.time() < deadline and len(list(shards.glob("*.turns.parquet"))) < 1:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(list(shards.glob("*.turns.parquet")))
    assert 1 <= written < 4 and not (run / TURNS).exists()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for rel in (TURNS, ROLLOUTS):
        assert sha256_file(run / rel) == sha256_file(ref / rel), rel


@pytest.mark.slow
def test_ray_executor_gives_identical_bytes(tmp_path, planted_policy_dir, reference_run):
    pytest.importorskip("ray")
    ref, _ = reference_run
    run, signer = _make_run(tmp_path, planted_policy_dir)
    run_replay(run / "protocol.yaml", signer, executor="ray", workers=2)
    import ray

    ray.shutdown()
    for rel in (TURNS, ROLLOUTS):
        assert sha256_file(run / rel) == sha256_file(ref / rel), rel


def test_corrupt_shard_is_refused_and_named(tmp_path, planted_policy_dir):
    run, signer = _make_run(tmp_path, planted_policy_dir)
    shards = run / "replay" / "shards"
    shards.mkdir(parents=True)
    name = next(iter(pq.read_table(run / "collect" / "trajectories.parquet").column("trajectory_id").to_pylist()))
    (shards / f"{name}.turns.parquet").write_bytes(b"\0" * 64)
    with pytest.raises(InputError, match=rf"{name}.turns.parquet: a replay shard exists but cannot be read"):
        run_replay(run / "protocol.yaml", signer, executor="inline")


def test_changed_policy_is_refused(tmp_path, planted_policy_dir):
    run, signer = _make_run(tmp_path, planted_policy_dir)
    (run / "policy" / "config.json").write_text((run / "policy" / "config.json").read_text() + " ")
    with pytest.raises(CheckFailed, match="config.json"):
        run_replay(run / "protocol.yaml", signer, executor="inline")
