"""Where replay work units run: local worker processes, this process, or a Ray cluster.

A work unit is one collected trajectory (:func:`~creditaudit.replay.engine.replay_trajectory`).
Every executor runs the same unit function, so results are identical: each worker loads the
policy and makes one environment once (:func:`worker_init`), with one torch thread so numerics do
not depend on the executor, and writes each unit's shards atomically (:func:`worker_run`).

Local workers die with the process that started them (:func:`die_with_parent`): killing only the
main ``replay`` process, even with ``kill -9``, leaves no worker holding a loaded policy behind.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.replay.collect import load_run_policy
from creditaudit.replay.compute import stored_numerics
from creditaudit.replay.engine import ReplaySettings, UnitResult, replay_trajectory, write_unit
from creditaudit.replay.tasks import make_environment, read_tasks, task_for

__all__ = ["EXECUTORS", "REPLAY_DIR", "unit_name", "die_with_parent", "worker_init", "local_worker_init",
           "replay_unit", "worker_run", "execute"]

REPLAY_DIR = "replay"
EXECUTORS = ("local", "inline", "ray")


def unit_name(trajectory_id: str) -> str:
    """The file-name stem of a trajectory's replay shards."""
    return trajectory_id.replace("/", "_")


_WORKER: dict[str, Any] = {}

#: How often a worker's watchdog looks for its parent (seconds).
PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit as soon as the process ``parent_pid`` that started it is gone.

    Two mechanisms, because a ``ProcessPoolExecutor`` worker blocked on its call queue never notices
    its parent's death by itself (it holds a write end of the queue's pipe, so no end of file comes):

    * on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this process when its parent
      dies, even while it is busy in native code;
    * everywhere, a daemon thread that polls ``os.getppid()`` every :data:`PARENT_POLL_S` seconds
      and exits the process once it is no longer ``parent_pid`` (the parent died and this process
      was re-parented).

    A parent that died before this call (while the worker was still starting) is caught by the
    first check.
    """
    import signal

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the watchdog suffices
            pass
    if os.getppid() != parent_pid:
        os._exit(70)

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(70)
            threading.Event().wait(PARENT_POLL_S)

    threading.Thread(target=watch, name="creditaudit-parent-watchdog", daemon=True).start()


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


def local_worker_init(protocol_path: str, parent_pid: int) -> None:
    """:func:`worker_init` of a local worker process, which dies with its parent ``parent_pid``."""
    die_with_parent(parent_pid)
    worker_init(protocol_path)


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
                                 initializer=local_worker_init, initargs=(str(protocol_path), os.getpid())) as pool:
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
