"""Known-answer audits on the planted-effect environment: an oracle is H1, its shuffle H3, its
negation H2, and a collection below the protocol's minimum INFEASIBLE."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from creditaudit.audit.core import audit_tables, verdict_sentence
from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict
from creditaudit.replay.engine import ReplaySettings, replay_trajectory
from creditaudit.replay.envs.planted import PlantedEnv
from creditaudit.replay.policies import PromptBuilder, SampledAction
from creditaudit.replay.rollout import advance, start_rollout

PID = "7" * 64


class UniformPolicy:
    """The planted environment's reference policy (uniform over the admissible doors)."""

    prompt_builder = PromptBuilder(None, history_length=0)

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            line = [l for l in prompt.splitlines() if l.startswith("admissible actions: ")][-1]
            admissible = line[len("admissible actions: "):].split(" | ")
            out.append(SampledAction(admissible[int(np.random.default_rng(seed).integers(len(admissible)))],
                                     (), (), "eos", None, int(seed)))
        return out


def _protocol():
    """The default gates over three audited families: oracle, negated oracle, and a noise family."""
    data = protocol_dict(parse_protocol(default_template_text()))
    data["signals"] = [{"name": "oracle", "family": "confidence"}, {"name": "negated", "family": "confidence"},
                       {"name": "noise", "family": "confidence"}]
    data["controls"] = [
        {"name": "random", "kind": "random", "null_control": True},
        {"name": "uniform", "kind": "uniform", "null_control": True},
        {"name": "shuffle-oracle", "kind": "shuffle", "of": "oracle"},
        {"name": "shuffle-negated", "kind": "shuffle", "of": "negated"},
        {"name": "shuffle-noise", "kind": "shuffle", "of": "noise"},
    ]
    data["router"] = {"confidence_family": "oracle", "judge_family": "noise", "routed_share": 0.5}
    data["statistics"]["bootstrap_iterations"] = 2000
    return protocol_from_dict(data)


def _planted(n_tasks: int):
    env, policy = PlantedEnv(n_steps=8, horizon=30, p_absorbing=0.05, p_pivotal=0.6), UniformPolicy()
    frames = []
    for i, task in enumerate(env.make_tasks(n_tasks, rng=np.random.default_rng(11))):
        obs = env.reset(task)
        rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
        advance(env, policy, policy.prompt_builder, [rollout], seed_for=lambda r, i=i: 1000 * i + r.steps,
                temperature=1.0)
        traj = pd.DataFrame({"trajectory_id": f"t{i:03d}", "action": [t.action for t in rollout.turns],
                             "state_signature": [t.state_signature for t in rollout.turns],
                             "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0})
        env.reset(task)
        truth = env.true_effects(list(traj.action))
        turns = replay_trajectory(env, policy, task=task, trajectory=traj, protocol_id=PID,
                                  settings=ReplaySettings()).turns.to_pandas()
        turns["truth"] = truth
        frames.append(turns)
    return pd.concat(frames, ignore_index=True)


def _credit(replay: pd.DataFrame, protocol) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    base = replay[["trajectory_id", "turn"]].copy()
    oracle = replay.truth.to_numpy() + rng.normal(0, 0.02, len(replay))  # noisy, monotone in the effect
    values = {"oracle": oracle, "negated": -oracle, "noise": rng.normal(size=len(replay)),
              "random": rng.normal(size=len(replay)), "uniform": rng.uniform(-1, 1, len(replay))}
    for family in ("oracle", "negated", "noise"):  # within-trajectory shuffles
        shuffled = values[family].copy()
        for _, idx in base.groupby("trajectory_id").groups.items():
            idx = np.asarray(idx)
            shuffled[idx] = values[family][rng.permutation(idx)]
        values[f"shuffle-{family}"] = shuffled
    frames = []
    for name, credit in values.items():
        frame = base.copy()
        frame["subject"], frame["credit"], frame["abstained"] = name, credit, False
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def audit():
    protocol = _protocol()
    replay = _planted(90)
    return audit_tables(_credit(replay, protocol), replay, protocol=protocol, protocol_id=PID), protocol


def test_oracle_is_h1(audit):
    result, protocol = audit
    d = result.decisions["oracle"]
    assert d.verdict == "H1_TRACKS", (d.to_dict(), result.subjects["oracle"])
    assert result.subjects["oracle"].ci_low >= 0.3
    assert "tracks contribution" in verdict_sentence(d, result.subjects["oracle"], protocol)


def test_negated_oracle_is_h2(audit):
    result, _ = audit
    assert result.decisions["negated"].verdict == "H2_REVERSED"


def test_shuffled_oracle_is_h3(audit):
    result, protocol = audit
    # the shuffle control audited as a family of its own: decided against the oracle's shuffle
    from creditaudit.protocol.decision import decide

    d = decide(protocol.hypotheses, family="shuffle-oracle", table=result.table,
               aliases={"shuffle(self)": "shuffle-noise"})
    assert d.verdict == "H3_PLACEBO"
    assert result.decisions["noise"].verdict == "H3_PLACEBO"
    sentence = verdict_sentence(result.decisions["noise"], result.subjects["noise"], protocol)
    assert "not distinguishable" in sentence and "no effect" not in sentence


def test_null_controls_contain_zero_and_every_gate_is_recorded(audit):
    result, _ = audit
    for name in ("random", "uniform"):
        s = result.subjects[name]
        assert s.ci_low <= 0 <= s.ci_high
    gates = result.decisions["oracle"].to_dict()["gates"]
    assert [g["gate"] for g in gates] == ["Controls", "INFEASIBLE", "H3", "H2", "H1", "H4"]
    assert all(g["inputs"] for g in gates[:5])


def test_holm_and_exclusions_are_recorded(audit):
    result, _ = audit
    assert result.holm["family"] == ["oracle", "negated", "noise"]
    assert result.holm["adjusted"][0] <= 0.05 and result.holm["rejected"][:2] == [True, True]
    assert result.exclusions["n_trajectories"] == 90
    assert result.exclusions["n_included_turns"] == result.subjects["oracle"].n_included_turns


def test_sign_agreement_and_lift_of_the_oracle(audit):
    result, _ = audit
    oracle = result.subjects["oracle"]
    assert oracle.sign_agreement > 0.6 and oracle.lift > 1.0
    assert result.subjects["negated"].sign_agreement < 0.4


def test_small_collection_is_infeasible():
    protocol = _protocol()
    replay = _planted(8)
    result = audit_tables(_credit(replay, protocol), replay, protocol=protocol, protocol_id=PID)
    for family in ("oracle", "negated", "noise"):
        assert result.decisions[family].verdict == "INFEASIBLE", result.decisions[family].to_dict()
    sentence = verdict_sentence(result.decisions["oracle"], result.subjects["oracle"], protocol)
    assert sentence.startswith("oracle: inconclusive")


def test_missing_control_is_refused():
    protocol = _protocol()
    replay = _planted(3)
    credit = _credit(replay, protocol)
    from creditaudit.errors import InputError

    with pytest.raises(InputError, match="no rows for shuffle-noise"):
        audit_tables(credit[credit.subject != "shuffle-noise"], replay, protocol=protocol, protocol_id=PID)
