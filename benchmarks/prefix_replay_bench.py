"""What prefix replay costs against native snapshots, on the planted environment.

Replays ``--tasks`` planted trajectories (the reference policy: uniform over the admissible doors)
twice -- native snapshots, then the same environment restored by prefix replay -- and reports wall
time, engine steps, restores, the steps replayed by restores, and whether the two turn and rollout
tables are identical. A planted step costs microseconds, so wall time here is the policy's and the
bookkeeping's; what carries over to a slow engine is ``replayed_steps`` (engine steps a restore adds
on top of ``engine_steps``) and ``resets``. Run::

    python benchmarks/prefix_replay_bench.py --tasks 10 --out benchmarks/results/prefix_replay_bench.json
"""

from __future__ import annotations

import argparse
import io
import json
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from creditaudit.replay.engine import ReplaySettings, replay_trajectory
from creditaudit.replay.envs import PrefixReplayEnv
from creditaudit.replay.envs.planted import PLANTED_PROMPT, PlantedEnv
from creditaudit.replay.policies import PromptBuilder, SampledAction
from creditaudit.replay.rollout import advance, start_rollout


class Uniform:
    prompt_builder = PromptBuilder(None, history_length=0, instruction=PLANTED_PROMPT.instruction)

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            line = [x for x in prompt.splitlines() if x.startswith("admissible actions: ")][-1]
            doors = line[len("admissible actions: "):].split(" | ")
            out.append(SampledAction(doors[int(np.random.default_rng(seed).integers(len(doors)))], (), (), "eos",
                                     None, int(seed)))
        return out


def _bytes(table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--rooms", type=int, default=8)
    parser.add_argument("--out", default=None)
    opts = parser.parse_args()
    kw = {"n_steps": opts.rooms, "horizon": 3 * opts.rooms}
    policy = Uniform()
    source = PlantedEnv(**kw)
    trajectories = []
    for index, task in enumerate(source.make_tasks(opts.tasks, rng=np.random.default_rng(7))):
        obs = source.reset(task)
        rollout = start_rollout(source, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
        advance(source, policy, policy.prompt_builder, [rollout], seed_for=lambda r, i=index: 1000 * i + r.steps,
                temperature=1.0)
        trajectories.append((task, pd.DataFrame({
            "trajectory_id": f"t{index}", "action": [t.action for t in rollout.turns],
            "state_signature": [t.state_signature for t in rollout.turns],
            "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0})))
    results = {}
    tables = {}
    for task, frame in trajectories:  # warm-up (layout caches, imports): not timed
        replay_trajectory(PlantedEnv(**kw), policy, task=task, trajectory=frame, protocol_id="d" * 64,
                          settings=ReplaySettings())
    for mode in ("native", "prefix"):
        env = PlantedEnv(**kw)
        if mode == "prefix":
            env = PrefixReplayEnv(env, horizon=kw["horizon"], name="planted", native_signature=True)
        start = time.perf_counter()
        totals = {"engine_steps": 0, "cache_hits": 0, "rollouts": 0, "divergences": 0, "turns": 0}
        turns, rollouts = [], []
        for task, frame in trajectories:
            unit = replay_trajectory(env, policy, task=task, trajectory=frame, protocol_id="d" * 64,
                                     settings=ReplaySettings())
            for key in totals:
                totals[key] += unit.counters.get(key, 0) if key != "turns" else unit.turns.num_rows
            turns.append(_bytes(unit.turns))
            rollouts.append(_bytes(unit.rollouts))
        seconds = time.perf_counter() - start
        results[mode] = {"seconds": round(seconds, 3), **totals}
        if mode == "prefix":
            results[mode].update({k: env.counters[k] for k in ("resets", "restores", "replayed_steps")})
            results[mode]["replayed_steps_per_restore"] = round(env.counters["replayed_steps"]
                                                                / max(1, env.counters["restores"]), 3)
        results[mode]["seconds_per_rollout"] = round(seconds / max(1, totals["rollouts"]), 6)
        tables[mode] = (turns, rollouts)
    results["identical_tables"] = tables["native"] == tables["prefix"]
    results["slowdown"] = round(results["prefix"]["seconds"] / results["native"]["seconds"], 2)
    results["config"] = {"tasks": opts.tasks, **kw}
    text = json.dumps(results, indent=2, sort_keys=True)
    print(text)
    if opts.out:
        with open(opts.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
