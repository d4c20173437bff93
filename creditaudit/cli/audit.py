"""``creditaudit audit``."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["audit_command"]


def audit_command(
    run: Path = typer.Option(Path("."), "--run", help="Run directory holding protocol.yaml (frozen), its lock and keys/."),
) -> None:
    """Fidelity audit: every family and control against the replay truth, verdicts through the frozen order."""
    from creditaudit.audit.stage import SUMMARY_MD, run_audit
    from creditaudit.protocol.signing import load_signer
    from creditaudit.cli.replay import protocol_in

    doc = run_audit(protocol_in(run), load_signer(run / "keys" / "creditaudit.key"))
    for sentence in doc.sentences.values():
        typer.echo(sentence)
    typer.echo(f"wrote {run / SUMMARY_MD}, {run / 'audit' / 'audit.json'} and figures in {run / 'audit' / 'figures'}")
