"""Labelled transcripts for the embedded judge model: noisy-expert rollouts on generated ALFWorld
games, each turn labelled by the planner's view of progress.

Label rule (planner progress)
    Before and after every step the engine's own planner (fast downward on the game's PDDL
    problem, from the current state, with full knowledge of where every object lies; the planner
    that writes the generated games' walkthroughs) gives the length ``d`` of the shortest plan
    still needed to win. A turn is

    * ``+1`` when its step shortens that plan (``d_after < d_before``): it reached a sub-goal the
      task needs -- went to where the object (or the appliance, lamp or target receptacle) is,
      opened what hides it, took, heated, cooled, cleaned, used or put it;
    * ``-1`` for the single step that lengthened the plan the most (``d_after > d_before``;
      ties: the earliest): walking away from an object in view, leaving the appliance before
      using it -- the one mistake TARL's judge may name (at most one -1 per trajectory);
    * ``0`` otherwise: a search that found nothing, an inadmissible command ("Nothing happens."),
      ``examine``, ``look``, and any further plan-lengthening step.

    Why the planner and not the searching expert: the expert's choice of where to look is a
    random draw (it cannot know where the object is), so "the expert would have done this" says
    nothing about whether the step helped; the planner's remaining-plan length is a property of
    the state alone and changes exactly at the steps a reader of the whole transcript can see
    helped (the object appears, is taken, is heated ...). The labels use engine state; the judge
    model never sees them or the state, only :func:`~creditaudit.signals.families.judge.judge_prompt`.

Rollouts
    :func:`creditaudit.replay.policies.default.demonstrations` plays the searching expert with
    injected mistakes (wrong ``go to`` / ``examine`` / ``open``, inadmissible variants) at a noise
    rate drawn per episode, so transcripts mix helpful, neutral and harmful steps and both
    outcomes (:func:`judge_rollouts`). The expert mostly wins in 10-25 turns, while an audit asks
    the judge about the default policy's own transcripts, half of them lost after 50 turns of
    searching, so the shipped default policy plays the same games too (:func:`judge_policy_rollouts`).
    Every draw comes from a named stream of the judge build seed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from creditaudit.protocol import seeds as seed_streams
from creditaudit.replay.records import Trajectory, TurnRecord

__all__ = ["JUDGE_BUILD_VERSION", "LabelledTrajectory", "progress_labels", "PlannerProbe", "judge_rollouts",
           "judge_policy_rollouts", "POLICY_PLAYED",
           "judge_stream_root", "labelled_to_dict", "labelled_from_dict"]

JUDGE_BUILD_VERSION = 2
"""Version of the judge build recipe; bumped whenever the same seed would give different files."""


def judge_stream_root(seed: int) -> str:
    """Root of the judge build's named seed streams."""
    return f"creditaudit-judge-build-v{JUDGE_BUILD_VERSION}:{int(seed)}"


@dataclass(frozen=True)
class LabelledTrajectory:
    """A transcript and its per-turn planner-progress labels (and the plan lengths behind them)."""

    trajectory: Trajectory
    labels: tuple[int, ...]
    plan_lengths: tuple[int, ...]
    noise_rate: float


def progress_labels(plan_lengths: Sequence[int], *, max_negative: int = 1) -> list[int]:
    """Per-turn labels from the remaining-plan lengths ``d_0 .. d_n`` (before turn 0 ... after the
    last turn): +1 where the plan shrank, -1 for the ``max_negative`` largest growths (ties: the
    earliest), 0 otherwise.

    Examples
    --------
    >>> progress_labels([4, 4, 3, 4, 5, 4, 0])
    [0, 1, -1, 0, 1, 1]
    """
    d = [int(x) for x in plan_lengths]
    labels = [1 if d[t + 1] < d[t] else 0 for t in range(len(d) - 1)]
    growth = sorted((t for t in range(len(d) - 1) if d[t + 1] > d[t]), key=lambda t: (d[t] - d[t + 1], t))
    for t in growth[:max_negative]:
        labels[t] = -1
    return labels


class PlannerProbe:
    """An :class:`~creditaudit.replay.envs.alfworld.env.AlfworldEnv` wrapper that records the
    transcript and the planner's remaining-plan length before and after every step (the
    demonstration machinery plays through it unchanged)."""

    def __init__(self, env: Any):
        self.env = env
        self.turns: list[dict[str, Any]] = []
        self.plan_lengths: list[int] = []
        self.goal = ""
        self._memo: dict[tuple[str, ...], int] = {}  # planner facts -> plan length (one task)
        self._task_id = ""
        self._text = ""
        self._admissible: tuple[str, ...] = ()

    def _plan_length(self) -> int:
        if self.env.won:
            return 0
        # The plan length is a function of the planner's facts, asked once per state; ``checked``
        # (set by visiting / examining) is in no action's precondition, so it is left out of the key.
        facts = tuple(f for f in self.env._planner_facts() if "checked" not in f.lower())
        if facts not in self._memo:
            pddl = self.env._pddl  # the engine's planner, from the current state (it does not move it)
            self._memo[facts] = len(pddl._pddl_state.replan(pddl._entity_infos))
        return self._memo[facts]

    def reset(self, task: Any) -> Any:
        if task.task_id != self._task_id:
            self._memo, self._task_id = {}, task.task_id
        obs = self.env.reset(task)
        self.turns, self.plan_lengths = [], [self._plan_length()]
        self.goal, self._text, self._admissible = obs.goal, obs.text, tuple(obs.admissible)
        return obs

    def step(self, action: str) -> Any:
        result = self.env.step(action)
        self.plan_lengths.append(self._plan_length())
        self.turns.append({"observation": self._text, "admissible": self._admissible, "action": action,
                           "feedback": result.text, "done": bool(result.done), "won": bool(result.won)})
        self._text, self._admissible = result.text, tuple(result.admissible)
        return result

    def close(self) -> None:
        self.env.close()

    def labelled(self, trajectory_id: str, task_id: str, rollout: int, noise_rate: float) -> LabelledTrajectory:
        """The episode just played, as a labelled transcript."""
        turns = tuple(TurnRecord(i, t["observation"], t["admissible"], t["action"], (), None, t["feedback"],
                                 done=t["done"], won=t["won"]) for i, t in enumerate(self.turns))
        won = bool(self.turns and self.turns[-1]["won"])
        traj = Trajectory(trajectory_id, task_id, rollout, self.goal, int(won), turns)
        return LabelledTrajectory(traj, tuple(progress_labels(self.plan_lengths)), tuple(self.plan_lengths),
                                  float(noise_rate))


def _noise_rate(root: str, episode: int, noise_rates: Sequence[float]) -> float:
    return float(noise_rates[int(seed_streams.rng(root, f"judge/noise/{episode}").integers(len(noise_rates)))])


def _rollout_worker(job: tuple[Any, Sequence[tuple[int, Any]], str, str, tuple[float, ...]]) -> list[LabelledTrajectory]:
    """Play and label the episodes ``[(k, task), ...]`` on one engine."""
    from creditaudit.replay.policies.default.demonstrations import play_demonstration

    env_factory, work, root, purpose, noise_rates = job
    probe = PlannerProbe(env_factory())
    out = []
    try:
        for k, task in work:
            noise = _noise_rate(root, k, noise_rates)
            play_demonstration(task, probe, seed_streams.rng(root, f"judge/{purpose}/demo/{k}"),
                               noise_rate=noise, history_length=2)
            out.append(probe.labelled(f"{purpose}-{k:04d}", task.task_id, k, noise))
    finally:
        probe.close()
    return out


def _alfworld(horizon: int) -> Any:
    from creditaudit.replay.envs.alfworld.env import AlfworldEnv

    return AlfworldEnv(horizon=horizon)


def judge_rollouts(tasks: Sequence[Any], *, seed: int, purpose: str, passes: int, horizon: int,
                   noise_rates: Sequence[float], workers: int = 1) -> list[LabelledTrajectory]:
    """Labelled noisy-expert transcripts: ``passes`` episodes per task, episode ``k`` being pass
    ``k // len(tasks)`` of task ``k % len(tasks)``, its noise rate drawn from ``noise_rates``
    (stream ``judge/noise/<k>``) and its play from stream ``judge/<purpose>/demo/<k>`` of the
    build seed. Same result for any number of ``workers`` (engine processes, ``spawn``)."""
    root = judge_stream_root(seed)
    jobs = [(k, tasks[k % len(tasks)]) for k in range(len(tasks) * int(passes))]
    factory = functools.partial(_alfworld, int(horizon))
    rates = tuple(float(r) for r in noise_rates)
    workers = max(1, min(int(workers), len(jobs)))
    if workers == 1:
        return _rollout_worker((factory, jobs, root, purpose, rates))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = [jobs[w::workers] for w in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_rollout_worker, [(factory, share, root, purpose, rates) for share in shares]))
    by_k = {k: r for share, result in zip(shares, results) for (k, _), r in zip(share, result)}
    return [by_k[k] for k, _ in jobs]


#: ``noise_rate`` of a transcript played by the default policy rather than the noisy expert.
POLICY_PLAYED = -1.0


def judge_policy_rollouts(tasks: Sequence[Any], *, seed: int, purpose: str, rollouts: int, horizon: int,
                          temperature: float = 0.7) -> list[LabelledTrajectory]:
    """Labelled transcripts of the shipped default policy (the policy the demo audits), ``rollouts``
    per task at ``temperature``, prompted and decoded as the default protocol does, played by
    :func:`~creditaudit.replay.policies.default.evaluation.evaluate_policy` on planner probes; its
    action draws come from streams ``policy/eval/<i>/<r>/<t>`` under root
    ``policy-eval:<judge root>/judge/<purpose>/policy``. Their ``noise_rate`` is
    :data:`POLICY_PLAYED`. The noisy expert mostly wins; these are the long, mostly lost
    transcripts the judge is asked about in an audit."""
    from creditaudit.protocol.io import default_template_text, parse_protocol
    from creditaudit.replay.policies.default.evaluation import evaluate_policy
    from creditaudit.replay.policies.default.shipped import SHIPPED_POLICY_DIR
    from creditaudit.replay.policies.hf import load_policy
    from creditaudit.replay.tasks import environment_plugin

    # prompted as the default protocol prompts it (history length, decoding, ALFWorld's instruction)
    protocol = parse_protocol(default_template_text(), source="default protocol template")
    policy = load_policy(SHIPPED_POLICY_DIR, device="cpu", history_length=protocol.policy.history_length,
                         decoding=protocol.policy.decoding, instruction=environment_plugin(protocol).prompt.instruction)
    out: dict[tuple[int, int], LabelledTrajectory] = {}

    def record(i: int, r: int, probe: PlannerProbe) -> None:
        out[(i, r)] = probe.labelled(f"{purpose}-policy-{i:03d}-{r}", tasks[i].task_id, r, POLICY_PLAYED)

    evaluate_policy(policy, tasks, env_factory=lambda: PlannerProbe(_alfworld(int(horizon))),
                    seed=f"{judge_stream_root(seed)}/judge/{purpose}/policy", temperature=temperature,
                    rollouts_per_task=int(rollouts), on_episode=record)
    return [out[(i, r)] for i in range(len(tasks)) for r in range(int(rollouts))]


def labelled_to_dict(lt: LabelledTrajectory) -> dict[str, Any]:
    """A JSON-ready form of a labelled transcript (what a judge reads, plus its labels)."""
    t = lt.trajectory
    return {"trajectory_id": t.trajectory_id, "task_id": t.task_id, "rollout": t.rollout, "goal": t.goal,
            "outcome": t.outcome, "labels": list(lt.labels), "plan_lengths": list(lt.plan_lengths),
            "noise_rate": lt.noise_rate,
            "turns": [{"observation": r.observation, "admissible": list(r.admissible), "action": r.action,
                       "feedback": r.feedback, "done": r.done, "won": r.won} for r in t.turns]}


def labelled_from_dict(d: dict[str, Any]) -> LabelledTrajectory:
    """Inverse of :func:`labelled_to_dict`."""
    turns = tuple(TurnRecord(i, r["observation"], tuple(r["admissible"]), r["action"], (), None, r["feedback"],
                             done=r["done"], won=r["won"]) for i, r in enumerate(d["turns"]))
    traj = Trajectory(d["trajectory_id"], d["task_id"], d["rollout"], d["goal"], d["outcome"], turns)
    return LabelledTrajectory(traj, tuple(d["labels"]), tuple(d["plan_lengths"]), d["noise_rate"])
