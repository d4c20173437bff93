"""VICT: verifier-instrumented credit tracing (ALFWorld), over task groups of G rollouts.

Per trajectory ``i`` of a task group (the instrumentation is :mod:`creditaudit.signals.families.vict.atoms`):

1. Replay the collected actions on the engine from ``env.reset(task)``, checking every state's
   signature against the recorded one (``replay_mismatch`` otherwise), and annotate every state
   with the four-valued atom statuses.
2. Conformance: ``eps = max |F_x(z(tau~)) - V_x(tau~)|`` over the trajectory and its executed
   mutations (drop the transform, truncate before the last commit, drop the first take, wrong
   receptacle) against the engine's ``won``. ``eps > 0`` zeroes the task (its trajectories abstain,
   ``conformance_failed``); an atom family inconsistent with ``D_x`` is masked (no core, no credit).
3. Direction ``q_i = sign(A_base_i)`` outside the tie band ``eps_q`` (GRPO group advantage);
   ``q_i = 0`` abstains (``tie``).
4. Core search on the final assignment ``z_i``: ``q = +1`` removes atoms (to unsat; closure adds
   their dependents), ``q = -1`` repairs atoms (to sat; closure adds their prerequisites);
   ``Delta(C) = q [F(z) - F(cf(z, C))]``. Greedy: add the atom whose closure gives the largest
   ``Delta`` (ties: smaller closure, then atom order) until ``Delta`` reaches the target ``1`` or
   the budget ``B`` atoms is spent (``budget_hit``; no core -> ``no_core``, zero correction);
   then backward pruning. :func:`exhaustive_core` gives the minimum-cardinality reference.
5. Leave-one-out margins ``delta_ij = q_i [Delta(C) - Delta(cl(C \\ {j}))]`` (signed by the
   direction, so a repair core's margins are negative), normalised within the task group per atom
   over the rollouts that support it (``j`` in the core with a gated edge):
   ``(delta - median) / (s + eps)`` with ``s`` the mean absolute deviation from the median; zero
   when fewer than ``min_support`` rollouts support the atom or ``s = 0``.
6. ``A_VICT(i,t) = sum_j delta_hat(i,j) * w(i,t,j) / Z(i,j)`` over gated edges (direct write /
   commit / violation weight 1, reveal weight 1 split over the atom's reveals; ``Z`` the atom's
   total gated weight). Success cores take write / reveal / commit edges, repair cores violation
   edges. ``A_final = A_base + lambda clip(A_VICT, -c, c)`` with
   ``lambda = lambda_scale median|A_base| / (median|A_VICT| + eps)`` and
   ``c = quantile_q |A_base|``.

Decisions where the sources leave room (part of the family's version):

* the credit column is the correction ``lambda clip(A_VICT, -c, c)`` (neutral 0; the base
  advantage is the ``grpo`` family); ``A_base``, ``A_VICT`` and ``A_final`` are in the diagnostics;
* trajectories VICT makes no statement about abstain in the credit table with their reason
  (``environment_not_instrumented``, ``task_type_not_instrumented``, ``replay_mismatch``,
  ``conformance_failed``, ``tie``, ``no_core``); their training-side correction is 0;
* ``median|A_VICT|`` in ``lambda`` is taken over the nonzero corrections (the median of a sparse
  tensor is 0 and would make ``lambda`` explode); both medians run over every trajectory of the
  context (one batch);
* the eligibility invariant -- a nonzero correction implies a gated proof edge -- is asserted on
  every output and raises ``AssertionError`` if it ever fails.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import Field
import pyarrow as pa

from creditaudit.signals.families.advantages import grpo_advantages
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, Trajectory, credit_frame
from creditaudit.signals.families.vict.atoms import Edge, Instrumentation, Trace, annotate, conformance, run_trace, witness_edges

__all__ = [
    "diagnostics_report",
    "direction",
    "closure",
    "displacement",
    "greedy_core",
    "exhaustive_core",
    "loo_margins",
    "robust_normalise",
    "VictRollout",
    "vict_group",
    "calibrate",
    "VictFamily",
]

SUCCESS_EDGES = ("write", "reveal", "commit")
REPAIR_EDGES = ("violation",)


def direction(a_base: float, *, tie_band: float) -> int:
    """``q_i``: +1 above the tie band, -1 below, 0 inside.

    Examples
    --------
    >>> [direction(a, tie_band=0.1) for a in (0.5, -0.5, 0.05)]
    [1, -1, 0]
    """
    return 1 if a_base > tie_band else (-1 if a_base < -tie_band else 0)


def _changes(z: dict[str, str] | None, atom: str, q: int) -> bool:
    """Whether editing ``atom`` changes ``z`` (removal of a sat atom, repair of a non-sat one)."""
    return z is None or ((z.get(atom) == "sat") if q > 0 else (z.get(atom) != "sat"))


def closure(inst: Instrumentation, atoms: Sequence[str], q: int, z: dict[str, str] | None = None) -> frozenset[str]:
    """``cl_D``: removal (q=+1) adds dependents, repair (q=-1) adds prerequisites -- with ``z``,
    only those the edit changes (an unsat dependent needs no removal, a sat prerequisite no repair)."""
    out = set(atoms)
    for a in atoms:
        out |= {b for b in (inst.dependents(a) if q > 0 else inst.prerequisites(a)) if _changes(z, b, q)}
    return frozenset(out)


def _edit(z: dict[str, str], atoms: frozenset[str], q: int) -> dict[str, str]:
    cf = dict(z)
    for a in atoms:
        cf[a] = "unsat" if q > 0 else "sat"
    return cf


def displacement(inst: Instrumentation, z: dict[str, str], atoms: frozenset[str], q: int) -> int:
    """``Delta_x(C) = q [F(z) - F(cf^q_D(z, C))]`` (``atoms`` already closed)."""
    return q * (inst.aggregate(z) - inst.aggregate(_edit(z, atoms, q)))


@dataclass(frozen=True)
class CoreResult:
    core: frozenset[str] | None
    budget_hit: bool
    steps: int


def greedy_core(inst: Instrumentation, z: dict[str, str], q: int, *, budget: int = 8,
                masked: Sequence[str] = (), target: int = 1) -> CoreResult:
    """Budgeted greedy core with dependency closure, then backward pruning."""
    pool = [a for a in inst.atoms if a not in masked]
    core: frozenset[str] = frozenset()
    added: list[str] = []
    steps = 0
    while displacement(inst, z, core, q) < target:
        best = None
        for j in pool:
            if j in core or not _changes(z, j, q):
                continue
            c = closure(inst, [*core, j], q, z)
            if any(a in masked for a in c) or len(c) > budget:
                continue
            key = (-displacement(inst, z, c, q), len(c), pool.index(j))
            if best is None or key < best[0]:
                best = (key, j, c)
        if best is None:
            return CoreResult(None, True, steps)
        core, steps = best[2], steps + 1
        added.append(best[1])
    for j in reversed(added):  # backward pruning
        if j not in core:
            continue
        rest = closure(inst, [a for a in core if a != j and j not in closure(inst, [a], q, z) - {a}], q, z)
        if j not in rest and displacement(inst, z, rest, q) >= target:
            core = rest
    return CoreResult(core if core else None, False, steps)


def exhaustive_core(inst: Instrumentation, z: dict[str, str], q: int, *, masked: Sequence[str] = (),
                    target: int = 1) -> frozenset[str] | None:
    """The minimum-cardinality closed core (ties: the first in atom order), by enumeration."""
    pool = [a for a in inst.atoms if a not in masked]
    best = None
    for k in range(1, len(pool) + 1):
        for subset in itertools.combinations([a for a in pool if _changes(z, a, q)], k):
            c = closure(inst, subset, q, z)
            if any(a in masked for a in c) or displacement(inst, z, c, q) < target:
                continue
            if best is None or len(c) < len(best):
                best = c
    return best


def loo_margins(inst: Instrumentation, z: dict[str, str], core: frozenset[str], q: int) -> dict[str, float]:
    """``delta_j = q [Delta(C) - Delta(cl(C \\ {j}))]`` for every core atom."""
    full = displacement(inst, z, core, q)
    out = {}
    for j in sorted(core):
        rest = closure(inst, [a for a in core if a != j], q, z) - {j}
        out[j] = float(q * (full - displacement(inst, z, frozenset(rest), q)))
    return out


def robust_normalise(values: Sequence[float], *, eps: float = 1e-8, min_support: int = 2) -> np.ndarray:
    """``(delta - median) / (s + eps)``, ``s`` the mean absolute deviation from the median; zeros
    when fewer than ``min_support`` values or ``s = 0``.

    Examples
    --------
    >>> robust_normalise([1.0, 1.0, -1.0, -1.0]).round(6).tolist()
    [1.0, 1.0, -1.0, -1.0]
    >>> robust_normalise([1.0]).tolist()
    [0.0]
    """
    x = np.asarray(values, dtype=float)
    if x.size < min_support:
        return np.zeros_like(x)
    med = float(np.median(x))
    s = float(np.mean(np.abs(x - med)))
    if s == 0:
        return np.zeros_like(x)
    return (x - med) / (s + eps)


@dataclass
class VictRollout:
    """Everything VICT derived for one rollout of a group."""

    trajectory_id: str
    n_turns: int
    a_base: float
    q: int = 0
    reason: str | None = None
    trace: Trace | None = None
    edges: list[Edge] = field(default_factory=list)
    core: frozenset[str] | None = None
    exhaustive: frozenset[str] | None = None
    budget_hit: bool = False
    margins: dict[str, float] = field(default_factory=dict)
    gated: dict[str, list[Edge]] = field(default_factory=dict)
    delta_hat: dict[str, float] = field(default_factory=dict)
    a_vict: np.ndarray | None = None
    conformance: Any = None


def _gated_edges(r: VictRollout, masked: Sequence[str], inst: Instrumentation) -> dict[str, list[Edge]]:
    kinds = SUCCESS_EDGES if r.q > 0 else REPAIR_EDGES
    out: dict[str, list[Edge]] = {}
    for j in sorted(r.core or ()):
        if j in masked:
            continue
        ok = []
        for e in r.edges:
            if e.atom != j or e.kind not in kinds:
                continue
            pre = r.trace.statuses[e.turn]
            # the proof record respects D_x: a write / commit happens once its prerequisites were sat
            if e.kind in ("write", "commit") and any(pre.get(p) != "sat" and not _ever_sat(r.trace, p, e.turn)
                                                     for p in inst.depends.get(j, ())):
                continue
            ok.append(e)
        if ok:
            out[j] = ok
    return out


def _ever_sat(trace: Trace, atom: str, upto: int) -> bool:
    return any(z.get(atom) == "sat" for z in trace.statuses[:upto + 1])


def vict_group(inst: Instrumentation, traces: Sequence[Trace | None], outcomes: Sequence[int], ids: Sequence[str],
               lengths: Sequence[int], *, env: Any, task: Any, budget: int = 8, tie_band: float = 1e-6,
               eps: float = 1e-8, min_support: int = 2, exhaustive_max_atoms: int = 6) -> list[VictRollout]:
    """VICT for one task group: conformance, direction, cores, margins, normalisation, ``A_VICT``.

    ``traces[i]`` is the annotated engine replay of rollout ``i`` (``None``: it did not replay,
    ``replay_mismatch``)."""
    a_base = grpo_advantages(outcomes) if len(outcomes) >= 2 else np.zeros(len(outcomes))
    rolls = [VictRollout(tid, n, float(a)) for tid, n, a in zip(ids, lengths, a_base)]
    masked: set[str] = set()
    failed = False
    checked: dict[tuple[str, ...], Any] = {}  # conformance depends on the action list only
    for r, tr in zip(rolls, traces):
        if tr is None:
            r.reason = "replay_mismatch"
            continue
        r.trace = tr
        key = tuple(tr.actions)
        if key not in checked:
            checked[key] = conformance(inst, tr, env, task)[0]
        res = checked[key]
        r.conformance = res
        masked |= set(res.masked_families)
        failed = failed or not res.ok
    for r in rolls:
        if r.reason is not None:
            continue
        if failed:
            r.reason = "conformance_failed"  # a failing aggregator zeroes the task
            continue
        r.q = direction(r.a_base, tie_band=tie_band)
        if r.q == 0:
            r.reason = "tie"
            continue
        z = r.trace.final
        found = greedy_core(inst, z, r.q, budget=budget, masked=sorted(masked))
        r.budget_hit = found.budget_hit
        if len(inst.atoms) - len(masked) <= exhaustive_max_atoms:
            r.exhaustive = exhaustive_core(inst, z, r.q, masked=sorted(masked))
        if found.core is None:
            r.reason = "no_core"
            continue
        r.core = found.core
        r.edges = witness_edges(inst, r.trace)
        r.margins = loo_margins(inst, z, r.core, r.q)
        r.gated = _gated_edges(r, sorted(masked), inst)
    # robust normalisation per atom over the supporting rollouts
    for j in inst.atoms:
        support = [r for r in rolls if r.reason is None and j in r.gated and r.margins.get(j, 0.0) != 0.0]
        values = robust_normalise([r.margins[j] for r in support], eps=eps, min_support=min_support)
        for r, v in zip(support, values):
            r.delta_hat[j] = float(v)
    for r in rolls:
        r.a_vict = np.zeros(r.n_turns)
        if r.reason is not None:
            continue
        for j, edges in r.gated.items():
            d = r.delta_hat.get(j, 0.0)
            total = sum(e.weight for e in edges)
            if d == 0.0 or total <= 0:
                continue
            for e in edges:
                if e.turn < r.n_turns:
                    r.a_vict[e.turn] += d * e.weight / total
    return rolls


def calibrate(a_base: Sequence[float], a_vict: Sequence[float], *, lambda_scale: float = 0.5, eps: float = 1e-8,
              clip_quantile: float = 0.95) -> tuple[float, float]:
    """``(lambda, c)``: ``lambda = lambda_scale median|A_base| / (median|A_VICT != 0| + eps)``,
    ``c = quantile_q |A_base|`` (over turns).

    Examples
    --------
    >>> lam, c = calibrate([1.0, -1.0, 1.0, -1.0], [0.0, 2.0, 0.0, 0.0])
    >>> round(lam, 6), c
    (0.25, 1.0)
    """
    b = np.abs(np.asarray(a_base, dtype=float))
    v = np.abs(np.asarray(a_vict, dtype=float))
    v = v[v > 0]
    if b.size == 0:
        return 0.0, 0.0
    lam = lambda_scale * float(np.median(b)) / ((float(np.median(v)) if v.size else 0.0) + eps)
    return lam, float(np.quantile(b, clip_quantile))


def _eligible(r: VictRollout, t: int) -> bool:
    """Gate(i, t, j, r) for some j: conformance passed (reason None), j in the core, an observed
    gated edge at turn t, a nonzero normalised margin."""
    return r.reason is None and any(r.delta_hat.get(j, 0.0) != 0.0 and any(e.turn == t for e in edges)
                                    for j, edges in r.gated.items())


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("trajectory_id", pa.string()),
    pa.field("turn", pa.int32()),
    pa.field("q", pa.int8()),
    pa.field("a_base", pa.float64()),
    pa.field("a_vict", pa.float64()),
    pa.field("correction", pa.float64()),
    pa.field("a_final", pa.float64()),
    pa.field("reason", pa.string()),
    pa.field("gated_edges", pa.list_(pa.string())),
    pa.field("eligible", pa.bool_()),
    pa.field("core", pa.list_(pa.string())),
    pa.field("conformance_eps", pa.float64()),
])


class VictFamily(FamilyBase):
    """The ``vict`` credit family with the protocol's constants: a signed correction around
    ``neutral = 0`` that replays the recorded prefixes on the environment."""

    neutral = 0.0
    needs = frozenset({"environment"})

    def __init__(self, *, name: str, core_budget: int = 8, tie_band: float = 1e-6, clip_quantile: float = 0.95,
                 lambda_scale: float = 0.5, eps: float = 1e-8, min_support: int = 2):
        self.name = name
        self.core_budget = core_budget
        self.tie_band = tie_band
        self.clip_quantile = clip_quantile
        self.lambda_scale = lambda_scale
        self.eps = eps
        self.min_support = min_support

    def run_groups(self, groups: dict[str, list[Trajectory]], *, env: Any, task_of: dict[str, Any],
                   inst_of: dict[str, Instrumentation | None], signatures: dict[str, list[str]]) -> list[VictRollout]:
        """VICT over task groups whose environment is ALFWorld (``inst_of[task] is None``: the task type
        has no instrumentation)."""
        out: list[VictRollout] = []
        for task_id, group in groups.items():
            inst = inst_of.get(task_id)
            if inst is None:
                for t in group:
                    out.append(VictRollout(t.trajectory_id, len(t), 0.0, reason="task_type_not_instrumented",
                                           a_vict=np.zeros(len(t))))
                continue
            traces, cache = [], {}
            for t in group:
                acts = tuple(rec.action for rec in t.turns)
                if acts not in cache:  # the engine is deterministic: one replay per distinct action list
                    cache[acts] = run_trace(env, task_of[task_id], acts)
                tr = cache[acts]
                sig = signatures.get(t.trajectory_id)
                ok = (len(tr.actions) == len(t) and tr.won == t.won
                      and (sig is None or tr.signatures[:len(sig)] == list(sig)))
                traces.append(annotate(inst, copy.copy(tr)) if ok else None)
            out += vict_group(inst, traces, [t.outcome for t in group], [t.trajectory_id for t in group],
                              [len(t) for t in group], env=env, task=task_of[task_id], budget=self.core_budget,
                              tie_band=self.tie_band, eps=self.eps, min_support=self.min_support)
        return out

    def finish(self, context_trajectories: Sequence[Trajectory], rolls: list[VictRollout]) -> FamilyOutput:
        """Calibrate, assert the eligibility invariant, and assemble the credit and diagnostics."""
        by_id = {r.trajectory_id: r for r in rolls}
        base_all = [r.a_base for r in rolls for _ in range(r.n_turns) if r.reason is None]
        vict_all = [v for r in rolls if r.reason is None for v in r.a_vict]
        lam, c = calibrate(base_all, vict_all, lambda_scale=self.lambda_scale, eps=self.eps,
                           clip_quantile=self.clip_quantile)
        values, reasons = {}, {}
        diag = {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        n_nonzero = n_checked = 0
        for traj in context_trajectories:
            r = by_id[traj.trajectory_id]
            for rec in traj.turns:
                t = rec.turn
                raw = float(r.a_vict[t]) if r.a_vict is not None and t < len(r.a_vict) else 0.0
                corr = lam * float(np.clip(raw, -c, c)) if r.reason is None else 0.0
                eligible = _eligible(r, t)
                n_checked += 1
                if corr != 0.0:
                    n_nonzero += 1
                    # the eligibility invariant (Eq. 8): a nonzero correction implies a gated proof edge
                    assert eligible, ("VICT emitted a correction without a gated proof edge at "
                                      f"{(traj.trajectory_id, t)}")
                key = (traj.trajectory_id, t)
                if r.reason is None:
                    values[key] = corr
                else:
                    reasons[key] = r.reason
                diag["trajectory_id"].append(traj.trajectory_id)
                diag["turn"].append(t)
                diag["q"].append(r.q)
                diag["a_base"].append(r.a_base)
                diag["a_vict"].append(raw)
                diag["correction"].append(corr)
                diag["a_final"].append(r.a_base + corr)
                diag["reason"].append(r.reason)
                diag["gated_edges"].append([f"{e.atom}:{e.kind}" for es in r.gated.values() for e in es if e.turn == t])
                diag["eligible"].append(eligible)
                diag["core"].append(sorted(r.core) if r.core is not None else None)
                diag["conformance_eps"].append(r.conformance.eps if r.conformance is not None else None)
        table = pa.Table.from_pydict(diag, schema=DIAGNOSTICS_SCHEMA)
        report = {"lambda": lam, "clip": c, "core_budget": self.core_budget, "tie_band": self.tie_band,
                  "min_support": self.min_support,
                  # Eq. 8 is asserted above, so a report exists only when it held on every output
                  "eligibility_pass": 1.0 if n_nonzero else None,
                  **vict_report(rolls, diag["correction"], n_checked, n_nonzero)}
        return FamilyOutput(credit_frame(context_trajectories, values, reasons), table, report)

    def compute(self, context: SignalContext) -> FamilyOutput:
        from creditaudit.replay.tasks import environment_plugin, make_environment, task_for
        from creditaudit.signals.families.prover import recorded_signatures
        from creditaudit.signals.families.vict.atoms import instrument, read_game

        groups: dict[str, list[Trajectory]] = {}
        for traj in context.trajectories:
            groups.setdefault(traj.task_id, []).append(traj)
        if not environment_plugin(context.protocol).capabilities.pddl_games:
            rolls = [VictRollout(t.trajectory_id, len(t), 0.0, reason="environment_not_instrumented",
                                 a_vict=np.zeros(len(t))) for t in context.trajectories]
            return self.finish(context.trajectories, rolls)
        signatures, entries = recorded_signatures(context)
        task_of = {tid: task_for(entries[tid], context.protocol, context.run_dir) for tid in groups}
        inst_of = {tid: instrument(entries[tid].task_type, read_game(task_of[tid].source)) for tid in groups}
        env = make_environment(context.protocol)
        try:
            rolls = self.run_groups(groups, env=env, task_of=task_of, inst_of=inst_of, signatures=signatures)
        finally:
            env.close()
        return self.finish(context.trajectories, rolls)


def vict_report(rolls: Sequence[VictRollout], corrections: Sequence[float], n_turns: int, n_nonzero: int) -> dict:
    """Conformance, proof coverage, abstention by reason, nonzero shares, core sizes, budget hits,
    greedy-vs-exhaustive agreement.

    ``conformance_rate``: share of checked trajectories with ``eps = 0`` (trajectory and all its
    mutations); ``proof_coverage``: share of (rollout, core atom) pairs with at least one gated
    proof edge; ``trajectory_abstention_*``: rollouts VICT makes no statement about, by reason;
    ``nonzero_*_share``: over every trajectory / turn of the context; ``greedy_exhaustive_agreement``:
    share of cores whose greedy size equals the exhaustive minimum (``..._identical``: same set)."""
    checked = [r for r in rolls if r.conformance is not None]
    reasons: dict[str, int] = {}
    for r in rolls:
        if r.reason is not None:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
    cored = [r for r in rolls if r.core is not None]
    pairs = [(r, j) for r in cored for j in r.core]
    covered = sum(1 for r, j in pairs if j in r.gated)
    compared = [r for r in rolls if r.core is not None and r.exhaustive is not None]
    nonzero_traj = sum(1 for r in rolls if r.reason is None and r.a_vict is not None and np.any(r.a_vict != 0))
    return {
        "n_trajectories": len(rolls),
        "conformance_checked": len(checked),
        "conformance_rate": (sum(1 for r in checked if r.conformance.ok) / len(checked)) if checked else None,
        "conformance_cases": sum(len(r.conformance.cases) for r in checked),
        "conformance_case_agreement": (sum(1 for r in checked for f, v in r.conformance.cases.values() if f == v)
                                       / max(1, sum(len(r.conformance.cases) for r in checked))) if checked else None,
        "masked_families": sorted({m for r in checked for m in r.conformance.masked_families}),
        "proof_coverage": covered / len(pairs) if pairs else None,
        "trajectory_abstention_share": sum(reasons.values()) / len(rolls) if rolls else None,
        "trajectory_abstention_reasons": dict(sorted(reasons.items())),
        "nonzero_trajectory_share": nonzero_traj / len(rolls) if rolls else None,
        "nonzero_action_share": n_nonzero / n_turns if n_turns else None,
        "core_sizes": {str(k): v for k, v in sorted(_count(len(r.core) for r in cored).items())},
        "budget_hits": sum(1 for r in rolls if r.budget_hit),
        "greedy_exhaustive_compared": len(compared),
        "greedy_exhaustive_agreement": (sum(1 for r in compared if len(r.core) == len(r.exhaustive)) / len(compared))
        if compared else None,
        "greedy_exhaustive_identical": (sum(1 for r in compared if r.core == r.exhaustive) / len(compared))
        if compared else None,
    }


def diagnostics_report(table: pa.Table) -> dict:
    """The figures of :func:`vict_report` that the diagnostics table determines, recomputed from its
    rows (what the ledger's ``vict`` producer reports): trajectories, conformance, proof coverage,
    trajectory abstention by reason and the nonzero shares.

    One row per turn carries its trajectory's ``reason``, ``core`` and conformance ``eps``, the
    turn's raw ``a_vict``, its ``correction`` and its gated proof edges (``atom:kind``); a core atom
    is covered when one of its trajectory's turns has a gated edge of it.
    """
    frame = table.select(["trajectory_id", "reason", "a_vict", "correction", "gated_edges", "core",
                          "conformance_eps"]).to_pandas()
    rolls = []
    for _, rows in frame.groupby("trajectory_id", sort=False):
        first = rows.iloc[0]
        reason = None if pd.isna(first.reason) else str(first.reason)
        gated = {edge.rsplit(":", 1)[0] for edges in rows.gated_edges for edge in (edges if edges is not None else ())}
        core = list(first.core) if first.core is not None else None
        rolls.append((reason, core, first.conformance_eps, gated, bool((rows.a_vict != 0).any())))
    checked = [eps for _, _, eps, _, _ in rolls if eps is not None and not pd.isna(eps)]
    reasons = dict(sorted(_count(r for r, *_ in rolls if r is not None).items()))
    pairs = [(gated, j) for _, core, _, gated, _ in rolls if core is not None for j in core]
    n = len(rolls)
    return {
        "n_trajectories": n,
        "conformance_checked": len(checked),
        "conformance_rate": sum(1 for eps in checked if eps == 0) / len(checked) if checked else None,
        "proof_coverage": sum(1 for gated, j in pairs if j in gated) / len(pairs) if pairs else None,
        "trajectory_abstention_share": sum(reasons.values()) / n if n else None,
        "trajectory_abstention_reasons": reasons,
        "nonzero_trajectory_share": sum(1 for r, *_, nz in rolls if r is None and nz) / n if n else None,
        "nonzero_action_share": float((frame.correction != 0).mean()) if len(frame) else None,
    }


def _count(values) -> dict[int, int]:
    out: dict[int, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def vict_family(
    *,
    name: str,
    core_budget: Annotated[int, Field(ge=1)] = 8,
    tie_band: Annotated[float, Field(ge=0.0)] = 1e-6,
    clip_quantile: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95,
    lambda_scale: Annotated[float, Field(gt=0.0)] = 0.5,
    eps: Annotated[float, Field(gt=0.0)] = 1e-8,
    min_support: Annotated[int, Field(ge=1)] = 2,
) -> VictFamily:
    """The VICT family (entry point ``vict`` of group ``creditaudit.families``; ALFWorld only).

    Parameters
    ----------
    name : str
        The protocol's name for the signal.
    core_budget : int, default 8
        B: greedy core search budget.
    tie_band : float, default 1e-6
        eps_q: ``|A_base|`` below this is a tie (no direction).
    clip_quantile : float, default 0.95
        ``c`` = this quantile of ``|A_base|``.
    lambda_scale : float, default 0.5
        ``lambda = lambda_scale * median|A_base| / (median|A_VICT| + eps)``.
    eps : float, default 1e-8
        Stabiliser in lambda.
    min_support : int, default 2
        Rollouts needed to normalise a margin; fewer gives zero.
    """
    return VictFamily(name=name, core_budget=core_budget, tie_band=tie_band, clip_quantile=clip_quantile,
                      lambda_scale=lambda_scale, eps=eps, min_support=min_support)
