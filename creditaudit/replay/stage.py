"""``creditaudit replay``: run the replay work units, resume, concatenate, summarise, attest.

Work units (one per task: its collected trajectories, replayed together) run on local worker
processes (``executor="local"``, the default), in this process (``"inline"``), or on a Ray cluster
(``"ray"``); every executor runs the same unit function, so results are identical
(:mod:`creditaudit.replay.executors`). Units write each trajectory's shards atomically
(``replay/shards/``); a rerun skips units whose trajectories are all finished, so an
interrupted replay (even ``kill -9``) resumes without losing or duplicating a rollout and ends with
the same bytes as an uninterrupted run. Once the concatenated tables are attested by the stage's
link record the shards are removed: a finished run holds no file that no link record vouches for.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from creditaudit.artifacts import read_stamped_parquet, write_parquet_atomic
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.protocol.signing import Signer
from creditaudit.replay.collect import check_run_policy, policy_files_in_run, read_trajectories
from creditaudit.replay.engine import UnitResult, read_unit
from creditaudit.replay.executors import EXECUTORS, REPLAY_DIR, execute, unit_name
from creditaudit.replay.records import TRAJECTORIES

__all__ = ["REPLAY_DIR", "TURNS", "ROLLOUTS", "SUMMARY", "ReplaySummary", "run_replay", "read_replay"]

TURNS = "replay/turns.parquet"
ROLLOUTS = "replay/rollouts.parquet"
SUMMARY = "replay/summary.json"


@dataclass(frozen=True)
class ReplaySummary:
    """Counters of a replay (also in ``replay/summary.json`` with the measurability map)."""

    protocol_id: str
    n_trajectories: int
    n_turns: int
    n_rollouts: int
    divergences: int
    restore_failures: int
    engine_steps: int
    cache_hits: int
    resumed_units: int
    skipped: bool = False
    """The stage had finished and verified against its link record: nothing was run or rewritten."""
    executor_report: dict[str, Any] = field(default_factory=dict, compare=False)
    """What the executor reported of this run (Ray: the policy service's requests, forward passes
    and mean rows per forward, the worker nodes); timing-dependent, so never written to
    ``replay/summary.json``."""

    @property
    def cache_hit_rate(self) -> float:
        total = self.engine_steps + self.cache_hits
        return self.cache_hits / total if total else 0.0


def _trajectory_frames(frozen: FrozenProtocol) -> list[Any]:
    table = read_trajectories(frozen)
    columns = ["trajectory_id", "task_id", "turn", "action", "state_signature", "observation", "mean_logprob"]
    df = table.select(columns).to_pandas()
    frames = []
    for _, frame in df.groupby("trajectory_id", sort=False):
        frames.append(frame.sort_values("turn").reset_index(drop=True))
    return frames


def run_replay(
    protocol_path: str | Path,
    signer: Signer,
    *,
    executor: str = "local",
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ReplaySummary:
    """Replay every collected trajectory under the frozen protocol (resumable).

    A replay that has finished, and whose inputs and outputs still match its link record (signed
    by ``signer`` for this protocol), is not run again: nothing is written and the summary is read
    back (``skipped``).

    Parameters
    ----------
    protocol_path : path
        The frozen protocol of the run.
    signer : Signer
        The run's key (signs the link record).
    executor : {"local", "inline", "ray"}
        Where the work units run.
    workers : int, optional
        Worker processes / Ray actors, at least 1 (default: up to 2).
    progress : callable, optional
        ``progress(phase, done, total)`` as units finish.
    """
    if executor not in EXECUTORS:
        raise InputError(f"`executor` must be one of {set(EXECUTORS)}; got {executor!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InputError(f"`workers` must be a positive number of worker processes; got {workers!r} "
                         "(leave it unset for up to 2)")
    frozen = require_frozen(protocol_path)
    check_run_policy(frozen)  # refuse a policy whose files differ from the pins before any work
    finished_summary = _completed(frozen, signer)
    if finished_summary is not None:
        return finished_summary
    frames = _trajectory_frames(frozen)
    shard_dir = frozen.run_dir / REPLAY_DIR / "shards"
    names = [unit_name(str(f["trajectory_id"].iloc[0])) for f in frames]
    finished: set[str] = set()
    for name in names:
        turns_path = shard_dir / f"{name}.turns.parquet"
        if turns_path.exists():
            if read_unit(shard_dir, name) is None:
                raise InputError(
                    f"{turns_path}: a replay shard exists but cannot be read (corrupt); delete "
                    f"{name}.turns.parquet and {name}.rollouts.parquet to recompute that trajectory"
                )
            finished.add(name)
    resumed = len(finished)
    # the work units: each task's trajectories, in collection order; a group with any trajectory
    # unfinished is replayed whole (its finished shards are kept), so its numbers are the same
    groups: dict[str, list[tuple[Any, str]]] = {}
    for frame, name in zip(frames, names):
        groups.setdefault(str(frame["task_id"].iloc[0]), []).append((frame, name))
    pending = [[f for f, _ in group] for group in groups.values() if any(n not in finished for _, n in group)]
    # longest first, so the last groups to finish are short ones (scheduling only: no number depends on it)
    pending.sort(key=lambda group: -sum(len(f) for f in group))
    count = {"done": resumed}
    if progress:
        progress("replay", resumed, len(frames))

    def done(name: str) -> None:
        if name in finished:  # a finished trajectory of a group replayed again
            return
        finished.add(name)
        count["done"] += 1
        if progress:
            progress("replay", count["done"], len(frames))

    report = execute(Path(frozen.path), pending, executor=executor,
                     workers=workers or max(1, min(2, os.cpu_count() or 1)), done=done)

    results: list[UnitResult] = []
    for name in names:
        unit = read_unit(shard_dir, name)
        if unit is None:
            raise InputError(f"{shard_dir / name}.*.parquet: replay shard missing after the run; rerun `creditaudit replay`")
        results.append(unit)
    turns = pa.concat_tables([u.turns for u in results]).combine_chunks()
    rollouts = pa.concat_tables([u.rollouts for u in results]).combine_chunks()
    totals = {k: sum(u.counters.get(k, 0) for u in results)
              for k in ("engine_steps", "cache_hits", "divergences", "restore_failures", "rollouts")}
    summary = ReplaySummary(
        protocol_id=frozen.id,
        n_trajectories=len(results),
        n_turns=turns.num_rows,
        n_rollouts=rollouts.num_rows,
        divergences=totals["divergences"],
        restore_failures=totals["restore_failures"],
        engine_steps=totals["engine_steps"],
        cache_hits=totals["cache_hits"],
        resumed_units=resumed,
        executor_report=report,
    )
    from creditaudit.audit.measurability import measurability_map

    mmap = measurability_map(turns, protocol_id=frozen.id, protocol=frozen.protocol)
    document = {
        "protocol_id": frozen.id,
        "n_trajectories": summary.n_trajectories,
        "n_turns": summary.n_turns,
        "n_rollouts": summary.n_rollouts,
        "prefix_divergences": summary.divergences,
        "restore_failures": summary.restore_failures,
        "engine_steps": summary.engine_steps,
        "cache_hits": summary.cache_hits,
        "cache_hit_rate": summary.cache_hit_rate,
        "engine_steps_per_rollout": summary.engine_steps / summary.n_rollouts if summary.n_rollouts else 0.0,
        "measurability": mmap.to_dict(),
    }
    run_dir = frozen.run_dir
    with StageLink(
        run_dir, "replay", frozen.id, signer,
        command=["creditaudit", "replay"],
        parameters={"n_fact": frozen.protocol.replay.n_fact, "n_alternatives": frozen.protocol.replay.n_alternatives,
                    "n_alt": frozen.protocol.replay.n_alt},
        inputs=[frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json"), run_dir / TRAJECTORIES,
                run_dir / "tasks.json", *policy_files_in_run(frozen)],
    ) as link:
        for table, rel in ((turns, TURNS), (rollouts, ROLLOUTS)):
            write_parquet_atomic(table, run_dir / rel)
            link.add_output(run_dir / rel)
        (run_dir / SUMMARY).write_bytes(canonical_bytes(document) + b"\n")
        link.add_output(run_dir / SUMMARY)
    shutil.rmtree(shard_dir, ignore_errors=True)  # the attested tables hold every row
    return summary


def _completed(frozen: FrozenProtocol, signer: Signer) -> ReplaySummary | None:
    """The summary of a finished replay whose inputs and outputs still match its link record."""
    from creditaudit.protocol.links import stage_is_current

    if not stage_is_current(frozen.run_dir, "replay", frozen.id, signer.key_id):
        return None
    shutil.rmtree(frozen.run_dir / REPLAY_DIR / "shards", ignore_errors=True)  # left by a stop after the attestation
    try:
        document = json.loads((frozen.run_dir / SUMMARY).read_text("utf-8"))
    except (OSError, json.JSONDecodeError):  # pragma: no cover - the link record vouches for its bytes
        return None
    return ReplaySummary(
        protocol_id=frozen.id,
        n_trajectories=document["n_trajectories"],
        n_turns=document["n_turns"],
        n_rollouts=document["n_rollouts"],
        divergences=document["prefix_divergences"],
        restore_failures=document["restore_failures"],
        engine_steps=document["engine_steps"],
        cache_hits=document["cache_hits"],
        resumed_units=document["n_trajectories"],
        skipped=True,
    )


def read_replay(frozen: FrozenProtocol) -> tuple[pa.Table, dict[str, Any]]:
    """The replay turn table and summary of this protocol (refusing another protocol's)."""
    turns = read_stamped_parquet(frozen.run_dir / TURNS, frozen.id, what="replay results",
                                 command="creditaudit replay")
    path = frozen.run_dir / SUMMARY
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable replay summary ({exc}); rerun `creditaudit replay`") from None
    if summary.get("protocol_id") != frozen.id:
        raise InputError(f"{path}: stamped with another protocol id; replay results never mix across protocols")
    return turns, summary
