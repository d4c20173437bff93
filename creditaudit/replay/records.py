"""What collection records: one :class:`TurnRecord` per decision, grouped into :class:`Trajectory`
objects, stored as ``collect/trajectories.parquet`` (:data:`TURN_SCHEMA`, one row per turn).

Rollouts (:mod:`creditaudit.replay.rollout`) create the records, collection
(:mod:`creditaudit.replay.collect`) writes them with their trajectory's columns, and every later
stage reads them back with :func:`trajectories_from_table`. Every column of the file carries a
one-line description as Arrow field metadata (``description``), so the file can be read without
creditaudit::

    import pyarrow.parquet as pq
    schema = pq.read_schema("collect/trajectories.parquet")
    {f.name: f.metadata[b"description"].decode() for f in schema}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

from creditaudit.errors import InputError

__all__ = ["TRAJECTORIES", "TURN_SCHEMA", "TurnRecord", "Trajectory", "trajectories_from_table"]

TRAJECTORIES = "collect/trajectories.parquet"
"""Run-relative path of the collected trajectories."""


def _field(name: str, type_: pa.DataType, nullable: bool, description: str) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"description": description})


#: Columns of ``collect/trajectories.parquet``: one row per turn, trajectories in collection order.
TURN_SCHEMA = pa.schema(
    [
        _field("protocol_id", pa.string(), False, "SHA-256 id of the frozen protocol the collection ran under."),
        _field("trajectory_id", pa.string(), False,
               "Trajectory id: the first 16 hex digits of task_id, a hyphen, and the rollout index."),
        _field("task_index", pa.int32(), False,
               "Position of the task in the collection's sample of the task list (stream collect/tasks)."),
        _field("task_id", pa.string(), False,
               "Task id: SHA-256 of the game file's bytes (ALFWorld) or of the task's parameters (planted)."),
        _field("task_type", pa.string(), False, "Task family: an ALFRED task type, or 'planted'."),
        _field("rollout", pa.int32(), False, "Index of the rollout within its task's group (0 .. group_size - 1)."),
        _field("turn", pa.int32(), False, "Decision index within the trajectory (0 .. n_turns - 1)."),
        _field("goal", pa.string(), False, "The task goal as the environment states it (same on every turn)."),
        _field("observation", pa.string(), False,
               "What the agent saw before acting: the opening text at turn 0, else the previous feedback."),
        _field("admissible", pa.list_(pa.string()), False, "Commands admissible in that state, as the environment lists them."),
        _field("state_signature", pa.string(), False,
               "SHA-256 state signature of the environment before the action (what replay restores and checks)."),
        _field("prompt", pa.string(), False,
               "The prompt text the policy sampled the action after (goal, history window, observation, admissible "
               "commands, as the prompt template writes them)."),
        _field("prompt_sha256", pa.string(), False, "SHA-256 of the UTF-8 prompt the action was sampled after."),
        _field("prompt_template_sha256", pa.string(), False,
               "SHA-256 of the prompt template's settings (the policy's PromptBuilder.template_hash)."),
        _field("action", pa.string(), False, "The action the policy sampled (the command sent to the environment)."),
        _field("action_admissible", pa.bool_(), False, "Whether the action is one of the admissible commands."),
        _field("token_logprobs", pa.list_(pa.float64()), False,
               "Natural-log probability of each action token under the policy at temperature 1."),
        _field("sum_logprob", pa.float64(), False, "Sum of token_logprobs (exactly rounded, math.fsum)."),
        _field("mean_logprob", pa.float64(), True, "sum_logprob divided by the number of tokens; null for no tokens."),
        _field("stop_reason", pa.string(), False,
               "Why the action ended: eos, newline, max_tokens, or candidate (drawn among the admissible commands)."),
        _field("seed", pa.int64(), False, "Seed of the action's draw (stream collect/rollout/<task_id>/<rollout>/<turn>)."),
        _field("feedback", pa.string(), False, "The environment's answer to the action."),
        _field("done", pa.bool_(), False, "The episode ended with this action (won, lost, or the horizon reached)."),
        _field("won", pa.bool_(), False, "The goal is reached after this action."),
        _field("outcome", pa.int8(), False, "Terminal outcome of the trajectory, 0 or 1 (same on every turn)."),
        _field("n_turns", pa.int32(), False, "Number of turns of the trajectory (same on every turn)."),
    ]
)


@dataclass(frozen=True)
class TurnRecord:
    """One decision: what the agent saw, what it sampled, and what followed (the per-turn columns
    of :data:`TURN_SCHEMA`).

    A rollout records every field; records built by hand (tests, a training arm's signal inputs)
    may leave the last six at their defaults, which no credit family reads.

    Attributes
    ----------
    turn : int
        Decision index within the trajectory (0, 1, ...).
    observation : str
        What the agent saw before acting.
    admissible : tuple of str
        The admissible commands of that state.
    action : str
        The action taken.
    token_logprobs : tuple of float
        The action tokens' log-probabilities under the policy (empty for a forced action).
    mean_logprob : float or None
        Their mean (``None`` for no tokens).
    feedback : str
        The environment's answer to the action.
    state_signature : str
        The environment's state signature before the action.
    prompt_sha256 : str
        SHA-256 of the prompt (``""`` for a forced action).
    stop_reason : str
        Why the action ended (``"forced"`` for an action a replay arm imposes).
    seed : int
        Seed of the action's draw (-1 for a forced action).
    done, won : bool
        The episode ended / the goal is reached after the action.
    """

    turn: int
    observation: str
    admissible: tuple[str, ...]
    action: str
    token_logprobs: tuple[float, ...]
    mean_logprob: float | None
    feedback: str
    state_signature: str = ""
    prompt_sha256: str = ""
    stop_reason: str = ""
    seed: int = -1
    done: bool = False
    won: bool = False

    @property
    def sum_logprob(self) -> float:
        """Exactly rounded sum of :attr:`token_logprobs` (``math.fsum``)."""
        return math.fsum(self.token_logprobs)

    @property
    def action_admissible(self) -> bool:
        """Whether :attr:`action` is one of :attr:`admissible`."""
        return self.action in self.admissible


@dataclass(frozen=True)
class Trajectory:
    """One collected trajectory: its task, outcome and turns in order (``turn`` = 0..n-1)."""

    trajectory_id: str
    task_id: str
    rollout: int
    goal: str
    outcome: int
    turns: tuple[TurnRecord, ...]

    @property
    def won(self) -> bool:
        return self.outcome == 1

    @property
    def final_observation(self) -> str:
        """What the environment answered to the last action (the final state's text)."""
        return self.turns[-1].feedback if self.turns else ""

    def __len__(self) -> int:
        return len(self.turns)


def trajectories_from_table(table: pa.Table, *, source: str = TRAJECTORIES) -> list[Trajectory]:
    """Group the collected turn table into trajectories (order of first appearance).

    Raises
    ------
    InputError
        When a column is missing, or a trajectory's turns are not numbered 0..n-1, or its
        outcome or task differs between rows.
    """
    needed = ["trajectory_id", "task_id", "rollout", "turn", "goal", "observation", "admissible", "action",
              "token_logprobs", "mean_logprob", "feedback", "outcome", "state_signature", "prompt_sha256",
              "stop_reason", "seed", "done", "won"]
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise InputError(f"{source}: missing column(s) {', '.join(missing)}; recollect with this version")
    cols = {c: table.column(c).to_pylist() for c in needed}
    rows: dict[str, list[int]] = {}
    for i, tid in enumerate(cols["trajectory_id"]):
        rows.setdefault(tid, []).append(i)
    out = []
    for tid, idx in rows.items():
        idx = sorted(idx, key=lambda i: cols["turn"][i])
        turns_seen = [cols["turn"][i] for i in idx]
        if turns_seen != list(range(len(idx))):
            raise InputError(
                f"{source}: trajectory {tid!r} has turns {turns_seen[:8]}…, not 0..{len(idx) - 1}; the table "
                "is damaged — recollect"
            )
        for key in ("outcome", "task_id", "goal"):
            values = {cols[key][i] for i in idx}
            if len(values) != 1:
                raise InputError(f"{source}: trajectory {tid!r} has more than one `{key}` ({sorted(map(str, values))})")
        turns = tuple(
            TurnRecord(
                turn=int(cols["turn"][i]),
                observation=cols["observation"][i],
                admissible=tuple(cols["admissible"][i]),
                action=cols["action"][i],
                token_logprobs=tuple(float(v) for v in cols["token_logprobs"][i]),
                mean_logprob=None if cols["mean_logprob"][i] is None else float(cols["mean_logprob"][i]),
                feedback=cols["feedback"][i],
                state_signature=cols["state_signature"][i],
                prompt_sha256=cols["prompt_sha256"][i],
                stop_reason=cols["stop_reason"][i],
                seed=int(cols["seed"][i]),
                done=bool(cols["done"][i]),
                won=bool(cols["won"][i]),
            )
            for i in idx
        )
        first = idx[0]
        out.append(Trajectory(tid, cols["task_id"][first], int(cols["rollout"][first]), cols["goal"][first],
                              int(cols["outcome"][first]), turns))
    return out
