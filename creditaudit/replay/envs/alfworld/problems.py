"""What a generated game file says: the PDDL problem of a scene, the names the engine shows, the
winning walkthrough, the task sentence, and the ``game.tw-pddl`` bytes.

The PDDL domain (``alfred.pddl``) and text grammar (``alfred.twl2``) are the ``alfworld``
package's own; the problem is written from a :class:`~creditaudit.replay.envs.alfworld.scenes.Scene`
and the goal text per task type of ``alfworld/gen/goal_library.py``; the task sentence comes from
ALFWorld's own ``add_task_to_grammar``.
"""

from __future__ import annotations

import json
import random as _stdlib_random  # only to seed/restore around ALFWorld's add_task_to_grammar

from creditaudit.replay.envs.alfworld.scenes import APPLIANCES, LAMP_TYPES, Scene, alfworld_data

__all__ = ["mangle", "pddl_problem", "display_names", "scene_walkthrough", "task_grammar", "game_bytes"]


_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def mangle(name: str) -> str:
    """An ALFRED id as a PDDL name (``-|+.,`` spelled out)."""
    return "".join(_MANGLE.get(ch, ch) for ch in name)


def _loc_id(loc: tuple[int, int, int, int]) -> str:
    return mangle("loc|{}|{}|{}|{}".format(*loc))


def pddl_problem(scene: Scene) -> str:
    """The PDDL problem of ``scene`` (objects, initial facts, the task type's goal)."""
    data = alfworld_data()
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
    lines += [f"{mangle(oid)} - object" for oid, _, _ in scene.objects]
    lines += [f"{mangle(rid)} - receptacle" for rid, _, _ in scene.receptacles]
    lines += [f"{_loc_id(loc)} - location" for loc in locations]
    lines += [")", "(:init", f"(atLocation agent1 {_loc_id(scene.agent_location)})"]
    for rid, rtype, loc in scene.receptacles:
        m = mangle(rid)
        lines.append(f"(receptacleType {m} {rtype}Type)")
        lines.append(f"(receptacleAtLocation {m} {_loc_id(loc)})")
        if rtype in data["openable"]:
            lines.append(f"(openable {m})")
    for oid, otype, rid in scene.objects:
        m = mangle(oid)
        lines.append(f"(objectType {m} {otype}Type)")
        lines.append(f"(objectAtLocation {m} {_loc_id(rec_loc[rid])})")
        lines.append(f"(inReceptacle {m} {mangle(rid)})")
        if otype not in LAMP_TYPES:
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


def display_names(scene: Scene) -> dict[str, str]:
    """Names the engine shows for the scene's ids, computed as ALFWorld's demangler numbers them.

    The engine lowercases PDDL names; ``AlfredDemangler`` numbers instances of a name in reverse
    sorted-id order. Verification reads the names back from the loaded engine and compares.
    """
    from alfworld.agents.utils.misc import Demangler

    class _Info:
        def __init__(self, id_: str):
            self.id = id_

    ids = [mangle(oid).lower() for oid, _, _ in scene.objects]
    ids += [mangle(rid).lower() for rid, _, _ in scene.receptacles]
    ids += sorted({_loc_id(loc).lower() for _, _, loc in scene.receptacles} | {_loc_id(scene.agent_location).lower()})
    demangler = Demangler(game_infos={i: _Info(i) for i in ids})
    names = {}
    for oid, _, _ in scene.objects:
        names[oid] = demangler.demangle_alfred_name(mangle(oid).lower()).strip()
    for rid, _, _ in scene.receptacles:
        names[rid] = demangler.demangle_alfred_name(mangle(rid).lower()).strip()
    return names


def scene_walkthrough(scene: Scene, names: dict[str, str]) -> list[str]:
    """The winning command list, from the scene's own data (no search)."""
    rtype_of = {rid: rtype for rid, rtype, _ in scene.receptacles}
    loc_of = {rid: loc for rid, _, loc in scene.receptacles}
    where = {oid: rid for oid, _, rid in scene.objects}
    openable = alfworld_data()["openable"]
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
        if scene.task_type in APPLIANCES:
            verb = APPLIANCES[scene.task_type][2]
            go(scene.appliance, need_open=False)  # appliances work closed
            commands.append(f"{verb} {names[oid]} with {names[scene.appliance]}")
        if scene.task_type == "look_at_obj_in_light":
            go(where[scene.lamp], need_open=False)
            commands.append(f"use {names[scene.lamp]}")
        else:
            go(scene.parent, need_open=True)
            commands.append(f"move {names[oid]} to {names[scene.parent]}")
    return commands


def task_grammar(scene: Scene, seed: int) -> str:
    """The package grammar with the task sentence added (ALFWorld's ``add_task_to_grammar``, seeded)."""
    from alfworld.agents.utils.misc import add_task_to_grammar

    traj_data = {"task_type": scene.task_type, "pddl_params": dict(scene.pddl_params)}
    # add_task_to_grammar picks its sentence with the global `random`: seed it from our stream
    # for this call only and put the caller's state back, so game files are byte-reproducible.
    saved = _stdlib_random.getstate()
    try:
        _stdlib_random.seed(seed)
        return add_task_to_grammar(alfworld_data()["grammar"], traj_data)
    finally:
        _stdlib_random.setstate(saved)


def game_bytes(scene: Scene, grammar: str, walkthrough: list[str]) -> bytes:
    """The ``game.tw-pddl`` file of a scene (sorted-key JSON)."""
    game = {
        "pddl_domain": alfworld_data()["domain"],
        "grammar": grammar,
        "pddl_problem": pddl_problem(scene),
        "solvable": True,
        "walkthrough": walkthrough,
    }
    return json.dumps(game, sort_keys=True, indent=1, ensure_ascii=True).encode() + b"\n"
