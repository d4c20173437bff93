"""The credit-family contract (version :data:`FAMILY_CONTRACT_VERSION`): what every family, built-in
or third-party, is given and must return. The trajectories a family reads are the record types of
:mod:`creditaudit.replay.records`, re-exported here.

A credit family is a factory published under the entry-point group ``creditaudit.families``
(:mod:`creditaudit.plugins`) whose keyword parameters are exactly the constants the protocol's
``args`` freeze (plus the reserved ``name``). The object it returns satisfies
:class:`CreditFamily`: it declares what the audit needs to know about its credit (``neutral``,
``needs``), and given a :class:`SignalContext` returns a :class:`FamilyOutput` -- one credit, or
an abstention with its reason, per collected turn -- plus a diagnostics table.

Examples
--------
A family that credits every action by its number of words, scaled by a parameter:

>>> from typing import Annotated
>>> from pydantic import Field
>>> class WordCount(FamilyBase):
...     contract_version = 1  # the FAMILY_CONTRACT_VERSION this family was written for
...     def __init__(self, *, name, scale):
...         self.name, self.scale = name, scale
...     def compute(self, context):
...         values = {(t.trajectory_id, r.turn): self.scale * len(r.action.split())
...                   for t in context.trajectories for r in t.turns}
...         return FamilyOutput(credit_frame(context.trajectories, values))
>>> def word_count(*, name: str, scale: Annotated[float, Field(gt=0)] = 1.0) -> WordCount:
...     return WordCount(name=name, scale=scale)
>>> family = word_count(name="words", scale=2.0)
>>> isinstance(family, CreditFamily), family.neutral, sorted(family.needs)
(True, 0.0, [])
>>> check_contract(family, source="words")  # passes: written for this contract version

A family declares the contract version it was written for as a literal (``contract_version = 1``,
not the imported constant, which would always match). A family written for another version is
refused by the protocol parser and by every stage that builds it, with an
:class:`~creditaudit.errors.InputError` (exit 2) naming it; a family that declares none is
taken to follow the current contract.

Published in a distribution's ``pyproject.toml``::

    [project.entry-points."creditaudit.families"]
    word_count = "my_package.families:word_count"

and named in a protocol as ``{name: words, family: word_count, args: {scale: 2.0}}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import pyarrow as pa

from creditaudit.errors import InputError
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.replay.records import Trajectory, TurnRecord, trajectories_from_table

__all__ = [
    "FAMILY_CONTRACT_VERSION",
    "ABSTAIN_REASONS",
    "NEEDS",
    "CREDIT_SCHEMA",
    "FamilyBase",
    "TurnRecord",
    "Trajectory",
    "SignalContext",
    "FamilyOutput",
    "CreditFamily",
    "trajectories_from_table",
    "credit_frame",
    "reasons_of",
    "make_family",
    "family_traits",
    "check_contract",
    "agreement_groups",
    "implemented_families",
]

#: Columns of ``signals/credit.parquet``: one row per (trajectory, turn, subject); a subject is a family or a control (``kind``).
CREDIT_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False),
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("of", pa.string(), nullable=True),
        pa.field("credit", pa.float64(), nullable=True),
        pa.field("abstained", pa.bool_(), nullable=False),
        pa.field("abstain_reason", pa.string(), nullable=True),
    ]
)


@dataclass
class SignalContext:
    """Everything a family may read: the frozen protocol's id and sections, the trajectories,
    named seed streams, the audited policy (loaded once, lazily) and a progress callback.

    Attributes
    ----------
    protocol_id : str
    protocol : creditaudit.protocol.schema.Protocol
    run_dir : Path
        Where relative model paths (``model: <dir>``) are resolved (never written to artifacts).
    trajectories : list of Trajectory
    load_policy : callable
        Returns the pinned audited policy (``HFPolicy``); called at most once.
    progress : callable, optional
        ``progress(phase, done, total)``.
    overrides : dict
        Test hooks keyed by family name (e.g. a judge's ``backoff_s``); never part of the protocol.
    """

    protocol_id: str
    protocol: Any
    run_dir: Path
    trajectories: list[Trajectory]
    load_policy: Callable[[], Any]
    progress: Callable[[str, int, int], None] | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    _policy: Any = field(default=None, init=False, repr=False)

    @property
    def streams(self) -> SeedStreams:
        return SeedStreams(self.protocol_id)

    def policy(self) -> Any:
        """The audited policy, loaded on first use."""
        if self._policy is None:
            self._policy = self.load_policy()
        return self._policy

    def report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)


@dataclass(frozen=True)
class FamilyOutput:
    """A family's per-turn credit, diagnostics and report.

    Attributes
    ----------
    credit : pandas.DataFrame
        Columns ``trajectory_id, turn, credit, abstain_reason``: one row per collected turn;
        ``credit`` is NaN exactly where ``abstain_reason`` is set (never a silent 0).
    diagnostics : pyarrow.Table or None
        Written to ``signals/diagnostics/<name>.parquet``.
    report : dict
        JSON values merged into the family's entry of ``signals/summary.json``.
    """

    credit: pd.DataFrame
    diagnostics: pa.Table | None = None
    report: dict[str, Any] = field(default_factory=dict)


#: Version of the family contract (:class:`CreditFamily`, :class:`FamilyOutput`,
#: :class:`SignalContext`, the abstention reasons). A change that breaks a published family bumps it.
FAMILY_CONTRACT_VERSION = 1

#: What a family may declare it needs beyond the collected trajectories (``needs``): ``policy``, the
#: audited policy (``context.policy()``); ``environment``, it executes the environment (the task
#: list and game files become attested inputs of the signals stage); ``replay``, it reads the replay
#: stage's results.
NEEDS = frozenset({"policy", "environment", "replay"})

#: Abstention reasons with a meaning shared across families (a family may add its own; any reason
#: is a string recorded per turn, never a silent 0): ``missing`` (no value for a collected turn),
#: ``nan`` (the value given is not a number), ``source_abstained`` (a control whose family abstained).
ABSTAIN_REASONS = ("missing", "nan", "source_abstained")


@runtime_checkable
class CreditFamily(Protocol):
    """A credit family.

    Attributes
    ----------
    name : str
        The protocol's name for the signal (reserved factory argument; no statistic depends on it).
    neutral : float or "trajectory-mean"
        The credit that means "no credit either way": sign agreement takes signs relative to it.
        ``"trajectory-mean"`` centres the credit within each trajectory (a probability-like score
        with no neutral point, such as confidence).
    needs : frozenset of str
        A subset of :data:`NEEDS`.

    Optional attributes (:class:`FamilyBase` gives the defaults): ``categories`` (the score values
    of a categorical judge, e.g. ``(1, 0, -1)``; families sharing them get judge-vs-judge agreement),
    ``fluency_echo`` (the audit computes the fluency echo, T3, for this family), ``uses`` (other
    plugins it uses, ``(kind, name)`` pairs, pinned with it), ``inputs(run_dir)`` (extra files the
    signals stage attests as inputs), ``input_facts()`` (what the stage's link record states about
    them once computed: a precomputed file's row count and columns) and ``contract_version`` (the
    :data:`FAMILY_CONTRACT_VERSION` the family was written for, an int literal; checked by
    :func:`check_contract`, ``None`` = undeclared).

    ``compute`` returns one row per collected turn (:func:`credit_frame` builds it); a turn without a
    credit abstains with a reason (:data:`ABSTAIN_REASONS`, or the family's own), never a silent 0.
    The module docstring holds a complete example; ``examples/creditaudit-example-family`` in the
    source tree is a whole installable distribution.
    """

    name: str
    neutral: float | str
    needs: frozenset[str]

    def compute(self, context: SignalContext) -> FamilyOutput: ...


class FamilyBase:
    """Defaults of the optional family attributes; subclass it (or declare them yourself)."""

    name: str
    neutral: float | str = 0.0
    needs: frozenset[str] = frozenset()
    categories: tuple[int, ...] | None = None
    fluency_echo: bool = False
    uses: tuple[tuple[str, str], ...] = ()
    contract_version: int | None = None

    def inputs(self, run_dir: Path) -> list[Path]:
        """Files besides the trajectories (and the policy, when needed) that the credit depends on."""
        return []

    def input_facts(self) -> dict[str, Any]:
        """Facts about the inputs read, for the signals stage's link record (after ``compute``)."""
        return {}


def check_contract(family: Any, *, source: str) -> None:
    """Refuse a family written for another version of the family contract.

    Raises
    ------
    InputError
        When ``family.contract_version`` is declared and is not :data:`FAMILY_CONTRACT_VERSION`
        (or is not an integer), naming the family (``source``) and what to install.
    """
    declared = getattr(family, "contract_version", None)
    if declared is None:
        return
    if isinstance(declared, bool) or not isinstance(declared, int):
        raise InputError(f"{source}: `contract_version` must be an integer (the family contract version the family "
                         f"was written for); got {declared!r}")
    if declared != FAMILY_CONTRACT_VERSION:
        from creditaudit import __version__

        raise InputError(
            f"{source}: written for family contract version {declared}, but creditaudit {__version__} implements "
            f"version {FAMILY_CONTRACT_VERSION} (creditaudit.signals.base.FAMILY_CONTRACT_VERSION); install a release "
            f"of the plugin written for version {FAMILY_CONTRACT_VERSION}, or a creditaudit implementing version "
            f"{declared}"
        )


def family_traits(family: Any, *, source: str) -> None:
    """Refuse a family object that does not declare what the audit needs (``TypeError`` naming it),
    or that was written for another contract version (:func:`check_contract`)."""
    check_contract(family, source=source)
    missing = [a for a in ("name", "neutral", "needs", "compute") if not hasattr(family, a)]
    if missing:
        raise TypeError(f"{source}: the family object {family!r} lacks {', '.join(missing)} (see CreditFamily)")
    neutral = family.neutral
    if not (neutral == "trajectory-mean" or (isinstance(neutral, (int, float)) and not isinstance(neutral, bool)
                                              and math.isfinite(neutral))):
        raise TypeError(f"{source}: `neutral` must be a finite number or 'trajectory-mean'; got {neutral!r}")
    unknown = set(family.needs) - NEEDS
    if unknown:
        raise TypeError(f"{source}: `needs` holds {sorted(unknown)}; allowed: {sorted(NEEDS)}")


def credit_frame(
    trajectories: Sequence[Trajectory], values: dict[tuple[str, int], float | None],
    reasons: dict[tuple[str, int], str] | None = None,
) -> pd.DataFrame:
    """Assemble a family's credit frame over every turn; a turn without a finite value must have
    a reason (a missing reason is a programming error, not an abstention)."""
    reasons = reasons or {}
    tids, turns, credit, why = [], [], [], []
    for traj in trajectories:
        for rec in traj.turns:
            key = (traj.trajectory_id, rec.turn)
            value = values.get(key)
            reason = reasons.get(key)
            if reason is None and (value is None or not math.isfinite(value)):
                raise RuntimeError(f"credit of {key} is {value!r} without an abstention reason")
            tids.append(traj.trajectory_id)
            turns.append(rec.turn)
            credit.append(float("nan") if reason is not None else float(value))
            why.append(reason)
    return pd.DataFrame({"trajectory_id": pd.Series(tids, dtype=object), "turn": np.asarray(turns, dtype=np.int32),
                         "credit": np.asarray(credit, dtype=float), "abstain_reason": pd.Series(why, dtype=object)})


def reasons_of(frame: pd.DataFrame) -> list[str | None]:
    """The ``abstain_reason`` column as a list with ``None`` for "no abstention" (whatever the
    pandas string dtype made of missing values)."""
    return [None if (r is None or (isinstance(r, float) and math.isnan(r)) or r is pd.NA) else str(r)
            for r in frame["abstain_reason"].tolist()]


def agreement_groups(families: Sequence[Any]) -> list[list[str]]:
    """Names of the families that share a categorical score set (``categories``), one list per set
    with at least two members: judge-vs-judge agreement is computed within each.

    Examples
    --------
    >>> class J(FamilyBase):
    ...     categories = (1, 0, -1)
    ...     def __init__(self, name): self.name = name
    >>> agreement_groups([J("a"), J("b"), FamilyBase()])
    [['a', 'b']]
    """
    groups: dict[tuple, list[str]] = {}
    for family in families:
        categories = getattr(family, "categories", None)
        if categories is not None:
            groups.setdefault(tuple(categories), []).append(family.name)
    return [names for names in groups.values() if len(names) >= 2]


def implemented_families() -> list[str]:
    """Installed family names (entry-point group ``creditaudit.families``)."""
    from creditaudit import plugins

    return plugins.names("family")


def make_family(spec: Any, *, source: str = "protocol") -> CreditFamily:
    """Build the family a protocol's signal section describes (``spec.family`` with ``spec.args``).

    Raises
    ------
    InputError
        When no installed distribution publishes the family: credit is never stubbed.
    TypeError
        When the factory returns an object that does not satisfy :class:`CreditFamily`.
    """
    from creditaudit import plugins

    try:
        plugin = plugins.get("family", spec.family)
    except ValueError as exc:
        raise InputError(
            f"{source}: signal {spec.name!r}: {exc}; credit is never stubbed — install it, or amend the protocol "
            "(`creditaudit protocol amend`) to drop it"
        ) from None
    family = plugin.create(spec.args, name=spec.name)
    family_traits(family, source=f"{source}: family {spec.family!r} ({plugin.distribution} {plugin.version})")
    return family
