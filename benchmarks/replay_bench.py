"""Executed replay: rollouts per second of creditaudit's engine against the naive method.

Workload: the first trajectories of a run's collection (by default a demo-size run of the embedded
default policy on generated ALFWorld games; ``--run`` takes any run directory, e.g. the
``alfworld_audit_bench.py`` run at horizon 30). The methods on the same rollouts, in one run:

- creditaudit: one engine instance per trajectory, the prefix replayed once and snapshotted,
  every rollout started by restoring a snapshot, transitions cached by (signature, action), one
  batched policy call per round for all in-flight rollouts -- in this process, and on local
  worker processes as the replay stage runs it (one work unit per trajectory; the wall time
  includes starting the workers);
- naive: one engine instance, a real reset and a replay of the prefix for every rollout, one
  unbatched policy call per step (the same seeds, so the same actions and outcomes — checked);
  timed twice, on the engine as creditaudit runs it (``accelerate_textworld``: textworld's text
  generation memoised, output unchanged) and on textworld as shipped (``speedup_vs_stock_engine``,
  the method as anyone would run it without creditaudit).

The naive method is timed on a sample of the rollouts (it is slow) and compared per rollout.
Writes benchmarks/results/replay_bench.json and prints the figures.

    python benchmarks/replay_bench.py [--run DIR] [--trajectories N] [--naive-rollouts M] [--workers W] [--out F]

The committed figures: ``results/replay_bench.json`` from
``--run benchmarks/.alfworld-audit-run --trajectories 8`` (horizon 30, after
``alfworld_audit_bench.py``) and ``results/replay_bench_demo.json`` from the default demo-size run
(horizon 10, ``--out benchmarks/results/replay_bench_demo.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _pool_init(protocol_path: str) -> None:
    from creditaudit.replay.executors import worker_init

    worker_init(protocol_path)


def _pool_run(frame):
    """One work unit as the replay stage's workers run it, without writing its shards."""
    from creditaudit.replay.executors import replay_unit

    return replay_unit([frame])[0].rollouts.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / ".replay-bench-run")
    parser.add_argument("--trajectories", type=int, default=3)
    parser.add_argument("--naive-rollouts", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2, help="local worker processes (0: skip)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "replay_bench.json")
    args = parser.parse_args()

    from creditaudit.demo import run_demo

    # Build (or reuse) a demo-size run: policy, frozen protocol, games, collection, replay.
    run_demo(args.run, quiet=True, through="audit")

    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.seeds import SeedStreams
    from creditaudit.replay.collect import load_run_policy, read_trajectories
    from creditaudit.replay.compute import stored_numerics
    from creditaudit.replay.engine import ReplaySettings, replay_trajectory
    from creditaudit.replay.envs.alfworld import AlfworldEnv, textworld_shortcuts
    from creditaudit.replay.policies import Turn, candidate_kwargs
    from creditaudit.replay.tasks import make_environment, read_tasks, task_for

    frozen = require_frozen(args.run / "protocol.yaml")
    policy = load_run_policy(frozen)
    settings = ReplaySettings.from_protocol(frozen.protocol)
    tasks = {t.task_id: t for t in read_tasks(frozen)}
    df = read_trajectories(frozen).to_pandas()
    frames = [f.sort_values("turn").reset_index(drop=True) for _, f in df.groupby("trajectory_id", sort=False)]
    frames = frames[: args.trajectories]

    # ---- creditaudit's engine
    env = make_environment(frozen.protocol)
    fast_rollouts = fast_time = 0.0
    counters = {"engine_steps": 0, "cache_hits": 0, "rollouts": 0}
    rollout_tables = []
    with stored_numerics():
        for frame in frames:
            task = task_for(tasks[frame.task_id.iloc[0]], frozen.protocol, frozen.run_dir)
            start = time.perf_counter()
            result = replay_trajectory(env, policy, task=task, trajectory=frame, protocol_id=frozen.id,
                                       settings=settings)
            fast_time += time.perf_counter() - start
            for key in counters:
                counters[key] += result.counters[key]
            rollout_tables.append((frame, task, result.rollouts.to_pandas()))
    env.close()
    fast_rollouts = counters["rollouts"]
    fast_rate = fast_rollouts / fast_time

    # ---- the same work units on local worker processes (spawn), as `creditaudit replay` runs them
    pool_rate = None
    if args.workers > 0:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        start = time.perf_counter()
        with ProcessPoolExecutor(max_workers=args.workers, mp_context=mp.get_context("spawn"),
                                 initializer=_pool_init, initargs=(str(frozen.path),)) as pool:
            pool_rollouts = sum(pool.map(_pool_run, frames))
        pool_time = time.perf_counter() - start
        assert pool_rollouts == fast_rollouts, (pool_rollouts, fast_rollouts)
        pool_rate = pool_rollouts / pool_time

    # ---- naive: reset + prefix per rollout, one unbatched policy call per step; on the engine as
    # creditaudit runs it (textworld's text generation accelerated) and on textworld as shipped
    streams = SeedStreams(frozen.id)
    sample = []
    for frame, task, rollouts in rollout_tables:
        for row in rollouts.itertuples():
            sample.append((frame, task, row))
    step = max(1, len(sample) // args.naive_rollouts)
    sample = sample[::step][: args.naive_rollouts]

    def naive(shortcuts: bool) -> tuple[list[float], int]:
        times, matches = [], 0
        with textworld_shortcuts(shortcuts), stored_numerics():
            naive_env = AlfworldEnv(horizon=frozen.protocol.environment.horizon, reuse_engine=False)
            for frame, task, row in sample:
                start = time.perf_counter()
                obs = naive_env.reset(task)
                text, admissible, history = obs.text, obs.admissible, []
                for action in frame.action[: row.turn]:
                    result = naive_env.step(action)
                    history.append(Turn(text, action))
                    text, admissible = result.text, result.admissible
                actions = [row.actions[0]]
                result = naive_env.step(row.actions[0])
                history.append(Turn(text, row.actions[0]))
                text, admissible = result.text, result.admissible
                k = 0
                while not result.done:
                    prompt = policy.prompt_builder.build(obs.goal, text, admissible, history)
                    seed = streams.seed_int(f"{row.seed_stream}/{k + 1}")
                    action = policy.sample([prompt], seeds=[seed], temperature=settings.rollout_temperature,
                                           max_action_tokens=settings.max_action_tokens,
                                           **candidate_kwargs(policy, [tuple(admissible)]))[0].text
                    result = naive_env.step(action)
                    history.append(Turn(text, action))
                    text, admissible = result.text, result.admissible
                    actions.append(action)
                    k += 1
                times.append(time.perf_counter() - start)
                matches += int(actions == list(row.actions) and int(result.done and result.won) == row.outcome)
            naive_env.close()
        return times, matches

    naive_times, matches = naive(True)
    stock_times, stock_matches = naive(False)
    naive_rate = len(naive_times) / sum(naive_times)
    stock_rate = len(stock_times) / sum(stock_times)

    figures = {
        "workload": {"trajectories": len(frames), "turns": int(sum(len(f) for f in frames)),
                     "rollouts": int(fast_rollouts), "naive_sample": len(naive_times)},
        "creditaudit_rollouts_per_s": fast_rate,
        "naive_rollouts_per_s": naive_rate,
        "naive_median_s_per_rollout": statistics.median(naive_times),
        "speedup": fast_rate / naive_rate,
        "naive_stock_engine_rollouts_per_s": stock_rate,
        "naive_stock_engine_median_s_per_rollout": statistics.median(stock_times),
        "speedup_vs_stock_engine": fast_rate / stock_rate,
        "speedup_with_workers_vs_stock_engine": (pool_rate / stock_rate) if pool_rate else None,
        "workers": args.workers,
        "creditaudit_workers_rollouts_per_s": pool_rate,
        "speedup_with_workers": (pool_rate / naive_rate) if pool_rate else None,
        "protocol_id": frozen.id,
        "horizon": frozen.protocol.environment.horizon,
        "cache_hit_rate": counters["cache_hits"] / (counters["cache_hits"] + counters["engine_steps"]),
        "engine_steps_per_rollout": counters["engine_steps"] / fast_rollouts,
        "naive_identical_rollouts": f"{matches}/{len(naive_times)}",
        "naive_stock_engine_identical_rollouts": f"{stock_matches}/{len(stock_times)}",
        "target_speedup": 20.0,
    }
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(f"workload: {figures['workload']}")
    print(f"creditaudit  {fast_rate:8.2f} rollouts/s")
    print(f"naive        {naive_rate:8.2f} rollouts/s  (median {figures['naive_median_s_per_rollout']:.3f} s per rollout)")
    print(f"naive, stock {stock_rate:8.2f} rollouts/s  (textworld as shipped; median "
          f"{figures['naive_stock_engine_median_s_per_rollout']:.3f} s per rollout)")
    print(f"speedup      {figures['speedup']:8.1f}x  (one process; {figures['speedup_vs_stock_engine']:.1f}x vs the stock engine)")
    if pool_rate:
        print(f"creditaudit  {pool_rate:8.2f} rollouts/s on {args.workers} worker processes: "
              f"speedup {figures['speedup_with_workers']:.1f}x, {figures['speedup_with_workers_vs_stock_engine']:.1f}x "
              "vs the stock engine  (target >= 20x)")
    print(f"cache hit rate {figures['cache_hit_rate']:.3f}, engine steps per rollout "
          f"{figures['engine_steps_per_rollout']:.2f}, naive rollouts identical {figures['naive_identical_rollouts']} "
          f"(stock engine {figures['naive_stock_engine_identical_rollouts']})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
