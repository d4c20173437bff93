"""Where replay work units run: local worker processes, this process, or a Ray cluster.

A work unit is one task's group of collected trajectories (:func:`~creditaudit.replay.engine.replay_group`).
Every executor runs the same unit function, so results are identical: each worker loads the
policy and makes one environment once (:func:`worker_init`), with one torch thread so numerics do
not depend on the executor, and writes each unit's shards atomically (:func:`worker_run`).

Local workers die with the process that started them (:func:`die_with_parent`): killing only the
main ``replay`` process, even with ``kill -9``, leaves no worker holding a loaded policy behind.

On Ray, workers hold environments only: the policy is one service they all send requests to
(:mod:`creditaudit.replay.policy_service`; an in-process model in one actor with the protocol's
``compute`` resources, or the ``openai`` backend's server). ``RAY_ADDRESS`` names an existing
cluster to join; unset, a Ray instance is started on this machine for the run.
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
from creditaudit.replay.engine import ReplaySettings, UnitResult, replay_group, write_unit
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


def worker_init(protocol_path: str, policy: Any = None) -> None:
    """Load this worker's frozen protocol, policy (unless given), environment, task list and
    replay settings."""
    frozen = require_frozen(protocol_path)
    _WORKER.clear()
    _WORKER.update(
        frozen=frozen,
        policy=load_run_policy(frozen) if policy is None else policy,
        env=make_environment(frozen.protocol),
        tasks={t.task_id: t for t in read_tasks(frozen)},
        settings=ReplaySettings.from_protocol(frozen.protocol),
    )


def local_worker_init(protocol_path: str, parent_pid: int) -> None:
    """:func:`worker_init` of a local worker process, which dies with its parent ``parent_pid``."""
    die_with_parent(parent_pid)
    worker_init(protocol_path)


def replay_unit(group: list[Any]) -> list[UnitResult]:
    """Replay one task's group of trajectories in this worker (after :func:`worker_init`), writing nothing."""
    frozen: FrozenProtocol = _WORKER["frozen"]
    entry = _WORKER["tasks"][str(group[0]["task_id"].iloc[0])]
    with stored_numerics():
        return replay_group(
            _WORKER["env"],
            _WORKER["policy"],
            task=task_for(entry, frozen.protocol, frozen.run_dir),
            trajectories=group,
            protocol_id=frozen.id,
            settings=_WORKER["settings"],
        )


def worker_run(group: list[Any]) -> list[str]:
    """Replay one task's group of trajectories in this worker and write each one's shards (a
    shard already present is left as it is: it holds the same bytes); returns their names."""
    results = replay_unit(group)
    frozen: FrozenProtocol = _WORKER["frozen"]
    shard_dir = frozen.run_dir / REPLAY_DIR / "shards"
    names = []
    for trajectory, result in zip(group, results):
        name = unit_name(str(trajectory["trajectory_id"].iloc[0]))
        if not (shard_dir / f"{name}.turns.parquet").exists():
            write_unit(result, shard_dir, name)
        names.append(name)
    return names


class _RayWorker:  # pragma: no cover - runs in Ray worker processes (tests/replay/test_ray_topology.py)
    """An environment worker: the environment here, the policy at ``service`` (None: its own
    client of the ``openai`` backend's server)."""

    def __init__(self, protocol_path: str, service: Any = None, session: str = "") -> None:
        policy = None
        if service is not None:
            from creditaudit.replay.policy_service import RemotePolicy

            policy = RemotePolicy(service, session)
        worker_init(protocol_path, policy)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, group: list[Any]) -> list[str]:
        return worker_run(group)


#: Seconds to wait for a TCP answer at ``RAY_ADDRESS`` before refusing it.
RAY_CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) ``RAY_ADDRESS`` where nothing answers.

    ``ray.init`` retries an unreachable cluster for minutes before it fails; one TCP connection
    attempt tells the user at once. ``auto`` and other forms are left to Ray.
    """
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise InputError(
            f"RAY_ADDRESS={address}: nothing answers there ({exc.strerror or exc}); start a cluster (`ray start "
            "--head`) and set RAY_ADDRESS to the address it prints, or unset RAY_ADDRESS to run a Ray instance on "
            "this machine"
        ) from None


def _ray_init(workers: int, compute: Any) -> Any:
    """Join ``RAY_ADDRESS``'s cluster, or start a Ray instance here sized for the run."""
    try:
        import ray
    except ImportError:
        raise InputError("`--executor ray` needs Ray: pip install 'creditaudit[ray]'") from None
    if ray.is_initialized():
        return ray
    address = os.environ.get("RAY_ADDRESS")
    if address:  # a running cluster: connect to it
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
            raise InputError(
                f"RAY_ADDRESS={address}: no Ray cluster could be joined there ({type(exc).__name__}: {detail}); "
                "start one (`ray start --head`) and set RAY_ADDRESS to the address it prints, or unset "
                "RAY_ADDRESS to run a Ray instance on this machine"
            ) from None
    else:  # a Ray instance on this machine, with room for the workers and the service
        import math

        cpus = math.ceil(workers * compute.worker_cpus + compute.policy_cpus)
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    return ray


def _ray_check_resources(ray: Any, *, compute: Any, service: bool) -> None:
    """Refuse, before any actor waits for ever, a cluster that cannot hold the run's actors."""
    total = ray.cluster_resources()
    if service and compute.policy_gpus > total.get("GPU", 0.0):
        raise InputError(f"compute.policy_gpus is {compute.policy_gpus:g} but the Ray cluster has "
                         f"{total.get('GPU', 0.0):g} GPUs; lower compute.policy_gpus or join a cluster with GPUs "
                         "(RAY_ADDRESS)")
    largest = max(compute.worker_cpus, compute.policy_cpus if service else 0.0)
    if largest > total.get("CPU", 0.0):
        raise InputError(f"the Ray cluster has {total.get('CPU', 0.0):g} CPUs but one actor needs {largest:g} "
                         "(compute.worker_cpus, compute.policy_cpus); lower them or add nodes")


def _ray_execute(protocol_path: Path, pending: list[Any], *, workers: int,
                 done: Callable[[str], None]) -> dict[str, Any]:
    """Environment-worker actors and one policy service (:mod:`creditaudit.replay.policy_service`)."""
    frozen = require_frozen(protocol_path)
    compute = frozen.protocol.compute
    service_needed = frozen.protocol.policy.source != "openai"
    ray = _ray_init(workers, compute)
    _ray_check_resources(ray, compute=compute, service=service_needed)
    from ray.exceptions import RayTaskError

    report: dict[str, Any] = {"policy_service": "in-process actor" if service_needed else "openai server",
                              "merge_requests": bool(compute.merge_requests and service_needed)}
    service = None
    try:
        if service_needed:
            from creditaudit.replay.policy_service import PolicyService

            service = ray.remote(PolicyService).options(
                num_cpus=compute.policy_cpus, num_gpus=compute.policy_gpus, max_concurrency=workers + 2,
            ).remote(str(protocol_path), compute.merge_requests)
        actor_cls = ray.remote(_RayWorker).options(num_cpus=compute.worker_cpus)
        actors = [actor_cls.remote(str(protocol_path), service, f"worker-{i}") for i in range(workers)]
        report["worker_nodes"] = len(set(ray.get([a.node.remote() for a in actors])))
        refs = [actors[i % workers].run.remote(group) for i, group in enumerate(pending)]
        remaining = list(refs)
        while remaining:
            ready, remaining = ray.wait(remaining, num_returns=1)
            for name in ray.get(ready[0]):
                done(name)
        if service is not None:
            report.update(ray.get(service.service_stats.remote()))
    except RayTaskError as exc:  # a worker's or the service's refusal: the user's message, not Ray's trace
        cause = getattr(exc, "cause", None)
        if isinstance(cause, InputError):
            raise cause from None
        raise
    finally:
        for actor in ([service] if service is not None else []):
            ray.kill(actor)
    return report


def execute(protocol_path: Path, pending: list[Any], *, executor: str, workers: int,
            done: Callable[[str], None]) -> dict[str, Any]:
    """Run the work units ``pending`` (each a task's group of trajectory frames) on ``executor``
    with ``workers`` workers, calling ``done(name)`` for each trajectory as its unit's shards are
    written.

    Returns what the executor reports of itself (Ray: the policy service's counters -- requests,
    forward passes, mean rows per forward -- and the number of nodes the workers ran on); these
    depend on timing and placement and are never written into the run's artifacts."""
    if not pending:
        return {}
    if executor == "inline":
        worker_init(str(protocol_path))
        try:
            for group in pending:
                for name in worker_run(group):
                    done(name)
        finally:
            _WORKER["env"].close()
            _WORKER.clear()
        return {}
    if executor == "local":
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                 initializer=local_worker_init, initargs=(str(protocol_path), os.getpid())) as pool:
            futures = [pool.submit(worker_run, group) for group in pending]
            for future in as_completed(futures):
                for name in future.result():
                    done(name)
        return {}
    return _ray_execute(protocol_path, pending, workers=workers, done=done)
