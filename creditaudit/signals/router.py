"""The confidence router: send the lowest-confidence turns to the judge.

With ``n`` turns that have a confidence and a target routed share ``s``, the router routes the
``k = floor(s * n + 1/2)`` turns of lowest confidence (ties broken by trajectory order, then turn:
a fixed order statistic, so the routed share is ``k / n``, within ``1/(2n)`` of the target). The
threshold is the ``k``-th smallest confidence. Turns without a confidence are always routed (a
router cannot skip what it cannot score) and reported.

The router is a cost mechanism, not a detector, and it is always reported with its recall of
pivotal turns beside the routed share (chance), when replay results exist: the audit paper found
recall at chance while saving ~13% of judge calls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["route", "router_report"]


def route(confidence: pd.DataFrame, *, routed_share: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Which turns the router sends to the judge.

    Parameters
    ----------
    confidence : pandas.DataFrame
        The confidence family's credit frame (``trajectory_id``, ``turn``, ``credit``; NaN = no
        confidence), rows in trajectory order then turn.
    routed_share : float
        Target share in (0, 1].

    Returns
    -------
    (routed, info) : tuple
        Boolean array over the rows, and ``{"threshold", "n_scored", "n_routed_scored", "target"}``.

    Examples
    --------
    >>> frame = pd.DataFrame({"trajectory_id": ["a"] * 4, "turn": [0, 1, 2, 3], "credit": [0.9, 0.1, 0.5, 0.3]})
    >>> routed, info = route(frame, routed_share=0.5)
    >>> routed.tolist(), info["threshold"]
    ([False, True, False, True], 0.3)
    """
    if not (isinstance(routed_share, (int, float)) and 0 < routed_share <= 1):
        raise ValueError(f"`routed_share` must be in (0, 1]; got {routed_share!r}")
    c = confidence["credit"].to_numpy(dtype=float)
    scored = np.flatnonzero(~np.isnan(c))
    n = scored.size
    k = int(math.floor(routed_share * n + 0.5))
    order = scored[np.argsort(c[scored], kind="stable")]  # stable: ties keep trajectory/turn order
    routed = np.isnan(c)
    routed[order[:k]] = True
    threshold = float(c[order[k - 1]]) if k > 0 else None
    return routed, {"target": float(routed_share), "threshold": threshold, "n_scored": int(n), "n_routed_scored": k}


def router_report(
    confidence: pd.DataFrame, *, routed_share: float, confidence_family: str, judge_family: str,
    replay_turns: pd.DataFrame | None = None, confidence_level: float = 0.95,
) -> dict[str, Any]:
    """The router's report: routed share, judge calls saved, and pivotal recall beside chance.

    ``judge_calls_saved_per_turn`` is ``1 - routed/turns`` over all turns; per trajectory it is the
    mean over trajectories of each one's unrouted share (the two differ when trajectories differ in
    length). ``recall`` is the share of pivotal complete turns that were routed, and ``chance`` the
    routed share among complete turns (what a router blind to pivotality recalls in expectation);
    both are always reported together, with Wilson intervals.
    """
    from creditaudit.stats import wilson

    routed, info = route(confidence, routed_share=routed_share)
    n = len(confidence)
    frame = confidence[["trajectory_id", "turn"]].assign(routed=routed)
    per_traj = frame.groupby("trajectory_id", sort=False)["routed"].mean()
    report: dict[str, Any] = {
        "confidence_family": confidence_family,
        "judge_family": judge_family,
        "target_routed_share": info["target"],
        "threshold": info["threshold"],
        "n_turns": n,
        "n_turns_without_confidence": int(n - info["n_scored"]),
        "n_routed": int(routed.sum()),
        "routed_share": float(routed.mean()) if n else None,
        "routed_share_of_scored": info["n_routed_scored"] / info["n_scored"] if info["n_scored"] else None,
        "judge_calls_saved_per_turn": float(1 - routed.mean()) if n else None,
        "judge_calls_saved_per_trajectory": float((1 - per_traj).mean()) if n else None,
        "share_trajectories_without_judge_call": float((per_traj == 0).mean()) if n else None,
        "pivotal_recall": None,
    }
    if replay_turns is not None:
        complete = replay_turns[replay_turns["status"] == "complete"][["trajectory_id", "turn", "pivotal"]]
        merged = frame.merge(complete, on=["trajectory_id", "turn"], how="inner")
        pivotal = merged["pivotal"].astype(bool).to_numpy()
        n_piv, n_complete = int(pivotal.sum()), len(merged)
        hits = int(merged["routed"].to_numpy()[pivotal].sum())
        n_routed_complete = int(merged["routed"].sum())
        recall = wilson(hits, n_piv, confidence_level=confidence_level) if n_piv else None
        chance = wilson(n_routed_complete, n_complete, confidence_level=confidence_level) if n_complete else None
        report["pivotal_recall"] = {
            "n_complete_turns": n_complete,
            "n_pivotal": n_piv,
            "n_pivotal_routed": hits,
            "recall": recall.proportion if recall else None,
            "recall_ci": list(recall.ci) if recall else None,
            "chance": chance.proportion if chance else None,
            "chance_ci": list(chance.ci) if chance else None,
            "recall_minus_chance": (recall.proportion - chance.proportion) if recall and chance else None,
            "confidence_level": confidence_level,
        }
    else:
        report["pivotal_recall_unavailable"] = "no replay results in the run directory (run `creditaudit replay`)"
    return report
