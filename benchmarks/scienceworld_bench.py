"""ScienceWorld's engine costs under prefix replay: seconds per step, per reset and per restore,
and what the determinism fix costs.

    python benchmarks/scienceworld_bench.py [--tasks N] [--out FILE]

On ``--tasks`` tasks of the plugin's default task list (drawn from a fixed seed), the gold path is
played on one engine with a snapshot after every step; then every snapshot is restored on a second
engine (another Java process: a reset and the whole prefix replayed, every observation checked).
Reported: median seconds per ``step`` (the engine's step plus its valid-command list), per
``reset`` (a load and the opening look) and per ``restore`` by depth, the divergences (must be 0),
the admissible-list sizes, and the same step and reset medians on an engine started *without*
``-XX:hashCode=2`` together with how many of its repeated loads of one task gave another world
(why the flag is set: see :mod:`creditaudit.replay.envs.scienceworld`).

Writes ``benchmarks/results/scienceworld_bench.json`` (no wall-clock time in it besides the
measured seconds) and prints it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent


def _median(values):
    return round(statistics.median(values), 4) if values else None


def _gold_run(env, task, actions):
    """Play the gold path verbatim on a prefix-replay env; snapshot after each step.

    Verbatim: the engine's parser takes the gold path's own wording ("move egg blue jay egg in
    inventory to orange box") where its valid-combination list names the same act otherwise, and
    the path opens doors the ``easy`` simplification already opened (a wasted step)."""
    t = time.perf_counter()
    env.reset(task)
    reset_s = time.perf_counter() - t
    snaps, step_s = [env.snapshot()], []
    result = None
    for action in actions:
        t = time.perf_counter()
        result = env.step(action)
        step_s.append(time.perf_counter() - t)
        snaps.append(env.snapshot())
        if result.done:
            break
    return reset_s, step_s, snaps, result


def unflagged_engine_costs(task_names, n_loads: int = 6) -> dict:
    """Step/reset medians on a plain engine, and distinct worlds among repeated loads of one task."""
    from scienceworld import ScienceWorldEnv

    import os

    from creditaudit.replay.envs.scienceworld import java_command

    os.environ["PATH"] = os.path.dirname(java_command("auto")) + os.pathsep + os.environ.get("PATH", "")
    engine = ScienceWorldEnv("", envStepLimit=10 ** 6)
    try:
        worlds, reset_s, step_s = set(), [], []
        for _ in range(n_loads):
            t = time.perf_counter()
            engine.load(task_names[0], 1, "easy")
            text = engine.server.step("look around")
            reset_s.append(time.perf_counter() - t)
            worlds.add(hashlib.sha256(text.encode()).hexdigest())
            for action in ("look around", "wait1", "look around"):
                t = time.perf_counter()
                engine.server.step(action)
                engine.get_valid_action_object_combinations()
                step_s.append(time.perf_counter() - t)
        return {"loads": n_loads, "distinct_opening_observations": len(worlds), "reset_s": _median(reset_s),
                "step_s": _median(step_s)}
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "scienceworld_bench.json")
    args = parser.parse_args(argv)

    from creditaudit import plugins
    from creditaudit.replay.envs.scienceworld import DEFAULT_TASKS

    plugin = plugins.get("environment", "scienceworld").create({}, horizon=50)
    raw = plugin.raw()
    try:
        tasks = raw.make_tasks(args.tasks, rng=np.random.default_rng(0))
        golds = [raw.expert_actions(t) for t in tasks]
    finally:
        raw.close()
    player, restorer = plugin.make(), plugin.make()
    resets, steps, restores, sizes, won, divergences = [], [], {}, [], 0, 0
    outcomes = []
    try:
        for task, gold in zip(tasks, golds):
            reset_s, step_s, snaps, result = _gold_run(player, task, gold)
            resets.append(reset_s)
            steps += step_s
            sizes += [len(s.admissible) for s in snaps if not s.done]
            won += int(bool(result and result.won))
            outcomes.append({"won": bool(result and result.won), "score": player.env.score,
                             "gold_not_in_admissible": sum(a not in s.admissible for a, s in zip(gold, snaps))})
            for snap in reversed(snaps):  # deepest first: every restore is a reset and a replayed prefix
                t = time.perf_counter()
                restorer.restore(snap)
                restores.setdefault(len(snap.actions), []).append(time.perf_counter() - t)
                assert restorer.state_signature() == snap.signature
        divergences = restorer.counters["divergences"] + player.counters["divergences"]
    finally:
        player.close()
        restorer.close()

    figures = {
        "benchmark": "scienceworld_bench",
        "tasks": [{"task": t.params["task"], "variation": t.params["variation"], "gold_steps": len(g), **o}
                  for t, g, o in zip(tasks, golds, outcomes)],
        "default_tasks": list(DEFAULT_TASKS),
        "gold_won": won,
        "divergences": divergences,
        "admissible": {"median": statistics.median(sizes), "max": max(sizes), "min": min(sizes)},
        "seconds": {
            "step_median": _median(steps),
            "reset_median": _median(resets),
            "restore_median_by_depth": {str(d): _median(v) for d, v in sorted(restores.items())},
            "restore_per_replayed_step": _median([s / d for d, v in restores.items() if d for s in v]),  # reset included
        },
        "without_hashcode_flag": unflagged_engine_costs([t.params["task"] for t in tasks]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    s = figures["seconds"]
    print(f"{len(tasks)} tasks, gold won {won}, divergences {divergences}, admissible median "
          f"{figures['admissible']['median']} (max {figures['admissible']['max']})")
    print(f"step {s['step_median']} s, reset {s['reset_median']} s, restore {s['restore_per_replayed_step']} s "
          f"per replayed step; by depth {s['restore_median_by_depth']}")
    u = figures["without_hashcode_flag"]
    print(f"without -XX:hashCode=2: step {u['step_s']} s, reset {u['reset_s']} s, "
          f"{u['distinct_opening_observations']} distinct worlds in {u['loads']} loads of one task")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
