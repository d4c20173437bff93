"""Benchmark of the embedded default policy: build time, held-out success and admissible rate.

Builds the default policy from a ``PolicyBuild`` (the schema's defaults unless overridden),
then measures it on held-out generated ALFWorld games at temperature 0.7 and the protocol's
default horizon (50), and writes ``benchmarks/results/policy_bench.json``.

Usage::

    .venv/bin/python benchmarks/policy_bench.py [--games-dir DIR] [--set hidden_size=128 ...]
        [--held-out 24] [--rollouts 1] [--decodings admissible,constrained,free]
        [--horizon 50] [--seeds 20260817,1,2] [--out benchmarks/results/policy_bench.json]

The policy is measured under each decoding of ``--decodings`` on the same held-out games.

``--seeds`` builds the recipe once per build seed, each measured on its own seed's held-out games,
and reports every build and their mean: one build is one draw (builds of one recipe spread widely),
so a claim about the recipe needs several. The report is rewritten after every build, and a
build already in it is not redone (an interrupted run resumes).

``--games-dir`` keeps the generated games between runs (one folder per seed; the generator
resumes), so a second run times the build without game generation; the first run's generation
time is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def _parse_sets(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, _, value = item.partition("=")
        if not _:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        out[key] = json.loads(value)
    return out


def _held_out(evaluation: dict) -> dict:
    out = {k: v for k, v in evaluation.items() if k != "games"}
    return out


def _evaluate_again(policy_dir: Path, games_dir: Path, result: dict, decoding: str, args) -> dict:
    """The built policy measured again on the same held-out games under another decoding."""
    from creditaudit.replay.envs.alfworld import AlfworldEnv
    from creditaudit.replay.policies import load_policy
    from creditaudit.replay.policies.default import BUILD_THREADS, evaluate_policy, generate_build_games
    from creditaudit.replay.policies.default.build import Deterministic

    # The generator resumes: the same seed finds the held-out games already written.
    held_out = generate_build_games(games_dir, args.held_out, seed=result["build"]["seed"], purpose="held-out-games")
    assert [g.task.task_id for g in held_out] == result["evaluation"]["games"]
    policy = load_policy(policy_dir, device="cpu", history_length=result["history_length"], decoding=decoding)
    t0 = time.perf_counter()
    with Deterministic(BUILD_THREADS):
        evaluation = evaluate_policy(policy, held_out, env_factory=lambda: AlfworldEnv(horizon=args.horizon),
                                     seed=result["build"]["seed"], temperature=args.temperature,
                                     rollouts_per_task=args.rollouts)
    return {**evaluation.to_dict(), "horizon": args.horizon, "seconds": round(time.perf_counter() - t0, 2)}


def _one_build(build, args, decodings: list[str]) -> dict:
    """Build the recipe once (one seed) and measure it; the per-build part of the report."""
    import torch

    from creditaudit.replay.policies.default import build_default_policy

    with tempfile.TemporaryDirectory(prefix="policy-bench-") as tmp:
        # One folder per seed: the generator refuses another seed's games in its folder.
        games_dir = (args.games_dir or Path(tmp) / "games") / f"seed-{build.seed}"
        policy_dir = args.policy_dir or Path(tmp) / "policy"
        last = [0.0]

        def progress(stage: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] > 15 or done == total:
                last[0] = now
                print(f"  seed {build.seed} {stage}: {done}/{total}", flush=True)

        t0 = time.perf_counter()
        extra = {} if args.threads is None else {"threads": args.threads}
        result = build_default_policy(
            policy_dir, build, games_dir=games_dir, n_held_out=args.held_out, eval_rollouts=args.rollouts,
            eval_temperature=args.temperature, eval_horizon=args.horizon, decoding=decodings[0],
            progress=progress, **extra,
        )
        total = time.perf_counter() - t0
        by_decoding = {decodings[0]: _held_out(result["evaluation"])}
        for decoding in decodings[1:]:
            by_decoding[decoding] = _evaluate_again(policy_dir, games_dir, result, decoding, args)
    timings = result["timings_s"]
    build_s = timings["generate"] + timings["demonstrations"] + timings["train"]
    return {
        "build": result["build"],
        "vocab_size": result["vocab_size"],
        "parameters": result["parameters"],
        "demonstrations": result["demonstrations"],
        "training": result["training"],
        "held_out": by_decoding,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "build_time_s": round(build_s, 2),
        "build_time_s_without_generation": round(timings["demonstrations"] + timings["train"], 2),
        "total_time_s": round(total, 2),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "build_threads": result["threads"],
        },
        "weights_sha256": result["files"]["model_files"].get("model.safetensors"),
    }


def _summary(builds: list[dict], decodings: list[str]) -> dict:
    """Success over the builds: each build's rate, their mean and range, and the pooled count."""
    out = {}
    for decoding in decodings:
        rates = [b["held_out"][decoding]["success_rate"] for b in builds]
        out[decoding] = {
            "seeds": [b["build"]["seed"] for b in builds],
            "success_rates": rates,
            "mean_success_rate": round(sum(rates) / len(rates), 4),
            "min_success_rate": min(rates),
            "max_success_rate": max(rates),
            "successes": sum(b["held_out"][decoding]["successes"] for b in builds),
            "episodes": sum(b["held_out"][decoding]["episodes"] for b in builds),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from creditaudit.protocol.schema import EnvironmentSection, PolicyBuild

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games-dir", type=Path, default=None, help="where generated games are kept (temporary if unset)")
    parser.add_argument("--policy-dir", type=Path, default=None,
                        help="where the policy is written (temporary if unset; one seed only)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a PolicyBuild field")
    parser.add_argument("--held-out", type=int, default=24, help="held-out games (spread over the six task types)")
    parser.add_argument("--rollouts", type=int, default=1, help="rollouts per held-out game")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--horizon", type=int, default=EnvironmentSection().horizon,
                        help="steps per held-out episode (default: the protocol's default horizon)")
    parser.add_argument("--seeds", default=None,
                        help="comma-separated build seeds (default: the build's own seed only)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads during the build (default: the recipe's)")
    parser.add_argument("--decodings", default="admissible,constrained,free",
                        help="comma-separated decodings to measure the built policy with (the first during the build)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "policy_bench.json")
    args = parser.parse_args(argv)

    base = PolicyBuild(**_parse_sets(args.set))
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [base.seed]
    if args.policy_dir is not None and len(seeds) > 1:
        raise SystemExit("--policy-dir keeps one build; leave it unset with several --seeds")
    decodings = [d.strip() for d in args.decodings.split(",") if d.strip()]
    settings = {"held_out_games": args.held_out, "rollouts": args.rollouts, "temperature": args.temperature,
                "horizon": args.horizon, "decodings": decodings, "recipe": base.model_dump(exclude={"seed"})}
    builds: list[dict] = []
    if args.out.is_file():
        previous = json.loads(args.out.read_text("utf-8"))
        if previous.get("settings") == settings:
            builds = [b for b in previous.get("builds", []) if b["build"]["seed"] in seeds]
            if builds:
                print(f"resuming: seeds {[b['build']['seed'] for b in builds]} already in {args.out}")
    for seed in seeds:
        if any(b["build"]["seed"] == seed for b in builds):
            continue
        builds.append(_one_build(base.model_copy(update={"seed": seed}), args, decodings))
        builds.sort(key=lambda b: seeds.index(b["build"]["seed"]))
        report = {"benchmark": "policy_bench", "settings": settings, "builds": builds,
                  "summary": _summary(builds, decodings)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        last = builds[-1]
        print(json.dumps({"seed": seed, "held_out": {d: {k: last["held_out"][d][k] for k in ("successes", "episodes", "success_rate")}
                                                      for d in decodings},
                          "build_time_s": last["build_time_s"], "weights_sha256": last["weights_sha256"]}), flush=True)
    report = json.loads(args.out.read_text("utf-8"))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
