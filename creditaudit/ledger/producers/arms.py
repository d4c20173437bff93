"""Ledger entries of the training-arms experiment (docs/design.md §6), only when the run has ``arms/``.

Recomputed from the raw arms tables — ``arms/evaluation.parquet`` (every evaluation episode),
``arms/training.parquet`` (every arm x seed x round record: dose counters, displacement, credit
sparsity) and ``arms/probe_distributions.parquet`` (every checkpoint's action distribution on the
probe states) — with the stage's own :func:`~creditaudit.training_arms.analysis.analyse` (same
named permutation streams), never read from ``arms/analysis.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from creditaudit.ledger.catalogue import ArtifactSpec, register_artifact
from creditaudit.ledger.producer import ProducerContext, Value, producer

__all__ = ["arms_entries", "records_from_tables"]

def _eval_schema() -> Any:
    from creditaudit.training_arms.evaluate import EVAL_SCHEMA

    return EVAL_SCHEMA


for _spec in (
    ArtifactSpec("arms.tasks", "arms/tasks.json", "json", "arms", "creditaudit arms",
                 description="the arms' training pool and frozen held-out set"),
    ArtifactSpec("arms.evaluation", "arms/evaluation.parquet", "parquet", "arms", "creditaudit arms",
                 schema=_eval_schema, description="one row per evaluation episode of every checkpoint"),
    ArtifactSpec("arms.eval_shards", "arms/eval/*.parquet", "parquet", "arms", "creditaudit arms",
                 schema=_eval_schema, description="one evaluation shard per checkpoint"),
    ArtifactSpec("arms.training", "arms/training.parquet", "parquet", "arms", "creditaudit arms",
                 description="one row per arm x seed x round: dose, displacement, credit sparsity"),
    ArtifactSpec("arms.probes", "arms/probes.parquet", "parquet", "arms", "creditaudit arms",
                 description="the probe states"),
    ArtifactSpec("arms.probe_distributions", "arms/probe_distributions.parquet", "parquet", "arms", "creditaudit arms",
                 description="every checkpoint's action distribution on every probe state"),
    ArtifactSpec("arms.analysis", "arms/analysis.json", "json", "arms", "creditaudit arms", raw=False,
                 description="the arms analysis (C1-C6, dose, divergence)"),
    ArtifactSpec("arms.summary", "arms/summary.md", "text", "arms", "creditaudit arms", raw=False, stamped=False,
                 description="the arms summary"),
    ArtifactSpec("arms.figures", "arms/figures/*.png", "png", "arms", "creditaudit arms", raw=False, stamped=False,
                 description="the arms figures"),
):
    register_artifact(_spec)


def _evaluation_evidence(run_dir: Path, rel: str) -> list[str]:
    import pyarrow.parquet as pq

    names = pq.read_schema(run_dir / rel).names
    missing = [c for c in ("steps", "inadmissible_steps", "success") if c not in names]
    return [f"has no column {', '.join(missing)} (format-collapse exclusions cannot be justified)"] if missing else []


def _analysis_evidence(run_dir: Path, rel: str) -> list[str]:
    import json

    data = json.loads((run_dir / rel).read_text("utf-8"))
    collapse = (data.get("analysis") or {}).get("format_collapse")
    if not isinstance(collapse, dict) or "checkpoints" not in collapse:
        return ["has no `analysis.format_collapse.checkpoints` (which checkpoints were excluded, and why)"]
    out = []
    for c in collapse["checkpoints"]:
        if c.get("excluded") and c.get("inadmissible_share") is None:
            out.append(f"checkpoint {c.get('arm')} seed {c.get('seed')} is excluded without its inadmissible share")
    for c in (data.get("analysis") or {}).get("comparisons", []):
        if c.get("pvalue") is None and not c.get("resolved"):
            out.append(f"comparison {c.get('id')} has neither a p-value nor the reason it was resolved")
    return out


from creditaudit.ledger.integrity import register_evidence_check  # noqa: E402

register_evidence_check("arms.evaluation", _evaluation_evidence)
register_evidence_check("arms.eval_shards", _evaluation_evidence)
register_evidence_check("arms.analysis", _analysis_evidence)


def _has_arms(run_dir: Path) -> bool:
    return (run_dir / "arms").is_dir()


def records_from_tables(training: Any, distributions: Any) -> list[dict[str, Any]]:
    """The trainer's round records rebuilt from ``training.parquet`` and ``probe_distributions.parquet``.

    A record's ``probe`` is its distribution on every probe state (probe order, then action order,
    as stored).
    """
    dist = distributions.to_pandas()
    probes: dict[tuple[str, int, int], dict[int, list[float]]] = {}
    for arm, seed, round_, probe, p in zip(dist.arm, dist.seed, dist["round"], dist.probe, dist.probability):
        probes.setdefault((str(arm), int(seed), int(round_)), {}).setdefault(int(probe), []).append(float(p))
    records = []
    for row in training.to_pylist():
        row.pop("protocol_id", None)
        key = (row["arm"], int(row["seed"]), int(row["round"]))
        row["probe"] = list(probes.get(key, {}).values())
        records.append(row)
    return records


def _entries_for_test(prefix: str, test: dict[str, Any], *, stat_fmt: str) -> list[Value]:
    if "undefined" in test:
        return [Value(f"{prefix}.statistic", None, stat_fmt), Value(f"{prefix}.pvalue", None, ".4f"),
                Value(f"{prefix}.note", test["undefined"])]
    return [Value(f"{prefix}.statistic", test.get("statistic"), stat_fmt), Value(f"{prefix}.pvalue", test.get("pvalue"), ".4f"),
            Value(f"{prefix}.note", "", text="—")]


@producer("arms", inputs=("arms.tasks", "arms.evaluation", "arms.training", "arms.probe_distributions"), version=2,
          when=_has_arms,
          description="Training arms: format collapse, held-out success, learning on the training tasks, C1-C6 "
                      "with Holm and MDE, dose, divergence.")
def arms_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.training_arms.analysis import analyse

    protocol = ctx.protocol
    section = protocol.arms
    arms = list(section.arms)
    evaluation = ctx.table("arms.evaluation").to_pandas()
    records = records_from_tables(ctx.table("arms.training"), ctx.table("arms.probe_distributions"))
    a = analyse(evaluation, records, arms=arms, seeds=section.seeds, rounds=section.rounds, protocol_id=ctx.protocol_id,
                statistics=protocol.statistics, collapse_threshold=protocol.exclusions.format_collapse_threshold)
    tasks = ctx.json("arms.tasks")
    out = [
        Value("arms.arms", arms, text=", ".join(arms)),
        Value("arms.seeds", section.seeds, "d"),
        Value("arms.rounds", section.rounds, "d"),
        Value("arms.dose_matched", bool(section.dose_matched)),
        Value("arms.n_held_out", len(tasks.get("held_out", [])), "d"),
        Value("arms.n_pool", len(tasks.get("pool", [])), "d"),
    ]
    collapse = a["format_collapse"]
    excluded = [c for c in collapse["checkpoints"] if c["excluded"]]
    out += [
        Value("arms.format_collapse.threshold", collapse["threshold"], "g"),
        Value("arms.format_collapse.n_excluded", len(excluded), "d"),
        Value("arms.format_collapse.excluded", [f"{c['arm']}/s{c['seed']}" for c in excluded],
              text=", ".join(f"{c['arm']} seed {c['seed']} ({c['inadmissible_share']:.3f} inadmissible)" for c in excluded)
              or "none"),
    ]
    for c in collapse["checkpoints"]:
        out += [Value(f"arms.{c['arm']}.s{c['seed']}.inadmissible_share", c["inadmissible_share"], ".3f"),
                Value(f"arms.{c['arm']}.s{c['seed']}.excluded", bool(c["excluded"]))]

    held, train = a["success"]["held_out"], a["success"]["train"]
    out += [Value("arms.base.eval_success", held["base"], ".3f"), Value("arms.base.train_success", train["base"], ".3f"),
            Value("arms.eval_n_tasks", held["n_tasks"], "d")]
    for arm in arms:
        entry = held["arms"].get(arm, {})
        out += [Value(f"arms.{arm}.eval_success", entry.get("mean_included"), ".3f"),
                Value(f"arms.{arm}.train_success", train["arms"].get(arm, {}).get("mean_included"), ".3f"),
                Value(f"arms.{arm}.eval_success_per_seed", entry.get("per_seed", {}),
                      text=", ".join(f"{v:.3f}" for v in entry.get("per_seed", {}).values()) or "none")]

    learning = a["learning"]
    out.append(Value("arms.learning.n_episodes", learning["n_episodes"], "d"))
    for arm, entry in learning["arms"].items():
        p = f"arms.{arm}.learning"
        out += [Value(f"{p}.estimate", entry.get("estimate"), "+.3f"),
                Value(f"{p}.pvalue", entry.get("pvalue"), ".4f"),
                Value(f"{p}.moved", bool(entry.get("moved")))]

    ids = []
    for c in a["comparisons"]:
        p = f"arms.{c['id']}"
        ids.append(c["id"])
        ci = c.get("ci") or [None, None]
        op = ">" if c["kind"] == "superiority" else "vs"
        out += [
            Value(f"{p}.comparison", f"{c['arm']} {op} {c['versus']}"),
            Value(f"{p}.kind", c["kind"]),
            Value(f"{p}.estimate", c.get("estimate"), "+.3f"),
            Value(f"{p}.ci_low", ci[0], "+.3f"),
            Value(f"{p}.ci_high", ci[1], "+.3f",
                  text="∞" if c["kind"] == "superiority" and ci[0] is not None and ci[1] is None else None),
            Value(f"{p}.pvalue", c.get("pvalue"), ".4f"),
            Value(f"{p}.pvalue_holm", c.get("pvalue_holm"), ".4f"),
            Value(f"{p}.mde", (c.get("mde") or {}).get("mde"), ".3f"),
            Value(f"{p}.reading", c["reading"]),
            Value(f"{p}.resolved", c.get("resolved"), text=c.get("resolved") or "—"),
        ]
    out += [Value("arms.comparisons", ids, text=", ".join(ids)),
            Value("arms.equivalence_band", protocol.statistics.equivalence_band, "g")]

    for arm, d in a["dose"].items():
        out += [Value(f"arms.{arm}.mean_steps_per_round", d["mean_steps_per_round"], ".1f"),
                Value(f"arms.{arm}.steps_total_per_seed", d["steps_total_per_seed"],
                      text=", ".join(str(s) for s in d["steps_total_per_seed"]) or "none"),
                Value(f"arms.{arm}.credit_sparsity", d["credit_sparsity"], ".3f")]
    rng_ = a["dose_range"]
    out += [Value("arms.dose.max_mean_steps_per_round", rng_["max_mean_steps_per_round"], ".1f"),
            Value("arms.dose.min_mean_steps_per_round", rng_["min_mean_steps_per_round"], ".1f")]

    stages = []
    for stage in a["stages"]:
        p = f"arms.stage.{stage['stage']}"
        stages.append(str(stage["stage"]))
        if "undefined" in stage:
            out.append(Value(f"{p}.note", stage["undefined"]))
            out.append(Value(f"{p}.defined", False))
            continue
        out.append(Value(f"{p}.defined", True))
        bw = stage["between_within"]
        out += [Value(f"{p}.js_between", bw.get("mean_between"), ".4f"),
                Value(f"{p}.js_within", bw.get("mean_within"), ".4f")]
        out += _entries_for_test(f"{p}.between_within", bw, stat_fmt="+.4f")
        out += _entries_for_test(f"{p}.instrument_partition", stage["instrument_partition"], stat_fmt="+.4f")
        out += _entries_for_test(f"{p}.information_partition", stage["information_partition"], stat_fmt="+.4f")
        out += _entries_for_test(f"{p}.partial_mantel", stage["partial_mantel"], stat_fmt="+.3f")
        out += _entries_for_test(f"{p}.positive_control", stage["positive_control"], stat_fmt="+.3f")
    out.append(Value("arms.stages", stages, text=", ".join(stages)))
    return out
