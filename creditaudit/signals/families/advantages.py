"""Group-relative base advantages: GRPO (group z-score) and RLOO (leave-one-out), broadcast to turns.

Both act on the outcomes ``R_1..R_G`` of one task's group of ``G`` rollouts and give every turn
of rollout ``i`` the same advantage ``A_i`` (the families ``grpo`` and ``rloo``). A group of one
rollout has no baseline: its turns abstain (``group_of_one``), never a made-up 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, credit_frame

__all__ = ["GRPO_EPS", "grpo_advantages", "rloo_advantages", "zscore", "BaseAdvantageFamily"]

GRPO_EPS = 1e-6
"""Stabiliser of the GRPO denominator (verl's ``compute_grpo_outcome_advantage`` uses 1e-6)."""


def _outcomes_iv(outcomes: Sequence[float]) -> np.ndarray:
    r = np.asarray(outcomes, dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise ValueError("`outcomes` must be a non-empty 1-D sequence of a group's rollout outcomes")
    if not np.isfinite(r).all():
        raise ValueError("`outcomes` must be finite")
    return r


def zscore(values: Sequence[float], *, ddof: int = 1, eps: float = GRPO_EPS) -> np.ndarray:
    """``(x - mean(x)) / (std(x, ddof) + eps)``; zeros when the values are constant.

    Examples
    --------
    >>> zscore([1.0, 1.0, 1.0]).tolist()
    [0.0, 0.0, 0.0]
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return np.zeros_like(x)
    centred = x - x.mean()
    return centred / (x.std(ddof=ddof) + eps)


def grpo_advantages(outcomes: Sequence[float], *, eps: float = GRPO_EPS) -> np.ndarray:
    """GRPO group z-score of a group's outcomes.

    Parameters
    ----------
    outcomes : sequence of float
        ``R_1..R_G`` of one task's rollouts, ``G >= 2``.
    eps : float, default 1e-6

    Returns
    -------
    numpy.ndarray
        ``A_i = (R_i - mean(R)) / (std(R) + eps)`` with the sample standard deviation (``ddof=1``,
        as ``torch.std`` in verl's GRPO); 0 for every rollout when all outcomes are equal.

    Examples
    --------
    >>> grpo_advantages([1, 0, 0, 1]).round(4).tolist()
    [0.866, -0.866, -0.866, 0.866]
    """
    r = _outcomes_iv(outcomes)
    if r.size < 2:
        raise ValueError("`outcomes` must hold at least 2 rollouts: GRPO needs a group baseline")
    return zscore(r, ddof=1, eps=eps)


def rloo_advantages(outcomes: Sequence[float]) -> np.ndarray:
    """RLOO leave-one-out advantages of a group's outcomes.

    Returns
    -------
    numpy.ndarray
        ``A_i = R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean(R))``.

    Examples
    --------
    >>> rloo_advantages([1, 0, 0]).tolist()
    [1.0, -0.5, -0.5]
    """
    r = _outcomes_iv(outcomes)
    g = r.size
    if g < 2:
        raise ValueError("`outcomes` must hold at least 2 rollouts: RLOO needs another rollout as baseline")
    return r - (r.sum() - r) / (g - 1)


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("task_id", pa.string()),
    pa.field("trajectory_id", pa.string()),
    pa.field("outcome", pa.int8()),
    pa.field("group_size", pa.int32()),
    pa.field("group_mean", pa.float64()),
    pa.field("advantage", pa.float64()),
])


class BaseAdvantageFamily(FamilyBase):
    """The ``grpo`` / ``rloo`` credit family: the group advantage broadcast to every turn (``neutral = 0``)."""

    neutral = 0.0

    def __init__(self, *, name: str, method: str):
        if method not in ("grpo", "rloo"):
            raise ValueError(f"`method` must be one of {{'grpo', 'rloo'}}; got {method!r}")
        self.name = name
        self.method = method

    def compute(self, context: SignalContext) -> FamilyOutput:
        groups: dict[str, list[Any]] = {}
        for traj in context.trajectories:
            groups.setdefault(traj.task_id, []).append(traj)
        values, reasons, diag = {}, {}, {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        for task_id, members in groups.items():
            outcomes = [t.outcome for t in members]
            if len(members) < 2:
                adv = [None]
            else:
                adv = (grpo_advantages if self.method == "grpo" else rloo_advantages)(outcomes).tolist()
            for k, traj in enumerate(members):
                a = adv[k] if len(members) >= 2 else None
                for rec in traj.turns:
                    if a is None:
                        reasons[(traj.trajectory_id, rec.turn)] = "group_of_one"
                    else:
                        values[(traj.trajectory_id, rec.turn)] = a
                diag["task_id"].append(task_id)
                diag["trajectory_id"].append(traj.trajectory_id)
                diag["outcome"].append(traj.outcome)
                diag["group_size"].append(len(members))
                diag["group_mean"].append(float(np.mean(outcomes)))
                diag["advantage"].append(a)
        table = pa.Table.from_pydict(diag, schema=DIAGNOSTICS_SCHEMA)
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), table,
                            {"method": self.method, "n_groups": len(groups)})


def grpo_family(*, name: str) -> BaseAdvantageFamily:
    """The GRPO base-advantage family (entry point ``grpo`` of group ``creditaudit.families``; no constants)."""
    return BaseAdvantageFamily(name=name, method="grpo")


def rloo_family(*, name: str) -> BaseAdvantageFamily:
    """The RLOO base-advantage family (entry point ``rloo`` of group ``creditaudit.families``; no constants)."""
    return BaseAdvantageFamily(name=name, method="rloo")
