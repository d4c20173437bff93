"""The offline ALFRED-domain game generator, checked on the real ALFWorld engine."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.envs.alfworld import TASK_TYPES, floorplans_for, generate_games


def test_rooms_that_host_each_task_type():
    # ALFRED's own table: simple 120, pick-two 120, clean 60, heat 30, cool 30, look 50; three
    # bathrooms list no sink basin among their receptacle positions, so clean has 57 here.
    counts = {t: len(floorplans_for(t)) for t in TASK_TYPES}
    assert counts == {
        "pick_and_place_simple": 120,
        "look_at_obj_in_light": 50,
        "pick_clean_then_place_in_recep": 57,
        "pick_heat_then_place_in_recep": 30,
        "pick_cool_then_place_in_recep": 30,
        "pick_two_obj_and_place": 120,
    }
    assert floorplans_for("pick_heat_then_place_in_recep", [1, 201, 301]) == [1]


def test_settings_are_validated(tmp_path):
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="unknown task type 'pick_and_place_movable'"):
        generate_games(tmp_path, task_types=["pick_and_place_movable"], rng=rng)
    with pytest.raises(InputError, match="`games_per_type`"):
        generate_games(tmp_path, games_per_type=0, rng=rng)
    with pytest.raises(InputError, match="FloorPlan999"):
        generate_games(tmp_path, floorplans=[999], rng=rng)
    with pytest.raises(InputError, match="none of \\[201\\] can host 'pick_heat_then_place_in_recep'"):
        generate_games(tmp_path, task_types=["pick_heat_then_place_in_recep"], floorplans=[201], rng=rng)
    with pytest.raises(TypeError, match="`rng`"):
        generate_games(tmp_path, rng=0)


@pytest.mark.slow
def test_all_six_task_types_are_generated_and_recorded(alfworld_games):
    games = alfworld_games.games
    assert [g.task_type for g in games] == list(TASK_TYPES)
    for game in games:
        assert game.path.name == "game.tw-pddl"
        assert game.task_id == game.sha256 == sha256_file(game.path)
        content = json.loads(game.path.read_text())
        assert set(content) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        assert content["solvable"] is True
        assert tuple(content["walkthrough"]) == game.walkthrough
        assert 3 <= len(game.walkthrough) <= 12
        traj = json.loads((game.path.parent / "traj_data.json").read_text())
        assert traj["task_type"] == game.task_type
        assert traj["scene"]["floor_plan"] == f"FloorPlan{game.floorplan}"
        # the grammar carries the task sentence chosen by ALFWorld's add_task_to_grammar
        assert "UNKNOWN GOAL" not in content["grammar"]
        # small rooms: at most 12 objects and 10 receptacles were asked for
        declarations = content["pddl_problem"].split("(:init")[0]
        assert declarations.count(" - receptacle\n") <= 10
        assert declarations.count(" - object\n") <= 12
    assert sum(alfworld_games.discarded.values()) == 0 or set(alfworld_games.discarded) <= {
        "scene_unbuildable", "walkthrough_did_not_win", "walkthrough_inadmissible", "walkthrough_ended_early",
        "display_name_mismatch"}


@pytest.mark.slow
def test_same_seed_gives_byte_identical_games_and_resume(tmp_path):
    kwargs = dict(task_types=["pick_and_place_simple", "look_at_obj_in_light"], games_per_type=1,
                  max_objects=10, max_receptacles=8)
    state = random.getstate()
    first = generate_games(tmp_path / "a", rng=np.random.default_rng(7), **kwargs)
    assert random.getstate() == state  # the global `random` is seeded for the grammar and put back
    second = generate_games(tmp_path / "b", rng=np.random.default_rng(7), **kwargs)
    for a, b in zip(first.games, second.games):
        assert a.path.read_bytes() == b.path.read_bytes()
        assert (a.path.parent / "traj_data.json").read_bytes() == (b.path.parent / "traj_data.json").read_bytes()
        assert a.task_id == b.task_id

    # resume: one game removed, the other kept without replaying it
    shutil.rmtree(first.games[1].path.parent)
    calls = []
    resumed = generate_games(tmp_path / "a", rng=np.random.default_rng(7), progress=lambda *a: calls.append(a),
                             **kwargs)
    assert resumed.resumed == 1
    assert [g.task_id for g in resumed.games] == [g.task_id for g in first.games]
    assert calls[-1][:2] == (2, 2)

    other = generate_games(tmp_path / "c", rng=np.random.default_rng(8), **kwargs)
    assert {g.task_id for g in other.games}.isdisjoint({g.task_id for g in first.games})

    # a file these settings would not write is refused, not overwritten
    first.games[0].path.write_text(first.games[0].path.read_text().replace('"solvable": true', '"solvable": false'))
    with pytest.raises(InputError, match="game.tw-pddl: this game file is not what this seed"):
        generate_games(tmp_path / "a", rng=np.random.default_rng(7), **kwargs)


def test_parallel_generation_writes_the_serial_games(tmp_path):
    """Two engine processes write exactly the games (and records, discard counts included) that
    one process writes, reported in the same order."""
    kwargs = dict(task_types=["pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep"],
                  games_per_type=1, max_objects=10, max_receptacles=8)
    serial = generate_games(tmp_path / "serial", rng=np.random.default_rng(3), **kwargs)
    parallel = generate_games(tmp_path / "parallel", rng=np.random.default_rng(3), workers=2, **kwargs)
    assert [g.task_id for g in parallel.games] == [g.task_id for g in serial.games]
    assert parallel.discarded == serial.discarded
    assert parallel.resumed == len(serial.games)  # the workers wrote them; the main loop read them back
    for a, b in zip(serial.games, parallel.games):
        assert (a.path.parent / "traj_data.json").read_bytes() == (b.path.parent / "traj_data.json").read_bytes()
