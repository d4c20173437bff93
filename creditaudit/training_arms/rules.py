"""The seven arms' credit rules: how each arm turns a task group's credit into per-turn weights.

Every arm trains on the same GRPO advantage ``A_i`` (the group z-score of the outcomes of task
group's ``G`` rollouts, :func:`creditaudit.signals.families.advantages.grpo_advantages`) and multiplies it,
turn by turn, by a weight ``w_{i,t}`` from its own rule; the effective per-turn advantage is
``a_{i,t} = w_{i,t} * A_i``. A sample (turn) whose ``a_{i,t}`` is zero carries no gradient and
is dropped before the update, so rules that zero many weights buy fewer optimizer steps (the
dose the analysis controls for).

The rules (docs/design.md §6), decisions of this module marked (*):

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

from creditaudit.protocol.sections import ArmsSection
from creditaudit.signals.families.advantages import grpo_advantages
from creditaudit.signals.controls import shuffle_values

__all__ = ["ARM_NAMES", "ArmRule", "GroupCredit", "arm_rule", "effective_advantages"]

ARM_NAMES = tuple(ArmsSection().arms)  # the seven arms of docs/design.md §6, in the protocol's default order


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
    """An arm's credit rule: what it consumes, how it transforms it, and its preregistered
    partition groups (declared by the rule itself, never looked up by name).

    Attributes
    ----------
    name : str
        The arm (a built-in of :data:`ARM_NAMES` or a third party's).
    source : {None, "implicit", "judge", "replay"}
        What credit the rule consumes: the family (by its registered family name) whose credit
        weights the arm, ``replay`` for low-resolution replay truth, ``None`` for outcome only.
    instrument, information : str
        The arm's group in the instrument partition (which instrument produced the credit) and in
        the information partition (``outcome``, ``informative``, ``scrambled``).
    transform : {"none", "shuffle", "invert"}
        ``shuffle``: a seeded within-trajectory permutation of the credit; ``invert``:
        ``clip_low + clip_high - credit``.
    clip_low, clip_high : float
        The implicit family's clip range (used by ``invert``).
    """

    name: str
    source: str | None
    instrument: str
    information: str
    transform: str = "none"
    clip_low: float = 0.8
    clip_high: float = 1.2

    def __post_init__(self) -> None:
        if self.transform not in ("none", "shuffle", "invert"):
            raise ValueError(f"`transform` must be one of {{'none', 'shuffle', 'invert'}}; got {self.transform!r}")

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
            if self.transform == "shuffle":
                if group.shuffle_rngs is None:
                    raise ValueError(f"arm {self.name!r} needs a seeded generator per rollout")
                c = shuffle_values(c, rng=group.shuffle_rngs[i])
            if self.transform == "invert":
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


def outcome_only_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``outcome_only``: ``w = 1`` (entry point of group ``creditaudit.arm_rules``)."""
    return ArmRule("outcome_only", None, "outcome", "outcome", clip_low=clip_low, clip_high=clip_high)


def implicit_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``implicit``: ``w = rho_t`` of the arm's current checkpoint."""
    return ArmRule("implicit", "implicit", "implicit", "informative", clip_low=clip_low, clip_high=clip_high)


def shuffled_implicit_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``shuffled_implicit``: a seeded within-trajectory permutation of rho."""
    return ArmRule("shuffled_implicit", "implicit", "implicit", "scrambled", "shuffle", clip_low, clip_high)


def inverted_implicit_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``inverted_implicit``: ``w = clip_low + clip_high - rho_t``."""
    return ArmRule("inverted_implicit", "implicit", "implicit", "scrambled", "invert", clip_low, clip_high)


def judge_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``judge``: ``w = max(0, s_t sign(A_i))``."""
    return ArmRule("judge", "judge", "judge", "informative", clip_low=clip_low, clip_high=clip_high)


def shuffled_judge_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``shuffled_judge``: the judge rule on a seeded permutation of the scores."""
    return ArmRule("shuffled_judge", "judge", "judge", "scrambled", "shuffle", clip_low, clip_high)


def pivotal_masked_arm(*, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """``pivotal_masked``: ``w = 1`` on turns low-resolution replay finds pivotal, else 0."""
    return ArmRule("pivotal_masked", "replay", "replay", "informative", clip_low=clip_low, clip_high=clip_high)


def arm_rule(name: str, *, clip_low: float = 0.8, clip_high: float = 1.2) -> ArmRule:
    """The installed rule of arm ``name`` (entry-point group ``creditaudit.arm_rules``)."""
    from creditaudit import plugins

    rule = plugins.get("arm_rule", name, where="`name`").create({"clip_low": clip_low, "clip_high": clip_high})
    if not isinstance(rule, ArmRule):
        raise TypeError(f"arm rule {name!r} returned {rule!r}, not an ArmRule")
    return rule


def instrument_labels(arms: Sequence[str]) -> list[str]:
    """The instrument partition's group of each arm (as each rule declares it)."""
    return [arm_rule(a).instrument for a in arms]


def information_labels(arms: Sequence[str]) -> list[str]:
    """The information partition's group of each arm (as each rule declares it)."""
    return [arm_rule(a).information for a in arms]
