"""How often does VICT correct an action? Its nonzero-correction share on the shipped default policy.

    python benchmarks/vict_bench.py --tasks 8 --group 8   # the committed results/vict_bench.json

Workload: the default template's VICT (and its base advantage, GRPO) on ``--tasks`` generated
ALFWorld tasks x ``--group`` rollouts of the shipped default policy at the protocol's horizon of 50
(the policy wins about half its episodes, so most task groups hold both wins and losses). Stages:
protocol, the shipped policy, freeze, games, collect, signals (no replay: VICT reads the collected
trajectories and re-executes them on the engine). Resumable (the run directory is kept).

Writes ``benchmarks/results/vict_bench.json`` and prints: the share of actions and of trajectories
with a nonzero correction beside the paper's (11.7%-18.6% of actions; 49.5%-61.8% of
trajectories), VICT's own report (proof coverage, abstention by reason, core sizes), and where the
corrections go to zero: per group by its number of wins, the trajectories whose core atoms have a
gated proof edge but whose normalised margins are all zero (the majority side of a mixed group, and
every rollout of an all-equal one).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent


def _prepare(run: Path, tasks: int, group: int) -> Path:
    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.demo import demo_protocol_text
    from creditaudit.protocol.lock import freeze, lock_path_for
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, generate_keypair, load_signer
    from creditaudit.replay.policies.default.shipped import install_built_policy
    from creditaudit.protocol.io import load_protocol

    run.mkdir(parents=True, exist_ok=True)
    protocol_path = run / "protocol.yaml"
    if not lock_path_for(protocol_path).exists():
        overrides = {"environment": {"generator": {"games_per_type": max(1, -(-tasks // 6))}},
                     "collection": {"n_tasks": tasks, "group_size": group},
                     "signals": [{"name": "grpo", "family": "grpo"}, {"name": "vict", "family": "vict"}],
                     "controls": [{"name": "random", "kind": "random", "null_control": True},
                                  {"name": "uniform", "kind": "uniform", "null_control": True},
                                  {"name": "shuffle-grpo", "kind": "shuffle", "of": "grpo"},
                                  {"name": "shuffle-vict", "kind": "shuffle", "of": "vict"}],
                     "router": None}
        text = demo_protocol_text(overrides)
        protocol_path.write_text(text, "utf-8")
        protocol = load_protocol(protocol_path)
        if not (run / "policy").exists():
            install_built_policy(run / "policy", protocol.policy.build)
        protocol_path.write_text(pin_policy_text(protocol_path.read_text("utf-8"), run / "policy"), "utf-8")
        if not (run / "keys" / PRIVATE_KEY_NAME).exists():
            generate_keypair(run / "keys")
        freeze(protocol_path, load_signer(run / "keys" / PRIVATE_KEY_NAME))
    return protocol_path


def zero_structure(diag: pd.DataFrame) -> pd.DataFrame:
    """Per trajectory: its group's wins, whether it abstained, had gated edges, had a nonzero correction."""
    per = diag.groupby("trajectory_id").agg(
        q=("q", "first"), reason=("reason", "first"),
        gated=("gated_edges", lambda s: any(len(x) > 0 for x in s if x is not None)),
        nonzero=("correction", lambda s: bool((np.asarray(s) != 0).any())),
        n_nonzero=("correction", lambda s: int((np.asarray(s) != 0).sum())), turns=("turn", "size"))
    return per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / ".vict-run")
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "vict_bench.json")
    args = parser.parse_args(argv)

    from creditaudit.papers import paper_values
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, load_signer
    from creditaudit.replay.collect import collect, read_trajectories
    from creditaudit.replay.tasks import prepare_tasks
    from creditaudit.signals.stage import run_signals

    t0 = time.perf_counter()
    protocol_path = _prepare(args.run, args.tasks, args.group)
    signer = load_signer(args.run / "keys" / PRIVATE_KEY_NAME)
    frozen = require_frozen(protocol_path)
    prepare_tasks(frozen, signer)
    summary = collect(protocol_path, signer)
    if not (args.run / "signals" / "summary.json").exists():
        run_signals(protocol_path, signer)
    seconds = time.perf_counter() - t0

    trajectories = read_trajectories(frozen).to_pandas()
    outcomes = trajectories.groupby("trajectory_id").agg(task_id=("task_id", "first"), outcome=("outcome", "first"))
    diag = pd.read_parquet(args.run / "signals" / "diagnostics" / "vict.parquet")
    per = zero_structure(diag).join(outcomes)
    wins = per.groupby("task_id")["outcome"].transform("sum")
    per["group_wins"] = wins
    per["minority"] = np.where(per["outcome"] == 1, wins < args.group - wins, wins > args.group - wins)
    supported = per[per["reason"].isna() & per["gated"]]
    report = json.loads((args.run / "signals" / "summary.json").read_text())["families"]["vict"]
    paper = {k: v.text for k, v in paper_values().items() if k.startswith("paper.vict.")}
    by_wins = (per.groupby("group_wins").agg(trajectories=("outcome", "size"), nonzero=("nonzero", "sum"),
                                             abstained=("reason", lambda s: int(s.notna().sum())))
               .reset_index().to_dict(orient="records"))
    figures = {
        "benchmark": "vict_bench",
        "protocol_id": frozen.id,
        "tasks": args.tasks, "group_size": args.group, "horizon": frozen.protocol.environment.horizon,
        "trajectories": int(len(per)), "success_rate": float(per["outcome"].mean()), "actions": int(len(diag)),
        "share_actions_nonzero": float((diag["correction"] != 0).mean()),
        "share_trajectories_nonzero": float(per["nonzero"].mean()),
        "nonzero_actions_per_corrected_trajectory": (float(per.loc[per["nonzero"], "n_nonzero"].mean())
                                                      if per["nonzero"].any() else None),
        "supported_trajectories": int(len(supported)),
        "supported_zeroed": int((~supported["nonzero"]).sum()),
        "supported_zeroed_majority_side": int(((~supported["nonzero"]) & ~supported["minority"]).sum()),
        "supported_nonzero_minority_side": int((supported["nonzero"] & supported["minority"]).sum()),
        "by_group_wins": by_wins,
        "vict_report": {k: v for k, v in report.items() if not isinstance(v, list) or len(v) < 50},
        "paper": paper,
        "seconds": round(seconds, 1),
        "collect": summary.to_dict() if hasattr(summary, "to_dict") else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    pct = (lambda v: "undefined" if v is None else f"{100 * v:.1f}%")
    print(f"{figures['trajectories']} trajectories ({args.tasks} tasks x {args.group}), success "
          f"{pct(figures['success_rate'])}, {figures['actions']} actions")
    print(f"nonzero VICT correction: {pct(figures['share_actions_nonzero'])} of actions "
          f"(paper {paper.get('paper.vict.nonzero_actions')}), {pct(figures['share_trajectories_nonzero'])} of "
          f"trajectories")
    print(f"trajectories with a core and a gated proof edge: {figures['supported_trajectories']}; zeroed by the "
          f"within-group normalisation: {figures['supported_zeroed']} ({figures['supported_zeroed_majority_side']} "
          f"on their group's majority side); nonzero on the minority side: {figures['supported_nonzero_minority_side']}")
    for row in by_wins:
        print(f"  groups with {row['group_wins']} wins: {row['trajectories']} trajectories, {row['nonzero']} corrected, "
              f"{row['abstained']} abstained")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
