"""The decision engine: structured predicates over a statistics table, in the frozen order.

For each family the gates are evaluated in ``decision_order``; the first gate whose predicate is
true decides the verdict. Every gate is evaluated and recorded with its inputs and outcome, and
whether the decision reached it.

Missing values: a statistic that is NaN (or None) makes a comparison *unknown*; ``all``/``any``/
``not`` follow Kleene's three-valued logic, and a gate whose predicate is unknown does not fire.
An effect verdict never rests on an unknown earlier gate: if any gate before the deciding effect
gate was unknown, the verdict is ``UNDETERMINED`` (decided by that gate). A controls or
feasibility gate that fires stands regardless (it only withholds an effect verdict).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.schema import (
    AllOf,
    Always,
    AnyOf,
    Compare,
    Contains,
    Gate,
    HypothesesSection,
    Not,
    Overlaps,
    Protocol,
)

__all__ = ["UNDETERMINED", "GateResult", "Decision", "evaluate_predicate", "decide", "decide_all"]

UNDETERMINED = "UNDETERMINED"

_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


@dataclass(frozen=True)
class GateResult:
    """One gate's evaluation: ``outcome`` is True (fired), False, or None (unknown)."""

    gate_id: str
    kind: str
    verdict: str
    outcome: bool | None
    reached: bool
    inputs: dict[str, float | None]
    trace: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate": self.gate_id,
            "kind": self.kind,
            "verdict_if_fired": self.verdict,
            "outcome": {True: "fired", False: "not fired", None: "unknown"}[self.outcome],
            "reached": self.reached,
            "inputs": dict(self.inputs),
            "trace": self.trace,
        }


@dataclass(frozen=True)
class Decision:
    """A family's verdict with the trace of every gate."""

    family: str
    verdict: str
    decided_by: str | None
    gates: tuple[GateResult, ...]
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "verdict": self.verdict,
            "decided_by": self.decided_by,
            "reason": self.reason,
            "gates": [g.to_dict() for g in self.gates],
        }


@dataclass
class _Context:
    family: str
    table: Mapping[str, Mapping[str, Any]]
    aliases: Mapping[str, str]
    inputs: dict[str, float | None] = field(default_factory=dict)

    def subject_key(self, subject: str) -> str:
        if subject == "self":
            return self.family
        if subject in self.aliases:
            return self.aliases[subject]
        if subject.startswith("control:"):
            return subject[len("control:"):]
        if subject.startswith("family:"):
            return subject[len("family:"):]
        raise InputError(f"predicate subject {subject!r} cannot be resolved for family {self.family!r}")

    def value(self, subject: str, stat: str) -> float | None:
        key = self.subject_key(subject)
        if key not in self.table:
            raise InputError(
                f"the statistics table has no row for subject {subject!r} ({key!r}) needed by family "
                f"{self.family!r}; the audit must compute every control the gates name"
            )
        row = self.table[key]
        if stat not in row:
            raise InputError(f"the statistics table lacks `{stat}` for subject {key!r}")
        raw = row[stat]
        value = None if raw is None else float(raw)
        if value is not None and math.isnan(value):
            value = None
        self.inputs[f"{key}.{stat}"] = value
        return value


def _kleene_all(values: list[bool | None]) -> bool | None:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _kleene_any(values: list[bool | None]) -> bool | None:
    if any(v is True for v in values):
        return True
    return None if any(v is None for v in values) else False


def evaluate_predicate(pred: Any, ctx: _Context) -> tuple[bool | None, dict[str, Any]]:
    """Evaluate one predicate; returns (outcome, trace)."""
    if isinstance(pred, Compare):
        value = ctx.value(pred.of, pred.stat)
        outcome = None if value is None else bool(_OPS[pred.cmp](value, pred.value))
        return outcome, {"compare": f"{pred.of}.{pred.stat} {pred.cmp} {pred.value!r}", "value": value, "result": outcome}
    if isinstance(pred, Overlaps):
        a, b = pred.overlaps
        lo_a, hi_a, lo_b, hi_b = (ctx.value(a, "ci_low"), ctx.value(a, "ci_high"), ctx.value(b, "ci_low"), ctx.value(b, "ci_high"))
        if None in (lo_a, hi_a, lo_b, hi_b):
            outcome = None
        else:
            outcome = bool(lo_a <= hi_b and lo_b <= hi_a)
        return outcome, {
            "overlaps": [a, b],
            "intervals": [[lo_a, hi_a], [lo_b, hi_b]],
            "result": outcome,
        }
    if isinstance(pred, Contains):
        spec = pred.contains
        lo, hi = ctx.value(spec.of, "ci_low"), ctx.value(spec.of, "ci_high")
        outcome = None if lo is None or hi is None else bool(lo <= spec.value <= hi)
        return outcome, {"contains": spec.of, "interval": [lo, hi], "value": spec.value, "result": outcome}
    if isinstance(pred, AllOf):
        parts = [evaluate_predicate(p, ctx) for p in pred.all]
        outcome = _kleene_all([o for o, _ in parts])
        return outcome, {"all": [t for _, t in parts], "result": outcome}
    if isinstance(pred, AnyOf):
        parts = [evaluate_predicate(p, ctx) for p in pred.any]
        outcome = _kleene_any([o for o, _ in parts])
        return outcome, {"any": [t for _, t in parts], "result": outcome}
    if isinstance(pred, Not):
        inner, trace = evaluate_predicate(pred.not_, ctx)
        outcome = None if inner is None else not inner
        return outcome, {"not": trace, "result": outcome}
    if isinstance(pred, Always):
        return True, {"always": True, "result": True}
    raise TypeError(f"unknown predicate type {type(pred).__name__}")  # pragma: no cover - schema forbids it


def decide(
    hypotheses: HypothesesSection,
    *,
    family: str,
    table: Mapping[str, Mapping[str, Any]],
    aliases: Mapping[str, str] | None = None,
) -> Decision:
    """Decide one family's verdict through the frozen decision order.

    Parameters
    ----------
    hypotheses : HypothesesSection
        The frozen gates and order.
    family : str
        The family decided (``self`` in predicates); a key of ``table``.
    table : mapping
        Statistics by subject name (families and controls) and statistic name.
    aliases : mapping, optional
        Resolution of derived subjects, e.g. ``{"shuffle(self)": "shuffle-implicit"}``.
    """
    ctx_aliases = dict(aliases or {})
    gates: dict[str, Gate] = {g.id: g for g in hypotheses.gates}
    results: list[GateResult] = []
    for gate_id in hypotheses.decision_order:
        gate = gates[gate_id]
        ctx = _Context(family, table, ctx_aliases)
        outcome, trace = evaluate_predicate(gate.when, ctx)
        results.append(GateResult(gate.id, gate.kind, gate.verdict, outcome, False, ctx.inputs, trace))

    verdict, decided_by, reason, decided_at = UNDETERMINED, None, "no gate fired", len(results) - 1
    first_unknown: int | None = None
    for index, result in enumerate(results):
        if result.outcome is None and first_unknown is None:
            first_unknown = index
        if result.outcome is True:
            decided_at = index
            if result.kind == "effect" and first_unknown is not None:
                unknown = results[first_unknown]
                verdict, decided_by = UNDETERMINED, unknown.gate_id
                reason = (
                    f"gate {unknown.gate_id} could not be evaluated (missing/NaN inputs: "
                    f"{', '.join(k for k, v in unknown.inputs.items() if v is None)}); an effect verdict "
                    "cannot rest on it"
                )
            else:
                verdict, decided_by, reason = result.verdict, result.gate_id, f"gate {result.gate_id} fired"
            break
    gates_out = tuple(
        GateResult(r.gate_id, r.kind, r.verdict, r.outcome, i <= decided_at, r.inputs, r.trace)
        for i, r in enumerate(results)
    )
    return Decision(family, verdict, decided_by, gates_out, reason)


def decide_all(protocol: Protocol, table: Mapping[str, Mapping[str, Any]], families: list[str] | None = None) -> dict[str, Decision]:
    """Decide every audited family of ``protocol`` (or ``families``)."""
    out = {}
    for family in families or [s.name for s in protocol.signals]:
        aliases = {}
        for kind in ("shuffle", "inverted"):
            try:
                aliases[f"{kind}(self)"] = protocol.control_of(family, kind)
            except KeyError:
                pass
        out[family] = decide(protocol.hypotheses, family=family, table=table, aliases=aliases)
    return out
