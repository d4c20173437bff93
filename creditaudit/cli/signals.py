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
    import json

    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.signing import load_signer
    from creditaudit.signals.stage import SUMMARY, SignalsSummary, run_signals

    protocol = _protocol_in(run)
    signer = load_signer(run / "keys" / "creditaudit.key")
    frozen = require_frozen(protocol)
    if stage_is_current(frozen.run_dir, "signals", frozen.id, signer.key_id):
        typer.echo("signals already computed; their inputs and outputs match their link record (nothing rewritten)")
        doc = json.loads((frozen.run_dir / SUMMARY).read_text("utf-8"))
        summary = SignalsSummary(protocol_id=frozen.id, n_trajectories=doc["n_trajectories"], n_turns=doc["n_turns"],
                                 families=list(doc["families"]), controls=list(doc["controls"]), document=doc)
    else:
        with progress_bars(enabled=not quiet) as update:
            summary = run_signals(protocol, signer, progress=update)
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
