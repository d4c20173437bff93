"""Ledger entries of ProVer's and VICT's own figures, recomputed from their diagnostics tables.

``signals/diagnostics/<signal>.parquet`` is raw and attested; ``signals/summary.json`` is derived
and never read. For every protocol signal of family ``prover``: the judge-ablation table, one row
per proposer (the signal's own and those named in its ``compare`` argument), with the acceptance
rate's Wilson interval (statsmodels). For every signal of family ``vict``: conformance, proof
coverage, trajectory abstention and the nonzero shares, with the family's own
:func:`~creditaudit.signals.families.vict.family.diagnostics_report`.
"""

from __future__ import annotations

from creditaudit.ledger.producer import ProducerContext, Value, producer

__all__ = ["prover_entries", "vict_entries"]


def _diagnostics(ctx: ProducerContext, signal: str):
    return ctx.table("signals.diagnostics", f"signals/diagnostics/{signal}.parquet")


def _names(ctx: ProducerContext, family: str) -> list[str]:
    return [s.name for s in ctx.protocol.signals if s.family == family]


def _values(key: str, figures: dict, formats: dict[str, str]) -> list[Value]:
    """One entry ``<key>.<field>`` per field of ``formats``, formatted with its spec."""
    return [Value(f"{key}.{field}", figures[field], spec) for field, spec in formats.items()]


#: ProVer's per-proposer figures and their formats.
PROVER_FIELDS = {"n_groups": "d", "n_eligible": "d", "n_measured": "d", "n_accepted": "d",
                 "acceptance_rate": ".3f", "acceptance_ci_low": ".3f", "acceptance_ci_high": ".3f",
                 "mean_segment_length": ".2f", "mean_delta": "+.3f"}
#: VICT's per-signal figures (besides the abstention reasons) and their formats.
VICT_FIELDS = {"n_trajectories": "d", "conformance_checked": "d", "conformance_rate": ".3f",
               "proof_coverage": ".3f", "trajectory_abstention_share": ".3f",
               "nonzero_trajectory_share": ".3f", "nonzero_action_share": ".4f"}


@producer("prover", inputs=("signals.diagnostics",), version=1,
          description="ProVer's judge-ablation table: acceptance and segment length per proposer, same groups and seeds.")
def prover_entries(ctx: ProducerContext) -> list[Value]:
    from statsmodels.stats.proportion import proportion_confint

    from creditaudit.signals.families.prover import table_row

    names = _names(ctx, "prover")
    out = [Value("prover.signals", names, text=", ".join(names) or "none")]
    level = ctx.protocol.statistics.ci_level
    for name in names:
        frame = _diagnostics(ctx, name).to_pandas()
        proposers = list(dict.fromkeys(frame.proposer))
        out.append(Value(f"prover.{name}.proposers", proposers, text=", ".join(proposers)))
        for proposer in proposers:
            row = table_row(proposer, frame[frame.proposer == proposer])
            lo, hi = ((None, None) if not row["n_measured"] else
                      proportion_confint(row["n_accepted"], row["n_measured"], alpha=1 - level, method="wilson"))
            out += _values(f"prover.{name}.{proposer}",
                           {**row, "acceptance_ci_low": lo, "acceptance_ci_high": hi}, PROVER_FIELDS)
    return out


@producer("vict", inputs=("signals.diagnostics",), version=1,
          description="VICT's conformance, proof coverage, trajectory abstention and nonzero-correction shares.")
def vict_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.signals.families.vict.family import diagnostics_report

    names = _names(ctx, "vict")
    out = [Value("vict.signals", names, text=", ".join(names) or "none")]
    for name in names:
        report = diagnostics_report(_diagnostics(ctx, name))
        reasons = report["trajectory_abstention_reasons"]
        out += _values(f"vict.{name}", report, VICT_FIELDS)
        out.append(Value(f"vict.{name}.trajectory_abstention_reasons", reasons,
                         text=", ".join(f"{k} ({v})" for k, v in reasons.items()) or "none"))
    return out
