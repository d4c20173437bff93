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
    :class:`~creditaudit.replay.env.StepResult`. The previous command's text is not part of the
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
    textworld derives every observation and every admissible command from grammar templates. It
    parses each template string with a TatSu (PEG) parser on every use, and deep-copies the
    derivation context (entity records and variable bindings) at every symbol: together about
    85% of a step's time. :func:`accelerate_textworld` (applied when an engine is loaded) keeps
    the parsed form of each distinct string and hands out deep copies of it, and copies a
    context's binding tables without cloning the entity records in them (the grammar only reads
    them), and keeps what ``PddlEnv._gather_infos`` derives after each step (the admissible
    commands' text) per planner state, which replay revisits often. The engine's output is
    unchanged: a test plays the same commands, restores and revisits with and without it and
    compares every observation, admissible list and state signature.

Reset
    Resetting the game that is already loaded restores the state recorded right after the
    engine's own first reset of it (a few milliseconds instead of ~0.4-1.5 s) unless
    ``reuse_engine=False``; the determinism checks compare both paths.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_bytes
from creditaudit.registry import registry
from creditaudit.replay.env import (
    EpisodeOver,
    Observation,
    SnapshotError,
    StepResult,
    Task,
    signature_hash,
)

__all__ = ["AlfworldEnv", "AlfworldSnapshot", "accelerate_textworld", "make_alfworld", "read_game_file",
           "textworld_shortcuts"]

#: Distinct template strings kept parsed per parser (a generated game uses a few thousand).
PARSE_MEMO_SIZE = 1 << 16
_SHORTCUTS = {"enabled": True}
#: What ``PddlEnv._gather_infos`` computes from the planner state alone (its memo's content).
_STATE_INFOS = ("command_templates", "won", "lost", "_entity_infos", "_facts", "facts", "_valid_actions",
                "_valid_commands", "admissible_commands")


def accelerate_textworld() -> None:
    """Two shortcuts in textworld's text generation that change nothing it produces.

    * Memoised parsers: ``textworld.envs.pddl.textgen`` and ``textworld.logic`` parse strings
      through a module-level ``_parse_and_convert(text, rule_name=...)`` that returns freshly
      built objects the caller then mutates (contexts are attached to the symbols). The memo
      keeps one parsed object per distinct call and returns a deep copy of it, which is what a
      fresh parse returns.
    * ``textgen.copy_context`` deep-copies the ``variables`` (placeholder -> the environment's
      own entity records) and ``mapping`` (placeholder -> logic variable) tables of a derivation
      context at every symbol. The grammar only reads the records and variables, and only ever
      adds entries to a copied table, so copying the tables one level deep is equivalent.

    * ``PddlEnv._gather_infos`` re-derives, after every step, the command text of every
      applicable action through the grammar (most of a step's time). What it computes -- the
      goal test, the fact list, the applicable actions and their commands, and the planner's
      operator table that the next ``apply`` reads -- is a function of the planner state, which
      the planner's state registry names by an id. The memo keeps them per state id, for one
      ``PddlState`` (a load or reset starts a new one), and hands out fresh list copies; what
      belongs to the step (the last action, the move count) is always set anew.

    Idempotent; :func:`textworld_shortcuts` switches all three off (for the equivalence test).
    """
    import textworld.envs.pddl.pddl as pddl
    import textworld.envs.pddl.textgen as textgen

    if not getattr(pddl.PddlEnv._gather_infos, "_creditaudit_memo", False):
        original_gather = pddl.PddlEnv._gather_infos

        def _gather_infos(self: Any, _gather=original_gather) -> None:
            infos = self.request_infos
            if not _SHORTCUTS["enabled"] or infos.policy_commands:  # a replan is not a state function here
                return _gather(self)
            ps = self._pddl_state
            owner, memo = self.__dict__.get("_creditaudit_infos", (None, None))
            if owner is not ps:
                memo = {}
                self._creditaudit_infos = (ps, memo)
            state_id = int(self.downward_lib.get_state_id())
            entry = memo.get(state_id)
            if entry is None:
                _gather(self)
                entry = memo[state_id] = (
                    {k: self.state[k] for k in _STATE_INFOS if k in self.state}, dict(ps._operators),
                )
            else:
                for key, value in entry[0].items():
                    self.state[key] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
                ps._operators = dict(entry[1])
                self.state["last_action"] = None
                self.state["_last_action"] = self._last_action
                if infos.moves:
                    self.state["moves"] = self._moves

        _gather_infos._creditaudit_memo = True  # type: ignore[attr-defined]
        _gather_infos.__wrapped__ = original_gather  # type: ignore[attr-defined]
        pddl.PddlEnv._gather_infos = _gather_infos
    import textworld.logic as logic

    if not getattr(textgen.copy_context, "_creditaudit_shortcut", False):
        original_copy = textgen.copy_context

        def copy_context(context: dict, _copy=original_copy) -> dict:
            if not _SHORTCUTS["enabled"]:
                return _copy(context)
            return {
                "state": context["state"],
                "facts": context["facts"],
                "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]),
                "entity_infos": context["entity_infos"],
            }

        copy_context._creditaudit_shortcut = True  # type: ignore[attr-defined]
        copy_context.__wrapped__ = original_copy  # type: ignore[attr-defined]
        textgen.copy_context = copy_context

    for module in (textgen, logic):
        original = module._parse_and_convert
        if getattr(original, "_creditaudit_memo", False):
            continue

        @functools.lru_cache(maxsize=PARSE_MEMO_SIZE)
        def parsed(args: tuple, kwargs: tuple, _parse=original) -> Any:
            return _parse(*args, **dict(kwargs))

        def memoized(*args: Any, _parse=original, _parsed=parsed, **kwargs: Any) -> Any:
            if not _SHORTCUTS["enabled"]:
                return _parse(*args, **kwargs)
            try:
                key = (args, tuple(sorted(kwargs.items())))
                hash(key)
            except TypeError:  # an unhashable argument: parse as textworld does
                return _parse(*args, **kwargs)
            return copy.deepcopy(_parsed(*key))

        memoized._creditaudit_memo = True  # type: ignore[attr-defined]
        memoized.__wrapped__ = original  # type: ignore[attr-defined]
        module._parse_and_convert = memoized


@contextlib.contextmanager
def textworld_shortcuts(enabled: bool) -> Iterator[None]:
    """Within the block, :func:`accelerate_textworld`'s shortcuts are on or bypassed."""
    previous = _SHORTCUTS["enabled"]
    _SHORTCUTS["enabled"] = bool(enabled)
    try:
        yield
    finally:
        _SHORTCUTS["enabled"] = previous

_REQUIRED_KEYS = ("pddl_domain", "grammar", "pddl_problem")
_GOAL = re.compile(r"Your task is to:\s*(.*?)\s*$", re.S)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def read_game_file(path: str | Path) -> tuple[bytes, dict[str, Any]]:
    """Read and check an ALFWorld game file; return its bytes and parsed JSON.

    Raises
    ------
    InputError
        When the file is missing, unreadable, not JSON, or lacks a field the engine needs; the
        message names the file.
    """
    path = Path(path)
    if not path.name.endswith(".tw-pddl"):
        raise InputError(f"{path}: an ALFWorld game file must end in .tw-pddl (the engine picks its backend by suffix)")
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"game file {path} does not exist; check the task list / data directory") from None
    except OSError as exc:
        raise InputError(f"game file {path} cannot be read ({exc})") from None
    try:
        game = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"game file {path} is corrupt: not JSON ({exc}); regenerate or re-download it") from None
    if not isinstance(game, dict):
        raise InputError(f"game file {path} is corrupt: expected a JSON object")
    missing = [k for k in _REQUIRED_KEYS if not isinstance(game.get(k), str) or not game.get(k)]
    if missing:
        raise InputError(f"game file {path} is corrupt: missing or empty field(s) {', '.join(missing)}")
    return payload, game


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
    A generated game (see :func:`~creditaudit.replay.alfworld_games.generate_games`)::

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
            facts = sorted(a.name for a in atoms if not a.name.startswith("NegatedAtom"))
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


@registry("environment").register("alfworld")
def make_alfworld(horizon: int = 30, reuse_engine: bool = True) -> AlfworldEnv:
    """Registered factory of :class:`AlfworldEnv` (``registry("environment").create("alfworld", ...)``)."""
    return AlfworldEnv(horizon=horizon, reuse_engine=reuse_engine)
