"""Fidelity audit of credit signals against replay truth, and the measurability map."""

from creditaudit.audit.core import AuditResult, audit_tables, fluency_echo, verdict_sentence
from creditaudit.audit.fidelity import (
    SubjectStats,
    bootstrap_pvalue,
    included_turns,
    neutral_value,
    null_control_level,
    subject_statistics,
)
from creditaudit.audit.measurability import MeasurabilityMap, degenerate_trajectories, measurability_map
from creditaudit.audit.metrics import LiftResult, precision_at_pivotal_lift

__all__ = [
    "AuditResult",
    "LiftResult",
    "MeasurabilityMap",
    "SubjectStats",
    "audit_tables",
    "bootstrap_pvalue",
    "degenerate_trajectories",
    "fluency_echo",
    "included_turns",
    "measurability_map",
    "neutral_value",
    "null_control_level",
    "precision_at_pivotal_lift",
    "subject_statistics",
    "verdict_sentence",
]
