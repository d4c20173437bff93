"""ProVer's segment proposers (entry-point group ``creditaudit.proposers``): ``random``, ``judge``
(the audited policy as a constrained-choice segment judge) and ``oracle`` (every boundary measured),
and the request/answer types a third-party proposer implements (:class:`SegmentProposer`). The
family that verifies their proposals is :mod:`.prover`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from creditaudit.protocol.canonical import canonical_hash, sha256_bytes
from creditaudit.signals.base import SignalContext, Trajectory
from creditaudit.signals.families.judge import GENERIC_SETTING
from creditaudit.signals.families.prover import BoundaryMeter, pick_segment

__all__ = [
    "JUDGE_PROMPT_VERSION",
    "ProposalRequest",
    "Proposal",
    "SegmentProposer",
    "RandomProposer",
    "JudgeProposer",
    "OracleProposer",
    "make_proposer",
    "LocalSegmentJudge",
]

JUDGE_PROMPT_VERSION = 1

#: ``{setting}`` is the environment's (``PromptText.setting`` of the protocol's environment plugin).
_INSTRUCTION = (
    "You are locating the pivotal decision of an agent in {setting}. Several runs of the "
    "same task failed; one succeeded. Find the recurrent failure in the failed runs, then the shortest "
    "segment of the successful run that resolved or avoided it. Judge actions together with the state "
    "changes they caused; do not pick a mistake that was later corrected."
)
_CUE = "pivotal segment of the successful run:"


def _setting(context: Any) -> str:
    """The protocol's environment's ``PromptText.setting`` (what the prompts call the task)."""
    from creditaudit.signals.families.judge import environment_setting

    return environment_setting(context)

def _squash(text: str) -> str:
    return " ".join(str(text).split())


# ------------------------------------------------------------------------------ judge proposer


class LocalSegmentJudge:
    """Constrained-choice segment judge over a local ``transformers`` model (an ``HFPolicy``).

    Every candidate segment's actions, joined by `` ; ``, are scored as the continuation of the
    judge prompt; the proposal is the candidate with the largest joint log-probability.
    """

    def __init__(self, model: Any, *, judge_id: str, setting: str = GENERIC_SETTING):
        self.model = model
        self.judge_id = judge_id
        self.setting = setting

    def prompt_body(self, source: Trajectory, failed: Sequence[Trajectory]) -> str:
        """Task, compact previews of the failed runs, the successful run with turn indices."""
        lines = [_INSTRUCTION.replace("{setting}", self.setting), f"task: {_squash(source.goal)}"]
        for f in failed:
            lines.append(f"failed run {f.rollout}: " + " ; ".join(_squash(r.action) for r in f.turns))
        lines.append("successful run:")
        for rec in source.turns:
            lines += [f"turn {rec.turn}", f"observation: {_squash(rec.observation)}", f"action: {_squash(rec.action)}"]
        return "\n".join(lines)

    def prompt(self, source: Trajectory, failed: Sequence[Trajectory]) -> str:
        text = self.prompt_body(source, failed) + "\n" + _CUE
        if self.model.prompt_builder.mode == "chat":
            return self.model.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                            add_generation_prompt=True)
        return text

    @staticmethod
    def choice(source: Trajectory, segment: tuple[int, int]) -> str:
        return " ; ".join(_squash(source.turns[t].action) for t in range(segment[0], segment[1] + 1))

    def propose(self, source: Trajectory, failed: Sequence[Trajectory],
                candidates: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], dict[str, Any]]:
        prompt = self.prompt(source, failed)
        choices = [self.choice(source, s) for s in candidates]
        if hasattr(self.model, "score_candidates"):  # the prompt encoded once for every candidate segment
            scored = self.model.score_candidates([prompt], [choices], include_stop=False)[0]
        else:
            scored = self.model.score([prompt] * len(choices), choices)
        lp = {s: float(sc.sum_logprob) for s, sc in zip(candidates, scored)}
        if not all(math.isfinite(v) for v in lp.values()):
            raise ValueError("non-finite segment log-probability")
        return pick_segment(lp), {"prompt_sha256": sha256_bytes(prompt.encode("utf-8")),
                           "choice_logprobs": [lp[s] for s in candidates]}


def _judge_template_hash(setting: str = GENERIC_SETTING) -> str:
    return canonical_hash({"version": JUDGE_PROMPT_VERSION, "instruction": _INSTRUCTION.replace("{setting}", setting),
                           "cue": _CUE,
                           "choice": "actions joined by ' ; '", "rule": "max joint log-probability"})


# ------------------------------------------------------------------------------ proposers


@dataclass(frozen=True)
class ProposalRequest:
    """What a segment proposer is given for one eligible task group.

    Attributes
    ----------
    context : SignalContext
        The signals stage's context (the audited policy, named seed streams).
    source : Trajectory
        The group's shortest successful trajectory ``tau+``.
    failed : list of Trajectory
        The group's failed trajectories.
    candidates : list of (int, int)
        Every admissible segment (:func:`candidate_segments`); a proposal outside it is invalid.
    meter : BoundaryMeter
        Executed continuations from ``tau+``'s recorded states (an oracle measures with it).
    stream : str
        Base name of the group's seed streams (``signals/prover/<trajectory id>``).
    continuations : int
        K, the protocol's continuations per boundary state.
    """

    context: SignalContext
    source: Trajectory
    failed: list[Trajectory]
    candidates: list[tuple[int, int]]
    meter: BoundaryMeter
    stream: str
    continuations: int


@dataclass(frozen=True)
class Proposal:
    """A proposer's answer: the segment (``None`` when it has none) and why."""

    segment: tuple[int, int] | None
    status: str = "measured"
    prompt_sha256: str | None = None


@runtime_checkable
class SegmentProposer(Protocol):
    """A ProVer segment proposer (entry-point group ``creditaudit.proposers``)."""

    name: str

    def propose(self, request: ProposalRequest) -> Proposal: ...


class RandomProposer:
    """A uniform draw over the candidates from the stream ``<stream>/random``."""

    name = "random"

    def propose(self, request: ProposalRequest) -> Proposal:
        draw = request.context.streams.rng(f"{request.stream}/random").integers(len(request.candidates))
        return Proposal(request.candidates[int(draw)])


class JudgeProposer:
    """The audited policy as a constrained-choice segment judge (:class:`LocalSegmentJudge`)."""

    name = "judge"

    @staticmethod
    def template_sha256(context: SignalContext) -> str:
        """The judge prompt template's hash under the context's environment."""
        return _judge_template_hash(_setting(context))

    def __init__(self) -> None:
        self._judge: LocalSegmentJudge | None = None

    def propose(self, request: ProposalRequest) -> Proposal:
        if self._judge is None:
            from creditaudit.signals.families.judge import local_judge_model

            model, judge_id, _ = local_judge_model(request.context, "policy")
            self._judge = LocalSegmentJudge(model, judge_id=judge_id, setting=_setting(request.context))
        try:
            segment, info = self._judge.propose(request.source, request.failed, request.candidates)
        except ValueError:
            return Proposal(None, "invalid_proposal")
        return Proposal(segment, prompt_sha256=info["prompt_sha256"])


class OracleProposer:
    """Every boundary of ``tau+`` measured with K continuations (``<stream>/search``); the largest
    measured Delta is proposed (and re-measured by the verification, so no winner's curse)."""

    name = "oracle"

    def propose(self, request: ProposalRequest) -> Proposal:
        search = request.meter.measure(range(len(request.source)), request.continuations, f"{request.stream}/search")
        measured = {s: float(np.mean(search[s[1] + 1]) - np.mean(search[s[0]])) for s in request.candidates
                    if search.get(s[0]) is not None and search.get(s[1] + 1) is not None}
        if not measured:
            return Proposal(None, "restore_mismatch")
        return Proposal(pick_segment(measured))


def random_proposer() -> RandomProposer:
    """The ``random`` proposer (entry point of group ``creditaudit.proposers``)."""
    return RandomProposer()


def judge_proposer() -> JudgeProposer:
    """The ``judge`` proposer (entry point of group ``creditaudit.proposers``)."""
    return JudgeProposer()


def oracle_proposer() -> OracleProposer:
    """The ``oracle`` proposer (entry point of group ``creditaudit.proposers``)."""
    return OracleProposer()


def make_proposer(name: str) -> SegmentProposer:
    """The installed proposer ``name`` (``ValueError`` naming the installed ones when unknown)."""
    from creditaudit import plugins

    proposer = plugins.get("proposer", name, where="`proposer`").create()
    if not isinstance(proposer, SegmentProposer):
        raise TypeError(f"proposer {name!r} returned {proposer!r}, which lacks `name`/`propose`")
    return proposer
