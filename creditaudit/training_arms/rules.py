"""The seven arms' credit rules: how each arm turns a task group's credit into per-turn weights.

Every arm trains on the same GRPO advantage ``A_i`` (the group z-score of the outcomes of task
group's ``G`` rollouts, :func:`creditaudit.signals.advantages.grpo_advantages`) and multiplies it,
turn by turn, by a weight ``w_{i,t}`` from its own rule; the effective per-turn advantage is
``a_{i,t} = w_{i,t} * A_i``. A sample (turn) whose ``a_{i,t}`` is zero carries no gradient and
is dropped before the update, so rules that zero many weights buy fewer optimizer steps (the
dose the analysis controls for).

The rules (SPEC.md §6), decisions of this module marked (*):

``outcome_only``
    ``w = 1``.
``implicit``
    ``w = rho_t``, HCAPO's clipped hindsight ratio scored by the arm's *current* checkpoint.
``shuffled_implicit``
    ``w`` = a seeded within-trajectory permutation of ``rho`` (marginal-matched).
``inverted_implicit``
    (*) ``w = clip_low + clip_high - rho_t``: the ranking of ``rho`` reversed inside the same clip
    range, so the weights stay positive (the sign of learning is not flipped, only which turns
    get more of it).
``judge``
    (*) ``w = max(0, s_t * sign(A_i))`` with the judge's score ``s_t`` in {1, 0, -1}: a turn
    receives its trajectory's advantage when the judge holds it responsible for that outcome
    (helpful in an above-baseline trajectory, the mistake in a below-baseline one); neutral
    turns get 0 and are dropped. The judge is the protocol's judge family, reading the fixed
    base policy (the audited instrument), never the arm's moving checkpoint.
``shuffled_judge``
    The same rule on a seeded within-trajectory permutation of the judge's scores.
``pivotal_masked``
    ``w = 1`` on turns that executed replay at low resolution (``pivotal_resolution_n`` rollouts
    per arm) finds pivotal (``A_replay != 0``), else 0; turns without a counterfactual are not
    credited (their weight is 0 and they are counted).

An abstained credit (NaN) gets weight 0 and is counted as such, never imputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from creditaudit.registry import registry
from creditaudit.signals.advantages import grpo_advantages
from creditaudit.signals.controls import shuffle_values

__all__ = ["ARM_NAMES", "ArmRule", "GroupCredit", "arm_rule", "effective_advantages"]

ARM_NAMES = (
    "outcome_only",
    "implicit",
    "judge",
    "shuffled_implicit",
    "shuffled_judge",
    "inverted_implicit",
    "pivotal_masked",
)

# Preregistered partitions of the arms (frozen with this module's version): which instrument
# produced an arm's credit, and whether the credit still carries the instrument's information.
_INSTRUMENT = {
    "outcome_only": "outcome",
    "implicit": "implicit",
    "shuffled_implicit": "implicit",
    "inverted_implicit": "implicit",
    "judge": "judge",
    "shuffled_judge": "judge",
    "pivotal_masked": "replay",
}
_INFORMATION = {
    "outcome_only": "outcome",
    "implicit": "informative",
    "judge": "informative",
    "pivotal_masked": "informative",
    "shuffled_implicit": "scrambled",
    "shuffled_judge": "scrambled",
    "inverted_implicit": "scrambled",
}
_SOURCE = {
    "outcome_only": None,
    "implicit": "implicit",
    "shuffled_implicit": "implicit",
    "inverted_implicit": "implicit",
    "judge": "judge",
    "shuffled_judge": "judge",
    "pivotal_masked": "replay",
}


@dataclass(frozen=True)
class GroupCredit:
    """What a rule sees of one task group.

    Attributes
    ----------
    outcomes : numpy.ndarray
        ``R_i`` of the group's rollouts (0/1).
    credit : list of numpy.ndarray or None
        Per rollout, the per-turn credit of the arm's source (``rho`` for the implicit arms, the
        judge's score for the judge arms, 1.0/0.0 pivotal for ``pivotal_masked``); NaN marks an
        abstention. ``None`` for ``outcome_only``.
    n_turns : list of int
        Turns of each rollout.
    shuffle_rngs : list of numpy.random.Generator or None
        One generator per rollout for the shuffled arms (named streams, see the loop).
    """

    outcomes: np.ndarray
    credit: list[np.ndarray] | None
    n_turns: list[int]
    shuffle_rngs: list[np.random.Generator] | None = None


@dataclass(frozen=True)
class ArmRule:
    """A registered arm: its credit source, partitions and weight rule.

    Attributes
    ----------
    name : str
        The arm (one of :data:`ARM_NAMES`).
    source : {None, "implicit", "judge", "replay"}
        What credit the rule consumes.
    instrument, information : str
        The arm's group in the preregistered instrument and information partitions.
    clip_low, clip_high : float
        The implicit family's clip range (used by ``inverted_implicit``).
    """

    name: str
    source: str | None
    instrument: str
    information: str
    clip_low: float = 0.8
    clip_high: float = 1.2

    def weights(self, group: GroupCredit) -> list[np.ndarray]:
        """Per rollout, the per-turn weight ``w_{i,t}`` (0 where credit abstained)."""
        if self.source is None:
            return [np.ones(n) for n in group.n_turns]
        if group.credit is None or len(group.credit) != len(group.n_turns):
            raise ValueError(f"arm {self.name!r} needs one credit array per rollout")
        out = []
        advantages = _advantages(group.outcomes)
        for i, (values, n) in enumerate(zip(group.credit, group.n_turns)):
            c = np.asarray(values, dtype=float)
            if c.shape != (n,):
                raise ValueError(f"arm {self.name!r}: rollout {i} has {n} turns but {c.shape} credit values")
            if self.name.startswith("shuffled_"):
                if group.shuffle_rngs is None:
                    raise ValueError(f"arm {self.name!r} needs a seeded generator per rollout")
                c = shuffle_values(c, rng=group.shuffle_rngs[i])
            if self.name == "inverted_implicit":
                c = (self.clip_low + self.clip_high) - c
            if self.source == "judge":
                c = np.maximum(0.0, c * np.sign(advantages[i]))
            out.append(np.where(np.isnan(c), 0.0, c))
        return out


def _advantages(outcomes: np.ndarray) -> np.ndarray:
    r = np.asarray(outcomes, dtype=float)
    return grpo_advantages(r) if r.size >= 2 else np.zeros_like(r)


def effective_advantages(rule: ArmRule, group: GroupCredit) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """``(A, w, a)``: the group's GRPO advantages, the rule's weights, and ``a_{i,t} = w_{i,t} A_i``.

    Examples
    --------
    >>> rule = arm_rule("judge")
    >>> g = GroupCredit(np.array([1.0, 0.0]), [np.array([1.0, 0.0]), np.array([-1.0, 1.0])], [2, 2])
    >>> A, w, a = effective_advantages(rule, g)
    >>> [x.tolist() for x in w], [round(v, 3) + 0.0 for v in a[0].tolist() + a[1].tolist()]
    ([[1.0, 0.0], [1.0, 0.0]], [0.707, 0.0, -0.707, 0.0])
    """
    advantages = _advantages(group.outcomes)
    weights = rule.weights(group)
    return advantages, weights, [w * advantages[i] for i, w in enumerate(weights)]


def _make(name: str, clip_low: float, clip_high: float) -> ArmRule:
    return ArmRule(name=name, source=_SOURCE[name], instrument=_INSTRUMENT[name], information=_INFORMATION[name],
                   clip_low=clip_low, clip_high=clip_high)


def _register(name: str) -> None:
    def factory(clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
        return _make(name, clip_low, clip_high)

    factory.__name__ = f"{name}_arm"
    factory.__doc__ = f"The ``{name}`` training arm (registered factory)."
    registry("arm").register(name)(factory)


for _name in ARM_NAMES:
    _register(_name)


def arm_rule(name: str, *, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """The registered rule of arm ``name`` (``registry("arm").create(name, ...)``)."""
    if name not in ARM_NAMES:
        raise ValueError(f"`name` must be one of {set(ARM_NAMES)}; got {name!r}")
    return registry("arm").create(name, clip_low=clip_low, clip_high=clip_high)


def instrument_labels(arms: Sequence[str]) -> list[str]:
    """The instrument partition's group of each arm."""
    return [_INSTRUMENT[a] for a in arms]


def information_labels(arms: Sequence[str]) -> list[str]:
    """The information partition's group of each arm."""
    return [_INFORMATION[a] for a in arms]
