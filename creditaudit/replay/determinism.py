"""Determinism is verified, not assumed (docs/design.md §2).

Two checks, both failing loudly with the first step where runs diverge:

- :func:`check_determinism` plays one command sequence on several independent environment
  instances (fresh objects from a factory) and compares, step by step, the hash of what the agent
  sees (text, admissible commands, done, won) and the state signature.
- :func:`check_restore` plays the sequence once while taking a snapshot before every step, then
  restores each snapshot and replays the rest of the sequence, comparing with the recorded run --
  what executed replay relies on.

A trace is a list of :class:`TraceStep`; its hash (:func:`trace_hash`) is what a protocol can
record before collection ("one trajectory's hash on several independent instances").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from creditaudit.errors import CheckFailed
from creditaudit.protocol.canonical import canonical_hash
from creditaudit.replay.envs.base import Environment, Task

__all__ = [
    "TraceStep",
    "DeterminismReport",
    "NondeterminismError",
    "observation_hash",
    "play",
    "trace_hash",
    "random_actions",
    "check_determinism",
    "check_restore",
]


@dataclass(frozen=True)
class TraceStep:
    """One step of a played sequence: index (0 = after reset), command, hashes, flags."""

    index: int
    action: str | None
    observation: str
    signature: str
    done: bool
    won: bool


@dataclass(frozen=True)
class DeterminismReport:
    """A passed check: what was compared and the trace hash all runs shared."""

    env: str
    task_id: str
    n_runs: int
    n_steps: int
    trace_hash: str


class NondeterminismError(CheckFailed):
    """Two runs of the same command sequence diverged; the message names the step."""


def observation_hash(text: str, admissible: Sequence[str], done: bool, won: bool) -> str:
    """SHA-256 (canonical JSON) of what the agent sees at a step."""
    return canonical_hash({"text": text, "admissible": list(admissible), "done": bool(done), "won": bool(won)})


def play(env: Environment, task: Task, actions: Sequence[str]) -> list[TraceStep]:
    """Reset ``env`` on ``task`` and play ``actions`` (stopping early when the episode ends)."""
    obs = env.reset(task)
    trace = [TraceStep(0, None, observation_hash(obs.text, obs.admissible, False, False), env.state_signature(),
                       False, False)]
    for i, action in enumerate(actions, start=1):
        result = env.step(action)
        trace.append(TraceStep(i, action, observation_hash(result.text, result.admissible, result.done, result.won),
                               env.state_signature(), result.done, result.won))
        if result.done:
            break
    return trace


def trace_hash(trace: Sequence[TraceStep]) -> str:
    """SHA-256 of a whole trace (actions, observation hashes, signatures, flags)."""
    return canonical_hash([[s.index, s.action, s.observation, s.signature, s.done, s.won] for s in trace])


def random_actions(env: Environment, task: Task, n: int, *, rng: np.random.Generator,
                   p_inadmissible: float = 0.0) -> list[str]:
    """A command sequence of up to ``n`` steps: uniform admissible commands, played on ``env``.

    With ``p_inadmissible`` > 0 some steps send a command the engine does not know, to exercise
    the "Nothing happens." path.
    """
    env.reset(task)
    actions: list[str] = []
    admissible = env.admissible_actions()
    for _ in range(n):
        if p_inadmissible > 0 and rng.random() < p_inadmissible:
            action = "dance with the teapot"
        else:
            action = admissible[int(rng.integers(len(admissible)))]
        actions.append(action)
        result = env.step(action)
        admissible = result.admissible
        if result.done:
            break
    return actions


def _compare(reference: Sequence[TraceStep], other: Sequence[TraceStep], *, what: str, env_name: str,
             task_id: str, compare_signatures: bool) -> None:
    for a, b in zip(reference, other):
        fields = ["observation", "done", "won"] + (["signature"] if compare_signatures else [])
        for name in fields:
            va, vb = getattr(a, name), getattr(b, name)
            if va != vb:
                where = "after reset" if a.index == 0 else f"at step {a.index} (action {a.action!r})"
                raise NondeterminismError(
                    f"environment {env_name!r} is not deterministic on task {task_id[:12]}…: {what} diverges "
                    f"{where}: {name} {str(va)[:16]}… != {str(vb)[:16]}…"
                )
    if len(reference) != len(other):
        raise NondeterminismError(
            f"environment {env_name!r} is not deterministic on task {task_id[:12]}…: {what} ended after "
            f"{len(other) - 1} steps, the reference after {len(reference) - 1}"
        )


def check_determinism(make_env: Callable[[], Environment], task: Task, actions: Sequence[str], *,
                      n_instances: int = 3, repeats: int = 1, compare_signatures: bool = True) -> DeterminismReport:
    """Play ``actions`` on ``n_instances`` fresh environments (``repeats`` episodes each) and compare.

    Parameters
    ----------
    make_env : callable
        Returns a new, independent environment instance.
    task : Task
        The task to reset on.
    actions : sequence of str
        Commands to play (e.g. from :func:`random_actions`).
    n_instances : int, default 3
        Independent instances (>= 2).
    repeats : int, default 1
        Episodes per instance; repeats > 1 also compare a second ``reset`` of the same instance
        with its first (for ALFWorld, the fast reset against the engine's own).
    compare_signatures : bool, default True
        Also require equal state signatures.

    Returns
    -------
    DeterminismReport

    Raises
    ------
    NondeterminismError
        Naming the run and the first step where it diverges from the first run.
    """
    if n_instances < 2:
        raise ValueError("`n_instances` must be >= 2 to compare independent instances")
    if repeats < 1:
        raise ValueError("`repeats` must be >= 1")
    reference: list[TraceStep] | None = None
    env_name = "?"
    for i in range(n_instances):
        env = make_env()
        env_name = getattr(env, "name", type(env).__name__)
        try:
            for r in range(repeats):
                trace = play(env, task, actions)
                if reference is None:
                    reference = trace
                else:
                    _compare(reference, trace, what=f"instance {i} episode {r}", env_name=env_name,
                             task_id=task.task_id, compare_signatures=compare_signatures)
        finally:
            env.close()
    assert reference is not None
    return DeterminismReport(env=env_name, task_id=task.task_id, n_runs=n_instances * repeats,
                             n_steps=len(reference) - 1, trace_hash=trace_hash(reference))


def check_restore(env: Environment, task: Task, actions: Sequence[str], *,
                  starts: Sequence[int] | None = None) -> DeterminismReport:
    """Check that restoring a snapshot and replaying gives the recorded run.

    Plays ``actions`` from reset with a snapshot before every step, then for every start ``t``
    (all by default, latest first, so restores jump backwards and forwards) restores the
    snapshot before step ``t + 1`` and replays ``actions[t:]``.

    Raises
    ------
    NondeterminismError
        Naming the start and the step where the replay diverges.
    """
    obs = env.reset(task)
    recorded = [TraceStep(0, None, observation_hash(obs.text, obs.admissible, False, False),
                          env.state_signature(), False, False)]
    snapshots = [env.snapshot()]
    played = []
    for i, action in enumerate(actions, start=1):
        result = env.step(action)
        played.append(action)
        recorded.append(TraceStep(i, action, observation_hash(result.text, result.admissible, result.done,
                                                              result.won), env.state_signature(), result.done,
                                  result.won))
        if result.done:
            break
        snapshots.append(env.snapshot())
    env_name = getattr(env, "name", type(env).__name__)
    order = list(starts) if starts is not None else list(range(len(snapshots)))[::-1]
    for t in order:
        env.restore(snapshots[t])
        if env.state_signature() != recorded[t].signature:
            raise NondeterminismError(
                f"environment {env_name!r} on task {task.task_id[:12]}…: restoring the snapshot of step {t} "
                "did not give the recorded state signature"
            )
        replay = [recorded[t]]
        for i, action in enumerate(played[t:], start=t + 1):
            result = env.step(action)
            replay.append(TraceStep(i, action, observation_hash(result.text, result.admissible, result.done,
                                                                result.won), env.state_signature(), result.done,
                                    result.won))
            if result.done:
                break
        _compare(recorded[t:], replay, what=f"the replay restored at step {t}", env_name=env_name,
                 task_id=task.task_id, compare_signatures=True)
    return DeterminismReport(env=env_name, task_id=task.task_id, n_runs=1 + len(order), n_steps=len(played),
                             trace_hash=trace_hash(recorded))
