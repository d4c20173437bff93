"""``creditaudit signals``: extract every credit family and control the frozen protocol names."""

from __future__ import annotations

from pathlib import Path

import typer

from creditaudit.errors import InputError
from creditaudit.progress import progress_bars

__all__ = ["signals_command"]


def _protocol_in(run: Path) -> Path:
    path = run / "protocol.yaml"
    if not path.is_file():
        raise InputError(f"{path}: no protocol in the run directory; `creditaudit protocol init {path}` writes one")
    return path


def signals_command(
    run: Path = typer.Option(Path("."), "--run", help="Run directory holding protocol.yaml (frozen), its lock and keys/."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Per-turn credit of every collected trajectory from every family and control; writes signals/."""
    from creditaudit.protocol.signing import load_signer
    from creditaudit.signals.stage import run_signals

    protocol = _protocol_in(run)
    with progress_bars(enabled=not quiet) as update:
        summary = run_signals(protocol, load_signer(run / "keys" / "creditaudit.key"), progress=update)
    doc = summary.document
    typer.echo(f"credit for {summary.n_turns} turns of {summary.n_trajectories} trajectories: "
               f"{len(summary.families)} families, {len(summary.controls)} controls")
    fmt = (lambda v: "undefined" if v is None else f"{v:.3f}")
    for name, entry in doc["families"].items():
        typer.echo(f"  {name:<20} abstained {fmt(entry['abstention_share'])}"
                   + (f" {entry['abstention_reasons']}" if entry["abstention_reasons"] else ""))
    for name, entry in doc["controls"].items():
        if entry["kind"] == "shuffle":
            typer.echo(f"  {name:<20} changes {fmt(entry['changed_share'])} of positions")
    router = doc["router"]
    if router is None:
        typer.echo("router: none in this protocol")
        return
    line = (f"router: routes {fmt(router['routed_share'])} of turns (target {router['target_routed_share']:.3f}), "
            f"saves {fmt(router['judge_calls_saved_per_turn'])} of judge calls per turn, "
            f"{fmt(router['judge_calls_saved_per_trajectory'])} per trajectory; ")
    recall = router.get("pivotal_recall")
    if recall:
        line += f"pivotal recall {fmt(recall['recall'])} vs chance {fmt(recall['chance'])}"
    else:
        line += "pivotal recall not measured (no replay results)"
    typer.echo(line)
