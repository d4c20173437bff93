"""`creditaudit protocol pin --games DIR`: an ALFWorld data directory's games hashed into the protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditaudit.cli import main
from creditaudit.protocol.canonical import sha256_file
from creditaudit.protocol.io import load_protocol


def run(args) -> int:
    with pytest.raises(SystemExit) as info:
        main(args)
    return info.value.code


def _game(root: Path, name: str, task_type: str, *, solvable: bool = True) -> Path:
    folder = root / name / "trial_T0"
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text(json.dumps({"solvable": solvable, "pddl_problem": name}))
    (folder / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    return folder / "game.tw-pddl"


@pytest.fixture()
def data_dir(tmp_path) -> Path:
    split = tmp_path / "alfworld" / "json_2.1.1" / "valid_seen"
    _game(split, "pick_and_place_simple-Apple-None-Fridge-1", "pick_and_place_simple")
    _game(split, "pick_heat_then_place_in_recep-Egg-None-Plate-2", "pick_heat_then_place_in_recep")
    _game(split, "look_at_obj_in_light-Book-None-DeskLamp-3", "look_at_obj_in_light", solvable=False)
    _game(split, "pick_and_place_with_movable_recep-Pen-Mug-Desk-4", "pick_and_place_simple")
    return split


def test_pin_games_hashes_every_solvable_game(tmp_path, fake_policy_dir, data_dir, capsys):
    proto = tmp_path / "protocol.yaml"
    assert run(["protocol", "init", str(proto), "--policy", str(fake_policy_dir)]) == 0
    assert run(["protocol", "pin", str(proto), "--games", str(data_dir)]) == 0
    assert "2 game file(s)" in capsys.readouterr().out
    env = load_protocol(proto).environment
    assert env.source == "directory" and Path(env.data_dir) == data_dir.resolve()
    assert [g.path for g in env.games] == [
        "pick_and_place_simple-Apple-None-Fridge-1/trial_T0/game.tw-pddl",
        "pick_heat_then_place_in_recep-Egg-None-Plate-2/trial_T0/game.tw-pddl",
    ]  # the unsolvable game and the movable-receptacle variant are left out, as ALFWorld does
    assert [g.task_type for g in env.games] == ["pick_and_place_simple", "pick_heat_then_place_in_recep"]
    assert all(g.sha256 == sha256_file(data_dir / g.path) for g in env.games)
    # a second pin refuses to rewrite the list; an environment that makes its own tasks pins no games
    assert run(["protocol", "pin", str(proto), "--games", str(data_dir)]) == 2
    assert "already filled" in capsys.readouterr().err
    planted = tmp_path / "planted.yaml"
    assert run(["protocol", "init", str(planted), "--policy", str(fake_policy_dir)]) == 0
    planted.write_text(planted.read_text().replace("  name: alfworld", "  name: planted"))
    assert run(["protocol", "pin", str(planted), "--games", str(data_dir)]) == 2
    assert "makes its own tasks" in capsys.readouterr().err


def test_pin_games_refuses_a_directory_without_games(tmp_path, fake_policy_dir, capsys):
    proto = tmp_path / "protocol.yaml"
    assert run(["protocol", "init", str(proto), "--policy", str(fake_policy_dir)]) == 0
    (tmp_path / "empty").mkdir()
    assert run(["protocol", "pin", str(proto), "--games", str(tmp_path / "empty")]) == 2
    assert "no solvable game file" in capsys.readouterr().err
    assert run(["protocol", "pin", str(proto), "--games", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
