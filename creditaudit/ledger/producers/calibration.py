"""Ledger entries of the calibration (``creditaudit calibrate --run``), only when the run has one.

The calibration audits credits of known fidelity on the planted environment under the run's frozen
decision order (:mod:`creditaudit.audit.calibration`). It depends on the protocol alone, so the
producer recomputes the whole table from the protocol -- same named streams, same size -- and
never reads a number from ``calibration/calibration.json`` (it reads only the size it was run at).
"""

from __future__ import annotations

from pathlib import Path

from creditaudit.ledger.catalogue import ArtifactSpec, register_artifact
from creditaudit.ledger.producer import ProducerContext, Value, producer

__all__ = ["calibration_entries", "subject_key"]

register_artifact(ArtifactSpec(
    "calibration", "calibration/calibration.json", "json", "calibrate", "creditaudit calibrate --run",
    description="the calibration table: known-fidelity credits on the planted environment under this decision order"))


def _has_calibration(run_dir: Path) -> bool:
    return (run_dir / "calibration" / "calibration.json").is_file()


def subject_key(subject: str) -> str:
    """Entry-name key of a calibration subject (``Controls gate`` -> ``controls_gate``).

    Examples
    --------
    >>> subject_key("Controls gate"), subject_key("shuffle-oracle")
    ('controls_gate', 'shuffle-oracle')
    """
    return subject.lower().replace(" ", "_")


@producer("calibration", inputs=("calibration",), version=1, when=_has_calibration,
          description="Calibration: the decision order's verdicts on credits of known fidelity (planted environment).")
def calibration_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.audit.calibration import run_calibration

    n_tasks = int(ctx.json("calibration")["n_tasks"])
    result = run_calibration(ctx.protocol, n_tasks=n_tasks)
    keys = [subject_key(r.subject) for r in result.rows]
    out = [
        Value("calibration.subjects", keys, text=", ".join(keys)),
        Value("calibration.recovered", result.n_recovered, "d"),
        Value("calibration.of", len(result.rows), "d"),
        Value("calibration.ok", result.ok),
        Value("calibration.n_trajectories", result.n_trajectories, "d"),
        Value("calibration.n_included_turns", result.n_included_turns, "d"),
    ]
    for key, row in zip(keys, result.rows):
        p = f"calibration.{key}"
        out += [Value(f"{p}.subject", row.subject), Value(f"{p}.credit", row.credit),
                Value(f"{p}.expected", row.expected), Value(f"{p}.verdict", row.verdict),
                Value(f"{p}.recovered", row.ok), Value(f"{p}.estimate", row.estimate, "+.3f"),
                Value(f"{p}.ci_low", row.ci_low, "+.3f"), Value(f"{p}.ci_high", row.ci_high, "+.3f")]
    return out
