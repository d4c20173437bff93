"""What an environment plugin declares: its capabilities, its prompt text, and how to make instances.

An environment is published under the entry-point group ``creditaudit.environments`` (see
:mod:`creditaudit.plugins`). The entry point names a *factory*: its keyword parameters are the
environment's arguments (the protocol's ``environment.args``, validated against the signature),
plus the reserved ``horizon`` that the toolkit passes from ``environment.horizon``. The factory
returns an :class:`EnvironmentPlugin` and must be cheap and free of side effects -- protocol
validation calls it to run the environment's own argument checks; no engine is started until
:meth:`EnvironmentPlugin.make` is called.

The stages never branch on an environment's name: they read its :class:`Capabilities` --
whether it can snapshot and restore its own state (else it is wrapped by prefix replay,
:class:`~creditaudit.replay.envs.prefix.PrefixReplayEnv`), whether it lists admissible commands,
whether it computes a state signature (else the signature is a hash of the task and the action
prefix), and where its tasks come from -- and its :class:`PromptText`, the words the policy and the
judges read about the task and its commands.

A minimal third-party environment (``mypkg/env.py``; ``pyproject.toml`` declares
``[project.entry-points."creditaudit.environments"] counter = "mypkg.env:counter_environment"``)::

    from creditaudit.replay.envs import (Capabilities, EnvironmentPlugin, Observation, PromptText,
                                         StepResult, Task)

    class Counter:
        name = "counter"

        def make_tasks(self, n, *, rng):
            return [Task(task_id=f"counter-{int(s)}", task_type="counter", source="counter",
                         params={"target": int(s) % 5 + 1}) for s in rng.integers(0, 2**31, size=n)]

        def reset(self, task):
            self.target, self.value = task.params["target"], 0
            return Observation(goal=f"reach {self.target}", text="value 0", admissible=("add one", "stop"))

        def step(self, action):
            if action == "add one":
                self.value += 1
            done = action == "stop"
            return StepResult(text=f"value {self.value}", admissible=() if done else ("add one", "stop"),
                              done=done, won=done and self.value == self.target)

        def close(self):
            pass

    def counter_environment(horizon: int = 10) -> EnvironmentPlugin:
        return EnvironmentPlugin(
            name="counter", horizon=horizon, factory=Counter,
            capabilities=Capabilities(native_snapshot=False, admissible=True, state_signature=False,
                                      generates_tasks=True),
            prompt=PromptText(setting="a counting game", commands="Commands are 'add one' and 'stop'."))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from creditaudit.replay.envs.base import Environment, Task

__all__ = ["Capabilities", "PromptText", "EnvironmentPlugin"]


@dataclass(frozen=True)
class Capabilities:
    """What an environment can do; the stages decide by these, never by its name.

    Attributes
    ----------
    native_snapshot : bool
        ``snapshot()`` / ``restore()`` move a live instance back to an earlier state of the episode
        cheaply (ALFWorld, planted). When False, replay restores a state by resetting the task and
        replaying the action prefix (:class:`~creditaudit.replay.envs.prefix.PrefixReplayEnv`),
        checking every observation against the recorded one.
    admissible : bool
        ``Observation.admissible`` / ``StepResult.admissible`` list the commands the environment
        accepts. Executed replay draws its K alternatives among them.
    state_signature : bool
        ``state_signature()`` hashes the whole world state (two states with the same signature give
        the same result for the same action). When False, the signature is a hash of the task and
        the action prefix (sound for a deterministic environment; fewer transition-cache hits).
    generates_tasks : bool
        The environment makes its own task list from a seed (``make_tasks(n, rng=...)``; the
        protocol's ``collection.n_tasks`` of them, from the stream ``games/generate``). When False
        its tasks are ALFWorld-format game files: generated after the freeze or pinned from the
        user's data directory (``environment.source``).
    pddl_games : bool
        Its tasks are ALFWorld PDDL game files whose goal the VICT family instruments.
    """

    native_snapshot: bool = False
    admissible: bool = True
    state_signature: bool = False
    generates_tasks: bool = True
    pddl_games: bool = False

    def to_dict(self) -> dict[str, bool]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class PromptText:
    """The words about an environment that prompts show (the policy's and the judges').

    Attributes
    ----------
    setting : str
        What the task is, as a noun phrase after "an agent in": ``"a household text game"``.
    commands : str
        What the commands look like (a sentence or two appended to the policy's instruction);
        empty for none.

    Examples
    --------
    >>> PromptText(setting="a household text game").instruction
    'You are an agent in a household text game. Reply with exactly one admissible action.'
    """

    setting: str
    commands: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.setting, str) or not self.setting.strip():
            raise ValueError("`setting` must be a non-empty noun phrase (\"a household text game\")")
        if not isinstance(self.commands, str):
            raise ValueError("`commands` must be a string")

    @property
    def instruction(self) -> str:
        """The policy prompt's first line."""
        text = f"You are an agent in {self.setting}. Reply with exactly one admissible action."
        return f"{text} {self.commands}" if self.commands else text


@dataclass(frozen=True)
class EnvironmentPlugin:
    """An installed environment, bound to its protocol arguments (what a factory returns).

    Attributes
    ----------
    name : str
        The environment's name (its entry point's).
    horizon : int
        Maximum steps per episode (the protocol's ``environment.horizon``).
    factory : callable
        ``factory()`` -> a fresh, independent raw environment instance: ``reset(task)``,
        ``step(action)``, ``close()``; with native snapshots also ``snapshot()``, ``restore()``;
        with a state signature also ``state_signature()``; with ``generates_tasks`` also
        ``make_tasks(n, rng=...)``.
    capabilities : Capabilities
        What the environment can do.
    prompt : PromptText
        The words prompts show about it.
    args : dict
        The arguments it was built with (informative).
    """

    name: str
    horizon: int
    factory: Callable[[], Any]
    capabilities: Capabilities
    prompt: PromptText
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.capabilities, Capabilities):
            raise TypeError(f"environment {self.name!r}: `capabilities` must be a Capabilities, "
                            f"got {type(self.capabilities).__name__}")
        if not isinstance(self.prompt, PromptText):
            raise TypeError(f"environment {self.name!r}: `prompt` must be a PromptText, "
                            f"got {type(self.prompt).__name__}")
        if not callable(self.factory):
            raise TypeError(f"environment {self.name!r}: `factory` must be callable")

    def raw(self) -> Any:
        """A fresh instance exactly as the environment made it (no wrapper)."""
        return self.factory()

    def make(self) -> Environment:
        """A fresh instance with the full replay contract: the raw instance when it snapshots
        natively, else the raw instance wrapped by prefix replay."""
        env = self.factory()
        if self.capabilities.native_snapshot:
            return env
        from creditaudit.replay.envs.prefix import PrefixReplayEnv

        return PrefixReplayEnv(env, horizon=self.horizon, name=self.name,
                               native_signature=self.capabilities.state_signature)

    def make_tasks(self, n: int, *, rng: np.random.Generator) -> list[Task]:
        """``n`` tasks made by the environment (only when it ``generates_tasks``)."""
        if not self.capabilities.generates_tasks:
            raise TypeError(f"environment {self.name!r} does not generate its own tasks")
        env = self.factory()
        try:
            return list(env.make_tasks(n, rng=rng))
        finally:
            close = getattr(env, "close", None)
            if close is not None:
                close()
