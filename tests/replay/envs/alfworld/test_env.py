"""The ALFWorld adapter on the real engine: contract, bad input, snapshots."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit import plugins
from creditaudit.replay.determinism import check_restore, random_actions
from creditaudit.replay.envs import Environment, EpisodeOver, SnapshotError, Task
from creditaudit.replay.envs.alfworld import AlfworldEnv, read_game_file

pytestmark = pytest.mark.slow


def test_registered_and_implements_the_contract():
    env = plugins.get("environment", "alfworld").create({}, horizon=7).make()
    assert isinstance(env, AlfworldEnv) and isinstance(env, Environment)
    assert env.horizon == 7 and env.name == "alfworld"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("look")
    env.close()
    with pytest.raises(InputError, match="`horizon`"):
        AlfworldEnv(horizon=0)


def test_reset_observation(game_by_type, alfworld_env):
    argv = list(sys.argv)
    game = game_by_type["pick_heat_then_place_in_recep"]
    obs = alfworld_env.reset(game.task)
    assert sys.argv == argv  # fast_downward's translator rewrites sys.argv; the adapter puts it back
    assert obs.text.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert obs.goal and obs.text.rstrip().endswith(obs.goal)
    assert obs.goal.startswith(("put a hot", "heat some"))
    assert {"look", "inventory", "help"} <= set(obs.admissible)
    assert list(obs.admissible) == sorted(obs.admissible)
    assert obs.admissible == alfworld_env.admissible_actions()
    assert not alfworld_env.won and alfworld_env.steps == 0


def test_walkthrough_wins_with_outcome_one(game_by_type, alfworld_env):
    game = game_by_type["pick_two_obj_and_place"]
    alfworld_env.reset(game.task)
    for i, action in enumerate(game.walkthrough):
        result = alfworld_env.step(action)
        assert result.done == (i == len(game.walkthrough) - 1)
    assert result.won and result.outcome == 1 and not result.truncated
    with pytest.raises(EpisodeOver):
        alfworld_env.step("look")


def test_inadmissible_and_empty_actions_are_nothing_happens(game_by_type, alfworld_env):
    game = game_by_type["pick_and_place_simple"]
    obs = alfworld_env.reset(game.task)
    for action in ["", "   ", "fly to the moon", "take everything from nowhere"]:
        result = alfworld_env.step(action)
        assert result.text == "Nothing happens."
        assert result.admissible == obs.admissible and not result.done
    assert alfworld_env.steps == 4
    with pytest.raises(TypeError, match="action must be a str"):
        alfworld_env.step(None)


def test_horizon_ends_the_episode_with_outcome_zero(game_by_type):
    game = game_by_type["look_at_obj_in_light"]
    with AlfworldEnv(horizon=3) as env:
        env.reset(game.task)
        results = [env.step("look") for _ in range(3)]
        assert [r.done for r in results] == [False, False, True]
        assert results[-1].truncated and results[-1].outcome == 0
        with pytest.raises(EpisodeOver):
            env.step("look")
        # the horizon is part of the state: the same facts at another step count differ
        sig_end = env.state_signature()
        env.reset(game.task)
        env.step("look")
        assert env.state_signature() != sig_end


def test_bad_game_files_are_named(game_by_type, alfworld_env, tmp_path):
    game = game_by_type["pick_and_place_simple"]
    missing = tmp_path / "gone" / "game.tw-pddl"
    with pytest.raises(InputError, match=r"gone/game.tw-pddl does not exist"):
        alfworld_env.reset(Task("x", game.task_type, str(missing)))

    corrupt = tmp_path / "corrupt.tw-pddl"
    corrupt.write_bytes(game.path.read_bytes()[:500])
    with pytest.raises(InputError, match=r"corrupt.tw-pddl is corrupt: not JSON"):
        alfworld_env.reset(Task("x", game.task_type, str(corrupt)))

    content = json.loads(game.path.read_text())
    no_problem = tmp_path / "noproblem.tw-pddl"
    no_problem.write_text(json.dumps({k: v for k, v in content.items() if k != "pddl_problem"}))
    with pytest.raises(InputError, match=r"noproblem.tw-pddl is corrupt: missing or empty field\(s\) pddl_problem"):
        alfworld_env.reset(Task("x", game.task_type, str(no_problem)))

    bad_pddl = tmp_path / "badpddl.tw-pddl"
    bad_pddl.write_text(json.dumps({**content, "pddl_problem": "(define (problem broken"}))
    with pytest.raises(InputError, match=r"badpddl.tw-pddl: the ALFWorld engine cannot load it"):
        alfworld_env.reset(Task("x", game.task_type, str(bad_pddl)))

    with pytest.raises(InputError, match="must end in .tw-pddl"):
        read_game_file(tmp_path / "game.json")

    changed = tmp_path / "changed.tw-pddl"
    changed.write_text(game.path.read_text() + " ")
    with pytest.raises(InputError, match="changed.tw-pddl changed: its SHA-256"):
        alfworld_env.reset(replace(game.task, source=str(changed)))

    # the instance still works after the errors
    obs = alfworld_env.reset(game.task)
    assert obs.admissible


def test_snapshot_restore_matches_fresh_replay(game_by_type, alfworld_env):
    game = game_by_type["pick_clean_then_place_in_recep"]
    rng = np.random.default_rng(3)
    prefix = random_actions(alfworld_env, game.task, 4, rng=rng, p_inadmissible=0.2)
    actions = prefix + ["look"] + list(game.walkthrough)
    report = check_restore(alfworld_env, game.task, actions, starts=[6, 0, 3])
    assert report.n_steps == len(actions)

    # a restored state continues exactly as a fresh episode replayed from reset
    alfworld_env.reset(game.task)
    for a in actions[:5]:
        alfworld_env.step(a)
    snap = alfworld_env.snapshot()
    branch = [alfworld_env.step(a) for a in actions[5:8]]
    alfworld_env.restore(snap)
    again = [alfworld_env.step(a) for a in actions[5:8]]
    assert again == branch
    with AlfworldEnv(horizon=alfworld_env.horizon, reuse_engine=False) as fresh:
        fresh.reset(game.task)
        for a in actions[:5]:
            fresh.step(a)
        assert [fresh.step(a) for a in actions[5:8]] == branch
        assert fresh.state_signature() == alfworld_env.state_signature()


def test_snapshots_are_guarded(game_by_type, alfworld_env):
    game = game_by_type["pick_cool_then_place_in_recep"]
    alfworld_env.reset(game.task)
    alfworld_env.step(game.walkthrough[0])
    old = alfworld_env.snapshot()
    alfworld_env.reset(game.task)
    with pytest.raises(SnapshotError, match="before the last reset"):
        alfworld_env.restore(old)
    with AlfworldEnv() as other:
        other.reset(game.task)
        with pytest.raises(SnapshotError, match="another AlfworldEnv instance"):
            other.restore(alfworld_env.snapshot())
    with pytest.raises(SnapshotError, match="not an AlfworldSnapshot"):
        alfworld_env.restore({"state_id": 3})


def test_signature_tracks_the_world_state(game_by_type, alfworld_env):
    game = game_by_type["pick_and_place_simple"]
    alfworld_env.reset(game.task)
    s0 = alfworld_env.state_signature()
    assert alfworld_env.state_signature() == s0  # reading the state does not change it
    alfworld_env.step(game.walkthrough[0])
    s1 = alfworld_env.state_signature()
    alfworld_env.reset(game.task)
    assert alfworld_env.state_signature() == s0
    alfworld_env.step("look")  # facts unchanged ("checked"), step count differs
    assert alfworld_env.state_signature() not in {s0, s1}


@pytest.mark.parametrize("task_type", [
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place"])
def test_every_task_type_restores_mid_walkthrough(game_by_type, alfworld_env, task_type):
    game = game_by_type[task_type]
    middle = len(game.walkthrough) // 2
    report = check_restore(alfworld_env, game.task, list(game.walkthrough), starts=[middle, 1])
    assert report.n_steps == len(game.walkthrough) and alfworld_env.won


def test_memoised_planner_facts_match_a_fresh_read_across_restores_and_loads(game_by_type, alfworld_env):
    """The fact and signature memos are keyed by the planner's state id: after steps, restores and
    a load of another game, every signature equals the one computed with the memos emptied."""
    first, second = game_by_type["pick_cool_then_place_in_recep"], game_by_type["pick_and_place_simple"]
    seen = []
    for game in (first, second, first):
        alfworld_env.reset(game.task)
        snap = alfworld_env.snapshot()
        for action in list(game.walkthrough)[:4] + ["look"]:
            alfworld_env.step(action)
            memoised = alfworld_env.state_signature()
            alfworld_env._facts_by_state.clear()
            alfworld_env._signature_by_state.clear()
            assert alfworld_env.state_signature() == memoised
            seen.append(memoised)
        alfworld_env.restore(snap)
        assert alfworld_env.state_signature() == snap.signature
    assert len(set(seen)) > 5
