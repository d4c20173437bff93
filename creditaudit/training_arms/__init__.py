"""creditaudit.training_arms — the seven-arm CRN LoRA experiment (docs/design.md §6) and its analysis.

One shared training loop (:mod:`~creditaudit.training_arms.loop`) trains a LoRA adapter per arm
and seed index on the protocol's base policy with GRPO-style updates on fresh rollouts, the arms
differing only in their registered credit rule (:mod:`~creditaudit.training_arms.rules`);
:mod:`~creditaudit.training_arms.evaluate` measures held-out success and the probe-set action
distributions; :mod:`~creditaudit.training_arms.analysis` runs C1-C6 (TOST, superiority, Holm,
MDE), the JS divergence matrix, partition tests and the partial Mantel test with its positive
control; :mod:`~creditaudit.training_arms.stage` is ``creditaudit arms``.

Sizes come from the protocol's ``arms`` section; the same code runs a laptop-size experiment and
the paper-scale one. A GPU-scale configuration (Qwen2.5-7B-Instruct from a local directory,
pinned with ``creditaudit protocol init --policy DIR``; the base is loaded once and the 14 LoRA
adapters are switched on it)::

    policy:
      source: local
      path: /models/Qwen2.5-7B-Instruct
      dtype: bfloat16
      temperature: 0.7
      max_action_tokens: 24
    arms:
      arms: [outcome_only, implicit, judge, shuffled_implicit, shuffled_judge, inverted_implicit, pivotal_masked]
      seeds: 2
      rounds: 2                 # two stages, as in the paper
      tasks_per_round: 32
      group_size: 8
      lora_rank: 16
      lora_alpha: 32.0
      learning_rate: 1.0e-05
      minibatch_size: 16
      dose_matched: false       # rerun with true for the dose-controlled comparison
      eval_tasks: 128           # the paper's held-out set
      eval_rollouts: 1
      probe_states: 64
      pivotal_resolution_n: 1

On a CPU the default ALFWorld sizes are too slow for the embedded policy (about 45 ms per engine
step); ``benchmarks/arms_bench.py`` measures the planted-environment configuration.
"""

from creditaudit.training_arms.analysis import (
    COMPARISONS,
    analyse,
    compare_arms,
    divergence_stage,
    js_matrix,
    learning_check,
)
from creditaudit.training_arms.loop import ArmsArgs, ArmsTrainer, ProbeState, Sample, action_logprobs, sequence_logprobs
from creditaudit.training_arms.rules import ARM_NAMES, ArmRule, GroupCredit, arm_rule, effective_advantages
from creditaudit.training_arms.stage import ArmsDocument, run_arms

__all__ = [
    "ARM_NAMES",
    "ArmRule",
    "GroupCredit",
    "arm_rule",
    "effective_advantages",
    "ArmsArgs",
    "ArmsTrainer",
    "ProbeState",
    "Sample",
    "action_logprobs",
    "sequence_logprobs",
    "COMPARISONS",
    "analyse",
    "compare_arms",
    "learning_check",
    "divergence_stage",
    "js_matrix",
    "ArmsDocument",
    "run_arms",
]
