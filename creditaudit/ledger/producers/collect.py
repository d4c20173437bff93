"""Ledger entries of the task list and the collection, recomputed from the turn table."""

from __future__ import annotations

from creditaudit.ledger.producer import ProducerContext, Value, producer

__all__ = ["collect_entries", "tasks_entries"]


@producer("tasks", inputs=("tasks",), version=1, description="Size and composition of the frozen task list.")
def tasks_entries(ctx: ProducerContext) -> list[Value]:
    data = ctx.json("tasks")
    tasks = data.get("tasks", [])
    types: dict[str, int] = {}
    for task in tasks:
        types[task.get("task_type", "?")] = types.get(task.get("task_type", "?"), 0) + 1
    return [
        Value("tasks.n_tasks", len(tasks), "d"),
        Value("tasks.by_type", dict(sorted(types.items())), text=", ".join(f"{k} {v}" for k, v in sorted(types.items()))),
    ]


@producer("collect", inputs=("collect.trajectories", "collect.determinism"), version=1,
          description="Collection sizes, success and admissible rates, and the determinism check.")
def collect_entries(ctx: ProducerContext) -> list[Value]:
    df = ctx.table("collect.trajectories").select(
        ["trajectory_id", "task_index", "outcome", "action_admissible", "mean_logprob"]).to_pandas()
    outcomes = df.groupby("trajectory_id", sort=False).outcome.last()
    n_turns, n_traj = len(df), int(outcomes.size)
    determinism = ctx.json("collect.determinism")
    return [
        Value("collect.n_tasks", int(df.task_index.nunique()), "d"),
        Value("collect.n_trajectories", n_traj, "d"),
        Value("collect.n_turns", n_turns, "d"),
        Value("collect.n_successes", int(outcomes.sum()), "d"),
        Value("collect.success_rate", float(outcomes.mean()) if n_traj else None, ".3f"),
        Value("collect.admissible_rate", float(df.action_admissible.mean()) if n_turns else None, ".3f"),
        Value("collect.mean_turns", n_turns / n_traj if n_traj else None, ".2f"),
        Value("collect.determinism.n_instances", int(determinism["n_instances"]), "d"),
        Value("collect.determinism.n_steps", int(determinism["n_steps"]), "d"),
        Value("collect.determinism.trace_hash", str(determinism["trace_hash"])),
    ]
