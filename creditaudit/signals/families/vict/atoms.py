"""VICT's verifier instrumentation of ALFWorld: atoms, aggregator, dependencies, evidence, commits.

ALFWorld's verifier is the PDDL goal of the game, checked by the engine (``won``). This module
exposes it as VICT's artifacts for the six ALFRED task types, from the game's PDDL problem:

Atoms ``Z_x`` (one family each; four-valued status ``sat | unsat | unk | viol``)
    ``seen``        an object of the goal type O has been shown to the agent (evidence from the
                    observation text: its display name appears); ``unk`` until then -- "not yet
                    observed" is unknown, never ``unsat``.
    ``held``        the agent holds (look: now; other types: has held) an O object (``holds(agent1, o)``).
    ``transformed`` (clean / heat / cool) the focal O object is ``isclean`` / ``ishot`` / ``iscool``.
    ``placed``      the focal O object is in a receptacle of the goal type R (``inreceptacle``).
    ``placed2``     (pick two) a second O object is in the same R receptacle.
    ``lamp_on``     (look) a lamp of the goal type is toggled and the agent is at its location.

    The *focal* object binds the goal's existential variable: the O object satisfying the most
    goal atoms at the final state (ties: engine id order). ``viol`` marks a committed error: an O
    object moved into R without its transform (``transformed``), or an O object moved into a
    receptacle not of type R / a non-O object moved into R (``placed``).

Aggregator ``F_x``
    The conjunction of the goal atoms at the final state (``viol`` and ``unk`` count as not sat):
    pick ``placed``; clean/heat/cool ``transformed & placed``; pick two ``placed & placed2``; look
    ``held & lamp_on``. Conformance (:func:`conformance`) checks it against the engine's ``won``.

Dependencies ``D_x``
    ``held <- seen``, ``transformed <- held``, ``placed <- held``, ``placed2 <- placed``.

Evidence map ``M_x``
    Each atom's PDDL facts (``holds``, ``isclean``/``ishot``/``iscool``, ``inreceptacle``,
    ``istoggled`` + ``atlocation``); ``seen`` maps to the observation text.

Commit predicates ``C_x``
    ``move X to Y`` (the put): it finalises ``placed`` / ``placed2`` and ``transformed``; ``use``
    a lamp finalises ``lamp_on`` (look).

Witness edges (:func:`witness_edges`) come from the diff of consecutive states: ``write`` (an atom
turns sat), ``reveal`` (``seen`` turns sat), ``commit`` (a commit action whose scope holds the
atom) and ``violation`` (an atom turns viol, or a commit finalises an atom that is not sat).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "STATUSES",
    "INSTRUMENTED_TYPES",
    "Instrumentation",
    "Trace",
    "Edge",
    "instrument",
    "run_trace",
    "witness_edges",
    "mutations",
    "conformance",
    "ConformanceResult",
    "annotate",
    "read_game",
]

STATUSES = ("sat", "unsat", "unk", "viol")
INSTRUMENTED_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                      "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
_TRANSFORM = {"pick_clean_then_place_in_recep": ("isclean", "clean"),
              "pick_heat_then_place_in_recep": ("ishot", "heat"),
              "pick_cool_then_place_in_recep": ("iscool", "cool")}
_LAMPS = ("floorlamp", "desklamp")
_FACT = re.compile(r"^Atom (\w[\w-]*)\((.*)\)$")
_MOVE = re.compile(r"^move (.+?) to (.+)$")


@dataclass(frozen=True)
class Instrumentation:
    """The VICT artifacts of one game: atoms, goal atoms (aggregator), dependencies, types."""

    task_type: str
    obj_type: str
    recep_type: str | None
    transform: str | None
    object_types: dict[str, str]
    recep_types: dict[str, str]
    atoms: tuple[str, ...]
    goal_atoms: tuple[str, ...]
    depends: dict[str, tuple[str, ...]]
    evidence: dict[str, tuple[str, ...]]

    def objects(self) -> list[str]:
        """Engine ids of the O objects."""
        return sorted(o for o, t in self.object_types.items() if t == self.obj_type)

    def is_target_recep(self, r: str) -> bool:
        return self.recep_types.get(r) == self.recep_type

    def aggregate(self, z: dict[str, str]) -> int:
        """``F_x``: 1 when every goal atom is sat."""
        return int(all(z.get(a) == "sat" for a in self.goal_atoms))

    def dependents(self, atom: str) -> set[str]:
        """Atoms that (transitively) depend on ``atom``."""
        out, frontier = set(), [atom]
        while frontier:
            a = frontier.pop()
            for b, pre in self.depends.items():
                if a in pre and b not in out:
                    out.add(b)
                    frontier.append(b)
        return out

    def prerequisites(self, atom: str) -> set[str]:
        out, frontier = set(), [atom]
        while frontier:
            for b in self.depends.get(frontier.pop(), ()):
                if b not in out:
                    out.add(b)
                    frontier.append(b)
        return out


def _types(problem: str, kind: str) -> dict[str, str]:
    return {name.lower(): t[:-4].lower() for name, t in re.findall(rf"\({kind} (\S+) (\w+Type)\)", problem)}


def instrument(task_type: str, game: dict[str, Any]) -> Instrumentation | None:
    """The instrumentation of a game (its parsed JSON), or None for a task type or goal it has none for."""
    if task_type not in INSTRUMENTED_TYPES:
        return None
    problem = str(game.get("pddl_problem", ""))
    start = problem.find("(:goal")
    if start < 0:
        return None
    goal = problem[start:]
    otypes = [t.lower() for t in re.findall(r"\(objectType \?\w+ (\w+)Type\)", goal)]
    rtypes = [t.lower() for t in re.findall(r"\(receptacleType \?\w+ (\w+)Type\)", goal)]
    objs = [t for t in otypes if t not in _LAMPS]
    if not objs:
        return None
    obj_type = objs[0]
    recep_type = rtypes[0] if rtypes else None
    transform = _TRANSFORM.get(task_type, (None,))[0]
    if task_type == "look_at_obj_in_light":
        if not any(t in _LAMPS for t in otypes):
            return None
        atoms, goal_atoms = ("seen", "held", "lamp_on"), ("held", "lamp_on")
        depends = {"held": ("seen",)}
        obj_types = _types(problem, "objectType")
        lamp = next(t for t in otypes if t in _LAMPS)
        obj_types = {o: ("__lamp__" if t == lamp else t) for o, t in obj_types.items()}
    else:
        if recep_type is None:
            return None
        obj_types = _types(problem, "objectType")
        if task_type == "pick_two_obj_and_place":
            atoms, goal_atoms = ("seen", "held", "placed", "placed2"), ("placed", "placed2")
            depends = {"held": ("seen",), "placed": ("held",), "placed2": ("placed",)}
        elif transform:
            if f"(is{transform[2:].capitalize()} " not in goal and f"({transform} " not in goal.lower():
                return None
            atoms, goal_atoms = ("seen", "held", "transformed", "placed"), ("transformed", "placed")
            depends = {"held": ("seen",), "transformed": ("held",), "placed": ("held",)}
        else:
            atoms, goal_atoms = ("seen", "held", "placed"), ("placed",)
            depends = {"held": ("seen",), "placed": ("held",)}
    evidence = {"seen": ("observation",), "held": ("holds",), "transformed": (transform or "",),
                "placed": ("inreceptacle",), "placed2": ("inreceptacle",), "lamp_on": ("istoggled", "atlocation")}
    return Instrumentation(task_type, obj_type, recep_type, transform, obj_types,
                           _types(problem, "receptacleType"), atoms, goal_atoms, depends,
                           {a: evidence[a] for a in atoms})


# ------------------------------------------------------------------------------ traces


def _parse(facts: Sequence[str]) -> dict[str, set[tuple[str, ...]]]:
    out: dict[str, set[tuple[str, ...]]] = {}
    for f in facts:
        m = _FACT.match(f)
        if m:
            out.setdefault(m.group(1), set()).add(tuple(a.strip() for a in m.group(2).split(",")) if m.group(2) else ())
    return out


@dataclass
class Trace:
    """One trajectory executed on the engine: facts and text of every state, actions, outcome."""

    actions: list[str]
    facts: list[dict[str, set[tuple[str, ...]]]]
    texts: list[str]
    signatures: list[str]
    won: bool
    names: dict[str, str]
    statuses: list[dict[str, str]] = field(default_factory=list)
    focal: str | None = None

    @property
    def final(self) -> dict[str, str]:
        return self.statuses[-1]


def run_trace(env: Any, task: Any, actions: Sequence[str]) -> Trace:
    """Execute ``actions`` from ``env.reset(task)`` (stopping at the end of the episode) and record
    the planner facts and the text of every state ``s_0..s_n``."""
    obs = env.reset(task)
    facts, texts, sigs = [_parse(env._planner_facts())], [obs.text], [env.state_signature()]
    done_actions, won = [], False
    for a in actions:
        r = env.step(a)
        done_actions.append(a)
        facts.append(_parse(env._planner_facts()))
        texts.append(r.text)
        won = r.won
        if r.done:
            break
        sigs.append(env.state_signature())
    return Trace(done_actions, facts, texts, sigs, bool(won), dict(env.entity_names()))


def _count_in_r(inst: Instrumentation, f: dict) -> dict[str, list[str]]:
    by_r: dict[str, list[str]] = {}
    objs = set(inst.objects())
    for o, r in f.get("inreceptacle", ()):
        if o in objs and inst.is_target_recep(r):
            by_r.setdefault(r, []).append(o)
    return by_r


def _goal_score(inst: Instrumentation, f: dict, o: str) -> int:
    s = int(any(x == o and inst.is_target_recep(r) for x, r in f.get("inreceptacle", ())))
    if inst.transform:
        s += int((o,) in f.get(inst.transform, ()))
    s += int(("agent1", o) in f.get("holds", ()))
    return s


def annotate(inst: Instrumentation, trace: Trace) -> Trace:
    """Fill ``trace.statuses`` (one assignment per state) and ``trace.focal``."""
    objs = inst.objects()
    final = trace.facts[-1]
    trace.focal = max(objs, key=lambda o: (_goal_score(inst, final, o), [-ord(c) for c in o])) if objs else None
    names = {o: trace.names.get(o, "").lower() for o in objs}
    seen, ever_held, viol = False, False, set()
    statuses = []
    for k, f in enumerate(trace.facts):
        z: dict[str, str] = {}
        text = trace.texts[k].lower()
        holds = {o for (_, o) in f.get("holds", ())}
        shown = any(n and re.search(rf"\b{re.escape(n)}\b", text) for n in names.values())
        seen = seen or shown or bool(holds & set(objs))
        z["seen"] = "sat" if seen else "unk"
        ever_held = ever_held or bool(holds & set(objs))
        if inst.task_type == "look_at_obj_in_light":
            z["held"] = "sat" if holds & set(objs) else "unsat"  # a goal atom: held now
        else:
            z["held"] = "sat" if ever_held else "unsat"  # a prerequisite: has been held
        if k > 0:  # committed errors of the action that led here
            viol |= _violations(inst, trace, k)
        if "transformed" in inst.atoms:
            z["transformed"] = "sat" if (trace.focal,) in f.get(inst.transform, ()) else (
                "viol" if "transformed" in viol else "unsat")
        if "placed" in inst.atoms:
            if inst.task_type == "pick_two_obj_and_place":
                best = max((len(v) for v in _count_in_r(inst, f).values()), default=0)
                z["placed"] = "sat" if best >= 1 else ("viol" if "placed" in viol else "unsat")
                z["placed2"] = "sat" if best >= 2 else "unsat"
            else:
                z["placed"] = "sat" if any(o == trace.focal and inst.is_target_recep(r)
                                           for o, r in f.get("inreceptacle", ())) else (
                    "viol" if "placed" in viol else "unsat")
        if "lamp_on" in inst.atoms:
            lamps = [o for o, t in inst.object_types.items() if t == "__lamp__"]
            here = {l for (a, l) in f.get("atlocation", ()) if a == "agent1"}
            located = f.get("objectatlocation", ())
            on = any((lamp,) in f.get("istoggled", ()) and any(x == lamp and loc in here for x, loc in located)
                     for lamp in lamps)
            z["lamp_on"] = "sat" if on else "unsat"
        statuses.append(z)
    trace.statuses = statuses
    return trace


def _move_of(inst: Instrumentation, trace: Trace, k: int) -> tuple[str, str] | None:
    """The (object id, receptacle id) an action ``move X to Y`` at turn ``k - 1`` really moved, from the
    fact diff between ``s_{k-1}`` and ``s_k``."""
    m = _MOVE.match(trace.actions[k - 1].strip())
    if not m:
        return None
    added = trace.facts[k].get("inreceptacle", set()) - trace.facts[k - 1].get("inreceptacle", set())
    return next(iter(sorted(added)), None)


def _violations(inst: Instrumentation, trace: Trace, k: int) -> set[str]:
    mv = _move_of(inst, trace, k)
    if mv is None or inst.recep_type is None:
        return set()
    o, r = mv
    objs = set(inst.objects())
    out = set()
    if o in objs and not inst.is_target_recep(r):
        out.add("placed")  # the goal object put in a wrong receptacle
    if o not in objs and inst.is_target_recep(r):
        out.add("placed")  # a wrong object put in the goal receptacle
    untransformed = inst.transform and (o,) not in trace.facts[k - 1].get(inst.transform, ())
    if untransformed and o in objs and inst.is_target_recep(r):
        out.add("transformed")  # committed without the transform
    return out


@dataclass(frozen=True)
class Edge:
    """A witness edge: turn ``turn`` (action ``a_t``, from ``s_t`` to ``s_{t+1}``) supports ``atom``."""

    turn: int
    atom: str
    kind: str  # write | reveal | commit | violation
    weight: float


def witness_edges(inst: Instrumentation, trace: Trace) -> list[Edge]:
    """Edges from the state diffs of an annotated trace (reveal weights split over the atom's reveals)."""
    edges: list[Edge] = []
    for t in range(len(trace.actions)):
        before, after = trace.statuses[t], trace.statuses[t + 1]
        action = trace.actions[t].strip()
        is_move = _MOVE.match(action) is not None and _move_of(inst, trace, t + 1) is not None
        is_use = action.startswith("use ") and "lamp_on" in inst.atoms
        for a in inst.atoms:
            if before[a] != "sat" and after[a] == "sat":
                edges.append(Edge(t, a, "reveal" if a == "seen" else "write", 1.0))
            elif before[a] != "viol" and after[a] == "viol":
                edges.append(Edge(t, a, "violation", 1.0))
        if is_move:
            scope = [a for a in ("placed", "placed2", "transformed") if a in inst.atoms]
            o, r = _move_of(inst, trace, t + 1)
            if o == trace.focal or inst.task_type == "pick_two_obj_and_place" and o in inst.objects():
                for a in scope:  # the put finalises these atoms: a commit edge where it left them sat
                    if after[a] == "sat" and not any(e.turn == t and e.atom == a for e in edges):
                        edges.append(Edge(t, a, "commit", 1.0))
        if is_use and after["lamp_on"] == "sat" and not any(e.turn == t and e.atom == "lamp_on" for e in edges):
            edges.append(Edge(t, "lamp_on", "commit", 1.0))
    reveals = [e for e in edges if e.kind == "reveal"]
    if reveals:
        edges = [e for e in edges if e.kind != "reveal"] + [Edge(e.turn, e.atom, e.kind, 1.0 / len(reveals))
                                                            for e in reveals]
    return sorted(edges, key=lambda e: (e.turn, e.atom, e.kind))


# ------------------------------------------------------------------------------ conformance


def mutations(inst: Instrumentation, trace: Trace, env: Any, task: Any) -> dict[str, list[str]]:
    """Verifier-relevant mutations of a trajectory's action list: drop the transform, truncate
    before the last commit, drop the first take, and put the object in a wrong receptacle."""
    acts = list(trace.actions)
    out: dict[str, list[str]] = {}
    if inst.transform:
        verb = _TRANSFORM[inst.task_type][1]
        idx = [i for i, a in enumerate(acts) if a.startswith(verb + " ")]
        if idx:
            out["drop_transform"] = acts[:idx[0]] + acts[idx[0] + 1:]
    commits = [i for i, a in enumerate(acts) if _MOVE.match(a) or (a.startswith("use ") and "lamp_on" in inst.atoms)]
    if commits:
        out["truncate_before_commit"] = acts[:commits[-1]]
    takes = [i for i, a in enumerate(acts) if a.startswith("take ")]
    if takes:
        out["drop_take"] = acts[:takes[0]] + acts[takes[0] + 1:]
    moves = [i for i, a in enumerate(acts) if _MOVE.match(a)]
    if moves and inst.recep_type is not None:
        i = moves[-1]
        obj = _MOVE.match(acts[i]).group(1)
        env.reset(task)
        for a in acts[:i]:
            if env.step(a).done:
                break
        else:
            gos = [a for a in env.admissible_actions() if a.startswith("go to ")]
            names = {v.lower(): k for k, v in trace.names.items()}
            for g in gos:
                target = g[len("go to "):]
                rid = names.get(target.lower())
                if rid is None or inst.is_target_recep(rid):
                    continue
                res = env.step(g)
                opened = []
                if f"open {target}" in res.admissible:
                    opened = [f"open {target}"]
                    res = env.step(opened[0])
                if f"move {obj} to {target}" in res.admissible:
                    out["wrong_receptacle"] = acts[:i] + [g] + opened + [f"move {obj} to {target}"]
                break
    return out


@dataclass(frozen=True)
class ConformanceResult:
    """``eps = max |F_x(z(tau~)) - V_x(tau~)|`` over the trajectory and its mutations, per case."""

    eps: float
    cases: dict[str, tuple[int, int]]  # name -> (F, V)
    masked_families: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.eps == 0


def _dependency_consistent(inst: Instrumentation, trace: Trace, atom: str) -> bool:
    """Whenever ``atom`` is sat, its prerequisites have been sat at some earlier or equal state."""
    ever: set[str] = set()
    for z in trace.statuses:
        ever |= {a for a, s in z.items() if s == "sat"}
        if z.get(atom) == "sat" and not set(inst.depends.get(atom, ())) <= ever:
            return False
    return True


def conformance(inst: Instrumentation, trace: Trace, env: Any, task: Any) -> tuple[ConformanceResult, list[Trace]]:
    """Check ``F_x`` against the engine's ``won`` on the trajectory and its mutations (executed),
    and every atom family's consistency with ``D_x`` (an inconsistent family is masked)."""
    cases = {"factual": (inst.aggregate(trace.final), int(trace.won))}
    traces = [trace]
    for name, acts in mutations(inst, trace, env, task).items():
        mt = annotate(inst, run_trace(env, task, acts))
        traces.append(mt)
        cases[name] = (inst.aggregate(mt.final), int(mt.won))
    eps = max(abs(f - v) for f, v in cases.values())
    masked = tuple(a for a in inst.atoms if a not in inst.goal_atoms
                   and not all(_dependency_consistent(inst, t, b) for t in traces for b in inst.dependents(a) | {a}))
    return ConformanceResult(float(eps), cases, masked), traces


def read_game(path: str) -> dict[str, Any]:
    """A game file's parsed JSON (``InputError`` naming the file when it is missing or corrupt)."""
    from creditaudit.replay.envs.alfworld import read_game_file

    return read_game_file(path)[1]
