"""Tables for trainers and scripts: the replay truth beside every signal's credit, one row per turn,
and the audit's statistics in long (tidy) form.

``creditaudit export`` writes :func:`turn_table` as Parquet, so a trainer can use the executed
replay's ``A_replay`` as a reference signal; the audit stage writes :func:`statistics_table` beside
``audit/audit.json`` as ``audit/statistics.parquet``.

Example:
    A subject's statistics, each with its interval where the audit computes one:

    >>> table = statistics_table({"subjects": [{"subject": "implicit", "kind": "family", "of": None,
    ...     "estimate": 0.2, "ci_low": 0.1, "ci_high": 0.3, "sign_agreement": 0.6, "sign_ci_low": 0.5,
    ...     "sign_ci_high": 0.7, "n_trajectories": 20, "note": ""}]})
    >>> table.to_pandas()[["statistic", "value", "ci_low", "ci_high"]].to_string(index=False)
    '     statistic  value  ci_low  ci_high\\n      estimate    0.2     0.1      0.3\\nn_trajectories   20.0     NaN      NaN\\nsign_agreement    0.6     0.5      0.7'
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pyarrow as pa

__all__ = ["STATISTICS_PARQUET", "STATISTICS_SCHEMA", "TURN_EXPORT_FIXED", "statistics_table", "turn_table"]

STATISTICS_PARQUET = "audit/statistics.parquet"

STATISTICS_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False, metadata={"doc": "the protocol every input was stamped with"}),
        pa.field("subject", pa.string(), nullable=False, metadata={"doc": "a signal or control name of the protocol"}),
        pa.field("kind", pa.string(), nullable=False, metadata={"doc": "family, or the control kind"}),
        pa.field("of", pa.string(), nullable=True, metadata={"doc": "the signal a control is of (null: a null control)"}),
        pa.field("statistic", pa.string(), nullable=False, metadata={"doc": "the name a protocol's gates use"}),
        pa.field("value", pa.float64(), nullable=True, metadata={"doc": "null where undefined on this data"}),
        pa.field("ci_low", pa.float64(), nullable=True, metadata={"doc": "lower end of its interval, if any"}),
        pa.field("ci_high", pa.float64(), nullable=True, metadata={"doc": "upper end of its interval, if any"}),
    ]
)

#: Columns of the per-turn export before the per-subject ``credit__NAME`` / ``abstain_reason__NAME`` pairs.
TURN_EXPORT_FIXED = ("protocol_id", "task_id", "trajectory_id", "turn", "action", "status", "included",
                     "a_replay", "ci_low", "ci_high", "sigma_floor", "pivotal")

#: Irregular interval names; any other statistic ``X`` has its interval in ``X_ci_low`` / ``X_ci_high``.
_INTERVALS = {"estimate": ("ci_low", "ci_high"), "sign_agreement": ("sign_ci_low", "sign_ci_high")}
_NOT_STATISTICS = {"subject", "kind", "of", "note"}


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, str):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def statistics_table(audit: dict[str, Any], *, protocol_id: str = "") -> pa.Table:
    """``audit.json``'s subjects as one row per (subject, statistic), sorted, with the interval the
    audit computed for it (hand-written: a reshaping no library does for this document)."""
    rows = []
    for subject in audit["subjects"]:
        interval_keys = {k for pair in _INTERVALS.values() for k in pair if k in subject}
        interval_keys |= {k for k in subject if k.endswith(("_ci_low", "_ci_high"))}
        for statistic in sorted(subject):
            value = subject[statistic]
            if statistic in _NOT_STATISTICS or statistic in interval_keys or isinstance(value, (str, list, dict)):
                continue
            low_key, high_key = _INTERVALS.get(statistic, (f"{statistic}_ci_low", f"{statistic}_ci_high"))
            rows.append({"protocol_id": audit.get("protocol_id", protocol_id), "subject": subject["subject"],
                         "kind": subject["kind"], "of": subject.get("of"), "statistic": statistic,
                         "value": _number(value), "ci_low": _number(subject.get(low_key)),
                         "ci_high": _number(subject.get(high_key))})
    return pa.Table.from_pylist(rows, schema=STATISTICS_SCHEMA)


def turn_table(replay: pd.DataFrame, credit: pd.DataFrame, trajectories: pd.DataFrame, *,
               subjects: list[str], degenerate: set[str], protocol_id: str) -> pa.Table:
    """One row per collected turn: the replay truth (``a_replay`` with its interval, ``status``,
    ``pivotal``; ``included`` when the audit used the turn) and every subject's credit and abstention
    reason in ``credit__NAME`` / ``abstain_reason__NAME``, in the protocol's order.

    ``credit`` is the credit table (one row per subject and turn), ``trajectories`` the collected
    turns (``trajectory_id``, ``task_id``, ``turn``, ``action``).
    """
    base = trajectories[["trajectory_id", "task_id", "turn", "action"]].merge(
        replay[["trajectory_id", "turn", "status", "a_replay", "ci_low", "ci_high", "sigma_floor", "pivotal"]],
        on=["trajectory_id", "turn"], how="left")
    base["included"] = (base.status == "complete") & ~base.trajectory_id.isin(degenerate)
    base.insert(0, "protocol_id", protocol_id)
    base = base[list(TURN_EXPORT_FIXED)]
    for name in subjects:
        rows = credit.loc[credit.subject == name, ["trajectory_id", "turn", "credit", "abstain_reason"]]
        rows = rows.rename(columns={"credit": f"credit__{name}", "abstain_reason": f"abstain_reason__{name}"})
        base = base.merge(rows, on=["trajectory_id", "turn"], how="left")
    base = base.sort_values(["trajectory_id", "turn"], kind="stable").reset_index(drop=True)
    fields = [pa.field("protocol_id", pa.string(), False), pa.field("task_id", pa.string(), False),
              pa.field("trajectory_id", pa.string(), False), pa.field("turn", pa.int32(), False),
              pa.field("action", pa.string(), False), pa.field("status", pa.string(), True),
              pa.field("included", pa.bool_(), False), pa.field("a_replay", pa.float64(), True),
              pa.field("ci_low", pa.float64(), True), pa.field("ci_high", pa.float64(), True),
              pa.field("sigma_floor", pa.float64(), True), pa.field("pivotal", pa.bool_(), True)]
    for name in subjects:
        fields += [pa.field(f"credit__{name}", pa.float64(), True, metadata={"doc": f"credit of {name}"}),
                   pa.field(f"abstain_reason__{name}", pa.string(), True,
                            metadata={"doc": f"why {name} abstained on the turn (null: it did not)"})]
    base["pivotal"] = base["pivotal"].astype(object).where(base["pivotal"].notna(), None)
    return pa.Table.from_pandas(base, schema=pa.schema(fields), preserve_index=False)
