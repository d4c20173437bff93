"""``creditaudit arms``: the seven-arm CRN LoRA experiment, its evaluation and its analysis.

Under a frozen protocol only. Reads the task list (``tasks.json``), the signals stage's credit
table (``signals/credit.parquet``: every arm that trains on a family's credit needs that family
audited -- a missing family is refused, naming the arm) and the pinned base policy (refused when
its files differ from the pins). Writes, stamped with the protocol id and attested by a link
record, under ``<run>/arms/``:

* ``tasks.json`` -- the training pool and the frozen held-out evaluation set;
* ``checkpoints/seed-<s>/round-<r>/<arm>/`` -- adapter (peft layout), optimizer state, and the
  round's record (dose counters, displacement, probe distributions); ``plan.json`` per round;
* ``eval/<checkpoint>.parquet`` -- one row per evaluation episode (base and final checkpoints);
* ``probes.parquet`` -- the probe states;
* ``training.parquet``, ``evaluation.parquet``, ``probe_distributions.parquet``;
* ``analysis.json`` (:class:`ArmsDocument`), ``summary.md`` and ``figures/`` (success with TOST
  bands, JS heatmap, dose per arm).

Resumable: finished arm x seed rounds are loaded from their checkpoints (a checkpoint that fails to
load is refused, naming it), the rest are trained; evaluation shards are reused. Every byte is
deterministic (one torch thread, named seed streams, no wall-clock time or machine path).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from creditaudit.artifacts import read_stamped_parquet, write_bytes_atomic, write_parquet_atomic
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes, canonical_hash, to_json_value
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.protocol.signing import Signer

__all__ = ["ARMS_DIR", "ANALYSIS_JSON", "SUMMARY_MD", "ArmsDocument", "run_arms", "required_families"]

ARMS_DIR = "arms"
ANALYSIS_JSON = "arms/analysis.json"
SUMMARY_MD = "arms/summary.md"
CREDIT = "signals/credit.parquet"


class ArmsDocument(BaseModel):
    """``arms/analysis.json``: settings, task sets, dose, success, C1-C6, divergence per stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    """Format version."""
    protocol_id: str
    """The protocol every input and output is stamped with."""
    settings: dict[str, Any]
    """The protocol's arms section and the statistics conventions used."""
    families: dict[str, str]
    """Credit source of the implicit and judge arms: protocol signal names."""
    task_sets: dict[str, Any]
    """Sizes and id hashes of the training pool, the held-out set and the training-evaluation set."""
    base_sha256: str
    """Hash of the base policy's pinned files."""
    analysis: dict[str, Any]
    """Format collapse, success, comparisons (C1-C6) with Holm, dose, divergence per stage, paper figures."""


# ---------------------------------------------------------------------- inputs


def required_families(frozen: FrozenProtocol, arms: list[str]) -> dict[str, Any]:
    """The protocol signal sections the arms train on (``{"implicit": spec, "judge": spec}``).

    Raises
    ------
    InputError
        Naming the arm, when the protocol defines no family of the kind it needs, or when the
        signals stage's credit table lacks that family's credit.
    """
    from creditaudit.training_arms.rules import arm_rule

    specs: dict[str, Any] = {}
    needed = {}
    for arm in arms:
        source = arm_rule(arm).source
        if source in ("implicit", "judge"):
            needed.setdefault(source, []).append(arm)
    if not needed:
        return specs
    for source, by in needed.items():
        spec = next((s for s in frozen.protocol.signals if s.family == source), None)
        if spec is None:
            raise InputError(
                f"{frozen.path.name}: arms.arms names {', '.join(by)}, which train on {source} credit, but "
                f"`signals` defines no {source} family; add one (amend) or drop the arm(s)"
            )
        specs[source] = spec
    path = frozen.run_dir / CREDIT
    try:
        table = read_stamped_parquet(path, frozen.id, what="credit table", command="creditaudit signals")
    except InputError as exc:
        arms_named = sorted(a for by in needed.values() for a in by)
        raise InputError(f"arms {', '.join(arms_named)}: their credit table is missing or unusable ({exc})") from None
    families = set(table.column("subject").to_pylist())
    for source, spec in specs.items():
        if spec.name not in families:
            raise InputError(
                f"{path}: no credit of family {spec.name!r}, which arm(s) {', '.join(needed[source])} train on; "
                "rerun `creditaudit signals` under this protocol"
            )
    return specs


def _base_sha256(protocol: Any) -> str:
    p = protocol.policy
    return canonical_hash({"model_files": p.model_files, "tokenizer_files": p.tokenizer_files,
                           "chat_template_sha256": p.chat_template_sha256})


def _task_sets(frozen: FrozenProtocol, signer: Signer, args: Any, env: Any) -> tuple[list, list, list, list[Path]]:
    """(pool, held_out, train_eval, produced files): lists of (TaskEntry, Task); the produced files are
    every file of the held-out games this stage generated (each game's directory, whole)."""
    import numpy as np

    from creditaudit.protocol.seeds import rng
    from creditaudit.replay.tasks import TaskEntry, environment_plugin, prepare_tasks, task_for

    protocol = frozen.protocol
    run_dir = frozen.run_dir
    path = run_dir / ARMS_DIR / "tasks.json"
    produced: list[Path] = []
    entries = prepare_tasks(frozen, signer)
    if path.is_file():
        document = json.loads(path.read_text("utf-8"))
        if document.get("protocol_id") != frozen.id:
            raise InputError(f"{path}: written under another protocol; a run directory never mixes protocols")
        by_id = {e.task_id: e for e in entries}
        pool = [by_id[t] for t in document["pool"]]
        held = [TaskEntry(t["task_id"], t["task_type"], t["path"], dict(t["params"])) for t in document["held_out"]]
    else:
        env_section = protocol.environment
        pool = list(entries)
        plugin = environment_plugin(protocol)
        if plugin.capabilities.generates_tasks:
            tasks = plugin.make_tasks(args.eval_tasks + len(pool), rng=rng(frozen.id, "arms/eval-tasks"))
            seen = {e.task_id for e in pool}
            held = [TaskEntry(t.task_id, t.task_type, None, dict(t.params)) for t in tasks if t.task_id not in seen]
            held = held[:args.eval_tasks]
        elif env_section.source == "generated":
            from creditaudit.replay.envs.alfworld import generate_games

            settings = env_section.generator
            per_type = math.ceil(args.eval_tasks / len(settings.task_types))
            report = generate_games(run_dir / ARMS_DIR / "games", task_types=settings.task_types,
                                    games_per_type=per_type, max_objects=settings.max_objects,
                                    max_receptacles=settings.max_receptacles, floorplans=settings.floorplans or None,
                                    rng=rng(frozen.id, "arms/eval-games"))
            seen = {e.task_id for e in pool}
            held = []
            for game in report.games:
                if game.task_id in seen:
                    continue
                rel = Path(game.path).resolve().relative_to(run_dir.resolve()).as_posix()
                held.append(TaskEntry(game.task_id, game.task_type, rel, {"floorplan": game.floorplan}))
            held = held[:args.eval_tasks]
        else:  # pinned user games: a seeded split of the frozen list
            order = rng(frozen.id, "arms/eval-split").permutation(len(pool))
            held = [pool[int(i)] for i in order[:args.eval_tasks]]
            pool = [pool[int(i)] for i in sorted(order[args.eval_tasks:])]
        if len(held) < args.eval_tasks:
            raise InputError(f"arms.eval_tasks is {args.eval_tasks} but only {len(held)} held-out tasks could be made; "
                             "lower it (amend) or enlarge the task list")
        document = {"protocol_id": frozen.id, "pool": [e.task_id for e in pool],
                    "held_out": [e.to_dict() for e in held]}
        write_bytes_atomic(path, canonical_bytes(document) + b"\n")
    games = run_dir / ARMS_DIR / "games"
    if games.is_dir():  # every file the generator wrote (game and its traj_data.json): none left unattested
        produced = sorted(p for p in games.rglob("*") if p.is_file())
    if not pool:
        raise InputError("the training pool is empty: the task list holds no task outside the held-out set")
    order = rng(frozen.id, "arms/train-eval").permutation(len(pool))[:min(args.eval_tasks, len(pool))]
    train_eval = [pool[int(i)] for i in np.sort(order)]
    as_tasks = lambda es: [(e, task_for(e, protocol, run_dir)) for e in es]  # noqa: E731
    return as_tasks(pool), as_tasks(held), as_tasks(train_eval), produced


# ---------------------------------------------------------------------- the stage


def _eval_rows_to_table(rows: dict[str, list]) -> pa.Table:
    from creditaudit.training_arms.evaluate import EVAL_SCHEMA

    return pa.Table.from_pydict(rows, schema=EVAL_SCHEMA)


def run_arms(
    protocol_path: str | Path,
    signer: Signer,
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> ArmsDocument:
    """Train, evaluate and analyse every arm x seed of the frozen protocol (resumable)."""
    from creditaudit.replay.collect import load_run_policy, policy_files_in_run
    from creditaudit.replay.compute import stored_numerics
    from creditaudit.replay.tasks import make_environment
    from creditaudit.signals.base import make_family
    from creditaudit.training_arms.analysis import analyse
    from creditaudit.training_arms.evaluate import evaluate_checkpoints, probes_from_table, probes_table, select_probes
    from creditaudit.training_arms.lora import adapter_name
    from creditaudit.training_arms.loop import ArmsArgs, ArmsTrainer

    frozen = require_frozen(protocol_path)
    protocol = frozen.protocol
    run_dir = frozen.run_dir
    out_dir = run_dir / ARMS_DIR
    args = ArmsArgs.from_protocol(protocol)
    specs = required_families(frozen, list(args.arms))
    families = {source: make_family(spec, source=f"{frozen.path.name}: signals ({spec.name})")
                for source, spec in specs.items()}
    lock_path = frozen.path.with_name(frozen.path.stem + ".lock.json")
    inputs = [frozen.path, lock_path, run_dir / "tasks.json", *policy_files_in_run(frozen)]
    if specs:
        inputs.append(run_dir / CREDIT)
    policy = load_run_policy(frozen)
    base_sha = _base_sha256(protocol)
    env = make_environment(protocol)
    try:
        with stored_numerics():
            pool, held_out, train_eval, produced = _task_sets(frozen, signer, args, env)
            trainer = ArmsTrainer(policy=policy, env=env, protocol=protocol, protocol_id=frozen.id, args=args,
                                  out_dir=out_dir, run_dir=run_dir, base_sha256=base_sha, families=families,
                                  progress=progress)
            trainer.resume()
            eval_dir = out_dir / "eval"
            base_path = eval_dir / "base.parquet"
            probes_path = out_dir / "probes.parquet"
            common = {"protocol_id": frozen.id, "temperature": args.temperature,
                      "max_action_tokens": args.max_action_tokens, "rollouts": args.eval_rollouts,
                      "progress": progress}
            if base_path.is_file() and probes_path.is_file():
                probes = probes_from_table(read_stamped_parquet(probes_path, frozen.id, what="probe states",
                                                                command="creditaudit arms"))
            else:
                base = [("base", "base", -1, None)]
                rows_h, played = evaluate_checkpoints(env, policy, trainer.bank, [t for _, t in held_out], base,
                                                      set_name="held_out", **common)
                rows_t, _ = evaluate_checkpoints(env, policy, trainer.bank, [t for _, t in train_eval], base,
                                                 set_name="train", **common)
                probes = select_probes(played["base"], n=args.probe_states, protocol_id=frozen.id)
                write_parquet_atomic(probes_table(probes, frozen.id), probes_path)
                write_parquet_atomic(pa.concat_tables([_eval_rows_to_table(rows_h["base"]),
                                                       _eval_rows_to_table(rows_t["base"])]), base_path)
            base_probe = _base_probe(policy, trainer.bank, probes)
            trainer.train(pool, probes)
            pending = [(adapter_name(arm, s), arm, s, adapter_name(arm, s)) for s in range(args.seeds)
                       for arm in args.arms if not (eval_dir / f"{adapter_name(arm, s)}.parquet").is_file()]
            if pending:
                rows_h, _ = evaluate_checkpoints(env, policy, trainer.bank, [t for _, t in held_out], pending,
                                                 set_name="held_out", **common)
                rows_t, _ = evaluate_checkpoints(env, policy, trainer.bank, [t for _, t in train_eval], pending,
                                                 set_name="train", **common)
                for label, *_ in pending:
                    write_parquet_atomic(pa.concat_tables([_eval_rows_to_table(rows_h[label]),
                                                           _eval_rows_to_table(rows_t[label])]),
                                         eval_dir / f"{label}.parquet")
    finally:
        env.close()

    labels = ["base"] + [adapter_name(arm, s) for s in range(args.seeds) for arm in args.arms]
    evaluation = pa.concat_tables([read_stamped_parquet(eval_dir / f"{label}.parquet", frozen.id,
                                                        what="evaluation shard", command="creditaudit arms")
                                   for label in labels]).combine_chunks()
    records = trainer.records
    statistics = protocol.statistics
    analysis = analyse(evaluation.to_pandas(), records, arms=list(args.arms), seeds=args.seeds, rounds=args.rounds,
                       protocol_id=frozen.id, statistics=statistics,
                       collapse_threshold=args.format_collapse_threshold)
    document = ArmsDocument(
        protocol_id=frozen.id,
        settings={"arms": protocol.arms.model_dump(mode="json"),
                  "statistics": {k: getattr(statistics, k) for k in ("alpha", "equivalence_band", "power", "permutations",
                                                                     "mantel_method", "mantel_alternative", "js_log_base")},
                  "format_collapse_threshold": args.format_collapse_threshold,
                  "temperature": args.temperature},
        families={source: spec.name for source, spec in specs.items()},
        task_sets={name: {"n": len(ts), "ids_sha256": canonical_hash([e.task_id for e, _ in ts])}
                   for name, ts in (("pool", pool), ("held_out", held_out), ("train_eval", train_eval))},
        base_sha256=base_sha,
        analysis=analysis,
    )
    training = _training_table(records, frozen.id)
    distributions = _distribution_table(records, probes, base_probe, frozen.id)
    checkpoint_files = sorted(p for p in (out_dir / "checkpoints").rglob("*") if p.is_file())
    with StageLink(
        run_dir, "arms", frozen.id, signer, command=["creditaudit", "arms"],
        parameters={"arms": list(args.arms), "seeds": args.seeds, "rounds": args.rounds,
                    "dose_matched": args.dose_matched},
        inputs=inputs,
    ) as link:
        write_parquet_atomic(training, out_dir / "training.parquet")
        write_parquet_atomic(evaluation, out_dir / "evaluation.parquet")
        write_parquet_atomic(distributions, out_dir / "probe_distributions.parquet")
        write_bytes_atomic(run_dir / ANALYSIS_JSON,
                           canonical_bytes(to_json_value(document.model_dump(mode="json"))) + b"\n")
        write_bytes_atomic(run_dir / SUMMARY_MD, _markdown(document).encode("utf-8"))
        from creditaudit.figures import arms_figures as write_figures

        figures = write_figures(document, out_dir / "figures")
        for path in [out_dir / "tasks.json", out_dir / "probes.parquet", out_dir / "training.parquet",
                     out_dir / "evaluation.parquet", out_dir / "probe_distributions.parquet",
                     *(eval_dir / f"{label}.parquet" for label in labels), *checkpoint_files, *produced,
                     run_dir / ANALYSIS_JSON, run_dir / SUMMARY_MD, *figures]:
            link.add_output(path)
    return document


def _base_probe(policy: Any, bank: Any, probes: Any) -> list:
    from creditaudit.training_arms.loop import probe_distribution

    if not probes:
        return []
    with bank.base():
        return [d.tolist() for d in probe_distribution(policy, probes)]


_TRAINING_FIELDS = (
    ("arm", pa.string()), ("seed", pa.int32()), ("round", pa.int32()), ("turns", pa.int64()),
    ("zero_advantage", pa.int64()), ("zero_weight", pa.int64()), ("abstained", pa.int64()), ("kept", pa.int64()),
    ("natural_steps", pa.int64()), ("target_steps", pa.int64()), ("steps", pa.int64()), ("samples_used", pa.int64()),
    ("loss_mean", pa.float64()), ("steps_total", pa.int64()), ("credit_sparsity", pa.float64()),
    ("displacement", pa.float64()), ("train_success", pa.float64()), ("adapter_sha256", pa.string()),
)


def _training_table(records: list[dict[str, Any]], protocol_id: str) -> pa.Table:
    columns = {"protocol_id": pa.array([protocol_id] * len(records), pa.string())}
    for name, kind in _TRAINING_FIELDS:
        columns[name] = pa.array([r[name] for r in records], kind)
    return pa.table(columns)


def _distribution_table(records: list[dict[str, Any]], probes: Any, base: list, protocol_id: str) -> pa.Table:
    cols: dict[str, list] = {k: [] for k in ("arm", "seed", "round", "probe", "action", "probability")}
    sources = [("base", -1, 0, base)] + [(r["arm"], r["seed"], r["round"], r["probe"]) for r in records]
    for arm, seed, round_, dists in sources:
        for probe, dist in zip(probes, dists):
            for action, p in zip(probe.admissible, dist):
                cols["arm"].append(arm)
                cols["seed"].append(seed)
                cols["round"].append(round_)
                cols["probe"].append(probe.index)
                cols["action"].append(action)
                cols["probability"].append(float(p))
    return pa.table({
        "protocol_id": pa.array([protocol_id] * len(cols["arm"]), pa.string()),
        "arm": pa.array(cols["arm"], pa.string()), "seed": pa.array(cols["seed"], pa.int32()),
        "round": pa.array(cols["round"], pa.int32()), "probe": pa.array(cols["probe"], pa.int32()),
        "action": pa.array(cols["action"], pa.string()), "probability": pa.array(cols["probability"], pa.float64()),
    })


# ---------------------------------------------------------------------- summary


def _f(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def _markdown(doc: ArmsDocument) -> str:
    a = doc.analysis
    paper = a["paper"]
    lines = [f"# Training arms — protocol `{doc.protocol_id}`", ""]
    arms = doc.settings["arms"]
    lines += [f"{len(arms['arms'])} arms × {arms['seeds']} seeds, {arms['rounds']} rounds of {arms['tasks_per_round']} "
              f"tasks × {arms['group_size']} rollouts; LoRA rank {arms['lora_rank']}, lr {arms['learning_rate']}; "
              f"dose-matched: {arms['dose_matched']}. Held-out tasks: {doc.task_sets['held_out']['n']}.", ""]
    lines += ["## Success", "", "| arm | held-out (per seed) | held-out mean | training tasks mean |", "|---|---|---|---|"]
    held, train = a["success"]["held_out"], a["success"]["train"]
    lines.append(f"| base (untrained) | — | {_f(held['base'])} | {_f(train['base'])} |")
    for arm, entry in held["arms"].items():
        per_seed = ", ".join(f"{v:.3f}" for v in entry["per_seed"].values())
        lines.append(f"| {arm} | {per_seed} | {_f(entry['mean_included'])} | {_f(train['arms'][arm]['mean_included'])} |")
    learning = a["learning"]
    lines += ["", f"Learning on the training tasks ({learning['n_episodes']} evaluation episodes, each played by the base "
              "and every checkpoint with the same seeds; one-sided paired t, H1 arm > base):", "",
              "| arm | success | base | difference | p | moved |", "|---|---|---|---|---|---|"]
    for arm, entry in learning["arms"].items():
        note = f" ({entry['resolved']})" if "resolved" in entry else ""
        lines.append(f"| {arm} | {_f(entry.get('success_arm'))} | {_f(entry.get('success_base'))} | "
                     f"{_f(entry.get('estimate'), '+.3f')} | {_f(entry.get('pvalue'), '.4f')} | "
                     f"{'yes' if entry.get('moved') else 'no'}{note} |")
    excluded = [c for c in a["format_collapse"]["checkpoints"] if c["excluded"]]
    lines += ["", f"Format collapse (share of inadmissible actions > {a['format_collapse']['threshold']}): "
              + (", ".join(f"{c['arm']} seed {c['seed']} ({c['inadmissible_share']:.3f})" for c in excluded)
                 if excluded else "no checkpoint excluded") + "."]
    lines += ["", "## Confirmatory comparisons (Holm over six)", "",
              "| id | comparison | estimate | interval | p | p (Holm) | MDE | reading |", "|---|---|---|---|---|---|---|---|"]
    for c in a["comparisons"]:
        op = ">" if c["kind"] == "superiority" else "vs"
        ci = c.get("ci")
        interval = "—" if not ci else f"[{_f(ci[0], '+.3f')}, {_f(ci[1], '+.3f') if ci[1] is not None else '∞'}]"
        mde = c.get("mde", {}).get("mde")
        note = f" ({c['resolved']})" if "resolved" in c else ""
        lines.append(f"| {c['id']} | {c['arm']} {op} {c['versus']} | {_f(c.get('estimate'), '+.3f')} | {interval} | "
                     f"{_f(c.get('pvalue'), '.4f')} | {_f(c['pvalue_holm'], '.4f')} | {_f(mde)} | {c['reading']}{note} |")
    lines += ["", f"Band ±{doc.settings['statistics']['equivalence_band']}; an inconclusive reading is never "
              f"\"no difference\": the design detects only differences above its MDE (paper: about {paper['mde']})."]
    lines += ["", "## Dose (optimizer steps)", "", "| arm | mean steps per round | steps per round (per seed) | credit sparsity |",
              "|---|---|---|---|"]
    for arm, d in a["dose"].items():
        per = "; ".join(",".join(str(s) for s in r["steps"]) for r in d["per_round"])
        lines.append(f"| {arm} | {_f(d['mean_steps_per_round'], '.1f')} | {per} | {_f(d['credit_sparsity'])} |")
    rng_ = a["dose_range"]
    lines += ["", f"Range of mean steps per round: {_f(rng_['max_mean_steps_per_round'], '.1f')} to "
              f"{_f(rng_['min_mean_steps_per_round'], '.1f')} (paper: {paper['steps_per_round_max']} vs "
              f"{paper['steps_per_round_min']})."]
    lines += ["", "## Action distributions (JS divergence on the probe states)", ""]
    for stage in a["stages"]:
        lines.append(f"### Stage {stage['stage']}")
        if "undefined" in stage:
            lines += [f"Not computed: {stage['undefined']}.", ""]
            continue
        bw = stage["between_within"]
        if "undefined" in bw:
            lines.append(f"- between vs within arm: undefined ({bw['undefined']})")
        else:
            lines.append(f"- between-arm JS {bw['mean_between']:.4f} vs within-arm {bw['mean_within']:.4f}, "
                         f"p = {bw['pvalue']:.4f} (paper: {paper['js_between']} vs {paper['js_within']}, p = {paper['js_pvalue']})")
        for key, label in (("instrument_partition", "instrument partition"), ("information_partition", "information partition")):
            t = stage[key]
            lines.append(f"- {label}: " + (f"undefined ({t['undefined']})" if "undefined" in t else
                                            f"{t['statistic']:+.4f}, p = {t['pvalue']:.4f}"))
        for key, label, ref in (("partial_mantel", "partial Mantel (JS ~ design | displacement)", "partial_mantel"),
                                ("positive_control", "positive control (JS ~ credit sparsity | design)", "positive_control")):
            t = stage[key]
            lines.append(f"- {label}: " + (f"undefined ({t['undefined']})" if "undefined" in t else
                                            f"{t['statistic']:+.3f}, p = {t['pvalue']:.4f}")
                         + f" (paper: {paper[ref]:+.3f}, p = {paper[ref + '_pvalue']})")
        lines.append("")
    lines += ["Figures: `figures/success.png`, `figures/js_heatmap.png`, `figures/dose.png`.", ""]
    return "\n".join(lines)
