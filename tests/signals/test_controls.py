"""Controls: null controls from named streams, marginal-matched shuffles, inversion, strength."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from creditaudit.protocol.seeds import SeedStreams
from creditaudit.signals.controls import (
    changed_share,
    control_stream,
    inverted_control,
    null_control,
    shuffle_control,
    shuffle_values,
)

PID = "c" * 64


def _credit(values: dict[str, list]) -> pd.DataFrame:
    rows = [(tid, t, v) for tid, vs in values.items() for t, v in enumerate(vs)]
    frame = pd.DataFrame(rows, columns=["trajectory_id", "turn", "credit"]).astype({"credit": float})
    frame["abstain_reason"] = pd.Series([None if v == v else "x" for v in frame["credit"]], dtype=object)
    return frame


def test_shuffle_preserves_every_trajectorys_multiset_and_abstentions():
    rng = np.random.default_rng(5)
    values = {f"t{i}": list(rng.normal(size=int(rng.integers(2, 12)))) for i in range(20)}
    values["t3"][1] = float("nan")  # an abstention stays where it was
    values["ties"] = [1.0, 0.0, 0.0, 1.0, 1.0, -1.0]
    credit = _credit(values)
    shuffled = shuffle_control("shuffle-x", credit, PID)
    for tid, frame in credit.groupby("trajectory_id"):
        new = shuffled[shuffled.trajectory_id == tid]
        assert Counter(frame.credit.dropna()) == Counter(new.credit.dropna())
        assert (frame.credit.isna().to_numpy() == new.credit.isna().to_numpy()).all()
    assert shuffled["abstain_reason"].tolist().count("source_abstained") == 1
    # seeded by the control's named stream per trajectory: reproducible, order-independent
    again = shuffle_control("shuffle-x", credit.iloc[::-1].reset_index(drop=True), PID)
    merged = shuffled.merge(again, on=["trajectory_id", "turn"])
    np.testing.assert_array_equal(merged.credit_x.to_numpy(), merged.credit_y.to_numpy())
    t0 = credit[credit.trajectory_id == "t0"].credit.to_numpy()
    expected = t0[SeedStreams(PID).rng(control_stream("shuffle-x", "t0")).permutation(t0.size)]
    np.testing.assert_array_equal(shuffled[shuffled.trajectory_id == "t0"].credit.to_numpy(), expected)


def test_changed_share_is_high_for_continuous_and_low_for_tie_heavy_credit():
    rng = np.random.default_rng(1)
    continuous = _credit({f"t{i}": list(rng.normal(size=10)) for i in range(50)})
    ties = _credit({f"t{i}": [1.0] * 8 + [0.0, -1.0] for i in range(50)})
    c = changed_share(continuous, shuffle_control("s", continuous, PID))
    t = changed_share(ties, shuffle_control("s", ties, PID))
    assert c["n_positions"] == 500 and 0.8 < c["changed_share"] <= 1.0
    assert t["changed_share"] < 0.45  # a permutation of mostly-equal values changes few positions
    assert changed_share(_credit({"a": [float("nan")]}), _credit({"a": [float("nan")]}))["changed_share"] is None


def test_null_controls_are_seeded_per_trajectory_and_have_their_distribution():
    spine = pd.DataFrame({"trajectory_id": np.repeat([f"t{i}" for i in range(200)], 10),
                          "turn": np.tile(np.arange(10, dtype=np.int32), 200)})
    normal = null_control("random", "random", spine, PID)
    uniform = null_control("uniform", "uniform", spine, PID)
    assert abs(normal.credit.mean()) < 0.1 and abs(normal.credit.std() - 1) < 0.1
    assert uniform.credit.between(-1, 1).all() and abs(uniform.credit.var() - 1 / 3) < 0.05
    first = SeedStreams(PID).rng(control_stream("random", "t0")).standard_normal(10)
    np.testing.assert_array_equal(normal.credit.to_numpy()[:10], first)
    subset = null_control("random", "random", spine[spine.trajectory_id == "t7"], PID)
    np.testing.assert_array_equal(subset.credit.to_numpy(), normal[normal.trajectory_id == "t7"].credit.to_numpy())
    with pytest.raises(ValueError, match="`kind`"):
        null_control("shuffle", "x", spine, PID)


def test_inverted_is_minus_the_credit():
    credit = _credit({"a": [0.5, float("nan"), -2.0]})
    inv = inverted_control(credit)
    assert inv.credit.tolist()[0] == -0.5 and inv.credit.tolist()[2] == 2.0 and np.isnan(inv.credit[1])
    assert inv.abstain_reason.tolist() == [None, "source_abstained", None]


def test_shuffle_values_keeps_nan_in_place():
    out = shuffle_values([3.0, float("nan"), 1.0], rng=np.random.default_rng(0))
    assert np.isnan(out[1]) and sorted(out[[0, 2]]) == [1.0, 3.0]


def test_a_shuffle_shares_its_familys_turns():
    """Issue 25, item 6: the shuffle abstains exactly where its family does, and permutes the turns
    the audit includes only among themselves: a family constant on its included turns (varying only
    on turns the replay could not measure) has a shuffle constant there too."""
    values = {f"t{i}": [0.5, 0.5, float("nan"), 0.5, 0.5, 3.0, -2.0, 0.5] for i in range(12)}
    credit = _credit(values)
    audited = np.tile([True, True, True, True, True, False, False, True], 12)  # turns 5, 6: no counterfactual
    shuffled = shuffle_control("shuffle-x", credit, PID, audited=audited)
    np.testing.assert_array_equal(shuffled.credit.isna().to_numpy(), credit.credit.isna().to_numpy())
    assert shuffled.abstain_reason.notna().tolist() == credit.abstain_reason.notna().tolist()
    on_included = shuffled.credit.to_numpy()[audited & credit.credit.notna().to_numpy()]
    assert set(on_included) == {0.5}
    for tid, frame in shuffled.groupby("trajectory_id"):  # still marginal-matched per trajectory
        assert Counter(frame.credit.dropna()) == Counter(credit[credit.trajectory_id == tid].credit.dropna())
    assert changed_share(credit, shuffled)["n_changed"] > 0  # the two unmeasured turns were still permuted
    # without the replay's turns, credit moves onto included turns (what the stage avoids once replay ran)
    blind = shuffle_control("shuffle-x", credit, PID)
    assert set(blind.credit.to_numpy()[audited & credit.credit.notna().to_numpy()]) > {0.5}
    with pytest.raises(ValueError, match="one flag per row"):
        shuffle_control("shuffle-x", credit, PID, audited=audited[:-1])
