"""The embedded judge model against its labels on held-out games.

Regenerate (about 20 minutes on 2 cores; games are kept in ``--games-dir`` and reused,
the labelled transcripts in ``--transcripts``)::

    PYTHONPATH=. python benchmarks/judge_bench.py --games 18 --games-dir benchmarks/.judge-games \
        --transcripts benchmarks/.judge-games/bench-transcripts.json

Workload: ``--games`` generated ALFWorld games from the judge build's held-out stream
(``judge/held-out-games`` of the shipped model's seed: never trained on), ``passes`` noisy-expert
transcripts each (the build's noise rates and horizon) and ``policy_rollouts`` of the shipped
default policy's (:func:`~creditaudit.signals.families.judge_build.judge_transcripts`, stream
purpose ``bench``), labelled by the planner-progress rule of
:mod:`creditaudit.signals.families.judge_data`. The judge (``--model``, default the shipped
``model: embedded``) reads each transcript through :class:`~creditaudit.signals.families.judge.LocalJudge`
exactly as the judge family does, and :func:`~creditaudit.signals.families.judge_eval.judge_metrics`
compares: exact agreement and Cohen's kappa (95% CI) beside the majority-class floor, accuracy
(recall) and precision per class, the confusion table, the abstention rate, and per-trajectory
variance -- the share of trajectories whose turns all get one score, beside the labels' own share.
The same on every transcript cut after a random turn (a game that ran out of steps there) shows
how it reads failed, shorter transcripts, and on the default policy's transcripts alone (what the
demo's audit asks it about).

Writes ``benchmarks/results/judge_bench.json`` (no wall-clock time in it besides ``seconds``) and
prints the figures.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=24, help="Held-out games (6 task types round-robin).")
    parser.add_argument("--games-dir", type=Path, default=ROOT / ".judge-games")
    parser.add_argument("--model", type=Path, default=None, help="Judge model directory (default: the shipped one).")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "judge_bench.json")
    parser.add_argument("--transcripts", type=Path, default=None,
                        help="Labelled transcripts as JSON: read when the file exists, else written after the rollouts.")
    parser.add_argument("--rollouts-only", action="store_true", help="Stop after writing --transcripts.")
    args = parser.parse_args(argv)

    from creditaudit.protocol import seeds as seed_streams
    from creditaudit.replay.policies.default.build import Deterministic
    from creditaudit.replay.policies.default.evaluation import task_of
    from creditaudit.signals.families.judge_build import (
        JUDGE_MODEL_DIR,
        JUDGE_RECORD,
        JudgeBuild,
        judge_games,
        judge_transcripts,
        truncated,
    )
    from creditaudit.signals.families.judge_data import (
        POLICY_PLAYED,
        judge_stream_root,
        labelled_from_dict,
        labelled_to_dict,
    )
    from creditaudit.signals.families.judge_eval import judge_metrics, load_judge

    model_dir = args.model or JUDGE_MODEL_DIR
    if (model_dir / JUDGE_RECORD).is_file():
        record = json.loads((model_dir / JUDGE_RECORD).read_text())
        build = JudgeBuild(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["build"].items()})
    else:  # rollouts before the model exists: the default build's settings
        record, build = {"build": None}, JudgeBuild()
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if args.transcripts is not None and args.transcripts.is_file():
        labelled = [labelled_from_dict(d) for d in json.loads(args.transcripts.read_text())]
    else:
        games = judge_games(args.games_dir, args.games, seed=build.seed, purpose="held-out-games",
                            workers=args.workers)
        with Deterministic(2):
            labelled = judge_transcripts([task_of(g) for g in games], build, purpose="bench", workers=args.workers)
        if args.transcripts is not None:
            args.transcripts.parent.mkdir(parents=True, exist_ok=True)
            args.transcripts.write_text(json.dumps([labelled_to_dict(lt) for lt in labelled]), encoding="utf-8")
    if args.rollouts_only:
        return 0
    seconds["games_and_rollouts"] = time.perf_counter() - t0
    trained_on = set(record.get("train_tasks", []))
    leaked = sorted({lt.trajectory.task_id for lt in labelled} & trained_on)
    rng = seed_streams.rng(judge_stream_root(build.seed), "judge/bench/cut")
    cut = [truncated(lt, int(rng.integers(2, len(lt.labels)))) for lt in labelled if len(lt.labels) > 2]

    t0 = time.perf_counter()
    judge = load_judge(model_dir)
    with Deterministic(1):
        full = judge_metrics(judge, labelled)
        seconds["judge_full"] = time.perf_counter() - t0
        short = judge_metrics(judge, cut)
        played = judge_metrics(judge, [lt for lt in labelled if lt.noise_rate == POLICY_PLAYED])
    seconds["judge_total"] = time.perf_counter() - t0
    result = {
        "judge_id": judge.judge_id,
        "judge_model_sha256": judge.model_sha256,
        "build": record["build"],
        "games": args.games,
        "transcripts": len(labelled),
        "won": sum(lt.trajectory.won for lt in labelled),
        "turns_per_transcript": {"mean": sum(len(lt.labels) for lt in labelled) / len(labelled),
                                 "max": max(len(lt.labels) for lt in labelled)},
        "held_out_games_also_trained_on": leaked,
        "full_transcripts": full,
        "cut_transcripts": short,
        "policy_transcripts": played,
        "seconds": seconds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for name, m in (("full transcripts", full), ("cut transcripts", short), ("the default policy's transcripts", played)):
        ci = m["kappa_ci"] or [float("nan")] * 2
        print(f"{name}: {m['n_trajectories']} trajectories, {m['n_turns']} turns; agreement {m['agreement']:.3f} "
              f"(majority {m['majority_agreement']:.3f}); kappa {m['kappa'] if m['kappa'] is not None else float('nan'):.3f} "
              f"[{ci[0]:.3f}, {ci[1]:.3f}]; abstention {m['abstention_rate']:.3f}; constant trajectories "
              f"{m['constant_share']:.3f} (labels {m['label_constant_share']:.3f})")
        print("  per class: " + ", ".join(
            f"{c}: n={v['n']} acc={v['accuracy'] if v['accuracy'] is not None else float('nan'):.3f} "
            f"prec={v['precision'] if v['precision'] is not None else float('nan'):.3f}" for c, v in m["per_class"].items()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
