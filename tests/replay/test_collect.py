"""Collection under a frozen protocol, on the planted-effect environment with a tiny real HF model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.protocol.links import verify_links
from creditaudit.protocol.lock import require_frozen
from creditaudit.replay.collect import TRAJECTORIES, collect, read_trajectories
from creditaudit.replay.records import TURN_SCHEMA


@pytest.fixture()
def policy_dir(planted_policy_dir) -> Path:
    return planted_policy_dir


def _planted_run(root: Path, policy_dir: Path, *, group=2) -> tuple[Path, object]:
    from helpers import make_run

    return make_run(root, policy_dir, group=group, collect_now=False)


def test_collect_writes_stamped_turns_and_resumes_byte_identically(tmp_path, policy_dir):
    run, signer = _planted_run(tmp_path, policy_dir)
    summary = collect(run / "protocol.yaml", signer)
    frozen = require_frozen(run / "protocol.yaml")
    table = read_trajectories(frozen)
    assert table.schema == TURN_SCHEMA
    df = table.to_pandas()
    assert set(df.protocol_id) == {frozen.id}
    assert summary.n_trajectories == 4 and df.trajectory_id.nunique() == 4
    assert sorted(df.groupby("task_id").rollout.nunique()) == [2, 2]
    # turns are numbered 0..n-1 within a trajectory, the last is done, outcome is repeated
    for _, traj in df.groupby("trajectory_id"):
        assert list(traj.turn) == list(range(len(traj)))
        assert traj.done.iloc[-1] and not traj.done.iloc[:-1].any()
        assert traj.outcome.nunique() == 1 and len(traj) <= 8
    assert (df.seed >= 0).all() and df.seed.nunique() == len(df)  # one named-stream seed per action
    np.testing.assert_allclose(df.sum_logprob, [sum(x) for x in df.token_logprobs])

    first = sha256_file(run / TRAJECTORIES)
    assert not (run / "collect" / "shards").exists()  # removed once their concatenation was attested
    # a run interrupted after its first task: one shard on disk, no concatenation yet
    _first_shard(run, run / "collect" / "shards" / "0000.parquet")
    (run / TRAJECTORIES).unlink()
    assert collect(run / "protocol.yaml", signer).resumed_shards == 1
    assert sha256_file(run / TRAJECTORIES) == first
    assert not (run / "collect" / "shards").exists()

    pins = {f"policy/{k}": v for k, v in {**frozen.protocol.policy.model_files, **frozen.protocol.policy.tokenizer_files}.items()}
    pins["protocol.yaml"] = sha256_file(run / "protocol.yaml")
    pins["protocol.lock.json"] = sha256_file(run / "protocol.lock.json")
    records = verify_links(run, protocol_id=frozen.id, trusted_key_id=signer.key_id, roots=pins)
    assert [r.stage for r in records] == ["tasks", "collect", "collect"]


def _first_shard(run: Path, target: Path) -> None:
    """Write the shard of the run's first task as collection writes it (its rows of the concatenation)."""
    import pyarrow.compute as pc

    from creditaudit.artifacts import write_parquet_atomic

    table = pq.read_table(run / TRAJECTORIES)
    write_parquet_atomic(table.filter(pc.equal(table.column("task_index"), 0)), target)


def test_collect_is_reproducible_across_runs(tmp_path, policy_dir):
    a, sa = _planted_run(tmp_path / "a", policy_dir)
    b, sb = _planted_run(tmp_path / "b", policy_dir)
    # Two run directories with different signing keys: the key is not part of the protocol, so both
    # share the protocol id, hence the seed streams and every byte of the data.
    collect(a / "protocol.yaml", sa)
    collect(b / "protocol.yaml", sb)
    assert sha256_file(a / TRAJECTORIES) == sha256_file(b / TRAJECTORIES)


def test_collect_refuses_a_policy_whose_weights_changed(tmp_path, policy_dir):
    run, signer = _planted_run(tmp_path, policy_dir)
    with open(run / "policy" / "model.safetensors", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(CheckFailed, match="model.safetensors"):
        collect(run / "protocol.yaml", signer)
    assert not (run / TRAJECTORIES).exists()


def test_collect_refuses_a_protocol_changed_after_freezing(tmp_path, policy_dir):
    run, signer = _planted_run(tmp_path, policy_dir)
    path = run / "protocol.yaml"
    path.write_text(path.read_text().replace("group_size: 2", "group_size: 3"))
    with pytest.raises(CheckFailed, match="collection.group_size: 2 -> 3"):
        collect(path, signer)


def test_collect_refuses_shards_of_another_protocol(tmp_path, policy_dir):
    run, signer = _planted_run(tmp_path / "x", policy_dir)
    collect(run / "protocol.yaml", signer)
    other, other_signer = _planted_run(tmp_path / "y", policy_dir, group=1)
    _first_shard(run, other / "collect" / "shards" / "0000.parquet")
    with pytest.raises(InputError, match="shard stamped with protocol .* a run directory never mixes protocols"):
        collect(other / "protocol.yaml", other_signer)


def test_a_policy_that_does_not_list_admissible_commands_sees_prompts_without_them(tmp_path, policy_dir):
    import yaml

    from helpers import make_run

    from creditaudit.protocol.io import default_template_text

    policy = yaml.safe_load(default_template_text())["policy"]
    policy.update(source="local", history_length=0, max_action_tokens=6, list_admissible=False)
    listed, _ = make_run(tmp_path / "listed", policy_dir)
    unlisted, _ = make_run(tmp_path / "unlisted", policy_dir, sections={"policy": policy})
    a = read_trajectories(require_frozen(listed / "protocol.yaml")).to_pydict()
    b = read_trajectories(require_frozen(unlisted / "protocol.yaml")).to_pydict()
    assert all("admissible actions: " in p for p in a["prompt"])
    assert not any("admissible actions" in p for p in b["prompt"])
    assert set(a["prompt_template_sha256"]).isdisjoint(set(b["prompt_template_sha256"]))
    assert all(b["action_admissible"])  # the policy still draws among the admissible commands
    assert require_frozen(unlisted / "protocol.yaml").protocol.policy.list_admissible is False
    assert require_frozen(listed / "protocol.yaml").protocol.policy.list_admissible is True
