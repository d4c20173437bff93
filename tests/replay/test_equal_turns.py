"""Equal turns get equal numbers: a (prompt, action) pair the policy meets again is not rescored in
another batch, whose float rounding would give it a number differing in the seventh digit -- a
difference a within-trajectory rank reads as an order. Checked with the shipped default policy,
where batched rescoring does differ, on the real ALFWorld engine."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from creditaudit.replay.policies.default.shipped import SHIPPED_POLICY_DIR
from creditaudit.replay.policies.hf import load_policy


@pytest.fixture(scope="module")
def shipped():
    return load_policy(SHIPPED_POLICY_DIR)


def _prompts(policy):
    from creditaudit.replay.policies.base import Turn

    goal = "put a clean mug in coffeemachine."
    seen = ["You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1.",
            "You arrive at cabinet 1. The cabinet 1 is closed."]
    admissible = ("go to cabinet 1", "go to countertop 1", "look", "inventory", "open cabinet 1")
    return [policy.prompt_builder.build(goal, seen[i % 2], admissible, [Turn(seen[j % 2], "look") for j in range(i)])
            for i in range(3)]


def test_a_repeated_row_shares_its_numbers_whatever_batch_it_would_fall_in(shipped):
    short, _, long = _prompts(shipped)
    # Sorted by length and cut in twos, the second copy of (long, look) would be scored alone: a
    # batch of one rounds differently from a batch of two on this model (checked below).
    rows = [(short, "look"), (long, "look"), (long, "look")]
    prompts, actions = map(list, zip(*rows))
    scores = shipped.score(prompts, actions, batch_size=2)
    assert scores[1] == scores[2]
    alone = shipped.score([long], ["look"], batch_size=1)[0]
    paired = shipped.score([short, long], ["look", "look"], batch_size=2)[1]
    if alone == paired:
        pytest.skip("this CPU's kernels round a batch of one as a batch of two: nothing to tell apart")
    assert scores[1] == paired  # the pair's first row, scored in its batch of two
    # rows that differ are still scored for themselves
    other = shipped.score(prompts + [long], actions + ["inventory"], batch_size=2)
    assert other[3].token_ids != other[1].token_ids and other[3].token_logprobs != other[1].token_logprobs


def _collected(run_root, *, batch_size: int):
    """Collect two generated ALFWorld tasks x 8 rollouts of the shipped policy at horizon 30, with
    the policy scoring ``batch_size`` prompts per forward pass; the trajectories table."""
    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.demo import DEMO_OVERRIDES, demo_protocol_text
    from creditaudit.protocol.lock import freeze, require_frozen
    from creditaudit.protocol.signing import generate_keypair, load_signer
    from creditaudit.replay.collect import collect, load_run_policy
    from creditaudit.replay.policies.default.shipped import install_built_policy, shipped_build

    run = run_root / "run"
    run.mkdir(parents=True)
    overrides = {**DEMO_OVERRIDES, "environment": {"generator": {"games_per_type": 1}, "horizon": 30},
                 "collection": {"n_tasks": 2, "group_size": 8, "determinism_instances": 2}}
    install_built_policy(run / "policy", shipped_build())
    (run / "protocol.yaml").write_text(pin_policy_text(demo_protocol_text(overrides), run / "policy"))
    signer = load_signer(generate_keypair(run / "keys")[0])
    freeze(run / "protocol.yaml", signer)
    policy = load_run_policy(require_frozen(run / "protocol.yaml"), batch_size=batch_size)
    collect(run / "protocol.yaml", signer, policy=policy)
    table = pq.read_table(run / "collect" / "trajectories.parquet").to_pandas()
    shutil.rmtree(run)
    return table


@pytest.mark.slow
def test_collection_records_equal_numbers_for_equal_turns_and_batch_size_moves_no_rank(tmp_path):
    pytest.importorskip("textworld")
    wide = _collected(tmp_path / "wide", batch_size=32)
    narrow = _collected(tmp_path / "narrow", batch_size=1)
    # the policy loops: pairs recur within trajectories, so the property is exercised
    pairs = wide.groupby(["prompt_sha256", "action"])
    assert (pairs.size() > 1).sum() >= 5
    assert (pairs.token_logprobs.agg(lambda s: len({tuple(v) for v in s})) == 1).all()
    assert (narrow.groupby(["prompt_sha256", "action"]).token_logprobs
            .agg(lambda s: len({tuple(v) for v in s})) == 1).all()

    # Another batch size is another float rounding (as another CPU is): the same actions, numbers
    # that differ in the seventh digit, and within each trajectory the same order of turns by their
    # log-probability -- the only thing the confidence signal's rank statistics read.
    assert list(wide.action) == list(narrow.action) and list(wide.trajectory_id) == list(narrow.trajectory_id)
    differs = np.abs(wide.mean_logprob.to_numpy() - narrow.mean_logprob.to_numpy())
    assert differs.max() < 1e-5
    for tid, a in wide.groupby("trajectory_id"):
        x = a.mean_logprob.to_numpy()
        y = narrow.loc[a.index, "mean_logprob"].to_numpy()
        assert (np.sign(x[:, None] - x[None, :]) == np.sign(y[:, None] - y[None, :])).all(), tid
