"""The audit on real ALFWorld: the embedded default policy's rollouts replayed, every credit family
(ProVer and VICT included) computed, audited, and the figures set beside the papers'.

Workload: the default template (G = 8, every family and control, the shipped default policy,
horizon 50, every turn replayed) on ``--tasks`` tasks of the generated task list (24, the default
size, or fewer for a quick look). Stages: protocol, policy, freeze, games, collect, replay,
signals, audit, calibration, the ledger (regenerated twice in fresh processes) and the report (the
training arms are ``arms_bench.py``). ProVer's proposer table (judge, random and oracle proposers
on the same groups, same verification seeds) is computed in the signals stage: the template's
``prover`` signal gets ``compare: [random, oracle]``, so its rows are in the run's diagnostics and
its figures are ledger entries (``prover.prover.<proposer>.*``).

Writes ``--out`` (default ``benchmarks/results/alfworld_audit_bench.json``; no wall-clock time in
it besides the ``seconds`` of each stage this invocation ran) and prints the figures; with
``--keep DIR`` also copies the run's audit summary, statistics, figures, ledger and report there,
and every raw artifact the ledger was computed from (``docs/results.md`` is generated from that
ledger, and CI recomputes the ledger from those artifacts). The committed default-size run::

    python benchmarks/alfworld_audit_bench.py --tasks 24 --run benchmarks/.alfworld-audit-run-24 \
        --out benchmarks/results/alfworld_audit_bench_24.json --keep benchmarks/results/alfworld_audit_24

The run directory resumes (``seconds`` then covers only the stages the last invocation ran).

    python benchmarks/alfworld_audit_bench.py [--run DIR] [--tasks N] [--policy DIR] [--out F] [--keep DIR]

``--policy`` copies an already built default policy (``creditaudit policy build`` output with
the default recipe) instead of installing the shipped one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from creditaudit.papers import paper_values

ROOT = Path(__file__).resolve().parent

#: The papers' figures, beside which the run's are printed (typed once, in creditaudit/papers.yaml).
PAPER = {name.removeprefix("paper."): v.value for name, v in sorted(paper_values().items())
         if name.split(".")[1] in ("measurability", "audit_rho", "fluency", "vict", "prover")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / ".alfworld-audit-run")
    parser.add_argument("--tasks", type=int, default=6, help="tasks collected (G = 8 rollouts each)")
    parser.add_argument("--policy", type=Path, default=None, help="an already built default policy to copy")
    parser.add_argument("--proposers", default="judge,random,oracle")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "alfworld_audit_bench.json")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the run's audit summary, statistics, figures, ledger and report here")
    args = parser.parse_args(argv)

    from creditaudit.demo import run_demo

    import yaml

    from creditaudit.protocol.io import default_template_text

    proposers = [p.strip() for p in args.proposers.split(",") if p.strip()]
    signals = yaml.safe_load(default_template_text())["signals"]
    for signal in signals:
        if signal["family"] == "prover":
            signal["args"]["compare"] = [p for p in proposers if p != signal["args"].get("proposer", "judge")]
    overrides = {"collection": {"n_tasks": args.tasks}, "signals": signals}
    t0 = time.perf_counter()
    report = run_demo(args.run, overrides=overrides, through="report", policy_source=args.policy,
                      held_out_games=24)
    pipeline_s = time.perf_counter() - t0

    import pandas as pd

    run = args.run
    signals = json.loads((run / "signals" / "summary.json").read_text())
    table = pd.DataFrame(signals["families"]["prover"].get("proposer_table") or [])
    audit = json.loads((run / "audit" / "audit.json").read_text())
    families = {}
    for name, entry in signals["families"].items():
        families[name] = {k: v for k, v in entry.items()
                          if k in ("family", "abstention_share", "n_abstained", "abstention_reasons", "n_turns")}
    figures = {
        "benchmark": "alfworld_audit_bench",
        "protocol_id": report["protocol_id"],
        "tasks": args.tasks,
        "policy_held_out": report["policy"],
        "collect": report["collect"],
        "replay": report["replay"],
        "measurability": report["measurability"],
        "signals": {"families": families, "prover": signals["families"].get("prover"),
                    "vict": signals["families"].get("vict"), "router": signals.get("router")},
        "prover_proposers": table.to_dict(orient="records"),
        "verdicts": report["verdicts"],
        "audit": {k: audit[k] for k in ("subjects", "decisions", "holm", "fluency", "exclusions") if k in audit},
        "calibration": {k: report["calibration"].get(k) for k in ("recovered", "of", "ok")},
        "ledger": {"entries": report["ledger"]["entries"], "sha256": report["ledger"]["sha256"],
                   "identical_runs": report["ledger"].get("identical_runs")},
        "paper": PAPER,
        "seconds": {"pipeline": round(pipeline_s, 1), "stages": report["seconds"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    if args.keep is not None:
        keep(run, args.keep)

    m = report["measurability"]
    fmt = (lambda v: "undefined" if v is None else f"{v:.3f}")
    print(f"collected {report['collect']['n_trajectories']} trajectories: success {fmt(report['collect']['success_rate'])}")
    print(f"replay: {report['replay'].get('n_rollouts')} rollouts, divergences {report['replay'].get('prefix_divergences')}")
    print(f"measurability: pivotal {fmt(m['share_pivotal'])} / sigma_floor=0 {fmt(m['share_sigma_floor_zero'])} / "
          f"no counterfactual {fmt(m['share_no_counterfactual'])}  (paper 0.305 / 0.860 / 0.131)")
    for name, entry in families.items():
        print(f"  {name:12s} abstention {fmt(entry.get('abstention_share'))}")
    print(table.to_string(index=False))
    for sentence in report["verdicts"].values():
        print(sentence)
    print(f"wrote {args.out}")
    return 0


#: What ``--keep`` copies from the run directory (the ledger holds every reported number).
KEPT = ("audit/summary.md", "audit/statistics.parquet", "audit/figures", "report/report.md", "report/figures")


def keep(run: Path, out: Path) -> None:
    """Copy the ledger with every raw artifact it was computed from
    (:func:`~creditaudit.ledger.build.keep_ledger_inputs`) and :data:`KEPT` from ``run`` into
    ``out``, replacing what an earlier run left there."""
    import shutil

    from creditaudit.ledger.build import keep_ledger_inputs

    keep_ledger_inputs(run, out)
    for rel in KEPT:
        source, target = run / rel, out / rel
        if target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)


if __name__ == "__main__":
    raise SystemExit(main())
