"""Measuring a local judge against the planner-progress labels of held-out transcripts
(:mod:`~.judge_data`): exact agreement, Cohen's kappa, per-class accuracy, abstention rate and
per-trajectory variance (the share of trajectories whose turns all get one score).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.signals.families.judge_data import LabelledTrajectory

__all__ = ["load_judge", "judge_metrics"]

_SCORES = (1, 0, -1)


def load_judge(path: str | Path, *, max_negative: int = 1) -> Any:
    """A :class:`~creditaudit.signals.families.judge.LocalJudge` over the model directory ``path``
    (CPU, no history: the judge prompt is the whole context), its id pinned by the files' hash."""
    from creditaudit.protocol.canonical import canonical_hash
    from creditaudit.replay.policies import load_policy, policy_file_hashes
    from creditaudit.signals.families.judge import LocalJudge

    hashes = policy_file_hashes(path)
    digest = canonical_hash({**hashes["model_files"], **hashes["tokenizer_files"]})
    judge = LocalJudge(load_policy(path, device="cpu", history_length=0), judge_id=f"local:{Path(path).name}@{digest[:16]}",
                       max_negative=max_negative)
    judge.model_sha256 = digest
    return judge


def _constant(scores: Sequence[int]) -> bool:
    return len(scores) > 1 and len(set(scores)) == 1


def judge_metrics(judge: Any, labelled: Sequence[LabelledTrajectory]) -> dict[str, Any]:
    """A judge's scores on labelled transcripts, compared with the labels.

    Returns
    -------
    dict
        ``n_trajectories``, ``n_turns``, ``abstention_rate`` (share of trajectories the judge
        abstained on), ``agreement`` and ``kappa`` (with its 95% CI) on the scored turns,
        ``majority_agreement`` (always answering the labels' most common score: the floor
        agreement must beat), ``per_class`` (for each label: its count, the judge's accuracy on
        it (recall) and the share of the judge's answers of that score that are right
        (precision)), ``confusion`` (``[label][score]`` counts), ``score_counts``,
        ``constant_share`` (trajectories of two or more turns whose scores are all equal) beside
        the labels' own ``label_constant_share``, and ``constant_by_outcome``.
    """
    from creditaudit.stats import cohens_kappa

    y_true: list[int] = []
    y_pred: list[int] = []
    abstained = constant = label_constant = multi = 0
    by_outcome: dict[str, list[int]] = {"won": [0, 0], "lost": [0, 0]}
    for lt in labelled:
        verdict = judge.judge(lt.trajectory)
        if verdict.scores is None:
            abstained += 1
            continue
        y_true += list(lt.labels)
        y_pred += list(verdict.scores)
        if len(lt.labels) > 1:
            multi += 1
            is_const = _constant(verdict.scores)
            constant += is_const
            label_constant += _constant(lt.labels)
            key = "won" if lt.trajectory.won else "lost"
            by_outcome[key][0] += is_const
            by_outcome[key][1] += 1
    t, p = np.asarray(y_true), np.asarray(y_pred)
    out: dict[str, Any] = {
        "n_trajectories": len(labelled),
        "n_turns": int(len(t)),
        "abstention_rate": abstained / len(labelled) if labelled else None,
        "agreement": float(np.mean(t == p)) if len(t) else None,
        "majority_agreement": float(max(np.mean(t == s) for s in _SCORES)) if len(t) else None,
        "kappa": None,
        "kappa_ci": None,
        "per_class": {},
        "confusion": {str(a): {str(b): int(np.sum((t == a) & (p == b))) for b in _SCORES} for a in _SCORES},
        "score_counts": {str(s): int(np.sum(p == s)) for s in _SCORES},
        "constant_share": constant / multi if multi else None,
        "label_constant_share": label_constant / multi if multi else None,
        "constant_by_outcome": {k: {"constant": v[0], "trajectories": v[1]} for k, v in by_outcome.items()},
    }
    if len(t):
        try:
            res = cohens_kappa(t, p, categories=_SCORES)
            out["kappa"] = float(res.statistic)
            out["kappa_ci"] = [float(v) for v in res.ci]
        except ValueError as exc:
            out["kappa_note"] = f"kappa undefined: {exc}"
        for s in _SCORES:
            n_label, n_pred = int(np.sum(t == s)), int(np.sum(p == s))
            hit = int(np.sum((t == s) & (p == s)))
            out["per_class"][str(s)] = {"n": n_label, "accuracy": hit / n_label if n_label else None,
                                        "precision": hit / n_pred if n_pred else None}
    return out
