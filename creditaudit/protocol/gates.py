"""The protocol's hypotheses: predicates over the audit's statistics table, the gates built from
them, and their decision order (docs/design.md §4; evaluated by :mod:`creditaudit.protocol.decision`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from creditaudit.protocol.fields import (
    AUDIT_STATISTICS,
    FreeText,
    Name,
    StrictModel,
    finite,
)

__all__ = ["Gate", "Predicate", "Compare", "AllOf", "AnyOf", "Not", "Overlaps", "Contains", "ContainsSpec", "Always", "HypothesesSection", "predicate_subjects"]

# --------------------------------------------------------------------------- predicates and gates

_SUBJECT = re.compile(r"^(self|shuffle\(self\)|inverted\(self\)|control:[a-z][a-z0-9_\-]*|family:[a-z][a-z0-9_\-]*)$")
Subject = Annotated[str, Field(pattern=_SUBJECT.pattern)]


class Compare(StrictModel):
    """``stat(of) cmp value``: compare a statistic of a subject with a constant."""

    stat: str
    """Statistic name (one of the audit's statistics)."""
    of: Subject = "self"
    """Subject: ``self``, ``shuffle(self)``, ``inverted(self)``, ``control:<name>``, ``family:<name>``."""
    cmp: Literal["<", "<=", ">", ">=", "==", "!="]
    """Comparator."""
    value: float
    """Threshold."""

    @field_validator("value")
    @classmethod
    def _finite_value(cls, v: float) -> float:
        return finite(v, "value")


class AllOf(StrictModel):
    """True when every member is true."""

    all: list["Predicate"] = Field(min_length=1)


class AnyOf(StrictModel):
    """True when at least one member is true."""

    any: list["Predicate"] = Field(min_length=1)


class Not(StrictModel):
    """Negation."""

    not_: "Predicate" = Field(alias="not")

    model_config = ConfigDict(populate_by_name=False)


class Overlaps(StrictModel):
    """True when the CIs ``[ci_low, ci_high]`` of two subjects intersect."""

    overlaps: list[Subject] = Field(min_length=2, max_length=2)


class ContainsSpec(StrictModel):
    of: Subject
    """Subject whose CI is tested."""
    value: float = 0.0
    """The value the interval must contain."""


class Contains(StrictModel):
    """True when the CI of a subject contains a value."""

    contains: ContainsSpec


class Always(StrictModel):
    """Always true: the catch-all last gate."""

    always: Literal[True]


def _predicate_tag(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return type(value).__name__
    if isinstance(value, dict):
        for key, tag in (
            ("stat", "Compare"),
            ("all", "AllOf"),
            ("any", "AnyOf"),
            ("not", "Not"),
            ("overlaps", "Overlaps"),
            ("contains", "Contains"),
            ("always", "Always"),
        ):
            if key in value:
                return tag
    return None


Predicate = Annotated[
    Union[
        Annotated[Compare, Tag("Compare")],
        Annotated[AllOf, Tag("AllOf")],
        Annotated[AnyOf, Tag("AnyOf")],
        Annotated[Not, Tag("Not")],
        Annotated[Overlaps, Tag("Overlaps")],
        Annotated[Contains, Tag("Contains")],
        Annotated[Always, Tag("Always")],
    ],
    Discriminator(
        _predicate_tag,
        custom_error_type="invalid_predicate",
        custom_error_message="a predicate is a mapping with one of the keys stat/all/any/not/overlaps/contains/always",
    ),
]

AllOf.model_rebuild()
AnyOf.model_rebuild()
Not.model_rebuild()


class Gate(StrictModel):
    """One gate of the decision order: when its predicate is true, it decides ``verdict``."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_\-]*$")]
    """Gate id used in ``decision_order``."""
    kind: Literal["controls", "feasibility", "effect"]
    """controls and feasibility gates must precede every effect gate."""
    verdict: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")]
    """Verdict recorded when the gate fires."""
    when: Predicate
    """Structured predicate (never evaluated Python)."""
    description: FreeText = ""
    """Free text; not part of the protocol id."""


def _default_gates() -> list[Gate]:
    return [
        Gate(
            id="Controls",
            kind="controls",
            verdict="INSTRUMENT_INVALID",
            when=Not.model_validate(
                {"not": {"all": [{"contains": {"of": "control:random", "value": 0.0}},
                                 {"contains": {"of": "control:uniform", "value": 0.0}}]}}
            ),
        ),
        Gate(
            id="INFEASIBLE",
            kind="feasibility",
            verdict="INFEASIBLE",
            when=AnyOf.model_validate(
                {"any": [{"stat": "n_trajectories", "of": "self", "cmp": "<", "value": 20.0},
                         {"stat": "n_pivotal_turns", "of": "self", "cmp": "<", "value": 30.0}]}
            ),
        ),
        Gate(id="H3", kind="effect", verdict="H3_PLACEBO", when=Overlaps(overlaps=["self", "shuffle(self)"])),
        Gate(
            id="H2",
            kind="effect",
            verdict="H2_REVERSED",
            when=AllOf.model_validate(
                {"all": [{"stat": "ci_high", "of": "self", "cmp": "<", "value": 0.0},
                         {"not": {"overlaps": ["self", "shuffle(self)"]}}]}
            ),
        ),
        Gate(id="H1", kind="effect", verdict="H1_TRACKS", when=Compare(stat="ci_low", of="self", cmp=">=", value=0.3)),
        Gate(id="H4", kind="effect", verdict="H4_WEAK", when=Always(always=True)),
    ]


class HypothesesSection(StrictModel):
    """The gates, their frozen decision order and the confirmatory tests."""

    gates: list[Gate] = Field(default_factory=_default_gates, min_length=1)
    """Gate definitions."""
    decision_order: list[str] = Field(
        default_factory=lambda: ["Controls", "INFEASIBLE", "H3", "H2", "H1", "H4"], min_length=1
    )
    """Order in which gates are evaluated; the first that fires decides."""
    confirmatory: list[Name] = Field(default_factory=list)
    """Families whose primary test enters the Holm correction (empty = every audited family)."""

    @model_validator(mode="after")
    def _check_order(self) -> "HypothesesSection":
        ids = [g.id for g in self.gates]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"gate ids must be unique; repeated: {', '.join(dupes)}")
        order = list(self.decision_order)
        repeated = sorted({i for i in order if order.count(i) > 1})
        if repeated:
            raise ValueError(f"`decision_order` repeats {', '.join(repeated)}")
        unknown = [i for i in order if i not in ids]
        if unknown:
            raise ValueError(f"`decision_order` names unknown gates: {', '.join(unknown)}")
        missing = [i for i in ids if i not in order]
        if missing:
            raise ValueError(f"`decision_order` omits gates: {', '.join(missing)}")
        kinds = {g.id: g.kind for g in self.gates}
        if "controls" not in kinds.values():
            raise ValueError("the decision order needs a `controls` gate")
        if "feasibility" not in kinds.values():
            raise ValueError("the decision order needs a `feasibility` (INFEASIBLE) gate")
        first_effect = next((k for k, i in enumerate(order) if kinds[i] == "effect"), None)
        if first_effect is not None:
            late = [i for i in order[first_effect:] if kinds[i] != "effect"]
            if late:
                raise ValueError(
                    f"`decision_order`: gate(s) {', '.join(late)} of kind controls/feasibility come after "
                    f"effect gate {order[first_effect]}; the controls gate and INFEASIBLE must precede every effect gate"
                )
        for gate in self.gates:
            for stat in _predicate_stats(gate.when):
                if stat not in AUDIT_STATISTICS:
                    raise ValueError(
                        f"gate {gate.id}: statistic {stat!r} is not produced by the audit; "
                        f"one of {sorted(AUDIT_STATISTICS)}"
                    )
        return self


def _predicate_stats(pred: Any) -> list[str]:
    if isinstance(pred, Compare):
        return [pred.stat]
    if isinstance(pred, (Overlaps, Contains)):
        return ["ci_low", "ci_high"]
    if isinstance(pred, AllOf):
        return [s for p in pred.all for s in _predicate_stats(p)]
    if isinstance(pred, AnyOf):
        return [s for p in pred.any for s in _predicate_stats(p)]
    if isinstance(pred, Not):
        return _predicate_stats(pred.not_)
    return []


def predicate_subjects(pred: Any) -> list[str]:
    """Every subject a predicate refers to."""
    if isinstance(pred, Compare):
        return [pred.of]
    if isinstance(pred, Overlaps):
        return list(pred.overlaps)
    if isinstance(pred, Contains):
        return [pred.contains.of]
    if isinstance(pred, AllOf):
        return [s for p in pred.all for s in predicate_subjects(p)]
    if isinstance(pred, AnyOf):
        return [s for p in pred.any for s in predicate_subjects(p)]
    if isinstance(pred, Not):
        return predicate_subjects(pred.not_)
    return []


