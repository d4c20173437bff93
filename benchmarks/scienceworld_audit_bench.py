"""A small audit on ScienceWorld, end to end on a CPU: a policy behaviour-cloned on the engine's gold
paths, then pin, freeze, collect, replay (prefix replay), signals, audit, ledger regenerate and verify.

    python benchmarks/scienceworld_audit_bench.py [--run DIR] [--tasks N] [--out FILE]

Policy: :func:`creditaudit.replay.policies.cloned.clone_expert_policy` on 60 gold episodes of
``find-non-living-thing`` (train split, seed 5; history 1, the admissible list left out of the
prompt: ``policy.list_admissible: false``), trained on one thread. Protocol: the default template
with the ScienceWorld environment (that task, train split, horizon 12), ``--tasks`` tasks x 2
rollouts, K = 2 alternatives, 4 sampled turns per trajectory, the confidence, GRPO and GiGPO
families with their controls. The run directory resumes (every stage skips what is done).

Writes ``benchmarks/results/scienceworld_audit_bench.json`` (seconds per stage run by this
invocation; no wall-clock time otherwise) and prints it: the policy's training figures, collection, replay and its
prefix-replay cost, the measurability map, the verdicts and ``ledger verify``'s exit code.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent
TASKS = ["find-non-living-thing"]
FAMILIES = ("confidence", "grpo", "gigpo")


def _protocol_text(n_tasks: int) -> str:
    from creditaudit.protocol.io import default_template_text

    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "scienceworld", "source": "generated", "horizon": 12,
                           "args": {"tasks": TASKS, "split": "train"}}
    data["collection"] = {"n_tasks": n_tasks, "group_size": 2, "determinism_instances": 2}
    data["policy"].update(source="local", path="policy", history_length=1, max_action_tokens=12, temperature=0.7,
                          list_admissible=False)
    data["signals"] = [{"name": f, "family": f} for f in FAMILIES]
    data["controls"] = ([{"name": "random", "kind": "random", "null_control": True},
                         {"name": "uniform", "kind": "uniform", "null_control": True}]
                        + [{"name": f"shuffle-{f}", "kind": "shuffle", "of": f} for f in FAMILIES])
    data["router"] = None
    data["replay"].update(n_fact=3, n_alternatives=2, n_alt=3, turns_per_trajectory=4)
    data["statistics"]["bootstrap_iterations"] = 500
    return yaml.safe_dump(data, sort_keys=False)


def _stage(args: list[str]) -> int:
    from creditaudit.cli import main

    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / ".scienceworld-audit-run")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "scienceworld_audit_bench.json")
    args = parser.parse_args(argv)

    from creditaudit import plugins
    from creditaudit.replay.policies.cloned import clone_expert_policy

    run = args.run
    seconds: dict[str, float] = {}
    run.mkdir(parents=True, exist_ok=True)
    policy_record = run / "policy-build.json"
    if not policy_record.exists():
        t = time.perf_counter()
        plugin = plugins.get("environment", "scienceworld").create({"tasks": TASKS}, horizon=12)
        shutil.rmtree(run / "policy", ignore_errors=True)
        built = clone_expert_policy(plugin, run / "policy", n_tasks=60, seed=5, history_length=1,
                                    list_admissible=False, epochs=20)
        seconds["policy"] = round(time.perf_counter() - t, 1)
        policy_record.write_text(json.dumps(built, sort_keys=True) + "\n")
    if not (run / "protocol.lock.json").exists():
        (run / "protocol.yaml").write_text(_protocol_text(args.tasks))
        for step in (["protocol", "pin", f"{run}/protocol.yaml"], ["protocol", "keygen", "--out", f"{run}/keys"],
                     ["protocol", "freeze", f"{run}/protocol.yaml"]):
            if _stage(step) != 0:
                raise SystemExit(f"{' '.join(step)} failed")
    codes = {}
    for name in ("collect", "replay", "signals", "audit"):
        t = time.perf_counter()
        codes[name] = _stage([name, "--run", str(run)] + (["--workers", "1"] if name == "replay" else []))
        seconds[name] = round(time.perf_counter() - t, 1)
        if codes[name] != 0:
            break
    codes["ledger_regenerate"] = _stage(["ledger", "regenerate", "--run", str(run)])
    codes["ledger_verify"] = _stage(["ledger", "verify", "--run", str(run)])

    collect = json.loads((run / "collect" / "summary.json").read_text())
    replay = json.loads((run / "replay" / "summary.json").read_text())
    audit = json.loads((run / "audit" / "audit.json").read_text())
    figures = {
        "benchmark": "scienceworld_audit_bench",
        "protocol_id": collect.get("protocol_id"),
        "policy": {"source": "behaviour-cloned on ScienceWorld's gold paths (clone_expert_policy)",
                   **json.loads(policy_record.read_text())},
        "collect": {k: collect.get(k) for k in ("n_tasks", "n_trajectories", "n_turns", "success_rate",
                                                "admissible_rate")},
        "replay": replay,
        "measurability": audit.get("measurability"),
        "decisions": {d["family"]: {"verdict": d["verdict"], "reason": d["reason"]} for d in audit["decisions"]},
        "exit_codes": codes,
        "seconds_this_invocation": seconds,  # a resumed run skips finished stages (about 0 s)
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    print(json.dumps({k: figures[k] for k in ("collect", "measurability", "decisions", "exit_codes", "seconds_this_invocation")},
                     indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
