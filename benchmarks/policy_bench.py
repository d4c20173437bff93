"""Benchmark of the embedded default policy: build time, held-out success and admissible rate.

Builds the default policy from a ``PolicyBuild`` (the schema's defaults unless overridden),
then measures it on held-out generated ALFWorld games at temperature 0.7 (horizon 30), and
writes ``benchmarks/results/policy_bench.json``.

Usage::

    .venv/bin/python benchmarks/policy_bench.py [--games-dir DIR] [--set hidden_size=128 ...]
        [--held-out 24] [--rollouts 1] [--decodings admissible,constrained,free]
        [--out benchmarks/results/policy_bench.json]

The policy is measured under each decoding of ``--decodings`` on the same held-out games.

``--games-dir`` keeps the generated games between runs (the generator resumes), so a second run
times the build without game generation; the first run's generation time is reported apart.
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
    from creditaudit.replay.alfworld_env import AlfworldEnv
    from creditaudit.replay.default_policy import BUILD_THREADS, _Deterministic, evaluate_policy, generate_build_games
    from creditaudit.replay.policy import load_policy

    # The generator resumes: the same seed finds the held-out games already written.
    held_out = generate_build_games(games_dir, args.held_out, seed=result["build"]["seed"], purpose="held-out-games")
    assert [g.task.task_id for g in held_out] == result["evaluation"]["games"]
    policy = load_policy(policy_dir, device="cpu", history_length=result["history_length"], decoding=decoding)
    t0 = time.perf_counter()
    with _Deterministic(BUILD_THREADS):
        evaluation = evaluate_policy(policy, held_out, env_factory=lambda: AlfworldEnv(horizon=30),
                                     seed=result["build"]["seed"], temperature=args.temperature,
                                     rollouts_per_task=args.rollouts)
    return {**evaluation.to_dict(), "horizon": 30, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games-dir", type=Path, default=None, help="where generated games are kept (temporary if unset)")
    parser.add_argument("--policy-dir", type=Path, default=None, help="where the policy is written (temporary if unset)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a PolicyBuild field")
    parser.add_argument("--held-out", type=int, default=24, help="held-out games (spread over the six task types)")
    parser.add_argument("--rollouts", type=int, default=1, help="rollouts per held-out game")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads during the build (default: the recipe's)")
    parser.add_argument("--decodings", default="admissible,constrained,free",
                        help="comma-separated decodings to measure the built policy with (the first during the build)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "policy_bench.json")
    args = parser.parse_args(argv)

    import torch

    from creditaudit.protocol.schema import PolicyBuild
    from creditaudit.replay.default_policy import build_default_policy

    build = PolicyBuild(**_parse_sets(args.set))
    with tempfile.TemporaryDirectory(prefix="policy-bench-") as tmp:
        games_dir = args.games_dir or Path(tmp) / "games"
        policy_dir = args.policy_dir or Path(tmp) / "policy"
        last = [0.0]

        def progress(stage: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] > 15 or done == total:
                last[0] = now
                print(f"  {stage}: {done}/{total}", flush=True)

        decodings = [d.strip() for d in args.decodings.split(",") if d.strip()]
        t0 = time.perf_counter()
        extra = {} if args.threads is None else {"threads": args.threads}
        result = build_default_policy(
            policy_dir, build, games_dir=games_dir, n_held_out=args.held_out, eval_rollouts=args.rollouts,
            eval_temperature=args.temperature, decoding=decodings[0], progress=progress, **extra,
        )
        total = time.perf_counter() - t0
        by_decoding = {decodings[0]: _held_out(result["evaluation"])}
        for decoding in decodings[1:]:
            by_decoding[decoding] = _evaluate_again(policy_dir, games_dir, result, decoding, args)
    timings = result["timings_s"]
    build_s = timings["generate"] + timings["demonstrations"] + timings["train"]
    report = {
        "benchmark": "policy_bench",
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("held_out", "timings_s", "build_time_s", "weights_sha256")}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
