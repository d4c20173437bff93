"""``creditaudit ledger regenerate / verify / check`` and ``creditaudit report``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["ledger_app", "report_command", "results_command"]

ledger_app = typer.Typer(
    name="ledger",
    help="Number ledger: every reported number from a registered producer over raw artifacts; regenerate "
         "byte-identically, verify, integrity checks.",
    no_args_is_help=True,
    add_completion=False,
)

_RUN = typer.Option(Path("."), "--run", help="Run directory holding protocol.yaml (frozen), its lock and keys/.")


@ledger_app.command("regenerate")
def regenerate_command(
    run: Path = _RUN,
    ledger: Path | None = typer.Option(None, "--ledger", help="Where to write the ledger (default RUN/ledger/ledger.json, "
                                       "attested by a link record; elsewhere it is written unattested)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Rebuild every entry from the raw artifacts in two fresh processes; write ledger/ledger.json only if both
    are byte-identical (exit 1 otherwise, the previous ledger left in place)."""
    from creditaudit.cli.paths import file_to_write
    from creditaudit.ledger.build import regenerate
    from creditaudit.progress import progress_bars

    if ledger is not None:
        file_to_write(ledger, "--ledger")

    with progress_bars(enabled=not quiet) as update:
        result = regenerate(run, ledger_path=ledger, progress=update)
    typer.echo(f"ledger: {result.n_entries} entries from {len(result.ledger.artifacts)} input files, computed twice "
               f"in fresh processes: byte-identical (sha256 {result.sha256})")
    typer.echo(f"wrote {result.path}" + (f"; attested in {result.link}" if result.link else ""))


@ledger_app.command("verify")
def verify_command(
    run: Path = _RUN,
    ledger: Path | None = typer.Option(None, "--ledger", help="The stored ledger to verify (default RUN/ledger/ledger.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (ok, counts, differences, "
                                 "changed inputs, failures) for scripts."),
) -> None:
    """Recompute every entry and compare with a stored ledger (prints the first differing entry with both values
    and every entry whose inputs changed); walk the link-record chain. Exit 1 on any difference."""
    from creditaudit.ledger.build import verify_ledger

    from creditaudit.errors import CheckFailed

    try:
        result = verify_ledger(run, ledger_path=ledger)
    except CheckFailed as exc:
        if not as_json:
            raise
        typer.echo(json.dumps({"ok": False, "ledger": str(ledger or run / "ledger" / "ledger.json"),
                               "failures": [str(exc)]}, sort_keys=True))
        raise typer.Exit(1) from None
    typer.echo(json.dumps(result.to_json(), sort_keys=True) if as_json else result.render())
    if not result.ok:
        raise typer.Exit(1)


def _check(run: Path, ledger: Path | None) -> None:
    from creditaudit.cli.paths import existing_file
    from creditaudit.ledger.build import protocol_path
    from creditaudit.ledger.integrity import check_integrity

    protocol_path(run)  # a missing run is bad usage (exit 2), not a failed check
    if ledger is not None:
        existing_file(ledger, "--ledger")
    report = check_integrity(run, ledger_path=ledger)
    typer.echo(report.render())
    if not report.ok:
        raise typer.Exit(1)


@ledger_app.command("check")
def check_command(
    run: Path = _RUN,
    ledger: Path | None = typer.Option(None, "--ledger", help="Ledger whose manifest is checked (default RUN/ledger/ledger.json)."),
) -> None:
    """Integrity checks on four questions: the intended file? written correctly? fully readable now? keeps the
    evidence needed to act? Exit 1 when any fails."""
    _check(run, ledger)


@ledger_app.command("integrity", hidden=True)
def integrity_command(
    run: Path = _RUN,
    ledger: Path | None = typer.Option(None, "--ledger", help="Ledger whose manifest is checked."),
) -> None:
    """Alias of ``ledger check``."""
    _check(run, ledger)


def report_command(
    run: Path = _RUN,
    ledger: Path | None = typer.Option(None, "--ledger", help="Ledger to report from (default RUN/ledger/ledger.json)."),
) -> None:
    """Write report/report.md and report/report.html: every number taken from the ledger by name, the protocol id,
    verdicts with gate traces, deviations, and the router with its negative result."""
    from creditaudit.ledger.build import protocol_path
    from creditaudit.ledger.report import write_report
    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.lock import require_frozen

    if ledger is None and (run / "keys" / "creditaudit.key").is_file():
        from creditaudit.protocol.signing import load_signer

        frozen = require_frozen(protocol_path(run))
        if stage_is_current(frozen.run_dir, "report", frozen.id, load_signer(run / "keys" / "creditaudit.key").key_id):
            typer.echo(f"report already written from the current ledger; its inputs and outputs match its link "
                       f"record (nothing rewritten): {run / 'report' / 'report.md'}")
            return
    result = write_report(run, ledger_path=ledger)
    typer.echo(f"wrote {result.markdown} and {result.html} ({len(result.figures)} figures, "
               f"{result.n_references} ledger references)")


def results_command(
    ledger: Path = typer.Argument(..., help="The audit run's ledger (RUN/ledger/ledger.json or a kept copy)."),
    arms: Path | None = typer.Option(None, "--arms", help="A training-arms run's ledger: adds the arms' learning "
                                     "test, C1-C6, dose and divergence beside the paper's."),
    out: Path = typer.Option(Path("results.md"), "--out", help="Where to write the page."),
) -> None:
    """Write the results page: one table per result, this toolkit's value and interval beside the papers', every
    number taken from the ledgers by name, each ledger's sha256 recorded; and in words where they agree and why not."""
    from creditaudit.cli.paths import existing_file, file_to_write
    from creditaudit.ledger.results import write_results

    existing_file(ledger, "LEDGER")
    if arms is not None:
        existing_file(arms, "--arms")
    file_to_write(out, "--out")
    path = write_results(ledger, out, arms_ledger=arms)
    typer.echo(f"wrote {path}")
