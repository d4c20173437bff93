"""The embedded judge model: a tiny Qwen2 trained here to score turns the way the TARL judge prompt
asks, shipped in the package (``judge_model/``) and rebuilt from its seed by
:func:`build_judge_model` (``creditaudit judge build``).

It is trained the way the embedded default policy is (:mod:`creditaudit.replay.policies.default`):
the same word-level tokenizer (:func:`build_vocabulary` over the judge prompts), the same network
(:func:`build_model`), the same packed rows (:func:`packed_row`: one shared prefix, several
branches that each attend to the prefix and to themselves), length-bucketed batches, AdamW with
warm-up and linear decay, deterministic kernels at a fixed thread count.

What it reads is exactly what :class:`~creditaudit.signals.families.judge.LocalJudge` scores: the
:func:`~creditaudit.signals.families.judge.judge_prompt` body of a trajectory (task, every turn's
observation and action, the outcome) followed by the turn's cue
(:func:`~creditaudit.signals.families.judge.local_judge_cue`: the turn's action, what followed it,
``score of turn <t>:``), and the choices "1", "0", "-1". One training row is one transcript: its
body once, then one branch per turn (the cue and its label). Labels are the planner-progress labels of :mod:`~.judge_data`; the model never sees them
or any engine state at inference. Object names of a share of the rows are renamed consistently
(:func:`renamer`; turn and instance numbers are kept, they tie the cue to its turn).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from creditaudit.protocol import seeds as seed_streams
from creditaudit.signals.families.judge_data import (
    JUDGE_BUILD_VERSION,
    LabelledTrajectory,
    judge_policy_rollouts,
    judge_rollouts,
    judge_stream_root,
)

__all__ = ["JudgeBuild", "MAX_TURNS", "turn_markers", "JUDGE_MODEL_DIR", "JUDGE_RECORD", "judge_games", "judge_transcripts", "tie_markers",
           "judge_training_rows", "truncated",
           "train_judge", "build_judge_model"]

JUDGE_MODEL_DIR = Path(__file__).resolve().parent / "judge_model"
"""The shipped judge model (``model: embedded``)."""
JUDGE_RECORD = "creditaudit_judge.json"
"""Build record written beside the model (not part of its identity hashes)."""
_CHOICE = {1: "1", 0: "0", -1: "-1"}
MAX_TURNS = 100
"""Turns the judge's turn markers cover (``turn 0`` ... ``turn 99``)."""


def turn_markers(n: int = MAX_TURNS) -> list[str]:
    """Whole-word tokens of the judge's tokenizer: the turn headers of the judge prompt
    (``turn 7``) and the cue's last words (``turn 7:``). With them the cue's last token names its
    turn, and the header it must find is one token: the judge reads the same text, tokenized so
    that a tiny model can tie a cue to its turn by matching two embeddings.

    Examples
    --------
    >>> turn_markers(2)
    ['turn 0', 'turn 1', 'turn 0:', 'turn 1:']
    """
    return [f"turn {i}" for i in range(n)] + [f"turn {i}:" for i in range(n)]


@dataclass(frozen=True)
class JudgeBuild:
    """Settings of a judge build (the shipped model is the defaults')."""

    seed: int = 0
    train_games: int = 36
    held_out_games: int = 12
    passes: int = 2
    policy_rollouts: int = 4
    horizon: int = 50
    noise_rates: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    epochs: int = 15
    learning_rate: float = 6e-3
    batch_size: int = 4
    rename_share: float = 0.5
    prefix_share: float = 0.5
    class_weight_cap: float = 8.0


def judge_games(out_dir: str | Path, n: int, *, seed: int, purpose: str, workers: int = 1) -> list[Any]:
    """``n`` verified generated games (type-interleaved) from stream ``judge/<purpose>`` of the
    judge build seed; games already written there by the same seed are reused."""
    from creditaudit.replay.envs.alfworld.games import TASK_TYPES, generate_games

    per_type = -(-n // len(TASK_TYPES))
    report = generate_games(Path(out_dir) / purpose, games_per_type=per_type,
                            rng=seed_streams.rng(judge_stream_root(seed), f"judge/{purpose}"), workers=workers)
    by_type: dict[str, list[Any]] = {}
    for g in report.games:
        by_type.setdefault(g.task_type, []).append(g)
    return [by_type[t][k] for k in range(per_type) for t in TASK_TYPES if k < len(by_type.get(t, []))][:n]


def judge_transcripts(tasks: Sequence[Any], build: JudgeBuild, *, purpose: str,
                      workers: int = 1) -> list[LabelledTrajectory]:
    """A build's labelled transcripts on ``tasks``: ``build.passes`` noisy-expert episodes per task
    (:func:`~.judge_data.judge_rollouts`), then ``build.policy_rollouts`` of the shipped default
    policy's (:func:`~.judge_data.judge_policy_rollouts`), all at ``build.horizon``."""
    expert = judge_rollouts(tasks, seed=build.seed, purpose=purpose, passes=build.passes, horizon=build.horizon,
                            noise_rates=build.noise_rates, workers=workers)
    played = (judge_policy_rollouts(tasks, seed=build.seed, purpose=purpose, rollouts=build.policy_rollouts,
                                    horizon=build.horizon) if build.policy_rollouts else [])
    return expert + played


def tie_markers(model: Any, tokenizer: Any, n: int = MAX_TURNS) -> None:
    """Start each cue marker's embedding (``turn 7:``) equal to its header's (``turn 7``), so
    that from the first step the cue matches the turn it names."""
    import torch

    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for i in range(n):
            emb[tokenizer.convert_tokens_to_ids(f"turn {i}:")] = emb[tokenizer.convert_tokens_to_ids(f"turn {i}")]


def judge_training_rows(labelled: Sequence[LabelledTrajectory]) -> list[tuple[str, list[tuple[str, str]]]]:
    """``(body, [(cue, choice), ...])`` per transcript: what :class:`LocalJudge` scores, split at
    the body."""
    from creditaudit.signals.families.judge import judge_prompt, local_judge_cue

    return [(judge_prompt(lt.trajectory, max_negative=1),
             [("\n" + local_judge_cue(lt.trajectory, i), _CHOICE[lab]) for i, lab in enumerate(lt.labels)])
            for lt in labelled]


def truncated(lt: LabelledTrajectory, k: int) -> LabelledTrajectory:
    """The transcript's first ``k`` turns as a trajectory of its own that ran out of steps there
    (outcome: not completed, final observation: the k-th turn's feedback), relabelled from its
    own plan lengths. Planner-progress labels of a turn depend only on the states before and
    after it, so only the choice of the -1 can change."""
    from dataclasses import replace

    from creditaudit.signals.families.judge_data import progress_labels

    turns = lt.trajectory.turns[:k]
    traj = replace(lt.trajectory, outcome=int(turns[-1].won), turns=turns)
    lengths = lt.plan_lengths[: k + 1]
    return LabelledTrajectory(traj, tuple(progress_labels(lengths)), tuple(lengths), lt.noise_rate)


def _batch(tokenizer: Any, rows: Sequence[tuple[str, list[tuple[str, str]]]], weights: dict[str, float]):
    """Packed rows (:func:`packed_row`) as tensors: ids, 4-D additive mask, positions, labels
    (choice tokens only; ``<eoa>`` is not scored by the judge) and per-token class weights."""
    import numpy as np
    import torch

    from creditaudit.replay.policies.default.training import packed_row

    packed, row_weights = [], []
    for body, branches in rows:
        row = packed_row(tokenizer, body, branches)
        if row is None:
            raise RuntimeError("a judge prompt tokenizes differently split at its cue; the tokenizer is not word-level")
        ids, pos, branch_of, labels, _ = row
        w = [0.0] * len(ids)
        for k, b in enumerate(branch_of):
            if b >= 0 and labels[k] != -100:
                if labels[k] == tokenizer.eos_token_id:
                    labels[k] = -100
                else:
                    w[k] = weights[branches[b][1]]
        packed.append((ids, pos, branch_of, labels))
        row_weights.append(w)
    width = max(len(r[0]) for r in packed)
    n = len(packed)
    ids = np.full((n, width), tokenizer.pad_token_id, dtype=np.int64)
    positions = np.zeros((n, width), dtype=np.int64)
    labels = np.full((n, width), -100, dtype=np.int64)
    tw = np.zeros((n, width), dtype=np.float32)
    allow = np.zeros((n, width, width), dtype=bool)
    for r, (row_ids, row_pos, branch_of, row_labels) in enumerate(packed):
        m = len(row_ids)
        ids[r, :m], positions[r, :m], labels[r, :m], tw[r, :m] = row_ids, row_pos, row_labels, row_weights[r]
        bo = np.asarray(branch_of)
        allow[r, :m, :m] = np.tri(m, dtype=bool) & ((bo[None, :] == -1) | (bo[None, :] == bo[:, None]))
        allow[r, np.arange(m, width), np.arange(m, width)] = True
    mask = torch.zeros(allow.shape, dtype=torch.float32)
    mask.masked_fill_(torch.from_numpy(~allow), torch.finfo(torch.float32).min)
    return (torch.from_numpy(ids), mask[:, None], torch.from_numpy(positions), torch.from_numpy(labels),
            torch.from_numpy(tw))


def train_judge(model: Any, tokenizer: Any, labelled: Sequence[LabelledTrajectory], *, epochs: int,
                learning_rate: float, rng: Any, batch_size: int = 4, rename_share: float = 0.5,
                prefix_share: float = 0.5,
                class_weight_cap: float = 8.0, weight_decay: float = 0.01,
                progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Train the judge in place: class-weighted cross-entropy on the choice tokens of every turn.

    Class weights are balanced (``n / (3 n_c)``, capped at ``class_weight_cap``) so that the rare
    -1 and +1 are not drowned by the 0s. From the second epoch on a share ``prefix_share`` of
    the transcripts is cut after a random turn (:func:`truncated`: a game that ran out of steps
    there) and a share ``rename_share`` has its object names renamed (:func:`renamer`, numbers
    kept).
    """
    import torch

    from creditaudit.replay.policies.default.augmentation import entity_names, renamer
    from creditaudit.replay.policies.default.training import length_bucketed_batches

    rows = judge_training_rows(labelled)
    counts = {c: sum(b[1] == c for _, br in rows for b in br) for c in _CHOICE.values()}
    total_turns = sum(counts.values())
    weights = {c: min(class_weight_cap, total_turns / (3 * max(1, k))) for c, k in counts.items()}
    names = entity_names()
    lengths = [len(tokenizer(body)["input_ids"]) + 6 * len(br) for body, br in rows]
    steps_per_epoch = -(-len(rows) // batch_size)
    total = steps_per_epoch * epochs
    warmup = max(1, total // 20)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    model.train()
    losses, step = [], 0
    for epoch in range(epochs):
        running, count = 0.0, 0
        for batch_rows in length_bucketed_batches(lengths, batch_size, rng):
            chosen = []
            for i in batch_rows:
                body, branches = rows[i]
                n = len(labelled[i].labels)
                if epoch and n > 2 and rng.random() < prefix_share:
                    body, branches = judge_training_rows([truncated(labelled[i], int(rng.integers(2, n)))])[0]
                if epoch and rng.random() < rename_share:
                    rename = renamer(body, rng, names, 0)
                    body, branches = rename(body), [(rename(cue), choice) for cue, choice in branches]
                chosen.append((body, branches))
            ids, mask, positions, labels, tw = _batch(tokenizer, chosen, weights)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                    labels[:, 1:].reshape(-1), ignore_index=-100, reduction="none")
            w = tw[:, 1:].reshape(-1)
            loss = (nll * w).sum() / w.sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += float(loss.detach()) * len(chosen)
            count += len(chosen)
            step += 1
            if progress is not None:
                progress("train", step, total)
        losses.append(running / count)
    model.eval()
    return {"rows": len(rows), "turns": total_turns, "label_counts": counts, "class_weights": weights,
            "steps": total, "epoch_losses": losses}


def build_judge_model(out_dir: str | Path, build: JudgeBuild | None = None, *,
                      train: Sequence[LabelledTrajectory] | None = None,
                      held_out: Sequence[LabelledTrajectory] | None = None, games_dir: str | Path | None = None,
                      threads: int | None = None, workers: int | None = None, evaluate: bool = True,
                      progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Build, save and (optionally) measure the embedded judge model from its seed.

    Streams (root ``creditaudit-judge-build-v<version>:<seed>``): ``judge/train-games``,
    ``judge/held-out-games``, ``judge/noise/<k>``, ``judge/<purpose>/demo/<k>``, ``judge/init``,
    ``judge/order``. Same seed, same thread count and same torch build give byte-identical
    weight files.

    Parameters
    ----------
    out_dir : path
    build : JudgeBuild, optional
    train, held_out : sequence of LabelledTrajectory, optional
        Labelled transcripts to train on / measure on instead of generating them from the seed
        (:func:`judge_games`, :func:`~.judge_data.judge_rollouts`).
    games_dir : path, optional
        Where the games are generated (reused when already there; a temporary directory when None).
    threads, workers : int, optional
        Torch threads (default up to 2) and engine processes (default up to 2).
    evaluate : bool, default True
    progress : callable, optional

    Returns
    -------
    dict
        The build record (also written to :data:`JUDGE_RECORD`): settings, label counts,
        training losses, ``evaluation`` (:func:`~creditaudit.signals.families.judge_eval.judge_metrics`
        on the held-out games) and ``files`` (their SHA-256), plus ``timings_s``.
    """
    import tempfile

    import torch

    from creditaudit.replay.policies.default.build import BUILD_THREADS, DEMO_WORKERS, Deterministic
    from creditaudit.replay.policies.default.evaluation import task_of
    from creditaudit.replay.policies.default.model import build_model
    from creditaudit.replay.policies.default.vocabulary import build_tokenizer, build_vocabulary
    from creditaudit.replay.policies.hf import policy_file_hashes

    build = build or JudgeBuild()
    threads = BUILD_THREADS if threads is None else threads
    workers = DEMO_WORKERS if workers is None else workers
    root = judge_stream_root(build.seed)
    out = Path(out_dir)
    timings: dict[str, float] = {}
    tmp = None
    if games_dir is None and (train is None or (evaluate and held_out is None)):
        tmp = tempfile.TemporaryDirectory(prefix="creditaudit-judge-games-")
        games_dir = tmp.name
    try:
        t0 = time.perf_counter()
        with Deterministic(threads):  # the policy's rollouts sample on these kernels
            if train is None:
                games = judge_games(games_dir, build.train_games, seed=build.seed, purpose="train-games",
                                    workers=workers)
                train = judge_transcripts([task_of(g) for g in games], build, purpose="train", workers=workers)
            if evaluate and held_out is None:
                games = judge_games(games_dir, build.held_out_games, seed=build.seed, purpose="held-out-games",
                                    workers=workers)
                held_out = judge_transcripts([task_of(g) for g in games], build, purpose="held-out", workers=workers)
        timings["rollouts"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = judge_training_rows(train)
        markers = turn_markers()
        vocabulary = build_vocabulary([body for body, _ in rows] + [c for _, br in rows for c, _ in br]) + markers
        tokenizer = build_tokenizer(vocabulary, added_words=markers)
        with Deterministic(threads):
            model = build_model(len(vocabulary), tokenizer, hidden_size=build.hidden_size,
                                num_layers=build.num_layers, num_heads=build.num_heads,
                                init_seed=seed_streams.seed_int(root, "judge/init"))
            tie_markers(model, tokenizer)
            training = train_judge(model, tokenizer, train, epochs=build.epochs, learning_rate=build.learning_rate,
                                   rng=seed_streams.rng(root, "judge/order"), batch_size=build.batch_size,
                                   rename_share=build.rename_share, prefix_share=build.prefix_share,
                                   class_weight_cap=build.class_weight_cap,
                                   progress=progress)
        timings["train"] = time.perf_counter() - t0
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        record: dict[str, Any] = {
            "format_version": JUDGE_BUILD_VERSION,
            "build": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(build).items()},
            "vocab_size": len(vocabulary),
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "train_transcripts": len(train),
            "train_tasks": sorted({lt.trajectory.task_id for lt in train}),
            "held_out_tasks": sorted({lt.trajectory.task_id for lt in held_out or ()}),
            "training": training,
            "threads": threads,
            "torch_version": torch.__version__,
        }
        if evaluate:
            from creditaudit.signals.families.judge_eval import judge_metrics, load_judge

            t0 = time.perf_counter()
            with Deterministic(threads):
                record["evaluation"] = judge_metrics(load_judge(out), held_out)
            timings["evaluate"] = time.perf_counter() - t0
        (out / JUDGE_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return {**record, "files": policy_file_hashes(out), "timings_s": timings}
    finally:
        if tmp is not None:
            tmp.cleanup()
