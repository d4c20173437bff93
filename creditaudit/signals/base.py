"""What every credit family shares: trajectories as read from collection (the record types of
:mod:`creditaudit.replay.records`, re-exported here), the credit contract, and the registry of
family factories.

A credit family is a registered factory (``registry("signal")``) whose keyword arguments are
exactly the constants its protocol section freezes; the object it returns satisfies
:class:`CreditFamily`: given a :class:`SignalContext` it returns a :class:`FamilyOutput`, one
credit (or an abstention with its reason) per collected turn, plus a diagnostics table. ProVer
and VICT slot in by registering a factory under their family name and returning the same
output; nothing else in the stage changes.
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
from creditaudit.protocol.schema import identity_dict
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.registry import registry
from creditaudit.replay.records import Trajectory, TurnRecord, trajectories_from_table

__all__ = [
    "CREDIT_SCHEMA",
    "TurnRecord",
    "Trajectory",
    "SignalContext",
    "FamilyOutput",
    "CreditFamily",
    "trajectories_from_table",
    "credit_frame",
    "reasons_of",
    "family_factory_kwargs",
    "make_family",
    "implemented_families",
]

#: Columns of ``signals/credit.parquet``: one row per (trajectory, turn, family or control).
CREDIT_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False),
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("family", pa.string(), nullable=False),
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


@runtime_checkable
class CreditFamily(Protocol):
    """A credit family: ``name`` (the protocol's signal name) and ``compute(context)``."""

    name: str

    def compute(self, context: SignalContext) -> FamilyOutput: ...


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


def family_factory_kwargs(spec: Any) -> dict[str, Any]:
    """The keyword arguments a signal section freezes (its identity view without ``family``)."""
    kwargs = identity_dict(spec)
    kwargs.pop("family", None)
    return kwargs


def implemented_families() -> list[str]:
    """Family names with a registered factory (importing the family modules registers them)."""
    from creditaudit.signals import advantages, confidence, implicit, judge, prover, vict  # noqa: F401  (registration)

    return registry("signal").names()


def make_family(spec: Any, *, source: str = "protocol") -> CreditFamily:
    """Build the family a protocol's signal section describes.

    Raises
    ------
    InputError
        When no factory is registered for the section's family (a family whose module is not
        installed): credit is never stubbed.
    """
    names = implemented_families()
    if spec.family not in names:
        raise InputError(
            f"{source}: signal {spec.name!r} is of family {spec.family!r}, which this version of "
            f"`creditaudit signals` does not implement (implemented: {', '.join(names)}); credit is never "
            "stubbed — amend the protocol (`creditaudit protocol amend`) to drop it, or use a version "
            "that implements it"
        )
    family = registry("signal").create(spec.family, **family_factory_kwargs(spec))
    if not isinstance(family, CreditFamily):
        raise TypeError(f"signal factory {spec.family!r} returned {family!r}, which lacks `name`/`compute`")
    return family
