"""``creditaudit arms``: the seven-arm CRN LoRA experiment and its analysis."""

from __future__ import annotations

from pathlib import Path

import typer

from creditaudit.progress import progress_bars

__all__ = ["arms_command"]


def arms_command(
    run: Path = typer.Option(Path("."), "--run", help="Run directory holding protocol.yaml (frozen), its lock and keys/."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Train every arm x seed (LoRA, common random numbers), evaluate on held-out tasks, analyse; writes arms/.

    Resumable: rerunning keeps finished checkpoints and trains the rest.
    """
    import json

    from creditaudit.cli.replay import protocol_in
    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.signing import load_signer
    from creditaudit.training_arms.stage import ANALYSIS_JSON, SUMMARY_MD, run_arms

    protocol = protocol_in(run)
    signer = load_signer(run / "keys" / "creditaudit.key")
    frozen = require_frozen(protocol)
    if stage_is_current(frozen.run_dir, "arms", frozen.id, signer.key_id):
        typer.echo("arms already trained and analysed; their inputs and outputs match their link record "
                   "(nothing rewritten)")
        a = json.loads((frozen.run_dir / ANALYSIS_JSON).read_text("utf-8"))["analysis"]
    else:
        with progress_bars(enabled=not quiet) as update:
            a = run_arms(protocol, signer, progress=update).analysis
    fmt = (lambda v, spec=".3f": "—" if v is None else format(v, spec))
    held = a["success"]["held_out"]
    typer.echo(f"held-out success (base {fmt(held['base'])}): "
               + ", ".join(f"{arm} {fmt(e['mean_included'])}" for arm, e in held["arms"].items()))
    for c in a["comparisons"]:
        typer.echo(f"  {c['id']} {c['arm']} {'>' if c['kind'] == 'superiority' else 'vs'} {c['versus']}: "
                   f"{fmt(c.get('estimate'), '+.3f')}, p(Holm) {fmt(c['pvalue_holm'], '.4f')}, "
                   f"MDE {fmt(c.get('mde', {}).get('mde'))} -> {c['reading']}")
    steps = {arm: d["mean_steps_per_round"] for arm, d in a["dose"].items()}
    typer.echo("mean optimizer steps per round: " + ", ".join(f"{arm} {fmt(v, '.1f')}" for arm, v in steps.items()))
    last = a["stages"][-1] if a["stages"] else {}
    bw = last.get("between_within", {})
    if "mean_between" in bw:
        typer.echo(f"last stage: between-arm JS {bw['mean_between']:.4f} vs within {bw['mean_within']:.4f} "
                   f"(p = {bw['pvalue']:.4f}; paper 0.0520 vs 0.0198)")
    pm, pc = last.get("partial_mantel", {}), last.get("positive_control", {})
    if "statistic" in pm and "statistic" in pc:
        typer.echo(f"partial Mantel {pm['statistic']:+.3f} (p = {pm['pvalue']:.4f}), positive control "
                   f"{pc['statistic']:+.3f} (p = {pc['pvalue']:.4f}); paper +0.078 vs +0.912")
    typer.echo(f"wrote {run / SUMMARY_MD}, {run / 'arms' / 'analysis.json'} and figures in {run / 'arms' / 'figures'}")
