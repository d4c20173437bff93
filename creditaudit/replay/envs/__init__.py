"""Environments: the contract every adapter implements (:mod:`~.base`), what an environment plugin
declares (:mod:`~.plugin`: capabilities, prompt text), the prefix-replay wrapper that makes any
deterministic reset/step environment replayable (:mod:`~.prefix`), the planted-effect environment
(:mod:`~.planted`) and ALFWorld on its real engine (:mod:`creditaudit.replay.envs.alfworld`).
Environments are plugins of the entry-point group ``creditaudit.environments``
(:mod:`creditaudit.plugins`); the built-ins are declared there exactly like a third party's."""

from creditaudit.replay.envs.base import (
    Environment,
    EpisodeOver,
    Observation,
    SnapshotError,
    StepResult,
    Task,
    signature_hash,
)
from creditaudit.replay.envs.plugin import Capabilities, EnvironmentPlugin, PromptText
from creditaudit.replay.envs.prefix import PrefixReplayEnv, PrefixSnapshot

__all__ = [
    "Task",
    "Observation",
    "StepResult",
    "Environment",
    "SnapshotError",
    "EpisodeOver",
    "signature_hash",
    "Capabilities",
    "EnvironmentPlugin",
    "PromptText",
    "PrefixReplayEnv",
    "PrefixSnapshot",
]
