"""``creditaudit judge ...``: the embedded judge model."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from creditaudit.progress import progress_bars

__all__ = ["judge_app"]

judge_app = typer.Typer(
    help="The embedded judge model (the judge family's `model: embedded`): rebuild it from its seed.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@judge_app.command("build")
def build_command(
    out: Path = typer.Option(..., "--out", help="Model directory to write (config.json, model.safetensors, tokenizer)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Build seed (the shipped model is seed 0)."),
    threads: int | None = typer.Option(None, "--threads", min=1,
                                       help="Torch threads (default: up to 2; the weights' last bits may depend on it)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Engine processes for games and rollouts."),
    games_dir: Path | None = typer.Option(None, "--games-dir", help="Keep the generated games here (reused)."),
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Measure it on the held-out games."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Build the embedded judge model from its seed (tiny Qwen2 trained on planner-progress labels)."""
    from creditaudit.cli.paths import dir_to_write
    from creditaudit.signals.families.judge_build import JudgeBuild, build_judge_model

    if games_dir is not None:
        dir_to_write(games_dir, "--games-dir")
    target = dir_to_write(out, "--out")
    with progress_bars(enabled=not quiet) as update:
        record = build_judge_model(target, JudgeBuild(seed=seed), games_dir=games_dir, threads=threads,
                                   workers=workers, evaluate=evaluate, progress=update)
    typer.echo(f"built the judge model in {target}")
    typer.echo(json.dumps({"files": record["files"], "evaluation": record.get("evaluation")}, indent=2, sort_keys=True))
