"""The audit paper's published figures, as ledger entries the report sets beside this run's.

Source: "Credit Without Ground Truth: Auditing Step-Level Credit Assignment in LLM Agents Against
Executed Replay" (arXiv 2608.19760), Qwen2.5-7B-Instruct on ALFWorld. These are literature values,
not computed here; they live in one registered producer so that no template types a number.
"""

from __future__ import annotations

from creditaudit.ledger.registry import ProducerContext, Value, producer

__all__ = ["PAPER", "reference_entries"]

#: name -> (value, text)
PAPER: dict[str, tuple[object, str]] = {
    "paper.replay.rollouts": (20538, "20,538"),
    "paper.replay.divergences": (0, "0"),
    "paper.measurability.share_pivotal": (0.305, "0.305"),
    "paper.measurability.share_sigma_floor_zero": (0.860, "0.860"),
    "paper.measurability.share_no_counterfactual": (0.131, "0.131"),
    "paper.measurability.logprob_gap": (-0.70, "-0.70"),
    "paper.sign_agreement.implicit": (267 / 527, "267/527 = 50.7% [46.4, 54.9]"),
    "paper.sign_agreement.judge": (84 / 139, "84/139 = 60.4% [52.1, 68.2]"),
    "paper.lift.implicit": (0.940, "0.940 [0.760, 0.997]"),
    "paper.lift.judge": (1.000, "1.000 [0.935, 1.001]"),
    "paper.shuffle.changed_share.continuous": (0.904, "90.4%"),
    "paper.shuffle.changed_share.judge": (0.260, "26.0%"),
    "paper.fluency.echo": (0.752, "+0.752"),
    "paper.fluency.beta_fluency": (0.955, "0.955"),
    "paper.fluency.beta_a_replay": (0.402, "0.402"),
    "paper.fluency.partial_r": (-0.004, "-0.004"),
    "paper.fluency.partial_p": (0.87, "0.87"),
    "paper.router.pivotal_recall": (0.119, "11.9% [9.4, 14.9] (n = 540)"),
    "paper.router.chance": (0.131, "13.1%"),
    "paper.router.saved_per_turn": (0.131, "13.1%"),
    "paper.router.saved_per_trajectory": (0.140, "14.0%"),
    "paper.arms.eval_tasks": (128, "128"),
    "paper.arms.mde": (0.118, "11.8 pp"),
    "paper.arms.optimizer_steps": ([112, 8], "112 vs 8 per round"),
    "paper.arms.js_between": (0.0520, "0.0520"),
    "paper.arms.js_within": (0.0198, "0.0198"),
    "paper.arms.js_p": (0.0001, "0.0001"),
    "paper.arms.partial_mantel": (0.078, "+0.078 (p = 0.774)"),
    "paper.arms.sparsity_control": (0.912, "+0.912 (p = 0.0001)"),
}


@producer("reference", inputs=(), version=1,
          description="The audit paper's published figures (literature values, for comparison only).")
def reference_entries(ctx: ProducerContext) -> list[Value]:
    return [Value(name, value, text=text) for name, (value, text) in sorted(PAPER.items())]
