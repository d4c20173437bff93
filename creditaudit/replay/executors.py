"""Where replay work units run: local worker processes, this process, or a Ray cluster.

A work unit is one collected trajectory (:func:`~creditaudit.replay.engine.replay_trajectory`).
Every executor runs the same unit function, so results are identical: each worker loads the
policy and makes one environment once (:func:`worker_init`), with one torch thread so numerics do
not depend on the executor, and writes each unit's shards atomically (:func:`worker_run`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.replay.collect import load_run_policy
from creditaudit.replay.compute import stored_numerics
from creditaudit.replay.engine import ReplaySettings, UnitResult, replay_trajectory, write_unit
from creditaudit.replay.tasks import make_environment, read_tasks, task_for

__all__ = ["EXECUTORS", "REPLAY_DIR", "unit_name", "worker_init", "replay_unit", "worker_run", "execute"]

REPLAY_DIR = "replay"
EXECUTORS = ("local", "inline", "ray")


def unit_name(trajectory_id: str) -> str:
    """The file-name stem of a trajectory's replay shards."""
    return trajectory_id.replace("/", "_")


_WORKER: dict[str, Any] = {}


def worker_init(protocol_path: str) -> None:
    """Load this worker's frozen protocol, policy, environment, task list and replay settings."""
    frozen = require_frozen(protocol_path)
    _WORKER.clear()
    _WORKER.update(
        frozen=frozen,
        policy=load_run_policy(frozen),
        env=make_environment(frozen.protocol),
        tasks={t.task_id: t for t in read_tasks(frozen)},
        settings=ReplaySettings.from_protocol(frozen.protocol),
    )


def replay_unit(trajectory: Any) -> UnitResult:
    """Replay one trajectory in this worker (after :func:`worker_init`), writing nothing."""
    frozen: FrozenProtocol = _WORKER["frozen"]
    entry = _WORKER["tasks"][str(trajectory["task_id"].iloc[0])]
    with stored_numerics():
        return replay_trajectory(
            _WORKER["env"],
            _WORKER["policy"],
            task=task_for(entry, frozen.protocol, frozen.run_dir),
            trajectory=trajectory,
            protocol_id=frozen.id,
            settings=_WORKER["settings"],
        )


def worker_run(trajectory: Any) -> tuple[str, dict[str, int]]:
    """Replay one trajectory in this worker and write its shards; returns (name, counters)."""
    result = replay_unit(trajectory)
    frozen: FrozenProtocol = _WORKER["frozen"]
    name = unit_name(str(trajectory["trajectory_id"].iloc[0]))
    write_unit(result, frozen.run_dir / REPLAY_DIR / "shards", name)
    return name, result.counters


class _RayWorker:  # pragma: no cover - exercised through ray in tests when ray is installed
    def __init__(self, protocol_path: str) -> None:
        worker_init(protocol_path)

    def run(self, trajectory: Any) -> tuple[str, dict[str, int]]:
        return worker_run(trajectory)


def execute(protocol_path: Path, pending: list[Any], *, executor: str, workers: int,
            done: Callable[[str], None]) -> None:
    """Run the work units ``pending`` (trajectory frames) on ``executor`` with ``workers`` workers,
    calling ``done(name)`` as each unit's shards are written."""
    if not pending:
        return
    if executor == "inline":
        worker_init(str(protocol_path))
        try:
            for trajectory in pending:
                done(worker_run(trajectory)[0])
        finally:
            _WORKER["env"].close()
            _WORKER.clear()
        return
    if executor == "local":
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                 initializer=worker_init, initargs=(str(protocol_path),)) as pool:
            futures = [pool.submit(worker_run, trajectory) for trajectory in pending]
            for future in as_completed(futures):
                done(future.result()[0])
        return
    try:
        import ray
    except ImportError:
        raise InputError("`--executor ray` needs Ray: pip install 'creditaudit[ray]'") from None
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):  # a running cluster: connect to it
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:  # a local Ray instance on this machine
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    actor_cls = ray.remote(num_cpus=1)(_RayWorker)
    actors = [actor_cls.remote(str(protocol_path)) for _ in range(workers)]
    refs = [actors[i % workers].run.remote(t) for i, t in enumerate(pending)]
    remaining = list(refs)
    while remaining:
        ready, remaining = ray.wait(remaining, num_returns=1)
        done(ray.get(ready[0])[0])
