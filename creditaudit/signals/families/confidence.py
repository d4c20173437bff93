"""Confidence: the policy's per-token geometric-mean probability of its own action.

``confidence_t = exp(mean_j log pi(y_j | y_<j, prompt_t))`` over the action's tokens, from the
token log-probabilities recorded at collection (the policy's own, temperature 1, under the prompt
it acted on). An action without tokens has no confidence: the turn abstains (``no_action_tokens``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa

from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, credit_frame

__all__ = ["geometric_mean_probability", "ConfidenceFamily"]


def geometric_mean_probability(token_logprobs: Sequence[float]) -> float:
    """``exp(mean_j log p_j)``: the per-token geometric-mean probability.

    Raises
    ------
    ValueError
        When ``token_logprobs`` is empty or holds a non-finite value.

    Examples
    --------
    >>> round(geometric_mean_probability([math.log(0.5), math.log(0.125)]), 6)
    0.25
    """
    values = [float(v) for v in token_logprobs]
    if not values:
        raise ValueError("`token_logprobs` must not be empty: an action without tokens has no confidence")
    if not all(math.isfinite(v) and v <= 0.0 for v in values):
        raise ValueError("`token_logprobs` must be finite natural-log probabilities (<= 0)")
    return math.exp(math.fsum(values) / len(values))


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("trajectory_id", pa.string()),
    pa.field("turn", pa.int32()),
    pa.field("n_tokens", pa.int32()),
    pa.field("mean_logprob", pa.float64()),
    pa.field("confidence", pa.float64()),
])


class ConfidenceFamily(FamilyBase):
    """The ``confidence`` credit family (no constants): a probability with no neutral point, so sign
    agreement centres it within each trajectory (``neutral = "trajectory-mean"``)."""

    neutral = "trajectory-mean"

    def __init__(self, *, name: str):
        self.name = name

    def compute(self, context: SignalContext) -> FamilyOutput:
        values, reasons = {}, {}
        cols = {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        for traj in context.trajectories:
            for rec in traj.turns:
                key = (traj.trajectory_id, rec.turn)
                mean = conf = None
                if not rec.token_logprobs:
                    reasons[key] = "no_action_tokens"
                else:
                    conf = geometric_mean_probability(rec.token_logprobs)
                    mean = math.fsum(rec.token_logprobs) / len(rec.token_logprobs)
                    values[key] = conf
                cols["trajectory_id"].append(traj.trajectory_id)
                cols["turn"].append(rec.turn)
                cols["n_tokens"].append(len(rec.token_logprobs))
                cols["mean_logprob"].append(mean)
                cols["confidence"].append(conf)
        table = pa.Table.from_pydict(cols, schema=DIAGNOSTICS_SCHEMA)
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), table, {})


def confidence_family(*, name: str) -> ConfidenceFamily:
    """The confidence family (entry point ``confidence`` of group ``creditaudit.families``; no constants)."""
    return ConfidenceFamily(name=name)
