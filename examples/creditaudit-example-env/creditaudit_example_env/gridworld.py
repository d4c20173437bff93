"""Key-and-door gridworld: a small deterministic text game for creditaudit (the environment ``gridworld``).

The world
    A square grid of ``size`` x ``size`` rooms. Each task places three things in distinct rooms,
    drawn from the task's seed: where the agent starts, a key, and a locked door. The goal sentence
    says where the key and the door are. The agent wins by taking the key and then opening the door
    with it; every command uses one step of the horizon, and reaching the horizon loses.

Commands (the admissible ones are listed after every step)
    ``go north`` / ``go south`` / ``go east`` / ``go west``
        Move to the neighbouring room (only the directions that stay inside the grid are listed).
    ``take key``
        Listed in the key's room while the key is still on the floor.
    ``open door``
        Listed in the door's room. Without the key the door stays shut ("The door is locked.") and
        the step is wasted; with the key it opens and the episode is won.
    ``look``
        Describe the room again (always listed; it changes nothing and wastes a step).

    Any other text gets "Nothing happens." and uses a step.

Why steps matter
    Taking the key is necessary, a move towards the key or the door brings the win closer, and a
    move away, a ``look`` or a premature ``open door`` spends a step the horizon may not give back:
    executed replay of a random-ish policy finds nonzero effects at such steps.

Replay
    The game has only ``reset(task)``, ``step(action)`` and ``close()``: no native snapshots and no
    state signature. creditaudit therefore wraps it in prefix replay (a state is restored by
    resetting the task and replaying the action prefix, every observation checked), which is sound
    because the game is deterministic: what ``step`` returns is a function of the task and the
    actions taken since ``reset``.

Examples
--------
>>> import numpy as np
>>> game = GridWorld(size=2)
>>> task = game.make_tasks(1, rng=np.random.default_rng(0))[0]
>>> obs = game.reset(task)
>>> obs.admissible[-1]
'look'
>>> results = [game.step(command) for command in shortest_solution(task)]
>>> results[-1].text, results[-1].won
('You unlock the door with the key and step outside. You win!', True)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from creditaudit.replay.envs import Capabilities, EnvironmentPlugin, Observation, PromptText, StepResult, Task

__all__ = ["GridWorld", "gridworld_environment", "shortest_solution", "PROMPT", "MIN_SIZE", "MAX_SIZE"]

MIN_SIZE, MAX_SIZE = 2, 6
_MOVES = {"north": (-1, 0), "south": (1, 0), "east": (0, 1), "west": (0, -1)}

PROMPT = PromptText(
    setting="a key-and-door gridworld text game",
    commands="Commands are 'go north', 'go south', 'go east', 'go west', 'take key', 'open door' and 'look'; "
             "take the key before opening the door.")


def _room(cell: Sequence[int]) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"


def _min_steps(size: int) -> int:
    """Commands the farthest-apart task needs: two walks across the grid, the take and the open."""
    return 4 * (size - 1) + 2


def _walk(a: Sequence[int], b: Sequence[int]) -> list[str]:
    rows = ["go south" if b[0] > a[0] else "go north"] * abs(b[0] - a[0])
    cols = ["go east" if b[1] > a[1] else "go west"] * abs(b[1] - a[1])
    return rows + cols


def shortest_solution(task: Task) -> list[str]:
    """A shortest winning command sequence for ``task`` (rows first, then columns)."""
    p = task.params
    return _walk(p["start"], p["key"]) + ["take key"] + _walk(p["key"], p["door"]) + ["open door"]


class GridWorld:
    """The game (one instance per episode runner; ``reset`` / ``step`` / ``close`` only).

    Parameters
    ----------
    size : int
        Rooms per side of the grid, in ``[MIN_SIZE, MAX_SIZE]``.
    """

    name = "gridworld"

    def __init__(self, size: int) -> None:
        _check_size(size)
        self.size = size
        self._task: Task | None = None
        self._done = True

    # ------------------------------------------------------------------ tasks

    def make_tasks(self, n: int, *, rng: np.random.Generator) -> list[Task]:
        """``n`` tasks: start, key and door in three distinct rooms drawn from seeds of ``rng``."""
        tasks = []
        for seed in rng.integers(0, 2**31, size=n):
            cells = np.random.default_rng(int(seed)).choice(self.size * self.size, size=3, replace=False)
            start, key, door = ([int(c) // self.size, int(c) % self.size] for c in cells)
            params = {"size": self.size, "seed": int(seed), "start": start, "key": key, "door": door}
            digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
            tasks.append(Task(task_id=f"gridworld-{digest[:16]}", task_type="gridworld", source="gridworld",
                              params=params))
        return tasks

    # ------------------------------------------------------------------ the game

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task`` (made by :meth:`make_tasks` for this grid size)."""
        if task.params.get("size") != self.size:
            raise ValueError(f"task {task.task_id} was made for a grid of size {task.params.get('size')}, "
                             f"not {self.size}")
        self._task = task
        self._pos = tuple(task.params["start"])
        self._key = tuple(task.params["key"])
        self._door = tuple(task.params["door"])
        self._carrying = False
        self._done = False
        goal = (f"take the key in the room at {_room(self._key)}, then open the door in the room at "
                f"{_room(self._door)}")
        text = f"You are in a grid of {self.size} by {self.size} rooms. " + self._describe()
        return Observation(goal=goal, text=text, admissible=self._admissible())

    def step(self, action: str) -> StepResult:
        """Execute one command (see the module docstring)."""
        if self._task is None or self._done:
            raise RuntimeError("the episode is over or not started; call reset(task)")
        command = " ".join(action.split())
        won = False
        if command not in self._admissible():
            text = "Nothing happens."
        elif command.startswith("go "):
            dr, dc = _MOVES[command[3:]]
            self._pos = (self._pos[0] + dr, self._pos[1] + dc)
            text = f"You go {command[3:]}. " + self._describe()
        elif command == "take key":
            self._carrying = True
            text = "You pick up the key. " + self._describe()
        elif command == "open door" and not self._carrying:
            text = "The door is locked. You need the key. " + self._describe()
        elif command == "open door":
            text = "You unlock the door with the key and step outside. You win!"
            won = self._done = True
        else:  # look
            text = self._describe()
        return StepResult(text=text, admissible=() if won else self._admissible(), done=won, won=won)

    def close(self) -> None:
        self._task = None

    def expert_command(self) -> str:
        """The next command of a shortest solution from the current state (for demonstrations)."""
        if self._task is None or self._done:
            raise RuntimeError("the episode is over or not started; call reset(task)")
        if not self._carrying:
            return (_walk(self._pos, self._key) + ["take key"])[0]
        return (_walk(self._pos, self._door) + ["open door"])[0]

    # ------------------------------------------------------------------ helpers

    def _admissible(self) -> tuple[str, ...]:
        moves = [f"go {d}" for d, (dr, dc) in _MOVES.items()
                 if 0 <= self._pos[0] + dr < self.size and 0 <= self._pos[1] + dc < self.size]
        if self._pos == self._key and not self._carrying:
            moves.append("take key")
        if self._pos == self._door:
            moves.append("open door")
        return tuple(moves) + ("look",)

    def _describe(self) -> str:
        parts = [f"You are in the room at {_room(self._pos)}."]
        if self._pos == self._key and not self._carrying:
            parts.append("A key lies on the floor.")
        if self._pos == self._door:
            parts.append("There is a locked door here.")
        parts.append("You carry the key." if self._carrying else "Your hands are empty.")
        return " ".join(parts)


def _check_size(size: Any) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"gridworld: `size` must be an integer in [{MIN_SIZE}, {MAX_SIZE}], got {size!r}")


def gridworld_environment(horizon: int = 12, size: int = 3) -> EnvironmentPlugin:
    """The factory creditaudit calls (entry point ``gridworld`` in group ``creditaudit.environments``).

    Parameters
    ----------
    horizon : int
        Maximum steps per episode (passed by creditaudit from the protocol's ``environment.horizon``).
    size : int, default 3
        Rooms per side of the grid, in ``[2, 6]``; the horizon must leave room for the farthest-apart
        task's solution (``4 * (size - 1) + 2`` commands).

    Raises
    ------
    ValueError
        When ``size`` is out of range or the horizon is too short for it.
    """
    _check_size(size)
    if horizon < _min_steps(size):
        raise ValueError(f"gridworld: a horizon of {horizon} is too short for `size` {size}: a task may need "
                         f"{_min_steps(size)} commands (4 * (size - 1) + 2)")
    return EnvironmentPlugin(
        name="gridworld", horizon=horizon, factory=lambda: GridWorld(size=size),
        capabilities=Capabilities(native_snapshot=False, admissible=True, state_signature=False,
                                  generates_tasks=True),
        prompt=PROMPT, args={"size": size})
