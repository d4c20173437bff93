"""Judge credit (TARL, w/o-gold): a judge model reads the task, the full trajectory and its outcome
and scores every turn in {1, 0, -1}, with at most ``max_negative`` (default one) -1 per trajectory.

Backends
    ``local``: a ``transformers`` causal LM (``model: policy`` is the audited policy itself,
    ``model: embedded`` the judge model shipped in the package (:mod:`~.judge_build`), else a
    model directory). For each turn the judge prompt ends with the turn's cue (its action, what
    followed it, ``score of turn <t>:``; :func:`local_judge_cue`) and the three choices "1", "0",
    "-1" are scored by their log-probability as continuations (sum over the choice's tokens,
    temperature 1). The scores of a trajectory are the joint maximum of the
    summed log-probabilities subject to the -1 budget: every turn takes its best non-negative
    choice, then the (at most ``max_negative``) turns where -1 beats that choice by the largest
    margin take -1 (:func:`constrained_scores`). Even a tiny model returns a valid score; a
    tokenizer that cannot encode a choice is refused (:func:`check_choices`).

    ``http``: any OpenAI-compatible endpoint (``POST <endpoint>/v1/chat/completions``), one
    request per trajectory, asking for ``{"scores": [s_0, ..., s_{n-1}]}``. Timeouts, transport
    errors, HTTP 429/5xx and malformed answers are retried ``max_retries`` times with exponential
    backoff; what is still wrong afterwards is an abstention of every turn of that trajectory with
    its reason (``judge_timeout``, ``judge_unreachable``, ``judge_http_error``,
    ``judge_malformed``) -- never a silent 0. Other 4xx answers are configuration errors
    (wrong endpoint or model) and stop the stage with an :class:`~creditaudit.errors.InputError`.
    An API key, when the endpoint needs one, is read from ``$CREDITAUDIT_JUDGE_API_KEY`` and never
    recorded.

Every turn's diagnostics record the judge id, the prompt hash, the raw responses (the HTTP
bodies, or the choices' log-probabilities), the parse outcome and the number of attempts.

The prompt restates TARL's w/o-gold judging instruction (task, full trajectory, outcome; one
score per turn; at most one -1); its text is versioned by :data:`JUDGE_PROMPT_VERSION` and hashed
into every record.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field
import pandas as pd
import pyarrow as pa

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_hash, sha256_bytes
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, Trajectory, credit_frame

__all__ = [
    "JUDGE_CHOICES",
    "JUDGE_PROMPT_VERSION",
    "API_KEY_ENV",
    "MalformedAnswer",
    "JudgeVerdict",
    "judge_prompt",
    "judge_instruction",
    "environment_setting",
    "GENERIC_SETTING",
    "check_choices",
    "constrained_scores",
    "parse_judge_answer",
    "LocalJudge",
    "local_judge_cue",
    "HTTP_ANSWER",
    "JudgeFamily",
    "judge_agreement",
    "EMBEDDED_JUDGE",
    "embedded_judge_dir",
]

JUDGE_CHOICES = ("1", "0", "-1")
JUDGE_SCORES = (1, 0, -1)
JUDGE_PROMPT_VERSION = 1
API_KEY_ENV = "CREDITAUDIT_JUDGE_API_KEY"

#: Where the HTTP judge caches parsed answers, under the run directory (one folder per family name).
JUDGE_CACHE_DIR = "judge_cache"

#: The judge's instruction; ``{setting}`` is the environment's (``PromptText.setting`` of the
#: protocol's environment plugin; ALFWorld's plugin supplies the words every earlier judge prompt had).
_INSTRUCTION = (
    "You are judging the decisions of an agent in {setting}. You see the task, the "
    "agent's full trajectory and its outcome. Score every turn: 1 if the action helped accomplish "
    "the task, 0 if it was neutral or had no effect, -1 if it was the mistake that harmed the "
    "outcome. At most {max_negative} turn(s) may receive -1."
)
#: The setting of a judge made without an environment's words (tests, tools).
GENERIC_SETTING = "a text environment"

HTTP_ANSWER = (
    'Answer with JSON only, exactly {{"scores": [s_0, ..., s_{last}]}}: one integer in {{1, 0, -1}} '
    "per turn, {n} in all."
)
#: The cue after which a local judge scores a turn (also what the embedded judge is trained on): the
#: turn's action and what the agent saw next, restated from the body, then the question. A local
#: model scores each turn from its own prompt, so the cue puts the turn's effect beside the question
#: instead of asking a small model to find it in a long transcript.
LOCAL_JUDGE_CUE = "turn {turn} once more. action: {action}\nwhat followed: {result}\nscore of turn {turn}:"


def local_judge_cue(trajectory: Trajectory, index: int) -> str:
    """:data:`LOCAL_JUDGE_CUE` for the ``index``-th turn of a trajectory: what followed is the next
    turn's observation, or the outcome line after the last turn.

    Examples
    --------
    >>> from creditaudit.signals.base import Trajectory, TurnRecord
    >>> t = Trajectory("t", "k", 0, "open the door", 1,
    ...                (TurnRecord(0, "a hall .", ("open door",), "open door", (-0.1,), -0.1, "done ."),))
    >>> print(local_judge_cue(t, 0))
    turn 0 once more. action: open door
    what followed: the task was completed successfully. final observation: done .
    score of turn 0:
    """
    from creditaudit.replay.policies import format_hindsight

    turns = trajectory.turns
    rec = turns[index]
    result = (turns[index + 1].observation if index + 1 < len(turns)
              else format_hindsight(trajectory.final_observation, trajectory.won))
    return LOCAL_JUDGE_CUE.format(turn=rec.turn, action=_squash(rec.action), result=_squash(result))


def _squash(text: str) -> str:
    return " ".join(str(text).split())


def environment_setting(context: Any) -> str:
    """What the prompts call the task: the ``PromptText.setting`` of the context's protocol's
    environment (:data:`GENERIC_SETTING` for a context whose protocol names no environment)."""
    if getattr(getattr(context, "protocol", None), "environment", None) is None:
        return GENERIC_SETTING
    from creditaudit.replay.tasks import environment_plugin

    return environment_plugin(context.protocol).prompt.setting


def judge_instruction(setting: str = GENERIC_SETTING) -> str:
    """The judge's instruction for an environment (``{max_negative}`` left to fill).

    Examples
    --------
    >>> judge_instruction("a maze of doors")[:61]
    'You are judging the decisions of an agent in a maze of doors.'
    """
    return _INSTRUCTION.replace("{setting}", setting)


def judge_prompt(trajectory: Trajectory, *, max_negative: int = 1, setting: str = GENERIC_SETTING) -> str:
    """The judge prompt body of a trajectory (task, turns, outcome, instruction); ``setting`` is the
    environment's ``PromptText.setting``.

    Examples
    --------
    >>> from creditaudit.signals.base import Trajectory, TurnRecord
    >>> t = Trajectory("t", "k", 0, "open the door", 1,
    ...                (TurnRecord(0, "a hall .", ("open door",), "open door", (-0.1,), -0.1, "done ."),))
    >>> print(judge_prompt(t))  # doctest: +NORMALIZE_WHITESPACE
    You are judging ... At most 1 turn(s) may receive -1.
    task: open the door
    turn 0
    observation: a hall .
    action: open door
    outcome: the task was completed successfully. final observation: done .
    """
    from creditaudit.replay.policies import format_hindsight

    lines = [judge_instruction(setting).format(max_negative=max_negative), f"task: {_squash(trajectory.goal)}"]
    for rec in trajectory.turns:
        lines += [f"turn {rec.turn}", f"observation: {_squash(rec.observation)}", f"action: {_squash(rec.action)}"]
    lines.append(f"outcome: {_squash(format_hindsight(trajectory.final_observation, trajectory.won))}")
    return "\n".join(lines)


def _template_hash(backend: str, setting: str = GENERIC_SETTING) -> str:
    return canonical_hash({"version": JUDGE_PROMPT_VERSION, "instruction": judge_instruction(setting),
                           "backend": backend,
                           "answer": HTTP_ANSWER if backend == "http" else LOCAL_JUDGE_CUE,
                           "choices": list(JUDGE_CHOICES)})


# ------------------------------------------------------------------------------ constrained choice


def constrained_scores(choice_logprobs: np.ndarray, *, max_negative: int = 1) -> list[int]:
    """Scores of one trajectory's turns by constrained choice.

    Parameters
    ----------
    choice_logprobs : array of shape (n_turns, 3)
        Log-probability of the choices "1", "0", "-1" (columns, in :data:`JUDGE_CHOICES` order).
    max_negative : int, default 1

    Returns
    -------
    list of int
        The assignment maximising the summed log-probability subject to at most ``max_negative``
        -1 scores: each turn takes its best of {1, 0} (ties: 1 before 0), then the turns where -1
        beats that by the largest positive margin (ties: earlier turn) take -1.

    Examples
    --------
    >>> lp = np.log([[0.2, 0.1, 0.7], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1]])
    >>> constrained_scores(lp, max_negative=1)
    [-1, 0, 1]
    """
    lp = np.asarray(choice_logprobs, dtype=float)
    if lp.ndim != 2 or lp.shape[1] != 3:
        raise ValueError("`choice_logprobs` must have shape (n_turns, 3)")
    best = np.where(lp[:, 0] >= lp[:, 1], 0, 1)
    scores = [JUDGE_SCORES[b] for b in best]
    margin = lp[:, 2] - lp[np.arange(len(lp)), best]
    order = sorted((i for i in range(len(lp)) if margin[i] > 0), key=lambda i: (-margin[i], i))
    for i in order[:max_negative]:
        scores[i] = -1
    return scores


_PIECE = re.compile(r"\w+|[^\w\s]+")


def check_choices(tokenizer: Any, *, judge: str) -> list[list[int]]:
    """Token ids of the three choices; refuse a tokenizer that cannot encode them.

    Raises
    ------
    InputError
        Naming the choices and the pieces the tokenizer maps to its unknown token (or to nothing),
        or when two choices encode identically.
    """
    unk = getattr(tokenizer, "unk_token_id", None)

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    ids, bad, pieces = [], [], []
    for choice in JUDGE_CHOICES:
        enc = encode(choice)
        ids.append(enc)
        if not enc or (unk is not None and unk in enc):
            bad.append(choice)
            for piece in _PIECE.findall(choice):
                p = encode(piece)
                if (not p or (unk is not None and unk in p)) and piece not in pieces:
                    pieces.append(piece)
    if bad:
        raise InputError(
            f"judge model {judge!r}: its tokenizer cannot encode the score choice(s) "
            f"{', '.join(repr(b) for b in bad)} (missing token(s): {', '.join(repr(p) for p in pieces) or 'unknown'}); "
            "the constrained judge needs \"1\", \"0\" and \"-1\" — add the missing tokens to the tokenizer's "
            "vocabulary, or set the judge's `model` to a model whose tokenizer has them (or use `backend: http`)"
        )
    if len({tuple(i) for i in ids}) != len(ids):
        raise InputError(f"judge model {judge!r}: its tokenizer encodes two of the choices {JUDGE_CHOICES} identically")
    return ids


# ------------------------------------------------------------------------------ answers


class MalformedAnswer(ValueError):
    """A judge answer that is not a valid score list (the message says why)."""


def parse_judge_answer(text: str, *, n_turns: int, max_negative: int = 1) -> list[int]:
    """Scores from a judge's JSON answer ``{"scores": [...]}``.

    A fenced code block around the JSON is accepted; anything else is :class:`MalformedAnswer`:
    not JSON, no ``scores`` list, a wrong count, a value outside {1, 0, -1} (booleans and
    non-integral numbers included), or more than ``max_negative`` -1.

    Examples
    --------
    >>> parse_judge_answer('{"scores": [1, 0, -1]}', n_turns=3)
    [1, 0, -1]
    >>> parse_judge_answer('{"scores": [-1, -1]}', n_turns=2)
    Traceback (most recent call last):
    ...
    creditaudit.signals.families.judge.MalformedAnswer: 2 scores of -1; at most 1 allowed
    """
    if not isinstance(text, str):
        raise MalformedAnswer("the answer is not text")
    body = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, flags=re.S)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("scores"), list):
        raise MalformedAnswer('no "scores" list in the answer')
    scores = data["scores"]
    if len(scores) != n_turns:
        raise MalformedAnswer(f"{len(scores)} scores for {n_turns} turns")
    out = []
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or s not in (1, 0, -1):
            raise MalformedAnswer(f"score {i} is {s!r}, not one of 1, 0, -1")
        out.append(int(s))
    negatives = out.count(-1)
    if negatives > max_negative:
        raise MalformedAnswer(f"{negatives} scores of -1; at most {max_negative} allowed")
    return out


@dataclass(frozen=True)
class JudgeVerdict:
    """A judge's result for one trajectory.

    Attributes
    ----------
    scores : list of int or None
        One score per turn; ``None`` when the judge abstained.
    abstain_reason : str or None
    parse_outcome : str
        ``"ok"``, ``"constrained"`` (local), or the last failure's description.
    attempts : int
    raw_responses : list of str
        HTTP response bodies (or error descriptions), one per attempt.
    prompt_sha256 : list of str
        Per turn.
    choice_logprobs : numpy.ndarray or None
        Local backend: (n_turns, 3).
    """

    scores: list[int] | None
    abstain_reason: str | None
    parse_outcome: str
    attempts: int
    raw_responses: list[str]
    prompt_sha256: list[str]
    choice_logprobs: np.ndarray | None = None


# ------------------------------------------------------------------------------ backends


class LocalJudge:
    """Constrained-choice judge over a local ``transformers`` model (an ``HFPolicy``).

    Parameters
    ----------
    model : HFPolicy
        The judge model (anything with ``tokenizer``, ``prompt_builder.mode`` and ``score``; its
        ``score_shared_prefix``, else ``score_candidates``, is used when it has one).
    judge_id : str
    max_negative : int, default 1
    """

    backend = "local"

    def __init__(self, model: Any, *, judge_id: str, max_negative: int = 1, setting: str = GENERIC_SETTING):
        self.model = model
        self.judge_id = judge_id
        self.max_negative = max_negative
        self.setting = setting
        check_choices(model.tokenizer, judge=judge_id)

    def turn_prompt(self, body: str, trajectory: Trajectory, index: int) -> str:
        text = body + "\n" + local_judge_cue(trajectory, index)
        if self.model.prompt_builder.mode == "chat":
            return self.model.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                            add_generation_prompt=True)
        return text

    def judge(self, trajectory: Trajectory) -> JudgeVerdict:
        body = judge_prompt(trajectory, max_negative=self.max_negative, setting=self.setting)
        prompts = [self.turn_prompt(body, trajectory, i) for i in range(len(trajectory.turns))]
        if hasattr(self.model, "score_shared_prefix"):  # the transcript encoded once for every turn's cue and choices
            scored = [s for row in self.model.score_shared_prefix(prompts, [list(JUDGE_CHOICES)] * len(prompts),
                                                                   include_stop=False) for s in row]
        elif hasattr(self.model, "score_candidates"):  # each turn's prompt encoded once for its three choices
            scored = [s for row in self.model.score_candidates(prompts, [list(JUDGE_CHOICES)] * len(prompts),
                                                                include_stop=False) for s in row]
        else:
            rows = [p for p in prompts for _ in JUDGE_CHOICES]
            choices = [c for _ in prompts for c in JUDGE_CHOICES]
            scored = self.model.score(rows, choices)
        lp = np.array([s.sum_logprob for s in scored], dtype=float).reshape(len(prompts), len(JUDGE_CHOICES))
        scores = constrained_scores(lp, max_negative=self.max_negative)
        return JudgeVerdict(scores, None, "constrained", 1, [], [sha256_bytes(p.encode("utf-8")) for p in prompts], lp)


# ------------------------------------------------------------------------------ the family


def local_judge_model(context: SignalContext, model: str) -> tuple[Any, str, str]:
    """(model, judge id, SHA-256 of the canonical JSON of its file hashes)."""
    if model == "policy":
        pins = {**context.protocol.policy.model_files, **context.protocol.policy.tokenizer_files}
        digest = canonical_hash(pins)
        return context.policy(), f"local:policy@{digest[:16]}", digest
    from creditaudit.replay.policies import load_policy, policy_file_hashes

    path = embedded_judge_dir() if model == EMBEDDED_JUDGE else Path(model)
    if not path.is_absolute():
        path = context.run_dir / path
    hashes = policy_file_hashes(path)
    digest = canonical_hash({**hashes["model_files"], **hashes["tokenizer_files"]})
    return load_policy(path, history_length=0), f"local:{Path(model).name}@{digest[:16]}", digest


EMBEDDED_JUDGE = "embedded"
"""``model: embedded``: the judge model shipped in the package (:mod:`~.judge_build`)."""


def embedded_judge_dir() -> Path:
    """The shipped judge model's directory.

    Raises
    ------
    InputError
        When the package holds no judge model (an install without package data).
    """
    from creditaudit.signals.families.judge_build import JUDGE_MODEL_DIR

    if not (JUDGE_MODEL_DIR / "config.json").is_file():
        raise InputError(
            f"judge `model: embedded`: the package holds no judge model in {JUDGE_MODEL_DIR}; reinstall creditaudit "
            "with its package data, or build one with `creditaudit judge build --out DIR` and set the judge's "
            "`model` to DIR"
        )
    return JUDGE_MODEL_DIR


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("trajectory_id", pa.string()),
    pa.field("turn", pa.int32()),
    pa.field("judge_id", pa.string()),
    pa.field("backend", pa.string()),
    pa.field("prompt_sha256", pa.string()),
    pa.field("raw_responses", pa.list_(pa.string())),
    pa.field("parse_outcome", pa.string()),
    pa.field("attempts", pa.int32()),
    pa.field("logprob_1", pa.float64()),
    pa.field("logprob_0", pa.float64()),
    pa.field("logprob_minus1", pa.float64()),
    pa.field("score", pa.int8()),
])


class JudgeFamily(FamilyBase):
    """The ``judge`` credit family (TARL w/o-gold) with the protocol's backend and constants.

    Scores are categorical in {1, 0, -1} around ``neutral = 0``; a local judge reading the audited
    policy needs the policy, and a local judge model inside the run directory is an attested input."""

    neutral = 0.0
    categories = JUDGE_SCORES

    @property
    def needs(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({"policy"}) if self.backend == "local" and self.model == "policy" else frozenset()

    def inputs(self, run_dir: Path) -> list[Path]:
        """Files of a local judge model that lies in the run directory (a model elsewhere, the
        shipped ``embedded`` one included, is identified by its files' hash in the judge id)."""
        from creditaudit.replay.policies import policy_file_hashes

        if self.backend != "local" or self.model in ("policy", EMBEDDED_JUDGE):
            return []
        path = Path(self.model) if Path(self.model).is_absolute() else run_dir / self.model
        try:
            path.resolve().relative_to(run_dir.resolve())
        except ValueError:
            return []
        hashes = policy_file_hashes(path)
        return [path / name for name in sorted({**hashes["model_files"], **hashes["tokenizer_files"]})]

    def __init__(self, *, name: str, backend: str = "local", model: str = "policy", endpoint: str | None = None,
                 max_retries: int = 3, timeout_s: float = 60.0, max_negative: int = 1):
        self.name = name
        self.backend = backend
        self.model = model
        self.endpoint = endpoint
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.max_negative = max_negative

    def make_judge(self, context: SignalContext) -> Any:
        overrides = context.overrides.get(self.name, {})
        setting = environment_setting(context)
        if self.backend == "local":
            model, judge_id, digest = local_judge_model(context, self.model)
            judge = LocalJudge(model, judge_id=judge_id, max_negative=self.max_negative, setting=setting)
            judge.model_sha256 = digest
            return judge
        from creditaudit.signals.families.judge_http import HttpJudge

        return HttpJudge(self.endpoint, self.model, max_retries=self.max_retries, timeout_s=self.timeout_s,
                         max_negative=self.max_negative, backoff_s=overrides.get("backoff_s", 1.0), setting=setting,
                         cache_dir=context.run_dir / JUDGE_CACHE_DIR / self.name,
                         max_concurrency=overrides.get("max_concurrency", 4))

    def compute(self, context: SignalContext) -> FamilyOutput:
        judge = self.make_judge(context)
        values, reasons = {}, {}
        cols: dict[str, list] = {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        total = len(context.trajectories)
        verdicts = (judge.judge_all(context.trajectories) if hasattr(judge, "judge_all")
                    else map(judge.judge, context.trajectories))
        for done, (traj, verdict) in enumerate(zip(context.trajectories, verdicts), start=1):
            for k, rec in enumerate(traj.turns):
                key = (traj.trajectory_id, rec.turn)
                score = verdict.scores[k] if verdict.scores is not None else None
                if score is None:
                    reasons[key] = verdict.abstain_reason
                else:
                    values[key] = float(score)
                lp = verdict.choice_logprobs[k] if verdict.choice_logprobs is not None else [None, None, None]
                cols["trajectory_id"].append(traj.trajectory_id)
                cols["turn"].append(rec.turn)
                cols["judge_id"].append(judge.judge_id)
                cols["backend"].append(judge.backend)
                cols["prompt_sha256"].append(verdict.prompt_sha256[k])
                cols["raw_responses"].append(list(verdict.raw_responses))
                cols["parse_outcome"].append(verdict.parse_outcome)
                cols["attempts"].append(verdict.attempts)
                cols["logprob_1"].append(None if lp[0] is None else float(lp[0]))
                cols["logprob_0"].append(None if lp[1] is None else float(lp[1]))
                cols["logprob_minus1"].append(None if lp[2] is None else float(lp[2]))
                cols["score"].append(score)
            context.report(self.name, done, total)
        table = pa.Table.from_pydict(cols, schema=DIAGNOSTICS_SCHEMA)
        scores = [s for s in cols["score"] if s is not None]
        report = {
            "judge_id": judge.judge_id,
            "judge_model_sha256": getattr(judge, "model_sha256", None),
            "backend": judge.backend,
            "prompt_version": JUDGE_PROMPT_VERSION,
            "prompt_template_sha256": _template_hash(judge.backend, getattr(judge, "setting", GENERIC_SETTING)),
            "score_counts": {str(v): scores.count(v) for v in JUDGE_SCORES},
        }
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), table, report)


def judge_family(
    *,
    name: str,
    backend: Literal["local", "http"] = "local",
    model: str = "policy",
    endpoint: str | None = None,
    max_retries: Annotated[int, Field(ge=0, le=20)] = 3,
    timeout_s: Annotated[float, Field(gt=0.0)] = 60.0,
    max_negative: Annotated[int, Field(ge=0)] = 1,
) -> JudgeFamily:
    """The judge (TARL, w/o-gold) family (entry point ``judge`` of group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's name for the signal.
    backend : {"local", "http"}, default "local"
        ``local``: a transformers model scoring "1"/"0"/"-1" by constrained log-probability;
        ``http``: an OpenAI-compatible endpoint answering JSON.
    model : str, default "policy"
        Local model directory (``policy`` = the audited policy; ``embedded`` = the judge model
        shipped in the package, trained on planner-progress labels, see
        :mod:`~creditaudit.signals.families.judge_build`) or the endpoint's model name.
    endpoint : str, optional
        Base URL of the OpenAI-compatible endpoint (required for ``backend: http``).
    max_retries : int, default 3
        Retries (exponential backoff) before a malformed answer becomes an abstention.
    timeout_s : float, default 60
        Per-request timeout.
    max_negative : int, default 1
        At most this many -1 scores per trajectory.
    """
    if backend == "http" and not endpoint:
        raise ValueError("`endpoint` is required when `backend` is 'http'")
    return JudgeFamily(name=name, backend=backend, model=model, endpoint=endpoint, max_retries=max_retries,
                       timeout_s=timeout_s, max_negative=max_negative)


# ------------------------------------------------------------------------------ agreement


def judge_agreement(credits: dict[str, pd.DataFrame], *, confidence_level: float = 0.95) -> list[dict[str, Any]]:
    """Exact agreement and Cohen's kappa of every pair of judge families, on the turns both scored.

    Parameters
    ----------
    credits : dict
        Judge family name -> its credit frame.

    Returns
    -------
    list of dict
        Per pair: ``n`` (turns both scored), ``agreement``, ``kappa``, ``kappa_ci`` (null with a
        ``note`` when kappa is undefined, e.g. both judges used a single score).
    """
    from creditaudit.stats import cohens_kappa

    names = list(credits)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            merged = credits[a][["trajectory_id", "turn", "credit"]].merge(
                credits[b][["trajectory_id", "turn", "credit"]], on=["trajectory_id", "turn"], suffixes=("_a", "_b"))
            merged = merged.dropna()
            entry: dict[str, Any] = {"judges": [a, b], "n": int(len(merged)), "agreement": None, "kappa": None,
                                     "kappa_ci": None}
            if len(merged):
                x = merged["credit_a"].astype(int).to_numpy()
                y = merged["credit_b"].astype(int).to_numpy()
                try:
                    res = cohens_kappa(x, y, categories=JUDGE_SCORES, confidence_level=confidence_level)
                except ValueError as exc:
                    entry["agreement"] = float(np.mean(x == y))
                    entry["note"] = f"kappa undefined: {exc}"
                else:
                    entry.update(agreement=res.agreement, n_agree=res.n_agree, kappa=res.statistic,
                                 kappa_ci=[float(v) for v in res.ci] if all(math.isfinite(v) for v in res.ci) else None)
            else:
                entry["note"] = "no turn scored by both judges"
            out.append(entry)
    return out
