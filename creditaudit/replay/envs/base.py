"""The environment contract every adapter implements (ALFWorld, the planted-effect environment).

A deterministic text environment: ``reset(task)`` then ``step(action)`` until ``done``; the
terminal outcome is 0 or 1; reaching ``horizon`` steps ends the episode with outcome 0.

``state_signature()`` hashes everything that affects what ``step`` returns next -- the world
state, the task, and the step count against the horizon (the count decides ``done`` at the
horizon) -- so transitions can be cached by ``(signature, action)``: two states with the same
signature give the same :class:`StepResult` for the same action.

``snapshot()`` / ``restore()`` move the live instance back to an earlier state of the *current
episode*. A snapshot is valid only inside the instance that made it and only until that instance's
next ``reset`` or ``close``; restoring any other snapshot raises :class:`SnapshotError` instead of
restoring garbage, and every restore checks the restored state's signature against the one the
snapshot recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from creditaudit.protocol.canonical import canonical_hash

__all__ = ["Task", "Observation", "StepResult", "Environment", "SnapshotError", "EpisodeOver", "signature_hash"]


@dataclass(frozen=True)
class Task:
    """One task.

    Attributes
    ----------
    task_id : str
        Stable id: the SHA-256 of the game file's bytes for ALFWorld, a hash of the parameters
        for synthetic environments.
    task_type : str
        Task family (an ALFRED task type, ``"planted"``).
    source : str
        Where the definition lives: a game file path, or a synthetic environment's name.
    params : dict
        Extra parameters (a synthetic environment's seed and sizes; a generated game's floor plan).
    """

    task_id: str
    task_type: str
    source: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset``: the task goal, the opening text, the admissible commands."""

    goal: str
    text: str
    admissible: tuple[str, ...]


@dataclass(frozen=True)
class StepResult:
    """What the agent sees after ``step``.

    Attributes
    ----------
    text : str
        The environment's feedback ("Nothing happens." for an inadmissible command on ALFWorld).
    admissible : tuple of str
        Commands admissible in the new state (sorted).
    done : bool
        The episode is over (won, lost, or the horizon reached).
    won : bool
        The goal is reached; the terminal outcome is ``int(won)`` once ``done``.
    truncated : bool
        The episode ended because the horizon was reached (outcome 0).
    """

    text: str
    admissible: tuple[str, ...]
    done: bool
    won: bool
    truncated: bool = False

    @property
    def outcome(self) -> int:
        """The terminal outcome in {0, 1} (0 while the episode runs)."""
        return int(self.done and self.won)


class SnapshotError(RuntimeError):
    """A snapshot cannot be restored: it belongs to another instance or an earlier episode, or the
    restored state does not match the one recorded."""


class EpisodeOver(RuntimeError):
    """``step`` was called after ``done`` (call ``reset`` or ``restore`` first)."""


def signature_hash(payload: Any) -> str:
    """SHA-256 of the canonical JSON of ``payload`` -- the form every state signature takes."""
    return canonical_hash(payload)


@runtime_checkable
class Environment(Protocol):
    """Deterministic text environment (see the module docstring)."""

    name: str
    horizon: int

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: str) -> StepResult: ...

    def admissible_actions(self) -> tuple[str, ...]: ...

    def state_signature(self) -> str: ...

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...

    def close(self) -> None: ...
