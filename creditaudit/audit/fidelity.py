"""Fidelity statistics of every family and control against the replay truth (docs/design.md §5).

One pipeline, the same exclusions for every subject (family or control):

- included turns: replay status ``complete`` (a counterfactual exists and the replay finished),
  in a trajectory that is not degenerate (fewer than ``min_complete_turns`` complete turns, or
  constant ``A_replay``: excluded symmetrically from every subject and counted), and whose credit
  the subject did not abstain on;
- rank fidelity: within-trajectory Spearman between credit and ``A_replay`` (average ranks;
  trajectories with constant credit or constant ``A_replay`` have no rank information and are
  excluded and counted), the median across trajectories, and its cluster percentile bootstrap CI
  (``statistics.bootstrap_iterations``, stream ``audit/bootstrap/<stream>``, where ``<stream>`` is
  the subject's place in the protocol -- ``signal/<i>`` or ``control/<j>`` -- never its name, so no
  statistic depends on what a signal is called); its p-value is the
  bootstrap test inversion ``min(1, 2 min(P*(m <= 0), P*(m >= 0)))``;
- sign agreement on turns where both the credit (relative to the family's neutral value) and
  ``A_replay`` are nonzero, with its Wilson CI;
- precision-at-pivotal lift of the top ``statistics.top_k_fraction`` credited turns of each
  trajectory, with its cluster bootstrap CI (stream ``audit/lift/<stream>``);
- both of the last two again on *resolved-pivotal* turns (the turn's ``A_replay`` interval excludes
  0, docs/design.md §3) beside the paper's pivotal (``A_replay != 0``): ``sign_agreement_resolved`` on turns
  with nonzero credit that are resolved-pivotal, ``lift_resolved`` with resolved-pivotal as the
  target (stream ``audit/lift-resolved/<stream>``). With 3 rollouts an arm most zero-effect turns
  come out pivotal by noise; the resolved statistics are what a perfect credit is judged on.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from creditaudit.protocol.seeds import rng as stream_rng
from creditaudit.protocol.schema import GATE_STATISTICS, Protocol

__all__ = ["SubjectStats", "subject_statistics", "included_turns", "neutral_value", "null_control_level",
           "bootstrap_pvalue"]


@dataclass(frozen=True)
class SubjectStats:
    """Every audit statistic of one subject (the gates read these by name)."""

    subject: str
    kind: str
    of: str | None
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_trajectories: int
    n_included_turns: int
    n_pivotal_turns: int
    n_excluded_constant: int
    n_abstained: int
    n_degenerate_resamples: int
    sign_agreement: float | None
    sign_ci_low: float | None
    sign_ci_high: float | None
    sign_n_agree: int
    sign_n_both_nonzero: int
    lift: float | None
    lift_ci_low: float | None
    lift_ci_high: float | None
    note: str
    n_resolved_pivotal_turns: int = 0
    sign_agreement_resolved: float | None = None
    sign_agreement_resolved_ci_low: float | None = None
    sign_agreement_resolved_ci_high: float | None = None
    sign_resolved_n_agree: int = 0
    sign_resolved_n_both_nonzero: int = 0
    lift_resolved: float | None = None
    lift_resolved_ci_low: float | None = None
    lift_resolved_ci_high: float | None = None
    ci_level: float | None = None
    """Level of every interval of this subject: ``statistics.ci_level``, or for a null control
    ``1 - alpha / k`` with ``k`` null controls (:func:`null_control_level`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def gate_row(self) -> dict[str, float | None]:
        """The statistics the decision engine reads: every name of
        :data:`~creditaudit.protocol.schema.GATE_STATISTICS` (``p_holm`` is added by the caller)."""
        row: dict[str, float | None] = {}
        for name in GATE_STATISTICS:
            if name == "p_holm":
                continue
            value = getattr(self, name)
            row[name] = None if value is None else float(value)
        return row


def neutral_value(family_neutral: float | str | None, kind: str) -> float | str:
    """Neutral credit of a subject: its family's (the family object's ``neutral`` attribute, never
    looked up by name), negated for an inverted control, 0 for the null controls.

    Examples
    --------
    >>> neutral_value(1.0, "family"), neutral_value(1.0, "inverted"), neutral_value(None, "random")
    (1.0, -1.0, 0.0)
    >>> neutral_value("trajectory-mean", "shuffle")
    'trajectory-mean'
    """
    if kind in ("random", "uniform"):
        return 0.0
    if family_neutral is None:
        raise ValueError(f"a {kind!r} subject needs its family's neutral value")
    if kind == "inverted" and not isinstance(family_neutral, str):
        return -float(family_neutral)
    return family_neutral if isinstance(family_neutral, str) else float(family_neutral)


def null_control_level(protocol: Protocol) -> float:
    """Confidence level of a null control's intervals: ``1 - alpha / k`` with ``k`` null controls
    (Bonferroni, docs/design.md §5), so the Controls gate -- any null control's interval excluding 0 --
    declares a valid instrument invalid at most ``alpha`` of the time. One null control: ``1 - alpha``.

    Examples
    --------
    >>> from creditaudit.protocol.io import default_template_text, parse_protocol
    >>> null_control_level(parse_protocol(default_template_text()))  # random and uniform, alpha 0.05
    0.975
    """
    k = max(1, sum(1 for c in protocol.controls if c.null_control))
    return 1.0 - protocol.statistics.alpha / k


def bootstrap_pvalue(distribution: np.ndarray) -> float | None:
    """Two-sided p-value of H0: statistic = 0 by inverting the percentile bootstrap."""
    finite = distribution[np.isfinite(distribution)]
    if finite.size == 0:
        return None
    return float(min(1.0, 2.0 * min(np.mean(finite <= 0), np.mean(finite >= 0))))


def included_turns(replay: pd.DataFrame, degenerate: set[str]) -> pd.DataFrame:
    """Complete turns of non-degenerate trajectories (trajectory_id, turn, a_replay, pivotal,
    resolved_pivotal)."""
    from creditaudit.audit.measurability import resolved_pivotal

    keep = (replay.status == "complete") & ~replay.trajectory_id.isin(degenerate)
    out = replay.loc[keep, ["trajectory_id", "turn", "a_replay", "pivotal"]].copy()
    out["resolved_pivotal"] = resolved_pivotal(replay)[keep.to_numpy()]
    return out


def _centre(frame: pd.DataFrame, neutral: float | str) -> np.ndarray:
    if neutral == "trajectory-mean":
        return (frame.credit - frame.groupby("trajectory_id").credit.transform("mean")).to_numpy(float)
    return (frame.credit - float(neutral)).to_numpy(float)


def subject_statistics(
    credit: pd.DataFrame,
    included: pd.DataFrame,
    *,
    subject: str,
    kind: str,
    of: str | None,
    protocol: Protocol,
    protocol_id: str,
    neutral: float | str,
    stream: str | None = None,
    ci_level: float | None = None,
) -> SubjectStats:
    """Statistics of one subject.

    ``credit``: this subject's rows (trajectory_id, turn, credit, abstained);
    ``included``: :func:`included_turns` of the replay; ``neutral``: the subject's neutral credit
    (:func:`neutral_value` of its family's declared ``neutral``); ``stream``: the suffix of the
    subject's seed streams (its place in the protocol; by default its name); ``ci_level``: the level
    of every interval (by default ``statistics.ci_level``; a null control's is :func:`null_control_level`).
    """
    from creditaudit.audit.metrics import precision_at_pivotal_lift
    from creditaudit.stats import median_spearman, sign_agreement

    stats = protocol.statistics
    stream = stream or subject
    level = float(ci_level) if ci_level is not None else float(stats.ci_level)
    n_abstained = int(credit.abstained.sum())
    rows = credit.loc[~credit.abstained, ["trajectory_id", "turn", "credit"]]
    frame = included.merge(rows, on=["trajectory_id", "turn"], how="inner").sort_values(["trajectory_id", "turn"])
    frame = frame.reset_index(drop=True)
    n_included = len(frame)
    n_pivotal = int(frame.pivotal.sum()) if n_included else 0
    empty = dict(estimate=None, ci_low=None, ci_high=None, p_value=None, n_excluded_constant=0,
                 n_degenerate_resamples=0)
    notes = []
    rank = dict(empty)
    n_traj = 0
    if n_included:
        try:
            result = median_spearman(
                frame.credit.to_numpy(float), frame.a_replay.to_numpy(float), frame.trajectory_id.to_numpy(),
                n_resamples=stats.bootstrap_iterations, confidence_level=level,
                rng=stream_rng(protocol_id, f"audit/bootstrap/{stream}"), constant=stats.spearman_constant,
            )
        except ValueError as exc:  # no trajectory with rank information
            notes.append(f"rank fidelity undefined: {exc}")
            n_traj = 0
            rank["n_excluded_constant"] = int(frame.trajectory_id.nunique())
        else:
            n_traj = int(result.n_groups)
            rank = dict(
                estimate=float(result.statistic), ci_low=float(result.ci[0]), ci_high=float(result.ci[1]),
                p_value=bootstrap_pvalue(np.asarray(result.distribution)),
                n_excluded_constant=int(result.n_excluded_constant),
                n_degenerate_resamples=int(result.n_degenerate),
            )
    sign = dict(sign_agreement=None, sign_ci_low=None, sign_ci_high=None, sign_n_agree=0, sign_n_both_nonzero=0)
    if n_included:
        centred = _centre(frame, neutral)
        try:
            s = sign_agreement(centred, frame.a_replay.to_numpy(float), confidence_level=level)
        except ValueError as exc:
            notes.append(f"sign agreement undefined: {exc}")
        else:
            sign = dict(sign_agreement=float(s.proportion), sign_ci_low=float(s.ci[0]), sign_ci_high=float(s.ci[1]),
                        sign_n_agree=int(s.n_agree), sign_n_both_nonzero=int(s.n_both_nonzero))
    resolved = frame.resolved_pivotal.to_numpy(bool) if "resolved_pivotal" in frame else np.zeros(n_included, bool)
    n_resolved = int(resolved.sum())
    if n_resolved:
        try:
            s = sign_agreement(centred[resolved], frame.a_replay.to_numpy(float)[resolved], confidence_level=level)
        except ValueError as exc:
            notes.append(f"sign agreement on resolved-pivotal turns undefined: {exc}")
        else:
            sign.update(sign_agreement_resolved=float(s.proportion), sign_agreement_resolved_ci_low=float(s.ci[0]),
                        sign_agreement_resolved_ci_high=float(s.ci[1]), sign_resolved_n_agree=int(s.n_agree),
                        sign_resolved_n_both_nonzero=int(s.n_both_nonzero))

    def lift_of(target: np.ndarray, prefix: str, what: str) -> dict[str, float | None]:
        out = {prefix: None, f"{prefix}_ci_low": None, f"{prefix}_ci_high": None}
        if not (n_included and target.any()):
            return out
        try:
            res = precision_at_pivotal_lift(
                frame.credit.to_numpy(float), target, frame.trajectory_id.to_numpy(),
                top_fraction=stats.top_k_fraction, n_resamples=stats.bootstrap_iterations,
                confidence_level=level, rng=stream_rng(protocol_id, f"audit/{what}/{stream}"),
            )
        except ValueError as exc:
            notes.append(f"{prefix} undefined: {exc}")
            return out
        return {prefix: _finite(res.statistic), f"{prefix}_ci_low": _finite(res.ci[0]),
                f"{prefix}_ci_high": _finite(res.ci[1])}

    lift = lift_of(frame.pivotal.to_numpy(bool) if n_included else np.zeros(0, bool), "lift", "lift")
    lift.update(lift_of(resolved, "lift_resolved", "lift-resolved"))
    return SubjectStats(
        subject=subject, kind=kind, of=of, n_trajectories=n_traj, n_included_turns=n_included,
        n_pivotal_turns=n_pivotal, n_abstained=n_abstained, note="; ".join(notes), ci_level=level,
        n_resolved_pivotal_turns=n_resolved, **rank, **sign, **lift,
    )


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
