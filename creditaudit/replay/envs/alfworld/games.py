"""Offline generator of single-agent ALFRED-domain games for the real ALFWorld engine.

ALFWorld's own game files (``json_2.1.1``) are not shipped with the ``alfworld`` package and
cannot be downloaded here, so this module writes new ones from what the package does ship: the
PDDL domain (``alfred.pddl``), the text grammar (``alfred.twl2``), the 120 FloorPlan layouts
(``alfworld/gen/layouts/``: object types present, receptacle ids and their positions, free floor
points), the compatibility and action tables of ``alfworld/gen/constants.py`` and the goal text
per task type of ``alfworld/gen/goal_library.py``. The task sentence comes from ALFWorld's own
``add_task_to_grammar``.

A game is a directory in ALFWorld's layout::

    <out_dir>/<task_type>-<index:04d>/game.tw-pddl     {pddl_domain, grammar, pddl_problem,
                                                        solvable, walkthrough}
    <out_dir>/<task_type>-<index:04d>/traj_data.json   task type, pddl_params, floor plan,
                                                        generator record

Every game is checked by playing its walkthrough -- built from the generator's own scene data --
on the real engine (:class:`~creditaudit.replay.alfworld_env.AlfworldEnv`); a game whose
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
import random as _stdlib_random  # only to seed/restore around ALFWorld's add_task_to_grammar
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.env import Task

__all__ = [
    "TASK_TYPES",
    "GENERATOR_VERSION",
    "GeneratedGame",
    "GenerationReport",
    "ExpertStep",
    "generate_games",
    "list_game_files",
    "load_tasks",
    "game_task",
    "expert_demonstration",
    "expert_demonstrations",
    "floorplans_for",
    "sha256_file",
]

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""The six ALFRED task types ALFWorld plays (same order as ALFWorld's ``TASK_TYPES`` 1..6)."""

GENERATOR_VERSION = 1
"""Bumped whenever the bytes written for the same seed and settings change."""

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"

_MAX_ATTEMPTS = 40  # scene samples per game before giving up (each failure is counted)
_LAMP_TYPES = ("DeskLamp", "FloorLamp")
# Receptacles a lamp stands on (lamps are not in ALFRED's compatibility table).
_LAMP_HOLDERS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "TVStand", "DiningTable"})
_APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable", "clean"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable", "heat"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable", "cool"),
}
_ROOM_KINDS = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
               "Bathroom": range(401, 431)}


# --------------------------------------------------------------------------- package data


@lru_cache(maxsize=1)
def _alfworld_data() -> dict[str, Any]:
    """Paths, texts and tables the ``alfworld`` package ships (read once)."""
    import alfworld
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goal_library

    root = Path(alfworld.__file__).parent
    static_rtypes = sorted(set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES))
    otypes = sorted(set(constants.OBJECTS_SET) - set(static_rtypes))
    pickupable = set().union(*constants.VAL_RECEPTACLE_OBJECTS.values()) & set(otypes)
    return {
        "root": root,
        "domain": (root / "data" / "alfred.pddl").read_text(),
        "grammar": (root / "data" / "alfred.twl2").read_text(),
        "layouts": root / "gen" / "layouts",
        "constants": constants,
        "goals": goal_library.gdict,
        "static_rtypes": static_rtypes,
        "otypes": otypes,
        "pickupable": frozenset(pickupable),
        "contain": {k: frozenset(v) for k, v in constants.VAL_RECEPTACLE_OBJECTS.items()},
        "actions": {k: frozenset(v) for k, v in constants.VAL_ACTION_OBJECTS.items()},
        "movable": frozenset(constants.MOVABLE_RECEPTACLES),
        "openable": frozenset(constants.OPENABLE_CLASS_LIST),
        "goals_valid": constants.GOALS_VALID,
    }


@dataclass(frozen=True)
class _Room:
    floorplan: int
    kind: str
    object_types: frozenset[str]
    receptacles: tuple[tuple[str, str, tuple[float, float, int, int]], ...]  # (id, rtype, pose)
    free_points: tuple[tuple[float, float], ...]


def _room_kind(floorplan: int) -> str:
    for kind, numbers in _ROOM_KINDS.items():
        if floorplan in numbers:
            return kind
    raise InputError(f"FloorPlan{floorplan} is not an ALFRED room number (1-30, 201-230, 301-330, 401-430)")


@lru_cache(maxsize=None)
def _room(floorplan: int) -> _Room:
    layouts = _alfworld_data()["layouts"]
    base = layouts / f"FloorPlan{floorplan}"
    try:
        object_types = json.loads(Path(f"{base}-objects.json").read_text())
        openable = json.loads(Path(f"{base}-openable.json").read_text())
        free = np.load(f"{base}-layout.npy")
    except FileNotFoundError as exc:
        raise InputError(
            f"`floorplans`: the alfworld package has no layout for FloorPlan{floorplan} ({exc.filename}); "
            "pick numbers from the files in alfworld/gen/layouts/"
        ) from None
    receptacles = []
    for rid, pose in sorted(openable.items()):
        parts = rid.split("|")
        rtype = parts[-1] if len(parts) == 5 else parts[0]  # "Sink|x|y|z|SinkBasin"
        receptacles.append((rid, rtype, (float(pose[0]), float(pose[1]), int(pose[2]), int(pose[3]))))
    points = tuple((float(x), float(z)) for x, z in np.asarray(free).reshape(-1, 2))
    return _Room(floorplan, _room_kind(floorplan), frozenset(object_types), tuple(receptacles), points)


def _all_floorplans() -> list[int]:
    layouts = _alfworld_data()["layouts"]
    found = (re.fullmatch(r"FloorPlan(\d+)-objects\.json", p.name) for p in layouts.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


# --------------------------------------------------------------------------- scene


@dataclass(frozen=True)
class _Scene:
    """Everything a game is written from (ids in ALFRED form, before mangling)."""

    floorplan: int
    task_type: str
    agent_location: tuple[int, int, int, int]
    receptacles: tuple[tuple[str, str, tuple[int, int, int, int]], ...]  # (id, rtype, location)
    objects: tuple[tuple[str, str, str], ...]  # (id, otype, receptacle id)
    targets: tuple[str, ...]  # object ids the walkthrough moves, in order
    parent: str  # receptacle id the walkthrough puts targets in ("" for look)
    appliance: str  # sink basin / microwave / fridge id ("" if none)
    lamp: str  # lamp object id for look ("" otherwise)
    pddl_params: dict[str, Any] = field(default_factory=dict)


def _grid_location(pose: tuple[float, float, int, int]) -> tuple[int, int, int, int]:
    # ALFRED's planner locations are grid points (0.25 m steps), a rotation and a camera horizon.
    return (int(round(pose[0] / 0.25)), int(round(pose[1] / 0.25)), int(pose[2]) // 90 % 4, int(pose[3]))


def _coords(rid: str) -> tuple[float, float, float]:
    parts = rid.split("|")
    return float(parts[1]), float(parts[2]), float(parts[3])


def _choice(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    if not items:
        raise IndexError("empty choice")
    return items[int(rng.integers(len(items)))]


def _task_options(room: _Room, task_type: str) -> list[tuple[str, str, str]]:
    """Valid ``(object type, parent receptacle type, toggle type)`` targets of a room."""
    data = _alfworld_data()
    contain = data["contain"]
    if room.kind not in data["goals_valid"][task_type]:
        return []
    rtypes = sorted({rtype for _, rtype, _ in room.receptacles})
    otypes = sorted((room.object_types & data["pickupable"]) - set(data["static_rtypes"]))
    options: list[tuple[str, str, str]] = []
    if task_type == "look_at_obj_in_light":
        holders = [r for r in rtypes if r in _LAMP_HOLDERS]
        lamps = [lamp for lamp in _LAMP_TYPES if lamp in room.object_types]
        if not holders or not lamps:
            return []
        for otype in otypes:
            if any(otype in contain.get(r, ()) for r in rtypes):
                options.extend((otype, "", lamp) for lamp in lamps)
        return options
    appliance = _APPLIANCE.get(task_type)
    if appliance is not None and appliance[0] not in rtypes:
        return []
    for otype in otypes:
        if appliance is not None and otype not in data["actions"][appliance[1]]:
            continue
        holders = [r for r in rtypes if otype in contain.get(r, ())]
        for parent in holders:
            if appliance is not None and parent == appliance[0]:
                continue
            # the targets must start somewhere else than the goal's receptacle type
            if any(r != parent for r in holders):
                options.append((otype, parent, ""))
    return options


def floorplans_for(task_type: str, floorplans: Iterable[int] | None = None) -> list[int]:
    """FloorPlan numbers that can host ``task_type`` (ALFRED's room table and the room's content).

    Parameters
    ----------
    task_type : str
        One of :data:`TASK_TYPES`.
    floorplans : iterable of int, optional
        Restrict to these numbers; ``None`` or empty means every layout the package ships.
    """
    if task_type not in TASK_TYPES:
        raise InputError(f"`task_types`: unknown task type {task_type!r}; allowed: {', '.join(TASK_TYPES)}")
    allowed = list(floorplans) if floorplans else _all_floorplans()
    return [fp for fp in sorted(set(allowed)) if _task_options(_room(fp), task_type)]


def _sample_scene(task_type: str, floorplan: int, rng: np.random.Generator, max_objects: int,
                  max_receptacles: int) -> _Scene | None:
    data = _alfworld_data()
    contain = data["contain"]
    room = _room(floorplan)
    options = _task_options(room, task_type)
    if not options:
        return None
    otype, parent_type, toggle = _choice(rng, options)

    # One receptacle per location, so "go to X" names one receptacle (ALFWorld's rooms do too).
    by_location: dict[tuple[int, int, int, int], list[tuple[str, str, tuple[int, int, int, int]]]] = {}
    for rid, rtype, pose in room.receptacles:
        by_location.setdefault(_grid_location(pose), []).append((rid, rtype, _grid_location(pose)))
    pool = [_choice(rng, group) for _, group in sorted(by_location.items())]
    order = [pool[i] for i in rng.permutation(len(pool))]

    required: list[tuple[str, str, tuple[int, int, int, int]]] = []

    def need(predicate: Callable[[str], bool]) -> tuple[str, str, tuple[int, int, int, int]] | None:
        for rec in required:
            if predicate(rec[1]):
                return rec
        for rec in order:
            if predicate(rec[1]):
                required.append(rec)
                return rec
        return None

    parent = need(lambda t: t == parent_type) if parent_type else None
    appliance = None
    if task_type in _APPLIANCE:
        appliance = need(lambda t: t == _APPLIANCE[task_type][0])
    lamp_holder = need(lambda t: t in _LAMP_HOLDERS) if toggle else None
    source = need(lambda t: t != parent_type and otype in contain.get(t, ()))
    if source is None or (parent_type and parent is None) or (task_type in _APPLIANCE and appliance is None) \
            or (toggle and lamp_holder is None):
        return None
    if len(required) > max_receptacles:
        return None
    chosen = list(required)
    for rec in order:
        if len(chosen) >= max_receptacles:
            break
        if rec not in chosen:
            chosen.append(rec)
    chosen.sort()
    sources = [rec for rec in chosen if rec[1] != parent_type and otype in contain.get(rec[1], ())]

    used_ids: set[str] = {rid for rid, _, _ in chosen}
    objects: list[tuple[str, str, str]] = []

    def place(obj_type: str, rec: tuple[str, str, tuple[int, int, int, int]]) -> str:
        x, y, z = _coords(rec[0])
        while True:
            oid = "{}|{:+06.2f}|{:+06.2f}|{:+06.2f}".format(
                obj_type, x + float(rng.uniform(-0.4, 0.4)), y + float(rng.uniform(0.0, 0.2)),
                z + float(rng.uniform(-0.4, 0.4)))
            if oid not in used_ids:
                used_ids.add(oid)
                objects.append((oid, obj_type, rec[0]))
                return oid

    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    n_copies = n_targets + int(rng.integers(0, 2))  # a spare instance now and then, like ALFRED
    targets = [place(otype, _choice(rng, sources)) for _ in range(n_copies)][:n_targets]
    lamp_id = ""
    if toggle:
        lamp_id = place(toggle, lamp_holder)
    otypes = sorted((room.object_types & data["pickupable"]) - set(data["static_rtypes"]) - {otype})
    budget = max_objects - len(objects)
    per_type: dict[str, int] = {}
    tries = 0
    while budget > 0 and otypes and tries < 8 * max_objects:
        tries += 1
        dtype = _choice(rng, otypes)
        if per_type.get(dtype, 0) >= 3:  # constants.MAX_NUM_OF_OBJ_INSTANCES
            continue
        holders = [rec for rec in chosen if dtype in contain.get(rec[1], ())]
        if not holders:
            continue
        place(dtype, _choice(rng, holders))
        per_type[dtype] = per_type.get(dtype, 0) + 1
        budget -= 1

    taken = {rec[2] for rec in chosen}
    free = [p for p in room.free_points]
    start = None
    for _ in range(50):
        x, z = _choice(rng, free)
        loc = _grid_location((x, z, 90 * int(rng.integers(4)), 30))
        if loc not in taken:
            start = loc
            break
    if start is None:
        return None

    params = {
        "object_target": otype,
        "parent_target": parent_type,
        "toggle_target": toggle,
        "mrecep_target": "",
        "object_sliced": False,
    }
    return _Scene(
        floorplan=floorplan,
        task_type=task_type,
        agent_location=start,
        receptacles=tuple(chosen),
        objects=tuple(sorted(objects)),
        targets=tuple(targets),
        parent=parent[0] if parent else "",
        appliance=appliance[0] if appliance else "",
        lamp=lamp_id,
        pddl_params=params,
    )


# --------------------------------------------------------------------------- PDDL and names

_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def _mangle(name: str) -> str:
    return "".join(_MANGLE.get(ch, ch) for ch in name)


def _loc_id(loc: tuple[int, int, int, int]) -> str:
    return _mangle("loc|{}|{}|{}|{}".format(*loc))


def _problem(scene: _Scene) -> str:
    data = _alfworld_data()
    actions = data["actions"]
    contain = data["contain"]
    rtypes_present = sorted({rtype for _, rtype, _ in scene.receptacles})
    otypes_present = sorted({otype for _, otype, _ in scene.objects})
    locations = sorted({loc for _, _, loc in scene.receptacles} | {scene.agent_location})
    rec_loc = {rid: loc for rid, _, loc in scene.receptacles}

    lines = [f"(define (problem plan_{scene.task_type}_floorplan{scene.floorplan})", "(:domain alfred)",
             "(:objects", "agent1 - agent"]
    lines += [f"{t}Type - otype" for t in data["otypes"]]
    lines += [f"{t}Type - rtype" for t in data["static_rtypes"]]
    lines += [f"{_mangle(oid)} - object" for oid, _, _ in scene.objects]
    lines += [f"{_mangle(rid)} - receptacle" for rid, _, _ in scene.receptacles]
    lines += [f"{_loc_id(loc)} - location" for loc in locations]
    lines += [")", "(:init", f"(atLocation agent1 {_loc_id(scene.agent_location)})"]
    for rid, rtype, loc in scene.receptacles:
        m = _mangle(rid)
        lines.append(f"(receptacleType {m} {rtype}Type)")
        lines.append(f"(receptacleAtLocation {m} {_loc_id(loc)})")
        if rtype in data["openable"]:
            lines.append(f"(openable {m})")
    for oid, otype, rid in scene.objects:
        m = _mangle(oid)
        lines.append(f"(objectType {m} {otype}Type)")
        lines.append(f"(objectAtLocation {m} {_loc_id(rec_loc[rid])})")
        lines.append(f"(inReceptacle {m} {_mangle(rid)})")
        if otype not in _LAMP_TYPES:
            lines.append(f"(pickupable {m})")
        if otype in data["movable"]:
            lines.append(f"(isReceptacleObject {m})")
        for table, predicate in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                                 ("Sliceable", "sliceable"), ("Toggleable", "toggleable")):
            if otype in actions[table]:
                lines.append(f"({predicate} {m})")
    for rtype in rtypes_present:
        for otype in otypes_present:
            if otype in contain.get(rtype, ()):
                lines.append(f"(canContain {rtype}Type {otype}Type)")
    lines.append(")")
    params = scene.pddl_params
    goal = data["goals"][scene.task_type]["pddl"].replace("#", "-").format(
        obj=params["object_target"], recep=params["parent_target"], toggle=params["toggle_target"],
        mrecep=params["mrecep_target"])
    # the goal text closes the (define ...) opened above
    return "\n".join(lines) + "\n" + "\n".join(line.strip() for line in goal.strip().splitlines()) + "\n"


def _display_names(scene: _Scene) -> dict[str, str]:
    """Names the engine shows for the scene's ids, computed as ALFWorld's demangler numbers them.

    The engine lowercases PDDL names; ``AlfredDemangler`` numbers instances of a name in reverse
    sorted-id order. Verification reads the names back from the loaded engine and compares.
    """
    from alfworld.agents.utils.misc import Demangler

    class _Info:
        def __init__(self, id_: str):
            self.id = id_

    ids = [_mangle(oid).lower() for oid, _, _ in scene.objects]
    ids += [_mangle(rid).lower() for rid, _, _ in scene.receptacles]
    ids += sorted({_loc_id(loc).lower() for _, _, loc in scene.receptacles} | {_loc_id(scene.agent_location).lower()})
    demangler = Demangler(game_infos={i: _Info(i) for i in ids})
    names = {}
    for oid, _, _ in scene.objects:
        names[oid] = demangler.demangle_alfred_name(_mangle(oid).lower()).strip()
    for rid, _, _ in scene.receptacles:
        names[rid] = demangler.demangle_alfred_name(_mangle(rid).lower()).strip()
    return names


def _walkthrough(scene: _Scene, names: dict[str, str]) -> list[str]:
    """The winning command list, from the scene's own data (no search)."""
    rtype_of = {rid: rtype for rid, rtype, _ in scene.receptacles}
    loc_of = {rid: loc for rid, _, loc in scene.receptacles}
    where = {oid: rid for oid, _, rid in scene.objects}
    openable = _alfworld_data()["openable"]
    commands: list[str] = []
    opened: set[str] = set()
    here = [scene.agent_location]

    def go(rid: str, *, need_open: bool) -> None:
        if loc_of[rid] != here[0]:
            commands.append(f"go to {names[rid]}")
            here[0] = loc_of[rid]
        if need_open and rtype_of[rid] in openable and rid not in opened:
            commands.append(f"open {names[rid]}")
            opened.add(rid)

    for oid in scene.targets:
        src = where[oid]
        go(src, need_open=True)
        commands.append(f"take {names[oid]} from {names[src]}")
        if scene.task_type in _APPLIANCE:
            verb = _APPLIANCE[scene.task_type][2]
            go(scene.appliance, need_open=False)  # appliances work closed
            commands.append(f"{verb} {names[oid]} with {names[scene.appliance]}")
        if scene.task_type == "look_at_obj_in_light":
            go(where[scene.lamp], need_open=False)
            commands.append(f"use {names[scene.lamp]}")
        else:
            go(scene.parent, need_open=True)
            commands.append(f"move {names[oid]} to {names[scene.parent]}")
    return commands


def _grammar(scene: _Scene, seed: int) -> str:
    from alfworld.agents.utils.misc import add_task_to_grammar

    traj_data = {"task_type": scene.task_type, "pddl_params": dict(scene.pddl_params)}
    # add_task_to_grammar picks its sentence with the global `random`: seed it from our stream
    # for this call only and put the caller's state back, so game files are byte-reproducible.
    saved = _stdlib_random.getstate()
    try:
        _stdlib_random.seed(seed)
        return add_task_to_grammar(_alfworld_data()["grammar"], traj_data)
    finally:
        _stdlib_random.setstate(saved)


def _game_bytes(scene: _Scene, grammar: str, walkthrough: list[str]) -> bytes:
    game = {
        "pddl_domain": _alfworld_data()["domain"],
        "grammar": grammar,
        "pddl_problem": _problem(scene),
        "solvable": True,
        "walkthrough": walkthrough,
    }
    return json.dumps(game, sort_keys=True, indent=1, ensure_ascii=True).encode() + b"\n"


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
        """The :class:`~creditaudit.replay.env.Task` to ``reset`` an environment with."""
        return Task(task_id=self.task_id, task_type=self.task_type, source=str(self.path),
                    params={"floorplan": self.floorplan})


@dataclass(frozen=True)
class GenerationReport:
    """What :func:`generate_games` did: games kept, discards by reason, games found on disk."""

    games: tuple[GeneratedGame, ...]
    discarded: dict[str, int]
    resumed: int


def _atomic_write(path: Path, payload: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- generation


def _index_rng(root: Sequence[int], type_index: int, index: int, attempt: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([*root, type_index, index, attempt]))


def _candidate(task_type: str, candidates: list[int], root: Sequence[int], index: int, attempt: int,
               max_objects: int, max_receptacles: int) -> tuple[_Scene, bytes, list[str], dict[str, str]] | None:
    rng = _index_rng(root, TASK_TYPES.index(task_type), index, attempt)
    floorplan = _choice(rng, candidates)
    scene = _sample_scene(task_type, floorplan, rng, max_objects, max_receptacles)
    if scene is None:
        return None
    names = _display_names(scene)
    walkthrough = _walkthrough(scene, names)
    grammar = _grammar(scene, int(rng.integers(2**32)))
    return scene, _game_bytes(scene, grammar, walkthrough), walkthrough, names


def _traj_bytes(scene: _Scene, walkthrough: list[str], index: int, attempt: int, discarded: dict[str, int],
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


def _verify(path: Path, scene: _Scene, walkthrough: list[str], names: dict[str, str], env: Any) -> str | None:
    """Play ``walkthrough`` on the engine; ``None`` if it wins exactly at its end, else the reason."""
    if env.horizon < len(walkthrough):
        raise ValueError(f"the verifying environment's horizon ({env.horizon}) is shorter than a walkthrough "
                         f"({len(walkthrough)} commands); pass an AlfworldEnv with a longer horizon")
    task = Task(task_id=sha256_file(path), task_type=scene.task_type, source=str(path))
    env.reset(task)
    engine_names = env.entity_names()
    for oid, name in names.items():
        if engine_names.get(_mangle(oid).lower()) != name:
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
    from creditaudit.replay.alfworld_env import AlfworldEnv

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
                        _atomic_write(traj, _traj_bytes(scene, walkthrough, index, attempt, {}, settings))
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
                    _atomic_write(candidate_path, payload)
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
                    _atomic_write(game_dir / TRAJ_FILE,
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


# --------------------------------------------------------------------------- game sources


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


# --------------------------------------------------------------------------- expert demonstrations


@dataclass(frozen=True)
class ExpertStep:
    """One step of an expert demonstration: what the agent saw, what it could do, what it did."""

    observation: str
    admissible: tuple[str, ...]
    action: str


def _walkthrough_of(task: Task) -> list[str]:
    try:
        game = json.loads(Path(task.source).read_text())
    except FileNotFoundError:
        raise InputError(f"game file {task.source} does not exist") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{task.source} is not a valid game file (JSON error: {exc})") from None
    walkthrough = game.get("walkthrough") if isinstance(game, dict) else None
    if not walkthrough:
        raise InputError(
            f"{task.source} has no `walkthrough`: expert demonstrations need games written by the generator"
        )
    return list(walkthrough)


def expert_demonstration(task: Task | GeneratedGame, *, env: Any = None) -> list[ExpertStep]:
    """The expert demonstration of one game, played on the engine.

    Parameters
    ----------
    task : Task or GeneratedGame
        A generated game (its file carries the walkthrough).
    env : AlfworldEnv, optional
        Engine instance to play on (one is made and closed otherwise).

    Returns
    -------
    list of ExpertStep
        ``(observation text, admissible commands, expert action)`` along the walkthrough; the
        first observation is the game's opening text.

    Raises
    ------
    RuntimeError
        If the walkthrough does not win on the engine (the game file was altered).
    """
    from creditaudit.replay.alfworld_env import AlfworldEnv

    if isinstance(task, GeneratedGame):
        task = task.task
    walkthrough = _walkthrough_of(task)
    own = env is None
    if own:
        env = AlfworldEnv(horizon=max(len(walkthrough), 1))
    try:
        obs = env.reset(task)
        text, admissible = obs.text, obs.admissible
        steps = []
        for action in walkthrough:
            steps.append(ExpertStep(observation=text, admissible=admissible, action=action))
            result = env.step(action)
            text, admissible = result.text, result.admissible
        if not env.won:
            raise RuntimeError(f"{task.source}: the stored walkthrough does not win on the engine")
        return steps
    finally:
        if own:
            env.close()


def expert_demonstrations(tasks: Iterable[Task | GeneratedGame], *, env: Any = None) -> dict[str, list[ExpertStep]]:
    """:func:`expert_demonstration` of every task, keyed by task id (one engine instance)."""
    from creditaudit.replay.alfworld_env import AlfworldEnv

    own = env is None
    if own:
        env = AlfworldEnv(horizon=1000)
    try:
        out = {}
        for task in tasks:
            t = task.task if isinstance(task, GeneratedGame) else task
            out[t.task_id] = expert_demonstration(t, env=env)
        return out
    finally:
        if own:
            env.close()
