"""Ledger entries of the frozen protocol: settings, gate rules, decision order, deviations.

Read from the lock (the protocol as frozen, signed) and the registry; nothing here is computed
from data, but the report takes every threshold it prints from these entries so that no number
is typed into a template.
"""

from __future__ import annotations

import json
from typing import Any

from creditaudit.ledger.producer import ProducerContext, Value, producer

__all__ = ["predicate_text", "protocol_entries"]


def _subject(subject: str) -> str:
    return subject


def predicate_text(pred: Any) -> str:
    """A gate's predicate as one line (``self.ci_low >= 0.3``; ``overlaps(self, shuffle(self))``).

    Examples
    --------
    >>> from creditaudit.protocol.schema import Compare
    >>> predicate_text(Compare(stat="ci_low", of="self", cmp=">=", value=0.3))
    'self.ci_low >= 0.3'
    """
    from creditaudit.protocol.schema import AllOf, Always, AnyOf, Compare, Contains, Not, Overlaps

    if isinstance(pred, Compare):
        return f"{_subject(pred.of)}.{pred.stat} {pred.cmp} {pred.value:g}"
    if isinstance(pred, Overlaps):
        a, b = pred.overlaps
        return f"overlaps({a}, {b})"
    if isinstance(pred, Contains):
        return f"{pred.contains.of} CI contains {pred.contains.value:g}"
    if isinstance(pred, AllOf):
        return " and ".join(_wrap(p) for p in pred.all)
    if isinstance(pred, AnyOf):
        return " or ".join(_wrap(p) for p in pred.any)
    if isinstance(pred, Not):
        return f"not {_wrap(pred.not_)}"
    if isinstance(pred, Always):
        return "always"
    raise TypeError(f"unknown predicate {pred!r}")  # pragma: no cover - the schema admits no other


def _wrap(pred: Any) -> str:
    from creditaudit.protocol.schema import AllOf, AnyOf

    text = predicate_text(pred)
    return f"({text})" if isinstance(pred, (AllOf, AnyOf)) else text


def _deviation_text(change: dict[str, Any]) -> str:
    show = (lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    return f"{change['path']}: {show(change.get('old'))} -> {show(change.get('new'))}"


def _rho_min(protocol: Any) -> float | None:
    """The threshold of the 'tracks contribution' gate when it is a plain ``self.ci_low >= value``."""
    from creditaudit.protocol.schema import Compare

    for gate in protocol.hypotheses.gates:
        if gate.verdict == "H1_TRACKS" and isinstance(gate.when, Compare) and gate.when.stat == "ci_low":
            return float(gate.when.value)
    return None


@producer("protocol", inputs=("registry",), optional=("registry",), version=2,
          description="The frozen protocol's settings, gate rules, decision order and deviations (from the lock).")
def protocol_entries(ctx: ProducerContext) -> list[Value]:
    protocol, lock = ctx.protocol, ctx.frozen.lock
    stats, excl, replay = protocol.statistics, protocol.exclusions, protocol.replay
    families = [s.name for s in protocol.signals]
    controls = [c.name for c in protocol.controls]
    out = [
        Value("protocol.id", ctx.protocol_id),
        Value("protocol.name", protocol.name),
        Value("protocol.freeze_time", lock.freeze_time),
        Value("protocol.frozen_by", lock.tool_version, text=f"creditaudit {lock.tool_version}"),
        Value("protocol.environment", protocol.environment.name),
        Value("protocol.families", families, text=", ".join(families)),
        Value("protocol.family_kinds", {s.name: s.family for s in protocol.signals},
              text=", ".join(f"{s.name} ({s.family})" for s in protocol.signals)),
        Value("protocol.controls", controls, text=", ".join(controls) or "none"),
        Value("protocol.null_controls", [c.name for c in protocol.controls if c.null_control],
              text=", ".join(c.name for c in protocol.controls if c.null_control) or "none"),
        Value("protocol.confirmatory", list(protocol.hypotheses.confirmatory) or families,
              text=", ".join(protocol.hypotheses.confirmatory or families)),
        Value("protocol.decision_order", list(protocol.hypotheses.decision_order),
              text=" → ".join(protocol.hypotheses.decision_order)),
        Value("protocol.statistics.bootstrap_iterations", stats.bootstrap_iterations, "d"),
        Value("protocol.statistics.ci_level", stats.ci_level, ".0%"),
        Value("protocol.statistics.alpha", stats.alpha, "g"),
        Value("protocol.statistics.bootstrap_method", stats.bootstrap_method),
        Value("protocol.statistics.top_k_fraction", stats.top_k_fraction, ".0%"),
        Value("protocol.statistics.equivalence_band", stats.equivalence_band, "g"),
        Value("protocol.statistics.permutations", stats.permutations, "d"),
        Value("protocol.exclusions.min_complete_turns", excl.min_complete_turns, "d"),
        Value("protocol.exclusions.min_trajectories", excl.min_trajectories, "d"),
        Value("protocol.exclusions.min_pivotal_turns", excl.min_pivotal_turns, "d"),
        Value("protocol.exclusions.format_collapse_threshold", excl.format_collapse_threshold, "g"),
        Value("protocol.replay.n_fact", replay.n_fact, "d"),
        Value("protocol.replay.n_alternatives", replay.n_alternatives, "d"),
        Value("protocol.replay.n_alt", replay.n_alt, "d"),
        Value("protocol.replay.max_alt_draws", replay.max_alt_draws, "d"),
        Value("protocol.replay.alt_temperature", replay.alt_temperature, "g"),
        Value("protocol.replay.resolution_level", 1 - replay.resolution_alpha, ".0%"),
        Value("protocol.collection.n_tasks", protocol.collection.n_tasks, "d"),
        Value("protocol.collection.group_size", protocol.collection.group_size, "d"),
        Value("protocol.policy.temperature", protocol.policy.temperature, "g"),
        Value("protocol.policy.source", protocol.policy.source),
        Value("protocol.environment.horizon", protocol.environment.horizon, "d"),
        Value("protocol.router.present", protocol.router is not None),
    ]
    if protocol.router is not None:  # the router is optional: a protocol without one names no families for it
        out += [
            Value("protocol.router.confidence_family", protocol.router.confidence_family),
            Value("protocol.router.judge_family", protocol.router.judge_family),
            Value("protocol.router.routed_share", protocol.router.routed_share, ".3f"),
        ]
    if protocol.policy.source == "builtin":  # the embedded default's size, for comparisons with the papers' models
        build = protocol.policy.build
        out += [
            Value("protocol.policy.build.num_layers", build.num_layers, "d"),
            Value("protocol.policy.build.hidden_size", build.hidden_size, "d"),
            Value("protocol.policy.build.num_heads", build.num_heads, "d"),
            Value("protocol.policy.build.train_games", build.train_games, "d"),
        ]
    for signal in protocol.signals:
        out.append(Value(f"protocol.signal.{signal.name}.args", dict(signal.args),
                         text=", ".join(f"{k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(signal.args.items()))
                         or "defaults"))
    rho_min = _rho_min(protocol)
    out.append(Value("protocol.rho_min", rho_min, "g"))
    for gate in protocol.hypotheses.gates:
        out += [
            Value(f"protocol.gate.{gate.id}.rule", predicate_text(gate.when)),
            Value(f"protocol.gate.{gate.id}.verdict", gate.verdict),
            Value(f"protocol.gate.{gate.id}.kind", gate.kind),
        ]

    # deviations: an amendment names its parent, its reason and every field it changed
    deviations = [dict(d) for d in lock.deviations]
    for index, change in enumerate(deviations):
        out.append(Value(f"protocol.deviation.{index}", change, text=_deviation_text(change)))
    out += [
        Value("protocol.parent_id", lock.parent_id, text=lock.parent_id or "none (an original protocol)"),
        Value("protocol.amendment_reason", lock.amendment_reason, text=lock.amendment_reason or "none"),
        Value("protocol.deviations", deviations,
              text="; ".join(_deviation_text(d) for d in deviations) or "none"),
        Value("protocol.n_deviations", len(deviations), "d"),
    ]
    from creditaudit.protocol.lock import read_registry

    entries = read_registry(ctx.run_dir / "registry.jsonl") if ctx.files("registry") else []
    by_id = {e.protocol_id: e for e in entries}
    lineage, current, seen = [], ctx.protocol_id, set()
    while current in by_id and current not in seen:  # this protocol and its ancestors, newest first
        seen.add(current)
        entry = by_id[current]
        lineage.append({"protocol_id": entry.protocol_id, "kind": entry.kind, "parent_id": entry.parent_id,
                        "reason": entry.reason, "protocol_file": entry.protocol_file})
        current = entry.parent_id
    out.append(Value(
        "protocol.lineage", lineage,
        text="; ".join(f"{e['protocol_file']} {e['protocol_id'][:16]}… ({e['kind']}"
                       + (f": {e['reason']}" if e["reason"] else "") + ")" for e in lineage) or "not registered here",
    ))
    return out
