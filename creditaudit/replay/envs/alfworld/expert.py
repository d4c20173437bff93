"""The ALFWorld experts: a searching expert that sees only what the policy sees (the demonstrator of
the default policy), and the generator's walkthroughs played as demonstrations.

A planner's walkthrough knows where every object lies and goes straight to it; a policy that sees
only the text of the game cannot know that, so cloning such walkthroughs teaches guesses (the
first default policy learned from them won 0 of 24 held-out games). This expert searches
instead, and decides each action from exactly the inputs of a prompt — the goal, the current
observation, the admissible commands and the last two turns — so a model that reads its prompt
can in principle imitate it perfectly:

* **find**: not holding anything, it takes a target object when one is listed here (never from a
  receptacle of the goal's type in a pick-two game: that is where the first one was put), opens a
  closed receptacle, and otherwise goes on searching: to a receptacle drawn at random, weighted
  by whether its type can hold the object at all (ALFRED's compatibility table, which the game
  generator places objects by), never one of the last two it went to. Memoryless beyond two
  turns, the search revisits places and sometimes runs out of steps: the expert wins most games,
  not all, and its choices of where to look are the random, credit-bearing part of a trajectory;
* **process**: holding the object, it cleans, heats or cools it at the first sink basin,
  microwave or fridge (going there first), unless the last two turns show that it already did;
* **look**: holding the object, it uses a lamp listed here, else searches for one the same way;
* **place**: it goes to the first receptacle of the goal's type, opens it when closed, and moves
  the object there.

:func:`expert_action` is a pure function of its inputs and its random generator.

:func:`expert_demonstration` instead plays a generated game's stored walkthrough (the planner's
route, which knows where every object lies) on the engine and records what the agent saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.replay.envs.alfworld.games import GeneratedGame
from creditaudit.replay.envs.alfworld.scenes import LAMP_HOLDERS, LAMP_TYPES
from creditaudit.replay.envs.base import Task

__all__ = ["Goal", "parse_goal", "search_weights", "expert_action", "UNLIKELY_WEIGHT", "ExpertStep",
           "expert_demonstration", "expert_demonstrations"]

# The goal templates of alfworld/gen/goal_library.py (one pair per task type).
_GOALS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("look", r"^look at (?P<obj>\w+) under the (?P<toggle>\w+)"),
        ("look", r"^examine the (?P<obj>\w+) with the (?P<toggle>\w+)"),
        ("clean", r"^put a clean (?P<obj>\w+) in (?P<recep>\w+)"),
        ("clean", r"^clean some (?P<obj>\w+) and put it in (?P<recep>\w+)"),
        ("heat", r"^put a hot (?P<obj>\w+) in (?P<recep>\w+)"),
        ("heat", r"^heat some (?P<obj>\w+) and put it in (?P<recep>\w+)"),
        ("cool", r"^put a cool (?P<obj>\w+) in (?P<recep>\w+)"),
        ("cool", r"^cool some (?P<obj>\w+) and put it in (?P<recep>\w+)"),
        ("two", r"^put two (?P<obj>\w+) in (?P<recep>\w+)"),
        ("two", r"^find two (?P<obj>\w+) and put them in (?P<recep>\w+)"),
        ("simple", r"^put a (?P<obj>\w+) in (?P<recep>\w+)"),
        ("simple", r"^put some (?P<obj>\w+) on (?P<recep>\w+)"),
    )
)
_APPLIANCE = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
_DONE_TEXT = {"clean": "you clean the ", "heat": "you heat the ", "cool": "you cool the "}


@dataclass(frozen=True)
class Goal:
    """A parsed ALFWorld goal: ``kind`` in {simple, look, clean, heat, cool, two}, the object type,
    the target receptacle type (``None`` for look) and the lamp type (look only)."""

    kind: str
    obj: str
    recep: str | None = None
    toggle: str | None = None


def parse_goal(goal: str) -> Goal | None:
    """Parse an ALFWorld goal sentence; ``None`` when it matches no template.

    Examples
    --------
    >>> parse_goal("put a clean apple in fridge.")
    Goal(kind='clean', obj='apple', recep='fridge', toggle=None)
    >>> parse_goal("Your task is to: look at keychain under the floorlamp.")
    Goal(kind='look', obj='keychain', recep=None, toggle='floorlamp')
    """
    text = goal.strip().lower()
    if "your task is to:" in text:
        text = text.split("your task is to:", 1)[1].strip()
    for kind, pattern in _GOALS:
        m = pattern.match(text)
        if m:
            d = m.groupdict()
            return Goal(kind, d["obj"], d.get("recep"), d.get("toggle"))
    return None


@lru_cache(maxsize=1)
def _holders() -> dict[str, frozenset[str]]:
    """Lower-case object type -> receptacle types that can hold it (ALFRED's compatibility
    table, which the game generator places objects by; lamps by the generator's lamp holders)."""
    import alfworld.gen.constants as constants

    out: dict[str, set[str]] = {}
    for recep, objs in constants.VAL_RECEPTACLE_OBJECTS.items():
        for obj in objs:
            out.setdefault(obj.lower(), set()).add(recep.lower())
    for lamp in LAMP_TYPES:
        out[lamp.lower()] = {h.lower() for h in LAMP_HOLDERS}
    return {k: frozenset(v) for k, v in out.items()}


@lru_cache(maxsize=1)
def _static_receptacles() -> frozenset[str]:
    """Lower-case types of the receptacles that are places (never carried)."""
    import alfworld.gen.constants as constants

    return frozenset(r.lower() for r in set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES))


UNLIKELY_WEIGHT = 0.05
"""Search weight of a receptacle that cannot hold the object sought (against 1 for one that can)."""


def search_weights(places: Sequence[str], looking_for: str, recent: Collection[str] = ()) -> list[float]:
    """Unnormalised probabilities of going to each of ``places`` next while searching for an
    object of type ``looking_for``: 1 for a receptacle type that can hold it, a small
    :data:`UNLIKELY_WEIGHT` otherwise, 0 for the places visited in the last two turns (when
    anything else is left).

    Examples
    --------
    >>> search_weights(["cabinet 1", "fridge 1", "toilet 1"], "egg", recent={"fridge 1"})
    [0.05, 0.0, 0.05]
    """
    holders = _holders().get(looking_for, frozenset())
    weights = [1.0 if _kind_of(p) in holders else UNLIKELY_WEIGHT for p in places]
    masked = [0.0 if p in recent else w for p, w in zip(places, weights)]
    return masked if any(masked) else weights


def _search_choice(places: Sequence[str], looking_for: str, recent: Collection[str], rng: Any) -> str:
    weights = search_weights(places, looking_for, recent)
    if rng is None:
        return places[max(range(len(places)), key=lambda i: (weights[i], -i))]
    total = sum(weights)
    return places[int(rng.choice(len(places), p=[w / total for w in weights]))]


def _kind_of(name: str) -> str:
    """``"cabinet 3"`` -> ``"cabinet"``."""
    return name.rsplit(" ", 1)[0] if name.rsplit(" ", 1)[-1].isdigit() else name


def expert_action(goal: str, observation: str, admissible: Sequence[str],
                  history: Sequence[tuple[str, str]] = (), rng: Any = None) -> str:
    """The searching expert's action: a pure function of what a prompt shows.

    Parameters
    ----------
    goal : str
        The task sentence.
    observation : str
        The current observation.
    admissible : sequence of str
        The admissible commands (the ``go to`` list fixes the search order).
    history : sequence of (observation, action)
        Earlier turns, oldest first; only the last two are read (the default prompt shows two).
    rng : numpy.random.Generator, optional
        Draws the next receptacle of a search (see :func:`search_weights`); without one the
        search takes the most likely receptacle, first in list order.

    Returns
    -------
    str
        An admissible command (``look`` when the goal cannot be parsed or nothing applies).

    Examples
    --------
    >>> adm = ["go to cabinet 1", "go to cabinet 2", "go to fridge 1", "look"]
    >>> expert_action("put a cool egg in cabinet.", "You are in the middle of a room.", adm)
    'go to fridge 1'
    >>> expert_action("put a cool egg in cabinet.", "You arrive at cabinet 1.",
    ...               ["go to cabinet 2", "go to fridge 1", "examine cabinet 1", "open cabinet 1"])
    'open cabinet 1'
    """
    parsed = parse_goal(goal)
    adm = list(admissible)
    if parsed is None:
        return "look"
    places = [a[len("go to "):] for a in adm if a.startswith("go to ")]
    if not places:
        return "look"
    # The engine lists every receptacle but the current one as a ``go to``; ``examine`` names the
    # current one and the object in hand (if any).
    examined = [a[len("examine "):] for a in adm if a.startswith("examine ")]
    fixed = _static_receptacles()
    here = next((x for x in examined if x not in places and _kind_of(x) in fixed), None)
    held = next((x for x in examined if _kind_of(x) not in fixed), None) or next(
        (a[len("move "):].split(" to ", 1)[0] for a in adm if a.startswith("move ")), None)
    recent = {a[len("go to "):] for _, a in list(history)[-2:] if a.startswith("go to ")}

    def go_next() -> str:
        looking_for = parsed.toggle if held is not None and parsed.kind == "look" else parsed.obj
        return f"go to {_search_choice(places, looking_for, recent, rng)}"

    def first_of(kind: str | None) -> str | None:
        return next((p for p in places if _kind_of(p) == kind), None)

    if held is None:
        # find: take a target object here, open a closed receptacle, else search on
        excluded = parsed.kind == "two" and here is not None and _kind_of(here) == parsed.recep
        if here is not None and not excluded:
            takes = [a for a in adm if a.startswith("take ") and a.endswith(f" from {here}")
                     and _kind_of(a[len("take "):].split(" from ", 1)[0]) == parsed.obj]
            if takes:
                return takes[0]
        if here is not None and f"open {here}" in adm:
            return f"open {here}"
        return go_next()

    if _kind_of(held) != parsed.obj:
        # holding something else (a policy's mistake): put it down here
        return f"move {held} to {here}" if here is not None else go_next()

    if parsed.kind == "look":
        uses = [a for a in adm if a.startswith(f"use {parsed.toggle} ")]
        return uses[0] if uses else go_next()

    if parsed.kind in _APPLIANCE:
        window = [observation.lower()] + [o.lower() for o, _ in list(history)[-2:]]
        acted = [a for _, a in list(history)[-2:]]
        done = any(_DONE_TEXT[parsed.kind] in text for text in window) or any(
            a.startswith(f"{parsed.kind} {held} with ") for a in acted
        )
        if not done:
            ops = [a for a in adm if a.startswith(f"{parsed.kind} {held} with ")]
            if ops:
                return ops[0]
            appliance = first_of(_APPLIANCE[parsed.kind])
            if appliance is not None:
                return f"go to {appliance}"

    if here is not None and _kind_of(here) == parsed.recep:
        if f"move {held} to {here}" in adm:
            return f"move {held} to {here}"
        if f"open {here}" in adm:
            return f"open {here}"
    target = first_of(parsed.recep)
    return f"go to {target}" if target is not None else go_next()


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
    from creditaudit.replay.envs.alfworld.env import AlfworldEnv

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
    from creditaudit.replay.envs.alfworld.env import AlfworldEnv

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
