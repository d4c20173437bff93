"""creditaudit.replay — environments, policies, trajectory collection and executed replay.

The stages, in the order a run goes through them: :mod:`~creditaudit.replay.tasks` (the frozen
task list, ``creditaudit games``), :mod:`~creditaudit.replay.collect` (``creditaudit collect``:
lockstep rollouts, :mod:`~creditaudit.replay.rollout`, recorded as
:mod:`~creditaudit.replay.records`), and :mod:`~creditaudit.replay.stage` (``creditaudit replay``:
the executed counterfactual replay of every turn, :mod:`~creditaudit.replay.engine`, run by
:mod:`~creditaudit.replay.executors`). Environments are in :mod:`creditaudit.replay.envs`,
policies in :mod:`creditaudit.replay.policies`; :mod:`~creditaudit.replay.determinism` checks that
an environment replays identically, :mod:`~creditaudit.replay.compute` fixes the thread count of
stored numbers.
"""

from creditaudit.replay.collect import (
    COLLECT_DIR,
    CollectSummary,
    collect,
    load_run_policy,
    policy_files_in_run,
    read_trajectories,
)
from creditaudit.replay.compute import stored_numerics
from creditaudit.replay.engine import (
    ROLLOUT_TABLE_SCHEMA,
    TURN_TABLE_SCHEMA,
    ReplaySettings,
    UnitResult,
    difference_interval,
    replay_group,
    replay_trajectory,
)
from creditaudit.replay.records import TRAJECTORIES, TURN_SCHEMA, Trajectory, TurnRecord, trajectories_from_table
from creditaudit.replay.stage import REPLAY_DIR, ROLLOUTS, SUMMARY, TURNS, ReplaySummary, read_replay, run_replay
from creditaudit.replay.tasks import (
    TASKS_FILE,
    TaskEntry,
    environment_plugin,
    make_environment,
    prepare_tasks,
    read_tasks,
    task_for,
)

__all__ = [
    # tasks (`creditaudit games`)
    "TASKS_FILE",
    "TaskEntry",
    "prepare_tasks",
    "read_tasks",
    "task_for",
    "environment_plugin",
    "make_environment",
    # collection (`creditaudit collect`) and what it records
    "COLLECT_DIR",
    "TRAJECTORIES",
    "TURN_SCHEMA",
    "CollectSummary",
    "collect",
    "load_run_policy",
    "policy_files_in_run",
    "read_trajectories",
    "TurnRecord",
    "Trajectory",
    "trajectories_from_table",
    # executed replay (`creditaudit replay`)
    "REPLAY_DIR",
    "TURNS",
    "ROLLOUTS",
    "SUMMARY",
    "TURN_TABLE_SCHEMA",
    "ROLLOUT_TABLE_SCHEMA",
    "ReplaySettings",
    "ReplaySummary",
    "UnitResult",
    "difference_interval",
    "replay_group",
    "replay_trajectory",
    "run_replay",
    "read_replay",
    # numerics
    "stored_numerics",
]
