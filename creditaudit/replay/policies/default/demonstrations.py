"""Noisy demonstrations of the searching expert: what the default policy is cloned from.

At each step, with probability ``noise_rate`` (at most twice in a row), a mistake is injected
that does not make the task impossible: half of the time an inadmissible variant of the expert's
command (the engine answers "Nothing happens." and nothing changes), otherwise a wrong admissible
``go to``, ``examine`` or ``open``. The expert then acts from the state the mistake produced.
Mistaken actions appear in later prompts' history but are never training targets (DART-style
noise injection). Every example keeps the structured state it was played from
(:class:`DemoState`), so it can be relabelled under another goal or given soft search targets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from creditaudit.protocol import seeds as seed_streams
from creditaudit.replay.policies.prompts import PromptBuilder

__all__ = [
    "DemoState",
    "BCExample",
    "DemonstrationReport",
    "noisy_demonstrations",
    "parallel_demonstrations",
    "demo_rng",
]

@dataclass(frozen=True)
class DemoState:
    """What the demonstrator saw at one step: the inputs of :func:`expert_action` and of the
    prompt (``history`` holds the last ``history_length`` turns, at least two)."""

    goal: str
    observation: str
    admissible: tuple[str, ...]
    history: tuple[tuple[str, str], ...]
    history_length: int


@dataclass(frozen=True)
class BCExample:
    """One behaviour-cloning example: a prompt, the action that follows, and whether the action
    is a training target (mistakes are context only). ``state`` (demonstrations only) keeps the
    structured inputs, so the example can be relabelled under another goal
    (:func:`relabel_goal`)."""

    prompt: str
    action: str
    target: bool = True
    state: DemoState | None = None


# Verbs of mistakes that never make a task impossible: moving, looking, opening. Taking,
# putting, heating, cooling, cleaning, slicing or using the wrong thing can (an object put in the
# wrong place may stay reachable, but a wrong ``heat`` or ``use`` changes what the verifier sees).
_SAFE_MISTAKES = ("go to ", "examine ", "open ")
_MAX_CONSECUTIVE_MISTAKES = 2


@dataclass(frozen=True)
class DemonstrationReport:
    """What :func:`noisy_demonstrations` produced.

    Attributes
    ----------
    examples : tuple of BCExample
        Every step taken, in play order; mistakes have ``target=False``.
    mistakes : int
        Injected mistakes.
    episodes : int
        Demonstration episodes played (games x passes).
    episodes_won : int
        Episodes that ended in a win before the horizon.
    """

    examples: tuple[BCExample, ...]
    mistakes: int
    episodes: int
    episodes_won: int


def _garbled(expert: str, admissible: Sequence[str]) -> str | None:
    """An inadmissible variant of the expert's command (its last instance number changed), which
    the engine answers with "Nothing happens." and which changes nothing."""
    words = expert.split()
    for k in range(len(words) - 1, -1, -1):
        if words[k].isdigit():
            for delta in (1, 2, 3):
                candidate = " ".join(words[:k] + [str(int(words[k]) + delta)] + words[k + 1 :])
                if candidate not in admissible:
                    return candidate
            return None
    return None


def _mistake_candidates(admissible: Sequence[str], expert: str) -> list[str]:
    return [a for a in admissible if a != expert and a.startswith(_SAFE_MISTAKES)]


def noisy_demonstrations(
    tasks: Sequence[Any],
    env: Any,
    *,
    noise_rate: float,
    history_length: int,
    rng_for: Callable[[int], Any],
    passes: int = 1,
    expert: Callable[..., str] | None = None,
    inadmissible_share: float = 0.5,
) -> DemonstrationReport:
    """Play the searching expert on every task with injected mistakes and record the prompts.

    Parameters
    ----------
    tasks : sequence of Task
        The games (``env.reset(task)``).
    env : Environment
        An environment instance (reset per episode; its horizon ends an episode).
    noise_rate : float
        Probability, at each step, of first taking a plausible wrong action (at most two in a
        row): half of the time an inadmissible variant of the expert's command (its last instance
        number changed; the engine answers "Nothing happens." and nothing changes), otherwise a
        wrong admissible ``go to``, ``examine`` or ``open``.
    history_length : int
        Turns of history in the prompts (the policy's ``history_length``).
    rng_for : callable
        ``rng_for(episode)`` returns the ``numpy.random.Generator`` of that episode (its mistakes
        and the expert's search draws); episode ``k`` is pass ``k // len(tasks)`` of task
        ``k % len(tasks)``.
    passes : int, default 1
        Episodes per task (each with its own draws: the search goes elsewhere, the mistakes
        fall elsewhere).
    expert : callable, optional
        ``expert(goal, observation, admissible, history, rng) -> action``; the observation-only
        searcher :func:`creditaudit.replay.envs.alfworld.expert.expert_action` by default.

    Notes
    -----
    The expert labels every state the episode reaches, including those a mistake led to, so the
    policy learns to act from states off the expert's own path (DART-style noise injection),
    including the "Nothing happens." its own rollouts produce. Mistaken actions appear in later
    prompts' history but are never training targets.
    """
    episodes = [
        play_demonstration(tasks[k % len(tasks)], env, rng_for(k), noise_rate=noise_rate,
                            history_length=history_length, expert=expert, inadmissible_share=inadmissible_share)
        for k in range(len(tasks) * int(passes))
    ]
    return _merge_episodes(episodes)


def _merge_episodes(episodes: Sequence[tuple[list[BCExample], int, bool]]) -> DemonstrationReport:
    examples = [ex for played, _, _ in episodes for ex in played]
    return DemonstrationReport(tuple(examples), sum(m for _, m, _ in episodes), len(episodes),
                               sum(bool(w) for _, _, w in episodes))


def play_demonstration(task: Any, env: Any, rng: Any, *, noise_rate: float, history_length: int,
                        expert: Callable[..., str] | None = None,
                        inadmissible_share: float = 0.5) -> tuple[list[BCExample], int, bool]:
    """One noisy demonstration episode: (examples, mistakes, won)."""
    if expert is None:
        from creditaudit.replay.envs.alfworld.expert import expert_action as expert
    from creditaudit.replay.envs.alfworld.env import ALFWORLD_PROMPT

    builder = PromptBuilder(None, history_length=history_length, instruction=ALFWORLD_PROMPT.instruction)
    examples: list[BCExample] = []
    mistakes = 0
    obs = env.reset(task)
    goal, text, admissible = obs.goal, obs.text, tuple(obs.admissible)
    history: list[tuple[str, str]] = []
    in_a_row = 0
    while True:
        label = expert(goal, text, admissible, history, rng)
        action, target = label, True
        if in_a_row < _MAX_CONSECUTIVE_MISTAKES and rng.random() < noise_rate:
            candidates = _mistake_candidates(admissible, label)
            garbled = _garbled(label, admissible)
            if garbled is not None and (not candidates or rng.random() < inadmissible_share):
                action, target = garbled, False
            elif candidates:
                action, target = candidates[int(rng.integers(len(candidates)))], False
        in_a_row = 0 if target else in_a_row + 1
        mistakes += not target
        state = DemoState(goal, text, admissible, tuple(history[-max(2, history_length):]), history_length)
        examples.append(BCExample(builder.build(goal, text, admissible, history), action, target, state))
        result = env.step(action)
        history.append((text, action))
        text, admissible = result.text, tuple(result.admissible)
        if result.done:
            return examples, mistakes, bool(result.won)


def demo_rng(root: str, episode: int) -> Any:
    return seed_streams.rng(root, f"policy/demo/{episode}")


def _demonstration_worker(job: tuple[Any, Sequence[tuple[int, Any]], str, float, int]) -> list[tuple[list[BCExample], int, bool]]:
    """Play the episodes ``[(k, task), ...]`` of one worker on its own engine."""
    env_factory, work, root, noise_rate, history_length = job
    env = env_factory()
    try:
        return [play_demonstration(task, env, demo_rng(root, k), noise_rate=noise_rate,
                                    history_length=history_length) for k, task in work]
    finally:
        env.close()


def parallel_demonstrations(tasks: Sequence[Any], env_factory: Callable[[], Any], *, root: str, noise_rate: float,
                            history_length: int, passes: int = 1, workers: int = 1) -> DemonstrationReport:
    """:func:`noisy_demonstrations` with episode ``k`` drawn from stream ``policy/demo/<k>`` of
    ``root``, played on ``workers`` processes (each with its own engine from the picklable
    ``env_factory``). Episodes are dealt round-robin and merged back in episode order, so the
    result is identical for any number of workers."""
    jobs = [(k, tasks[k % len(tasks)]) for k in range(len(tasks) * int(passes))]
    workers = max(1, min(int(workers), len(jobs)))
    if workers == 1:
        played = _demonstration_worker((env_factory, jobs, root, noise_rate, history_length))
        return _merge_episodes(played)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = [jobs[w::workers] for w in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_demonstration_worker,
                                [(env_factory, share, root, noise_rate, history_length) for share in shares]))
    by_episode: dict[int, tuple[list[BCExample], int, bool]] = {}
    for share, result in zip(shares, results):
        by_episode.update({k: r for (k, _), r in zip(share, result)})
    return _merge_episodes([by_episode[k] for k, _ in jobs])
