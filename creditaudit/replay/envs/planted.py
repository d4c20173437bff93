"""Planted-effect environment: a small text maze whose true per-step causal effects are known.

Purpose: validate the executed-replay estimator (does it recover the planted pivotal steps and
their sizes?) and unit-test everything downstream in milliseconds.

The world
    A task is a chain of ``n_steps`` rooms. In every room the agent chooses one of ``n_actions``
    doors (``"open the red door"``, ...). Each room has a *kind*, drawn per task from its seed:

    - ``pivotal`` (P): ``n_good`` of the doors are good; a good door adds one to the agent's
      score, another door adds nothing.
    - ``absorbing`` (A): ``n_trap`` of the doors are traps; a trap ends the episode at once with
      outcome 0 (absorbing failure); the others lead on.
    - ``noop`` (N): every door leads to the same next state.

    After the last room the outcome is 1 when the score reaches ``threshold`` (the smallest
    integer >= ``threshold_frac`` x the number of pivotal rooms), else 0. An inadmissible command
    gets "Nothing happens." and uses a step; reaching ``horizon`` steps before the exit is
    outcome 0.

Determinism and seeded stochasticity
    The environment is deterministic: the next state is a function of (task, state, action).
    Its only "randomness" -- a ``slip`` at pivotal rooms, where a door's effect is flipped -- is
    a hash of ``(task seed, room, score, door)``, so a replay from a restored state repeats
    exactly, while outcomes still vary across rollouts because the *policy* samples different
    doors. Executed replay re-runs the policy with different seeds from the same state; the
    spread of outcomes is the policy's, never the environment's.

Known effects
    Under the reference policy -- uniform over the admissible doors, memoryless -- the value of a
    state ``V(s)`` (probability of outcome 1) is computed exactly by dynamic programming over
    ``(room, score, steps)``, ``Q(s, a) = V(next(s, a))``, and the planted effect of an action is

        true_effect(s, a) = Q(s, a) - mean_{a' admissible, a' != a} Q(s, a')

    which is the expectation of ``A_replay`` (factual arm minus alternative arm, see docs/design.md §3)
    when the policy is the reference policy: the alternative arm then draws the other doors
    uniformly, so each enters the arm's mean with equal weight. Effects are exactly 0 at noop
    rooms and after the outcome is decided, nonzero at pivotal and absorbing rooms where the
    outcome is still open.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_hash
from creditaudit.replay.envs.base import EpisodeOver, Observation, SnapshotError, StepResult, Task, signature_hash
from creditaudit.replay.envs.plugin import Capabilities, EnvironmentPlugin, PromptText

__all__ = ["PlantedEnv", "PlantedLayout", "PlantedState", "PlantedSnapshot", "make_planted", "planted_environment", "PLANTED_PROMPT", "KINDS"]

KINDS = {"P": "pivotal", "A": "absorbing", "N": "noop"}
_COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple", "grey", "brown", "pink", "gold")
_ORDINAL = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _unit(*parts: Any) -> float:
    """A number in [0, 1) from hashing ``parts`` (the environment's seeded stochasticity)."""
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class PlantedLayout:
    """The rooms of one task: kind, door labels, good doors, trap doors (door indices)."""

    kinds: str
    doors: tuple[tuple[str, ...], ...]
    good: tuple[frozenset[int], ...]
    traps: tuple[frozenset[int], ...]
    threshold: int


@dataclass(frozen=True)
class PlantedState:
    """The full state: room index, score, steps taken, fallen in a trap, finished."""

    room: int
    score: int
    steps: int
    failed: bool = False


@dataclass(frozen=True, eq=False)
class PlantedSnapshot:
    """A state of one :class:`PlantedEnv` episode (valid in that instance until its next reset)."""

    owner: str
    generation: int
    signature: str
    state: PlantedState
    text: str


class PlantedEnv:
    """The planted-effect environment (implements the ``Environment`` contract).

    Parameters
    ----------
    horizon : int, default 30
        Maximum steps per episode (must be >= ``n_steps`` for the exit to be reachable).
    n_steps : int, default 8
        Rooms per task.
    n_actions : int, default 5
        Doors per room (>= 5 leaves K = 4 alternatives to every action).
    n_good : int, default 3
        Good doors in a pivotal room.
    n_trap : int, default 1
        Trap doors in an absorbing room.
    p_pivotal, p_absorbing : float, default 0.5 and 0.15
        Probability that a room is pivotal / absorbing (the rest are noop), per task seed.
    kinds : str, default ""
        A fixed pattern of ``P``/``A``/``N`` (one letter per room) used for every task instead of
        drawing kinds; its length sets ``n_steps``.
    threshold_frac : float, default 0.5
        Share of pivotal rooms that must be passed through a good door.
    slip : float, default 0.0
        Probability (by hash of task seed, room, score, door) that a door's effect in a pivotal
        room is flipped.

    Examples
    --------
    >>> env = PlantedEnv(kinds="PNA", n_actions=5)
    >>> task = env.make_tasks(1, rng=np.random.default_rng(0))[0]
    >>> obs = env.reset(task)
    >>> len(obs.admissible)
    5
    >>> abs(sum(env.true_effect(a) for a in obs.admissible)) < 1e-12  # effects are centred
    True
    """

    name = "planted"

    def __init__(self, horizon: int = 30, n_steps: int = 8, n_actions: int = 5, n_good: int = 3, n_trap: int = 1,
                 p_pivotal: float = 0.5, p_absorbing: float = 0.15, kinds: str = "", threshold_frac: float = 0.5,
                 slip: float = 0.0):
        if kinds:
            if not re.fullmatch(r"[PAN]+", kinds):
                raise InputError(f"`kinds` must be letters P (pivotal), A (absorbing), N (noop); got {kinds!r}")
            n_steps = len(kinds)
        checks = [
            (isinstance(horizon, int) and horizon >= 1, "`horizon` must be an integer >= 1"),
            (isinstance(n_steps, int) and 1 <= n_steps <= 200, "`n_steps` must be an integer in [1, 200]"),
            (isinstance(n_actions, int) and 2 <= n_actions <= len(_COLOURS),
             f"`n_actions` must be an integer in [2, {len(_COLOURS)}]"),
            (isinstance(n_good, int) and 1 <= n_good < n_actions, "`n_good` must be an integer in [1, n_actions)"),
            (isinstance(n_trap, int) and 1 <= n_trap < n_actions, "`n_trap` must be an integer in [1, n_actions)"),
            (0.0 <= p_pivotal <= 1.0 and 0.0 <= p_absorbing <= 1.0 and p_pivotal + p_absorbing <= 1.0,
             "`p_pivotal` and `p_absorbing` must be probabilities summing to at most 1"),
            (0.0 <= threshold_frac <= 1.0, "`threshold_frac` must be in [0, 1]"),
            (0.0 <= slip <= 1.0, "`slip` must be in [0, 1]"),
        ]
        for ok, message in checks:
            if not ok:
                raise InputError(message)
        self.horizon = horizon
        self.config = {
            "n_steps": n_steps, "n_actions": n_actions, "n_good": n_good, "n_trap": n_trap,
            "p_pivotal": float(p_pivotal), "p_absorbing": float(p_absorbing), "kinds": kinds,
            "threshold_frac": float(threshold_frac), "slip": float(slip),
        }
        self.config_hash = canonical_hash({"env": self.name, "config": self.config})
        self._task: Task | None = None
        self._layout: PlantedLayout | None = None
        self._seed = 0
        self._state = PlantedState(0, 0, 0)
        self._text = ""
        self._generation = 0
        self._closed = False
        # owner token of this instance's snapshots: id() can be reused after garbage collection and
        # a counter repeats across worker processes
        self._serial = uuid.uuid4().hex

    # ------------------------------------------------------------------ tasks

    def make_tasks(self, n: int, *, rng: np.random.Generator) -> list[Task]:
        """``n`` tasks (seeds drawn from ``rng``) for this environment's configuration."""
        if not isinstance(n, int) or n < 1:
            raise InputError(f"`n` must be a positive integer, got {n!r}")
        seeds = rng.integers(0, 2**53, size=n)  # JSON-safe integers (canonical hashing)
        return [self.task(int(s)) for s in seeds]

    def task(self, seed: int) -> Task:
        """The task of ``seed`` under this configuration (its id hashes the configuration and seed)."""
        if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**53:
            raise InputError(f"`seed` must be an integer in [0, 2**53), got {seed!r}")
        params = {"seed": int(seed), "config_hash": self.config_hash}
        task_id = canonical_hash({"env": self.name, "config": self.config, "seed": int(seed)})
        return Task(task_id=task_id, task_type="planted", source=self.name, params=params)

    def layout(self, seed: int) -> PlantedLayout:
        """The rooms of the task with ``seed`` (a pure function of the configuration and seed)."""
        return _layout(seed, **self.config)

    # ------------------------------------------------------------------ contract

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task`` (made by :meth:`task` / :meth:`make_tasks`)."""
        self._check_open()
        if not isinstance(task, Task):
            raise TypeError(f"reset() takes a Task, got {type(task).__name__}")
        if task.params.get("config_hash") != self.config_hash or "seed" not in task.params:
            raise InputError(
                f"task {task.task_id[:12]}… was not made for this planted configuration; "
                "make tasks with PlantedEnv.make_tasks on an environment built with the same parameters"
            )
        self._task = task
        self._seed = int(task.params["seed"])
        self._layout = self.layout(self._seed)
        self._state = PlantedState(0, 0, 0)
        self._generation += 1
        self._text = self._room_text(intro=True)
        return Observation(goal=self.goal, text=self._text, admissible=self.admissible_actions())

    @property
    def goal(self) -> str:
        """The task sentence of the current task."""
        self._check_started()
        lay = self._layout
        return f"pass through at least {lay.threshold} lucky doors and reach the exit"

    def step(self, action: str) -> StepResult:
        """Open a door; an inadmissible command gets "Nothing happens." and uses a step."""
        self._check_started()
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._is_done(self._state):
            raise EpisodeOver("the episode is over; call reset() or restore() before step()")
        state = self._state
        admissible = self.admissible_actions()
        command = action.strip()
        if command in admissible:
            door = self._door_index(state.room, command)
            colour = self._layout.doors[state.room][door]
            nxt = self._next(state, door)
            if nxt.failed:
                text = f"You open the {colour} door. The floor gives way beneath you. You lose."
            elif nxt.room >= self.config["n_steps"]:
                verdict = ("You found enough lucky doors. You win!" if nxt.score >= self._layout.threshold
                           else "You did not find enough lucky doors. You lose.")
                text = f"You open the {colour} door and step out of the maze. {verdict}"
            else:
                text = f"You open the {colour} door. " + self._room_text(room=nxt.room)
        else:
            nxt = PlantedState(state.room, state.score, state.steps + 1, state.failed)
            text = "Nothing happens."
        self._state = nxt
        self._text = text
        done = self._is_done(nxt)
        won = self._won(nxt)
        truncated = done and not nxt.failed and nxt.room < self.config["n_steps"]
        return StepResult(text=text, admissible=self.admissible_actions(), done=done, won=won, truncated=truncated)

    def admissible_actions(self) -> tuple[str, ...]:
        """The doors of the current room (none once the episode is over), sorted."""
        self._check_started()
        return self._admissible(self._state)

    def state_signature(self) -> str:
        """SHA-256 of task id, room, score, steps, trap flag and horizon -- the whole state."""
        self._check_started()
        s = self._state
        return signature_hash({"env": self.name, "task": self._task.task_id, "room": s.room, "score": s.score,
                               "steps": s.steps, "failed": s.failed, "horizon": self.horizon})

    def snapshot(self) -> PlantedSnapshot:
        """The current state, restorable in this instance until its next reset."""
        self._check_started()
        return PlantedSnapshot(owner=self._serial, generation=self._generation, signature=self.state_signature(),
                               state=self._state, text=self._text)

    def restore(self, snapshot: PlantedSnapshot) -> None:
        """Return to ``snapshot`` (refused unless taken in this instance's current episode)."""
        self._check_started()
        if not isinstance(snapshot, PlantedSnapshot):
            raise SnapshotError(f"not a PlantedSnapshot: {type(snapshot).__name__}")
        if snapshot.owner != self._serial:
            raise SnapshotError("this snapshot was taken in another PlantedEnv instance; snapshots do not travel")
        if snapshot.generation != self._generation:
            raise SnapshotError("this snapshot was taken before the last reset(); take a new one after reset")
        self._state = snapshot.state
        self._text = snapshot.text
        if self.state_signature() != snapshot.signature:
            raise SnapshotError("restored state signature differs from the snapshot's")

    def close(self) -> None:
        self._closed = True
        self._task = None

    # ------------------------------------------------------------------ ground truth

    @property
    def state(self) -> PlantedState:
        """The current state (immutable)."""
        self._check_started()
        return self._state

    @property
    def won(self) -> bool:
        return self._won(self._state)

    @property
    def done(self) -> bool:
        return self._is_done(self._state)

    def room_kind(self, room: int | None = None) -> str:
        """``"pivotal"``, ``"absorbing"`` or ``"noop"`` of a room (the current one by default)."""
        self._check_started()
        room = self._state.room if room is None else room
        return KINDS[self._layout.kinds[room]]

    def reference_probs(self, state: PlantedState | None = None) -> dict[str, float]:
        """The reference policy at a state: uniform over the admissible doors."""
        self._check_started()
        actions = self._admissible(self._state if state is None else state)
        return {a: 1.0 / len(actions) for a in actions}

    def value(self, state: PlantedState | None = None) -> float:
        """Exact probability of outcome 1 from ``state`` under the reference policy."""
        self._check_started()
        s = self._state if state is None else state
        return _value(self._seed, self.horizon, _config_key(self.config), s.room, s.score, s.steps, s.failed)

    def q_value(self, action: str, state: PlantedState | None = None) -> float:
        """Exact probability of outcome 1 after ``action`` in ``state``, then the reference policy."""
        self._check_started()
        s = self._state if state is None else state
        if self._is_done(s):
            raise EpisodeOver("no action is taken in a terminal state")
        command = action.strip()
        if command in self._admissible(s):
            nxt = self._next(s, self._door_index(s.room, command))
        else:
            nxt = PlantedState(s.room, s.score, s.steps + 1, s.failed)
        return self.value(nxt)

    def true_effect(self, action: str, state: PlantedState | None = None) -> float:
        """``Q(s, a) - mean_{a' admissible, a' != a} Q(s, a')`` under the reference policy.

        This is the expectation of ``A_replay`` (docs/design.md §3) for the reference policy: its
        alternative arm draws the other admissible doors uniformly.
        """
        self._check_started()
        s = self._state if state is None else state
        others = [a for a in self._admissible(s) if a != action.strip()]
        if not others:
            return 0.0
        return self.q_value(action, s) - sum(self.q_value(a, s) for a in others) / len(others)

    def true_effects(self, actions: list[str]) -> list[float]:
        """Planted effects along a trajectory from the task's start (does not move the episode)."""
        self._check_started()
        state = PlantedState(0, 0, 0)
        effects = []
        for action in actions:
            if self._is_done(state):
                break
            effects.append(self.true_effect(action, state))
            command = action.strip()
            if command in self._admissible(state):
                state = self._next(state, self._door_index(state.room, command))
            else:
                state = PlantedState(state.room, state.score, state.steps + 1, state.failed)
        return effects

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this PlantedEnv is closed")

    def _check_started(self) -> None:
        self._check_open()
        if self._task is None:
            raise RuntimeError("call reset(task) before using the environment")

    def _admissible(self, state: PlantedState) -> tuple[str, ...]:
        if self._is_done(state):
            return ()
        return tuple(sorted(f"open the {c} door" for c in self._layout.doors[state.room]))

    def _door_index(self, room: int, command: str) -> int:
        colour = command[len("open the "):-len(" door")]
        return self._layout.doors[room].index(colour)

    def _next(self, state: PlantedState, door: int) -> PlantedState:
        return _transition(self._layout, self._seed, self.config["slip"], state, door)

    def _is_done(self, state: PlantedState) -> bool:
        return state.failed or state.room >= self.config["n_steps"] or state.steps >= self.horizon

    def _won(self, state: PlantedState) -> bool:
        return (not state.failed and state.room >= self.config["n_steps"]
                and state.score >= self._layout.threshold)

    def _room_text(self, *, intro: bool = False, room: int | None = None) -> str:
        room = self._state.room if room is None else room
        doors = self._layout.doors[room]
        listing = ", ".join(f"a {c} door" for c in doors[:-1]) + f", and a {doors[-1]} door"
        ordinal = _ORDINAL[room] if room < len(_ORDINAL) else f"{room + 1}th"
        body = f"You are in the {ordinal} room of {self.config['n_steps']}. You see {listing}."
        if intro:
            return f"-= A maze of doors =-\n\n{body}\n\nYour task is to: {self.goal}."
        return body


def _config_key(config: dict[str, Any]) -> tuple:
    return tuple(sorted(config.items()))


@lru_cache(maxsize=4096)
def _layout_cached(seed: int, key: tuple) -> PlantedLayout:
    config = dict(key)
    rng = np.random.default_rng(np.random.SeedSequence([seed & (2**32 - 1), seed >> 32, 0x504C414E]))
    n_steps, n_actions = config["n_steps"], config["n_actions"]
    if config["kinds"]:
        kinds = config["kinds"]
    else:
        draws = rng.random(n_steps)
        kinds = "".join("P" if u < config["p_pivotal"] else "A" if u < config["p_pivotal"] + config["p_absorbing"]
                        else "N" for u in draws)
    doors, good, traps = [], [], []
    for _ in range(n_steps):
        colours = tuple(_COLOURS[i] for i in rng.permutation(len(_COLOURS))[:n_actions])
        doors.append(colours)
        good.append(frozenset(int(i) for i in rng.permutation(n_actions)[:config["n_good"]]))
        traps.append(frozenset(int(i) for i in rng.permutation(n_actions)[:config["n_trap"]]))
    n_pivotal = kinds.count("P")
    threshold = math.ceil(config["threshold_frac"] * n_pivotal - 1e-12)
    return PlantedLayout(kinds=kinds, doors=tuple(doors), good=tuple(good), traps=tuple(traps), threshold=threshold)


def _layout(seed: int, **config: Any) -> PlantedLayout:
    return _layout_cached(int(seed), _config_key(config))


def _transition(layout: PlantedLayout, seed: int, slip: float, state: PlantedState, door: int) -> PlantedState:
    kind = layout.kinds[state.room]
    score, failed = state.score, False
    if kind == "P":
        gain = door in layout.good[state.room]
        if slip > 0.0 and _unit(seed, state.room, state.score, door) < slip:
            gain = not gain  # seeded by (task, state, action): replays repeat it exactly
        score += int(gain)
    elif kind == "A":
        failed = door in layout.traps[state.room]
    return PlantedState(state.room + 1, score, state.steps + 1, failed)


@lru_cache(maxsize=1_000_000)
def _value(seed: int, horizon: int, key: tuple, room: int, score: int, steps: int, failed: bool) -> float:
    config = dict(key)
    layout = _layout_cached(seed, key)
    if failed:
        return 0.0
    if room >= config["n_steps"]:
        return 1.0 if score >= layout.threshold else 0.0
    if steps >= horizon:
        return 0.0
    state = PlantedState(room, score, steps, failed)
    total = 0.0
    n = config["n_actions"]
    for door in range(n):
        nxt = _transition(layout, seed, config["slip"], state, door)
        total += _value(seed, horizon, key, nxt.room, nxt.score, nxt.steps, nxt.failed)
    return total / n


#: The planted environment's words in prompts. They are the words every planted run has carried so
#: far (the ALFWorld framing), kept so that planted runs, the test policy trained on them and every
#: number pinned from them stay byte-identical; the environment's own framing would be
#: ``PromptText(setting="a maze of doors", commands="A command opens one door: open the <colour> door.")``.
PLANTED_PROMPT = PromptText(setting="a household text game")


def planted_environment(horizon: int = 30, n_steps: int = 8, n_actions: int = 5, n_good: int = 3, n_trap: int = 1,
                        p_pivotal: float = 0.5, p_absorbing: float = 0.15, kinds: str = "",
                        threshold_frac: float = 0.5, slip: float = 0.0,
                        native_snapshots: bool = True) -> EnvironmentPlugin:
    """The planted environment's plugin (entry point ``planted`` of ``creditaudit.environments``).

    The arguments are :class:`PlantedEnv`'s; ``native_snapshots=False`` hides its snapshots, so
    replay restores states by prefix replay (:mod:`~creditaudit.replay.envs.prefix`) -- the same
    tables, at the cost of a reset and a replayed prefix per restore.
    """
    args = dict(n_steps=n_steps, n_actions=n_actions, n_good=n_good, n_trap=n_trap, p_pivotal=p_pivotal,
                p_absorbing=p_absorbing, kinds=kinds, threshold_frac=threshold_frac, slip=slip)
    PlantedEnv(horizon=horizon, **args)  # the environment's own checks (cheap: no engine)
    return EnvironmentPlugin(
        name="planted", horizon=horizon, factory=partial(PlantedEnv, horizon=horizon, **args),
        capabilities=Capabilities(native_snapshot=bool(native_snapshots), admissible=True, state_signature=True,
                                  generates_tasks=True),
        prompt=PLANTED_PROMPT, args={**args, "native_snapshots": bool(native_snapshots)})


def make_planted(horizon: int = 30, **kwargs: Any) -> PlantedEnv:
    """A :class:`PlantedEnv` (the planted plugin's instance: ``planted_environment(...).make()``)."""
    return PlantedEnv(horizon=horizon, **kwargs)
