"""``creditaudit calibrate``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["calibrate_command"]


def calibrate_command(
    run: Path | None = typer.Option(None, "--run", help="Calibrate this run's protocol.yaml (its statistics, "
                                    "exclusions, gates and decision order); on a frozen run the table is also "
                                    "written to calibration/calibration.json under a signed link record, so the "
                                    "ledger regenerates it and the report shows it. Default: the default template."),
    protocol: Path | None = typer.Option(None, "--protocol", help="Calibrate this protocol file instead."),
    tasks: int = typer.Option(90, "--tasks", min=20, max=10_000, help="Planted trajectories to audit."),
    as_json: bool = typer.Option(False, "--json", help="Print the calibration table as JSON."),
) -> None:
    """Audit credits of known fidelity on the planted environment under the protocol's decision order: the
    true effects must come out H1, their negation H2, noise and their within-trajectory shuffle H3, and the
    Controls gate must pass. Exit 1 when the instrument misses any of them."""
    from creditaudit.audit.calibration import run_calibration
    from creditaudit.errors import InputError
    from creditaudit.protocol.io import default_template_text, load_protocol, parse_protocol

    if run is not None and protocol is not None:
        raise InputError("give --run or --protocol, not both")
    if run is not None:
        protocol = run / "protocol.yaml"
        if not protocol.is_file():
            raise InputError(f"{protocol}: no protocol in the run directory")
    from creditaudit.protocol.lock import lock_path_for

    if run is not None and lock_path_for(protocol).is_file():
        # a frozen run: the table is written under a signed link record, for the ledger and the report
        from creditaudit.audit.calibration import calibrate_run
        from creditaudit.protocol.signing import PRIVATE_KEY_NAME, load_signer

        result = calibrate_run(protocol, load_signer(run / "keys" / PRIVATE_KEY_NAME), n_tasks=tasks)
    else:
        parsed = load_protocol(protocol) if protocol is not None else parse_protocol(default_template_text())
        result = run_calibration(parsed, n_tasks=tasks)
    typer.echo(json.dumps(result.to_json(), sort_keys=True) if as_json else result.render())
    if not result.ok:
        if not as_json:
            typer.echo("FAILED: the decision order does not recover the planted answers; no verdict of this "
                       "protocol can be trusted until it does", err=True)
        raise typer.Exit(1)
