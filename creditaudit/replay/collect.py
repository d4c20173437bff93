"""``creditaudit collect``: roll the policy out on the frozen task list and write trajectories.

Under a frozen protocol only. The tasks are sampled from the task list with the stream
``collect/tasks``; each sampled task gets ``collection.group_size`` rollouts that advance in
lockstep on one engine instance (:mod:`creditaudit.replay.rollout`); the action of rollout ``g`` at
turn ``t`` of task ``k`` is sampled with the seed of stream ``collect/rollout/<task id>/<g>/<t>``.
A task's rollouts share one scoring memory (:meth:`~creditaudit.replay.policies.hf.HFPolicy.scoring_memo`),
so a (prompt, command) pair met again records the log-probabilities it got first: equal turns
have equal numbers, whatever batch the policy scored them in.
Before any rollout, one random trajectory is replayed on ``collection.determinism_instances``
independent engine instances (two episodes each for an environment restored by prefix replay) and
must hash identically: a nondeterministic environment is refused (exit 1) naming the first step
where the runs diverge.

Each task's rollouts are one Parquet shard written atomically (``collect/shards/``); an
interrupted collection resumes at the first missing shard and produces the same bytes as an
uninterrupted one. The shards are then concatenated into ``collect/trajectories.parquet`` (one
row per turn, stamped with the protocol id; its columns are described in
:mod:`creditaudit.replay.records`), and removed once the link record attests the concatenation:
a finished run holds no file that no link record vouches for.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from creditaudit.artifacts import read_stamped_parquet, write_parquet_atomic
from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol, policy_dir, require_frozen
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.protocol.signing import Signer
from creditaudit.replay.compute import stored_numerics
from creditaudit.replay.policies.base import scoring_memo
from creditaudit.replay.records import TRAJECTORIES, TURN_SCHEMA
from creditaudit.replay.tasks import TaskEntry, environment_plugin, make_environment, prepare_tasks, task_for

__all__ = [
    "COLLECT_DIR",
    "TRAJECTORIES",
    "CollectSummary",
    "check_run_policy",
    "collect",
    "load_run_policy",
    "policy_files_in_run",
    "read_trajectories",
]

COLLECT_DIR = "collect"


@dataclass(frozen=True)
class CollectSummary:
    """What a collection produced (also written to ``collect/summary.json``)."""

    protocol_id: str
    n_tasks: int
    n_trajectories: int
    n_turns: int
    success_rate: float
    admissible_rate: float
    mean_turns: float
    determinism_trace_hash: str
    resumed_shards: int

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "resumed_shards"}


def check_run_policy(frozen: FrozenProtocol) -> Path:
    """The protocol's policy directory, refusing files whose hashes differ from the pinned ones
    (without loading the model)."""
    from creditaudit.protocol.lock import input_problems

    directory = policy_dir(frozen.protocol, frozen.path)
    if not directory.is_dir():
        raise InputError(f"policy directory {directory} not found: the protocol pins it; restore it or amend")
    problems = input_problems(frozen.protocol, frozen.path)
    if problems:
        raise CheckFailed(
            f"policy {directory}: its files differ from the hashes the protocol pins:\n  " + "\n  ".join(problems)
        )
    return directory


def load_run_policy(frozen: FrozenProtocol, **kwargs: Any):
    """Load the protocol's policy, refusing files whose hashes differ from the pinned ones; its
    prompts carry the protocol's environment's instruction (``policy.source: openai``: the served
    model, :func:`~creditaudit.replay.policies.server.load_server_policy`)."""
    from creditaudit.replay.policies.hf import load_policy

    directory = check_run_policy(frozen)
    section = frozen.protocol.policy
    if section.source == "openai":
        from creditaudit.replay.policies.server import load_server_policy

        # the served model: tokenizer from the pinned directory, responses cached in the run
        # directory so that a resumed stage sends no request twice
        return load_server_policy(
            directory, section.server, cache_dir=frozen.run_dir / "policy_cache", record_dir=frozen.run_dir,
            history_length=section.history_length, max_action_tokens=section.max_action_tokens,
            decoding=section.decoding, instruction=environment_plugin(frozen.protocol).prompt.instruction,
            list_admissible=section.list_admissible,
        )
    return load_policy(
        directory,
        dtype=section.dtype,
        history_length=section.history_length,
        max_action_tokens=section.max_action_tokens,
        decoding=section.decoding,
        instruction=environment_plugin(frozen.protocol).prompt.instruction,
        list_admissible=section.list_admissible,
        **kwargs,
    )


def _sample_tasks(frozen: FrozenProtocol, entries: list[TaskEntry]) -> list[TaskEntry]:
    n = frozen.protocol.collection.n_tasks
    if n > len(entries):
        raise InputError(
            f"collection.n_tasks is {n} but the task list has {len(entries)} tasks; lower it (amend) or "
            "generate more games"
        )
    order = SeedStreams(frozen.id).rng("collect/tasks").permutation(len(entries))[:n]
    return [entries[int(i)] for i in order]


def _rows(frozen: FrozenProtocol, index: int, entry: TaskEntry, rollouts, builder) -> dict[str, list]:
    from creditaudit.protocol.canonical import sha256_bytes
    from creditaudit.replay.policies.base import Turn

    columns: dict[str, list] = {f.name: [] for f in TURN_SCHEMA}
    for rollout in rollouts:
        g = rollout.key
        history: list[Turn] = []
        for record in rollout.turns:
            # the prompt text the policy saw, rebuilt from the same builder and checked against its hash
            prompt = builder.build(rollout.goal, record.observation, record.admissible, tuple(history))
            if sha256_bytes(prompt.encode("utf-8")) != record.prompt_sha256:
                raise RuntimeError(f"rollout {g} turn {record.turn}: the rebuilt prompt differs from the one sampled after")
            history.append(Turn(record.observation, record.action))
            values = {
                "protocol_id": frozen.id,
                "trajectory_id": f"{entry.task_id[:16]}-{g}",
                "task_index": index,
                "task_id": entry.task_id,
                "task_type": entry.task_type,
                "rollout": g,
                "turn": record.turn,
                "goal": rollout.goal,
                "observation": record.observation,
                "admissible": list(record.admissible),
                "state_signature": record.state_signature,
                "prompt": prompt,
                "prompt_sha256": record.prompt_sha256,
                "prompt_template_sha256": builder.template_hash,
                "action": record.action,
                "action_admissible": record.action_admissible,
                "token_logprobs": list(record.token_logprobs),
                "sum_logprob": record.sum_logprob,
                "mean_logprob": record.mean_logprob,
                "stop_reason": record.stop_reason,
                "seed": record.seed,
                "feedback": record.feedback,
                "done": record.done,
                "won": record.won,
                "outcome": rollout.outcome,
                "n_turns": len(rollout.turns),
            }
            for key, value in values.items():
                columns[key].append(value)
    return columns


def _read_shard(path: Path, protocol_id: str) -> pa.Table | None:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):
        return None  # a torn or corrupt shard is recollected (collection is deterministic)
    if table.schema != TURN_SCHEMA:
        return None
    ids = set(table.column("protocol_id").to_pylist())
    if ids and ids != {protocol_id}:
        raise InputError(
            f"{path}: shard stamped with protocol {sorted(ids)[0][:16]}…, not {protocol_id[:16]}…; a run "
            "directory never mixes protocols (use a new run directory)"
        )
    return table


def read_trajectories(frozen: FrozenProtocol) -> pa.Table:
    """The collected trajectories of this protocol (refusing another protocol's)."""
    return read_stamped_parquet(frozen.run_dir / TRAJECTORIES, frozen.id, what="trajectories",
                                command="creditaudit collect")


def _determinism(frozen: FrozenProtocol, task_entry: TaskEntry) -> dict[str, Any]:
    from creditaudit.replay.determinism import check_determinism, random_actions

    protocol = frozen.protocol
    task = task_for(task_entry, protocol, frozen.run_dir)
    probe = make_environment(protocol)
    try:
        actions = random_actions(probe, task, min(protocol.environment.horizon, 12),
                                 rng=SeedStreams(frozen.id).rng("collect/determinism"))
    finally:
        probe.close()
    # restoring by prefix replay resets the same instance again: check a second episode on each
    repeats = 1 if environment_plugin(protocol).capabilities.native_snapshot else 2
    report = check_determinism(lambda: make_environment(protocol), task, actions,
                               n_instances=protocol.collection.determinism_instances, repeats=repeats)
    return {"task_id": report.task_id, "n_instances": report.n_runs, "n_steps": report.n_steps,
            "trace_hash": report.trace_hash}


def collect(
    protocol_path: str | Path,
    signer: Signer,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    policy: Any = None,
) -> CollectSummary:
    """Collect trajectories under the frozen protocol at ``protocol_path`` (resumable).

    ``progress(phase, done, total)`` is called as tasks finish. ``policy`` overrides loading
    (tests); it must be the pinned policy.
    """
    frozen = require_frozen(protocol_path)
    protocol = frozen.protocol
    run_dir = frozen.run_dir
    done = _completed(frozen)
    if done is not None:
        return done
    entries = prepare_tasks(frozen, signer, progress=(lambda d, t: progress("games", d, t)) if progress else None)
    selected = _sample_tasks(frozen, entries)
    out_dir = run_dir / COLLECT_DIR
    shard_dir = out_dir / "shards"
    out_dir.mkdir(parents=True, exist_ok=True)

    provenance = out_dir / "provenance.json"
    if not provenance.exists():
        started = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        if started < frozen.lock.freeze_time:
            raise CheckFailed(f"the clock reads {started}, before the protocol's freeze time {frozen.lock.freeze_time}")
        provenance.write_text(json.dumps({"protocol_id": frozen.id, "collection_started": started}) + "\n")

    determinism_path = out_dir / "determinism.json"
    if determinism_path.exists():
        determinism = json.loads(determinism_path.read_text())
    else:
        determinism = _determinism(frozen, selected[0])
        determinism_path.write_bytes(canonical_bytes(determinism) + b"\n")

    if policy is None:
        policy = load_run_policy(frozen)
    builder = policy.prompt_builder
    streams = SeedStreams(frozen.id)
    group = protocol.collection.group_size
    temperature = protocol.policy.temperature
    env = make_environment(protocol)
    resumed = 0
    try:
        from creditaudit.replay.rollout import advance, start_rollout

        for index, entry in enumerate(selected):
            shard = shard_dir / f"{index:04d}.parquet"
            if shard.exists():
                table = _read_shard(shard, frozen.id)
                if table is not None:
                    resumed += 1
                    if progress:
                        progress("collect", index + 1, len(selected))
                    continue
            task = task_for(entry, protocol, run_dir)
            obs = env.reset(task)
            rollouts = [
                start_rollout(env, g, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
                for g in range(group)
            ]
            # One scoring memory per task: a (prompt, command) pair met again at a later turn (a
            # policy that loops, rollouts that meet) gets the numbers it got first, not a rescoring
            # rounded by another batch, so equal turns record equal log-probabilities.
            with stored_numerics(), scoring_memo(policy):
                advance(
                    env, policy, builder, rollouts,
                    seed_for=lambda r, tid=entry.task_id: streams.seed_int(f"collect/rollout/{tid}/{r.key}/{r.steps}"),
                    temperature=temperature,
                    max_action_tokens=protocol.policy.max_action_tokens,
                )
            table = pa.Table.from_pydict(_rows(frozen, index, entry, rollouts, builder), schema=TURN_SCHEMA)
            write_parquet_atomic(table, shard)
            if progress:
                progress("collect", index + 1, len(selected))
    finally:
        env.close()

    # Read every shard back from disk so a resumed run concatenates exactly what a fresh run does.
    table = pa.concat_tables([pq.read_table(shard_dir / f"{i:04d}.parquet") for i in range(len(selected))])
    table = table.combine_chunks()
    outcomes = {}
    for tid, outcome in zip(table.column("trajectory_id").to_pylist(), table.column("outcome").to_pylist()):
        outcomes[tid] = outcome
    n_turns = table.num_rows
    admissible = sum(table.column("action_admissible").to_pylist())
    summary = CollectSummary(
        protocol_id=frozen.id,
        n_tasks=len(selected),
        n_trajectories=len(outcomes),
        n_turns=n_turns,
        success_rate=sum(outcomes.values()) / len(outcomes),
        admissible_rate=admissible / n_turns if n_turns else float("nan"),
        mean_turns=n_turns / len(outcomes),
        determinism_trace_hash=determinism["trace_hash"],
        resumed_shards=resumed,
    )
    lock_path = frozen.path.with_name(frozen.path.stem + ".lock.json")
    policy_files = policy_files_in_run(frozen)
    with StageLink(
        run_dir, "collect", frozen.id, signer,
        command=["creditaudit", "collect"],
        parameters={"n_tasks": len(selected), "group_size": group, "temperature": temperature},
        inputs=[frozen.path, lock_path, run_dir / "tasks.json", *policy_files],
    ) as link:
        write_parquet_atomic(table, run_dir / TRAJECTORIES)
        (out_dir / "summary.json").write_bytes(canonical_bytes(summary.to_dict()) + b"\n")
        for name in (TRAJECTORIES, f"{COLLECT_DIR}/summary.json", f"{COLLECT_DIR}/determinism.json",
                     f"{COLLECT_DIR}/provenance.json"):
            link.add_output(run_dir / name)
    shutil.rmtree(shard_dir, ignore_errors=True)  # the attested concatenation holds every row
    return summary


def _completed(frozen: FrozenProtocol) -> CollectSummary | None:
    """The summary of a finished collection whose outputs still match their link record."""
    from creditaudit.protocol.canonical import sha256_file
    from creditaudit.protocol.links import LINKS_DIR, read_link

    run_dir = frozen.run_dir
    summary_path = run_dir / COLLECT_DIR / "summary.json"
    if not (summary_path.is_file() and (run_dir / TRAJECTORIES).is_file()):
        return None
    links = sorted((run_dir / LINKS_DIR).glob("*-collect.link.json"))
    if not links:
        return None
    products = {p["name"]: p["digest"]["sha256"] for p in read_link(links[-1]).products}
    for name in (TRAJECTORIES, f"{COLLECT_DIR}/summary.json"):
        if products.get(name) != sha256_file(run_dir / name):
            return None
    shutil.rmtree(run_dir / COLLECT_DIR / "shards", ignore_errors=True)  # left by a stop after the attestation
    data = json.loads(summary_path.read_text())
    return CollectSummary(**data, resumed_shards=frozen.protocol.collection.n_tasks)


def policy_files_in_run(frozen: FrozenProtocol) -> list[Path]:
    """The pinned policy files that lie inside the run directory (a stage's link inputs); none for
    a policy kept outside it, which the protocol pins as an input of its own."""
    directory = policy_dir(frozen.protocol, frozen.path).resolve()
    try:
        directory.relative_to(frozen.run_dir.resolve())
    except ValueError:
        return []  # a policy outside the run directory is an input pinned by the protocol itself
    pins = {**frozen.protocol.policy.model_files, **frozen.protocol.policy.tokenizer_files}
    return [directory / name for name in sorted(pins)]
