"""``creditaudit policy ...``, ``creditaudit games``, ``creditaudit collect``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from creditaudit.errors import InputError
from creditaudit.progress import progress_bars

__all__ = ["policy_app", "games_command", "collect_command", "replay_command", "protocol_in"]

policy_app = typer.Typer(
    help="The policy under audit: build the embedded default, hash a model directory.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_RUN_HELP = "Run directory holding protocol.yaml (frozen), its lock and keys/."


def protocol_in(run: Path) -> Path:
    """``<run>/protocol.yaml``, or an ``InputError`` saying how to write one."""
    path = run / "protocol.yaml"
    if not path.is_file():
        raise InputError(f"{path}: no protocol in the run directory; `creditaudit protocol init {path}` writes one")
    return path


def _signer(run: Path):
    from creditaudit.protocol.signing import load_signer

    return load_signer(run / "keys" / "creditaudit.key")


@policy_app.command("build")
def build_command(
    protocol: Path = typer.Option(
        Path("protocol.yaml"), "--protocol", help="Protocol whose policy.build section configures the build "
        "(it is not frozen yet: the policy is an input that exists before the freeze)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Model directory (default: the protocol's policy.path)."),
    evaluate: bool = typer.Option(True, "--evaluate/--no-evaluate", help="Measure held-out success and admissible rate."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    shipped: bool = typer.Option(False, "--shipped", help="Install the build shipped in the package (the default "
                                 "seed's, byte-identical to what training from the default build section writes) "
                                 "instead of training; refused when the protocol's policy.build differs."),
) -> None:
    """Build the embedded default policy (tiny Qwen2, word-level tokenizer, behaviour cloning)."""
    from creditaudit.cli.paths import dir_to_write
    from creditaudit.protocol.io import load_protocol
    from creditaudit.protocol.lock import policy_dir
    from creditaudit.replay.policies.default.build import BUILD_RECORD, build_default_policy

    if out is not None:
        dir_to_write(out, "--out")
    spec = load_protocol(protocol)
    if spec.policy.source != "builtin":
        raise InputError(f"{protocol}: field `policy.source` is {spec.policy.source!r}; only 'builtin' policies are built")
    target = dir_to_write(out or policy_dir(spec, protocol), "the protocol's policy.path")
    if (target / BUILD_RECORD).is_file():
        record = json.loads((target / BUILD_RECORD).read_text())
        typer.echo(f"policy already built in {target} (reusing it; delete the directory to rebuild)")
        typer.echo(json.dumps(record.get("evaluation", {}), sort_keys=True))
        return
    if shipped:
        from creditaudit.replay.policies.default.shipped import install_built_policy

        install_built_policy(target, spec.policy.build)
        record = json.loads((target / BUILD_RECORD).read_text())
        typer.echo(f"installed the shipped default policy in {target}")
        typer.echo(json.dumps(record.get("evaluation", {}), sort_keys=True))
        return
    with progress_bars(enabled=not quiet) as update:
        result = build_default_policy(
            target,
            spec.policy.build,
            history_length=spec.policy.history_length,
            evaluate=evaluate,
            eval_temperature=spec.policy.temperature,
            eval_horizon=spec.environment.horizon,
            decoding=spec.policy.decoding,
            games_dir=target.parent / ".policy-build-games",
            progress=update,
        )
    typer.echo(f"built the default policy in {target}")
    if result.get("evaluation"):
        typer.echo(json.dumps(result["evaluation"], sort_keys=True))


@policy_app.command("hashes")
def hashes_command(path: Path = typer.Argument(..., help="Model directory.")) -> None:
    """Print the SHA-256 of every model and tokenizer file (what a protocol pins)."""
    from creditaudit.protocol.inputs import policy_pins

    typer.echo(json.dumps(policy_pins(path), indent=2, sort_keys=True))


def games_command(
    run: Path = typer.Option(Path("."), "--run", help=_RUN_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Write the frozen task list (generating ALFRED-domain games offline when the protocol says so)."""
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.tasks import prepare_tasks

    frozen = require_frozen(protocol_in(run))
    with progress_bars(enabled=not quiet) as update:
        entries = prepare_tasks(frozen, _signer(run), progress=lambda d, t: update("games", d, t))
    by_type: dict[str, int] = {}
    for entry in entries:
        by_type[entry.task_type] = by_type.get(entry.task_type, 0) + 1
    typer.echo(f"task list: {len(entries)} tasks " + json.dumps(by_type, sort_keys=True))


def collect_command(
    run: Path = typer.Option(Path("."), "--run", help=_RUN_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Roll out the policy on the frozen task list (G per task) and write collect/trajectories.parquet."""
    from creditaudit.replay.collect import collect

    with progress_bars(enabled=not quiet) as update:
        summary = collect(protocol_in(run), _signer(run), progress=update)
    typer.echo(
        f"collected {summary.n_trajectories} trajectories ({summary.n_turns} turns) on {summary.n_tasks} tasks: "
        f"success {summary.success_rate:.3f}, admissible actions {summary.admissible_rate:.3f}"
        + (f" ({summary.resumed_shards} task shard(s) resumed)" if summary.resumed_shards else "")
    )


def replay_command(
    run: Path = typer.Option(Path("."), "--run", help=_RUN_HELP),
    executor: str = typer.Option("local", "--executor", help="local (worker processes), inline, or ray "
                                 "(environment-worker actors and one policy service; RAY_ADDRESS joins a cluster)."),
    workers: int | None = typer.Option(None, "--workers", min=1,
                                       help="Worker processes / Ray actors, at least 1 (default: up to 2)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Execute counterfactual replays of every collected turn; writes replay/ and the measurability map."""
    from creditaudit.replay.stage import SUMMARY, run_replay

    with progress_bars(enabled=not quiet) as update:
        summary = run_replay(protocol_in(run), _signer(run), executor=executor, workers=workers,
                             progress=update)
    mmap = json.loads((run / SUMMARY).read_text())["measurability"]
    if summary.skipped:
        typer.echo("replay already finished; its inputs and outputs match its link record (nothing rewritten)")
    typer.echo(
        f"replayed {summary.n_turns} turns of {summary.n_trajectories} trajectories with {summary.n_rollouts} "
        f"rollouts: {summary.divergences} prefix divergences, {summary.restore_failures} restore failures, "
        f"cache hit rate {summary.cache_hit_rate:.3f}"
    )
    service = summary.executor_report
    if service.get("policy_service") == "in-process actor":
        typer.echo(
            f"ray: {service['sessions']} environment workers on {service['worker_nodes']} node(s), one policy service: "
            f"{service['requests']} requests in {service['policy_calls']} policy calls, "
            f"{service['forward_passes']} forward passes of {service['mean_rows_per_forward']:.1f} rows on average"
            + (" (requests merged: not bit-reproducible)" if service["merge_requests"] else "")
        )
    gap = mmap["logprob_gap"]
    ci = mmap["logprob_gap_ci"]
    fmt = (lambda v: "undefined" if v is None else f"{v:.3f}")
    typer.echo(
        f"measurability: pivotal {fmt(mmap['share_pivotal'])} of complete turns, sigma_floor = 0 "
        f"{fmt(mmap['share_sigma_floor_zero'])}, no counterfactual {fmt(mmap['share_no_counterfactual'])} of turns; "
        + (f"log-prob included - excluded {gap:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if gap is not None and ci else
           "log-prob gap undefined (no excluded turns)")
    )
    typer.echo(mmap["resolution_statement"])
