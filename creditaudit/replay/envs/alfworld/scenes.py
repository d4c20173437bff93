"""Scenes of ALFRED-domain games: the rooms the ``alfworld`` package ships, and a seeded sample of
what one game's room holds.

A scene is everything a game is written from (:mod:`~creditaudit.replay.envs.alfworld.problems`
writes its PDDL problem, names and walkthrough): a FloorPlan layout (``alfworld/gen/layouts/``:
object types present, receptacle ids and their positions, free floor points), the receptacles and
objects drawn into it by ALFRED's compatibility and action tables (``alfworld/gen/constants.py``),
the targets of the task type, and where the agent starts. :func:`sample_scene` is a function of
its random generator alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.errors import InputError
from creditaudit.protocol.fields import TASK_TYPES

__all__ = ["TASK_TYPES", "LAMP_TYPES", "LAMP_HOLDERS", "APPLIANCES", "Scene", "alfworld_data", "choose",
           "floorplans_for", "sample_scene"]

# TASK_TYPES: the six ALFRED task types ALFWorld plays, in ALFWorld's order (1..6); the protocol's list.

LAMP_TYPES = ("DeskLamp", "FloorLamp")
# Receptacles a lamp stands on (lamps are not in ALFRED's compatibility table).
LAMP_HOLDERS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "TVStand", "DiningTable"})
APPLIANCES = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable", "clean"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable", "heat"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable", "cool"),
}
_ROOM_KINDS = {"Kitchen": range(1, 31), "LivingRoom": range(201, 231), "Bedroom": range(301, 331),
               "Bathroom": range(401, 431)}


# --------------------------------------------------------------------------- package data


@lru_cache(maxsize=1)
def alfworld_data() -> dict[str, Any]:
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
    layouts = alfworld_data()["layouts"]
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
    layouts = alfworld_data()["layouts"]
    found = (re.fullmatch(r"FloorPlan(\d+)-objects\.json", p.name) for p in layouts.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


# --------------------------------------------------------------------------- scene


@dataclass(frozen=True)
class Scene:
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


def choose(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    """One of ``items``, drawn with ``rng`` (one ``integers`` draw)."""
    if not items:
        raise IndexError("empty choice")
    return items[int(rng.integers(len(items)))]


def _task_options(room: _Room, task_type: str) -> list[tuple[str, str, str]]:
    """Valid ``(object type, parent receptacle type, toggle type)`` targets of a room."""
    data = alfworld_data()
    contain = data["contain"]
    if room.kind not in data["goals_valid"][task_type]:
        return []
    rtypes = sorted({rtype for _, rtype, _ in room.receptacles})
    otypes = sorted((room.object_types & data["pickupable"]) - set(data["static_rtypes"]))
    options: list[tuple[str, str, str]] = []
    if task_type == "look_at_obj_in_light":
        holders = [r for r in rtypes if r in LAMP_HOLDERS]
        lamps = [lamp for lamp in LAMP_TYPES if lamp in room.object_types]
        if not holders or not lamps:
            return []
        for otype in otypes:
            if any(otype in contain.get(r, ()) for r in rtypes):
                options.extend((otype, "", lamp) for lamp in lamps)
        return options
    appliance = APPLIANCES.get(task_type)
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


def sample_scene(task_type: str, floorplan: int, rng: np.random.Generator, max_objects: int,
                  max_receptacles: int) -> Scene | None:
    data = alfworld_data()
    contain = data["contain"]
    room = _room(floorplan)
    options = _task_options(room, task_type)
    if not options:
        return None
    otype, parent_type, toggle = choose(rng, options)

    # One receptacle per location, so "go to X" names one receptacle (ALFWorld's rooms do too).
    by_location: dict[tuple[int, int, int, int], list[tuple[str, str, tuple[int, int, int, int]]]] = {}
    for rid, rtype, pose in room.receptacles:
        by_location.setdefault(_grid_location(pose), []).append((rid, rtype, _grid_location(pose)))
    pool = [choose(rng, group) for _, group in sorted(by_location.items())]
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
    if task_type in APPLIANCES:
        appliance = need(lambda t: t == APPLIANCES[task_type][0])
    lamp_holder = need(lambda t: t in LAMP_HOLDERS) if toggle else None
    source = need(lambda t: t != parent_type and otype in contain.get(t, ()))
    if source is None or (parent_type and parent is None) or (task_type in APPLIANCES and appliance is None) \
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
    targets = [place(otype, choose(rng, sources)) for _ in range(n_copies)][:n_targets]
    lamp_id = ""
    if toggle:
        lamp_id = place(toggle, lamp_holder)
    otypes = sorted((room.object_types & data["pickupable"]) - set(data["static_rtypes"]) - {otype})
    budget = max_objects - len(objects)
    per_type: dict[str, int] = {}
    tries = 0
    while budget > 0 and otypes and tries < 8 * max_objects:
        tries += 1
        dtype = choose(rng, otypes)
        if per_type.get(dtype, 0) >= 3:  # constants.MAX_NUM_OF_OBJ_INSTANCES
            continue
        holders = [rec for rec in chosen if dtype in contain.get(rec[1], ())]
        if not holders:
            continue
        place(dtype, choose(rng, holders))
        per_type[dtype] = per_type.get(dtype, 0) + 1
        budget -= 1

    taken = {rec[2] for rec in chosen}
    free = [p for p in room.free_points]
    start = None
    for _ in range(50):
        x, z = choose(rng, free)
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
    return Scene(
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
