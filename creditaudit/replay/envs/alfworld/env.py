"""ALFWorld on the real ``alfworld`` + ``textworld`` PDDL engine, as ALFWorld plays its text games.

The engine is built exactly as ALFWorld's ``AlfredTWEnv`` builds it:
``textworld.gym.register_game(game_file, EnvInfos(won=True, admissible_commands=True, ...),
wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])``; the game file is ALFWorld's JSON
(``pddl_domain``, ``grammar``, ``pddl_problem``, ``solvable``), played with the package grammar
(``move X to Y``). A later game is loaded into the same wrapper chain, as the gym environment's
own ``reset`` does, so one instance keeps one planner library.

State signature
    SHA-256 (canonical JSON) of: the environment name, the task id (the game file's hash: it fixes
    the goal and the grammar), the planner's current fact set (every true ground atom, sorted),
    the step count and the horizon. The observation after a command is a function of the facts
    and the command (feedback and admissible commands are derived from the facts by the grammar),
    whether the game is won is a function of the facts and the goal, and ``done`` at the horizon
    is a function of the step count -- so ``(signature, action)`` determines the next
    :class:`~creditaudit.replay.envs.base.StepResult`. The previous command's text is not part of the
    state: nothing the engine shows depends on it. The signature is conservative: bookkeeping
    facts such as ``checked`` (set by ``look`` / ``examine``) are included although no text
    depends on them, so a cache keyed on it never confuses two states, at the price of a few
    misses.

Snapshots
    The planner library behind textworld's PDDL environment keeps a registry of visited states
    and exposes ``get_state_id`` / ``set_state_id``; a snapshot stores that id together with
    copies of the Python-side state (the ``PddlState`` facts, variable and operator tables, the
    environment's current and previous game states, its last action and move counter, and this
    adapter's counters). ``copy.deepcopy``, ``pickle`` and ``PddlEnv.copy()`` do not work on this
    engine. Any load replaces the planner's registry, so a snapshot is refused after ``reset``.
    A snapshot holds the planner's operator records of the state (about 1 KB per admissible
    command): keep the ones still needed, not one per step of every rollout. The planner's
    registry keeps every state visited while a game stays loaded (a few hundred bytes each).

Text generation
    textworld parses grammar templates and copies derivation contexts at every symbol (most of a
    step's time); :func:`~creditaudit.replay.envs.alfworld.textworld_accel.accelerate_textworld`
    (applied when an engine is loaded) memoises that work without changing any output.

Reset
    Resetting the game that is already loaded restores the state recorded right after the
    engine's own first reset of it (a few milliseconds instead of ~0.4-1.5 s) unless
    ``reuse_engine=False``; the determinism checks compare both paths.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_bytes
from creditaudit.replay.envs.alfworld.game_files import read_game_file
from creditaudit.replay.envs.alfworld.textworld_accel import accelerate_textworld
from creditaudit.replay.envs.plugin import Capabilities, EnvironmentPlugin, PromptText
from creditaudit.replay.envs.base import (
    EpisodeOver,
    Observation,
    SnapshotError,
    StepResult,
    Task,
    signature_hash,
)

__all__ = ["ALFWORLD_PROMPT", "AlfworldEnv", "AlfworldSnapshot", "alfworld_environment", "make_alfworld"]

_GOAL = re.compile(r"Your task is to:\s*(.*?)\s*$", re.S)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, eq=False)
class AlfworldSnapshot:
    """A state of one :class:`AlfworldEnv` episode (valid only in that instance, until its next reset)."""

    owner: str
    generation: int
    signature: str
    state_id: int
    facts: dict[Any, frozenset[Any]]
    vars_by_name: dict[str, Any]
    vars_by_type: dict[Any, frozenset[Any]]
    var_counts: dict[str, int]
    operators: dict[int, Any]
    game_state: Any
    prev_state: Any
    last_action: Any
    moves: int
    steps: int
    done: bool
    won: bool
    text: str
    admissible: tuple[str, ...]


class AlfworldEnv:
    """ALFWorld text game on the real PDDL engine (implements the ``Environment`` contract).

    Parameters
    ----------
    horizon : int, default 30
        Maximum steps per episode; reaching it ends the episode with outcome 0.
    reuse_engine : bool, default True
        Reset an already loaded game by restoring its initial state instead of re-running the
        engine's reset (identical results, checked by the determinism tests).

    Examples
    --------
    A generated game (see :func:`~creditaudit.replay.envs.alfworld.games.generate_games`)::

        env = AlfworldEnv(horizon=30)
        obs = env.reset(game.task)          # obs.goal, obs.text, obs.admissible
        snap = env.snapshot()
        result = env.step("go to fridge 1")  # result.text, .admissible, .done, .won
        env.restore(snap)                   # back to the opening state, signature checked
    """

    name = "alfworld"

    def __init__(self, horizon: int = 30, *, reuse_engine: bool = True):
        if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
            raise InputError(f"`horizon` must be a positive integer, got {horizon!r}")
        self.horizon = horizon
        self.reuse_engine = bool(reuse_engine)
        self._gym: Any = None
        self._chain: Any = None  # Filter(AlfredInfos(AlfredDemangler(GenericEnvironment(PddlEnv))))
        self._pddl: Any = None
        self._loaded: tuple[str, str] | None = None  # (path, sha256) in the engine
        self._initial: AlfworldSnapshot | None = None
        self._task: Task | None = None
        self._generation = 0
        self._facts_by_state: dict[int, list[str]] = {}
        self._signature_by_state: dict[tuple[int, int, str, int], str] = {}
        self._steps = 0
        self._done = False
        self._won = False
        self._text = ""
        self._admissible: tuple[str, ...] = ()
        self._goal = ""
        self._closed = False
        # owner token of this instance's snapshots: id() can be reused after garbage collection and
        # a counter repeats across worker processes
        self._serial = uuid.uuid4().hex

    # ------------------------------------------------------------------ engine plumbing

    def _request_infos(self) -> Any:
        import textworld

        return textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])

    def _load(self, path: str) -> tuple[str, dict[str, Any]]:
        """Load ``path`` into the engine and run the engine's reset; return (text, infos)."""
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        accelerate_textworld()
        self._facts_by_state.clear()  # any load replaces the planner's state registry
        self._signature_by_state.clear()
        # fast_downward's translator overwrites sys.argv on every PDDL translation.
        argv = list(sys.argv)
        try:
            if self._gym is None:
                env_id = textworld.gym.register_game(
                    path, self._request_infos(), max_episode_steps=0, asynchronous=False,
                    wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
                try:
                    self._gym = textworld.gym.make(env_id)
                finally:
                    textworld.gym.registry.pop(env_id, None)  # one entry per instance, not per game
                text, infos = self._gym.reset()
                self._chain = self._gym.batch_env.envs[0]
                self._pddl = self._chain.unwrapped
            else:
                # what the gym environment's reset does for a new game: load, then reset
                self._chain.load(path)
                text, infos = self._chain.reset()
        except InputError:
            raise
        except Exception as exc:
            self._loaded = None
            raise InputError(
                f"game file {path}: the ALFWorld engine cannot load it ({type(exc).__name__}: {exc}); "
                "regenerate the game or check the file"
            ) from exc
        finally:
            sys.argv[:] = argv
        return text, infos

    def _planner_facts(self) -> list[str]:
        """The planner's true atoms, sorted. Memoised by the planner's state id, which names one
        state of its registry until the next load (a load clears the memo)."""
        from textworld.envs.pddl.logic import Atom

        lib = self._pddl.downward_lib
        state_id = int(lib.get_state_id())
        facts = self._facts_by_state.get(state_id)
        if facts is None:
            atoms = (Atom * lib.get_state_size())()
            lib.get_state(atoms)
            names = [a.name for a in atoms]  # (a ctypes decode per read: read each once)
            facts = sorted(n for n in names if not n.startswith("NegatedAtom"))
            self._facts_by_state[state_id] = facts
        return list(facts)

    def _capture(self) -> AlfworldSnapshot:
        pddl = self._pddl
        ps = pddl._pddl_state
        return AlfworldSnapshot(
            owner=self._serial,
            generation=self._generation,
            signature=self.state_signature(),
            state_id=int(pddl.downward_lib.get_state_id()),
            facts={k: frozenset(v) for k, v in ps._facts.items()},
            vars_by_name=dict(ps._vars_by_name),
            vars_by_type={k: frozenset(v) for k, v in ps._vars_by_type.items()},
            var_counts=dict(ps._var_counts),
            operators=dict(getattr(ps, "_operators", {})),
            game_state=pddl.state,
            prev_state=pddl.prev_state,
            last_action=pddl._last_action,
            moves=pddl._moves,
            steps=self._steps,
            done=self._done,
            won=self._won,
            text=self._text,
            admissible=self._admissible,
        )

    def _apply(self, snap: AlfworldSnapshot) -> None:
        pddl = self._pddl
        ps = pddl._pddl_state
        pddl.downward_lib.set_state_id(snap.state_id)
        # the engine mutates these containers in place, so each restore gets fresh copies
        ps._facts = defaultdict(set, {k: set(v) for k, v in snap.facts.items()})
        ps._vars_by_name = dict(snap.vars_by_name)
        ps._vars_by_type = defaultdict(set, {k: set(v) for k, v in snap.vars_by_type.items()})
        ps._var_counts = Counter(snap.var_counts)
        ps._operators = dict(snap.operators)
        pddl.state = snap.game_state
        pddl.prev_state = snap.prev_state
        pddl._last_action = snap.last_action
        pddl._moves = snap.moves
        self._steps = snap.steps
        self._done = snap.done
        self._won = snap.won
        self._text = snap.text
        self._admissible = snap.admissible

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this AlfworldEnv is closed")

    def _check_started(self) -> None:
        self._check_open()
        if self._task is None:
            raise RuntimeError("call reset(task) before using the environment")

    # ------------------------------------------------------------------ contract

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task`` (``task.source`` is the game file).

        Raises
        ------
        InputError
            When the game file is missing or corrupt, the engine cannot load it, or its bytes no
            longer match ``task.task_id`` (when that is a SHA-256).
        """
        self._check_open()
        if not isinstance(task, Task):
            raise TypeError(f"reset() takes a Task, got {type(task).__name__}")
        path = str(task.source)
        payload, _ = read_game_file(path)
        sha = sha256_bytes(payload)
        if _HEX64.match(task.task_id) and task.task_id != sha:
            raise InputError(
                f"game file {path} changed: its SHA-256 is {sha[:12]}…, the task id is {task.task_id[:12]}…; "
                "restore the file or regenerate the task list"
            )
        self._generation += 1  # every earlier snapshot is now refused
        if self.reuse_engine and self._loaded == (path, sha) and self._initial is not None:
            self._apply(self._initial)
            if self.state_signature() != self._initial.signature:
                raise SnapshotError(f"{path}: restoring the initial state did not give the initial signature")
        else:
            # until the load succeeds there is no usable episode
            self._initial, self._loaded, self._task = None, None, None
            text, infos = self._load(path)
            self._loaded = (path, sha)
            self._task = task
            self._steps, self._done, self._won = 0, False, bool(infos["won"])
            self._text = text
            self._admissible = tuple(infos["admissible_commands"])
            self._initial = self._capture()
        self._task = task
        match = _GOAL.search(self._text)
        self._goal = match.group(1) if match else ""
        return Observation(goal=self._goal, text=self._text, admissible=self._admissible)

    def step(self, action: str) -> StepResult:
        """Execute one command; an inadmissible command (or ``""``) gets the engine's "Nothing happens."."""
        self._check_started()
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._done:
            raise EpisodeOver("the episode is over; call reset() or restore() before step()")
        text, _score, engine_done, infos = self._chain.step(action)
        self._steps += 1
        self._won = bool(infos["won"])
        self._text = text
        self._admissible = tuple(infos["admissible_commands"])
        done = self._won or bool(engine_done)
        truncated = False
        if not done and self._steps >= self.horizon:
            done, truncated = True, True
        self._done = done
        return StepResult(text=text, admissible=self._admissible, done=done, won=self._won, truncated=truncated)

    def admissible_actions(self) -> tuple[str, ...]:
        """Admissible commands of the current state (sorted, as the engine lists them)."""
        self._check_started()
        return self._admissible

    def state_signature(self) -> str:
        """SHA-256 of the full state (see the module docstring for what it covers); memoised by
        the planner's state id, the step count, the task id and the horizon until the next load."""
        self._check_started()
        key = (int(self._pddl.downward_lib.get_state_id()), self._steps, self._task.task_id, self.horizon)
        signature = self._signature_by_state.get(key)
        if signature is None:
            signature = self._signature_by_state[key] = signature_hash({
                "env": self.name,
                "task": self._task.task_id,
                "facts": self._planner_facts(),
                "steps": self._steps,
                "horizon": self.horizon,
            })
        return signature

    def snapshot(self) -> AlfworldSnapshot:
        """The current state, restorable in this instance until its next reset."""
        self._check_started()
        return self._capture()

    def restore(self, snapshot: AlfworldSnapshot) -> None:
        """Return to ``snapshot``; refused unless it was taken in this instance's current episode.

        Raises
        ------
        SnapshotError
            For a snapshot of another instance or of an earlier episode, or when the restored
            state's signature differs from the recorded one.
        """
        self._check_started()
        if not isinstance(snapshot, AlfworldSnapshot):
            raise SnapshotError(f"not an AlfworldSnapshot: {type(snapshot).__name__}")
        if snapshot.owner != self._serial:
            raise SnapshotError("this snapshot was taken in another AlfworldEnv instance; snapshots do not travel")
        if snapshot.generation != self._generation:
            raise SnapshotError(
                "this snapshot was taken before the last reset(); the engine's state registry was replaced, "
                "take a new snapshot after reset"
            )
        self._apply(snapshot)
        restored = self.state_signature()
        if restored != snapshot.signature:
            raise SnapshotError(
                f"restored state signature {restored[:12]}… differs from the snapshot's {snapshot.signature[:12]}…"
            )

    def close(self) -> None:
        """Release the engine; the instance cannot be used afterwards."""
        if self._gym is not None:
            self._gym.close()
        self._gym = self._chain = self._pddl = None
        self._initial = None
        self._task = None
        self._closed = True

    # ------------------------------------------------------------------ extras

    @property
    def won(self) -> bool:
        """Whether the goal is reached in the current state."""
        return self._won

    @property
    def done(self) -> bool:
        """Whether the current episode is over."""
        return self._done

    @property
    def steps(self) -> int:
        """Steps taken in the current episode."""
        return self._steps

    @property
    def task(self) -> Task | None:
        """The task of the current episode."""
        return self._task

    @property
    def goal(self) -> str:
        """The task sentence of the current game."""
        return self._goal

    @property
    def text(self) -> str:
        """The latest observation text."""
        return self._text

    def entity_names(self) -> dict[str, str]:
        """Display names of the loaded game's entities, keyed by the engine's (lowercased) ids."""
        self._check_started()
        return {key: (info.name or "").strip() for key, info in self._pddl._entity_infos.items()}

    def __enter__(self) -> "AlfworldEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: ALFWorld's words in prompts: exactly the text every earlier ALFWorld prompt carried (prompt
#: hashes of existing runs stay valid).
ALFWORLD_PROMPT = PromptText(setting="a household text game")


def alfworld_environment(horizon: int = 30, reuse_engine: bool = True) -> EnvironmentPlugin:
    """ALFWorld's plugin (entry point ``alfworld`` of ``creditaudit.environments``): native
    snapshots, admissible commands and a full state signature; its tasks are game files (generated
    after the freeze, or pinned from the user's data directory). No engine starts here."""
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise InputError(f"`horizon` must be a positive integer, got {horizon!r}")
    return EnvironmentPlugin(
        name="alfworld", horizon=horizon, factory=partial(AlfworldEnv, horizon=horizon, reuse_engine=reuse_engine),
        capabilities=Capabilities(native_snapshot=True, admissible=True, state_signature=True, generates_tasks=False,
                                  pddl_games=True),
        prompt=ALFWORLD_PROMPT, args={"reuse_engine": bool(reuse_engine)})


def make_alfworld(horizon: int = 30, reuse_engine: bool = True) -> AlfworldEnv:
    """An :class:`AlfworldEnv` (the plugin's instance: ``alfworld_environment(...).make()``)."""
    return AlfworldEnv(horizon=horizon, reuse_engine=reuse_engine)
