"""Held-out evaluation of checkpoints and the fixed probe set.

Every checkpoint (and the untrained base) plays ``arms.eval_rollouts`` rollouts per evaluation
task at the policy's temperature; the action of rollout ``r`` at turn ``t`` of task ``k`` is
sampled with the seed of ``arms/eval/<set>/task-<k>/<t>`` (``r = 0``) or
``arms/eval/<set>/task-<k>/rollout-<r>/<t>`` for every checkpoint (common random numbers: the
base policy and every arm are paired rollout by rollout), and all checkpoints' rollouts of a task
share one episode and its transition cache.

Format collapse is measured, not assumed: a checkpoint's share of evaluation actions that are not
admissible commands; above the protocol's ``exclusions.format_collapse_threshold`` the checkpoint
is excluded from the confirmatory comparisons and from the divergence analysis, and the exclusion
is reported with its share.

The probe set: ``probe_states`` decision points (with at least two admissible commands) drawn
with the stream ``arms/probes`` from the base policy's rollouts on the held-out tasks -- fixed
before any training.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import pyarrow as pa

from creditaudit.protocol.seeds import SeedStreams
from creditaudit.replay.rollout import Rollout, TransitionCache, advance
from creditaudit.training_arms.loop import ProbeState

__all__ = ["EVAL_SCHEMA", "evaluate_checkpoints", "select_probes", "probes_table", "probes_from_table"]

EVAL_SCHEMA = pa.schema(
    [
        pa.field("protocol_id", pa.string(), nullable=False),
        pa.field("checkpoint", pa.string(), nullable=False),
        pa.field("arm", pa.string(), nullable=False),
        pa.field("seed", pa.int32(), nullable=False),
        pa.field("set", pa.string(), nullable=False),
        pa.field("task_index", pa.int32(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("rollout", pa.int32(), nullable=False),
        pa.field("success", pa.int8(), nullable=False),
        pa.field("steps", pa.int32(), nullable=False),
        pa.field("inadmissible_steps", pa.int32(), nullable=False),
    ]
)


def evaluate_checkpoints(
    env: Any,
    policy: Any,
    bank: Any,
    tasks: Sequence[Any],
    checkpoints: Sequence[tuple[str, str, int, str | None]],
    *,
    set_name: str,
    protocol_id: str,
    temperature: float,
    max_action_tokens: int | None,
    rollouts: int = 1,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[dict[str, dict[str, list]], dict[str, list[Rollout]]]:
    """Play ``rollouts`` rollouts per task for every checkpoint.

    Parameters
    ----------
    tasks : sequence of Task
    checkpoints : sequence of (label, arm, seed, adapter name or None)
        ``None`` is the base policy (adapters disabled).

    Returns
    -------
    (rows, rollouts)
        ``rows[label]`` -- columns of :data:`EVAL_SCHEMA`; ``rollouts[label]`` -- the rollouts in
        task order (rollout order within a task).
    """
    streams = SeedStreams(protocol_id)
    rows = {label: {f.name: [] for f in EVAL_SCHEMA} for label, *_ in checkpoints}
    played: dict[str, list[Rollout]] = {label: [] for label, *_ in checkpoints}
    builder = policy.prompt_builder
    for k, task in enumerate(tasks):
        obs = env.reset(task)
        snapshot, signature = env.snapshot(), env.state_signature()
        cache = TransitionCache()
        prefixes = [f"arms/eval/{set_name}/task-{k}" + (f"/rollout-{r}" if r else "") for r in range(rollouts)]
        for label, arm, seed, name in checkpoints:
            if name is not None:
                bank.activate(name)
            context = bank.base() if (name is None and bank.peft_model is not None) else nullcontext()
            group = [Rollout(key=r, goal=obs.goal, snapshot=snapshot, signature=signature, observation=obs.text,
                             admissible=tuple(obs.admissible)) for r in range(rollouts)]
            with context:
                advance(env, policy, builder, group,
                        seed_for=lambda ro: streams.seed_int(f"{prefixes[ro.key]}/{ro.steps}"),
                        temperature=temperature, max_action_tokens=max_action_tokens, cache=cache)
            for r, rollout in enumerate(group):
                inadmissible = sum(1 for rec in rollout.turns if rec.action not in rec.admissible)
                values = {"protocol_id": protocol_id, "checkpoint": label, "arm": arm, "seed": seed, "set": set_name,
                          "task_index": k, "task_id": task.task_id, "rollout": r, "success": rollout.outcome,
                          "steps": len(rollout.turns), "inadmissible_steps": inadmissible}
                for key, value in values.items():
                    rows[label][key].append(value)
                played[label].append(rollout)
        if progress:
            progress(f"evaluate {set_name}", k + 1, len(tasks))
    return rows, played


def select_probes(rollouts: Sequence[Rollout], *, n: int, protocol_id: str) -> list[ProbeState]:
    """``n`` decision points with at least two admissible commands, drawn from ``rollouts`` (all
    of them when fewer exist)."""
    candidates = []
    for ro in rollouts:
        history: list[tuple[str, str]] = []
        for rec in ro.turns:
            if len(rec.admissible) >= 2:
                candidates.append((ro.goal, rec.observation, tuple(rec.admissible), tuple(history)))
            history.append((rec.observation, rec.action))
    order = SeedStreams(protocol_id).rng("arms/probes").permutation(len(candidates))[:n]
    return [ProbeState(i, *candidates[int(j)]) for i, j in enumerate(sorted(int(x) for x in order))]


def probes_table(probes: Sequence[ProbeState], protocol_id: str) -> pa.Table:
    """The probe set as a stamped table."""
    return pa.table({
        "protocol_id": pa.array([protocol_id] * len(probes), pa.string()),
        "probe": pa.array([p.index for p in probes], pa.int32()),
        "goal": pa.array([p.goal for p in probes], pa.string()),
        "observation": pa.array([p.observation for p in probes], pa.string()),
        "admissible": pa.array([list(p.admissible) for p in probes], pa.list_(pa.string())),
        "history_observations": pa.array([[h[0] for h in p.history] for p in probes], pa.list_(pa.string())),
        "history_actions": pa.array([[h[1] for h in p.history] for p in probes], pa.list_(pa.string())),
    })


def probes_from_table(table: pa.Table) -> list[ProbeState]:
    cols = table.to_pydict()
    return [ProbeState(int(cols["probe"][i]), cols["goal"][i], cols["observation"][i], tuple(cols["admissible"][i]),
                       tuple(zip(cols["history_observations"][i], cols["history_actions"][i])))
            for i in range(table.num_rows)]
