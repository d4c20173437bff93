"""Ledger entries of the executed replay: counters and the measurability map (docs/design.md §3).

Recomputed from ``replay/turns.parquet`` and ``replay/rollouts.parquet`` with the audit's own
:func:`~creditaudit.audit.measurability.measurability_map` (same named seed stream), never read
from the replay summary.
"""

from __future__ import annotations

from creditaudit.ledger.producer import ProducerContext, Value, producer, stage_ran

__all__ = ["replay_entries", "measurability_entries"]


@producer("replay", inputs=("replay.turns", "replay.rollouts"), version=1,
          when=stage_ran("replay", "replay.turns"),
          description="Replay counters: turns, rollouts, prefix divergences, restore failures.")
def replay_entries(ctx: ProducerContext) -> list[Value]:
    turns = ctx.table("replay.turns").select(["trajectory_id", "prefix_ok", "status"]).to_pandas()
    rollouts = ctx.table("replay.rollouts").select(["restore_ok", "outcome"]).to_pandas()
    # one divergence per trajectory: every turn after the first divergence is unreachable
    diverged = turns.loc[~turns.prefix_ok.astype(bool), "trajectory_id"].nunique()
    return [
        Value("replay.n_trajectories", int(turns.trajectory_id.nunique()), "d"),
        Value("replay.n_turns", int(len(turns)), "d"),
        Value("replay.n_rollouts", int(len(rollouts)), "d"),
        Value("replay.prefix_divergences", int(diverged), "d"),
        Value("replay.restore_failures", int((~rollouts.restore_ok.astype(bool)).sum()), "d"),
        Value("replay.rollout_success_rate", float(rollouts.outcome.mean()) if len(rollouts) else None, ".3f"),
    ]


@producer("measurability", inputs=("replay.turns",), version=3,
          when=stage_ran("replay", "replay.turns"),
          description="The measurability map: pivotal share, zero noise floor, no counterfactual, log-prob gap.")
def measurability_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.audit.measurability import measurability_map

    m = measurability_map(ctx.table("replay.turns"), protocol_id=ctx.protocol_id, protocol=ctx.protocol)
    ci = m.logprob_gap_ci or (None, None)
    p = "measurability"
    return [
        Value(f"{p}.n_turns", m.n_turns, "d"),
        Value(f"{p}.n_complete", m.n_complete, "d"),
        Value(f"{p}.n_no_counterfactual", m.n_no_counterfactual, "d"),
        Value(f"{p}.n_incomplete", m.n_incomplete, "d"),
        Value(f"{p}.n_diverged", m.n_diverged, "d"),
        Value(f"{p}.n_not_sampled", m.n_not_sampled, "d"),
        Value(f"{p}.share_pivotal", m.share_pivotal, ".3f"),
        Value(f"{p}.n_pivotal", m.n_pivotal, "d"),
        Value(f"{p}.n_resolved_pivotal", m.n_resolved_pivotal, "d"),
        Value(f"{p}.share_resolved_pivotal", m.share_resolved_pivotal, ".3f"),
        Value(f"{p}.share_sigma_floor_zero", m.share_sigma_floor_zero, ".3f"),
        Value(f"{p}.share_no_counterfactual", m.share_no_counterfactual, ".3f"),
        Value(f"{p}.logprob_gap", m.logprob_gap, "+.3f"),
        Value(f"{p}.logprob_gap_ci_low", ci[0], "+.3f"),
        Value(f"{p}.logprob_gap_ci_high", ci[1], "+.3f"),
        Value(f"{p}.logprob_gap_resamples", m.logprob_gap_resamples, "d"),
        Value(f"{p}.logprob_gap_degenerate", m.logprob_gap_degenerate, "d"),
        Value(f"{p}.n_zero", m.n_zero, "d"),
        Value(f"{p}.n_zero_all_equal", m.n_zero_all_equal, "d"),
        Value(f"{p}.fact_resolution", m.fact_resolution, ".3f"),
        Value(f"{p}.alt_resolution", m.alt_resolution, ".3f"),
        Value(f"{p}.n_trajectories", m.n_trajectories, "d"),
        Value(f"{p}.n_degenerate_trajectories", m.n_degenerate_trajectories, "d"),
        Value(f"{p}.resolution_statement", m.resolution_statement),
    ]
