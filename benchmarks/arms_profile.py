"""Where the training arms' time goes on real ALFWorld: cProfile of one ``creditaudit arms`` stage.

Workload: the dose-matched run of ``benchmarks/arms_alfworld_bench.py`` (the slower of its two
configurations: 7 arms x 2 seeds x 4 rounds of 4 tasks x 8 rollouts, horizon 20, the shipped
policy, LoRA rank 8), its arms stage rerun from scratch under ``cProfile`` with one torch thread,
as the bench runs each configuration. The games, collection and signals are copied from the bench's
run directory (build it first with ``python benchmarks/arms_alfworld_bench.py``); the profiled
copy lives in ``benchmarks/.arms-alfworld-run-profile`` (git-ignored) and is deleted first.

Reports the stage's total, the cumulative seconds of the arms' own parts (rounds, the
pivotal-masked arm's replay, the other families' credit, probes, evaluation, the policy's candidate
scoring, the environment's step and TextWorld's feedback text) and the top functions by self time.
Profiler overhead inflates Python-heavy code, so read shares, not seconds. Writes
``benchmarks/results/arms_profile.json`` (function names relative to the package or
``site-packages``; no machine path)::

    python benchmarks/arms_profile.py

The table is assembled here from ``pstats``: no kept library writes a profile as JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
SOURCE = ROOT / ".arms-alfworld-run-dose-matched"
SCRATCH = ROOT / ".arms-alfworld-run-profile"
RESULTS = ROOT / "results" / "arms_profile.json"

#: The parts reported by cumulative time: (label, function name, path suffix).
PARTS: tuple[tuple[str, str, str], ...] = (
    ("arms stage", "run_arms", "creditaudit/training_arms/stage.py"),
    ("training rounds", "run_round", "creditaudit/training_arms/loop.py"),
    ("credit of the trained families", "_family_credit", "creditaudit/training_arms/loop.py"),
    ("pivotal-masked arm's replay", "_pivotal", "creditaudit/training_arms/loop.py"),
    ("probes", "probe_distribution", "creditaudit/training_arms/loop.py"),
    ("evaluation of the checkpoints", "evaluate_checkpoints", "creditaudit/training_arms/evaluate.py"),
    ("policy: candidate scoring", "score_candidates", "creditaudit/replay/policies/hf_candidates.py"),
    ("environment: step", "step", "creditaudit/replay/envs/alfworld/env.py"),
    ("textworld: feedback text (textgen.derive)", "derive", "textworld/envs/pddl/textgen/__init__.py"),
    ("backward", "backward", "torch/autograd/__init__.py"),
)


def _where(path: str) -> str:
    """A profile entry's file with no machine path: under the repository, under site-packages, or stdlib."""
    if path == "~":
        return "builtin"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    try:
        return Path(path).resolve().relative_to(REPO).as_posix()
    except ValueError:
        return "stdlib/" + Path(path).name


def _copy_inputs(source: Path, scratch: Path) -> None:
    """The bench's run up to its signals stage: everything but the arms stage, its link and the ledger."""
    links = source / "links"
    if not any(p.name.endswith("-signals.link.json") for p in links.glob("*.link.json")):
        sys.exit(f"arms_profile: {source} has no signals stage; run `python benchmarks/arms_alfworld_bench.py` "
                 "first (it builds this run directory)")
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    for item in source.iterdir():
        if item.name in {"arms", "ledger", "links"}:
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, scratch / item.name)
    (scratch / "links").mkdir()
    for link in sorted(links.glob("*.link.json")):
        if link.name.endswith(("-arms.link.json", "-ledger.link.json")):
            continue
        shutil.copy2(link, scratch / "links" / link.name)


def figures(stats: pstats.Stats, top: int) -> dict[str, Any]:
    rows = [(_where(path), line, name, calls, self_s, cum_s)
            for (path, line, name), (_, calls, self_s, cum_s, _) in stats.stats.items()]  # type: ignore[attr-defined]
    parts = {}
    for label, name, suffix in PARTS:
        hits = [r for r in rows if r[2] == name and r[0].endswith(suffix)]
        if hits:
            parts[label] = {"calls": sum(r[3] for r in hits), "cumulative_s": round(max(r[5] for r in hits), 1)}
    by_self = sorted(rows, key=lambda r: -r[4])[:top]
    return {
        "profiled_s": round(stats.total_tt, 1),  # type: ignore[attr-defined]
        "parts": parts,
        "top_self_time": [{"function": f"{w}:{line}({name})" if w != "builtin" else name, "calls": calls,
                           "self_s": round(self_s, 1), "cumulative_s": round(cum_s, 1)}
                          for w, line, name, calls, self_s, cum_s in by_self],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="the bench's dose-matched run directory")
    parser.add_argument("--scratch", type=Path, default=SCRATCH, help="profiled copy (deleted first)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--top", type=int, default=20, help="functions listed by self time")
    args = parser.parse_args(argv)

    import torch

    from creditaudit.protocol.io import load_protocol
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, load_signer
    from creditaudit.training_arms.stage import run_arms

    torch.set_num_threads(1)
    _copy_inputs(args.source, args.scratch)
    path = args.scratch / "protocol.yaml"
    signer = load_signer(args.scratch / "keys" / PRIVATE_KEY_NAME)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(run_arms, path, signer)
    wall = time.perf_counter() - start
    protocol = load_protocol(path)
    doc = {
        "benchmark": "arms_profile",
        "command": "python benchmarks/arms_profile.py",
        "workload": {"protocol_id": protocol.id, "arms": len(protocol.arms.arms), "seeds": protocol.arms.seeds,
                     "rounds": protocol.arms.rounds, "tasks_per_round": protocol.arms.tasks_per_round,
                     "group_size": protocol.arms.group_size, "dose_matched": protocol.arms.dose_matched,
                     "horizon": protocol.environment.horizon, "torch_threads": 1},
        "seconds": {"wall_under_profiler": round(wall, 1)},
        **figures(pstats.Stats(profiler), args.top),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    print(f"arms stage under cProfile: {wall:.0f} s ({doc['workload']})")
    for label, part in doc["parts"].items():
        print(f"  {label:45s} {part['cumulative_s']:8.1f} s cumulative  {part['calls']:>9} calls")
    print("top self time:")
    for row in doc["top_self_time"]:
        print(f"  {row['self_s']:8.1f} s  {row['function']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
