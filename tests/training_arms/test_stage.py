"""``creditaudit arms`` end to end on the planted environment: determinism, dose, resume, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.training_arms.rules import ARM_NAMES
from creditaudit.training_arms.stage import run_arms

pytestmark = pytest.mark.slow


def test_the_stage_writes_stamped_artifacts_figures_and_a_link(trained_run):
    import pyarrow.parquet as pq

    run, _, doc = trained_run
    out = run / "arms"
    for name in ("analysis.json", "summary.md", "training.parquet", "evaluation.parquet", "probe_distributions.parquet",
                 "probes.parquet", "tasks.json", "figures/success.png", "figures/js_heatmap.png", "figures/dose.png"):
        assert (out / name).is_file(), name
    for name in ("training.parquet", "evaluation.parquet", "probe_distributions.parquet"):
        assert set(pq.read_table(out / name).column("protocol_id").to_pylist()) == {doc.protocol_id}
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["protocol_id"] == doc.protocol_id
    assert str(run) not in (out / "analysis.json").read_text()  # no machine path
    assert [c["id"] for c in analysis["analysis"]["comparisons"]] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert all(c["reading"] in {"equivalent", "different", "inconclusive"} for c in analysis["analysis"]["comparisons"])
    assert len(analysis["analysis"]["stages"]) == 2
    links = sorted((run / "links").glob("*-arms.link.json"))
    assert links
    from creditaudit.protocol.links import read_link

    record = read_link(links[-1])
    assert record.signature_ok
    names = {p["name"] for p in record.products}
    assert "arms/analysis.json" in names and "arms/checkpoints/seed-1/round-2/judge/adapter_model.safetensors" in names
    assert "signals/credit.parquet" in {m["name"] for m in record.materials}


def test_the_dose_counter_equals_the_optimizer_steps_actually_taken(trained_run):
    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    run, _, doc = trained_run
    training = pq.read_table(run / "arms" / "training.parquet").to_pandas()
    for (arm, seed), rows in training.groupby(["arm", "seed"]):
        rows = rows.sort_values("round")
        assert rows["steps"].cumsum().tolist() == rows["steps_total"].tolist()
        assert (rows["steps"] == rows["target_steps"]).all() and (rows["steps"] == rows["natural_steps"]).all()
        assert (rows["natural_steps"] == np.ceil(rows["kept"] / 4).astype(int)).all()
        # AdamW's own per-parameter step count is the number of optimizer steps really taken
        state = load_file(str(run / "arms" / "checkpoints" / f"seed-{seed}" / "round-2" / arm / "optimizer.safetensors"))
        steps = {float(v) for k, v in state.items() if k.endswith("::step")}
        assert steps <= {float(rows["steps_total"].iloc[-1])}
        assert bool(steps) == (rows["steps_total"].iloc[-1] > 0)
    dose = doc.analysis["dose"]
    assert dose["outcome_only"]["mean_steps_per_round"] >= dose["pivotal_masked"]["mean_steps_per_round"]


def test_common_random_numbers_make_untrained_arms_identical(trained_run):
    import pyarrow.parquet as pq

    run, _, _ = trained_run
    training = pq.read_table(run / "arms" / "training.parquet").to_pandas()
    first = training[training["round"] == 1]
    for seed, rows in first.groupby("seed"):
        assert rows["turns"].nunique() == 1 and rows["train_success"].nunique() == 1  # same rollouts in every arm


def test_evaluation_pairs_every_checkpoint_with_the_base_rollout_by_rollout(trained_run):
    import pyarrow.parquet as pq

    run, _, doc = trained_run
    evaluation = pd.concat([pq.read_table(p).to_pandas() for p in sorted((run / "arms" / "eval").glob("*.parquet"))])
    key = ["set", "task_index", "rollout"]
    base = evaluation[evaluation["arm"] == "base"].set_index(key).sort_index()
    assert sorted(base.index.get_level_values("rollout").unique()) == [0, 1]  # arms.eval_rollouts = 2
    assert len(base) == 2 * (3 + doc.task_sets["train_eval"]["n"])
    training = pq.read_table(run / "arms" / "training.parquet").to_pandas()
    untrained = training.groupby(["arm", "seed"])["steps_total"].max()
    untrained = [pair for pair, steps in untrained.items() if steps == 0]
    assert untrained, "the fixture should leave some arm untrained (the constant local judge gives no weight)"
    for arm, seed in untrained:  # LoRA B = 0: the same policy, so the same seeds give the same episodes
        rows = evaluation[(evaluation["arm"] == arm) & (evaluation["seed"] == seed)].set_index(key).sort_index()
        assert rows.index.equals(base.index)
        assert (rows[["success", "steps"]].to_numpy() == base[["success", "steps"]].to_numpy()).all()
    learning = doc.analysis["learning"]
    assert learning["n_episodes"] == 2 * doc.task_sets["train_eval"]["n"]
    for arm, seed in untrained:
        if [s for a, s in untrained if a == arm] == learning["arms"][arm]["seeds"]:
            assert learning["arms"][arm]["estimate"] == 0.0 and learning["arms"][arm]["moved"] is False


def test_same_seed_twice_gives_identical_checkpoints_and_metrics(trained_run, credited_run, tmp_path, run_copier,
                                                                 digests):
    run, signer, doc = trained_run
    again = run_copier(credited_run[0], tmp_path)
    doc2 = run_arms(again / "protocol.yaml", signer)
    assert doc2 == doc
    assert digests(again) == digests(run)


def test_an_interrupted_run_resumes_to_the_same_bytes(trained_run, tmp_path, run_copier, digests):
    run, signer, _ = trained_run
    expected = digests(run)
    resumed = run_copier(run, tmp_path)
    # interrupt: round 2 of some arms of seed 1 never finished, and the outputs were never written
    for arm in ("implicit", "pivotal_masked", "judge"):
        shutil.rmtree(resumed / "arms" / "checkpoints" / "seed-1" / "round-2" / arm)
    for name in ("analysis.json", "training.parquet", "eval/implicit__s1.parquet"):
        (resumed / "arms" / name).unlink()
    run_arms(resumed / "protocol.yaml", signer)
    assert digests(resumed) == expected


def test_dose_matched_mode_equalises_optimizer_steps(credited_run, arms_run_factory, planted_policy_dir, tmp_path):
    import pyarrow.parquet as pq

    run, signer = arms_run_factory(tmp_path, planted_policy_dir,
                                   arms={"arms": ["outcome_only", "implicit", "judge", "pivotal_masked"],
                                         "dose_matched": True, "seeds": 1})
    doc = run_arms(run / "protocol.yaml", signer)
    training = pq.read_table(run / "arms" / "training.parquet").to_pandas()
    matched_rounds = 0
    for (seed, round_), rows in training.groupby(["seed", "round"]):
        able = rows[rows["kept"] > 0]
        if able.empty:  # every group of the round had one outcome: no arm had anything to train on
            assert (rows["steps"] == 0).all()
            continue
        matched_rounds += len(able) >= 2
        assert able["steps"].nunique() == 1
        assert able["steps"].iloc[0] == able["natural_steps"].min() > 0
        plan = json.loads((run / "arms" / "checkpoints" / f"seed-{seed}" / f"round-{round_}" / "plan.json").read_text())
        assert plan["unmatched"] == sorted(rows[rows["kept"] == 0]["arm"])  # the judge gave no credit: listed
    assert matched_rounds >= 1  # the equalisation was exercised on at least one round with two arms
    assert (training["natural_steps"] > training["steps"]).any()  # some arm was held back
    assert doc.settings["arms"]["dose_matched"] is True


def test_a_missing_credit_table_is_refused_naming_the_arms(credited_run, tmp_path, run_copier):
    run = run_copier(credited_run[0], tmp_path)
    (run / "signals" / "credit.parquet").unlink()
    with pytest.raises(InputError, match=r"arms .*implicit.*credit table is missing"):
        run_arms(run / "protocol.yaml", credited_run[1])


def test_an_arm_whose_family_the_protocol_lacks_is_refused(arms_run_factory, planted_policy_dir, tmp_path):
    signals = [{"name": "implicit", "family": "implicit"}]
    controls = [{"name": "random", "kind": "random", "null_control": True},
                {"name": "uniform", "kind": "uniform", "null_control": True},
                {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"}]
    run, signer = arms_run_factory(tmp_path, planted_policy_dir, signals=signals, controls=controls, signals_now=False)
    with pytest.raises(InputError, match=r"judge, shuffled_judge, which train on judge credit"):
        run_arms(run / "protocol.yaml", signer)


def test_a_base_policy_that_differs_from_the_pins_is_refused(credited_run, tmp_path, run_copier):
    run = run_copier(credited_run[0], tmp_path)
    weights = run / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(CheckFailed, match="model.safetensors"):
        run_arms(run / "protocol.yaml", credited_run[1])


def test_a_checkpoint_that_fails_to_load_is_refused_naming_it(trained_run, tmp_path, run_copier):
    run, signer, _ = trained_run
    broken = run_copier(run, tmp_path)
    target = broken / "arms" / "checkpoints" / "seed-0" / "round-2" / "implicit" / "adapter_model.safetensors"
    target.write_bytes(b"\x00" * 64)
    with pytest.raises(InputError, match=r"seed-0/round-2/implicit/adapter_model.safetensors: the checkpoint fails to load"):
        run_arms(broken / "protocol.yaml", signer)
    # the finished checkpoints of the other arms are kept
    assert (broken / "arms" / "checkpoints" / "seed-0" / "round-2" / "judge" / "state.json").is_file()


def test_checkpoints_load_with_peft(trained_run):
    from peft import PeftModel

    from creditaudit.replay.policies import HFPolicy, load_policy
    from creditaudit.training_arms.loop import sequence_logprobs

    import pyarrow.parquet as pq

    run, _, _ = trained_run
    training = pq.read_table(run / "arms" / "training.parquet").to_pandas()
    trained = training[(training["arm"] == "outcome_only") & (training["round"] == 2) & (training["steps_total"] > 0)]
    seed = int(trained["seed"].iloc[0])  # a seed index whose rollouts had a success to learn from
    base = load_policy(run / "policy", history_length=0)
    before = float(sequence_logprobs(base, ["action:"], ["open the red door"]).detach())
    model = PeftModel.from_pretrained(base.model, run / "arms" / "checkpoints" / f"seed-{seed}" / "round-2" / "outcome_only")
    tuned = HFPolicy(model.base_model.model, base.tokenizer, history_length=0)
    assert float(sequence_logprobs(tuned, ["action:"], ["open the red door"]).detach()) != before
    assert set(ARM_NAMES) == {p.name for p in (run / "arms" / "checkpoints" / "seed-0" / "round-1").iterdir() if p.is_dir()}


def test_the_command_line_exits_2_naming_the_missing_credit(credited_run, tmp_path, run_copier, capsys):
    from creditaudit.cli import main

    run = run_copier(credited_run[0], tmp_path)
    (run / "signals" / "credit.parquet").unlink()
    with pytest.raises(SystemExit) as exc:
        main(["arms", "--run", str(run), "--quiet"])
    assert exc.value.code == 2
    assert "credit table is missing" in capsys.readouterr().err


def test_rerunning_finished_arms_writes_nothing(trained_run, tmp_path, run_copier, capsys):
    """``creditaudit arms`` on a finished, verified arms stage is skipped: no new link record, no byte changed."""
    from creditaudit.cli import main

    run = run_copier(trained_run[0], tmp_path)
    before = {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    with pytest.raises(SystemExit) as exc:
        main(["arms", "--run", str(run), "--quiet"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "arms already trained and analysed" in out and "held-out success" in out
    assert {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before


def test_the_update_uses_the_distribution_the_policy_acts_from(trained_run):
    """Under admissible decoding the trained log-probability is the softmax over the turn's commands
    of their sequence log-probabilities at the rollout temperature, checked against the policy's own
    scorer; without candidates it is the action's token log-probability."""
    import math

    import torch

    from creditaudit.replay.policies import load_policy
    from creditaudit.training_arms.loop import Sample, action_logprobs, sequence_logprobs

    run, _, _ = trained_run
    policy = load_policy(run / "policy", history_length=0)
    commands = ("open the red door", "open the blue door", "go north")
    samples = [Sample("action:", c, 1.0, commands) for c in commands] + [Sample("action:", "go north", 1.0)]
    t = 0.7
    got = action_logprobs(policy, samples, t)
    assert got.requires_grad
    scores = policy.score(["action:"] * len(commands), list(commands), include_stop=True)
    s = [(x.sum_logprob + (x.stop_logprob or 0.0)) / t for x in scores]
    reference = [v - math.log(sum(math.exp(u) for u in s)) for v in s]
    assert torch.allclose(got[:3].detach().double(), torch.tensor(reference, dtype=torch.float64), atol=1e-4)
    assert math.isclose(sum(math.exp(float(v)) for v in got[:3]), 1.0, rel_tol=1e-5)  # a distribution over commands
    free = float(sequence_logprobs(policy, ["action:"], ["go north"])[0])
    assert math.isclose(float(got[3]), free, abs_tol=1e-5)  # no candidates: the token log-probability
    assert policy.tree_scoring  # the prompt once, the candidates as a prefix tree; row by row agrees
    policy._tree_attention = False
    rows = action_logprobs(policy, samples, t)
    assert torch.allclose(rows.detach(), got.detach(), atol=1e-5)
    got.sum().backward()  # differentiable through the tree pass
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in policy.model.parameters())


def test_the_pivotal_credit_is_each_rollouts_own_replay(arms_run_factory, planted_policy_dir, tmp_path, monkeypatch):
    """A task's rollouts are replayed together (one group: shared transitions and scores); each
    rollout's pivotal turns are those a replay of that rollout alone finds (status complete and
    A_replay != 0)."""
    from creditaudit.replay.engine import replay_trajectory
    from creditaudit.training_arms.loop import ArmsTrainer

    run, signer = arms_run_factory(tmp_path, planted_policy_dir,
                                   arms={"arms": ["outcome_only", "pivotal_masked"], "seeds": 1, "rounds": 1})
    grouped = ArmsTrainer._pivotal
    checked = []

    def alone(self, seed, round_, tasks, rollouts, arm):
        got = grouped(self, seed, round_, tasks, rollouts, arm)
        settings = self.pivotal_settings()
        expected = []
        for k, ((_, _, task), group) in enumerate(zip(tasks, rollouts)):
            for ro in group:
                frame = self.replay_frame(seed, round_, k, ro)
                result = replay_trajectory(self.env, self.policy, task=task, trajectory=frame,
                                           protocol_id=self.protocol_id, settings=settings)
                expected.append([1.0 if s == "complete" and p else 0.0 for s, p in
                                 zip(result.turns.column("status").to_pylist(), result.turns.column("pivotal").to_pylist())])
        assert [x.tolist() for x in got] == expected
        checked.append((sum(len(x) for x in got), sum(float(x.sum()) for x in got)))
        return got

    monkeypatch.setattr(ArmsTrainer, "_pivotal", alone)
    run_arms(run / "protocol.yaml", signer)
    assert checked and checked[0][0] > 0 and checked[0][1] > 0  # some turn is pivotal: the comparison has content
