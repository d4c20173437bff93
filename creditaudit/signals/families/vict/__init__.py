"""VICT (verifier-informed credit): the instrumentation of ALFWorld games in :mod:`.atoms`, the
core search, leave-one-out margins, robust normalisation and the family in :mod:`.family`."""
from creditaudit.signals.families.vict.family import (
    REPAIR_EDGES,
    SUCCESS_EDGES,
    CoreResult,
    VictFamily,
    VictRollout,
    calibrate,
    closure,
    diagnostics_report,
    direction,
    displacement,
    exhaustive_core,
    greedy_core,
    loo_margins,
    robust_normalise,
    vict_family,
    vict_group,
    vict_report,
)

__all__ = [
    "REPAIR_EDGES", "SUCCESS_EDGES", "CoreResult", "VictFamily", "VictRollout", "calibrate", "closure", "diagnostics_report",
    "direction", "displacement", "exhaustive_core", "greedy_core", "loo_margins", "robust_normalise",
    "vict_family", "vict_group", "vict_report",
]
