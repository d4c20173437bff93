"""GiGPO step credit: episode groups and anchor-state step groups (the family ``gigpo``).

Feng et al. (2025), "Group-in-Group Policy Optimization for LLM Agent Training" (NeurIPS 2025;
the step-level credit of verl-agent on ALFWorld). For the ``G`` rollouts of one task:

Episode advantage
    ``A_E(i) = (R_i - mean_j R_j) / F``, with ``R_i`` the outcome of rollout ``i``.
Step groups
    Turns of the group's rollouts whose *anchor state* is identical form a step group. The anchor is
    the observation text the agent saw before acting (``anchor: observation``, as verl-agent's
    ``anchor_obs``), or the environment's state signature (``anchor: signature``, which tells apart
    states whose text coincides).
Step advantage
    The discounted return from turn ``t``, ``R_t = sum_{k >= t} gamma^(k-t) r_k``, with the
    environment's step rewards ``r_k`` (here 0 at every step but the last, which is the outcome:
    ``R_t = gamma^(n-1-t) R``), and ``A_S(i, t) = (R_t - mean over the step group) / F``.
Credit
    ``A_E(i) + omega * A_S(i, t)``.

``F`` is the group's sample standard deviation (``ddof=1``, as ``torch.std`` in verl-agent) plus
``eps = 1e-6`` (``normalize: std``, verl-agent's ``mean_std_norm``), or 1 (``normalize: none``,
``mean_norm``). A step group of one turn has no baseline: its ``A_S`` is 0 (verl-agent instead uses
mean 0 and scale 1 for a singleton, i.e. ``A_S = R_t``; docs/design.md §4 takes 0, so a singleton adds
nothing), and the share of singleton turns is reported. A task group of one rollout abstains
(``group_of_one``), as the base advantages do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from creditaudit.signals.families.advantages import GRPO_EPS
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, Trajectory, credit_frame

__all__ = ["discounted_returns", "gigpo_group", "GigpoGroup", "GigpoFamily", "gigpo_family"]


def discounted_returns(rewards: Sequence[float], *, gamma: float) -> np.ndarray:
    """``R_t = sum_{k >= t} gamma^(k-t) r_k`` for every step of one rollout.

    Examples
    --------
    >>> discounted_returns([0.0, 0.0, 1.0], gamma=0.5).tolist()
    [0.25, 0.5, 1.0]
    """
    r = np.asarray(rewards, dtype=float)
    out = np.zeros_like(r)
    running = 0.0
    for t in range(r.size - 1, -1, -1):
        running = r[t] + gamma * running
        out[t] = running
    return out


def _scale(values: np.ndarray, normalize: str) -> float:
    if normalize == "none" or values.size < 2:
        return 1.0
    return float(values.std(ddof=1)) + GRPO_EPS


@dataclass(frozen=True)
class GigpoGroup:
    """GiGPO's quantities for one task group (arrays per rollout, in the group's order).

    Attributes
    ----------
    episode : numpy.ndarray
        ``A_E`` per rollout.
    returns, step, credit : list of numpy.ndarray
        ``R_t``, ``A_S`` and ``A_E + omega A_S`` per turn of each rollout.
    group_size : list of numpy.ndarray
        The size of each turn's step group (1 = singleton).
    """

    episode: np.ndarray
    returns: list[np.ndarray]
    step: list[np.ndarray]
    credit: list[np.ndarray]
    group_size: list[np.ndarray]


def gigpo_group(outcomes: Sequence[float], anchors: Sequence[Sequence[Any]], *, gamma: float = 0.95,
                omega: float = 1.0, normalize: str = "std") -> GigpoGroup:
    """GiGPO over one task group.

    Parameters
    ----------
    outcomes : sequence of float
        ``R_i`` of the group's ``G >= 2`` rollouts.
    anchors : sequence of sequences
        Per rollout, the anchor state of each of its turns (any hashable value).
    gamma, omega : float
        Discount of the step returns; weight of the step advantage.
    normalize : {"std", "none"}
        ``F``: the group's sample standard deviation (+1e-6), or 1.

    Examples
    --------
    Two rollouts meet in state ``"s"`` at their first turn; their second turns are singletons:

    >>> g = gigpo_group([1.0, 0.0], [["s", "a"], ["s", "b"]], gamma=0.5, normalize="none")
    >>> g.episode.tolist(), [x.tolist() for x in g.step]
    ([0.5, -0.5], [[0.25, 0.0], [-0.25, 0.0]])
    """
    if normalize not in ("std", "none"):
        raise ValueError(f"`normalize` must be one of {{'std', 'none'}}; got {normalize!r}")
    r = np.asarray(outcomes, dtype=float)
    if r.ndim != 1 or r.size < 2 or len(anchors) != r.size:
        raise ValueError("`outcomes` must hold G >= 2 outcomes and `anchors` one sequence per rollout")
    episode = (r - r.mean()) / _scale(r, normalize)
    returns = []
    for outcome, turns in zip(r, anchors):
        rewards = np.zeros(len(turns))
        if len(turns):
            rewards[-1] = outcome
        returns.append(discounted_returns(rewards, gamma=gamma))
    members: dict[Any, list[tuple[int, int]]] = {}
    for i, turns in enumerate(anchors):
        for t, anchor in enumerate(turns):
            members.setdefault(anchor, []).append((i, t))
    step = [np.zeros(len(turns)) for turns in anchors]
    size = [np.ones(len(turns), dtype=int) for turns in anchors]
    for keys in members.values():
        values = np.array([returns[i][t] for i, t in keys])
        scale = _scale(values, normalize)
        for (i, t), v in zip(keys, values):
            size[i][t] = len(keys)
            step[i][t] = 0.0 if len(keys) == 1 else (v - values.mean()) / scale
    credit = [episode[i] + omega * step[i] for i in range(r.size)]
    return GigpoGroup(episode, returns, step, credit, size)


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("task_id", pa.string()),
    pa.field("trajectory_id", pa.string()),
    pa.field("turn", pa.int32()),
    pa.field("episode_advantage", pa.float64()),
    pa.field("discounted_return", pa.float64()),
    pa.field("step_advantage", pa.float64()),
    pa.field("step_group_size", pa.int32()),
])


class GigpoFamily(FamilyBase):
    """The ``gigpo`` credit family: a signed advantage around ``neutral = 0``, from the collected
    trajectories alone (no policy, no environment)."""

    neutral = 0.0

    def __init__(self, *, name: str, gamma: float, omega: float, anchor: str, normalize: str):
        self.name, self.gamma, self.omega, self.anchor, self.normalize = name, gamma, omega, anchor, normalize

    def _anchor(self, traj: Trajectory, turn: int) -> Any:
        record = traj.turns[turn]
        return record.observation if self.anchor == "observation" else record.state_signature

    def compute(self, context: SignalContext) -> FamilyOutput:
        groups: dict[str, list[Trajectory]] = {}
        for traj in context.trajectories:
            groups.setdefault(traj.task_id, []).append(traj)
        values: dict[tuple[str, int], float] = {}
        reasons: dict[tuple[str, int], str] = {}
        cols: dict[str, list] = {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        singletons = turns = 0
        for task_id, group in groups.items():
            if len(group) < 2:
                for traj in group:
                    for rec in traj.turns:
                        reasons[(traj.trajectory_id, rec.turn)] = "group_of_one"
                continue
            result = gigpo_group([t.outcome for t in group],
                                 [[self._anchor(t, k) for k in range(len(t))] for t in group],
                                 gamma=self.gamma, omega=self.omega, normalize=self.normalize)
            for i, traj in enumerate(group):
                for rec in traj.turns:
                    t = rec.turn
                    values[(traj.trajectory_id, t)] = float(result.credit[i][t])
                    singletons += int(result.group_size[i][t] == 1)
                    turns += 1
                    for key, value in (("task_id", task_id), ("trajectory_id", traj.trajectory_id), ("turn", t),
                                       ("episode_advantage", float(result.episode[i])),
                                       ("discounted_return", float(result.returns[i][t])),
                                       ("step_advantage", float(result.step[i][t])),
                                       ("step_group_size", int(result.group_size[i][t]))):
                        cols[key].append(value)
        table = pa.Table.from_pydict(cols, schema=DIAGNOSTICS_SCHEMA)
        report = {"anchor": self.anchor, "normalize": self.normalize, "gamma": self.gamma, "omega": self.omega,
                  "n_turns_grouped": turns, "n_singleton_turns": singletons,
                  "singleton_share": singletons / turns if turns else None}
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), table, report)


def gigpo_family(
    *,
    name: str,
    gamma: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95,
    omega: Annotated[float, Field(ge=0.0)] = 1.0,
    anchor: Literal["observation", "signature"] = "observation",
    normalize: Literal["std", "none"] = "std",
) -> GigpoFamily:
    """The GiGPO family (entry point ``gigpo`` of group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's name for the signal.
    gamma : float, default 0.95
        Discount of the step returns.
    omega : float, default 1.0
        Weight of the step advantage.
    anchor : {"observation", "signature"}, default "observation"
        What makes two turns one step group: identical observation text (verl-agent) or identical
        environment state signature.
    normalize : {"std", "none"}, default "std"
        ``F``: the group standard deviation (verl-agent's ``mean_std_norm``) or 1 (``mean_norm``).
    """
    return GigpoFamily(name=name, gamma=gamma, omega=omega, anchor=anchor, normalize=normalize)
