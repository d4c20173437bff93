"""Offline generator of single-agent ALFRED-domain games for the real ALFWorld engine.

ALFWorld's own game files (``json_2.1.1``) are not shipped with the ``alfworld`` package and
cannot be downloaded here, so this module writes new ones from what the package does ship: the
PDDL domain (``alfred.pddl``), the text grammar (``alfred.twl2``), the 120 FloorPlan layouts
(``alfworld/gen/layouts/``: object types present, receptacle ids and their positions, free floor
points), the compatibility and action tables of ``alfworld/gen/constants.py`` and the goal text
per task type of ``alfworld/gen/goal_library.py``. The task sentence comes from ALFWorld's own
``add_task_to_grammar``. A scene is sampled by :mod:`~creditaudit.replay.envs.alfworld.scenes`,
written out by :mod:`~creditaudit.replay.envs.alfworld.problems`; this module drives the two,
verifies every game and resumes.

A game is a directory in ALFWorld's layout::

    <out_dir>/<task_type>-<index:04d>/game.tw-pddl     {pddl_domain, grammar, pddl_problem,
                                                        solvable, walkthrough}
    <out_dir>/<task_type>-<index:04d>/traj_data.json   task type, pddl_params, floor plan,
                                                        generator record

Every game is checked by playing its walkthrough -- built from the generator's own scene data --
on the real engine (:class:`~creditaudit.replay.envs.alfworld.env.AlfworldEnv`); a game whose
walkthrough does not win is discarded and counted, never kept. A game's id is the SHA-256 of its
``game.tw-pddl`` bytes.

Reproducibility: the caller's ``numpy.random.Generator`` is consumed once, for a root entropy;
game ``k`` of a task type is then derived from ``(root, task type, k, attempt)`` alone, so the
same generator seed writes byte-identical files, and an interrupted run resumes to the same files
as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.artifacts import write_bytes_atomic
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.envs.alfworld.game_files import GAME_FILE, TRAJ_FILE
from creditaudit.replay.envs.alfworld.problems import display_names, game_bytes, mangle, scene_walkthrough, task_grammar
from creditaudit.replay.envs.alfworld.scenes import TASK_TYPES, Scene, choose, floorplans_for, sample_scene
from creditaudit.replay.envs.base import Task

__all__ = [
    "TASK_TYPES",
    "GENERATOR_VERSION",
    "GeneratedGame",
    "GenerationReport",
    "generate_games",
    "floorplans_for",
]

GENERATOR_VERSION = 1
"""Bumped whenever the bytes written for the same seed and settings change."""

_MAX_ATTEMPTS = 40  # scene samples per game before giving up (each failure is counted)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class GeneratedGame:
    """One verified generated game.

    Attributes
    ----------
    task_id : str
        SHA-256 of ``game.tw-pddl``'s bytes (the game's id).
    task_type : str
        One of :data:`TASK_TYPES`.
    path : pathlib.Path
        The ``game.tw-pddl`` file.
    sha256 : str
        Same as ``task_id``.
    walkthrough : tuple of str
        The expert command list; it wins on the engine at its last command.
    floorplan : int
        ALFRED FloorPlan number of the room.
    index : int
        Index of the game within its task type.
    """

    task_id: str
    task_type: str
    path: Path
    sha256: str
    walkthrough: tuple[str, ...]
    floorplan: int
    index: int

    @property
    def task(self) -> Task:
        """The :class:`~creditaudit.replay.envs.base.Task` to ``reset`` an environment with."""
        return Task(task_id=self.task_id, task_type=self.task_type, source=str(self.path),
                    params={"floorplan": self.floorplan})


@dataclass(frozen=True)
class GenerationReport:
    """What :func:`generate_games` did: games kept, discards by reason, games found on disk."""

    games: tuple[GeneratedGame, ...]
    discarded: dict[str, int]
    resumed: int


# --------------------------------------------------------------------------- generation


def _index_rng(root: Sequence[int], type_index: int, index: int, attempt: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([*root, type_index, index, attempt]))


def _candidate(task_type: str, candidates: list[int], root: Sequence[int], index: int, attempt: int,
               max_objects: int, max_receptacles: int) -> tuple[Scene, bytes, list[str], dict[str, str]] | None:
    rng = _index_rng(root, TASK_TYPES.index(task_type), index, attempt)
    floorplan = choose(rng, candidates)
    scene = sample_scene(task_type, floorplan, rng, max_objects, max_receptacles)
    if scene is None:
        return None
    names = display_names(scene)
    walkthrough = scene_walkthrough(scene, names)
    grammar = task_grammar(scene, int(rng.integers(2**32)))
    return scene, game_bytes(scene, grammar, walkthrough), walkthrough, names


def _traj_bytes(scene: Scene, walkthrough: list[str], index: int, attempt: int, discarded: dict[str, int],
                settings: dict[str, Any]) -> bytes:
    record = {
        "task_type": scene.task_type,
        "pddl_params": scene.pddl_params,
        "scene": {"floor_plan": f"FloorPlan{scene.floorplan}"},
        "walkthrough": walkthrough,
        "creditaudit": {
            "generator_version": GENERATOR_VERSION,
            "index": index,
            "attempt": attempt,
            "discarded": discarded,
            "settings": settings,
        },
    }
    return json.dumps(record, sort_keys=True, indent=1).encode() + b"\n"


def _verify(path: Path, scene: Scene, walkthrough: list[str], names: dict[str, str], env: Any) -> str | None:
    """Play ``walkthrough`` on the engine; ``None`` if it wins exactly at its end, else the reason."""
    if env.horizon < len(walkthrough):
        raise ValueError(f"the verifying environment's horizon ({env.horizon}) is shorter than a walkthrough "
                         f"({len(walkthrough)} commands); pass an AlfworldEnv with a longer horizon")
    task = Task(task_id=sha256_file(path), task_type=scene.task_type, source=str(path))
    env.reset(task)
    engine_names = env.entity_names()
    for oid, name in names.items():
        if engine_names.get(mangle(oid).lower()) != name:
            return "display_name_mismatch"
    for i, command in enumerate(walkthrough):
        if command not in env.admissible_actions():
            return "walkthrough_inadmissible"
        result = env.step(command)
        if result.done and i < len(walkthrough) - 1:
            return "walkthrough_ended_early"
    return None if env.won else "walkthrough_did_not_win"


def _settings_iv(task_types: Sequence[str], games_per_type: int, max_objects: int, max_receptacles: int,
                 floorplans: Sequence[int] | None) -> tuple[list[str], list[int] | None]:
    task_types = list(task_types)
    if not task_types:
        raise InputError("`task_types` must name at least one task type; allowed: " + ", ".join(TASK_TYPES))
    for t in task_types:
        if t not in TASK_TYPES:
            raise InputError(f"`task_types`: unknown task type {t!r}; allowed: {', '.join(TASK_TYPES)}")
    if len(set(task_types)) != len(task_types):
        raise InputError("`task_types` lists a task type twice")
    if not isinstance(games_per_type, int) or games_per_type < 1:
        raise InputError(f"`games_per_type` must be a positive integer, got {games_per_type!r}")
    if max_objects < 2:
        raise InputError(f"`max_objects` must be >= 2, got {max_objects!r}")
    if max_receptacles < 2:
        raise InputError(f"`max_receptacles` must be >= 2, got {max_receptacles!r}")
    fps = sorted({int(f) for f in floorplans}) if floorplans else None
    return task_types, fps


def _generate_share(job: tuple[str, list[str], list[int], dict[str, Any]]) -> int:
    """Worker: generate and verify the games of some task types (see ``generate_games(workers=)``)."""
    out_dir, task_types, root, kwargs = job
    report = generate_games(out_dir, task_types=task_types, rng=np.random.default_rng(0), _root=root, **kwargs)
    return len(report.games)


def generate_games(
    out_dir: str | os.PathLike[str],
    *,
    task_types: Sequence[str] = TASK_TYPES,
    games_per_type: int = 4,
    max_objects: int = 20,
    max_receptacles: int = 16,
    floorplans: Sequence[int] | None = None,
    rng: np.random.Generator,
    progress: Callable[[int, int, GeneratedGame | None], None] | None = None,
    env: Any = None,
    workers: int = 1,
    _root: Sequence[int] | None = None,
) -> GenerationReport:
    """Write and verify ``games_per_type`` games of each task type under ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Directory of the games (created). Games already there from the same seed and settings are
        kept without replaying them (resume); a file that differs is an error.
    task_types : sequence of str, default all six
        Task types, from :data:`TASK_TYPES`.
    games_per_type : int, default 4
        Games per task type.
    max_objects, max_receptacles : int, default 20 and 16
        Upper bounds on object and receptacle instances in a room (cheap engine steps).
    floorplans : sequence of int, optional
        Allowed FloorPlan numbers; ``None`` or empty means every layout the package ships.
    rng : numpy.random.Generator
        The protocol's ``games/generate`` stream; consumed once, for the root entropy.
    progress : callable, optional
        Called as ``progress(done, total, game)`` after each game (``game`` is ``None`` while a
        candidate was discarded).
    env : AlfworldEnv, optional
        Engine instance used for verification (one is made and closed otherwise).
    workers : int, default 1
        Engine processes that verify games in parallel (started with ``spawn``: a script calling
        this with ``workers > 1`` needs an ``if __name__ == "__main__":`` guard). Ignored when
        ``env`` is given. The games do not depend on it: each is a function of its own seed.

    Returns
    -------
    GenerationReport
        The games in task-type order then index order, discard counts by reason, and how many
        games were found already written.

    Notes
    -----
    Game ``k`` of type ``t`` is a function of ``(root, t, k, attempt)`` only, where ``root`` is
    128 bits drawn from ``rng``; attempt ``a + 1`` is tried only when attempt ``a`` could not be
    built or did not win on the engine (a discard).
    """
    from creditaudit.replay.envs.alfworld.env import AlfworldEnv

    task_types, fps = _settings_iv(task_types, games_per_type, max_objects, max_receptacles, floorplans)
    if not isinstance(rng, np.random.Generator):
        raise TypeError("`rng` must be a numpy.random.Generator (the protocol's `games/generate` stream)")
    root = [int(v) for v in rng.integers(0, 2**32, size=4, dtype=np.uint64)] if _root is None else list(_root)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if env is None and workers > 1:
        # Each worker writes and verifies the games of some task types; the loop below then
        # finds them written and only reads them back (the resume path), in the usual order.
        missing = [t for t in task_types
                   if any(not (out / f"{t}-{k:04d}" / GAME_FILE).exists() for k in range(games_per_type))]
        if len(missing) > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            shares = [missing[i::workers] for i in range(min(workers, len(missing)))]
            kwargs = {"games_per_type": games_per_type, "max_objects": max_objects,
                      "max_receptacles": max_receptacles, "floorplans": floorplans}
            with ProcessPoolExecutor(max_workers=len(shares), mp_context=mp.get_context("spawn")) as pool:
                for _ in pool.map(_generate_share, [(str(out), share, root, kwargs) for share in shares]):
                    pass
    candidates = {t: floorplans_for(t, fps) for t in task_types}
    for t, c in candidates.items():
        if not c:
            raise InputError(f"`floorplans`: none of {fps} can host {t!r}; allow more floor plans")
    settings = {"max_objects": max_objects, "max_receptacles": max_receptacles, "floorplans": fps or []}

    own_env = env is None
    if own_env:
        env = AlfworldEnv(horizon=1000)
    games: list[GeneratedGame] = []
    discarded: dict[str, int] = {}
    resumed = 0
    total = len(task_types) * games_per_type
    try:
        for task_type in task_types:
            for index in range(games_per_type):
                game_dir = out / f"{task_type}-{index:04d}"
                game_path = game_dir / GAME_FILE
                local: dict[str, int] = {}
                kept = None
                if game_path.exists():
                    # Resume: the file must be one of this game's candidates (no replay needed,
                    # it was verified before it was renamed into place).
                    existing = game_path.read_bytes()
                    for attempt in range(_MAX_ATTEMPTS):
                        built = _candidate(task_type, candidates[task_type], root, index, attempt, max_objects,
                                           max_receptacles)
                        if built is not None and built[1] == existing:
                            scene, _, walkthrough, _ = built
                            kept = (scene, walkthrough)
                            break
                    if kept is None:
                        raise InputError(
                            f"{game_path}: this game file is not what this seed and these settings generate; "
                            "write the games to an empty directory (or remove the file)"
                        )
                    resumed += 1
                    traj = game_dir / TRAJ_FILE
                    if not traj.exists():
                        write_bytes_atomic(traj, _traj_bytes(scene, walkthrough, index, attempt, {}, settings))
                    else:
                        try:
                            record = json.loads(traj.read_text())["creditaudit"]["discarded"]
                            local.update({str(k): int(v) for k, v in record.items()})
                        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                            raise InputError(f"{traj} is corrupt; remove it and run again") from None
                for attempt in range(_MAX_ATTEMPTS if kept is None else 0):
                    built = _candidate(task_type, candidates[task_type], root, index, attempt, max_objects,
                                       max_receptacles)
                    if built is None:
                        local["scene_unbuildable"] = local.get("scene_unbuildable", 0) + 1
                        continue
                    scene, payload, walkthrough, names = built
                    game_dir.mkdir(parents=True, exist_ok=True)
                    candidate_path = game_dir / f".candidate-{attempt}.tw-pddl"
                    write_bytes_atomic(candidate_path, payload)
                    try:
                        reason = _verify(candidate_path, scene, walkthrough, names, env)
                    except BaseException:
                        candidate_path.unlink()
                        raise
                    if reason is not None:
                        candidate_path.unlink()
                        local[reason] = local.get(reason, 0) + 1
                        if progress is not None:
                            progress(len(games), total, None)
                        continue
                    # traj_data first: a game directory is complete once game.tw-pddl exists
                    write_bytes_atomic(game_dir / TRAJ_FILE,
                                  _traj_bytes(scene, walkthrough, index, attempt, dict(local), settings))
                    os.replace(candidate_path, game_path)
                    kept = (scene, walkthrough)
                    break
                for reason, n in local.items():
                    discarded[reason] = discarded.get(reason, 0) + n
                if kept is None:
                    raise RuntimeError(
                        f"no verified {task_type} game #{index} after {_MAX_ATTEMPTS} attempts ({local}); "
                        "allow more floor plans or larger rooms"
                    )
                scene, walkthrough = kept
                sha = sha256_file(game_path)
                game = GeneratedGame(task_id=sha, task_type=task_type, path=game_path, sha256=sha,
                                     walkthrough=tuple(walkthrough), floorplan=scene.floorplan, index=index)
                games.append(game)
                if progress is not None:
                    progress(len(games), total, game)
    finally:
        if own_env:
            env.close()
    return GenerationReport(games=tuple(games), discarded=discarded, resumed=resumed)
