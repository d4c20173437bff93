"""The environment contract every adapter implements (ALFWorld, the planted-effect environment).

A deterministic text environment: ``reset(task)`` then ``step(action)`` until ``done``; the
terminal outcome is 0 or 1; ``state_signature()`` hashes everything that affects future
observations, so transitions can be cached by ``(signature, action)``; ``snapshot()`` /
``restore()`` move the live instance back to an earlier state (valid only inside the instance
that made the snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Task", "Observation", "StepResult", "Environment"]


@dataclass(frozen=True)
class Task:
    """One task: a stable id (the hash of its game file for ALFWorld), its type, and where its
    definition lives (a game file path, or parameters for a synthetic environment)."""

    task_id: str
    task_type: str
    source: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset``: the task goal, the text, the admissible commands."""

    goal: str
    text: str
    admissible: tuple[str, ...]


@dataclass(frozen=True)
class StepResult:
    """What the agent sees after ``step``; ``won`` is the terminal outcome when ``done``."""

    text: str
    admissible: tuple[str, ...]
    done: bool
    won: bool


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
