"""Ledger entries of the fidelity audit: statistics, Holm, verdicts with gate traces, fluency echo.

Recomputed from the raw tables — the credit table, the replay turn table and the collected turns
(fluency) — with the audit's own :func:`~creditaudit.audit.core.audit_tables` (same exclusions,
same named seed streams, same decision engine), never read from ``audit/audit.json``: the
ledger's numbers and the audit stage's agree because they are the same computation, not because
one copies the other.
"""

from __future__ import annotations

from typing import Any

from creditaudit.ledger.producer import ProducerContext, Value, producer, stage_ran

__all__ = ["audit_entries", "gate_inputs_text"]

_STAT_FORMATS = {
    "estimate": "+.3f", "ci_low": "+.3f", "ci_high": "+.3f", "p_value": ".3g", "p_holm": ".3g",
    "sign_agreement": ".3f", "sign_ci_low": ".3f", "sign_ci_high": ".3f",
    "lift": ".3f", "lift_ci_low": ".3f", "lift_ci_high": ".3f", "ci_level": ".4g",
    "sign_agreement_resolved": ".3f", "sign_agreement_resolved_ci_low": ".3f", "sign_agreement_resolved_ci_high": ".3f",
    "lift_resolved": ".3f", "lift_resolved_ci_low": ".3f", "lift_resolved_ci_high": ".3f",
}


def _stat_text(stat: str, value: Any) -> str:
    if value is None:
        return "undefined"
    if stat.startswith("n_"):
        return str(int(value))
    return format(value, _STAT_FORMATS.get(stat, ".4g"))


def gate_inputs_text(inputs: dict[str, Any]) -> str:
    """``subject.stat = value`` for every input a gate read (``none`` when it read nothing).

    Examples
    --------
    >>> gate_inputs_text({"implicit.ci_low": 0.12345, "implicit.n_trajectories": 12.0, "random.ci_high": None})
    'implicit.ci_low = +0.123, implicit.n_trajectories = 12, random.ci_high = undefined'
    """
    parts = []
    for key, value in inputs.items():
        stat = key.rsplit(".", 1)[-1]
        parts.append(f"{key} = {_stat_text(stat, value)}")
    return ", ".join(parts) or "none"


@producer("audit", inputs=("signals.credit", "replay.turns", "collect.trajectories"), version=2,
          when=stage_ran("replay", "replay.turns"),
          description="Fidelity statistics of every family and control, Holm, verdicts with gate traces, fluency echo.")
def audit_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.audit.core import audit_tables, verdict_sentence

    protocol = ctx.protocol
    credit = ctx.table("signals.credit").to_pandas()
    replay = ctx.table("replay.turns").to_pandas()
    fluency = (ctx.table("collect.trajectories").select(["trajectory_id", "turn", "mean_logprob"]).to_pandas()
               .rename(columns={"mean_logprob": "fluency"}))
    result = audit_tables(credit, replay, protocol=protocol, protocol_id=ctx.protocol_id, fluency=fluency)
    out: list[Value] = []

    for name, s in result.subjects.items():
        p = f"audit.{name}"
        row = s.to_dict()
        out += [Value(f"{p}.kind", s.kind), Value(f"{p}.of", s.of, text=s.of or "—")]
        for stat, value in row.items():  # every statistic the audit reports, so a new one is recomputed too
            if stat in ("subject", "kind", "of", "note"):
                continue
            if stat.startswith("n_") or stat.startswith("sign_n_") or "_n_" in stat:
                out.append(Value(f"{p}.{stat}", int(value), "d"))
            else:
                out.append(Value(f"{p}.{stat}", value, _STAT_FORMATS.get(stat, ".4g")))
        out.append(Value(f"{p}.note", s.note, text=s.note or "—"))

    holm = result.holm
    out.append(Value("audit.holm.alpha", holm["alpha"], "g"))
    for family, raw, adjusted, rejected, undefined in zip(holm["family"], holm["pvalues"], holm["adjusted"],
                                                          holm["rejected"], holm["undefined_as_one"]):
        out += [
            Value(f"audit.holm.{family}.p_value", None if undefined else raw, ".3g"),
            Value(f"audit.holm.{family}.p_adjusted", adjusted, ".3g"),
            Value(f"audit.holm.{family}.rejected", bool(rejected)),
        ]

    for family, decision in result.decisions.items():
        p = f"verdict.{family}"
        out += [
            Value(p, decision.verdict),
            Value(f"{p}.decided_by", decision.decided_by, text=decision.decided_by or "—"),
            Value(f"{p}.reason", decision.reason, text=decision.reason or "—"),
            Value(f"{p}.sentence", verdict_sentence(decision, result.subjects[family], protocol)),
        ]
        for gate in decision.gates:
            g = gate.to_dict()
            out += [
                Value(f"{p}.gate.{gate.gate_id}.outcome", g["outcome"]),
                Value(f"{p}.gate.{gate.gate_id}.reached", bool(g["reached"])),
                Value(f"{p}.gate.{gate.gate_id}.inputs", dict(g["inputs"]), text=gate_inputs_text(g["inputs"])),
                Value(f"{p}.gate.{gate.gate_id}.trace", g["trace"], text=g["outcome"]),
            ]

    ex = result.exclusions
    by_status = dict(ex["excluded_turns_by_status"])
    out += [
        Value("audit.exclusions.n_trajectories", ex["n_trajectories"], "d"),
        Value("audit.exclusions.n_degenerate_trajectories", ex["n_degenerate_trajectories"], "d"),
        Value("audit.exclusions.degenerate_trajectories", list(ex["degenerate_trajectories"]),
              text=", ".join(ex["degenerate_trajectories"]) or "none"),
        Value("audit.exclusions.n_turns", ex["n_turns"], "d"),
        Value("audit.exclusions.n_included_turns", ex["n_included_turns"], "d"),
        Value("audit.exclusions.excluded_turns_by_status", by_status,
              text=", ".join(f"{k} {v}" for k, v in sorted(by_status.items())) or "none"),
        Value("audit.exclusions.n_complete_turns_in_degenerate_trajectories",
              ex["n_complete_turns_in_degenerate_trajectories"], "d"),
    ]

    f = result.fluency
    out.append(Value("audit.fluency.available", f is not None))
    if f is not None:
        echo = f["echo"]
        ci = echo.get("ci") or (None, None)
        reg = f.get("regression") or {}
        par = f.get("partial") or {}
        out += [
            Value("audit.fluency.family", f["family"]),
            Value("audit.fluency.n_turns", f["n_turns"], "d"),
            Value("audit.fluency.echo", echo.get("estimate"), "+.3f"),
            Value("audit.fluency.echo_ci_low", ci[0], "+.3f"),
            Value("audit.fluency.echo_ci_high", ci[1], "+.3f"),
            Value("audit.fluency.echo_n_trajectories", echo.get("n_trajectories"), "d"),
            Value("audit.fluency.beta_fluency", reg.get("beta_fluency"), "+.3f"),
            Value("audit.fluency.beta_a_replay", reg.get("beta_a_replay"), "+.3f"),
            Value("audit.fluency.r_squared", reg.get("r_squared"), ".3f"),
            Value("audit.fluency.partial_r", par.get("r"), "+.3f"),
            Value("audit.fluency.partial_p", par.get("p"), ".3g"),
            Value("audit.fluency.partial_n", par.get("n"), "d"),
        ]
        shuffle = f.get("shuffle_echo")
        if shuffle is not None:
            sci = shuffle.get("ci") or (None, None)
            out += [
                Value("audit.fluency.shuffle_echo", shuffle.get("estimate"), "+.3f"),
                Value("audit.fluency.shuffle_echo_ci_low", sci[0], "+.3f"),
                Value("audit.fluency.shuffle_echo_ci_high", sci[1], "+.3f"),
            ]
    return out
