"""Soft targets of search steps: a searching ``go to`` is trained against the expert's whole
distribution over the places it searches, not against its one draw.

A draw says "cabinet 3" where the expert would as gladly have gone to any of eight places and
never back to the two it just left; the distribution (:func:`expert_search`) says all of that at
every search step. :func:`search_soft_targets` turns it into per-token targets on the place's
kind and number words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from creditaudit.replay.policies.default.demonstrations import DemoState

__all__ = ["expert_search", "search_soft_targets"]

class _DrawRecorder:
    """Stands in for the expert's random generator: draws with ``rng`` and keeps the
    probabilities of the draw (the expert draws only when it searches)."""

    def __init__(self, rng: Any):
        self.rng = rng
        self.p: list[float] | None = None

    def choice(self, n: int, p: Sequence[float]) -> Any:
        self.p = [float(x) for x in p]
        return self.rng.choice(n, p=self.p)


def expert_search(state: DemoState, rng: Any, expert: Callable[..., str] | None = None) -> tuple[str, dict[str, float] | None]:
    """The expert's action in ``state`` (drawn with ``rng``) and, when that action is a search
    step, the whole distribution it was drawn from, ``{place: probability}`` (places of zero
    probability left out); ``None`` for a decision the expert takes deterministically.

    Examples
    --------
    >>> import numpy as np
    >>> state = DemoState("put a mug in desk.", "You arrive at shelf 1.",
    ...                   ("go to cabinet 1", "go to desk 1", "go to sofa 1", "examine shelf 1"), (), 2)
    >>> action, dist = expert_search(state, np.random.default_rng(0))
    >>> sorted(dist), action[len("go to "):] in dist
    (['cabinet 1', 'desk 1', 'sofa 1'], True)
    """
    from creditaudit.replay.envs.alfworld.expert import expert_action

    recorder = _DrawRecorder(rng)
    action = (expert or expert_action)(state.goal, state.observation, state.admissible, state.history, recorder)
    if recorder.p is None:
        return action, None
    places = [a[len("go to "):] for a in state.admissible if a.startswith("go to ")]
    if len(places) != len(recorder.p):
        raise ValueError("the expert drew among something other than the `go to` commands")
    return action, {place: q for place, q in zip(places, recorder.p) if q > 0}


def _place_tokens(tokenizer: Any, place: str, cache: dict[str, tuple[int, int] | None]) -> tuple[int, int] | None:
    """``(kind id, number id)`` of a place name such as ``cabinet 3``; ``None`` unless it is
    exactly two known words."""
    if place not in cache:
        ids = list(tokenizer(place, add_special_tokens=False)["input_ids"])
        cache[place] = (ids[0], ids[1]) if len(ids) == 2 and tokenizer.unk_token_id not in ids else None
    return cache[place]


def search_soft_targets(tokenizer: Any, action_ids: Sequence[int], dist: dict[str, float],
                         cache: dict[str, tuple[int, int] | None]) -> list[tuple[int, list[int], list[float]]] | None:
    """Soft targets of a ``go to <kind> <number>`` search step: at the kind word, the expert's
    probability of each kind (summed over its places); at the number, the expert's probability of
    each place of the drawn kind, renormalised. Together they are the cross-entropy against the
    expert's whole distribution over places (the number's term for the kind drawn, an unbiased
    estimate of the rest), instead of against one draw from it. ``(offset in the action, ids,
    probabilities)`` pairs; ``None`` when the names do not tokenize as two words."""
    tokens = {place: _place_tokens(tokenizer, place, cache) for place in dist}
    if len(action_ids) != 4 or any(t is None for t in tokens.values()):
        return None
    kind_id = action_ids[2]
    kinds: dict[int, float] = {}
    numbers: dict[int, float] = {}
    for place, q in dist.items():
        k, num = tokens[place]
        kinds[k] = kinds.get(k, 0.0) + q
        if k == kind_id:
            numbers[num] = numbers.get(num, 0.0) + q
    if kind_id not in kinds or action_ids[3] not in numbers:
        return None
    total_k, total_n = sum(kinds.values()), sum(numbers.values())
    return [(2, list(kinds), [q / total_k for q in kinds.values()]),
            (3, list(numbers), [q / total_n for q in numbers.values()])]
