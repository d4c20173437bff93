"""ALFWorld game files: reading and checking one, and finding the user's games in a data directory.

A game is a directory in ALFWorld's layout::

    <game dir>/game.tw-pddl     {pddl_domain, grammar, pddl_problem, solvable, walkthrough}
    <game dir>/traj_data.json   task type, pddl_params, floor plan (and, for generated games,
                                the generator's record)

ALFWorld's own games (``json_2.1.1``) live under a data directory (``$ALFWORLD_DATA``); generated
games (:mod:`creditaudit.replay.envs.alfworld.games`) are written in the same layout. A task's id
is the SHA-256 of its ``game.tw-pddl`` bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.envs.alfworld.scenes import TASK_TYPES
from creditaudit.replay.envs.base import Task

__all__ = ["GAME_FILE", "TRAJ_FILE", "read_game_file", "list_game_files", "game_task", "load_tasks"]

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"

_REQUIRED_KEYS = ("pddl_domain", "grammar", "pddl_problem")


def read_game_file(path: str | Path) -> tuple[bytes, dict[str, Any]]:
    """Read and check an ALFWorld game file; return its bytes and parsed JSON.

    Raises
    ------
    InputError
        When the file is missing, unreadable, not JSON, or lacks a field the engine needs; the
        message names the file.
    """
    path = Path(path)
    if not path.name.endswith(".tw-pddl"):
        raise InputError(f"{path}: an ALFWorld game file must end in .tw-pddl (the engine picks its backend by suffix)")
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"game file {path} does not exist; check the task list / data directory") from None
    except OSError as exc:
        raise InputError(f"game file {path} cannot be read ({exc})") from None
    try:
        game = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"game file {path} is corrupt: not JSON ({exc}); regenerate or re-download it") from None
    if not isinstance(game, dict):
        raise InputError(f"game file {path} is corrupt: expected a JSON object")
    missing = [k for k in _REQUIRED_KEYS if not isinstance(game.get(k), str) or not game.get(k)]
    if missing:
        raise InputError(f"game file {path} is corrupt: missing or empty field(s) {', '.join(missing)}")
    return payload, game


def list_game_files(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Every ``game.tw-pddl`` under an ALFWorld data directory, sorted.

    Parameters
    ----------
    data_dir : path, optional
        The directory; ``$ALFWORLD_DATA`` when ``None``.

    Raises
    ------
    InputError
        When no directory is given and ``$ALFWORLD_DATA`` is unset, or the directory does not exist.
    """
    if data_dir is None:
        data_dir = os.environ.get("ALFWORLD_DATA")
        if not data_dir:
            raise InputError("no ALFWorld data directory: pass `data_dir` or set $ALFWORLD_DATA")
    root = Path(os.path.expandvars(os.fspath(data_dir))).expanduser()
    if not root.is_dir():
        raise InputError(f"ALFWorld data directory {root} does not exist; check `data_dir` / $ALFWORLD_DATA")
    return sorted(p for p in root.rglob(GAME_FILE) if p.is_file())


def game_task(path: str | os.PathLike[str], task_type: str | None = None) -> Task:
    """A :class:`Task` for one game file: id = SHA-256 of its bytes, type from ``traj_data.json``.

    Raises
    ------
    InputError
        When the file is missing or unreadable, or its task type cannot be determined.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"game file {path} does not exist")
    if task_type is None:
        traj = path.parent / TRAJ_FILE
        try:
            task_type = json.loads(traj.read_text())["task_type"]
        except FileNotFoundError:
            raise InputError(f"{traj} is missing: the task type of {path} is unknown; pass `task_type`") from None
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"{traj}: cannot read `task_type` ({exc}); fix or remove the file") from None
    return Task(task_id=sha256_file(path), task_type=str(task_type), source=str(path))


def load_tasks(data_dir: str | os.PathLike[str] | None = None, *,
               task_types: Sequence[str] = TASK_TYPES) -> list[Task]:
    """Tasks of every solvable game of the given types under an ALFWorld data directory.

    Like ALFWorld, games marked ``"solvable": false`` and the movable-receptacle / sliced variants
    are skipped; the task type is read from each game's ``traj_data.json``.
    """
    tasks = []
    for path in list_game_files(data_dir):
        if "movable" in str(path.parent) or "Sliced" in str(path.parent):
            continue
        task = game_task(path)
        if task.task_type not in task_types:
            continue
        try:
            solvable = json.loads(path.read_text()).get("solvable", False)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not a valid game file (JSON error: {exc})") from None
        if solvable:
            tasks.append(task)
    return tasks
