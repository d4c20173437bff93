"""ProVer segment credit: propose one pivotal segment, verify it by executed boundary replay, credit it.

For every task group of ``G`` rollouts (the family ``prover``):

Eligibility
    A group is eligible when ``0 < successes < 0.5 G``; every turn of an ineligible group abstains
    (``ineligible_group``). A group whose size is not ``G`` abstains (``incomplete_group``).

Propose
    The source is the group's shortest successful trajectory ``tau+`` (ties: the lowest rollout
    index). A candidate segment is ``(l, r)`` with ``0 <= l <= r <= n - 2`` and
    ``r - l + 1 <= max_segment``: contiguous, at most ``max_segment`` turns, never the terminal
    turn (so ``s_post`` is a live state with continuations). Proposers:

    * ``judge`` -- a judge model (the audited policy, constrained choice) reads the task, a
      compact preview of every *failed* trajectory of the group (the contrast the paper's
      ``search_trajectory`` tool gives) and the successful trajectory with turn indices, and
      scores every candidate segment as a continuation of the cue ``pivotal segment:`` by the
      joint log-probability of the segment's actions (the ``get_segment`` step as a choice among
      candidates, so even a tiny model returns a valid segment). The highest-scoring candidate is
      proposed (ties: shortest, then earliest). The joint log-probability favours short segments,
      as the paper's judges do.
    * ``random`` -- a uniform draw over the candidates from the named stream
      ``signals/prover/<trajectory>/random``.
    * ``oracle`` -- every boundary state ``s_0..s_{n-1}`` of ``tau+`` is measured with ``K``
      continuations (stream ``.../search/...``) and the candidate with the largest measured
      ``Delta`` is proposed (ties: shortest, then earliest); it is then *re-measured* with the
      verification stream, so its reported ``Delta`` carries no winner's-curse selection bias.

Verify
    The factual prefix of ``tau+`` is replayed on a fresh ``env.reset(task)``; every state's
    signature is checked against the one recorded at collection. ``s_pre = s_l`` and
    ``s_post = s_{r+1}`` are restored (and checked again) and ``K`` continuations are rolled out
    from each with the audited policy at the protocol's temperature, seeded from
    ``signals/prover/<trajectory>/verify/state<t>/<k>/<step>`` -- the same boundary state gets the
    same seeds whichever proposer chose it (common random numbers across proposers). Then

    .. math:: \\hat\\Delta = \\bar R_{post} - \\bar R_{pre},\\qquad
              \\operatorname{Var}(\\hat\\Delta) = \\frac{p_{pre}(1-p_{pre}) + p_{post}(1-p_{post})}{K}.

    A boundary whose restored signature differs from the recorded one (or whose prefix diverged)
    is an invalid measurement: the source trajectory abstains (``restore_mismatch``).

Credit
    ``lambda * max(Delta, 0)`` on the segment's turns of ``tau+``; the other turns of ``tau+`` get
    0 (the paper leaves their GRPO advantage unchanged). The *other* trajectories of an eligible
    group abstain (``not_verified_trajectory``): ProVer adds nothing to them in the paper, and the
    boundary measurement says nothing about their turns, so writing 0 would claim "no effect"
    where nothing was measured (docs/design.md §3). The credit column is the ProVer correction only (the
    GRPO base advantage is the ``grpo`` family); a rejected proposal (``Delta <= 0``) is a valid
    measurement and credits 0.

Diagnostics: one row per group and proposer (the proposal, its boundaries, ``p_pre``, ``p_post``,
``Delta``, ``Var``, accepted), and the report's acceptance rate and mean segment length. The
credit is ``proposer``'s; the proposers named in ``compare`` run on the same groups with the same
verification seeds and only add their rows: the paper's judge-ablation table, kept in the run so
that the ledger recomputes it (entries ``prover.<signal>.<proposer>.*``). :func:`proposer_table`
computes the same table outside a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field
import pandas as pd
import pyarrow as pa

from creditaudit.errors import InputError
from creditaudit.protocol.fields import ADDED_LATER
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, Trajectory, credit_frame

__all__ = [
    "PROPOSERS",
    "is_eligible",
    "candidate_segments",
    "segment_estimate",
    "SegmentEstimate",
    "source_trajectory",
    "pick_segment",
    "BoundaryMeter",
    "ProverFamily",
    "run_prover",
    "proposer_table",
    "table_row",
    "replay_inputs",
]

PROPOSERS = ("judge", "random", "oracle")

def _squash(text: str) -> str:
    return " ".join(str(text).split())


# ------------------------------------------------------------------------------ pure pieces


def is_eligible(successes: int, group_size: int) -> bool:
    """ProVer's eligibility: ``0 < successes < 0.5 * group_size``.

    Examples
    --------
    >>> [is_eligible(s, 8) for s in (0, 1, 3, 4, 8)]
    [False, True, True, False, False]
    """
    if group_size < 1:
        raise ValueError(f"`group_size` must be >= 1; got {group_size!r}")
    return 0 < successes < 0.5 * group_size


def candidate_segments(n_turns: int, max_segment: int) -> list[tuple[int, int]]:
    """Every contiguous non-terminal segment ``(l, r)`` (inclusive) of at most ``max_segment`` turns.

    Ordered by start, then length. The terminal turn ``n_turns - 1`` is never in a segment.

    Examples
    --------
    >>> candidate_segments(4, 2)
    [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2)]
    >>> candidate_segments(1, 4)
    []
    """
    if max_segment < 1:
        raise ValueError(f"`max_segment` must be >= 1; got {max_segment!r}")
    last = n_turns - 2
    return [(l, r) for l in range(0, last + 1) for r in range(l, min(l + max_segment - 1, last) + 1)]


@dataclass(frozen=True)
class SegmentEstimate:
    """The boundary-difference estimate of one segment.

    Attributes
    ----------
    p_pre, p_post : float
        Mean outcome of the continuations from ``s_pre`` and from ``s_post``.
    delta : float
        ``p_post - p_pre``.
    var : float
        ``(p_pre (1 - p_pre) + p_post (1 - p_post)) / K``.
    k : int
        Continuations per boundary.
    """

    p_pre: float
    p_post: float
    delta: float
    var: float
    k: int

    @property
    def accepted(self) -> bool:
        return self.delta > 0


def segment_estimate(pre: Sequence[int], post: Sequence[int]) -> SegmentEstimate:
    """``Delta = mean(post) - mean(pre)`` and ProVer's variance of it (``K`` outcomes per boundary).

    Examples
    --------
    >>> e = segment_estimate([1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0])
    >>> e.delta, e.var
    (0.25, 0.04296875)
    """
    a, b = np.asarray(pre, dtype=float), np.asarray(post, dtype=float)
    if a.ndim != 1 or a.size == 0 or a.size != b.size:
        raise ValueError("`pre` and `post` must be non-empty 1-D sequences of the same length K")
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        raise ValueError("`pre` and `post` must hold binary outcomes (0 or 1)")
    k = a.size
    p_pre, p_post = float(a.mean()), float(b.mean())
    return SegmentEstimate(p_pre, p_post, p_post - p_pre, (p_pre * (1 - p_pre) + p_post * (1 - p_post)) / k, k)


def source_trajectory(group: Sequence[Trajectory]) -> Trajectory | None:
    """The shortest successful trajectory of a group (ties: lowest rollout index), or None."""
    won = [t for t in group if t.won]
    return min(won, key=lambda t: (len(t), t.rollout, t.trajectory_id)) if won else None


def pick_segment(scores: dict[tuple[int, int], float]) -> tuple[int, int]:
    """Highest score; ties: shortest, then earliest."""
    return min(scores, key=lambda s: (-scores[s], s[1] - s[0], s[0]))


# ------------------------------------------------------------------------------ measurement


@dataclass
class _Boundary:
    snapshot: Any
    signature: str
    observation: str
    admissible: tuple[str, ...]
    history: list
    ok: bool


@dataclass
class BoundaryMeter:
    """Executed continuations from the recorded states of one trajectory.

    The factual prefix is replayed on a fresh ``env.reset(task)`` and every state ``s_t`` is
    snapshotted and checked against the recorded ``state_signature`` (and observation); a state
    after a divergence is unusable (``ok`` False).

    Parameters
    ----------
    env, policy : the live environment and the audited policy
    task : Task
    trajectory : Trajectory
    signatures : sequence of str
        The recorded ``state_signature`` of every turn.
    protocol_id : str
    temperature : float
    max_action_tokens : int or None
    """

    env: Any
    policy: Any
    task: Any
    trajectory: Trajectory
    signatures: Sequence[str]
    protocol_id: str
    temperature: float
    max_action_tokens: int | None = None
    boundaries: list[_Boundary] = field(default_factory=list)
    goal: str = ""
    restore_checks: int = 0
    rollouts: int = 0

    def __post_init__(self) -> None:
        from creditaudit.replay.policies import Turn

        obs = self.env.reset(self.task)
        self.goal = obs.goal
        text, admissible, history, diverged = obs.text, tuple(obs.admissible), [], False
        for rec in self.trajectory.turns:
            sig = self.env.state_signature()
            ok = (not diverged and sig == self.signatures[rec.turn]
                  and _squash(text) == _squash(rec.observation))
            diverged = diverged or not ok
            if ok:
                self.boundaries.append(_Boundary(self.env.snapshot(), sig, text, admissible, list(history), True))
            else:
                self.boundaries.append(_Boundary(None, "", "", (), [], False))
                continue
            result = self.env.step(rec.action)
            history.append(Turn(text, rec.action))
            text, admissible = result.text, tuple(result.admissible)
            if result.done and rec.turn < len(self.trajectory) - 1:
                diverged = True

    def measure(self, states: Sequence[int], k: int, stream: str) -> dict[int, list[int] | None]:
        """``k`` continuation outcomes from each state ``s_t`` (``None`` where the state cannot be
        restored to its recorded signature); seeds ``<stream>/state<t>/<k>/<step>``.

        The continuations of one call advance in lockstep through one transition cache and one
        scoring memory (as the replay's arms do): continuations that meet a state another has
        stepped from reuse that transition, and a decision point's scores are computed once."""
        from creditaudit.protocol.seeds import SeedStreams
        from creditaudit.replay.policies.base import scoring_memo
        from creditaudit.replay.rollout import Rollout, TransitionCache, advance

        streams = SeedStreams(self.protocol_id)
        out: dict[int, list[int] | None] = {}
        rollouts, start = [], {}
        for t in sorted(set(states)):
            b = self.boundaries[t]
            ok = b.ok
            if ok:
                self.env.restore(b.snapshot)
                self.restore_checks += 1
                ok = self.env.state_signature() == self.signatures[t]
            if not ok:
                out[t] = None
                continue
            for j in range(k):
                r = Rollout(key=(t, j), goal=self.goal, snapshot=b.snapshot, signature=b.signature,
                            observation=b.observation, admissible=b.admissible, history=list(b.history), steps=t)
                start[(t, j)] = t
                rollouts.append(r)

        def seed_for(r: Any) -> int:
            t, j = r.key
            return streams.seed_int(f"{stream}/state{t}/{j}/{r.steps - start[r.key]}")

        if rollouts:
            with scoring_memo(self.policy):
                advance(self.env, self.policy, self.policy.prompt_builder, rollouts, seed_for=seed_for,
                        temperature=self.temperature, max_action_tokens=self.max_action_tokens, record=False,
                        cache=TransitionCache())
        self.rollouts += len(rollouts)
        for r in rollouts:
            out.setdefault(r.key[0], []).append(r.outcome)
        return out


# ------------------------------------------------------------------------------ the run


def replay_inputs(run_dir: Path, protocol: Any) -> list[Path]:
    """Files a replaying family reads besides the trajectories and the policy: the task list and
    (generated game files) those files -- the signals stage hashes them into its link record."""
    import json

    from creditaudit.replay.tasks import TASKS_FILE

    path = run_dir / TASKS_FILE
    out = [path]
    from creditaudit.replay.tasks import environment_plugin

    own_tasks = environment_plugin(protocol).capabilities.generates_tasks
    if not own_tasks and protocol.environment.source == "generated" and path.is_file():
        try:
            tasks = json.loads(path.read_text("utf-8"))["tasks"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}: unreadable task list ({exc})") from None
        out += [run_dir / t["path"] for t in tasks if t.get("path")]
    return out


@dataclass(frozen=True)
class _RunRef:
    run_dir: Path
    id: str


def recorded_signatures(context: SignalContext) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Recorded state signatures per trajectory and the task entries by id."""
    from creditaudit.artifacts import read_stamped_parquet
    from creditaudit.replay.collect import TRAJECTORIES
    from creditaudit.replay.tasks import TASKS_FILE, read_tasks

    table = read_stamped_parquet(context.run_dir / TRAJECTORIES, context.protocol_id, what="trajectories",
                                 command="creditaudit collect")
    if "state_signature" not in table.column_names:
        raise InputError(f"{context.run_dir / TRAJECTORIES}: missing column `state_signature`; recollect")
    sigs: dict[str, dict[int, str]] = {}
    for tid, turn, sig in zip(table.column("trajectory_id").to_pylist(), table.column("turn").to_pylist(),
                              table.column("state_signature").to_pylist()):
        sigs.setdefault(tid, {})[int(turn)] = str(sig)
    signatures = {tid: [by[t] for t in sorted(by)] for tid, by in sigs.items()}
    entries = {e.task_id: e for e in read_tasks(_RunRef(context.run_dir, context.protocol_id))}
    for traj in context.trajectories:
        if traj.task_id not in entries:
            raise InputError(f"{context.run_dir / TASKS_FILE}: task {traj.task_id[:16]}… of trajectory "
                             f"{traj.trajectory_id!r} is not in the task list; the run directory is inconsistent")
        if len(signatures.get(traj.trajectory_id, [])) != len(traj):
            raise InputError(f"{context.run_dir / TRAJECTORIES}: trajectory {traj.trajectory_id!r} has no recorded "
                             "state signature for every turn; recollect")
    return signatures, entries


_DIAG_FIELDS = {
    "task_id": pa.string(), "proposer": pa.string(), "group_size": pa.int32(), "successes": pa.int32(),
    "eligible": pa.bool_(), "source_trajectory_id": pa.string(), "n_turns": pa.int32(),
    "n_candidates": pa.int32(), "segment_start": pa.int32(), "segment_end": pa.int32(),
    "segment_length": pa.int32(), "p_pre": pa.float64(), "p_post": pa.float64(), "delta": pa.float64(),
    "var": pa.float64(), "accepted": pa.bool_(), "credit": pa.float64(), "status": pa.string(),
    "prompt_sha256": pa.string(), "restore_checks": pa.int32(), "rollouts": pa.int32(),
}


def run_prover(
    context: SignalContext, *, proposer: str, group_size: int = 8, continuations: int = 8, max_segment: int = 4,
    credit_scale: float = 1.0, env: Any = None,
) -> tuple[dict, dict, pd.DataFrame]:
    """Propose, verify and credit every task group with one proposer.

    Returns
    -------
    (values, reasons, diagnostics)
        Credit by ``(trajectory_id, turn)``, abstention reasons by the same key, and one
        diagnostics row per task group (columns of :data:`_DIAG_FIELDS`).
    """
    from creditaudit.replay.tasks import make_environment, task_for

    from creditaudit.signals.families.prover_proposers import ProposalRequest, make_proposer

    chooser = make_proposer(proposer)
    protocol = context.protocol
    groups: dict[str, list[Trajectory]] = {}
    for traj in context.trajectories:
        groups.setdefault(traj.task_id, []).append(traj)
    values: dict[tuple[str, int], float] = {}
    reasons: dict[tuple[str, int], str] = {}
    rows: list[dict[str, Any]] = []

    def abstain(trajs: Sequence[Trajectory], why: str) -> None:
        for t in trajs:
            for rec in t.turns:
                reasons[(t.trajectory_id, rec.turn)] = why

    eligible = {tid: len(g) == group_size and is_eligible(sum(t.won for t in g), group_size)
                for tid, g in groups.items()}
    signatures, entries = {}, {}
    own_env = False
    if any(eligible.values()):
        signatures, entries = recorded_signatures(context)
        if env is None:
            env, own_env = make_environment(protocol), True
    policy_section = getattr(protocol, "policy", None)
    temperature = getattr(policy_section, "temperature", None)
    max_tokens = getattr(policy_section, "max_action_tokens", None)
    try:
        for done, (task_id, group) in enumerate(groups.items(), start=1):
            successes = sum(t.won for t in group)
            row: dict[str, Any] = {k: None for k in _DIAG_FIELDS}
            row.update(task_id=task_id, proposer=proposer, group_size=len(group), successes=successes,
                       eligible=bool(eligible[task_id]), restore_checks=0, rollouts=0)
            rows.append(row)
            if len(group) != group_size:
                abstain(group, "incomplete_group")
                row["status"] = "incomplete_group"
                continue
            if not eligible[task_id]:
                abstain(group, "ineligible_group")
                row["status"] = "ineligible_group"
                continue
            source = source_trajectory(group)
            assert source is not None
            others = [t for t in group if t is not source]
            abstain(others, "not_verified_trajectory")
            cands = candidate_segments(len(source), max_segment)
            row.update(source_trajectory_id=source.trajectory_id, n_turns=len(source), n_candidates=len(cands))
            if not cands:
                abstain([source], "no_segment_candidates")
                row["status"] = "no_segment_candidates"
                continue
            meter = BoundaryMeter(env, context.policy(), task_for(entries[task_id], protocol, context.run_dir), source,
                                  signatures[source.trajectory_id], context.protocol_id, temperature, max_tokens)
            base = f"signals/prover/{source.trajectory_id}"
            proposal = chooser.propose(ProposalRequest(context, source, [t for t in group if not t.won], cands, meter,
                                                       base, continuations))
            segment, status = proposal.segment, proposal.status
            if proposal.prompt_sha256 is not None:
                row["prompt_sha256"] = proposal.prompt_sha256
            if segment is not None and segment not in cands:
                segment, status = None, "invalid_proposal"
            if segment is not None:
                l, r = segment
                row.update(segment_start=l, segment_end=r, segment_length=r - l + 1)
                got = meter.measure([l, r + 1], continuations, f"{base}/verify")
                if got.get(l) is None or got.get(r + 1) is None:
                    status = "restore_mismatch"
                else:
                    est = segment_estimate(got[l], got[r + 1])
                    credit = credit_scale * max(est.delta, 0.0)
                    row.update(p_pre=est.p_pre, p_post=est.p_post, delta=est.delta, var=est.var,
                               accepted=est.accepted, credit=credit)
                    for rec in source.turns:
                        values[(source.trajectory_id, rec.turn)] = credit if l <= rec.turn <= r else 0.0
            row.update(status=status, restore_checks=meter.restore_checks, rollouts=meter.rollouts)
            if status != "measured":
                abstain([source], status)
            context.report(f"prover:{proposer}", done, len(groups))
    finally:
        if own_env:
            env.close()
    return values, reasons, pd.DataFrame(rows, columns=list(_DIAG_FIELDS))


def _diagnostics_table(frame: pd.DataFrame) -> pa.Table:
    return pa.table({k: pa.array([None if (isinstance(v, float) and math.isnan(v)) else v for v in frame[k]], t)
                     for k, t in _DIAG_FIELDS.items()})


def _summary(frame: pd.DataFrame) -> dict[str, Any]:
    measured = frame[frame["status"] == "measured"]
    lengths = frame["segment_length"].dropna()
    return {
        "n_groups": int(len(frame)),
        "n_eligible": int(frame["eligible"].sum()),
        "n_proposals": int(frame["segment_length"].notna().sum()),
        "n_measured": int(len(measured)),
        "n_accepted": int(measured["accepted"].astype(bool).sum()),
        "acceptance_rate": float(measured["accepted"].astype(bool).mean()) if len(measured) else None,
        "mean_segment_length": float(lengths.astype(float).mean()) if len(lengths) else None,
        "mean_delta": float(measured["delta"].astype(float).mean()) if len(measured) else None,
        "status_counts": {str(k): int(v) for k, v in sorted(frame["status"].value_counts().items())},
    }


class ProverFamily(FamilyBase):
    """The ``prover`` credit family with the protocol's constants: a nonnegative segment credit
    (``neutral = 0``) measured by executing the environment with the audited policy."""

    neutral = 0.0
    needs = frozenset({"policy", "environment"})

    def __init__(self, *, name: str, group_size: int = 8, continuations: int = 8, max_segment: int = 4,
                 credit_scale: float = 1.0, proposer: str = "judge", compare: Sequence[str] = ()):
        self.compare = tuple(p for p in dict.fromkeys(compare) if p != proposer)
        self.uses = tuple(("proposer", p) for p in (proposer, *self.compare))
        self.name = name
        self.group_size = group_size
        self.continuations = continuations
        self.max_segment = max_segment
        self.credit_scale = credit_scale
        self.proposer = proposer

    def _check(self, context: SignalContext) -> None:
        collected = getattr(getattr(context.protocol, "collection", None), "group_size", None)
        if collected is not None and collected != self.group_size:
            raise InputError(
                f"protocol: signal {self.name!r} has `group_size` {self.group_size} but `collection.group_size` is "
                f"{collected}; ProVer's eligibility is defined on the collected groups — make them equal (amend)"
            )

    def compute(self, context: SignalContext) -> FamilyOutput:
        self._check(context)
        values, reasons, frame = run_prover(context, proposer=self.proposer, group_size=self.group_size,
                                            continuations=self.continuations, max_segment=self.max_segment,
                                            credit_scale=self.credit_scale)
        report = {"proposer": self.proposer, "group_size": self.group_size, "continuations": self.continuations,
                  "max_segment": self.max_segment, "credit_scale": self.credit_scale, **_summary(frame)}
        if self.compare:  # the same groups and verification seeds; the credit stays the proposer's
            frames = [frame] + [run_prover(context, proposer=p, group_size=self.group_size,
                                           continuations=self.continuations, max_segment=self.max_segment,
                                           credit_scale=self.credit_scale)[2] for p in self.compare]
            report["proposer_table"] = [table_row(p, f) for p, f in zip((self.proposer, *self.compare), frames)]
            frame = pd.concat(frames, ignore_index=True)
        from creditaudit.signals.families.prover_proposers import make_proposer

        template = getattr(make_proposer(self.proposer), "template_sha256", None)
        if callable(template):  # a template that depends on the environment's words
            template = template(context)
        if template is not None:
            report["judge_prompt_template_sha256"] = template
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), _diagnostics_table(frame), report)


def proposer_table(context: SignalContext, proposers: Sequence[str] = PROPOSERS, *, group_size: int = 8,
                   continuations: int = 8, max_segment: int = 4, env: Any = None) -> pd.DataFrame:
    """The judge-ablation table: acceptance rate (``Delta > 0``) and mean segment length per proposer,
    every proposer on the same groups with the same verification seeds.

    Returns
    -------
    pandas.DataFrame
        One row per proposer: ``proposer, n_groups, n_eligible, n_measured, n_accepted,
        acceptance_rate, mean_segment_length, mean_delta``. (The paper, Qwen3.5-4B: judges
        58.5-72.4% acceptance and 1.03-1.45 turns; random 19.5% and 2.38 turns.)
    """
    return pd.DataFrame([table_row(p, run_prover(context, proposer=p, group_size=group_size,
                                                 continuations=continuations, max_segment=max_segment, env=env)[2])
                         for p in proposers])


def table_row(proposer: str, frame: pd.DataFrame) -> dict[str, Any]:
    """One proposer's row of the judge-ablation table from its diagnostics rows (:func:`proposer_table`;
    the ledger's ``prover`` producer reads the stored rows with it)."""
    s = _summary(frame)
    return {"proposer": proposer, **{k: s[k] for k in ("n_groups", "n_eligible", "n_measured", "n_accepted",
                                                       "acceptance_rate", "mean_segment_length", "mean_delta")}}


def prover_family(
    *,
    name: str,
    group_size: Annotated[int, Field(ge=2)] = 8,
    continuations: Annotated[int, Field(ge=1)] = 8,
    max_segment: Annotated[int, Field(ge=1)] = 4,
    credit_scale: Annotated[float, Field(gt=0.0)] = 1.0,
    proposer: str = "judge",
    compare: Annotated[tuple[str, ...], ADDED_LATER, BeforeValidator(tuple)] = (),
) -> ProverFamily:
    """The ProVer family (entry point ``prover`` of group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's name for the signal.
    group_size : int, default 8
        G: rollouts per task group.
    continuations : int, default 8
        K: continuations from s_pre and from s_post.
    max_segment : int, default 4
        Longest proposed segment (turns).
    credit_scale : float, default 1.0
        lambda in ``lambda * max(Delta, 0)``.
    proposer : str, default "judge"
        Segment proposer (entry-point group ``creditaudit.proposers``: ``judge``, ``random``,
        ``oracle`` or a third party's).
    compare : tuple of str, default ()
        Further proposers run on the same groups with the same verification seeds. Their rows join
        the diagnostics (the judge-ablation table); the credit stays ``proposer``'s. Left out of the
        protocol id while empty.
    """
    from creditaudit import plugins

    for p in (proposer, *compare):
        plugins.get("proposer", p, where="`proposer`" if p == proposer else "`compare`")
    return ProverFamily(name=name, group_size=group_size, continuations=continuations, max_segment=max_segment,
                        credit_scale=credit_scale, proposer=proposer, compare=compare)
