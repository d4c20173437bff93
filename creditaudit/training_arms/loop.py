"""The one shared training loop of the seven arms.

For each seed index ``s`` and round ``r`` (common random numbers across arms):

1. **Tasks.** ``tasks_per_round`` tasks drawn without replacement from the training pool with
   the stream ``arms/tasks/seed-<s>/round-<r>`` -- the same tasks, in the same order, for every arm.
2. **Rollouts.** On each task, one environment episode: every arm's ``group_size`` rollouts start
   from the same snapshot, the action of rollout ``g`` at turn ``t`` is sampled with the seed of
   ``arms/rollout/seed-<s>/round-<r>/task-<k>/<g>/<t>`` in every arm, and transitions are shared
   across arms through one :class:`~creditaudit.replay.rollout.TransitionCache` (the environment
   is deterministic). Arms whose adapters are bit-identical (every arm before its first update)
   produce identical rollouts: they are collected once.
3. **Credit.** Each arm's source on its own fresh rollouts: HCAPO ``rho`` scored by the arm's
   current checkpoint, the judge's scores (the protocol's judge family on the fixed base policy),
   or executed replay at ``pivotal_resolution_n`` rollouts per arm. Credit of identical rollouts
   is computed once.
4. **Weights and dose.** ``a_{i,t} = w_{i,t} A_i`` (:mod:`creditaudit.training_arms.rules`);
   samples with ``a_{i,t} = 0`` are dropped. An arm's natural dose is
   ``ceil(kept / minibatch_size)`` optimizer steps; in dose-matched mode every arm takes the
   round's smallest positive natural dose (a seeded subsample of its kept samples); an arm with
   no kept sample cannot be matched: it takes 0 steps and the plan lists it as unmatched. The plan is written
   (``plan.json``) before any update, so a resumed round uses the same targets.
5. **Update.** Minibatches in the order of ``arms/minibatch/<arm>/seed-<s>/round-<r>``; loss
   ``-mean(a_{i,t} * log pi(action_t | prompt_t))`` with ``pi`` the distribution the policy acts
   from (:func:`action_logprobs`): for admissible decoding the softmax over the turn's admissible
   commands of their sequence log-probabilities at the rollout temperature, otherwise the action's
   token log-probability (its tokens as re-encoded from its text, then the end-of-sequence token);
   gradient norm clipped, one AdamW step per minibatch.
   Optimizer steps are counted by a hook on the optimizer itself.
6. **Checkpoint.** Adapter, optimizer state and the round's record per arm
   (``arms/checkpoints/seed-<s>/round-<r>/<arm>/``), and the arm's action distributions on the
   probe states.

Everything runs with one torch thread (the stored numbers must not depend on the machine).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.protocol.sections import ArmsSection
from creditaudit.protocol.seeds import SeedStreams
from creditaudit.replay.rollout import Rollout, TransitionCache, advance
from creditaudit.training_arms.lora import AdapterBank, adapter_name, load_checkpoint, save_checkpoint
from creditaudit.training_arms.rules import ArmRule, GroupCredit, arm_rule, effective_advantages

__all__ = ["ArmsArgs", "Sample", "ArmsTrainer", "action_logprobs", "sequence_logprobs", "probe_distribution",
           "ProbeState"]

GRAD_CLIP = 1.0
"""Maximum gradient norm of an update."""


@dataclass(frozen=True)
class ArmsArgs:
    """Arguments of the experiment: the protocol's ``arms`` section and the policy's sampling.

    Every field is frozen in the protocol (``arms``, ``policy``, ``replay``, ``exclusions``); none
    is chosen at run time.
    """

    arms: tuple[str, ...]
    """Arms trained, in protocol order."""
    seeds: int
    """Seed indices per arm."""
    rounds: int
    """Collect-then-update rounds; every round's checkpoint is a stage of the analysis."""
    tasks_per_round: int
    """Training tasks per round."""
    group_size: int
    """Rollouts per task (the GRPO group)."""
    lora_rank: int
    """LoRA rank."""
    lora_alpha: float
    """LoRA alpha."""
    learning_rate: float
    """AdamW learning rate."""
    minibatch_size: int
    """Kept samples (turns) per optimizer step."""
    dose_matched: bool
    """Every arm takes the round's smallest natural number of optimizer steps."""
    eval_tasks: int
    """Held-out evaluation tasks."""
    eval_rollouts: int
    """Evaluation rollouts per task and checkpoint."""
    probe_states: int
    """Probe states for the action distributions."""
    pivotal_resolution_n: int
    """Rollouts per replay arm of the pivotal-masked arm's low-resolution replay."""
    temperature: float
    """Sampling temperature of training and evaluation rollouts."""
    max_action_tokens: int
    """Cap on generated action tokens."""
    format_collapse_threshold: float
    """A checkpoint whose share of inadmissible evaluation actions exceeds this is excluded."""

    @classmethod
    def from_protocol(cls, protocol: Any) -> "ArmsArgs":
        section = {f.name: getattr(protocol.arms, f.name) for f in fields(cls) if f.name in ArmsSection.model_fields}
        return cls(
            **dict(section, arms=tuple(section["arms"])),
            temperature=protocol.policy.temperature, max_action_tokens=protocol.policy.max_action_tokens,
            format_collapse_threshold=protocol.exclusions.format_collapse_threshold,
        )


@dataclass(frozen=True)
class Sample:
    """One training sample: a decision and its effective advantage."""

    prompt: str
    action: str
    advantage: float
    candidates: tuple[str, ...] = ()
    """The turn's admissible commands when the policy draws among them (admissible decoding), else empty."""


@dataclass(frozen=True)
class ProbeState:
    """A fixed decision point on which every checkpoint's action distribution is measured."""

    index: int
    goal: str
    observation: str
    admissible: tuple[str, ...]
    history: tuple[tuple[str, str], ...]


# ---------------------------------------------------------------------- scoring with gradients


def sequence_logprobs(policy: Any, prompts: Sequence[str], actions: Sequence[str]):
    """``log pi(action, <eos> | prompt)`` per row, differentiable (a torch tensor of shape ``(n,)``).

    Rows are left-padded with explicit positions (``cumsum(mask) - 1``), as the policy samples.
    """
    import torch

    rows, targets = [], []
    for prompt, action in zip(prompts, actions):
        target = policy.encode_action(action) + [policy.eos_token_id]
        rows.append(policy.encode_prompt(prompt) + target)
        targets.append(target)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), policy.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = max(len(t) for t in targets) + 1
    out = policy.model(input_ids=ids.to(policy.device), attention_mask=mask.to(policy.device),
                       position_ids=positions.to(policy.device), use_cache=False)
    logp = torch.log_softmax(out.logits[:, -keep:].float(), dim=-1)
    values = []
    for b, target in enumerate(targets):
        n = len(target)
        pred = logp[b, keep - 1 - n: keep - 1]
        values.append(pred.gather(-1, torch.tensor(target, device=pred.device)[:, None]).sum())
    return torch.stack(values)


def action_logprobs(policy: Any, samples: Sequence[Sample], temperature: float):
    """``log pi(action | prompt)`` per sample under the distribution the policy acts from, differentiable.

    A sample with candidates (admissible decoding draws ``argmax_c (s_c / T + g_c)``, Gumbel-max,
    so ``pi(c) = softmax(s / T)_c`` with ``s_c`` the command's sequence log-probability and end
    token): ``s_a / T - logsumexp_c(s_c / T)``, at ``T = 1`` when the temperature is 0. Pushing an
    action down then moves its probability to the other commands of the turn, as the policy's own
    distribution does; the token log-probability alone is unbounded below and, under negative
    advantages, drives the model away from every command. A sample without candidates (free
    decoding): the action's token log-probability, :func:`sequence_logprobs`. A policy with
    ``tree_scoring`` scores a prompt's candidates in one pass (the prompt, then the candidates'
    prefix tree); others one row per candidate.
    """
    import torch

    scale = temperature if temperature > 0 else 1.0
    prompts, actions, spans, free = [], [], [], []
    for i, sample in enumerate(samples):
        if sample.candidates and sample.action in sample.candidates:
            spans.append((i, len(actions), len(sample.candidates), sample.candidates.index(sample.action)))
            prompts += [sample.prompt] * len(sample.candidates)
            actions += list(sample.candidates)
        else:
            free.append(i)
    out: list[Any] = [None] * len(samples)
    if spans:
        if getattr(policy, "tree_scoring", False):  # each prompt once, its candidates as a prefix tree
            rows = policy.candidate_sequence_logprobs([samples[i].prompt for i, *_ in spans],
                                                      [samples[i].candidates for i, *_ in spans])
        else:
            scores = sequence_logprobs(policy, prompts, actions)
            rows = [scores[start:start + n] for _, start, n, _ in spans]
        for (i, _, _, chosen), row in zip(spans, rows):
            row = row / scale
            out[i] = row[chosen] - torch.logsumexp(row, dim=0)
    if free:
        for i, value in zip(free, sequence_logprobs(policy, [samples[i].prompt for i in free],
                                                     [samples[i].action for i in free])):
            out[i] = value
    return torch.stack(out)


def probe_distribution(policy: Any, probes: Sequence[ProbeState]) -> list[np.ndarray]:
    """The policy's distribution over each probe state's admissible commands: the softmax of the
    commands' sequence log-probabilities (action tokens and end of sequence, temperature 1)."""
    prompts, actions, owner = [], [], []
    for i, probe in enumerate(probes):
        prompt = policy.prompt_builder.build(probe.goal, probe.observation, probe.admissible, list(probe.history))
        for action in probe.admissible:
            prompts.append(prompt)
            actions.append(action)
            owner.append(i)
    scores = policy.score(prompts, actions, include_stop=True) if prompts else []
    totals: list[list[float]] = [[] for _ in probes]
    for i, score in zip(owner, scores):
        totals[i].append(score.sum_logprob + (score.stop_logprob or 0.0))
    out = []
    for values in totals:
        v = np.asarray(values, dtype=float)
        v = np.exp(v - v.max())
        out.append(v / v.sum())
    return out


# ---------------------------------------------------------------------- the trainer


@dataclass
class _ArmState:
    arm: str
    seed: int
    rule: ArmRule
    optimizer: Any
    steps_counter: list[int] = field(default_factory=lambda: [0])
    rounds_done: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)


class ArmsTrainer:
    """Trains every (arm, seed index) adapter round by round (see the module docstring).

    Parameters
    ----------
    policy : HFPolicy
        The base policy (its model gains the adapters).
    env : Environment
        One environment instance for every episode.
    protocol : Protocol
        The frozen protocol (signal constants, replay constants).
    protocol_id : str
    args : ArmsArgs
    out_dir : Path
        ``<run>/arms``.
    run_dir : Path
        Where a judge model given by a relative path is resolved.
    base_sha256 : str
        Hash of the base policy's pinned files (recorded in, and checked against, every checkpoint).
    families : dict
        ``{"implicit": family, "judge": family}`` built from the protocol's signal sections (only
        those the arms need).
    progress : callable, optional
        ``progress(phase, done, total)``.
    """

    def __init__(self, *, policy: Any, env: Any, protocol: Any, protocol_id: str, args: ArmsArgs, out_dir: Path,
                 run_dir: Path, base_sha256: str, families: dict[str, Any],
                 progress: Callable[[str, int, int], None] | None = None):
        import torch

        self.policy = policy
        self.env = env
        self.protocol = protocol
        self.protocol_id = protocol_id
        self.args = args
        self.out_dir = out_dir
        self.run_dir = run_dir
        self.base_sha256 = base_sha256
        self.families = families
        self.progress = progress
        self.streams = SeedStreams(protocol_id)
        self.builder = policy.prompt_builder
        self.bank = AdapterBank(policy, rank=args.lora_rank, alpha=args.lora_alpha, protocol_id=protocol_id)
        implicit = next((s for s in protocol.signals if s.family == "implicit"), None)
        clip = (implicit.args["clip_low"], implicit.args["clip_high"]) if implicit is not None else (0.8, 1.2)
        self.states: dict[tuple[str, int], _ArmState] = {}
        for s in range(args.seeds):
            for arm in args.arms:
                name = adapter_name(arm, s)
                self.bank.add(name, s)
                params = [p for _, p in self.bank.named_parameters(name)]
                optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.0)
                state = _ArmState(arm, s, arm_rule(arm, clip_low=clip[0], clip_high=clip[1]), optimizer)
                optimizer.register_step_post_hook(lambda *_a, c=state.steps_counter: c.__setitem__(0, c[0] + 1))
                self.states[(arm, s)] = state

    # ------------------------------------------------------------------ paths

    def checkpoint_dir(self, seed: int, round_: int, arm: str) -> Path:
        return self.out_dir / "checkpoints" / f"seed-{seed}" / f"round-{round_}" / arm

    def plan_path(self, seed: int, round_: int) -> Path:
        return self.out_dir / "checkpoints" / f"seed-{seed}" / f"round-{round_}" / "plan.json"

    # ------------------------------------------------------------------ resume

    def resume(self) -> int:
        """Load every complete checkpoint (the latest round of each arm x seed); returns how many
        arm x seed pairs had any. Refuses checkpoints of another protocol or base policy."""
        import json

        resumed = 0
        for (arm, s), state in self.states.items():
            last = 0
            for r in range(1, self.args.rounds + 1):
                if (self.checkpoint_dir(s, r, arm) / "state.json").is_file():
                    last = r
                else:
                    break
            if not last:
                continue
            records = []
            for r in range(1, last + 1):
                path = self.checkpoint_dir(s, r, arm) / "state.json"
                try:
                    record = json.loads(path.read_text("utf-8"))
                except (OSError, ValueError) as exc:
                    raise InputError(f"{path}: unreadable checkpoint record ({exc}); delete its directory to retrain") from None
                if record.get("protocol_id") != self.protocol_id:
                    raise InputError(f"{path}: checkpoint of protocol {str(record.get('protocol_id'))[:16]}…, not this "
                                     "run's; a run directory never mixes protocols")
                if record.get("base_sha256") != self.base_sha256:
                    raise InputError(f"{path}: checkpoint trained on another base policy (files hash "
                                     f"{str(record.get('base_sha256'))[:16]}…, the protocol pins {self.base_sha256[:16]}…)")
                records.append(record)
            load_checkpoint(self.checkpoint_dir(s, last, arm), self.bank, adapter_name(arm, s), state.optimizer)
            if self.bank.digest(adapter_name(arm, s)) != records[-1]["adapter_sha256"]:
                raise InputError(f"{self.checkpoint_dir(s, last, arm)}: adapter bytes differ from its record; delete "
                                 "the directory to retrain this round")
            state.steps_counter[0] = int(records[-1]["steps_total"])
            state.rounds_done = last
            state.records = records
            resumed += 1
        return resumed

    # ------------------------------------------------------------------ one round

    def _round_tasks(self, pool: Sequence[tuple[Any, Any]], seed: int, round_: int) -> list[tuple[int, Any, Any]]:
        n = self.args.tasks_per_round
        if n > len(pool):
            raise InputError(f"arms.tasks_per_round is {n} but the training pool has {len(pool)} tasks; lower it "
                             "(amend) or enlarge the task list")
        order = self.streams.rng(f"arms/tasks/seed-{seed}/round-{round_}").permutation(len(pool))[:n]
        return [(int(i), pool[int(i)][0], pool[int(i)][1]) for i in order]

    def _collect(self, seed: int, round_: int, tasks, arms: list[str]) -> tuple[dict[str, list[list[Rollout]]], dict[str, str]]:
        digests = {arm: self.bank.digest(adapter_name(arm, seed)) for arm in arms}
        groups: dict[str, list[str]] = {}
        for arm in arms:
            groups.setdefault(digests[arm], []).append(arm)
        out: dict[str, list[list[Rollout]]] = {arm: [] for arm in arms}
        args = self.args
        for k, (_, entry, task) in enumerate(tasks):
            obs = self.env.reset(task)
            snapshot, signature = self.env.snapshot(), self.env.state_signature()
            cache = TransitionCache()
            for members in groups.values():
                self.bank.activate(adapter_name(members[0], seed))
                rollouts = [Rollout(key=g, goal=obs.goal, snapshot=snapshot, signature=signature, observation=obs.text,
                                    admissible=tuple(obs.admissible)) for g in range(args.group_size)]
                prefix = f"arms/rollout/seed-{seed}/round-{round_}/task-{k}"
                advance(self.env, self.policy, self.builder, rollouts,
                        seed_for=lambda ro, p=prefix: self.streams.seed_int(f"{p}/{ro.key}/{ro.steps}"),
                        temperature=args.temperature, max_action_tokens=args.max_action_tokens, cache=cache)
                for arm in members:
                    out[arm].append(rollouts)
            if self.progress:
                self.progress(f"seed {seed} round {round_}", k + 1, len(tasks))
        return out, digests

    def _trajectories(self, seed: int, round_: int, tasks, rollouts: list[list[Rollout]]):
        from dataclasses import replace

        from creditaudit.replay.records import Trajectory

        out = []
        for k, ((_, _, task), group) in enumerate(zip(tasks, rollouts)):
            for ro in group:
                # the rollout's own records, with the training loop's mean log-prob (a plain sum,
                # as the arms have always computed it)
                turns = tuple(
                    replace(rec, mean_logprob=(sum(rec.token_logprobs) / len(rec.token_logprobs))
                            if rec.token_logprobs else None)
                    for rec in ro.turns
                )
                out.append(Trajectory(f"arms-s{seed}-r{round_}-k{k}-g{ro.key}", task.task_id, int(ro.key), ro.goal,
                                      ro.outcome, turns))
        return out

    def _family_credit(self, source: str, seed: int, round_: int, tasks, rollouts, arm: str) -> list[list[np.ndarray]]:
        """Per task, per rollout, the per-turn credit of ``source`` on ``arm``'s rollouts."""
        from creditaudit.signals.base import SignalContext

        trajectories = self._trajectories(seed, round_, tasks, rollouts)
        if source == "replay":
            flat = self._pivotal(seed, round_, tasks, rollouts, arm)
        else:
            family = self.families[source]
            context = SignalContext(protocol_id=self.protocol_id, protocol=self.protocol, run_dir=self.run_dir,
                                    trajectories=trajectories, load_policy=lambda: self.policy)
            self.bank.activate(adapter_name(arm, seed))
            if source == "judge":
                with self.bank.base():
                    frame = family.compute(context).credit
            else:
                frame = family.compute(context).credit
            values = frame["credit"].to_numpy(dtype=float)
            flat, start = [], 0
            for traj in trajectories:
                flat.append(values[start:start + len(traj)])
                start += len(traj)
        out, i = [], 0
        for group in rollouts:
            out.append(flat[i:i + len(group)])
            i += len(group)
        return out

    def pivotal_settings(self) -> Any:
        """The replay settings of the pivotal-masked arm's credit: the protocol's replay section with
        ``pivotal_resolution_n`` rollouts per arm and the arms' rollout temperature."""
        from creditaudit.replay.engine import ReplaySettings

        r = self.protocol.replay
        n = self.args.pivotal_resolution_n
        return ReplaySettings(n_fact=n, n_alternatives=r.n_alternatives, n_alt=n, alt_temperature=r.alt_temperature,
                              max_alt_draws=r.max_alt_draws, max_rollouts_per_turn=(1 + r.n_alternatives) * n,
                              resolution_alpha=r.resolution_alpha, rollout_temperature=self.args.temperature,
                              max_action_tokens=self.args.max_action_tokens)

    @staticmethod
    def replay_frame(seed: int, round_: int, k: int, rollout: Rollout) -> Any:
        """``rollout`` (of task ``k`` in ``round_`` of ``seed``) as the turns frame the replay engine reads."""
        import pandas as pd

        turns = rollout.turns
        return pd.DataFrame({
            "trajectory_id": [f"arms-s{seed}-r{round_}-k{k}-g{rollout.key}"] * len(turns),
            "action": [rec.action for rec in turns],
            "state_signature": [rec.state_signature for rec in turns],
            "observation": [rec.observation for rec in turns],
            "mean_logprob": [None] * len(turns),
        })

    def _pivotal(self, seed: int, round_: int, tasks, rollouts, arm: str) -> list[np.ndarray]:
        """Per rollout (task by task), 1.0 on each turn the replay finds pivotal (complete and
        ``A_replay != 0``), else 0.0. A task's rollouts are replayed together as one group
        (:func:`~creditaudit.replay.engine.replay_group`: one transition cache and one scoring
        memory, their arms in lockstep), as the replay stage replays a task's trajectories."""
        from creditaudit.replay.engine import replay_group

        settings = self.pivotal_settings()
        self.bank.activate(adapter_name(arm, seed))
        out = []
        for k, ((_, _, task), group) in enumerate(zip(tasks, rollouts)):
            frames = [self.replay_frame(seed, round_, k, ro) for ro in group]
            results = replay_group(self.env, self.policy, task=task, trajectories=frames,
                                   protocol_id=self.protocol_id, settings=settings)
            for result in results:
                status = result.turns.column("status").to_pylist()
                pivotal = result.turns.column("pivotal").to_pylist()
                out.append(np.array([1.0 if st == "complete" and pv else 0.0 for st, pv in zip(status, pivotal)]))
        return out

    def _samples(self, state: _ArmState, round_: int, tasks, rollouts, credit) -> tuple[list[Sample], dict[str, Any]]:
        counts = {"turns": 0, "zero_advantage": 0, "zero_weight": 0, "abstained": 0, "kept": 0}
        admissible = getattr(self.policy, "decoding", "free") == "admissible"
        samples: list[Sample] = []
        outcomes_all = []
        for k, group in enumerate(rollouts):
            outcomes = np.array([ro.outcome for ro in group], dtype=float)
            outcomes_all += outcomes.tolist()
            values = credit[k] if credit is not None else None
            rngs = [self.streams.rng(f"arms/shuffle/{state.arm}/seed-{state.seed}/round-{round_}/task-{k}/{ro.key}")
                    for ro in group]
            g = GroupCredit(outcomes, values, [len(ro.turns) for ro in group], rngs)
            adv, weights, effective = effective_advantages(state.rule, g)
            for i, ro in enumerate(group):
                history = []
                for t, rec in enumerate(ro.turns):
                    counts["turns"] += 1
                    if values is not None and math.isnan(values[i][t]):
                        counts["abstained"] += 1
                    a = float(effective[i][t])
                    if adv[i] == 0:
                        counts["zero_advantage"] += 1
                    elif weights[i][t] == 0:
                        counts["zero_weight"] += 1
                    if a != 0.0:
                        prompt = self.builder.build(ro.goal, rec.observation, rec.admissible, history)
                        samples.append(Sample(prompt, rec.action, a, tuple(rec.admissible) if admissible else ()))
                    history.append((rec.observation, rec.action))
        counts["kept"] = len(samples)
        counts["train_success"] = float(np.mean(outcomes_all)) if outcomes_all else None
        return samples, counts

    def _update(self, state: _ArmState, round_: int, samples: list[Sample], target_steps: int) -> dict[str, Any]:
        import torch

        mb = self.args.minibatch_size
        name = adapter_name(state.arm, state.seed)
        self.bank.activate(name)
        tag = f"{state.arm}/seed-{state.seed}/round-{round_}"
        if target_steps * mb < len(samples):
            keep = np.sort(self.streams.rng(f"arms/dose/{tag}").permutation(len(samples))[:target_steps * mb])
            samples = [samples[int(i)] for i in keep]
        order = self.streams.rng(f"arms/minibatch/{tag}").permutation(len(samples))
        params = [p for _, p in self.bank.named_parameters(name)]
        before = state.steps_counter[0]
        losses = []
        for start in range(0, len(samples), mb):
            batch = [samples[int(i)] for i in order[start:start + mb]]
            logp = action_logprobs(self.policy, batch, self.args.temperature)
            adv = torch.tensor([b.advantage for b in batch], dtype=logp.dtype, device=logp.device)
            loss = -(adv * logp).mean()
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
            state.optimizer.step()
            losses.append(float(loss.detach()))
        return {"steps": state.steps_counter[0] - before, "samples_used": len(samples),
                "loss_mean": float(np.mean(losses)) if losses else None}

    def run_round(self, seed: int, round_: int, pool, probes: Sequence[ProbeState]) -> None:
        """Train every arm of ``seed`` that has not finished ``round_`` (they are all at ``round_ - 1``)."""
        import json

        active = [arm for arm in self.args.arms if self.states[(arm, seed)].rounds_done < round_]
        if not active:
            return
        behind = [a for a in active if self.states[(a, seed)].rounds_done != round_ - 1]
        if behind:
            raise CheckFailed(f"arms {behind} of seed {seed} are not at round {round_ - 1}; checkpoints are incomplete")
        tasks = self._round_tasks(pool, seed, round_)
        rollouts, digests = self._collect(seed, round_, tasks, active)
        by_digest: dict[tuple[str, str], list[list[np.ndarray]]] = {}
        prepared = {}
        for arm in active:
            state = self.states[(arm, seed)]
            source = state.rule.source
            credit = None
            if source is not None:
                key = (source, digests[arm])
                if key not in by_digest:
                    by_digest[key] = self._family_credit(source, seed, round_, tasks, rollouts[arm], arm)
                credit = by_digest[key]
            samples, counts = self._samples(state, round_, tasks, rollouts[arm], credit)
            counts["natural_steps"] = math.ceil(len(samples) / self.args.minibatch_size)
            prepared[arm] = (samples, counts)

        plan_path = self.plan_path(seed, round_)
        natural = {arm: prepared[arm][1]["natural_steps"] for arm in active}
        if plan_path.is_file():
            plan = json.loads(plan_path.read_text("utf-8"))
            for arm in active:
                if plan["natural_steps"].get(arm) != natural[arm]:
                    raise CheckFailed(f"{plan_path}: arm {arm} now has {natural[arm]} natural steps, the interrupted run "
                                      f"planned {plan['natural_steps'].get(arm)}; the rerun is not deterministic")
        else:
            if set(active) != set(self.args.arms):
                raise CheckFailed(f"{plan_path} is missing but some arms finished round {round_}; delete "
                                  f"{plan_path.parent} to retrain the round")
            # dose matching: every arm that can step takes the smallest positive natural dose; an
            # arm without a single kept sample cannot be matched (it takes 0 and is listed)
            positive = {a: n for a, n in natural.items() if n > 0}
            matched = min(positive.values()) if positive else 0
            plan = {"protocol_id": self.protocol_id, "seed": seed, "round": round_, "dose_matched": self.args.dose_matched,
                    "natural_steps": natural,
                    "target_steps": {a: (min(matched, natural[a]) if self.args.dose_matched else natural[a])
                                     for a in natural},
                    "unmatched": sorted(a for a, n in natural.items() if n == 0) if self.args.dose_matched else []}
            from creditaudit.artifacts import write_bytes_atomic

            write_bytes_atomic(plan_path, canonical_bytes(plan) + b"\n")

        for arm in active:
            state = self.states[(arm, seed)]
            samples, counts = prepared[arm]
            update = self._update(state, round_, samples, int(plan["target_steps"][arm]))
            name = adapter_name(arm, seed)
            previous = state.records[-1] if state.records else None
            turns_total = counts["turns"] + (previous["turns_total"] if previous else 0)
            dropped_total = counts["turns"] - counts["kept"] + (previous["dropped_total"] if previous else 0)
            distributions = probe_distribution(self.policy, probes) if probes else []
            record = {
                "protocol_id": self.protocol_id,
                "base_sha256": self.base_sha256,
                "arm": arm,
                "seed": seed,
                "round": round_,
                **counts,
                "target_steps": int(plan["target_steps"][arm]),
                "steps": update["steps"],
                "samples_used": update["samples_used"],
                "loss_mean": update["loss_mean"],
                "steps_total": state.steps_counter[0],
                "turns_total": turns_total,
                "dropped_total": dropped_total,
                "credit_sparsity": dropped_total / turns_total if turns_total else None,
                "displacement": self.bank.displacement(name),
                "adapter_sha256": self.bank.digest(name),
                "probe": [d.tolist() for d in distributions],
            }
            save_checkpoint(self.checkpoint_dir(seed, round_, arm), self.bank, name, state.optimizer, record=record)
            state.rounds_done = round_
            state.records.append(record)

    def train(self, pool, probes: Sequence[ProbeState]) -> None:
        """Every round of every seed index (resumed arms continue where they stopped)."""
        for seed in range(self.args.seeds):
            for round_ in range(1, self.args.rounds + 1):
                self.run_round(seed, round_, pool, probes)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every round record, ordered by seed, arm (protocol order) and round."""
        out = []
        for s in range(self.args.seeds):
            for arm in self.args.arms:
                out += self.states[(arm, s)].records
        return out
