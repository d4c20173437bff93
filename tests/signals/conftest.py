"""Fixtures of the signal tests: a tiny trained policy whose tokenizer has the judge's choices,
and a frozen planted-environment run directory with collected trajectories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import CONTROLS, SIGNALS, make_run

from creditaudit.signals.base import SignalContext, Trajectory, TurnRecord

def planted_trajectory(tid: str = "t-0", task_id: str = "task-a", *, n_turns: int = 3, seed: int = 0,
                       outcome: int | None = None, rollout: int = 0) -> Trajectory:
    """A real planted-environment trajectory (first admissible door each turn)."""
    from creditaudit.replay.envs.planted import PlantedEnv

    env = PlantedEnv(kinds=("PN" * n_turns)[:max(n_turns, 1)], horizon=max(n_turns, 1) + 2)  # no trap: n turns
    task = env.make_tasks(1, rng=np.random.default_rng(seed))[0]
    obs = env.reset(task)
    text, admissible, turns = obs.text, obs.admissible, []
    final = 0
    for t in range(n_turns):
        action = admissible[(t + seed) % len(admissible)]
        result = env.step(action)
        turns.append(TurnRecord(t, text, tuple(admissible), action, (-0.5, -0.25), -0.375, result.text))
        text, admissible = result.text, result.admissible
        final = int(getattr(result, "won", False))
        if result.done:
            break
    return Trajectory(tid, task_id, rollout, obs.goal, final if outcome is None else outcome, tuple(turns))


def context_for(trajectories, *, policy=None, protocol=None, run_dir: Path | None = None, pid: str = "p" * 64,
                overrides=None) -> SignalContext:
    return SignalContext(protocol_id=pid, protocol=protocol, run_dir=run_dir or Path("."),
                         trajectories=list(trajectories), load_policy=lambda: policy, overrides=overrides or {})


@pytest.fixture()
def trajectory_factory():
    """``planted_trajectory(tid, task_id, *, n_turns, seed, outcome, rollout)``."""
    return planted_trajectory


@pytest.fixture()
def context_factory():
    """``context_for(trajectories, *, policy, protocol, run_dir, pid, overrides)``."""
    return context_for


@pytest.fixture()
def run_factory():
    """``make_run(root, policy_dir, *, signals, controls, n_tasks, group, collect_now)``."""
    return make_run


@pytest.fixture()
def signal_set():
    """Deep copies of the test protocol's ``signals`` and ``controls`` sections."""
    import copy

    return copy.deepcopy(SIGNALS), copy.deepcopy(CONTROLS)
