"""The fidelity audit as a pure function of tables: statistics, Holm, verdicts, fluency echo.

:func:`audit_tables` takes the long credit table (one row per trajectory, turn and subject),
the replay turn table and the collected turns (for fluency), and returns an :class:`AuditResult`.
Nothing is decided outside the protocol's decision engine: every family's verdict comes from
:func:`creditaudit.protocol.decide_all` over the statistics table, with the trace of every gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from creditaudit.audit.fidelity import SubjectStats, included_turns, neutral_value, null_control_level, subject_statistics
from creditaudit.audit.measurability import degenerate_trajectories
from creditaudit.errors import InputError
from creditaudit.protocol.decision import Decision, decide_all
from creditaudit.protocol.schema import Protocol
from creditaudit.protocol.seeds import rng as stream_rng

__all__ = ["AuditResult", "audit_tables", "fluency_echo", "verdict_sentence"]


@dataclass
class AuditResult:
    """Everything the audit computed (serialised by the stage into ``audit/audit.json``)."""

    subjects: dict[str, SubjectStats]
    decisions: dict[str, Decision]
    holm: dict[str, Any]
    exclusions: dict[str, Any]
    fluency: dict[str, Any] | None = None
    table: dict[str, dict[str, float | None]] = field(default_factory=dict)


def _subjects(protocol: Protocol) -> list[tuple[str, str, str | None, str]]:
    """(name, kind, of, stream) of every subject; ``stream`` names the subject's seed streams by its
    place in the protocol (``signal/<i>``, ``control/<j>``), never by its name."""
    out = [(s.name, "family", None, f"signal/{i}") for i, s in enumerate(protocol.signals)]
    out += [(c.name, c.kind, c.of, f"control/{j}") for j, c in enumerate(protocol.controls)]
    return out


def family_objects(protocol: Protocol) -> dict[str, Any]:
    """Every signal's family object (what it declares: ``neutral``, ``fluency_echo`` ...), by signal name."""
    from creditaudit.signals.base import make_family

    return {s.name: make_family(s) for s in protocol.signals}


def _check_shares_turns(control: str, rows: pd.DataFrame, family: pd.DataFrame, of: str) -> None:
    """A derived control (shuffle, inverted) abstains exactly where its family does: the two are
    audited on one set of turns (refused otherwise, naming the first turn that differs)."""
    merged = rows.merge(family, on=["trajectory_id", "turn"], how="outer", suffixes=("", "_family"),
                        indicator=True)
    differ = merged[(merged["_merge"] != "both") | (merged["abstained"] != merged["abstained_family"])]
    if len(differ):
        first = differ.sort_values(["trajectory_id", "turn"]).iloc[0]
        raise InputError(
            f"the credit table: control {control!r} and its family {of!r} do not share their turns "
            f"({len(differ)} turn(s) differ, first trajectory {first.trajectory_id!r} turn {int(first.turn)}); a "
            "control is audited on exactly its family's turns -- rerun `creditaudit signals`"
        )


def fluency_echo(
    credit: pd.DataFrame,
    shuffled: pd.DataFrame | None,
    included: pd.DataFrame,
    fluency: pd.DataFrame,
    *,
    protocol: Protocol,
    protocol_id: str,
    family: str,
    stream: str | None = None,
) -> dict[str, Any]:
    """T3: does implicit credit echo the action's fluency (mean policy log-prob)?

    Median within-trajectory Spearman(credit, fluency) with its CI (and the same for the family's
    shuffle control); the standardised joint regression of credit on fluency and A_replay; the
    partial correlation of credit and A_replay given fluency — all on the included turns. The
    bootstrap streams are ``audit/fluency/<stream>`` and ``audit/fluency/<stream>/shuffle``
    (``stream``: the family's place in the protocol, ``signal/<i>``; by default its name).
    """
    from creditaudit.stats import median_spearman, ols_standardized, partial_corr

    stats = protocol.statistics

    def frame_of(rows: pd.DataFrame) -> pd.DataFrame:
        rows = rows.loc[~rows.abstained, ["trajectory_id", "turn", "credit"]]
        out = included.merge(rows, on=["trajectory_id", "turn"]).merge(fluency, on=["trajectory_id", "turn"])
        return out.dropna(subset=["fluency"]).sort_values(["trajectory_id", "turn"]).reset_index(drop=True)

    stream = stream or family

    def echo(frame: pd.DataFrame, name: str) -> dict[str, Any]:
        try:
            res = median_spearman(frame.credit.to_numpy(float), frame.fluency.to_numpy(float),
                                  frame.trajectory_id.to_numpy(), n_resamples=stats.bootstrap_iterations,
                                  confidence_level=stats.ci_level, rng=stream_rng(protocol_id, f"audit/fluency/{name}"))
        except ValueError as exc:
            return {"estimate": None, "ci": None, "n_trajectories": 0, "note": str(exc)}
        return {"estimate": float(res.statistic), "ci": [float(res.ci[0]), float(res.ci[1])],
                "n_trajectories": int(res.n_groups)}

    frame = frame_of(credit)
    out: dict[str, Any] = {"family": family, "n_turns": int(len(frame)), "echo": echo(frame, stream)}
    if shuffled is not None:
        out["shuffle_echo"] = echo(frame_of(shuffled), f"{stream}/shuffle")
    if len(frame) >= 5 and frame.fluency.nunique() > 1 and frame.a_replay.nunique() > 1 and frame.credit.nunique() > 1:
        ols = ols_standardized(frame.credit.to_numpy(float),
                               np.column_stack([frame.fluency.to_numpy(float), frame.a_replay.to_numpy(float)]),
                               names=["fluency", "a_replay"])
        out["regression"] = {"beta_fluency": float(ols.coefficients[0]), "beta_a_replay": float(ols.coefficients[1]),
                             "p_fluency": float(ols.pvalues[0]), "p_a_replay": float(ols.pvalues[1]),
                             "r_squared": float(ols.r_squared), "n": int(ols.n)}
        pc = partial_corr(frame.credit.to_numpy(float), frame.a_replay.to_numpy(float),
                          frame.fluency.to_numpy(float), method="pearson")
        out["partial"] = {"r": float(pc.statistic), "p": float(pc.pvalue), "ci": [float(pc.ci[0]), float(pc.ci[1])],
                          "n": int(pc.n)}
    else:
        out["regression"] = out["partial"] = None
    return out


def audit_tables(
    credit: pd.DataFrame,
    replay: pd.DataFrame,
    *,
    protocol: Protocol,
    protocol_id: str,
    fluency: pd.DataFrame | None = None,
) -> AuditResult:
    """Audit every family and control of ``protocol``.

    Parameters
    ----------
    credit : DataFrame
        Columns trajectory_id, turn, subject (a family or control name), credit, abstained.
    replay : DataFrame
        The replay turn table (trajectory_id, turn, status, a_replay, pivotal).
    fluency : DataFrame, optional
        trajectory_id, turn, fluency (the action's mean policy log-prob), for the fluency echo.
    """
    from creditaudit.stats import holm

    present = set(credit.subject.unique())
    missing = [name for name, *_ in _subjects(protocol) if name not in present]
    if missing:
        raise InputError(
            f"the credit table has no rows for {', '.join(missing)}; every family and control the protocol "
            "names must be computed by `creditaudit signals` before the audit"
        )
    degenerate = degenerate_trajectories(replay, min_complete_turns=protocol.exclusions.min_complete_turns,
                                         exclude_constant=protocol.exclusions.exclude_constant_replay)
    included = included_turns(replay, degenerate)
    objects = family_objects(protocol)
    nulls = {c.name for c in protocol.controls if c.null_control}
    subjects: dict[str, SubjectStats] = {}
    for name, kind, of, stream in _subjects(protocol):
        rows = credit.loc[credit.subject == name, ["trajectory_id", "turn", "credit", "abstained"]]
        if of is not None:
            _check_shares_turns(name, rows, credit.loc[credit.subject == of, ["trajectory_id", "turn", "abstained"]], of)
        source = objects.get(of if kind != "family" else name)
        neutral = neutral_value(source.neutral if source is not None else None, kind)
        level = null_control_level(protocol) if name in nulls else None  # Bonferroni across the null controls
        subjects[name] = subject_statistics(rows, included, subject=name, kind=kind, of=of, stream=stream,
                                            protocol=protocol, protocol_id=protocol_id, neutral=neutral,
                                            ci_level=level)

    families = list(protocol.hypotheses.confirmatory) or [s.name for s in protocol.signals]
    pvalues = [subjects[f].p_value if subjects[f].p_value is not None else 1.0 for f in families]
    adjusted = holm(pvalues, alpha=protocol.statistics.alpha, names=families)
    p_holm = {f: float(p) for f, p in zip(families, adjusted.pvalues_adjusted)}
    table = {}
    for name, stats in subjects.items():
        row = stats.gate_row()
        row["p_holm"] = p_holm.get(name)
        table[name] = row
    decisions = decide_all(protocol, table)
    holm_record = {
        "family": families,
        "pvalues": pvalues,
        "adjusted": [p_holm[f] for f in families],
        "alpha": protocol.statistics.alpha,
        "rejected": [bool(r) for r in adjusted.reject],
        "undefined_as_one": [subjects[f].p_value is None for f in families],
    }
    exclusions = {
        "n_trajectories": int(replay.trajectory_id.nunique()),
        "degenerate_trajectories": sorted(degenerate),
        "n_degenerate_trajectories": len(degenerate),
        "n_turns": int(len(replay)),
        "n_included_turns": int(len(included)),
        "excluded_turns_by_status": {k: int(v) for k, v in replay.status.value_counts().sort_index().items()
                                     if k != "complete"},
        "n_complete_turns_in_degenerate_trajectories": int(
            ((replay.status == "complete") & replay.trajectory_id.isin(degenerate)).sum()),
    }
    fluency_result = None
    implicit = next((n for n, f in objects.items() if getattr(f, "fluency_echo", False)), None)
    if implicit is not None and fluency is not None:
        position = [s.name for s in protocol.signals].index(implicit)
        try:
            shuffle_name = protocol.control_of(implicit, "shuffle")
        except KeyError:
            shuffle_name = None
        fluency_result = fluency_echo(
            credit.loc[credit.subject == implicit],
            credit.loc[credit.subject == shuffle_name] if shuffle_name else None,
            included, fluency, protocol=protocol, protocol_id=protocol_id, family=implicit,
            stream=f"signal/{position}",
        )
    return AuditResult(subjects, decisions, holm_record, exclusions, fluency_result, table)


def verdict_sentence(decision: Decision, stats: SubjectStats, protocol: Protocol) -> str:
    """One honest sentence per verdict: a null is 'inconclusive at this resolution', never 'no effect'."""
    ci = (f"median within-trajectory Spearman {stats.estimate:+.3f} [{stats.ci_low:+.3f}, {stats.ci_high:+.3f}]"
          if stats.estimate is not None else "rank fidelity undefined")
    n = f"{stats.n_trajectories} trajectories, {stats.n_included_turns} included turns, {stats.n_pivotal_turns} pivotal"
    verdict = decision.verdict
    if verdict == "INSTRUMENT_INVALID":
        return (f"{decision.family}: no effect verdict — a null control's interval (each at 1 - alpha/k over the k "
                f"null controls) excludes 0, so the instrument is not valid on this data ({ci}; {n}).")
    if verdict == "INFEASIBLE":
        return (f"{decision.family}: inconclusive — fewer included trajectories or pivotal turns than the protocol's "
                f"minimum ({protocol.exclusions.min_trajectories} / {protocol.exclusions.min_pivotal_turns}); {n}.")
    if verdict == "H3_PLACEBO":
        return (f"{decision.family}: placebo-level (H3) — its interval overlaps its own shuffle control's, so at this "
                f"resolution its credit is not distinguishable from the same credit assigned to random steps "
                f"({ci}; {n}).")
    if verdict == "H2_REVERSED":
        return f"{decision.family}: reversed (H2) — credit runs against the executed contribution ({ci}; {n})."
    if verdict == "H1_TRACKS":
        return f"{decision.family}: tracks contribution (H1) — the interval's lower bound clears rho_min ({ci}; {n})."
    if verdict == "H4_WEAK":
        return (f"{decision.family}: weak (H4) — separated from its shuffle control and positive, but below rho_min "
                f"({ci}; {n}).")
    return f"{decision.family}: {verdict} — {decision.reason} ({ci}; {n})."
