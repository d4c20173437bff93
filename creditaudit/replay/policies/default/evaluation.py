"""Held-out success of a policy: sampled rollouts on a set of games, in lockstep batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from creditaudit.protocol import seeds as seed_streams
from creditaudit.replay.policies.base import candidate_kwargs

__all__ = ["PolicyEvaluation", "evaluate_policy", "task_of"]

@dataclass(frozen=True)
class PolicyEvaluation:
    """Success and admissibility of a policy's sampled rollouts on a set of games.

    Attributes
    ----------
    episodes : int
        Rollouts played.
    successes : int
        Rollouts that won before the horizon.
    steps : int
        Actions taken in all rollouts.
    admissible_steps : int
        Actions that were in the admissible list of the state they were taken in.
    temperature : float
    per_task : dict
        ``{task_id: [won, ...]}`` per rollout.
    """

    episodes: int
    successes: int
    steps: int
    admissible_steps: int
    temperature: float
    per_task: dict[str, list[bool]]

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    @property
    def admissible_rate(self) -> float:
        return self.admissible_steps / self.steps if self.steps else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "steps": self.steps,
            "admissible_steps": self.admissible_steps,
            "admissible_rate": self.admissible_rate,
            "temperature": self.temperature,
        }


def evaluate_policy(
    policy: Any,
    tasks: Sequence[Any],
    *,
    env_factory: Callable[[], Any],
    seed: int | str,
    temperature: float = 0.7,
    rollouts_per_task: int = 1,
    n_envs: int = 8,
    progress: Callable[[str, int, int], None] | None = None,
    on_episode: Callable[[int, int, Any], None] | None = None,
) -> PolicyEvaluation:
    """Roll out ``policy`` on ``tasks`` and measure its success and admissible-action rates.

    Parameters
    ----------
    policy : HFPolicy (or any ActionPolicy)
    tasks : sequence of Task (or GeneratedGame)
    env_factory : callable
        Makes one environment instance (its ``horizon`` ends an episode); ``n_envs`` are made and
        closed.
    seed : int or str
        Root of the rollout seeds: the action of rollout ``r`` of task ``i`` at step ``t`` is
        sampled with ``seed_int(str(seed), "policy/eval/<i>/<r>/<t>")``, so results do not depend
        on ``n_envs`` or on how rollouts are batched.
    temperature : float, default 0.7
    rollouts_per_task : int, default 1
    n_envs : int, default 8
        Rollouts played in lockstep (one environment each), sampled in one batch per step.
    progress : callable, optional
        ``progress("evaluate", episodes_done, episodes_total)``.
    on_episode : callable, optional
        ``on_episode(i, r, env)`` when rollout ``r`` of task ``i`` ends, before its environment
        plays anything else (a recording wrapper such as
        :class:`~creditaudit.signals.families.judge_data.PlannerProbe` is read there).
    """
    tasks = [task_of(t) for t in tasks]
    jobs = [(i, r) for i in range(len(tasks)) for r in range(rollouts_per_task)]
    root = f"policy-eval:{seed}"
    builder = policy.prompt_builder
    per_task: dict[str, list[bool]] = {t.task_id: [] for t in tasks}
    results: dict[tuple[int, int], bool] = {}
    steps = admissible_steps = 0
    envs = [env_factory() for _ in range(max(1, min(n_envs, len(jobs))))]
    try:
        for wave in range(0, len(jobs), len(envs)):
            live = []
            for env, job in zip(envs, jobs[wave : wave + len(envs)]):
                obs = env.reset(tasks[job[0]])
                live.append({"env": env, "job": job, "goal": obs.goal, "text": obs.text,
                             "admissible": tuple(obs.admissible), "history": [], "t": 0})
            while live:
                prompts = [builder.build(s["goal"], s["text"], s["admissible"], s["history"]) for s in live]
                seeds = [
                    seed_streams.seed_int(root, f"policy/eval/{s['job'][0]}/{s['job'][1]}/{s['t']}") for s in live
                ]
                actions = policy.sample(prompts, seeds=seeds, temperature=temperature,
                                        **candidate_kwargs(policy, [s["admissible"] for s in live]))
                still = []
                for s, a in zip(live, actions):
                    steps += 1
                    admissible_steps += a.text in s["admissible"]
                    result = s["env"].step(a.text)
                    s["history"].append((s["text"], a.text))
                    s["text"], s["admissible"], s["t"] = result.text, tuple(result.admissible), s["t"] + 1
                    if result.done:
                        results[s["job"]] = bool(result.won)
                        if on_episode is not None:
                            on_episode(s["job"][0], s["job"][1], s["env"])
                        if progress is not None:
                            progress("evaluate", len(results), len(jobs))
                    else:
                        still.append(s)
                live = still
    finally:
        for env in envs:
            env.close()
    for (i, r) in jobs:
        per_task[tasks[i].task_id].append(results[(i, r)])
    return PolicyEvaluation(
        episodes=len(jobs),
        successes=sum(results.values()),
        steps=steps,
        admissible_steps=admissible_steps,
        temperature=float(temperature),
        per_task=per_task,
    )


def task_of(game: Any) -> Any:
    """The ``Task`` of a generated game (or the task itself)."""
    from creditaudit.replay.envs.base import Task

    return game if isinstance(game, Task) else game.task
