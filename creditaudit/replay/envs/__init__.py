"""Environments: the contract every adapter implements (:mod:`~.base`), the planted-effect
environment (:mod:`~.planted`) and ALFWorld on its real engine
(:mod:`creditaudit.replay.envs.alfworld`). Adapters are registered factories
(``registry("environment")``); importing their module registers them."""

from creditaudit.replay.envs.base import (
    Environment,
    EpisodeOver,
    Observation,
    SnapshotError,
    StepResult,
    Task,
    signature_hash,
)

__all__ = ["Task", "Observation", "StepResult", "Environment", "SnapshotError", "EpisodeOver", "signature_hash"]
