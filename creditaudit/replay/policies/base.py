"""The policy contract: what collection, replay and the signals need from a policy, and what it
returns.

A policy samples one action per prompt at a temperature (:class:`SampledAction`, with the
token-level log-probabilities at temperature 1) and scores given actions after given prompts
(:class:`ActionScore`). :class:`~creditaudit.replay.policies.hf.HFPolicy` implements it over any
local ``transformers`` causal LM; prompts come from
:class:`~creditaudit.replay.policies.prompts.PromptBuilder`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from creditaudit.replay.policies.prompts import PromptBuilder

__all__ = ["DECODINGS", "Turn", "SampledAction", "ActionScore", "ActionPolicy", "candidate_kwargs", "scoring_memo",
           "distinct_rows"]

DECODINGS = ("free", "admissible", "constrained")
"""How a policy turns its distribution into an action (the protocol's ``policy.decoding``)."""


@dataclass(frozen=True)
class Turn:
    """One past turn shown in the prompt: what the agent saw, and what it did next."""

    observation: str
    action: str


@dataclass(frozen=True)
class SampledAction:
    """One sampled action.

    Attributes
    ----------
    text : str
        The action text: the decoded tokens up to the first end of line or end-of-sequence,
        stripped of surrounding whitespace.
    token_ids : tuple of int
        The generated action tokens (the stop token excluded).
    token_logprobs : tuple of float
        Natural-log probability of each action token under the policy at temperature 1 (the
        policy's own probabilities, whatever the sampling temperature).
    stop_reason : {"eos", "newline", "max_tokens", "candidate"}
        Why generation stopped (``"candidate"``: chosen among admissible commands).
    stop_logprob : float or None
        Log-probability (temperature 1) of the stop token; ``None`` for ``"max_tokens"``.
    seed : int
        The row's seed.
    """

    text: str
    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    stop_reason: str
    stop_logprob: float | None
    seed: int

    @property
    def sum_logprob(self) -> float:
        """Sum of the action tokens' log-probabilities."""
        return float(math.fsum(self.token_logprobs))

    @property
    def mean_logprob(self) -> float:
        """Mean of the action tokens' log-probabilities (NaN for an empty action)."""
        return self.sum_logprob / len(self.token_logprobs) if self.token_logprobs else float("nan")


@dataclass(frozen=True)
class ActionScore:
    """Token-level log-probability of a given action after a given prompt (temperature 1).

    Attributes
    ----------
    token_ids : tuple of int
        The action's tokens (the action tokenized on its own, no special tokens added).
    token_logprobs : tuple of float
        ``log pi(y_j | prompt, y_<j)`` per action token.
    stop_logprob : float or None
        Log-probability of the end-of-sequence token after the action, when requested.
    """

    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    stop_logprob: float | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def sum_logprob(self) -> float:
        """``sum_j log pi(y_j | ...)``."""
        return float(math.fsum(self.token_logprobs))

    @property
    def mean_logprob(self) -> float:
        """``mean_j log pi(y_j | ...)`` (HCAPO's and the confidence signal's per-token mean)."""
        return self.sum_logprob / len(self.token_logprobs)


@runtime_checkable
class ActionPolicy(Protocol):
    """What collection, replay and the signals need from a policy."""

    prompt_builder: PromptBuilder

    def sample(
        self, prompts: Sequence[str], *, seeds: Sequence[int], temperature: float, max_action_tokens: int | None = None
    ) -> list[SampledAction]: ...

    def score(self, prompts: Sequence[str], actions: Sequence[str], *, include_stop: bool = False) -> list[ActionScore]: ...


def scoring_memo(policy: Any) -> Any:
    """``policy.scoring_memo()`` (remember every scored (prompt, candidate) pair inside the block)
    for a policy that has one, else a block that does nothing."""
    from contextlib import nullcontext

    return policy.scoring_memo() if hasattr(policy, "scoring_memo") else nullcontext()


def distinct_rows(prompts: Sequence[str], actions: Sequence[str]) -> tuple[list[int], list[int]]:
    """The rows of a scoring call that are scored, and which of them each row takes its numbers from.

    Returns ``(first, source)``: ``first`` lists the index of each distinct ``(prompt, action)``
    pair's first row, in input order; ``source[i]`` is the position in ``first`` of row ``i``'s
    pair. A policy scores ``first`` only and gives every repeat its pair's numbers: a batched
    forward pass rounds a row's floats by the batch it lands in (its padding, its neighbours), so
    scoring a repeat again would give an equal turn a number differing in the seventh digit, which
    a within-trajectory rank then orders as if it meant something.
    """
    index: dict[tuple[str, str], int] = {}
    first: list[int] = []
    source = []
    for i, key in enumerate(zip(prompts, actions)):
        k = index.setdefault(key, len(first))
        if k == len(first):
            first.append(i)
        source.append(k)
    return first, source


def candidate_kwargs(policy: Any, admissible: list[tuple[str, ...]]) -> dict[str, Any]:
    """``{"candidates": ...}`` for a policy that draws among admissible commands, else ``{}``
    (free-decoding policies and reference policies take no candidates)."""
    return {"candidates": admissible} if getattr(policy, "decoding", "free") in ("admissible", "constrained") else {}
