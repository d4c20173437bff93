"""Determinism checks: they pass on deterministic environments and fail loudly, naming the step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from creditaudit.errors import CheckFailed
from creditaudit.replay.determinism import (
    NondeterminismError,
    check_determinism,
    check_restore,
    play,
    random_actions,
    trace_hash,
)
from creditaudit.replay.envs import Observation, StepResult, Task
from creditaudit.replay.envs.planted import PlantedEnv

_COUNTER = itertools.count()


class _Flaky:
    """A deliberately nondeterministic environment: from step ``bad_step`` on, its text (or only
    its signature) depends on a process-wide counter, i.e. on how many instances ran before."""

    name = "flaky"
    horizon = 10

    def __init__(self, bad_step: int = 2, what: str = "text", broken_restore: bool = False):
        self.bad_step, self.what, self.broken_restore = bad_step, what, broken_restore
        self.t = 0
        self.salt = next(_COUNTER)

    def reset(self, task: Task) -> Observation:
        self.t = 0
        return Observation("win", "start", ("a", "b"))

    def step(self, action: str) -> StepResult:
        self.t += 1
        text = f"{action} at {self.t}"
        if self.what == "text" and self.t >= self.bad_step:
            text += f" ({self.salt})"
        return StepResult(text, ("a", "b"), self.t >= self.horizon, False)

    def admissible_actions(self):
        return ("a", "b")

    def state_signature(self) -> str:
        extra = self.salt if self.what == "signature" and self.t >= self.bad_step else 0
        return f"{self.t}-{extra}"

    def snapshot(self):
        return self.t

    def restore(self, snapshot) -> None:
        self.t = snapshot + (1 if self.broken_restore else 0)

    def close(self) -> None:
        pass


TASK = Task("t" * 64, "flaky", "flaky")


def test_nondeterministic_text_is_caught_at_its_step():
    with pytest.raises(NondeterminismError, match=r"'flaky' is not deterministic .* instance 1 episode 0 diverges "
                                                  r"at step 3 \(action 'b'\): observation"):
        check_determinism(lambda: _Flaky(bad_step=3), TASK, ["a", "a", "b", "a"])
    assert issubclass(NondeterminismError, CheckFailed)  # exit code 1: a check failed


def test_nondeterministic_signature_is_caught():
    with pytest.raises(NondeterminismError, match=r"at step 1 \(action 'a'\): signature"):
        check_determinism(lambda: _Flaky(bad_step=1, what="signature"), TASK, ["a", "b"])
    # comparing observations only passes
    report = check_determinism(lambda: _Flaky(bad_step=1, what="signature"), TASK, ["a", "b"],
                               compare_signatures=False)
    assert report.n_runs == 3 and report.n_steps == 2


def test_broken_restore_is_caught():
    with pytest.raises(NondeterminismError,
                       match=r"restoring the snapshot of step \d did not give the recorded state signature"):
        check_restore(_Flaky(bad_step=99, broken_restore=True), TASK, ["a", "b", "a"])


def test_argument_checks():
    with pytest.raises(ValueError, match="`n_instances` must be >= 2"):
        check_determinism(lambda: _Flaky(), TASK, ["a"], n_instances=1)


def test_planted_env_is_deterministic():
    env = PlantedEnv(slip=0.3)
    task = env.make_tasks(1, rng=np.random.default_rng(5))[0]
    actions = random_actions(env, task, 12, rng=np.random.default_rng(6), p_inadmissible=0.2)
    report = check_determinism(lambda: PlantedEnv(slip=0.3), task, actions, n_instances=3, repeats=2)
    assert report.trace_hash == trace_hash(play(env, task, actions))
    check_restore(env, task, actions)


@pytest.mark.slow
@pytest.mark.parametrize("task_type", ["pick_two_obj_and_place", "look_at_obj_in_light"])
def test_alfworld_is_deterministic_across_instances_and_resets(game_by_type, task_type):
    from creditaudit.replay.envs.alfworld import AlfworldEnv

    game = game_by_type[task_type]
    with AlfworldEnv(horizon=40) as env:
        actions = random_actions(env, game.task, 10, rng=np.random.default_rng(11), p_inadmissible=0.1)
    actions += list(game.walkthrough)
    # repeats=2: the second reset of each instance is the fast (restored) reset
    report = check_determinism(lambda: AlfworldEnv(horizon=40), game.task, actions, n_instances=2, repeats=2)
    slow = check_determinism(lambda: AlfworldEnv(horizon=40, reuse_engine=False), game.task, actions,
                             n_instances=2, repeats=1)
    assert report.trace_hash == slow.trace_hash


_TRACE_SCRIPT = """
import json, sys
from creditaudit.replay.envs.alfworld import AlfworldEnv, game_task
from creditaudit.replay.determinism import play, trace_hash
path, actions = sys.argv[1], json.loads(sys.argv[2])
with AlfworldEnv(horizon=40) as env:
    print(trace_hash(play(env, game_task(path), actions)))
"""


@pytest.mark.slow
def test_alfworld_trace_is_the_same_in_other_processes_and_hash_seeds(game_by_type):
    import json
    import os
    import subprocess
    import sys

    from creditaudit.replay.envs.alfworld import AlfworldEnv

    game = game_by_type["pick_clean_then_place_in_recep"]
    with AlfworldEnv(horizon=40) as env:
        actions = random_actions(env, game.task, 8, rng=np.random.default_rng(2)) + list(game.walkthrough)
        expected = trace_hash(play(env, game.task, actions))
    for hash_seed in ("1", "4242"):
        out = subprocess.run([sys.executable, "-c", _TRACE_SCRIPT, str(game.path), json.dumps(actions)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=True)
        assert out.stdout.strip().splitlines()[-1] == expected
