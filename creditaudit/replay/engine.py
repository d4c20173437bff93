"""Executed counterfactual replay: the ground truth ``A_replay`` of every decision point.

For trajectory ``tau`` and turn ``t`` (state ``s_t``, factual action ``a_t``), docs/design.md §3:

- factual arm: restore ``s_t``, execute ``a_t``, roll out with the same policy to the end,
  ``n_fact`` times (seeded; the original continuation is never reused);
- alternatives: draw from the policy at ``s_t`` (temperature ``alt_temperature``) until ``K``
  distinct admissible actions other than ``a_t`` are found, at most ``max_alt_draws`` seeded
  draws (else the turn has no counterfactual: excluded and counted, never imputed); each rolled
  out ``n_alt`` times;
- ``A_replay = mean(factual outcomes) - mean(alternative outcomes)``; ``sigma_floor`` the standard
  deviation (``ddof=1``) of the factual outcomes; ``pivotal = A_replay != 0``;
- an arm whose ``n`` outcomes are all equal excludes, at one-sided level ``alpha``, only effects
  above ``1 - alpha**(1/n)`` (its resolution bound).

A work unit is one task's group of collected trajectories (:func:`replay_group`). It runs in one
environment instance: one reset, each trajectory's factual prefix replayed once from the initial
state with every state checked against the recorded signature and observation (divergences
counted), states snapshotted, and every rollout started by restoring the turn's snapshot and
checking its signature again (an environment without native snapshots is restored by prefix
replay, :mod:`creditaudit.replay.envs.prefix`, which checks every replayed observation and counts a
mismatch as a divergence). All rollouts of all turns of the group advance in lockstep with one
batched policy call per round; transitions are cached by ``(state signature, action)``, so a
transition already executed in the unit -- by any of the task's trajectories -- is never executed
again. Each trajectory's two tables are written atomically; a group whose trajectories' files all
exist is skipped on resume, and a group with any missing is replayed whole (so a resumed run is
the uninterrupted run, to the byte).

Seeds (named streams): the ``j``-th alternative draw of turn ``t`` uses
``replay/<traj>/<t>/draw/<j>``; the action rollout ``r`` of arm ``a`` samples at its step ``s``
uses ``replay/<traj>/<t>/<a>/<r>/<s>`` (``a`` is ``fact`` or ``alt<k>``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from creditaudit.protocol.sections import ReplaySection
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.replay.envs.base import Environment, Task
from creditaudit.replay.policies.base import Turn, candidate_kwargs, scoring_memo
from creditaudit.replay.policies.prompts import PromptBuilder
from creditaudit.replay.rollout import Rollout, TransitionCache, advance

__all__ = [
    "ReplaySettings",
    "UnitResult",
    "TURN_TABLE_SCHEMA",
    "ROLLOUT_TABLE_SCHEMA",
    "replay_trajectory",
    "replay_group",
    "sampled_turns",
    "difference_interval",
    "write_unit",
    "read_unit",
]

TURN_TABLE_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False),
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("action", pa.string(), nullable=False),
        pa.field("mean_logprob", pa.float64(), nullable=True),
        pa.field("status", pa.string(), nullable=False),
        pa.field("alternatives", pa.list_(pa.string()), nullable=False),
        pa.field("alt_draws", pa.int32(), nullable=False),
        pa.field("n_fact", pa.int32(), nullable=False),
        pa.field("n_alt", pa.int32(), nullable=False),
        pa.field("fact_mean", pa.float64(), nullable=True),
        pa.field("alt_mean", pa.float64(), nullable=True),
        pa.field("a_replay", pa.float64(), nullable=True),
        pa.field("sigma_floor", pa.float64(), nullable=True),
        pa.field("pivotal", pa.bool_(), nullable=True),
        pa.field("ci_low", pa.float64(), nullable=True),
        pa.field("ci_high", pa.float64(), nullable=True),
        pa.field("fact_resolution", pa.float64(), nullable=True),
        pa.field("alt_resolution", pa.float64(), nullable=True),
        pa.field("prefix_ok", pa.bool_(), nullable=False),
    ]
)

ROLLOUT_TABLE_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False),
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("arm", pa.string(), nullable=False),
        pa.field("alt_index", pa.int32(), nullable=False),
        pa.field("repetition", pa.int32(), nullable=False),
        pa.field("seed_stream", pa.string(), nullable=False),
        pa.field("actions", pa.list_(pa.string()), nullable=False),
        pa.field("outcome", pa.int8(), nullable=False),
        pa.field("steps", pa.int32(), nullable=False),
        pa.field("restore_ok", pa.bool_(), nullable=False),
    ]
)

#: Turn status values. Only ``complete`` turns carry A_replay.
STATUS = ("complete", "no_counterfactual", "incomplete", "diverged", "not_sampled")


#: The replay section's fields and defaults (written once, in the protocol's schema).
_SECTION = ReplaySection.model_fields


@dataclass(frozen=True)
class ReplaySettings:
    """The replay constants: the frozen protocol's ``replay`` section (its defaults are
    :class:`~creditaudit.protocol.sections.ReplaySection`'s, read from it, never written again
    here), and what the engine also needs from the policy and the environment."""

    n_fact: int = _SECTION["n_fact"].default
    n_alternatives: int = _SECTION["n_alternatives"].default
    n_alt: int = _SECTION["n_alt"].default
    alt_temperature: float = _SECTION["alt_temperature"].default
    max_alt_draws: int = _SECTION["max_alt_draws"].default
    max_rollouts_per_turn: int = _SECTION["max_rollouts_per_turn"].default
    resolution_alpha: float = _SECTION["resolution_alpha"].default
    turns_per_trajectory: int | None = _SECTION["turns_per_trajectory"].default
    rollout_temperature: float = 0.7
    """The policy's sampling temperature (``policy.temperature``)."""
    max_action_tokens: int | None = None
    """Cap on generated action tokens (``policy.max_action_tokens``; none: the policy's own)."""
    draw_batch: int = 16
    """Alternative draws asked of the policy at once (a speed setting; the draws are the same)."""
    admissible_only: bool = True
    """Alternatives must be admissible commands; False for an environment that lists none (its
    capability ``admissible``), where every distinct drawn action is an alternative."""

    @classmethod
    def from_protocol(cls, protocol: Any) -> "ReplaySettings":
        from creditaudit.replay.tasks import environment_plugin

        section = {f.name: getattr(protocol.replay, f.name) for f in fields(cls) if f.name in _SECTION}
        return cls(
            **section,
            rollout_temperature=protocol.policy.temperature,
            max_action_tokens=protocol.policy.max_action_tokens,
            admissible_only=environment_plugin(protocol).capabilities.admissible,
        )


@dataclass
class UnitResult:
    """One trajectory's replay: its turn table, rollout table and counters."""

    turns: pa.Table
    rollouts: pa.Table
    counters: dict[str, int] = field(default_factory=dict)


def difference_interval(x1: int, n1: int, x2: int, n2: int, *, level: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (method 10) for ``p1 - p2`` of two independent proportions.

    References
    ----------
    Newcombe, R. G. (1998). Interval estimation for the difference between independent
    proportions: comparison of eleven methods. Statistics in Medicine 17, 873-890.

    Examples
    --------
    >>> [round(v, 4) for v in difference_interval(56, 70, 48, 80)]  # Newcombe's example (c)
    [0.0524, 0.3339]
    """
    from creditaudit.stats import wilson

    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson(x1, n1, confidence_level=level).ci
    l2, u2 = wilson(x2, n2, confidence_level=level).ci
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, low), min(1.0, high)


@dataclass
class _TurnPlan:
    traj: str
    turn: int
    action: str
    expected_signature: str = ""
    snapshot: Any = None
    signature: str = ""
    observation: str = ""
    admissible: tuple[str, ...] = ()
    history: list[Turn] = field(default_factory=list)
    prefix_ok: bool = True
    alternatives: list[str] = field(default_factory=list)
    draws: int = 0
    status: str = "complete"
    rollouts: list[tuple[str, int, int, Rollout, str, bool]] = field(default_factory=list)


def sampled_turns(streams: SeedStreams, trajectory_id: str, n_turns: int, k: int | None) -> set[int] | None:
    """The preregistered sample of a trajectory's turns (``replay.turns_per_trajectory``).

    ``k`` turns of ``n_turns`` drawn without replacement from the stream ``replay/<trajectory>/sample``,
    a function of the protocol id and the trajectory's length only; ``None`` when every turn is
    replayed (no sample set, or a trajectory no longer than ``k``).
    """
    if k is None or n_turns <= k:
        return None
    chosen = streams.rng(f"replay/{trajectory_id}/sample").choice(n_turns, k, replace=False)
    return {int(t) for t in chosen}


def _draw_alternatives(plans: list[_TurnPlan], *, policy: Any, builder: PromptBuilder, goal: str,
                       streams: SeedStreams, settings: ReplaySettings) -> None:
    """Find K distinct admissible alternatives per turn, in draw order (batched across turns)."""
    pending = [p for p in plans if p.status == "complete"]
    for plan in pending:
        if settings.admissible_only and len([a for a in plan.admissible if a != plan.action]) < settings.n_alternatives:
            plan.status = "no_counterfactual"  # fewer admissible alternatives than K exist
            plan.draws = 0
    pending = [p for p in pending if p.status == "complete"]
    next_draw = {id(p): 0 for p in pending}
    while pending:
        prompts, seeds, owners = [], [], []
        for plan in pending:
            prompt = builder.build(goal, plan.observation, plan.admissible, plan.history)
            start = next_draw[id(plan)]
            for j in range(start, min(start + settings.draw_batch, settings.max_alt_draws)):
                prompts.append(prompt)
                seeds.append(streams.seed_int(f"replay/{plan.traj}/{plan.turn}/draw/{j}"))
                owners.append((plan, j))
        samples = policy.sample(prompts, seeds=seeds, temperature=settings.alt_temperature,
                                max_action_tokens=settings.max_action_tokens,
                                **candidate_kwargs(policy, [plan.admissible for plan, _ in owners]))
        for (plan, j), sample in zip(owners, samples):
            if len(plan.alternatives) >= settings.n_alternatives:
                continue  # draws past the K-th are discarded, so batching never changes the result
            text = sample.text
            plan.draws = j + 1
            valid = text in plan.admissible if settings.admissible_only else bool(text.strip())
            if text != plan.action and valid and text not in plan.alternatives:
                plan.alternatives.append(text)
        still = []
        for plan in pending:
            next_draw[id(plan)] += settings.draw_batch
            if len(plan.alternatives) >= settings.n_alternatives:
                continue
            if next_draw[id(plan)] >= settings.max_alt_draws:
                plan.status = "no_counterfactual"
                plan.draws = settings.max_alt_draws
                continue
            still.append(plan)
        pending = still


def _run_arms(env: Environment, policy: Any, builder: PromptBuilder, plans: list[_TurnPlan], *, goal: str,
              streams: SeedStreams, settings: ReplaySettings, counters: dict[str, dict[str, int]],
              on_step: Callable[[int], None] | None) -> None:
    """Step 3 of :func:`replay_group`: the arms of every complete turn of every trajectory of the
    group, advanced together through one transition cache."""
    cache = TransitionCache()
    all_rollouts: list[Rollout] = []
    forced: dict[Any, str] = {}
    for plan in plans:
        if plan.status != "complete":
            continue
        arms = [("fact", -1, plan.action, settings.n_fact)] + [
            (f"alt{k}", k, alt, settings.n_alt) for k, alt in enumerate(plan.alternatives)
        ]
        if sum(n for *_, n in arms) > settings.max_rollouts_per_turn:
            plan.status = "incomplete"
            continue
        for arm, k, first, n in arms:
            for rep in range(n):
                env.restore(plan.snapshot)
                counters[plan.traj]["restore_checks"] += 1
                restore_ok = env.state_signature() == plan.expected_signature
                stream = f"replay/{plan.traj}/{plan.turn}/{arm}/{rep}"
                key = (plan.traj, plan.turn, arm, rep)
                rollout = Rollout(key=key, goal=goal, snapshot=plan.snapshot, signature=plan.signature,
                                  observation=plan.observation, admissible=plan.admissible,
                                  history=list(plan.history), steps=plan.turn)
                forced[key] = first
                plan.rollouts.append((arm, k, rep, rollout, stream, restore_ok))
                all_rollouts.append(rollout)
    start_steps = {id(r): r.steps for r in all_rollouts}
    streams_of = {r.key: s for plan in plans for (_, _, _, r, s, _) in plan.rollouts}

    def seed_for(rollout: Rollout) -> int:
        return streams.seed_int(f"{streams_of[rollout.key]}/{rollout.steps - start_steps[id(rollout)]}")

    advance(env, policy, builder, all_rollouts, seed_for=seed_for, temperature=settings.rollout_temperature,
            max_action_tokens=settings.max_action_tokens, first_actions=forced, record=True, cache=cache,
            on_step=on_step)
    for rollout in all_rollouts:
        own = counters[rollout.key[0]]
        own["engine_steps"] += rollout.engine_steps
        own["cache_hits"] += rollout.cache_hits
        own["rollouts"] += 1


def _replay_prefix(env: Environment, trajectory: Any, *, start: Callable[[], Any], counters: dict[str, int]
                   ) -> tuple[str, str, list[_TurnPlan]]:
    """Step 1: the factual prefix of one trajectory, replayed once from ``start()`` (the task's
    initial observation, the engine put in the initial state) and checked at every state; each
    turn's state snapshotted. Returns (trajectory id, goal, the turns' plans)."""
    traj = str(trajectory["trajectory_id"].iloc[0])
    actions = [str(a) for a in trajectory["action"]]
    signatures = [str(s) for s in trajectory["state_signature"]]
    observations = [str(o) for o in trajectory["observation"]]
    obs = start()
    plans: list[_TurnPlan] = []
    text, admissible = obs.text, tuple(obs.admissible)
    history: list[Turn] = []
    diverged = False
    for t, action in enumerate(actions):
        plan = _TurnPlan(traj=traj, turn=t, action=action, expected_signature=signatures[t])
        signature = env.state_signature()
        plan.prefix_ok = (not diverged) and signature == signatures[t] and " ".join(text.split()) == " ".join(observations[t].split())
        if not plan.prefix_ok:
            if not diverged:  # one divergence per trajectory; every later turn is unreachable
                counters["divergences"] += 1
            diverged = True
            plan.status = "diverged"
        else:
            plan.snapshot, plan.signature = env.snapshot(), signature
            plan.observation, plan.admissible, plan.history = text, admissible, list(history)
        plans.append(plan)
        if diverged:
            continue
        result = env.step(action)
        counters["engine_steps"] += 1
        history.append(Turn(text, action))
        text, admissible = result.text, tuple(result.admissible)
        if result.done and t < len(actions) - 1:
            # the recorded trajectory continued past an end the engine reports now
            counters["divergences"] += 1
            diverged = True
    return traj, obs.goal, plans


def replay_trajectory(
    env: Environment,
    policy: Any,
    *,
    task: Task,
    trajectory: Any,
    protocol_id: str,
    settings: ReplaySettings,
    on_step: Callable[[int], None] | None = None,
) -> UnitResult:
    """Replay every turn of one collected trajectory (a pandas frame of its turns, in order):
    :func:`replay_group` of a group of one."""
    return replay_group(env, policy, task=task, trajectories=[trajectory], protocol_id=protocol_id,
                        settings=settings, on_step=on_step)[0]


def replay_group(
    env: Environment,
    policy: Any,
    *,
    task: Task,
    trajectories: list[Any],
    protocol_id: str,
    settings: ReplaySettings,
    on_step: Callable[[int], None] | None = None,
) -> list[UnitResult]:
    """Replay every turn of the collected trajectories of one task (pandas frames of their turns,
    in order), together: the replay's work unit.

    The engine is reset once; every later trajectory's prefix starts from the restored initial
    state, so every snapshot of the group stays valid, and the arms of all their turns advance in
    lockstep through one transition cache and one scoring memory. A task's ``G`` trajectories
    start in the same room and their rollouts revisit the same states, so a transition or a
    (prompt, candidate) score computed for one trajectory is reused by the others. Every sampled
    action still has its own named stream, so a trajectory's rollouts do not depend on which
    trajectories share its group (up to the float rounding of the scoring memory: see
    ``HFPolicy.scoring_memo``).

    Returns one :class:`UnitResult` per trajectory, in order (the counters of a transition
    executed once and reused are the trajectory's whose rollout executed it first; divergences
    counted while restoring, by an environment restored by prefix replay, are the first
    trajectory's).
    """
    from creditaudit.stats import resolution_bound  # (the statistics stack loads only when replay runs)

    if not trajectories:
        return []
    streams = SeedStreams(protocol_id)
    builder: PromptBuilder = policy.prompt_builder
    counter_names = ("engine_steps", "cache_hits", "divergences", "restore_checks", "rollouts")
    # an environment restored by prefix replay checks every replayed observation; its mismatches
    # are divergences of this group too (the rollout's restore also reads as failed)
    restore_divergences = int(getattr(env, "divergences", 0))
    initial: dict[str, Any] = {}

    def start() -> Any:
        if not initial:  # the first trajectory: reset, and keep the initial state
            obs = env.reset(task)
            initial.update(obs=obs, snapshot=env.snapshot())
            return obs
        env.restore(initial["snapshot"])
        return initial["obs"]

    # 1. the factual prefixes
    counters: dict[str, dict[str, int]] = {}
    units: list[tuple[str, list[_TurnPlan], list[Any]]] = []
    goal = ""
    for trajectory in trajectories:
        own = dict.fromkeys(counter_names, 0)
        traj, goal, plans = _replay_prefix(env, trajectory, start=start, counters=own)
        if traj in counters:
            raise ValueError(f"trajectory {traj} appears twice in one replay group")
        counters[traj] = own
        # the preregistered turn sample: a function of the protocol id and the trajectory's length only
        chosen_turns = sampled_turns(streams, traj, len(plans), settings.turns_per_trajectory)
        if chosen_turns is not None:
            for plan in plans:
                if plan.turn not in chosen_turns and plan.status == "complete":
                    plan.status = "not_sampled"
        units.append((traj, plans, list(trajectory["mean_logprob"])))
    all_plans = [plan for _, plans, _ in units for plan in plans]

    # 2. alternatives. From here on the group's rollouts revisit its turns' decision points, so the
    # policy remembers every (prompt, candidate) score it computes for the rest of the group.
    with scoring_memo(policy):
        _draw_alternatives(all_plans, policy=policy, builder=builder, goal=goal, streams=streams, settings=settings)
        _run_arms(env, policy, builder, all_plans, goal=goal, streams=streams, settings=settings,
                  counters=counters, on_step=on_step)

    # 4. tables
    results = []
    for traj, plans, logprobs in units:
        turn_rows: dict[str, list] = {f.name: [] for f in TURN_TABLE_SCHEMA}
        roll_rows: dict[str, list] = {f.name: [] for f in ROLLOUT_TABLE_SCHEMA}
        for plan, lp in zip(plans, logprobs):
            fact = [r.outcome for arm, _, _, r, _, _ in plan.rollouts if arm == "fact"]
            alt = [r.outcome for arm, _, _, r, _, _ in plan.rollouts if arm != "fact"]
            row: dict[str, Any] = {
                "protocol_id": protocol_id,
                "trajectory_id": traj,
                "turn": plan.turn,
                "action": plan.action,
                "mean_logprob": None if lp is None or (isinstance(lp, float) and math.isnan(lp)) else float(lp),
                "status": plan.status,
                "alternatives": list(plan.alternatives),
                "alt_draws": plan.draws,
                "n_fact": len(fact),
                "n_alt": len(alt),
                "fact_mean": None, "alt_mean": None, "a_replay": None, "sigma_floor": None, "pivotal": None,
                "ci_low": None, "ci_high": None, "fact_resolution": None, "alt_resolution": None,
                "prefix_ok": plan.prefix_ok,
            }
            if plan.status == "complete" and fact and alt:
                fact_mean, alt_mean = float(np.mean(fact)), float(np.mean(alt))
                a_replay = fact_mean - alt_mean
                low, high = difference_interval(sum(fact), len(fact), sum(alt), len(alt))
                row.update(
                    fact_mean=fact_mean,
                    alt_mean=alt_mean,
                    a_replay=a_replay,
                    sigma_floor=float(np.std(fact, ddof=1)) if len(fact) > 1 else 0.0,
                    pivotal=a_replay != 0,
                    ci_low=low,
                    ci_high=high,
                    fact_resolution=float(resolution_bound(len(fact), alpha=settings.resolution_alpha)) if len(set(fact)) == 1 else None,
                    alt_resolution=float(resolution_bound(len(alt), alpha=settings.resolution_alpha)) if len(set(alt)) == 1 else None,
                )
            for key, value in row.items():
                turn_rows[key].append(value)
            for arm, k, rep, rollout, stream, restore_ok in plan.rollouts:
                values = {
                    "protocol_id": protocol_id,
                    "trajectory_id": traj,
                    "turn": plan.turn,
                    "arm": "fact" if arm == "fact" else "alt",
                    "alt_index": k,
                    "repetition": rep,
                    "seed_stream": stream,
                    "actions": [rec.action for rec in rollout.turns],
                    "outcome": rollout.outcome,
                    "steps": len(rollout.turns),
                    "restore_ok": restore_ok,
                }
                for key, value in values.items():
                    roll_rows[key].append(value)
        own = counters[traj]
        own["restore_failures"] = roll_rows["restore_ok"].count(False)
        results.append(UnitResult(
            turns=pa.Table.from_pydict(turn_rows, schema=TURN_TABLE_SCHEMA),
            rollouts=pa.Table.from_pydict(roll_rows, schema=ROLLOUT_TABLE_SCHEMA),
            counters=own,
        ))
    results[0].counters["divergences"] += int(getattr(env, "divergences", 0)) - restore_divergences
    return results


def write_unit(result: UnitResult, directory: Path, name: str) -> None:
    """Write a unit's tables atomically; the turn table is written last and marks completion."""
    from creditaudit.artifacts import write_parquet_atomic

    metadata = {b"creditaudit.counters": repr(sorted(result.counters.items())).encode()}
    write_parquet_atomic(result.rollouts, directory / f"{name}.rollouts.parquet")
    write_parquet_atomic(result.turns.replace_schema_metadata(metadata), directory / f"{name}.turns.parquet")


def read_unit(directory: Path, name: str) -> UnitResult | None:
    """A unit's tables when both are present and readable (else ``None``: the unit reruns)."""
    try:
        turns = pq.read_table(directory / f"{name}.turns.parquet")
        rollouts = pq.read_table(directory / f"{name}.rollouts.parquet")
    except (OSError, pa.ArrowException):
        return None
    meta = turns.schema.metadata or {}
    import ast

    try:
        counters = dict(ast.literal_eval(meta.get(b"creditaudit.counters", b"[]").decode()))
    except (ValueError, SyntaxError):
        return None
    return UnitResult(turns.replace_schema_metadata(None), rollouts, counters)
