"""Implicit credit: HCAPO's hindsight ratio rho_t, scored by the policy checkpoint itself.

Extraction (the family ``implicit``)
    For turn ``t`` of a trajectory with final observation ``o_final`` and success ``won``, the
    hindsight prompt is the policy's own prompt of that decision point (goal, the last
    ``history_length`` (observation, action) turns, the observation, the admissible commands)
    with the outcome injected through the prompt builder's hindsight hook
    (``outcome: <format_hindsight(o_final, won)>``). With ``y_1..y_n`` the action's tokens,

    .. math:: \\pi_{hind}(a_t) = \\exp\\Big(\\frac{1}{T}\\,\\frac{1}{n}\\sum_j \\log \\pi(y_j \\mid y_{<j}, s_t, s_{final})\\Big),
              \\qquad \\rho_t = \\operatorname{clip}\\Big(\\frac{\\pi_{hind}(a_t)}{\\frac{1}{|\\mathcal{T}|}\\sum_{t'}\\pi_{hind}(a_{t'})}, 0.8, 1.2\\Big)

    with ``T = 5`` and the mean over the trajectory's scored turns (log-probabilities at
    temperature 1, natural log).

Training side (HCAPO's advantage, for the training arms)
    :func:`hcapo_q_values`, :func:`backward_smoothing`, :func:`multiscale_advantage` and
    :func:`hcapo_advantages` (the whole chain).

Where the sources leave room, this module decides (and the decisions are part of the family's
version):

* the mean in rho's denominator runs over the trajectory's *scored* turns; a turn whose action
  has no tokens abstains (``empty_action``) and is left out of the mean;
* ``T`` in ``gamma^(T-1-t)`` is the trajectory's number of turns, ``t`` is 0-based;
* backward smoothing is an exponential average from the end: ``Q~_{n-1} = Q_{n-1}``,
  ``Q~_t = (1 - alpha) Q_t + alpha Q~_{t+1}``;
* ``z(Q)`` standardises the smoothed Q over every turn of every trajectory of the task group
  (population standard deviation, zeros when constant); ``z_group(R)`` is the GRPO z-score of
  the group's outcomes (:func:`creditaudit.signals.families.advantages.grpo_advantages`);
* do-no-harm: in a successful trajectory (``R > 0``) a negative micro term ``omega * z(Q)_t`` is
  set to 0; failed trajectories keep it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pyarrow as pa
from pydantic import Field

from creditaudit.protocol.canonical import sha256_bytes
from creditaudit.signals.families.advantages import grpo_advantages
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, Trajectory, credit_frame

__all__ = [
    "pi_hind",
    "hindsight_ratio",
    "hindsight_builder",
    "hindsight_prompts",
    "hcapo_q_values",
    "backward_smoothing",
    "multiscale_advantage",
    "HCAPOAdvantage",
    "hcapo_advantages",
    "ImplicitFamily",
]


def pi_hind(mean_logprob: float, *, temperature: float = 5.0) -> float:
    """``exp(mean_j log pi(y_j | ...) / T)``.

    Examples
    --------
    >>> round(pi_hind(-1.0, temperature=5.0), 6)
    0.818731
    """
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"`temperature` must be a finite number > 0; got {temperature!r}")
    if not math.isfinite(mean_logprob):
        raise ValueError(f"`mean_logprob` must be finite; got {mean_logprob!r}")
    return math.exp(mean_logprob / temperature)


def hindsight_ratio(pi_values: Sequence[float], *, clip_low: float = 0.8, clip_high: float = 1.2) -> tuple[np.ndarray, np.ndarray]:
    """Self-normalised hindsight ratio of one trajectory.

    Parameters
    ----------
    pi_values : sequence of float
        ``pi_hind(a_t)`` of the trajectory's scored turns.
    clip_low, clip_high : float, default 0.8, 1.2

    Returns
    -------
    (ratio, rho) : tuple of numpy.ndarray
        ``ratio_t = pi_t / mean(pi)`` and ``rho_t = clip(ratio_t, clip_low, clip_high)``.

    Examples
    --------
    >>> ratio, rho = hindsight_ratio([0.5, 1.0, 1.5])
    >>> ratio.tolist(), rho.tolist()
    ([0.5, 1.0, 1.5], [0.8, 1.0, 1.2])
    """
    p = np.asarray(pi_values, dtype=float)
    if p.ndim != 1 or p.size == 0:
        raise ValueError("`pi_values` must be a non-empty 1-D sequence")
    if not (np.isfinite(p).all() and (p > 0).all()):
        raise ValueError("`pi_values` must be finite and positive")
    if not clip_low < clip_high:
        raise ValueError("`clip_low` must be below `clip_high`")
    ratio = p / p.mean()
    return ratio, np.clip(ratio, clip_low, clip_high)


def hindsight_builder(policy, history_length: int):
    """A prompt builder like the policy's (same tokenizer, template mode and instruction) showing
    ``history_length`` past turns."""
    from creditaudit.replay.policies import PromptBuilder

    return PromptBuilder(policy.tokenizer, history_length=history_length,
                         use_chat_template=policy.prompt_builder.mode == "chat",
                         instruction=policy.prompt_builder.instruction,
                         list_admissible=policy.prompt_builder.list_admissible)


def hindsight_prompts(trajectory: Trajectory, builder) -> list[str]:
    """The hindsight prompt of every turn of ``trajectory`` (outcome injected)."""
    from creditaudit.replay.policies import Turn, format_hindsight

    hindsight = format_hindsight(trajectory.final_observation, trajectory.won)
    prompts, history = [], []
    for rec in trajectory.turns:
        prompts.append(builder.build(trajectory.goal, rec.observation, rec.admissible, history, hindsight=hindsight))
        history.append(Turn(rec.observation, rec.action))
    return prompts


# ------------------------------------------------------------------------------ training side


def hcapo_q_values(rho: Sequence[float], outcome: float, *, gamma: float = 0.95) -> np.ndarray:
    """``Q_t = rho_t * gamma^(T-1-t) * R`` for ``t = 0..T-1`` (``T`` turns).

    Examples
    --------
    >>> hcapo_q_values([1.0, 1.2, 0.8], 1.0, gamma=0.5).tolist()
    [0.25, 0.6, 0.8]
    """
    r = np.asarray(rho, dtype=float)
    if not 0 < gamma <= 1:
        raise ValueError(f"`gamma` must be in (0, 1]; got {gamma!r}")
    n = r.size
    return r * gamma ** (n - 1 - np.arange(n)) * float(outcome)


def backward_smoothing(values: Sequence[float], *, alpha: float = 0.5) -> np.ndarray:
    """Backward exponential smoothing: ``Q~_{n-1} = Q_{n-1}``, ``Q~_t = (1-alpha) Q_t + alpha Q~_{t+1}``.

    Examples
    --------
    >>> backward_smoothing([0.0, 0.0, 1.0], alpha=0.5).tolist()
    [0.25, 0.5, 1.0]
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"`alpha` must be in [0, 1]; got {alpha!r}")
    q = np.asarray(values, dtype=float)
    out = q.copy()
    for t in range(q.size - 2, -1, -1):
        out[t] = (1 - alpha) * q[t] + alpha * out[t + 1]
    return out


def multiscale_advantage(
    outcomes: Sequence[float], q_values: Sequence[Sequence[float]], *, omega: float = 1.0, do_no_harm: bool = True,
) -> list[np.ndarray]:
    """HCAPO's multi-scale advantage of one task group.

    Parameters
    ----------
    outcomes : sequence of float
        ``R_i`` of the group's trajectories.
    q_values : sequence of sequences
        The (smoothed) ``Q_t`` of each trajectory.
    omega : float, default 1.0
    do_no_harm : bool, default True

    Returns
    -------
    list of numpy.ndarray
        ``A_{i,t} = z_group(R)_i + omega * z(Q)_{i,t}`` with ``z(Q)`` over all the group's turns
        (population standard deviation; zeros when constant); with ``do_no_harm`` a negative micro
        term is zeroed in trajectories with ``R_i > 0``.
    """
    r = np.asarray(outcomes, dtype=float)
    if len(q_values) != r.size:
        raise ValueError("`q_values` must hold one sequence per outcome")
    macro = grpo_advantages(r)
    flat = np.concatenate([np.asarray(q, dtype=float) for q in q_values]) if r.size else np.zeros(0)
    sd = flat.std() if flat.size else 0.0
    out, start = [], 0
    for i, q in enumerate(q_values):
        n = len(q)
        micro = (flat[start:start + n] - flat.mean()) / sd if sd > 0 else np.zeros(n)
        micro = omega * micro
        if do_no_harm and r[i] > 0:
            micro = np.maximum(micro, 0.0)
        out.append(macro[i] + micro)
        start += n
    return out


@dataclass(frozen=True)
class HCAPOAdvantage:
    """Every intermediate of HCAPO's advantage for one task group (one array per trajectory)."""

    q: list[np.ndarray]
    q_smoothed: list[np.ndarray]
    advantage: list[np.ndarray]


def hcapo_advantages(
    rhos: Sequence[Sequence[float]], outcomes: Sequence[float], *, gamma: float = 0.95, smoothing_alpha: float = 0.5,
    omega: float = 1.0, do_no_harm: bool = True,
) -> HCAPOAdvantage:
    """rho -> Q -> backward smoothing -> multi-scale advantage, for one task group."""
    q = [hcapo_q_values(rho, r, gamma=gamma) for rho, r in zip(rhos, outcomes, strict=True)]
    smooth = [backward_smoothing(v, alpha=smoothing_alpha) for v in q]
    return HCAPOAdvantage(q, smooth, multiscale_advantage(outcomes, smooth, omega=omega, do_no_harm=do_no_harm))


# ------------------------------------------------------------------------------ the family


#: Columns of this family's diagnostics table (``signals/diagnostics/<name>.parquet``).
DIAGNOSTICS_SCHEMA = pa.schema([
    pa.field("trajectory_id", pa.string()),
    pa.field("turn", pa.int32()),
    pa.field("prompt_sha256", pa.string()),
    pa.field("token_logprobs", pa.list_(pa.float64())),
    pa.field("mean_logprob_hind", pa.float64()),
    pa.field("mean_logprob_prior", pa.float64()),
    pa.field("pi_hind", pa.float64()),
    pa.field("ratio", pa.float64()),
    pa.field("rho", pa.float64()),
])


class ImplicitFamily(FamilyBase):
    """The ``implicit`` credit family (HCAPO rho_t). Constants are the protocol's; the
    training-side ones (gamma, smoothing, omega, do-no-harm) are recorded for the training arms.

    rho is a ratio around 1 (``neutral = 1.0``), scored by the audited policy; it is the family
    whose credit the fluency echo (T3) tests."""

    neutral = 1.0
    needs = frozenset({"policy"})
    fluency_echo = True

    def __init__(self, *, name: str, temperature: float = 5.0, history_length: int = 2, clip_low: float = 0.8,
                 clip_high: float = 1.2, gamma: float = 0.95, smoothing_alpha: float = 0.5, omega: float = 1.0,
                 do_no_harm: bool = True):
        self.name = name
        self.temperature = temperature
        self.history_length = history_length
        self.clip_low, self.clip_high = clip_low, clip_high
        self.training = {"gamma": gamma, "smoothing_alpha": smoothing_alpha, "omega": omega, "do_no_harm": do_no_harm}

    def compute(self, context: SignalContext) -> FamilyOutput:
        policy = context.policy()
        builder = hindsight_builder(policy, self.history_length)
        values, reasons = {}, {}
        cols = {k: [] for k in DIAGNOSTICS_SCHEMA.names}
        total = len(context.trajectories)
        for done, traj in enumerate(context.trajectories, start=1):
            prompts = hindsight_prompts(traj, builder)
            scored = [k for k, rec in enumerate(traj.turns) if rec.action.strip() and policy.encode_action(rec.action)]
            scores = policy.score([prompts[k] for k in scored], [traj.turns[k].action for k in scored]) if scored else []
            by_turn = dict(zip(scored, scores))
            pis = {k: pi_hind(s.mean_logprob, temperature=self.temperature) for k, s in by_turn.items()}
            ratio = rho = {}
            if pis:
                r, c = hindsight_ratio([pis[k] for k in scored], clip_low=self.clip_low, clip_high=self.clip_high)
                ratio, rho = dict(zip(scored, r.tolist())), dict(zip(scored, c.tolist()))
            for k, rec in enumerate(traj.turns):
                key = (traj.trajectory_id, rec.turn)
                if k in rho:
                    values[key] = rho[k]
                else:
                    reasons[key] = "empty_action"
                s = by_turn.get(k)
                cols["trajectory_id"].append(traj.trajectory_id)
                cols["turn"].append(rec.turn)
                cols["prompt_sha256"].append(sha256_bytes(prompts[k].encode("utf-8")))
                cols["token_logprobs"].append(list(s.token_logprobs) if s is not None else [])
                cols["mean_logprob_hind"].append(s.mean_logprob if s is not None else None)
                cols["mean_logprob_prior"].append(rec.mean_logprob)
                cols["pi_hind"].append(pis.get(k))
                cols["ratio"].append(ratio.get(k))
                cols["rho"].append(rho.get(k))
            context.report(self.name, done, total)
        table = pa.Table.from_pydict(cols, schema=DIAGNOSTICS_SCHEMA)
        ratios = [v for v in cols["ratio"] if v is not None]
        clipped = sum(1 for v in ratios if not self.clip_low <= v <= self.clip_high)
        report = {
            "prompt_template_sha256": builder.template_hash,
            "temperature": self.temperature,
            "history_length": self.history_length,
            "share_clipped": clipped / len(ratios) if ratios else None,
            "training": self.training,
        }
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), table, report)


def implicit_family(
    *,
    name: str,
    temperature: Annotated[float, Field(gt=0.0)] = 5.0,
    history_length: Annotated[int, Field(ge=0)] = 2,
    clip_low: float = 0.8,
    clip_high: float = 1.2,
    gamma: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95,
    smoothing_alpha: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5,
    omega: Annotated[float, Field(ge=0.0)] = 1.0,
    do_no_harm: bool = True,
) -> ImplicitFamily:
    """The implicit (HCAPO) family (entry point ``implicit`` of group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's name for the signal.
    temperature : float, default 5.0
        T in ``pi_hind = exp(mean_j log pi(y_j | ...) / T)``.
    history_length : int, default 2
        Past turns in the hindsight prompt.
    clip_low, clip_high : float, default 0.8, 1.2
        Clip range of rho; ``clip_low < 1 < clip_high``.
    gamma : float, default 0.95
        Discount of the training-side ``Q_t``.
    smoothing_alpha : float, default 0.5
        Backward temporal smoothing of Q.
    omega : float, default 1.0
        Weight of the micro term in the multi-scale advantage.
    do_no_harm : bool, default True
        Zero the negative micro term in successful trajectories.
    """
    if not clip_low < 1.0 < clip_high:
        raise ValueError("`clip_low` < 1 < `clip_high` is required")
    return ImplicitFamily(name=name, temperature=temperature, history_length=history_length, clip_low=clip_low,
                          clip_high=clip_high, gamma=gamma, smoothing_alpha=smoothing_alpha, omega=omega,
                          do_no_harm=do_no_harm)
