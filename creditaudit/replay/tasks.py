"""The task list: the stage between the freeze and collection.

Generated games are *data*: the protocol fixes the generator's settings and counts, the games are
generated after the freeze from the protocol's seed stream ``games/generate``, and the resulting
task list with every game's hash is written (``tasks.json``) and link-recorded before collection
starts. User-supplied games are *inputs*: the protocol pins them, and this stage checks the pins.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditaudit.artifacts import write_bytes_atomic
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes, sha256_file
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol
from creditaudit.protocol.schema import Protocol
from creditaudit.protocol.signing import Signer
from creditaudit.replay.envs.base import Environment, Task
from creditaudit.replay.envs.plugin import EnvironmentPlugin

__all__ = ["TASKS_FILE", "GAMES_DIR", "TaskEntry", "environment_plugin", "make_environment", "prepare_tasks",
           "read_tasks", "task_for"]

TASKS_FILE = "tasks.json"
GAMES_DIR = "games"
TASKS_VERSION = 1


@dataclass(frozen=True)
class TaskEntry:
    """One task of the frozen list: id, type, and where its definition lives."""

    task_id: str
    task_type: str
    path: str | None
    """Game file relative to the run directory (generated) or the data directory (user games)."""
    params: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "task_type": self.task_type, "path": self.path, "params": self.params}


def environment_plugin(protocol: Protocol) -> EnvironmentPlugin:
    """The protocol's environment plugin (entry-point group ``creditaudit.environments``), bound to
    its frozen arguments: capabilities, prompt text, and a factory of instances."""
    from creditaudit import plugins

    section = protocol.environment
    return plugins.get("environment", section.name).create(section.args, horizon=section.horizon)


def make_environment(protocol: Protocol) -> Environment:
    """A fresh instance of the protocol's environment with the full replay contract: the
    environment's own when it snapshots natively, else wrapped by prefix replay."""
    return environment_plugin(protocol).make()


def _data_dir(protocol: Protocol) -> Path:
    value = protocol.environment.data_dir or os.environ.get("ALFWORLD_DATA")
    if not value:
        raise InputError("environment.data_dir is null and $ALFWORLD_DATA is unset: say where the pinned games are")
    return Path(os.path.expandvars(value)).expanduser()


def task_for(entry: TaskEntry, protocol: Protocol, run_dir: Path) -> Task:
    """The :class:`Task` to reset an environment with."""
    if entry.path is None:  # a task the environment made itself: its parameters say everything
        return Task(task_id=entry.task_id, task_type=entry.task_type, source=protocol.environment.name,
                    params=dict(entry.params))
    root = run_dir if protocol.environment.source == "generated" else _data_dir(protocol)
    return Task(task_id=entry.task_id, task_type=entry.task_type, source=str(root / entry.path), params=dict(entry.params))


def _generated_alfworld(frozen: FrozenProtocol, progress: Callable[[int, int], None] | None) -> tuple[list[TaskEntry], list[Path]]:
    from creditaudit.protocol.seeds import rng
    from creditaudit.replay.envs.alfworld.games import generate_games

    settings = frozen.protocol.environment.generator
    out_dir = frozen.run_dir / GAMES_DIR
    report = generate_games(
        out_dir,
        task_types=settings.task_types,
        games_per_type=settings.games_per_type,
        max_objects=settings.max_objects,
        max_receptacles=settings.max_receptacles,
        floorplans=settings.floorplans or None,
        rng=rng(frozen.id, "games/generate"),
        progress=(lambda done, total, _game: progress(done, total)) if progress else None,
    )
    entries, files = [], []
    for game in report.games:
        rel = Path(game.path).resolve().relative_to(frozen.run_dir.resolve()).as_posix()
        entries.append(TaskEntry(game.task_id, game.task_type, rel, {"floorplan": game.floorplan}))
        files.append(Path(game.path))
    return entries, files


def _pinned_games(frozen: FrozenProtocol) -> list[TaskEntry]:
    root = _data_dir(frozen.protocol)
    entries = []
    for index, game in enumerate(frozen.protocol.environment.games):
        path = root / game.path
        if not path.is_file():
            raise InputError(f"environment.games[{index}]: game file {path} not found")
        digest = sha256_file(path)
        if digest != game.sha256:
            raise InputError(
                f"environment.games[{index}]: {game.path} has SHA-256 {digest[:12]}…, the protocol pins "
                f"{game.sha256[:12]}…; the input changed after the protocol was written"
            )
        entries.append(TaskEntry(game.sha256, game.task_type, game.path, {}))
    return entries


def _own_tasks(frozen: FrozenProtocol) -> list[TaskEntry]:
    from creditaudit.protocol.seeds import rng

    plugin = environment_plugin(frozen.protocol)
    tasks = plugin.make_tasks(frozen.protocol.collection.n_tasks, rng=rng(frozen.id, "games/generate"))
    return [TaskEntry(t.task_id, t.task_type, None, dict(t.params)) for t in tasks]


def prepare_tasks(
    frozen: FrozenProtocol,
    signer: Signer,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[TaskEntry]:
    """Write ``tasks.json`` (generating games when the protocol says so) and its link record.

    Idempotent: when ``tasks.json`` exists for this protocol it is read back, not rewritten.
    """
    path = frozen.run_dir / TASKS_FILE
    if path.exists():
        return read_tasks(frozen)
    env_section = frozen.protocol.environment
    produced: list[Path] = []
    if environment_plugin(frozen.protocol).capabilities.generates_tasks:
        entries = _own_tasks(frozen)
    elif env_section.source == "generated":
        entries, produced = _generated_alfworld(frozen, progress)
    else:
        entries = _pinned_games(frozen)
    if not entries:
        raise InputError("the task list is empty: check environment.generator / environment.games")
    document = {
        "version": TASKS_VERSION,
        "protocol_id": frozen.id,
        "environment": env_section.name,
        "tasks": [e.to_dict() for e in entries],
    }
    with StageLink(
        frozen.run_dir,
        "tasks",
        frozen.id,
        signer,
        command=["creditaudit", "games"],
        parameters={"environment": env_section.name, "source": env_section.source, "n_tasks": len(entries)},
        inputs=[frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json")],
    ) as link:
        write_bytes_atomic(path, canonical_bytes(document) + b"\n")
        link.add_output(path)
        for file in produced:
            link.add_output(file)
    return entries


def read_tasks(frozen: FrozenProtocol) -> list[TaskEntry]:
    """Read ``tasks.json``; refuse a list written under another protocol."""
    path = frozen.run_dir / TASKS_FILE
    try:
        document = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no task list; run `creditaudit games` first") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable task list ({exc})") from None
    if document.get("protocol_id") != frozen.id:
        raise InputError(
            f"{path}: field `protocol_id` is {str(document.get('protocol_id'))[:16]}…, not this protocol's "
            f"{frozen.id[:16]}…; task lists never mix across protocols"
        )
    try:
        return [TaskEntry(t["task_id"], t["task_type"], t["path"], dict(t["params"])) for t in document["tasks"]]
    except (KeyError, TypeError) as exc:
        raise InputError(f"{path}: malformed task entry ({exc})") from None
