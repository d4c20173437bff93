"""The protocol schema's building blocks: the task types, the audit's gate statistics, the
identity markers (:data:`NON_IDENTITY`, :data:`ADDED_LATER`), the strict base model every section
derives from, and the validators the sections share.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

__all__ = ["TASK_TYPES", "GATE_STATISTICS", "AUDIT_STATISTICS", "NON_IDENTITY", "ADDED_LATER", "FreeText", "Sha256", "Name", "StrictModel", "finite", "no_repeats", "resolve_plugin"]

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: Statistics the audit produces for every subject (a family or a control), in the order of its
#: statistics table -- the one list of them: the audit builds each subject's row of the table the
#: gates read from exactly these names (:meth:`creditaudit.audit.fidelity.SubjectStats.gate_row`,
#: ``p_holm`` added by :func:`creditaudit.audit.core.audit_tables`), and a predicate naming anything
#: else is rejected when the protocol is validated.
GATE_STATISTICS = (
    "estimate",  # median within-trajectory Spearman(credit, A_replay)
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",  # Holm-adjusted p_value across the confirmatory families (null for a control)
    "n_trajectories",
    "n_included_turns",
    "n_pivotal_turns",
    "sign_agreement",
    "sign_ci_low",
    "sign_ci_high",
    "lift",
    "lift_ci_low",
    "lift_ci_high",
    # the same on resolved-pivotal turns (the turn's A_replay interval excludes 0, docs/design.md §3)
    "n_resolved_pivotal_turns",
    "sign_agreement_resolved",
    "sign_agreement_resolved_ci_low",
    "sign_agreement_resolved_ci_high",
    "lift_resolved",
    "lift_resolved_ci_low",
    "lift_resolved_ci_high",
)
AUDIT_STATISTICS = frozenset(GATE_STATISTICS)


class _NonIdentity:
    """Marker: this field is free text and does not enter the protocol id."""

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "NonIdentity"


NON_IDENTITY = _NonIdentity()

#: Free text (descriptions, notes): recorded in the lock, excluded from the protocol id.
FreeText = Annotated[str, NON_IDENTITY]


class _AddedLater:
    """Marker: a field added to schema version 1 after protocols were frozen under it. It enters
    the protocol id only when it differs from its default, so a protocol frozen before the field
    existed keeps its id (and its lock verifies). The default must be the behaviour the code had
    before the field existed, and it never changes."""

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return "AddedLater"


ADDED_LATER = _AddedLater()

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_\-]*$", max_length=64)]


class StrictModel(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )


def finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite")
    return value


def no_repeats(values: list) -> list:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"values must not repeat; repeated: {', '.join(repeated)}")
    return values




def resolve_plugin(kind: str, name: str):
    """The installed plugin ``name`` of ``kind`` (:func:`creditaudit.plugins.get`)."""
    from creditaudit import plugins

    return plugins.get(kind, name)
