"""Prefix replay: any deterministic ``reset(task)`` / ``step(action)`` environment as a full replay
environment.

Executed replay restores the state of a decision point many times. An environment that cannot
snapshot its own state can still be restored when it is deterministic: reset the same task and
replay the action prefix. :class:`PrefixReplayEnv` wraps such an environment:

- snapshot = (task, action prefix, the hash of every observation seen along it);
- restore = reset + replay of the prefix, checking every observation against the recorded hash.
  A mismatch is a *divergence*: it is counted (:attr:`PrefixReplayEnv.divergences`, added to the
  replay's ``divergences`` counter) and the instance's state signature becomes one that matches no
  recorded state, so the replay engine marks the rollout's restore as failed (``restore_ok`` false,
  the ``restore_failures`` count) -- never silently continued from the wrong state;
- state signature = the wrapped environment's own when it has one (it must then cover the step
  count, as the contract of :mod:`~creditaudit.replay.envs.base` says), else the SHA-256 of
  (environment, task, action prefix, horizon) -- sound for a deterministic environment, and the
  transition cache keyed on it keeps working (a state reached by two different prefixes is simply
  cached twice);
- the horizon is enforced here: the step that reaches it ends the episode with outcome 0
  (``truncated``) unless the environment ended it first.

Cost. A restore to a state ``t`` steps into the episode costs one ``reset`` and ``t`` steps, except
when the live instance already stands on that prefix (nothing to do) or on a shorter piece of it
(only the remaining steps are played). Lockstep batching still holds: rollouts advance together
with one batched policy call per round; each engine step of a rollout first restores its prefix.
:attr:`PrefixReplayEnv.counters` reports resets, restores and replayed steps.

Snapshots hold no live engine state, so a snapshot restores in any instance of the same
environment, not only the one that made it.

Examples
--------
>>> from creditaudit.replay.envs.planted import PlantedEnv
>>> import numpy as np
>>> raw = PlantedEnv(kinds="PNA", horizon=6)
>>> env = PrefixReplayEnv(raw, horizon=6, name="planted", native_signature=True)
>>> task = raw.make_tasks(1, rng=np.random.default_rng(0))[0]
>>> obs = env.reset(task)
>>> snap = env.snapshot()
>>> first = env.step(obs.admissible[0])
>>> env.restore(snap); env.state_signature() == snap.signature
True
>>> env.step(obs.admissible[0]) == first
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from creditaudit.protocol.canonical import canonical_hash
from creditaudit.replay.envs.base import EpisodeOver, Observation, SnapshotError, StepResult, Task, signature_hash

__all__ = ["PrefixSnapshot", "PrefixReplayEnv", "seen_hash"]


def seen_hash(text: str, admissible: Sequence[str], done: bool, won: bool) -> str:
    """SHA-256 of what the agent sees at a step (text, admissible commands, done, won)."""
    return canonical_hash({"text": text, "admissible": list(admissible), "done": bool(done), "won": bool(won)})


@dataclass(frozen=True, eq=False)
class PrefixSnapshot:
    """A state as (task, action prefix, observations seen): restorable in any instance."""

    task: Task
    actions: tuple[str, ...]
    seen: tuple[str, ...]
    """:func:`seen_hash` after the reset and after every action (one more than ``actions``)."""
    signature: str
    text: str
    admissible: tuple[str, ...]
    done: bool
    won: bool


class PrefixReplayEnv:
    """A deterministic reset/step environment with snapshots by prefix replay.

    Parameters
    ----------
    env : object
        The wrapped environment: ``reset(task) -> Observation``, ``step(action) -> StepResult``,
        ``close()``; ``state_signature()`` when ``native_signature``.
    horizon : int
        Maximum steps per episode.
    name : str
        The environment's name (in signatures and messages).
    native_signature : bool, default False
        Use ``env.state_signature()`` as the state signature.
    """

    def __init__(self, env: Any, *, horizon: int, name: str, native_signature: bool = False):
        if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
            raise ValueError(f"`horizon` must be a positive integer, got {horizon!r}")
        self.env = env
        self.horizon = horizon
        self.name = name
        self.native_signature = bool(native_signature)
        self.divergences = 0
        self.counters = {"resets": 0, "restores": 0, "replayed_steps": 0, "divergences": 0}
        self._task: Task | None = None
        self._actions: list[str] = []
        self._seen: list[str] = []
        self._text = ""
        self._admissible: tuple[str, ...] = ()
        self._done = False
        self._won = False
        self._diverged: str | None = None

    def __getattr__(self, item: str) -> Any:  # the wrapped environment's extras (make_tasks, goal, ...)
        if item == "env":
            raise AttributeError(item)
        return getattr(self.env, item)

    # ------------------------------------------------------------------ the live episode

    def _reset(self, task: Task) -> Observation:
        obs = self.env.reset(task)
        self.counters["resets"] += 1
        self._task = task
        self._actions, self._diverged = [], None
        self._text, self._admissible = obs.text, tuple(obs.admissible)
        self._done = self._won = False
        self._seen = [seen_hash(obs.text, obs.admissible, False, False)]
        return obs

    def _step(self, action: str) -> StepResult:
        result = self.env.step(action)
        self._actions.append(action)
        if not result.done and len(self._actions) >= self.horizon:
            result = StepResult(text=result.text, admissible=tuple(result.admissible), done=True, won=False,
                                truncated=True)
        self._text, self._admissible = result.text, tuple(result.admissible)
        self._done, self._won = bool(result.done), bool(result.done and result.won)
        self._seen.append(seen_hash(result.text, result.admissible, result.done, result.won))
        return result

    def _check_started(self) -> None:
        if self._task is None:
            raise RuntimeError("call reset(task) before using the environment")

    # ------------------------------------------------------------------ contract

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task``."""
        if not isinstance(task, Task):
            raise TypeError(f"reset() takes a Task, got {type(task).__name__}")
        return self._reset(task)

    def step(self, action: str) -> StepResult:
        """Execute one command (the horizon is enforced here)."""
        self._check_started()
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._done:
            raise EpisodeOver("the episode is over; call reset() or restore() before step()")
        return self._step(action)

    def admissible_actions(self) -> tuple[str, ...]:
        """The admissible commands of the current state (as the environment last listed them)."""
        self._check_started()
        return self._admissible

    def state_signature(self) -> str:
        """The wrapped environment's signature, or SHA-256 of (environment, task, prefix, horizon).

        After a divergent restore: a signature no recorded state has (it names the divergence).
        """
        self._check_started()
        if self._diverged is not None:
            return signature_hash({"env": self.name, "diverged": self._diverged, "task": self._task.task_id,
                                   "actions": list(self._actions)})
        if self.native_signature:
            return self.env.state_signature()
        return signature_hash({"env": self.name, "task": self._task.task_id, "actions": list(self._actions),
                               "horizon": self.horizon})

    def snapshot(self) -> PrefixSnapshot:
        """The current state as (task, prefix, observations seen)."""
        self._check_started()
        if self._diverged is not None:
            raise SnapshotError(f"environment {self.name!r}: no snapshot of a diverged state ({self._diverged})")
        return PrefixSnapshot(task=self._task, actions=tuple(self._actions), seen=tuple(self._seen),
                              signature=self.state_signature(), text=self._text, admissible=self._admissible,
                              done=self._done, won=self._won)

    def restore(self, snapshot: PrefixSnapshot) -> None:
        """Reset and replay the snapshot's prefix (only its missing tail when the live episode
        already stands on a piece of it), checking every observation; a mismatch is counted and
        leaves a signature that matches no recorded state."""
        if not isinstance(snapshot, PrefixSnapshot):
            raise SnapshotError(f"not a PrefixSnapshot: {type(snapshot).__name__}")
        self.counters["restores"] += 1
        target = snapshot.actions
        live = self._task is not None and self._diverged is None and self._task.task_id == snapshot.task.task_id
        n = len(self._actions)
        if live and n <= len(target) and tuple(self._actions) == target[:n] and (n == len(target) or not self._done):
            start = n  # already on the prefix: play only what is missing
        else:
            self._reset(snapshot.task)
            start = 0
            if self._seen[0] != snapshot.seen[0]:
                self._diverge(snapshot, 0)
                return
        for i in range(start, len(target)):
            if self._done:
                self._diverge(snapshot, i + 1)
                return
            self._step(target[i])
            self.counters["replayed_steps"] += 1
            if self._seen[i + 1] != snapshot.seen[i + 1]:
                self._diverge(snapshot, i + 1)
                return

    def _diverge(self, snapshot: PrefixSnapshot, index: int) -> None:
        where = "after reset" if index == 0 else f"at step {index} (action {snapshot.actions[index - 1]!r})"
        self._diverged = f"restore replay diverges {where}"
        self.divergences += 1
        self.counters["divergences"] += 1

    def close(self) -> None:
        """Close the wrapped environment."""
        self._task = None
        self.env.close()
