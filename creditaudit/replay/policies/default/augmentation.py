"""Data augmentation of behaviour-cloning examples: consistent renaming of object names and instance
numbers (:func:`rename_entities`), and hindsight relabelling of the goal (:func:`relabel_goal`),
both from what a prompt shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from creditaudit.replay.policies.default.demonstrations import BCExample, DemoState
from creditaudit.replay.policies.prompts import PromptBuilder

__all__ = ["entity_names", "rename_entities", "renamer", "renamed_state", "relabel_goal"]

def entity_names() -> tuple[str, ...]:
    """Lower-case names of ALFWorld's portable objects that are not receptacles
    (``alfworld/gen/constants.py``): the names an augmented example may rename."""
    import alfworld.gen.constants as constants

    receptacles = {n.lower() for n in constants.RECEPTACLES}
    names = {n.lower() for n in constants.OBJECTS} - receptacles
    return tuple(sorted(names))


_TOKEN = re.compile(r"\w+")


def rename_entities(prompt: str, action: str, rng: Any, names: Sequence[str], max_number: int = 0) -> tuple[str, str]:
    """Rename the entities of one example consistently (a data augmentation).

    Every name of ``names`` in the example is mapped to a name drawn without replacement from
    ``names``, and (when ``max_number`` > 0) every instance number 1..``max_number`` to a random
    permutation of them, identically in the prompt and the action. The example keeps its
    structure (which listed command the expert chose, which object it names) while the surface
    names change, so the network must read the names from the prompt instead of memorising them.

    Examples
    --------
    >>> import numpy as np
    >>> p, a = rename_entities("you see a mug 1. action:", "take mug 1 from desk 2",
    ...                        np.random.default_rng(0), ["mug", "desk", "apple", "sofa"])
    >>> a.split()[0], a.split()[2] == p.split()[4].rstrip(".")
    ('take', True)
    """
    sub = renamer(prompt + " " + action, rng, names, max_number)
    return sub(prompt), sub(action)


def renamer(text: str, rng: Any, names: Sequence[str], max_number: int = 0) -> Callable[[str], str]:
    """The renaming of :func:`rename_entities` drawn for the names found in ``text``, as a
    function to apply to every text of one example."""
    name_set = set(names)
    present = sorted({w.lower() for w in _TOKEN.findall(text)})
    found = [w for w in present if w in name_set]
    drawn = rng.choice(len(names), size=len(found), replace=False) if found else []
    mapping = {w: names[int(i)] for w, i in zip(found, drawn)}
    if max_number > 0:
        perm = rng.permutation(max_number) + 1
        mapping.update({str(n): str(int(perm[n - 1])) for n in range(1, max_number + 1)})

    def sub(text: str) -> str:
        return _TOKEN.sub(lambda m: mapping.get(m.group(0).lower(), m.group(0)), text)

    return sub


_KIND_GOALS = {"simple": "put a {obj} in {recep}.", "clean": "put a clean {obj} in {recep}.",
               "heat": "put a hot {obj} in {recep}.", "cool": "put a cool {obj} in {recep}."}
_TAKE_COMMAND = re.compile(r"^take (?P<obj>\S+) \d+ from ")


def relabel_goal(example: BCExample, rng: Any, names: Sequence[str], *, absent_share: float = 0.5,
                 expert: Callable[..., str] | None = None) -> BCExample | None:
    """The example's state under another goal, labelled by the expert.

    The searching expert is a pure function of what a prompt shows, so any state of a
    demonstration can be labelled under a different goal without touching the engine (hindsight
    relabelling of the goal, as in HER):

    * holding nothing, the new goal names another object that lies here (the label becomes
      ``take`` it) or, for a ``take`` example with probability ``absent_share``, an object that is
      nowhere in sight (the label becomes a search step);
    * holding the object, the new goal names, half of the time, another task kind (``put a hot
      ...``: another appliance, or none), otherwise another receptacle: half of the time the kind
      of place the agent stands at (the label becomes ``move`` it here), else another kind in the
      room (go there).

    Minimal pairs of this kind (same room, same view, the goal alone decides) teach the comparison
    of the goal with what is listed, which the demonstrations alone show a few dozen times.

    Returns ``None`` when the example has no :class:`DemoState`, is not a target (a mistake), its
    goal does not parse, or no other goal fits (nothing else in view; a ``look`` goal in hand).

    Examples
    --------
    >>> import numpy as np
    >>> state = DemoState("put a mug in desk.", "On the shelf 1, you see a pen 1, and a mug 2.",
    ...                   ("go to desk 1", "take mug 2 from shelf 1", "take pen 1 from shelf 1",
    ...                    "examine shelf 1"), (), 2)
    >>> ex = BCExample("...", "take mug 2 from shelf 1", True, state)
    >>> new = relabel_goal(ex, np.random.default_rng(0), ["mug", "pen", "apple"], absent_share=0.0)
    >>> new.state.goal, new.action
    ('put a pen in desk.', 'take pen 1 from shelf 1')
    """
    from creditaudit.replay.envs.alfworld.expert import parse_goal

    state = example.state
    if state is None or not example.target:
        return None
    parsed = parse_goal(state.goal)
    if parsed is None:
        return None
    if any(a.startswith("move ") for a in state.admissible):
        if parsed.recep is None:
            return None
        # Holding the object: the goal's receptacle is another kind of place in this room.
        kinds = sorted({a[len("go to "):].rsplit(" ", 1)[0] for a in state.admissible if a.startswith("go to ")}
                       - {parsed.recep})
        here = sorted({a.rsplit(" to ", 1)[1].rsplit(" ", 1)[0] for a in state.admissible if a.startswith("move ")}
                      - {parsed.recep})
        if not kinds and not here:
            return None
        # Half of the time the place the agent stands at (the label becomes ``move`` it here).
        pool = here if here and (not kinds or rng.random() < 0.5) else kinds
        new_recep = pool[int(rng.integers(len(pool)))]
        if parsed.kind in _KIND_GOALS and rng.random() < 0.5:
            # Another task kind (the appliance to use changes, or none is needed).
            kind = [k for k in _KIND_GOALS if k != parsed.kind][int(rng.integers(len(_KIND_GOALS) - 1))]
            goal = _KIND_GOALS[kind].format(obj=parsed.obj, recep=parsed.recep)
        else:
            goal = re.sub(rf"\b{re.escape(parsed.recep)}\b", new_recep, state.goal, count=1, flags=re.IGNORECASE)
        return _relabelled(state, goal, rng, expert)
    present = sorted({m.group("obj") for a in state.admissible if (m := _TAKE_COMMAND.match(a))} - {parsed.obj})
    seen = {w.lower() for w in _TOKEN.findall(state.observation)}
    if example.action.startswith("take ") and rng.random() < absent_share:
        present = [n for n in names if n not in seen and n != parsed.obj]
    if not present:
        return None
    new_obj = present[int(rng.integers(len(present)))]
    goal = re.sub(rf"\b{re.escape(parsed.obj)}\b", new_obj, state.goal, count=1, flags=re.IGNORECASE)
    return _relabelled(state, goal, rng, expert)


def _relabelled(state: DemoState, goal: str, rng: Any, expert: Callable[..., str] | None) -> BCExample:
    from creditaudit.replay.envs.alfworld.env import ALFWORLD_PROMPT
    from creditaudit.replay.envs.alfworld.expert import expert_action

    label = (expert or expert_action)(goal, state.observation, state.admissible, state.history, rng)
    builder = PromptBuilder(None, history_length=state.history_length, instruction=ALFWORLD_PROMPT.instruction)
    new_state = DemoState(goal, state.observation, state.admissible, state.history, state.history_length)
    return BCExample(builder.build(goal, state.observation, state.admissible, state.history), label, True, new_state)


def renamed_state(state: DemoState, sub: Callable[[str], str]) -> DemoState:
    """``state`` with ``sub`` (a :func:`renamer`) applied to every text in it."""
    return DemoState(sub(state.goal), sub(state.observation), tuple(sub(a) for a in state.admissible),
                     tuple((sub(o), sub(a)) for o, a in state.history), state.history_length)
