"""Training-arms benchmark on real ALFWorld: the seven arms on the shipped policy, on a CPU.

Workload: a run built from the default template (the embedded default policy shipped in the
package, generated ALFRED-domain games played on the real ALFWorld/TextWorld engine) with the
CPU-sized departures of :data:`OVERRIDES` (a shorter horizon, a few games of the task types the
policy can win, the two credit families the arms train on); stages protocol, policy, freeze,
games, collect, signals (implicit + judge credit; no replay: the arms do not read it), then
``creditaudit arms`` in two runs side by side (one process per core; each trains with one torch
thread): the standard configuration and the dose-matched option (the same protocol with
``arms.dose_matched: true``, a second run directory with the same shipped policy; its different
protocol id gives it its own seeds, tasks and rollouts).

Reports per stage wall time; success of the base policy and of every arm on the training tasks,
with the analysis' one-sided paired learning test (episode = (task, rollout), each played by the
base and every checkpoint with the same seeds), and on the held-out tasks; optimizer steps per
arm per round (dose); C1-C6; per stage the JS divergence between and within arms, the instrument
and information partition tests, the partial Mantel test and its positive control -- each beside
the paper's value (``creditaudit/papers.yaml``). Writes ``benchmarks/results/arms_alfworld_bench.json``
(no wall-clock time or machine path besides its ``seconds`` block).

The committed figures (the standard run's ledger, its raw inputs, arms summary and figures kept in
``benchmarks/results/arms_alfworld/``, from which ``docs/results.md`` is generated)::

    python benchmarks/arms_alfworld_bench.py --keep benchmarks/results/arms_alfworld

Run directories (resumable, git-ignored): ``benchmarks/.arms-alfworld-run`` and
``benchmarks/.arms-alfworld-run-dose-matched``; ``--fresh`` deletes them first.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "arms_alfworld_bench.json"
RUN = ROOT / ".arms-alfworld-run"

#: Departures from the default template (everything else, the policy included, is the template's).
OVERRIDES: dict[str, Any] = {
    "environment": {"generator": {"task_types": ["pick_and_place_simple"], "games_per_type": 4}, "horizon": 20},
    "collection": {"n_tasks": 4, "group_size": 8, "determinism_instances": 2},
    "signals": [
        {"name": "implicit", "family": "implicit"},
        {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "embedded"}},
    ],
    "controls": [
        {"name": "random", "kind": "random", "null_control": True},
        {"name": "uniform", "kind": "uniform", "null_control": True},
        {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"},
        {"name": "shuffle-judge", "kind": "shuffle", "of": "judge"},
    ],
    "router": {"confidence_family": "implicit", "judge_family": "judge", "routed_share": 0.5},
    "arms": {"seeds": 2, "rounds": 4, "tasks_per_round": 4, "group_size": 8, "lora_rank": 8, "lora_alpha": 16.0,
             "learning_rate": 0.0003, "minibatch_size": 8, "eval_tasks": 4, "eval_rollouts": 16, "probe_states": 32,
             "pivotal_resolution_n": 1},
}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def protocol_text(overrides: dict[str, Any]) -> str:
    import yaml

    from creditaudit.protocol.io import default_template_text, parse_protocol

    data = _merge(yaml.safe_load(default_template_text()), overrides)
    data["description"] = ("The seven training arms on real ALFWorld with the shipped default policy, CPU-sized "
                           "(benchmarks/arms_alfworld_bench.py).")
    text = "# creditaudit arms-on-ALFWorld benchmark protocol\n" + yaml.safe_dump(data, sort_keys=False, width=100)
    parse_protocol(text, source="benchmark protocol")
    return text


def prepare_run(run: Path, overrides: dict[str, Any], seconds: dict[str, float], *, policy_from: Path | None = None,
                games_from: Path | None = None) -> Any:
    """Protocol, policy, keys, freeze; returns the signer. ``games_from``: copy the generated games of
    another run of the same environment section (the dose-matched run shares the standard one's)."""
    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.protocol.io import load_protocol
    from creditaudit.protocol.lock import freeze, lock_path_for, policy_dir
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, generate_keypair, load_signer
    from creditaudit.replay.policies.default.shipped import install_built_policy

    start = time.perf_counter()
    run.mkdir(parents=True, exist_ok=True)
    path = run / "protocol.yaml"
    if not path.exists():
        path.write_text(protocol_text(overrides), "utf-8")
    protocol = load_protocol(path)
    target = policy_dir(protocol, path)
    if not target.is_dir():
        if policy_from is not None:
            shutil.copytree(policy_from, target)
        else:
            install_built_policy(target, protocol.policy.build)
    if not (run / "keys" / PRIVATE_KEY_NAME).exists():
        generate_keypair(run / "keys")
    signer = load_signer(run / "keys" / PRIVATE_KEY_NAME)
    if not lock_path_for(path).exists():
        if not protocol.policy.model_files:
            path.write_text(pin_policy_text(path.read_text("utf-8"), target), "utf-8")
        freeze(path, signer)
    seconds["protocol_policy_freeze"] = round(time.perf_counter() - start, 1)
    return signer


def run_pipeline(run: Path, signer: Any, seconds: dict[str, float], *, quiet: bool) -> dict[str, Any]:
    """games, collect, signals, arms (each resumes); returns the collect summary."""
    from creditaudit.ledger.build import regenerate
    from creditaudit.progress import progress_bars
    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.collect import collect
    from creditaudit.replay.tasks import prepare_tasks
    from creditaudit.signals.stage import run_signals
    from creditaudit.training_arms.stage import run_arms

    path = run / "protocol.yaml"
    frozen = require_frozen(path)
    with progress_bars(enabled=not quiet) as update:
        t = time.perf_counter()
        prepare_tasks(frozen, signer, progress=lambda d, n: update("games", d, n))
        seconds["games"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        summary = collect(path, signer, progress=update).to_dict()
        seconds["collect"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not stage_is_current(run, "signals", frozen.id, signer.key_id):
            run_signals(path, signer)
        seconds["signals"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        run_arms(path, signer, progress=update)
        seconds["arms"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        regenerate(run, signer=signer, progress=update)
        seconds["ledger"] = round(time.perf_counter() - t, 1)
    return summary


def _one_run(run: Path, section: dict[str, Any], quiet: bool) -> tuple[dict[str, Any], dict[str, float]]:
    """One run from an empty (or partial) directory to its ledger: (collect summary, stage seconds)."""
    seconds: dict[str, float] = {}
    signer = prepare_run(run, section, seconds)
    return run_pipeline(run, signer, seconds, quiet=quiet), seconds


def arms_figures(run: Path) -> dict[str, Any]:
    """The figures of ``<run>/arms/analysis.json`` this benchmark reports."""
    doc = json.loads((run / "arms" / "analysis.json").read_text("utf-8"))
    a = doc["analysis"]
    return {
        "protocol_id": doc["protocol_id"],
        "task_sets": {k: v["n"] for k, v in doc["task_sets"].items()},
        "success_train_tasks": {"base": a["success"]["train"]["base"],
                                **{k: v["mean_included"] for k, v in a["success"]["train"]["arms"].items()}},
        "success_held_out": {"base": a["success"]["held_out"]["base"],
                             **{k: v["mean_included"] for k, v in a["success"]["held_out"]["arms"].items()}},
        "learning_train_tasks": {k: {kk: v.get(kk) for kk in ("success_arm", "success_base", "estimate", "pvalue",
                                                             "pvalue_two_sided", "moved", "discordant", "resolved")
                                     if kk in v}
                                 for k, v in a["learning"]["arms"].items()},
        "train_eval_episodes": a["learning"]["n_episodes"],
        "format_collapse_excluded": [f"{c['arm']}/s{c['seed']}" for c in a["format_collapse"]["checkpoints"]
                                     if c["excluded"]],
        "dose": {k: {"mean_steps_per_round": v["mean_steps_per_round"],
                     "steps_per_round": [r["steps"] for r in v["per_round"]],
                     "natural_steps_per_round": [r["natural_steps"] for r in v["per_round"]],
                     "credit_sparsity": v["credit_sparsity"]} for k, v in a["dose"].items()},
        "comparisons": {c["id"]: {"arm": c["arm"], "versus": c["versus"], "estimate": c.get("estimate"),
                                  "p": c.get("pvalue"), "p_holm": c["pvalue_holm"], "reading": c["reading"],
                                  "mde": c.get("mde", {}).get("mde"), **({"resolved": c["resolved"]}
                                                                         if "resolved" in c else {})}
                        for c in a["comparisons"]},
        "stages": [{"stage": s["stage"], **({"undefined": s["undefined"]} if "undefined" in s else {
            k: {kk: s[k].get(kk) for kk in ("mean_between", "mean_within", "statistic", "pvalue", "undefined")
                if s[k].get(kk) is not None}
            for k in ("between_within", "instrument_partition", "information_partition", "partial_mantel",
                      "positive_control")})} for s in a["stages"]],
        "paper": a["paper"],
    }


def keep(run: Path, out: Path) -> None:
    """The ledger with every raw artifact it was computed from, the arms summary and figures."""
    from creditaudit.ledger.build import keep_ledger_inputs

    keep_ledger_inputs(run, out)
    shutil.copy2(run / "arms" / "summary.md", out / "arms" / "summary.md")
    shutil.copytree(run / "arms" / "figures", out / "arms" / "figures")


def _f(v: Any, spec: str = ".3f") -> str:
    return "—" if v is None else format(v, spec)


def print_figures(label: str, fig: dict[str, Any]) -> None:
    paper = fig["paper"]
    print(f"\n== {label} (protocol {fig['protocol_id'][:16]}…; pool {fig['task_sets']['pool']}, held-out "
          f"{fig['task_sets']['held_out']}, training-task episodes {fig['train_eval_episodes']})")
    print(f"{'arm':18s} {'train':>6s} {'held-out':>8s} {'diff':>7s} {'p (1-sided)':>12s} {'steps/round':>11s}  steps per round (per seed)")
    train, held, learn, dose = (fig["success_train_tasks"], fig["success_held_out"], fig["learning_train_tasks"],
                                fig["dose"])
    print(f"{'base':18s} {_f(train['base']):>6s} {_f(held['base']):>8s}")
    for arm in learn:
        e = learn[arm]
        per = "; ".join(",".join(str(x) for x in r) for r in dose[arm]["steps_per_round"])
        print(f"{arm:18s} {_f(train[arm]):>6s} {_f(held[arm]):>8s} {_f(e.get('estimate'), '+.3f'):>7s} "
              f"{_f(e.get('pvalue'), '.2e'):>12s} {_f(dose[arm]['mean_steps_per_round'], '.1f'):>11s}  {per}")
    means = [d["mean_steps_per_round"] for d in dose.values() if d["mean_steps_per_round"] is not None]
    print(f"dose: {max(means):.1f} vs {min(means):.1f} mean steps per round (paper: {paper['steps_per_round_max']} "
          f"vs {paper['steps_per_round_min']})")
    for cid, c in fig["comparisons"].items():
        print(f"{cid} {c['arm']} vs {c['versus']}: {_f(c['estimate'], '+.3f')}, p {_f(c['p'], '.3f')}, "
              f"Holm {_f(c['p_holm'], '.3f')}, MDE {_f(c['mde'])} (paper: about {paper['mde']}) -> {c['reading']}")
    for s in fig["stages"]:
        if "undefined" in s:
            print(f"stage {s['stage']}: {s['undefined']}")
            continue
        bw, ip, fp, pm, pc = (s[k] for k in ("between_within", "instrument_partition", "information_partition",
                                             "partial_mantel", "positive_control"))
        print(f"stage {s['stage']}: JS between {_f(bw.get('mean_between'), '.4f')} vs within "
              f"{_f(bw.get('mean_within'), '.4f')}, p {_f(bw.get('pvalue'), '.4f')} (paper {paper['js_between']} vs "
              f"{paper['js_within']}, p {paper['js_pvalue']}); instrument partition {_f(ip.get('statistic'), '+.4f')} "
              f"p {_f(ip.get('pvalue'), '.4f')}; information partition {_f(fp.get('statistic'), '+.4f')} p "
              f"{_f(fp.get('pvalue'), '.4f')}; partial Mantel {_f(pm.get('statistic'), '+.3f')} p "
              f"{_f(pm.get('pvalue'), '.4f')} (paper {paper['partial_mantel']:+.3f}, p {paper['partial_mantel_pvalue']});"
              f" positive control {_f(pc.get('statistic'), '+.3f')} p {_f(pc.get('pvalue'), '.4f')} (paper "
              f"{paper['positive_control']:+.3f}, p {paper['positive_control_pvalue']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=RUN, help="standard run directory (resumes)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=YAML",
                        help="override one more protocol field (e.g. arms.rounds=6); repeatable")
    parser.add_argument("--no-dose-matched", action="store_true", help="skip the dose-matched run")
    parser.add_argument("--fresh", action="store_true", help="delete the run directories first")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the standard run's ledger with its raw inputs, and its arms summary and figures, "
                             "here (docs/results.md is generated from that ledger)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    import yaml

    overrides = copy.deepcopy(OVERRIDES)
    for item in args.set:
        key, _, value = item.partition("=")
        *parents, leaf = key.split(".")
        node = overrides
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(value)
    runs = {"standard": (args.run, {**overrides, "arms": {**overrides["arms"], "dose_matched": False}})}
    if not args.no_dose_matched:
        runs["dose_matched"] = (args.run.with_name(args.run.name + "-dose-matched"),
                                {**overrides, "arms": {**overrides["arms"], "dose_matched": True}})
    if args.fresh:
        for run, _ in runs.values():
            shutil.rmtree(run, ignore_errors=True)

    t0 = time.perf_counter()
    seconds: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    collected: dict[str, Any] = {}
    # The runs are independent and each trains with one torch thread: side by side, one per core.
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=len(runs)) as pool:
        futures = {label: pool.submit(_one_run, run, section, args.quiet or len(runs) > 1)
                   for label, (run, section) in runs.items()}
        for label, future in futures.items():
            collected[label], seconds[label] = future.result()
            figures[label] = arms_figures(runs[label][0])
    seconds["total"] = round(time.perf_counter() - t0, 1)
    if args.keep is not None:
        keep(runs["standard"][0], args.keep)

    result = {
        "benchmark": "arms_alfworld_bench",
        "overrides": overrides,
        "collect": {k: {kk: v.get(kk) for kk in ("n_tasks", "n_trajectories", "success_rate", "admissible_rate")}
                    for k, v in collected.items()},
        "runs": figures,
        "seconds": seconds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for label, c in result["collect"].items():
        print(f"{label}: collected {c['n_trajectories']} trajectories on {c['n_tasks']} tasks, success "
              f"{_f(c['success_rate'])}")
    for label, fig in figures.items():
        print_figures(label, fig)
    print("\nwall seconds: " + json.dumps(seconds))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
