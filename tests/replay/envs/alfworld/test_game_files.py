"""Finding, reading and loading ALFWorld game files (on the session's generated games)."""

from __future__ import annotations

import shutil

import pytest

from creditaudit.errors import InputError
from creditaudit.replay.envs.alfworld import TASK_TYPES, game_task, list_game_files, load_tasks


@pytest.mark.slow
def test_game_sources(alfworld_games, tmp_path, monkeypatch):
    root = alfworld_games.games[0].path.parent.parent
    assert list_game_files(root) == sorted(g.path for g in alfworld_games.games)
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    tasks = load_tasks()
    assert sorted(t.task_id for t in tasks) == sorted(g.task_id for g in alfworld_games.games)
    assert {t.task_type for t in tasks} == set(TASK_TYPES)
    assert load_tasks(root, task_types=["look_at_obj_in_light"])[0].task_type == "look_at_obj_in_light"

    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(InputError, match="ALFWORLD_DATA"):
        list_game_files()
    with pytest.raises(InputError, match="does not exist"):
        list_game_files(tmp_path / "nowhere")
    with pytest.raises(InputError, match="missing.tw-pddl does not exist"):
        game_task(tmp_path / "missing.tw-pddl")
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(alfworld_games.games[0].path, lone / "game.tw-pddl")
    with pytest.raises(InputError, match="traj_data.json is missing"):
        game_task(lone / "game.tw-pddl")
    assert game_task(lone / "game.tw-pddl", "pick_and_place_simple").task_id == alfworld_games.games[0].task_id
