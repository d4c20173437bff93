"""The confidence router: routed share equals its target; recall is reported beside chance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from creditaudit.signals.router import route, router_report


def _confidence(n_traj: int, n_turns: int, seed: int = 0, ties: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 3, n_traj * n_turns).astype(float) if ties else rng.uniform(size=n_traj * n_turns)
    return pd.DataFrame({"trajectory_id": np.repeat([f"t{i}" for i in range(n_traj)], n_turns),
                         "turn": np.tile(np.arange(n_turns), n_traj), "credit": values})


@pytest.mark.parametrize("target", [0.05, 0.13, 0.5, 0.87, 1.0])
@pytest.mark.parametrize("ties", [False, True])
def test_routed_share_equals_its_target(target, ties):
    frame = _confidence(23, 7, ties=ties)
    routed, info = route(frame, routed_share=target)
    n = len(frame)
    assert routed.sum() == int(np.floor(target * n + 0.5))
    assert abs(routed.mean() - target) <= 1 / (2 * n)
    # the routed turns are the lowest-confidence ones: nothing unrouted is below the threshold
    c = frame.credit.to_numpy()
    assert c[routed].max() == info["threshold"] and (c[~routed] >= info["threshold"]).all()


def test_turns_without_confidence_are_always_routed():
    frame = _confidence(2, 5)
    frame.loc[3, "credit"] = np.nan
    routed, info = route(frame, routed_share=0.5)
    assert routed[3] and info["n_scored"] == 9 and info["n_routed_scored"] == 5


def test_report_gives_savings_and_recall_beside_chance():
    frame = pd.DataFrame({"trajectory_id": ["a"] * 4 + ["b"] * 2, "turn": [0, 1, 2, 3, 0, 1],
                          "credit": [0.1, 0.9, 0.2, 0.8, 0.3, 0.95]})
    replay = pd.DataFrame({"trajectory_id": ["a"] * 4 + ["b"] * 2, "turn": [0, 1, 2, 3, 0, 1],
                           "status": ["complete"] * 5 + ["no_counterfactual"],
                           "pivotal": [True, True, False, False, True, None]})
    report = router_report(frame, routed_share=0.5, confidence_family="confidence", judge_family="judge",
                           replay_turns=replay)
    # routed: the three lowest (0.1, 0.2, 0.3) -> a0, a2, b0
    assert report["n_routed"] == 3 and report["routed_share"] == 0.5
    assert report["judge_calls_saved_per_turn"] == 0.5
    assert report["judge_calls_saved_per_trajectory"] == pytest.approx((0.5 + 0.5) / 2)
    recall = report["pivotal_recall"]
    assert recall["n_complete_turns"] == 5 and recall["n_pivotal"] == 3 and recall["n_pivotal_routed"] == 2
    assert recall["recall"] == pytest.approx(2 / 3) and recall["chance"] == pytest.approx(3 / 5)
    assert recall["recall_ci"][0] < recall["recall"] < recall["recall_ci"][1]
    without = router_report(frame, routed_share=0.5, confidence_family="c", judge_family="j")
    assert without["pivotal_recall"] is None and "run `creditaudit replay`" in without["pivotal_recall_unavailable"]


def test_route_validates_the_target():
    with pytest.raises(ValueError, match="`routed_share`"):
        route(_confidence(1, 3), routed_share=0.0)
