"""The measurability map: where is a step's contribution measurable at all? (docs/design.md §3)

From the replay turn table: the share of complete turns that are pivotal, the share with
``sigma_floor = 0``, the share of decision points without a counterfactual, and whether the
exclusion is random — the mean policy log-prob of included minus excluded turns with a cluster
(trajectory) percentile bootstrap CI (the paper: -0.70 for Qwen, excluded turns are the
high-probability ones) — plus the aggregate resolution statement for turns with no measured
effect: a zero is "not measured above the resolution bound", never "no effect".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from creditaudit.protocol.seeds import rng as stream_rng

__all__ = ["MeasurabilityMap", "measurability_map", "degenerate_trajectories", "resolved_pivotal"]


@dataclass(frozen=True)
class MeasurabilityMap:
    """The map's figures (shares are fractions; counts are turns unless named otherwise)."""

    n_turns: int
    n_complete: int
    n_no_counterfactual: int
    n_incomplete: int
    n_diverged: int
    share_pivotal: float | None
    share_sigma_floor_zero: float | None
    share_no_counterfactual: float | None
    logprob_gap: float | None
    logprob_gap_ci: tuple[float, float] | None
    logprob_gap_resamples: int
    logprob_gap_degenerate: int
    n_zero: int
    n_zero_all_equal: int
    fact_resolution: float | None
    alt_resolution: float | None
    n_trajectories: int
    n_degenerate_trajectories: int
    resolution_statement: str
    n_not_sampled: int = 0
    """Turns outside the preregistered sample (``replay.turns_per_trajectory``); not in ``n_turns``."""
    n_pivotal: int = 0
    """Complete turns with ``A_replay != 0`` (the paper's pivotal)."""
    n_resolved_pivotal: int = 0
    """Complete turns whose ``A_replay`` interval excludes 0 (resolved-pivotal, docs/design.md §3)."""
    share_resolved_pivotal: float | None = None
    """Share of complete turns that are resolved-pivotal (beside ``share_pivotal``: with 3 rollouts an
    arm most zero-effect turns come out pivotal by noise)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["logprob_gap_ci"] = list(self.logprob_gap_ci) if self.logprob_gap_ci else None
        return out


def resolved_pivotal(df: Any) -> np.ndarray:
    """Per turn of a replay table: complete and its ``A_replay`` interval (``ci_low``, ``ci_high``)
    excludes 0 (docs/design.md §3). A table without the interval columns has no resolved-pivotal turn.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"status": ["complete"] * 3 + ["no_counterfactual"], "ci_low": [0.1, -0.2, -0.9, 0.5],
    ...                    "ci_high": [0.6, 0.3, -0.1, 0.9]})
    >>> resolved_pivotal(df).tolist()
    [True, False, True, False]
    """
    if "ci_low" not in df or "ci_high" not in df:
        return np.zeros(len(df), dtype=bool)
    low = df["ci_low"].to_numpy(dtype=float, na_value=np.nan)
    high = df["ci_high"].to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        excludes = (low > 0) | (high < 0)
    return (df["status"].to_numpy() == "complete") & excludes


def degenerate_trajectories(df: Any, *, min_complete_turns: int, exclude_constant: bool) -> set[str]:
    """Trajectories with fewer than ``min_complete_turns`` complete turns or constant A_replay."""
    out = set()
    for traj, frame in df.groupby("trajectory_id", sort=False):
        complete = frame[frame.status == "complete"]
        if len(complete) < min_complete_turns:
            out.add(traj)
        elif exclude_constant and complete.a_replay.nunique() <= 1:
            out.add(traj)
    return out


def _gap_bootstrap(df: Any, *, iterations: int, level: float, rng: np.random.Generator):
    """Included-minus-excluded mean log-prob, cluster-bootstrapped over trajectories."""
    from creditaudit.stats import cluster_bootstrap

    groups = [g for _, g in df.groupby("trajectory_id", sort=True)]
    inc = [g.loc[g.status == "complete", "mean_logprob"] for g in groups]
    exc = [g.loc[g.status == "no_counterfactual", "mean_logprob"] for g in groups]
    data = tuple(np.array(v, dtype=float) for v in (
        [x.sum() for x in inc], [len(x) for x in inc], [x.sum() for x in exc], [len(x) for x in exc]))
    if data[1].sum() == 0 or data[3].sum() == 0:
        return None, None, 0, 0

    def gap(inc_sum, inc_n, exc_sum, exc_n):
        return inc_sum.sum(-1) / inc_n.sum(-1) - exc_sum.sum(-1) / exc_n.sum(-1)

    result = cluster_bootstrap(data, gap, n_resamples=iterations, confidence_level=level, rng=rng)
    return result.statistic, tuple(result.ci), result.n_resamples, result.n_degenerate


def measurability_map(turns: pa.Table, *, protocol_id: str, protocol: Any) -> MeasurabilityMap:
    """Compute the map from a replay turn table under ``protocol``'s statistics and exclusions."""
    df = turns.to_pandas()
    n_not_sampled = int((df.status == "not_sampled").sum())
    df = df[df.status != "not_sampled"]  # every share is of the preregistered sample of turns
    n_turns = len(df)
    status = df.status.value_counts()
    complete = df[df.status == "complete"]
    n_complete = int(len(complete))
    n_resolved = int(resolved_pivotal(df).sum())
    zero = complete[complete.a_replay == 0]
    all_equal = zero[zero.fact_resolution.notna() & zero.alt_resolution.notna()]
    gap, ci, resamples, degenerate = _gap_bootstrap(
        df,
        iterations=protocol.statistics.bootstrap_iterations,
        level=protocol.statistics.ci_level,
        rng=stream_rng(protocol_id, "replay/map/logprob-gap"),
    )
    fact_res = float(zero.fact_resolution.max()) if len(zero) and zero.fact_resolution.notna().any() else None
    alt_res = float(zero.alt_resolution.max()) if len(zero) and zero.alt_resolution.notna().any() else None
    degenerate_ids = degenerate_trajectories(
        df, min_complete_turns=protocol.exclusions.min_complete_turns,
        exclude_constant=protocol.exclusions.exclude_constant_replay,
    )
    if len(zero):
        statement = (
            f"{len(zero)} of {n_complete} complete turns have A_replay = 0; in {len(all_equal)} of them every "
            f"outcome of both arms was equal, which excludes (one-sided {1 - protocol.replay.resolution_alpha:.0%}) "
            f"only effects larger than {fact_res:.3f} on the factual arm"
            + (f" and {alt_res:.3f} on the alternative arm" if alt_res is not None else "")
            + ": these are not measured at this resolution, not shown to have no effect"
        ) if fact_res is not None else (
            f"{len(zero)} of {n_complete} complete turns have A_replay = 0 with varying outcomes: not measured "
            "at this resolution, not shown to have no effect"
        )
    else:
        statement = "no complete turn has A_replay = 0"
    share = (lambda k, d: float(k) / d if d else None)  # undefined, not NaN: artifacts are canonical JSON
    return MeasurabilityMap(
        n_turns=n_turns,
        n_complete=n_complete,
        n_no_counterfactual=int(status.get("no_counterfactual", 0)),
        n_incomplete=int(status.get("incomplete", 0)),
        n_diverged=int(status.get("diverged", 0)),
        share_pivotal=share(int(complete.pivotal.sum()), n_complete),
        share_resolved_pivotal=share(n_resolved, n_complete),
        n_pivotal=int(complete.pivotal.sum()),
        n_resolved_pivotal=n_resolved,
        share_sigma_floor_zero=share(int((complete.sigma_floor == 0).sum()), n_complete),
        share_no_counterfactual=share(int(status.get("no_counterfactual", 0)), n_turns),
        logprob_gap=gap,
        logprob_gap_ci=ci,
        logprob_gap_resamples=resamples,
        logprob_gap_degenerate=degenerate,
        n_zero=int(len(zero)),
        n_zero_all_equal=int(len(all_equal)),
        fact_resolution=fact_res,
        alt_resolution=alt_res,
        n_trajectories=int(df.trajectory_id.nunique()),
        n_degenerate_trajectories=len(degenerate_ids),
        resolution_statement=statement,
        n_not_sampled=n_not_sampled,
    )
