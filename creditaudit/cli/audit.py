"""``creditaudit audit`` and ``creditaudit export``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["audit_command", "export_command"]

_RUN_HELP = "Run directory holding protocol.yaml (frozen), its lock and keys/."


def audit_command(
    run: Path = typer.Option(Path("."), "--run", help=_RUN_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print audit/audit.json (verdicts, statistics, "
                                 "decisions) as JSON on stdout instead of the verdict sentences."),
) -> None:
    """Fidelity audit: every family and control against the replay truth, verdicts through the frozen order."""
    from creditaudit.audit.export import STATISTICS_PARQUET
    from creditaudit.audit.stage import AUDIT_JSON, SUMMARY_MD, run_audit
    from creditaudit.cli.replay import protocol_in
    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.signing import load_signer

    protocol = protocol_in(run)
    signer = load_signer(run / "keys" / "creditaudit.key")
    frozen = require_frozen(protocol)
    if stage_is_current(frozen.run_dir, "audit", frozen.id, signer.key_id):
        # a finished audit whose inputs and outputs match its link record is not run (or attested) again
        document = json.loads((frozen.run_dir / AUDIT_JSON).read_text("utf-8"))
        if not as_json:
            typer.echo("audit already done; its inputs and outputs match its link record (nothing rewritten)")
    else:
        document = run_audit(protocol, signer).model_dump(mode="json")
    if as_json:
        typer.echo(json.dumps(document, sort_keys=True))
        return
    for sentence in document["sentences"].values():
        typer.echo(sentence)
    typer.echo(f"wrote {run / SUMMARY_MD}, {run / 'audit' / 'audit.json'}, {run / STATISTICS_PARQUET} and figures "
               f"in {run / 'audit' / 'figures'}")


def export_command(
    run: Path = typer.Option(Path("."), "--run", help=_RUN_HELP),
    out: Path = typer.Option(..., "--out", help="The Parquet file to write (never overwritten)."),
) -> None:
    """Write the per-turn table a trainer can use: every collected turn with its replay truth (A_replay, its
    interval, status, pivotal, included) and every signal's and control's credit and abstention reason."""
    from creditaudit.artifacts import write_parquet_atomic
    from creditaudit.audit.export import turn_table
    from creditaudit.audit.measurability import degenerate_trajectories
    from creditaudit.audit.stage import read_credit
    from creditaudit.cli.replay import protocol_in
    from creditaudit.errors import InputError
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.collect import read_trajectories
    from creditaudit.replay.stage import read_replay

    if out.exists():
        raise InputError(f"{out}: already exists; `creditaudit export` never overwrites (choose another path)")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: no such directory for --out")
    frozen = require_frozen(protocol_in(run))
    protocol = frozen.protocol
    replay = read_replay(frozen)[0].to_pandas()
    credit = read_credit(frozen)
    trajectories = read_trajectories(frozen).select(["trajectory_id", "task_id", "turn", "action"]).to_pandas()
    degenerate = degenerate_trajectories(replay, min_complete_turns=protocol.exclusions.min_complete_turns,
                                         exclude_constant=protocol.exclusions.exclude_constant_replay)
    subjects = [s.name for s in protocol.signals] + [c.name for c in protocol.controls]
    table = turn_table(replay, credit, trajectories, subjects=subjects, degenerate=degenerate,
                       protocol_id=frozen.id)
    write_parquet_atomic(table, out)
    typer.echo(f"wrote {out}: {table.num_rows} turns, {len(subjects)} signals and controls")
