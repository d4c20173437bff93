"""What the demo's preregistered turn sample changes against full replay, on one run analysed twice.

Regenerate (about 20 minutes on 2 cores; keep the machine otherwise idle; resumable)::

    python benchmarks/turn_sample_bench.py

The demo replays 10 turns per trajectory (``replay.turns_per_trajectory``), drawn from the stream
``replay/<trajectory>/sample``. To see what that costs in statistics, this runs the demo's protocol
with **every** turn replayed (``turns_per_trajectory`` unset; same tasks, policy, judge, budgets
and gates) through the audit, then audits that one run twice with :func:`audit_tables`:

* **full** — every replayed turn;
* **sampled** — only the turns the preregistered rule draws for each trajectory from this run's own
  sample streams (:func:`creditaudit.replay.engine.sampled_turns`); every other complete turn gets
  status ``not_sampled``, exactly as a sampled replay writes it. Every sampled turn's rollouts are
  the full run's, so the two analyses differ by the sample alone.

It then redraws the sample ``--redraws`` times from other named streams (``bench/turn-sample/<r>``)
to show how much one draw moves each family's estimate. Written to
``benchmarks/results/turn_sample_bench.json`` and printed: per family and control, the rank
fidelity with its interval, the trajectories and pivotal turns the gate counts, and the verdict,
under both analyses; the replay cost (engine steps of the rollouts) each needs; the spread of the
estimate and the verdicts across redraws.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

SAMPLE = 10  # the demo's turns per trajectory (DEMO_OVERRIDES)


def _full_overrides() -> dict[str, Any]:
    from creditaudit.demo import DEMO_OVERRIDES

    out = json.loads(json.dumps(DEMO_OVERRIDES))
    assert out["replay"]["turns_per_trajectory"] == SAMPLE, "the demo's sample size changed; update SAMPLE"
    out["replay"] = dict(out["replay"], turns_per_trajectory=None)
    return out


def _mask(replay, streams, k: int):
    """The replay table as a sampled replay would have written it (status ``not_sampled`` outside the sample)."""
    import pandas as pd

    from creditaudit.replay.engine import sampled_turns

    replay = replay.copy()
    lengths = replay.groupby("trajectory_id").turn.size()
    keep = set()
    for traj, n in lengths.items():
        chosen = sampled_turns(streams, traj, int(n), k)
        keep |= {(traj, t) for t in (range(int(n)) if chosen is None else chosen)}
    inside = pd.Series([(t, u) in keep for t, u in zip(replay.trajectory_id, replay.turn)], index=replay.index)
    out_of_sample = ~inside & (replay.status == "complete")
    replay.loc[out_of_sample, "status"] = "not_sampled"
    return replay, keep


def _row(result, name: str) -> dict[str, Any]:
    s = result.subjects[name]
    d = result.decisions.get(name)
    r = lambda x: None if x is None else round(float(x), 4)  # noqa: E731
    return {
        "estimate": r(s.estimate), "ci_low": r(s.ci_low), "ci_high": r(s.ci_high),
        "n_trajectories": s.n_trajectories, "n_included_turns": s.n_included_turns,
        "n_pivotal_turns": s.n_pivotal_turns, "verdict": None if d is None else d.verdict,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=ROOT / ".turn-sample-run")
    parser.add_argument("--redraws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "turn_sample_bench.json")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from creditaudit.audit.core import audit_tables
    from creditaudit.audit.stage import read_credit
    from creditaudit.demo import run_demo
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.seeds import SeedStreams
    from creditaudit.replay.collect import read_trajectories
    from creditaudit.replay.stage import ROLLOUTS, read_replay

    fresh = not (args.run / "audit" / "audit.json").exists()
    t0 = time.perf_counter()
    run_demo(args.run, quiet=False, overrides=_full_overrides(), through="audit")
    run_seconds = time.perf_counter() - t0

    frozen = require_frozen(args.run / "protocol.yaml")
    protocol = frozen.protocol
    credit = read_credit(frozen)
    replay = read_replay(frozen)[0].to_pandas()
    fluency = (read_trajectories(frozen).select(["trajectory_id", "turn", "mean_logprob"]).to_pandas()
               .rename(columns={"mean_logprob": "fluency"}))
    rollouts = pq.read_table(args.run / ROLLOUTS, columns=["trajectory_id", "turn", "steps"]).to_pandas()

    def audit(table):
        return audit_tables(credit, table, protocol=protocol, protocol_id=frozen.id, fluency=fluency)

    full = audit(replay)
    masked, keep = _mask(replay, SeedStreams(frozen.id), SAMPLE)
    sampled = audit(masked)
    in_sample = [(t, u) in keep for t, u in zip(rollouts.trajectory_id, rollouts.turn)]
    steps_all = int(rollouts.steps.sum())
    steps_sampled = int(rollouts.steps[in_sample].sum())

    names = [s.name for s in protocol.signals] + [c.name for c in protocol.controls]
    redraws: dict[str, list] = {n: [] for n in names}
    verdicts: dict[str, list] = {s.name: [] for s in protocol.signals}
    for r in range(args.redraws):
        other = audit(_mask(replay, _Renamed(frozen.id, f"bench/turn-sample/{r}"), SAMPLE)[0])
        for n in names:
            redraws[n].append(other.subjects[n].estimate)
        for n in verdicts:
            verdicts[n].append(other.decisions[n].verdict)
        print(f"redraw {r + 1}/{args.redraws}", file=sys.stderr)

    def spread(values: list) -> dict[str, Any]:
        v = sorted(float(x) for x in values if x is not None)
        if not v:
            return {"n": 0}
        return {"n": len(v), "median": round(statistics.median(v), 4), "min": round(v[0], 4),
                "max": round(v[-1], 4), "sd": round(statistics.pstdev(v), 4)}

    document = {
        "command": "python benchmarks/turn_sample_bench.py",
        "protocol": "the demo's (creditaudit.demo.DEMO_OVERRIDES) with replay.turns_per_trajectory unset",
        "sample": f"{SAMPLE} turns per trajectory from replay/<trajectory>/sample (the demo's rule)",
        "trajectories": int(replay.trajectory_id.nunique()),
        "turns": {"all": int(len(replay)), "complete": int((replay.status == "complete").sum()),
                  "sampled_complete": int((masked.status == "complete").sum())},
        "replay_engine_steps": {"full": steps_all, "sampled": steps_sampled,
                                "ratio_full_to_sampled": round(steps_all / max(steps_sampled, 1), 2)},
        "full_run_seconds": round(run_seconds, 1) if fresh else None,
        "subjects": {n: {"full": _row(full, n), "sampled": _row(sampled, n),
                         "redraws": spread(redraws[n]),
                         **({"redraw_verdicts": {v: verdicts[n].count(v) for v in sorted(set(verdicts[n]))}}
                            if n in verdicts else {})}
                     for n in names},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n", "utf-8")

    print(f"{document['trajectories']} trajectories, {document['turns']['complete']} complete turns "
          f"(sampled: {document['turns']['sampled_complete']}); replay engine steps full {steps_all:,} "
          f"vs sampled {steps_sampled:,} ({document['replay_engine_steps']['ratio_full_to_sampled']}x)")
    for n in names:
        row = document["subjects"][n]
        parts = []
        for which in ("full", "sampled"):
            x = row[which]
            est = "undefined" if x["estimate"] is None else f"{x['estimate']:+.3f} [{x['ci_low']:+.3f}, {x['ci_high']:+.3f}]"
            parts.append(f"{which} {est} /{x['n_trajectories']} traj, {x['n_pivotal_turns']} pivotal"
                         + (f", {x['verdict']}" if x["verdict"] else ""))
        sp = row["redraws"]
        extra = f"; redraws median {sp['median']:+.3f} sd {sp['sd']:.3f}" if sp.get("n") else ""
        if "redraw_verdicts" in row:
            extra += f" verdicts {row['redraw_verdicts']}"
        print(f"{n:20s} " + " | ".join(parts) + extra)
    print(f"wrote {args.out.relative_to(ROOT.parent) if args.out.is_relative_to(ROOT.parent) else args.out}")
    return 0


class _Renamed:
    """Seed streams whose ``replay/<trajectory>/sample`` stream is renamed (a redraw of the sample)."""

    def __init__(self, protocol_id: str, prefix: str):
        from creditaudit.protocol.seeds import SeedStreams

        self._streams, self._prefix = SeedStreams(protocol_id), prefix

    def rng(self, name: str):
        return self._streams.rng(f"{self._prefix}/{name}")


if __name__ == "__main__":
    raise SystemExit(main())
