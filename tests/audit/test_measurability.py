"""The measurability map from a replay turn table built by hand."""

import numpy as np
import pyarrow as pa
import pytest

from creditaudit.audit.measurability import degenerate_trajectories, measurability_map
from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict
from creditaudit.protocol.seeds import rng as stream_rng
from creditaudit.replay.engine import TURN_TABLE_SCHEMA
from creditaudit.stats import resolution_bound

PID = "9" * 64


def _protocol(iterations=2000):
    data = protocol_dict(parse_protocol(default_template_text()))
    data["statistics"]["bootstrap_iterations"] = iterations
    return protocol_from_dict(data)


def _turn(traj, turn, status, a=None, sigma=None, lp=-1.0, fact_res=None, alt_res=None):
    return {"protocol_id": PID, "trajectory_id": traj, "turn": turn, "action": "x", "mean_logprob": lp,
            "status": status, "alternatives": [], "alt_draws": 0, "n_fact": 3, "n_alt": 12,
            "fact_mean": None, "alt_mean": None, "a_replay": a, "sigma_floor": sigma,
            "pivotal": None if a is None else a != 0, "ci_low": None, "ci_high": None,
            "fact_resolution": fact_res, "alt_resolution": alt_res, "prefix_ok": True}


@pytest.fixture()
def table():
    r3, r12 = resolution_bound(3), resolution_bound(12)
    rows = []
    rng = np.random.default_rng(0)
    for k in range(12):
        traj = f"t{k}"
        for t in range(6):
            if t == 0:
                rows.append(_turn(traj, t, "no_counterfactual", lp=-0.2 + 0.01 * k))  # confident turns excluded
            elif t % 2:
                rows.append(_turn(traj, t, "complete", a=0.0, sigma=0.0, lp=-1.5, fact_res=r3, alt_res=r12))
            else:
                rows.append(_turn(traj, t, "complete", a=float(rng.choice([0.25, -0.5, 1 / 3])), sigma=0.577, lp=-2.0 - 0.1 * k))
    rows.append(_turn("t0", 6, "incomplete"))
    return pa.Table.from_pylist(rows, schema=TURN_TABLE_SCHEMA)


def test_shares_counts_and_resolution_statement(table):
    m = measurability_map(table, protocol_id=PID, protocol=_protocol())
    assert (m.n_turns, m.n_complete, m.n_no_counterfactual, m.n_incomplete) == (73, 60, 12, 1)
    assert m.share_pivotal == pytest.approx(24 / 60)          # turns 2 and 4 of each trajectory
    assert m.share_sigma_floor_zero == pytest.approx(36 / 60)  # odd turns
    assert m.share_no_counterfactual == pytest.approx(12 / 73)
    assert (m.n_zero, m.n_zero_all_equal) == (36, 36)
    assert m.fact_resolution == pytest.approx(0.632, abs=5e-4)
    assert "not measured at this resolution, not shown to have no effect" in m.resolution_statement
    assert "no effect" not in m.resolution_statement.replace("not shown to have no effect", "")


def test_logprob_gap_and_its_cluster_bootstrap(table):
    df = table.to_pandas()
    inc = df[df.status == "complete"].mean_logprob.mean()
    exc = df[df.status == "no_counterfactual"].mean_logprob.mean()
    m = measurability_map(table, protocol_id=PID, protocol=_protocol(2000))
    assert m.logprob_gap == pytest.approx(inc - exc)
    assert m.logprob_gap < 0  # the excluded turns are the confident ones
    # independent recomputation: the same resampled trajectory ids; a resample's pooled mean of a
    # status is the sum of its drawn trajectories' sums over the sum of their counts (pandas)
    rng = stream_rng(PID, "replay/map/logprob-gap")
    ids = sorted(df.trajectory_id.unique())
    per = df.pivot_table(index="trajectory_id", columns="status", values="mean_logprob",
                         aggfunc=["sum", "count"], fill_value=0).reindex(ids)
    stats = []
    for start in range(0, 2000, 1000):
        for draw in rng.integers(0, len(ids), size=(1000, len(ids))):
            sample = per.iloc[draw].sum()
            stats.append(sample["sum", "complete"] / sample["count", "complete"]
                         - sample["sum", "no_counterfactual"] / sample["count", "no_counterfactual"])
    low, high = np.quantile(stats, [0.025, 0.975])
    assert m.logprob_gap_ci == pytest.approx((low, high), abs=1e-12)
    assert m.logprob_gap_resamples == 2000 and m.logprob_gap_degenerate == 0


def test_degenerate_trajectories():
    rows = [_turn("short", t, "complete", a=0.5 * t, sigma=0.0) for t in range(3)]
    rows += [_turn("constant", t, "complete", a=0.25, sigma=0.0) for t in range(5)]
    rows += [_turn("fine", t, "complete", a=0.1 * t, sigma=0.0) for t in range(5)]
    df = pa.Table.from_pylist(rows, schema=TURN_TABLE_SCHEMA).to_pandas()
    assert degenerate_trajectories(df, min_complete_turns=4, exclude_constant=True) == {"short", "constant"}
    assert degenerate_trajectories(df, min_complete_turns=4, exclude_constant=False) == {"short"}


def test_undefined_shares_are_null_not_nan():
    table = pa.Table.from_pylist([_turn("a", 0, "no_counterfactual")], schema=TURN_TABLE_SCHEMA)
    m = measurability_map(table, protocol_id=PID, protocol=_protocol(200))
    assert m.share_pivotal is None and m.logprob_gap is None and m.share_no_counterfactual == 1.0
