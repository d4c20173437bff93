"""``creditaudit audit``: join the credit table with the replay truth and decide every family.

Reads ``signals/credit.parquet``, ``replay/turns.parquet`` (+ its summary's measurability map) and
``collect/trajectories.parquet`` (for fluency), all stamped with the run's protocol id (anything
else is refused), and writes ``audit/audit.json`` (typed, versioned), ``audit/summary.md`` and
``audit/figures/*.png``, with a link record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from creditaudit.artifacts import write_bytes_atomic, write_parquet_atomic
from creditaudit.audit.core import AuditResult, audit_tables, verdict_sentence
from creditaudit.audit.export import STATISTICS_PARQUET, statistics_table
from creditaudit.figures import audit_figures
from creditaudit.papers import measurability_text, paper_text
from creditaudit.protocol.canonical import canonical_bytes, to_json_value
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.protocol.signing import Signer

__all__ = ["AUDIT_DIR", "AUDIT_JSON", "CREDIT", "AuditDocument", "run_audit", "read_credit"]

AUDIT_DIR = "audit"
AUDIT_JSON = "audit/audit.json"
SUMMARY_MD = "audit/summary.md"
CREDIT = "signals/credit.parquet"


class AuditDocument(BaseModel):
    """``audit/audit.json``: every statistic, decision (with gate traces) and exclusion."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    """Format version."""
    protocol_id: str
    """The protocol every input was stamped with."""
    statistics_settings: dict[str, Any]
    """The protocol's statistics conventions, recorded with the results."""
    exclusions: dict[str, Any]
    """Degenerate trajectories and excluded turns by reason."""
    subjects: list[dict[str, Any]]
    """Statistics of every family and control."""
    decisions: list[dict[str, Any]]
    """Verdict of every family with every gate's inputs and outcome."""
    sentences: dict[str, str]
    """The rendered verdict sentence of every family."""
    holm: dict[str, Any]
    """Holm correction across the confirmatory tests."""
    fluency: dict[str, Any] | None = None
    """Fluency echo (T3) of the implicit family."""
    measurability: dict[str, Any] = Field(default_factory=dict)
    """The replay's measurability map."""


def read_credit(frozen: FrozenProtocol) -> pd.DataFrame:
    """The credit table of this protocol as a DataFrame (refusing another protocol's)."""
    from creditaudit.signals.stage import read_credit as read_credit_table

    return read_credit_table(frozen).to_pandas()


def _fmt(value: Any, spec: str = "+.3f") -> str:
    return "—" if value is None else format(value, spec)


def _markdown(doc: AuditDocument, result: AuditResult, protocol: Any) -> str:
    lines = [f"# Fidelity audit — protocol `{doc.protocol_id}`", ""]
    lines += ["## Verdicts (frozen decision order: " + " → ".join(protocol.hypotheses.decision_order) + ")", ""]
    for family, sentence in doc.sentences.items():
        lines.append(f"- {sentence}")
    lines += ["", "## Families and controls", "",
              "Pivotal: A_replay != 0 (the paper's); resolved: the turn's A_replay interval excludes 0.", "",
              "| subject | kind | median ρ | CI | trajectories | included turns | pivotal (resolved) | sign agreement "
              "| sign agreement, resolved | lift | lift, resolved |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]

    def sign_text(n_agree: int, n_both: int, value: float | None, low: float | None, high: float | None) -> str:
        return "—" if value is None else f"{n_agree}/{n_both} = {value:.3f} [{low:.3f}, {high:.3f}]"

    def lift_text(value: float | None, low: float | None, high: float | None) -> str:
        return "—" if value is None else f"{value:.3f} [{_fmt(low, '.3f')}, {_fmt(high, '.3f')}]"

    for s in result.subjects.values():
        sign = sign_text(s.sign_n_agree, s.sign_n_both_nonzero, s.sign_agreement, s.sign_ci_low, s.sign_ci_high)
        sign_r = sign_text(s.sign_resolved_n_agree, s.sign_resolved_n_both_nonzero, s.sign_agreement_resolved,
                           s.sign_agreement_resolved_ci_low, s.sign_agreement_resolved_ci_high)
        lift = lift_text(s.lift, s.lift_ci_low, s.lift_ci_high)
        lift_r = lift_text(s.lift_resolved, s.lift_resolved_ci_low, s.lift_resolved_ci_high)
        ci = "—" if s.ci_low is None else f"[{s.ci_low:+.3f}, {s.ci_high:+.3f}]"
        lines.append(f"| {s.subject} | {s.kind} | {_fmt(s.estimate)} | {ci} | {s.n_trajectories} | "
                     f"{s.n_included_turns} | {s.n_pivotal_turns} ({s.n_resolved_pivotal_turns}) | {sign} | {sign_r} | "
                     f"{lift} | {lift_r} |")
    ex = doc.exclusions
    lines += ["", "## Exclusions", "",
              f"{ex['n_degenerate_trajectories']} of {ex['n_trajectories']} trajectories are degenerate (fewer than "
              f"{protocol.exclusions.min_complete_turns} complete turns or constant A_replay) and excluded from every "
              f"subject; turns excluded by replay status: {ex['excluded_turns_by_status'] or 'none'}."]
    if doc.fluency:
        f = doc.fluency
        echo = f["echo"]
        lines += ["", "## Fluency echo (T3)", ""]
        if echo.get("estimate") is not None:
            lines.append(f"Median within-trajectory Spearman(implicit credit, fluency) {echo['estimate']:+.3f} "
                         f"[{echo['ci'][0]:+.3f}, {echo['ci'][1]:+.3f}] (paper: {paper_text('paper.fluency.echo')}).")
        else:
            lines.append(f"Undefined on this data ({f['n_turns']} included turns with fluency): inconclusive, "
                         "not measured.")
        if f.get("regression"):
            r = f["regression"]
            lines.append(f"Joint regression (standardised): fluency {r['beta_fluency']:+.3f}, causal increment "
                         f"{r['beta_a_replay']:+.3f} (paper: {paper_text('paper.fluency.beta_fluency')} vs "
                         f"{paper_text('paper.fluency.beta_a_replay')}).")
        if f.get("partial"):
            p = f["partial"]
            lines.append(f"Partial correlation of credit and increment given fluency: {p['r']:+.3f} (p = {p['p']:.3g}; "
                         f"paper: {paper_text('paper.fluency.partial_r')}, p = {paper_text('paper.fluency.partial_p')}).")
    m = doc.measurability
    if m:
        lines += ["", "## Measurability", "",
                  f"Pivotal {_fmt(m.get('share_pivotal'), '.3f')} of complete turns (resolved-pivotal "
                  f"{_fmt(m.get('share_resolved_pivotal'), '.3f')}), sigma_floor = 0 "
                  f"{_fmt(m.get('share_sigma_floor_zero'), '.3f')}, no counterfactual "
                  f"{_fmt(m.get('share_no_counterfactual'), '.3f')} of turns (paper: {measurability_text()}).",
                  m.get("resolution_statement", "")]
    lines += ["", "Figures: `figures/forest.png`, `figures/measurability.png`, `figures/fluency_echo.png`.", ""]
    return "\n".join(lines)


def run_audit(protocol_path: str | Path, signer: Signer) -> AuditDocument:
    """Audit the run's credit table against its replay truth under the frozen protocol."""
    from creditaudit.replay.collect import TRAJECTORIES, read_trajectories
    from creditaudit.replay.stage import SUMMARY, TURNS, read_replay

    frozen = require_frozen(protocol_path)
    protocol = frozen.protocol
    credit = read_credit(frozen)
    turns, replay_summary = read_replay(frozen)
    replay = turns.to_pandas()
    collected = read_trajectories(frozen).select(["trajectory_id", "turn", "mean_logprob"]).to_pandas()
    fluency = collected.rename(columns={"mean_logprob": "fluency"})
    result = audit_tables(credit, replay, protocol=protocol, protocol_id=frozen.id, fluency=fluency)
    sentences = {name: verdict_sentence(d, result.subjects[name], protocol) for name, d in result.decisions.items()}
    doc = AuditDocument(
        protocol_id=frozen.id,
        statistics_settings=protocol.statistics.model_dump(mode="json"),
        exclusions=result.exclusions,
        subjects=[s.to_dict() for s in result.subjects.values()],
        decisions=[d.to_dict() for d in result.decisions.values()],
        sentences=sentences,
        holm=result.holm,
        fluency=result.fluency,
        measurability=replay_summary.get("measurability", {}),
    )
    run_dir = frozen.run_dir
    out_dir = run_dir / AUDIT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    implicit = result.fluency["family"] if result.fluency else None
    fluency_frame = None
    if implicit is not None:
        rows = credit.loc[(credit.subject == implicit) & ~credit.abstained, ["trajectory_id", "turn", "credit"]]
        fluency_frame = (replay.loc[replay.status == "complete", ["trajectory_id", "turn", "pivotal"]]
                         .merge(rows, on=["trajectory_id", "turn"]).merge(fluency, on=["trajectory_id", "turn"]))
    with StageLink(
        run_dir, "audit", frozen.id, signer, command=["creditaudit", "audit"],
        parameters={"bootstrap_iterations": protocol.statistics.bootstrap_iterations},
        inputs=[frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json"), run_dir / CREDIT,
                run_dir / TURNS, run_dir / SUMMARY, run_dir / TRAJECTORIES],
    ) as link:
        document = to_json_value(doc.model_dump(mode="json"))
        write_bytes_atomic(run_dir / AUDIT_JSON, canonical_bytes(document) + b"\n")
        write_parquet_atomic(statistics_table(document), run_dir / STATISTICS_PARQUET)
        link.add_output(run_dir / STATISTICS_PARQUET)
        (run_dir / SUMMARY_MD).write_text(_markdown(doc, result, protocol), "utf-8")
        for path in [run_dir / AUDIT_JSON, run_dir / SUMMARY_MD,
                     *audit_figures(result, doc.measurability, protocol, out_dir / "figures", fluency_frame)]:
            link.add_output(path)
    return doc
