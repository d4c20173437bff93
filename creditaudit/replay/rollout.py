"""Lockstep rollouts on one live environment instance, with batched policy calls.

Many rollouts (a task's group of G, or a turn's replay arms) advance together: at each round the
policy samples one action for every unfinished rollout in one batched call, then each rollout's
state is restored into the single engine instance, stepped, and snapshotted again. Restoring costs
well under a millisecond against a reset plus a replayed prefix (see
``../shared/notes/alfworld-offline.md``), and every restore is checked against the snapshot's
state signature by the environment.

Every sampled action has its own seed (a function of the caller's named stream and the rollout's
position), and the policy's sampling is row-independent, so a rollout's actions do not depend on
which other rollouts share its batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from creditaudit.protocol.canonical import sha256_bytes
from creditaudit.replay.envs.base import Environment
from creditaudit.replay.policies.base import ActionPolicy, Turn, candidate_kwargs
from creditaudit.replay.policies.prompts import PromptBuilder
from creditaudit.replay.records import TurnRecord

__all__ = ["Rollout", "TransitionCache", "start_rollout", "advance"]


@dataclass
class Rollout:
    """One in-flight rollout: its restorable state and what it has done so far."""

    key: Any
    goal: str
    snapshot: Any
    signature: str
    observation: str
    admissible: tuple[str, ...]
    history: list[Turn] = field(default_factory=list)
    steps: int = 0
    done: bool = False
    won: bool = False
    turns: list[TurnRecord] = field(default_factory=list)
    engine_steps: int = 0
    """Transitions this rollout executed on the engine (with a cache: those it met first)."""
    cache_hits: int = 0
    """Transitions this rollout took from the transition cache."""

    @property
    def outcome(self) -> int:
        return int(self.done and self.won)


class TransitionCache:
    """Transitions of one live instance keyed by ``(state signature, action)``.

    The environment is deterministic, so a transition already executed need not be executed
    again: the cache keeps its result and the snapshot of the state it led to. Snapshots are
    valid only inside the instance (and episode) that made them, so a cache lives and dies with
    one work unit.
    """

    def __init__(self) -> None:
        self._store: dict[tuple[str, str], tuple[Any, Any, str | None]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, signature: str, action: str):
        entry = self._store.get((signature, action))
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, signature: str, action: str, result: Any, snapshot: Any, next_signature: str | None) -> None:
        self._store[(signature, action)] = (result, snapshot, next_signature)

    def __len__(self) -> int:
        return len(self._store)


def start_rollout(env: Environment, key: Any, *, goal: str, observation: str, admissible: Sequence[str],
                  history: Sequence[Turn] = (), steps: int = 0) -> Rollout:
    """A rollout starting from ``env``'s current state (snapshotted now)."""
    return Rollout(
        key=key,
        goal=goal,
        snapshot=env.snapshot(),
        signature=env.state_signature(),
        observation=observation,
        admissible=tuple(admissible),
        history=list(history),
        steps=steps,
    )


def advance(
    env: Environment,
    policy: ActionPolicy,
    builder: PromptBuilder,
    rollouts: Sequence[Rollout],
    *,
    seed_for: Callable[[Rollout], int],
    temperature: float,
    max_action_tokens: int | None = None,
    first_actions: dict[Any, str] | None = None,
    record: bool = True,
    cache: TransitionCache | None = None,
    on_step: Callable[[int], None] | None = None,
) -> None:
    """Advance every rollout to the end of its episode (in place).

    Parameters
    ----------
    seed_for : callable
        ``seed_for(rollout)`` -> the seed of the action the rollout samples next (called with the
        rollout in its current position, so ``rollout.steps`` identifies the turn).
    first_actions : dict, optional
        Forced first action by rollout key (the factual or alternative action of a replay arm);
        forced actions are recorded with empty log-probs and seed -1.
    record : bool
        Keep a :class:`~creditaudit.replay.records.TurnRecord` per decision (collection; replay
        keeps the actions).
    cache : TransitionCache, optional
        Reuse transitions already executed in this instance (replay); ``None`` always steps.
    on_step : callable, optional
        Called with the number of rollouts advanced in each round (progress display).
    """
    forced = dict(first_actions or {})
    active = [r for r in rollouts if not r.done]
    while active:
        to_sample = [r for r in active if r.key not in forced]
        prompts = [builder.build(r.goal, r.observation, r.admissible, r.history) for r in to_sample]
        samples = (
            policy.sample(prompts, seeds=[seed_for(r) for r in to_sample], temperature=temperature,
                          max_action_tokens=max_action_tokens,
                          **candidate_kwargs(policy, [r.admissible for r in to_sample]))
            if to_sample else []
        )
        by_key = {r.key: (p, s) for r, p, s in zip(to_sample, prompts, samples)}
        for rollout in active:
            if rollout.key in forced:
                action, prompt, logprobs, stop, seed = forced.pop(rollout.key), None, (), "forced", -1
            else:
                prompt, sample = by_key[rollout.key]
                action, logprobs, stop, seed = sample.text, sample.token_logprobs, sample.stop_reason, sample.seed
            entry = cache.get(rollout.signature, action) if cache is not None else None
            if entry is not None:
                result, next_snapshot, next_signature = entry
                rollout.cache_hits += 1
            else:
                rollout.engine_steps += 1
                env.restore(rollout.snapshot)
                result = env.step(action)
                next_snapshot = next_signature = None
                if not result.done:
                    next_snapshot, next_signature = env.snapshot(), env.state_signature()
                if cache is not None:
                    cache.put(rollout.signature, action, result, next_snapshot, next_signature)
            if record:
                token_logprobs = tuple(float(x) for x in logprobs)
                rollout.turns.append(
                    TurnRecord(
                        turn=rollout.steps,
                        observation=rollout.observation,
                        admissible=rollout.admissible,
                        action=action,
                        token_logprobs=token_logprobs,
                        mean_logprob=math.fsum(token_logprobs) / len(token_logprobs) if token_logprobs else None,
                        feedback=result.text,
                        state_signature=rollout.signature,
                        prompt_sha256=sha256_bytes(prompt.encode("utf-8")) if prompt is not None else "",
                        stop_reason=stop,
                        seed=int(seed),
                        done=result.done,
                        won=result.won,
                    )
                )
            rollout.history.append(Turn(rollout.observation, action))
            rollout.steps += 1
            rollout.observation, rollout.admissible = result.text, tuple(result.admissible)
            rollout.done, rollout.won = result.done, result.won
            if not result.done:
                rollout.snapshot, rollout.signature = next_snapshot, next_signature
        if on_step is not None:
            on_step(len(active))
        active = [r for r in active if not r.done]
