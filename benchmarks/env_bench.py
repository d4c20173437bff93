"""Environment benchmark: cost of the real ALFWorld engine and of the planted environment.

Measures, per task type, on freshly generated games (default room sizes, 20 objects / 16
receptacles): generation + verification time, walkthrough length, engine reset (load + reset),
fast reset (restore of the initial state), step time over random admissible commands, admissible
list size, snapshot and restore time, and the planted environment's step time. Medians over
repeats. Prints a table and writes ``benchmarks/results/env_bench.json``.

Usage::

    python benchmarks/env_bench.py [--games-per-type 1] [--steps 20] [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "env_bench.json"


def _median_ms(samples: list[float]) -> float:
    return round(1000.0 * statistics.median(samples), 3)


def bench_alfworld(games_per_type: int, steps: int, repeats: int, seed: int) -> dict:
    from creditaudit.replay.envs.alfworld import TASK_TYPES, AlfworldEnv, generate_games

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        gen_times: dict[str, list[float]] = {t: [] for t in TASK_TYPES}
        last = [time.perf_counter()]

        def progress(done, total, game):
            now = time.perf_counter()
            if game is not None:
                gen_times[game.task_type].append(now - last[0])
                last[0] = now

        report = generate_games(tmp, games_per_type=games_per_type, rng=np.random.default_rng(seed), progress=progress)
        rng = np.random.default_rng(seed + 1)
        for task_type in TASK_TYPES:
            games = [g for g in report.games if g.task_type == task_type]
            engine_reset, fast_reset, step, snap, restore, n_adm = [], [], [], [], [], []
            for game in games:
                for _ in range(repeats):
                    env = AlfworldEnv(horizon=10_000, reuse_engine=False)
                    t0 = time.perf_counter()
                    env.reset(game.task)
                    engine_reset.append(time.perf_counter() - t0)
                    env.close()
                env = AlfworldEnv(horizon=10_000)
                env.reset(game.task)
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    obs = env.reset(game.task)
                    fast_reset.append(time.perf_counter() - t0)
                admissible = obs.admissible
                snapshots = []
                for _ in range(steps):
                    n_adm.append(len(admissible))
                    action = admissible[int(rng.integers(len(admissible)))]
                    t0 = time.perf_counter()
                    result = env.step(action)
                    step.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    snapshots.append(env.snapshot())
                    snap.append(time.perf_counter() - t0)
                    admissible = result.admissible
                    if result.done:
                        break
                for s in snapshots[::-1]:
                    t0 = time.perf_counter()
                    env.restore(s)
                    restore.append(time.perf_counter() - t0)
                env.close()
            rows[task_type] = {
                "games": len(games),
                "generate_s_median": round(statistics.median(gen_times[task_type]), 3),
                "walkthrough_len": [len(g.walkthrough) for g in games],
                "engine_reset_ms_median": _median_ms(engine_reset),
                "fast_reset_ms_median": _median_ms(fast_reset),
                "step_ms_median": _median_ms(step),
                "admissible_mean": round(float(np.mean(n_adm)), 1),
                "snapshot_ms_median": _median_ms(snap),
                "restore_ms_median": _median_ms(restore),
            }
        return {"task_types": rows, "discarded": report.discarded}


def bench_planted(steps: int, seed: int) -> dict:
    from creditaudit.replay.envs.planted import PlantedEnv

    env = PlantedEnv()
    tasks = env.make_tasks(50, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    step_times, sig_times, wins = [], [], 0
    for task in tasks:
        result = env.reset(task)
        while True:
            action = result.admissible[int(rng.integers(len(result.admissible)))]
            t0 = time.perf_counter()
            result = env.step(action)
            step_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            env.state_signature()
            sig_times.append(time.perf_counter() - t0)
            if result.done:
                wins += result.won
                break
    return {"step_ms_median": _median_ms(step_times), "signature_ms_median": _median_ms(sig_times),
            "success_rate_uniform_policy": wins / len(tasks), "tasks": len(tasks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games-per-type", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    # parse before any engine exists: fast_downward's translator overwrites sys.argv
    args = parser.parse_args()

    t0 = time.perf_counter()
    alfworld = bench_alfworld(args.games_per_type, args.steps, args.repeats, args.seed)
    planted = bench_planted(args.steps, args.seed)
    result = {
        "settings": {"games_per_type": args.games_per_type, "steps": args.steps, "repeats": args.repeats,
                     "seed": args.seed, "max_objects": 20, "max_receptacles": 16},
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "alfworld": alfworld,
        "planted": planted,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    header = f"{'task type':34s} {'gen s':>6s} {'wt len':>7s} {'reset ms':>9s} {'fast ms':>8s} {'step ms':>8s} " \
             f"{'adm':>5s} {'snap ms':>8s} {'rest ms':>8s}"
    print(header)
    for task_type, row in alfworld["task_types"].items():
        print(f"{task_type:34s} {row['generate_s_median']:6.2f} {str(row['walkthrough_len']):>7s} "
              f"{row['engine_reset_ms_median']:9.1f} {row['fast_reset_ms_median']:8.2f} {row['step_ms_median']:8.1f} "
              f"{row['admissible_mean']:5.1f} {row['snapshot_ms_median']:8.2f} {row['restore_ms_median']:8.2f}")
    print(f"discarded while generating: {alfworld['discarded'] or 'none'}")
    print(f"planted: step {planted['step_ms_median']} ms, signature {planted['signature_ms_median']} ms, "
          f"uniform-policy success {planted['success_rate_uniform_policy']:.2f} over {planted['tasks']} tasks")
    print(f"wall {result['wall_s']} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
