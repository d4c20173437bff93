"""``creditaudit replay``: the stage's outputs, its executors, resume and refusals."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.stage import ROLLOUTS, TURNS, run_replay


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
    # the shards are removed once the concatenated tables are attested: nothing unvouched remains
    assert not (run / "replay" / "shards").exists()


def test_local_workers_give_identical_bytes(tmp_path, planted_policy_dir, reference_run):
    ref, _ = reference_run
    run, signer = _make_run(tmp_path, planted_policy_dir)
    run_replay(run / "protocol.yaml", signer, executor="local", workers=2)
    for rel in (TURNS, ROLLOUTS):
        assert sha256_file(run / rel) == sha256_file(ref / rel), rel


#: ``creditaudit replay`` in a process that sends itself SIGKILL once its first work unit's shards
#: are on disk: a kill -9 at a known point (a kill from outside raced the replay, which on the
#: planted run can write every shard between two polls), with no handler or clean-up run.
_KILLED_AFTER_FIRST_UNIT = """
import os, signal, sys
import creditaudit.replay.executors as executors
real = executors.worker_run
def worker_run(group):
    real(group)
    os.kill(os.getpid(), signal.SIGKILL)
executors.worker_run = worker_run
from creditaudit.cli import main
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_kill_9_then_resume_is_byte_identical(tmp_path, planted_policy_dir, reference_run):
    ref, _ = reference_run
    run, _ = _make_run(tmp_path, planted_policy_dir)
    args = ["replay", "--run", str(run), "--executor", "inline", "--quiet"]
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_FIRST_UNIT, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=240)
    assert killed.returncode == -signal.SIGKILL
    shards = run / "replay" / "shards"
    written = len(list(shards.glob("*.turns.parquet")))
    assert 1 <= written < 4 and not (run / TURNS).exists()
    subprocess.run([sys.executable, "-m", "creditaudit", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
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


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("pending", [False, True], ids=["finished", "pending"])
@pytest.mark.parametrize("workers", ["-2", "0"])
def test_a_bad_worker_count_is_refused_before_anything_runs(workers, pending, tmp_path, reference_run, capsys):
    """``--workers`` below 1 is bad usage (exit 2, the option named) whether or not there is work left,
    and nothing is written: no shard, no table, no new link record."""
    import shutil

    from creditaudit.cli import main

    run = tmp_path / "run"
    shutil.copytree(reference_run[0], run)
    if pending:
        shutil.rmtree(run / "replay")
    before = _snapshot(run)
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--run", str(run), "--workers", workers, "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "Traceback" not in err
    assert _snapshot(run) == before


def test_run_replay_refuses_a_bad_worker_count(reference_run):
    run, _ = reference_run
    from creditaudit.protocol.signing import load_signer

    signer = load_signer(run / "keys" / "creditaudit.key")
    for workers in (0, -2):
        with pytest.raises(InputError, match=r"`workers` must be a positive number of worker processes; got"):
            run_replay(run / "protocol.yaml", signer, executor="local", workers=workers)


def test_a_finished_verified_replay_is_skipped_without_writing_anything(tmp_path, reference_run, capsys):
    """Re-running replay on a finished run (as every ``demo`` resume does) writes nothing: no new link
    record, no byte changed; a run whose outputs no longer match their link record is replayed again."""
    import shutil

    from creditaudit.cli import main
    from creditaudit.protocol.signing import load_signer

    run = tmp_path / "run"
    shutil.copytree(reference_run[0], run)
    signer = load_signer(run / "keys" / "creditaudit.key")
    before = _snapshot(run)
    summary = run_replay(run / "protocol.yaml", signer, executor="inline")
    assert summary.skipped and summary.n_rollouts == reference_run[1].n_rollouts
    assert _snapshot(run) == before
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--run", str(run), "--quiet"])
    assert exc.value.code == 0 and "replay already finished" in capsys.readouterr().out
    assert _snapshot(run) == before
    # an output changed after the attestation: the stage is not current, so it runs (and attests) again
    (run / "replay" / "summary.json").write_text("{}\n")
    again = run_replay(run / "protocol.yaml", signer, executor="inline")
    assert not again.skipped
    assert (run / "replay" / "summary.json").read_bytes() == before["replay/summary.json"]
    assert len(list((run / "links").glob("*-replay.link.json"))) == 2
