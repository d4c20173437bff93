"""The embedded judge model (``model: embedded``): its labels, its shipped files, and that it
judges (non-constant scores on held-out transcripts) through the judge family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit.signals.families.judge import JudgeFamily, judge_prompt
from creditaudit.signals.families.judge_build import JUDGE_MODEL_DIR, JUDGE_RECORD, truncated, turn_markers
from creditaudit.signals.families.judge_data import labelled_from_dict, progress_labels

DATA = Path(__file__).resolve().parent / "data" / "judge_held_out.json"


@pytest.fixture(scope="module")
def held_out():
    """Six held-out transcripts of the shipped build (its ``judge/held-out-games`` stream: games it
    was not trained on), with their planner-progress labels: two noisy-expert transcripts (won) and
    four of the default policy (two won, two lost after 50 turns)."""
    return [labelled_from_dict(d) for d in json.loads(DATA.read_text())]


@pytest.fixture(scope="module")
def embedded_judge():
    from creditaudit.signals.families.judge_eval import load_judge

    return load_judge(JUDGE_MODEL_DIR)


def test_progress_labels_reward_shrinking_plans_and_name_one_worst_step():
    assert progress_labels([4, 3, 3, 2, 0]) == [1, 0, 1, 1]
    # two plan-lengthening steps: only the larger growth is -1; the other is 0
    assert progress_labels([5, 6, 5, 7, 6]) == [0, 1, -1, 1]
    # equal growths: the earliest takes the -1
    assert progress_labels([3, 4, 3, 4]) == [-1, 1, 0]
    assert progress_labels([3, 4, 3, 4], max_negative=0) == [0, 1, 0]


def test_truncated_transcript_is_a_game_that_ran_out_of_steps(held_out):
    lt = held_out[0]
    cut = truncated(lt, 3)
    assert len(cut.trajectory) == 3 and cut.trajectory.outcome == 0
    assert cut.trajectory.final_observation == lt.trajectory.turns[2].feedback
    assert list(cut.labels) == progress_labels(lt.plan_lengths[:4])


def test_shipped_judge_is_small_and_tokenizes_turns_as_markers(embedded_judge):
    record = json.loads((JUDGE_MODEL_DIR / JUDGE_RECORD).read_text())
    weights = JUDGE_MODEL_DIR / "model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 8 * 2**20
    tok = embedded_judge.model.tokenizer  # as the judge family loads it
    ids = tok("turn 7\nscore of turn 7:", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["turn 7", "\n", "score", "of", "turn 7:"]
    assert set(turn_markers()) <= set(tok.get_vocab())
    # stated figures of the shipped build on its 72 held-out transcripts (24 noisy-expert, 48 of
    # the default policy): agreement with the labels beyond chance (kappa's CI above 0), and at
    # most half the trajectories constant (measured: kappa 0.23 [0.19, 0.27], 11 of 72 constant)
    assert record["evaluation"]["kappa_ci"][0] > 0
    assert record["evaluation"]["constant_share"] <= 0.5


def test_embedded_judge_scores_vary_within_held_out_trajectories(embedded_judge, held_out):
    agree, n, constant = 0, 0, 0
    for lt in held_out:
        verdict = embedded_judge.judge(lt.trajectory)
        assert verdict.scores is not None and len(verdict.scores) == len(lt.trajectory)
        assert verdict.scores.count(-1) <= 1
        constant += len(set(verdict.scores)) == 1
        agree += sum(int(a == b) for a, b in zip(verdict.scores, lt.labels))
        n += len(lt.labels)
    assert constant <= 1, f"{constant} of {len(held_out)} held-out trajectories got one score on every turn"
    majority = max(np.mean([x == c for lt in held_out for x in lt.labels]) for c in (1, 0, -1))
    assert agree / n > majority - 0.1


def test_model_embedded_through_the_judge_family(held_out, tmp_path, context_factory):
    from creditaudit.protocol.canonical import canonical_hash
    from creditaudit.replay.policies import policy_file_hashes

    family = JudgeFamily(name="judge", backend="local", model="embedded")
    assert family.needs == frozenset() and family.inputs(tmp_path) == []
    trajs = [lt.trajectory for lt in held_out[:3]]
    out = family.compute(context_factory(trajs, run_dir=tmp_path))
    hashes = policy_file_hashes(JUDGE_MODEL_DIR)
    digest = canonical_hash({**hashes["model_files"], **hashes["tokenizer_files"]})
    assert out.report["judge_id"] == f"local:embedded@{digest[:16]}"
    assert out.report["judge_model_sha256"] == digest
    assert out.credit["abstain_reason"].isna().all()
    per_traj = out.credit.groupby("trajectory_id")["credit"].nunique()
    assert (per_traj > 1).sum() >= 2
    # the family's per-turn prompts are the TARL body plus the turn cue
    body = judge_prompt(trajs[0])
    first = out.diagnostics.to_pandas().query("trajectory_id == @trajs[0].trajectory_id").iloc[0]
    from creditaudit.protocol.canonical import sha256_bytes

    action, seen = trajs[0].turns[0].action, " ".join(trajs[0].turns[1].observation.split())
    cue = f"turn 0 once more. action: {action}\nwhat followed: {seen}\nscore of turn 0:"
    assert first["prompt_sha256"] == sha256_bytes((body + "\n" + cue).encode("utf-8"))


def test_model_embedded_without_shipped_files_names_the_build_command(monkeypatch, tmp_path, trajectory_factory,
                                                                      context_factory):
    import creditaudit.signals.families.judge_build as jb

    monkeypatch.setattr(jb, "JUDGE_MODEL_DIR", tmp_path / "missing")
    family = JudgeFamily(name="judge", backend="local", model="embedded")
    with pytest.raises(InputError, match="creditaudit judge build"):
        family.compute(context_factory([trajectory_factory(n_turns=2)], run_dir=tmp_path))


@pytest.mark.slow
def test_the_judge_recipe_is_reproducible_from_its_seed(tmp_path):
    """The judge's recipe (games, noisy-expert and default-policy rollouts, planner labels, training) at a small size, built
    twice from the same seed in one process: byte-identical files. The shipped build itself takes
    tens of minutes to rebuild (`creditaudit judge build --out DIR`, then compare with
    `creditaudit policy hashes`), too long for the suite; its record states its settings."""
    from creditaudit.replay.policies import policy_file_hashes
    from creditaudit.signals.families.judge_build import JudgeBuild, build_judge_model

    small = JudgeBuild(seed=3, train_games=6, held_out_games=2, passes=1, policy_rollouts=1, horizon=12,
                       hidden_size=16, num_layers=1, num_heads=2, epochs=1)
    first = build_judge_model(tmp_path / "a", small, games_dir=tmp_path / "games", threads=1, workers=1,
                              evaluate=False)
    second = build_judge_model(tmp_path / "b", small, games_dir=tmp_path / "games", threads=1, workers=1,
                               evaluate=False)
    assert policy_file_hashes(tmp_path / "a") == policy_file_hashes(tmp_path / "b")
    assert first["training"]["label_counts"] == second["training"]["label_counts"]
    assert sum(first["training"]["label_counts"].values()) > 0
    # one noisy-expert and one default-policy transcript per training game
    assert first["train_transcripts"] == 6 * 2
