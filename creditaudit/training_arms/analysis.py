"""Analysis of the seven-arm experiment (docs/design.md §6): confirmatory comparisons, divergence, dose.

Confirmatory comparisons (paired over the held-out tasks; a task's value for an arm is its success
averaged over the arm's included seeds):

====  =====================================  =================================
C1    implicit vs shuffled_implicit          paired TOST, band ±``equivalence_band``
C2    judge vs shuffled_judge                paired TOST
C3    implicit vs outcome_only               paired TOST
C4    judge vs outcome_only                  paired TOST
C5    implicit > outcome_only                one-sided paired t (superiority)
C6    judge > outcome_only                   one-sided paired t (superiority)
====  =====================================  =================================

Holm over the six p-values (TOST p for C1-C4, superiority p for C5-C6). Readings: C1-C4
"equivalent" when the Holm-adjusted TOST p <= alpha, else "different" when the two-sided
difference test has p <= alpha, else "inconclusive"; C5-C6 "different" (superiority shown) when
the Holm-adjusted p <= alpha, else "inconclusive". Never "no difference". Every comparison carries
the design MDE (noncentral t at the protocol's power, with the standard deviation of its paired
differences). A comparison that cannot be computed (an arm not in the protocol, every seed of an
arm excluded, paired differences of zero variance) is *resolved* explicitly: p = 1 in the Holm
family, reading "inconclusive", and the reason recorded.

Divergence (at every stage = round checkpoint): each checkpoint's action distribution on every
probe state; the JS divergence matrix (log base from the protocol) is the mean over probe states
of the per-state matrices. Between-arm vs within-arm (arm labels), the instrument partition and
the information partition are permutation partition tests; the partial Mantel test correlates
the JS matrix with the design matrix (1 where two checkpoints' arms differ in instrument)
controlling for parameter displacement (``|d_i - d_j|``, ``d`` the Frobenius norm of a
checkpoint's LoRA update); its positive control replaces the design by credit sparsity
(``|s_i - s_j|``, ``s`` the share of the checkpoint's training samples dropped for zero weight)
and controls for the design. Permutation streams: ``arms/permutation/<test>/round-<r>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from creditaudit.papers import paper_value
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.training_arms.rules import information_labels, instrument_labels

__all__ = ["COMPARISONS", "PAPER", "compare_arms", "learning_check", "divergence_stage", "analyse", "js_matrix"]

COMPARISONS = (
    ("C1", "tost", "implicit", "shuffled_implicit"),
    ("C2", "tost", "judge", "shuffled_judge"),
    ("C3", "tost", "implicit", "outcome_only"),
    ("C4", "tost", "judge", "outcome_only"),
    ("C5", "superiority", "implicit", "outcome_only"),
    ("C6", "superiority", "judge", "outcome_only"),
)

#: The audit paper's figures, reported beside this run's (typed once, in creditaudit/papers.yaml).
PAPER = {
    "js_between": paper_value("paper.arms.js_between").value,
    "js_within": paper_value("paper.arms.js_within").value,
    "js_pvalue": paper_value("paper.arms.js_p").value,
    "partial_mantel": paper_value("paper.arms.partial_mantel").value,
    "partial_mantel_pvalue": paper_value("paper.arms.partial_mantel_p").value,
    "positive_control": paper_value("paper.arms.sparsity_control").value,
    "positive_control_pvalue": paper_value("paper.arms.sparsity_control_p").value,
    "steps_per_round_max": paper_value("paper.arms.optimizer_steps").value[0],
    "steps_per_round_min": paper_value("paper.arms.optimizer_steps").value[1],
    "mde": paper_value("paper.arms.mde").value,
}

DESIGN_SD_FALLBACK = 0.5
"""Design standard deviation of paired differences when the observed one is 0 (binary outcomes
with a discordance rate of 0.25); recorded as ``sd_source: "fallback"``."""


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating,)):
        return _finite(float(obj))
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return _clean(obj.tolist())
    return _finite(obj)


# ---------------------------------------------------------------------- success comparisons


def _task_means(frame: pd.DataFrame, arm: str, included: set[tuple[str, int]]) -> pd.Series | None:
    seeds = sorted(s for a, s in included if a == arm)
    rows = frame[(frame["arm"] == arm) & frame["seed"].isin(seeds)]
    if rows.empty:
        return None
    return rows.groupby("task_index")["success"].mean().sort_index()


def compare_arms(held_out: pd.DataFrame, included: set[tuple[str, int]], *, band: float, alpha: float,
                 power: float) -> dict[str, Any]:
    """C1-C6 on the held-out evaluation (see the module docstring)."""
    from creditaudit.stats import holm, mde, superiority_paired, tost_paired

    entries = []
    pvalues = []
    for cid, kind, a, b in COMPARISONS:
        entry: dict[str, Any] = {"id": cid, "kind": kind, "arm": a, "versus": b, "band": [-band, band], "alpha": alpha}
        xa, xb = _task_means(held_out, a, included), _task_means(held_out, b, included)
        if xa is None or xb is None:
            missing = a if xa is None else b
            entry.update(resolved=f"arm {missing} has no included checkpoint (not trained or every seed excluded)",
                         pvalue=1.0, reading="inconclusive")
            entries.append(entry)
            pvalues.append(1.0)
            continue
        x, y = xa.to_numpy(dtype=float), xb.reindex(xa.index).to_numpy(dtype=float)
        d = x - y
        n = int(d.size)
        sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
        entry.update(n_tasks=n, success_arm=float(x.mean()), success_versus=float(y.mean()), estimate=float(d.mean()),
                     sd_difference=sd)
        sd_design, source = (sd, "observed") if sd > 0 else (DESIGN_SD_FALLBACK, "fallback")
        if n >= 2:
            try:
                design = mde(n, sd=sd_design, alpha=alpha, power=power,
                             alternative="two-sided" if kind == "tost" else "greater", low=-band, high=band)
            except ValueError as exc:  # too few tasks for the t design (df = 1): reported, not guessed
                entry["mde"] = {"mde": None, "sd": sd_design, "sd_source": source, "power": power,
                                "undefined": str(exc)}
            else:
                entry["mde"] = {"mde": design.mde, "sd": sd_design, "sd_source": source, "power": power,
                                "equivalence_power": design.equivalence_power,
                                "band_within_mde": design.band_within_mde}
        try:
            if kind == "tost":
                res = tost_paired(x, y, low=-band, high=band, alpha=alpha)
                entry.update(pvalue=res.pvalue, pvalue_lower=res.pvalue_lower, pvalue_upper=res.pvalue_upper,
                             difference_pvalue=res.difference_pvalue, ci=list(res.ci), ci_level=1 - 2 * alpha,
                             se=res.se, df=res.df)
            else:
                res = superiority_paired(x, y, margin=0.0, alpha=alpha)
                entry.update(pvalue=res.pvalue, statistic=res.statistic, ci=[res.ci[0], None], ci_level=1 - alpha,
                             se=res.se, df=res.df)
        except ValueError as exc:
            entry.update(resolved=f"test undefined: {exc}", pvalue=1.0)
        entries.append(entry)
        pvalues.append(float(entry["pvalue"]))
    adjusted = holm(pvalues, alpha=alpha, names=[e["id"] for e in entries])
    for entry, p_adj in zip(entries, adjusted.pvalues_adjusted):
        entry["pvalue_holm"] = float(p_adj)
        if "resolved" in entry:
            entry["reading"] = "inconclusive"
        elif entry["kind"] == "tost":
            entry["reading"] = ("equivalent" if p_adj <= alpha else
                                "different" if entry["difference_pvalue"] <= alpha else "inconclusive")
        else:
            entry["reading"] = "different" if p_adj <= alpha else "inconclusive"
    return _clean({"comparisons": entries, "holm": {"method": "holm", "alpha": alpha, "names": list(adjusted.names),
                                                    "pvalues": adjusted.pvalues.tolist(),
                                                    "pvalues_adjusted": adjusted.pvalues_adjusted.tolist(),
                                                    "reject": adjusted.reject.tolist()}})


def learning_check(train: pd.DataFrame, included: set[tuple[str, int]], *, arms: Sequence[str],
                   alpha: float) -> dict[str, Any]:
    """Did training move each arm's success on the training tasks away from the untrained policy?

    The unit is the evaluation episode ``(task, rollout)``: under common random numbers the base
    policy and every checkpoint play it with the same sampling seeds, so they pair. An arm's value
    for an episode is its success averaged over its included seeds. The test is the one-sided
    paired t-test of H1 ``mean(arm - base) > 0`` (:func:`creditaudit.stats.superiority_paired`),
    with the two-sided paired t p-value beside it (a learning arm could also get worse). Inference is
    conditional on the training tasks (they are the population the question is about; the
    held-out comparisons C1-C6 are the ones that generalise over tasks). Not part of the Holm
    family: it checks that the experiment trained at all, it does not compare arms.
    """
    from scipy import stats as sps

    from creditaudit.stats import superiority_paired

    out: dict[str, Any] = {"unit": "episode (task, rollout)", "test": "paired t, one-sided H1 arm > base",
                           "alpha": alpha, "arms": {}}
    base = train[train["arm"] == "base"].set_index(["task_index", "rollout"])["success"].astype(float).sort_index()
    out["n_episodes"] = int(base.size)
    for arm in arms:
        seeds = sorted(s for a, s in included if a == arm)
        rows = train[(train["arm"] == arm) & train["seed"].isin(seeds)]
        entry: dict[str, Any] = {"seeds": seeds}
        if rows.empty or base.size < 2:
            entry.update(resolved="no included checkpoint evaluated on the training tasks" if rows.empty
                         else "fewer than 2 evaluation episodes", pvalue=1.0, moved=False)
            out["arms"][arm] = entry
            continue
        values = rows.groupby(["task_index", "rollout"])["success"].mean().reindex(base.index)
        x, y = values.to_numpy(dtype=float), base.to_numpy(dtype=float)
        d = x - y
        entry.update(success_arm=float(x.mean()), success_base=float(y.mean()), estimate=float(d.mean()),
                     discordant=int(np.count_nonzero(d)))
        try:
            res = superiority_paired(x, y, margin=0.0, alpha=alpha)
        except ValueError as exc:  # every paired difference equal: nothing moved, or moved uniformly
            entry.update(resolved=f"test undefined: {exc}", pvalue=None, moved=bool(d.mean() > 0))
        else:
            two_sided = float(sps.ttest_rel(x, y).pvalue)
            entry.update(pvalue=res.pvalue, statistic=res.statistic, ci=[res.ci[0], None], ci_level=1 - alpha,
                         pvalue_two_sided=two_sided, moved=bool(res.pvalue <= alpha))
        out["arms"][arm] = entry
    return _clean(out)


# ---------------------------------------------------------------------- divergence


def js_matrix(distributions: Sequence[Sequence[np.ndarray]], *, base: float = 2.0) -> np.ndarray:
    """Mean over probe states of the JS divergence matrices between checkpoints.

    ``distributions[c][s]`` is checkpoint ``c``'s distribution on probe state ``s``.
    """
    from creditaudit.stats import js_divergence_matrix

    n_states = len(distributions[0]) if distributions else 0
    if any(len(d) != n_states for d in distributions):
        raise ValueError("every checkpoint needs one distribution per probe state")
    total = np.zeros((len(distributions), len(distributions)))
    for s in range(n_states):
        total += js_divergence_matrix(np.stack([np.asarray(d[s], dtype=float) for d in distributions]), base=base)
    out = total / max(n_states, 1)
    return (out + out.T) / 2.0


def _distance(values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.abs(v[:, None] - v[None, :])


def _partition(matrix: np.ndarray, labels: Sequence[str], *, permutations: int, rng: Any) -> dict[str, Any]:
    from creditaudit.stats import partition_test

    try:
        res = partition_test(matrix, list(labels), permutations=permutations, alternative="greater", rng=rng)
    except ValueError as exc:
        return {"undefined": str(exc), "labels": list(labels)}
    return {"labels": list(labels), "mean_between": res.mean_between, "mean_within": res.mean_within,
            "statistic": res.statistic, "pvalue": res.pvalue, "permutations": res.permutations,
            "alternative": res.alternative, "n_between_pairs": res.n_between_pairs,
            "n_within_pairs": res.n_within_pairs}


def _partial_mantel(x: np.ndarray, y: np.ndarray, z: np.ndarray, *, method: str, alternative: str, permutations: int,
                    rng: Any, names: tuple[str, str, str]) -> dict[str, Any]:
    from creditaudit.stats import partial_mantel

    entry: dict[str, Any] = {"x": names[0], "y": names[1], "z": names[2], "method": method, "alternative": alternative}
    try:
        res = partial_mantel(x, y, z, method=method, permutations=permutations, alternative=alternative, rng=rng)
    except ValueError as exc:
        entry["undefined"] = str(exc)
        return entry
    entry.update(statistic=res.statistic, pvalue=res.pvalue, permutations=res.permutations,
                 n_degenerate=res.n_degenerate)
    return entry


def divergence_stage(stage: int, checkpoints: Sequence[dict[str, Any]], *, protocol_id: str, statistics: Any) -> dict[str, Any]:
    """The divergence analysis of one stage.

    ``checkpoints``: dicts with ``arm``, ``seed``, ``probe`` (per-state distributions),
    ``displacement`` and ``credit_sparsity``.
    """
    streams = SeedStreams(protocol_id)
    labels = [f"{c['arm']}/s{c['seed']}" for c in checkpoints]
    out: dict[str, Any] = {"stage": stage, "checkpoints": labels}
    if len(checkpoints) < 3:
        out["undefined"] = f"{len(checkpoints)} checkpoints: the matrix tests need at least 3"
        return _clean(out)
    if not checkpoints[0]["probe"]:
        out["undefined"] = "no probe state"
        return _clean(out)
    arms = [c["arm"] for c in checkpoints]
    matrix = js_matrix([[np.asarray(p) for p in c["probe"]] for c in checkpoints], base=statistics.js_log_base)
    out["js_matrix"] = matrix.tolist()
    out["js_log_base"] = statistics.js_log_base
    perms = statistics.permutations
    out["between_within"] = _partition(matrix, arms, permutations=perms,
                                       rng=streams.rng(f"arms/permutation/arm/round-{stage}"))
    out["instrument_partition"] = _partition(matrix, instrument_labels(arms), permutations=perms,
                                             rng=streams.rng(f"arms/permutation/instrument/round-{stage}"))
    out["information_partition"] = _partition(matrix, information_labels(arms), permutations=perms,
                                              rng=streams.rng(f"arms/permutation/information/round-{stage}"))
    instrument = instrument_labels(arms)
    design = np.array([[float(a != b) for b in instrument] for a in instrument])
    displacement = _distance([c["displacement"] for c in checkpoints])
    sparsity = _distance([c["credit_sparsity"] or 0.0 for c in checkpoints])
    method, alternative = statistics.mantel_method, statistics.mantel_alternative
    out["partial_mantel"] = _partial_mantel(matrix, design, displacement, method=method, alternative=alternative,
                                            permutations=perms, names=("js", "design", "displacement"),
                                            rng=streams.rng(f"arms/permutation/partial-mantel/round-{stage}"))
    out["positive_control"] = _partial_mantel(matrix, sparsity, design, method=method, alternative=alternative,
                                              permutations=perms, names=("js", "credit_sparsity", "design"),
                                              rng=streams.rng(f"arms/permutation/positive-control/round-{stage}"))
    out["displacement"] = {lab: c["displacement"] for lab, c in zip(labels, checkpoints)}
    out["credit_sparsity"] = {lab: c["credit_sparsity"] for lab, c in zip(labels, checkpoints)}
    return _clean(out)


# ---------------------------------------------------------------------- everything


def analyse(evaluation: pd.DataFrame, records: Sequence[dict[str, Any]], *, arms: Sequence[str], seeds: int,
            rounds: int, protocol_id: str, statistics: Any, collapse_threshold: float) -> dict[str, Any]:
    """Every number of ``arms/analysis.json`` from the evaluation table and the round records."""
    # format collapse
    collapse = []
    included: set[tuple[str, int]] = set()
    held = evaluation[evaluation["set"] == "held_out"]
    for arm in arms:
        for s in range(seeds):
            rows = held[(held["arm"] == arm) & (held["seed"] == s)]
            steps = int(rows["steps"].sum())
            share = float(rows["inadmissible_steps"].sum()) / steps if steps else None
            excluded = share is not None and share > collapse_threshold
            collapse.append({"arm": arm, "seed": s, "inadmissible_share": share, "excluded": excluded})
            if not excluded and len(rows):
                included.add((arm, s))
    success: dict[str, Any] = {}
    for set_name in ("held_out", "train"):
        rows = evaluation[evaluation["set"] == set_name]
        base_rows = rows[rows["arm"] == "base"]
        entry: dict[str, Any] = {"base": float(base_rows["success"].mean()) if len(rows) else None,
                                 "n_tasks": int(base_rows["task_index"].nunique()),
                                 "n_episodes": int(base_rows.shape[0]), "arms": {}}
        for arm in arms:
            per_seed = {str(s): float(rows[(rows["arm"] == arm) & (rows["seed"] == s)]["success"].mean())
                        for s in range(seeds) if len(rows[(rows["arm"] == arm) & (rows["seed"] == s)])}
            kept = [v for s, v in per_seed.items() if (arm, int(s)) in included]
            entry["arms"][arm] = {"per_seed": per_seed, "mean_included": float(np.mean(kept)) if kept else None}
        success[set_name] = entry
    comparisons = compare_arms(held, included, band=statistics.equivalence_band, alpha=statistics.alpha,
                               power=statistics.power)
    learning = learning_check(evaluation[evaluation["set"] == "train"], included, arms=arms, alpha=statistics.alpha)
    # dose
    dose: dict[str, Any] = {}
    for arm in arms:
        rows = [r for r in records if r["arm"] == arm]
        per_round = []
        for r in range(1, rounds + 1):
            at = [x for x in rows if x["round"] == r]
            per_round.append({"round": r, "steps": [x["steps"] for x in at], "natural_steps": [x["natural_steps"] for x in at],
                              "kept": [x["kept"] for x in at], "turns": [x["turns"] for x in at],
                              "mean_steps": float(np.mean([x["steps"] for x in at])) if at else None})
        totals = [x["steps_total"] for x in rows if x["round"] == rounds]
        dose[arm] = {"per_round": per_round, "steps_total_per_seed": totals,
                     "mean_steps_per_round": float(np.mean([x["steps"] for x in rows])) if rows else None,
                     "credit_sparsity": float(np.mean([x["credit_sparsity"] for x in rows if x["round"] == rounds]))
                     if totals else None}
    stages = []
    for r in range(1, rounds + 1):
        checkpoints = [x for arm in arms for s in range(seeds) for x in records
                       if x["arm"] == arm and x["seed"] == s and x["round"] == r and (arm, s) in included]
        stages.append(divergence_stage(r, checkpoints, protocol_id=protocol_id, statistics=statistics))
    means = [d["mean_steps_per_round"] for d in dose.values() if d["mean_steps_per_round"] is not None]
    return _clean({
        "format_collapse": {"threshold": collapse_threshold, "checkpoints": collapse},
        "success": success,
        "learning": learning,
        **comparisons,
        "dose": dose,
        "dose_range": {"max_mean_steps_per_round": max(means) if means else None,
                       "min_mean_steps_per_round": min(means) if means else None},
        "stages": stages,
        "paper": PAPER,
    })
