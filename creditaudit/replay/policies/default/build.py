"""Building the embedded default policy: games, demonstrations, vocabulary, model, training,
evaluation, saved as an ordinary Hugging Face model directory.

:func:`build_default_policy` runs the recipe of :mod:`creditaudit.replay.policies.default` from
one seed: every random choice comes from a named stream of the build seed, training runs with
deterministic algorithms at a fixed thread count (:class:`Deterministic`), and the same seed gives
byte-identical weight files.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol import seeds as seed_streams
from creditaudit.replay.policies.default.demonstrations import demo_rng, noisy_demonstrations, parallel_demonstrations
from creditaudit.replay.policies.default.evaluation import evaluate_policy, task_of
from creditaudit.replay.policies.default.model import build_model
from creditaudit.replay.policies.default.training import train_behaviour_cloning
from creditaudit.replay.policies.default.vocabulary import build_tokenizer, build_vocabulary

__all__ = [
    "BUILD_FORMAT_VERSION",
    "BUILD_RECORD",
    "BUILD_THREADS",
    "DEFAULT_HELD_OUT_GAMES",
    "CONTEXT_LOSS_WEIGHT",
    "AUGMENT_NUMBERS",
    "DEMO_HORIZON",
    "EVAL_HORIZON",
    "DEMO_WORKERS",
    "Deterministic",
    "alfworld_environment",
    "generate_build_games",
    "build_default_policy",
]

BUILD_FORMAT_VERSION = 5
"""Version of the build recipe; bumped whenever the same seed would give different weights."""
BUILD_RECORD = "creditaudit_policy.json"
"""Build record written beside the model (not part of the policy's identity hashes)."""
DEFAULT_HELD_OUT_GAMES = 24
"""Held-out games generated to measure a built policy (4 per task type)."""
BUILD_THREADS = max(1, min(2, os.cpu_count() or 1))
"""Torch threads during the build: fixed, because the reduction order of CPU kernels (and so the
last bits of the weights) may depend on the thread count (the default recipe measured
byte-identical weights with one and two threads); two where there are two cores: training took
179 s instead of 266 s on an otherwise idle 2-core machine. A second thread that must wait for a
core another process keeps busy slows training several-fold (0.4 s -> 3 s a step measured), so
pass ``threads=1`` when the machine is shared."""

CONTEXT_LOSS_WEIGHT = 0.0
"""Weight of the auxiliary next-token loss on prompt tokens (see :func:`train_behaviour_cloning`)."""

_BUILD_FIELDS = ("seed", "hidden_size", "num_layers", "num_heads", "train_games", "passes", "noise_rate", "epochs",
                 "learning_rate", "decisive_repeats", "augment_share", "goal_variants", "train_dtype",
                 "search_targets")
AUGMENT_NUMBERS = 9
"""Instance numbers 1..9 are permuted by the renaming augmentation (ALFWorld rooms rarely hold
more than nine of a kind; higher numbers keep their names)."""
DEMO_HORIZON = 30
"""Steps a demonstration episode may take. The expert wins about nine games in ten within 30
steps; what it plays after that is more of the same memoryless search, which adds training time
and teaches nothing new. (The protocol's horizon, 50 by default, is what the policy is measured
at.)"""
EVAL_HORIZON = 50
"""Horizon of the build's held-out evaluation when no protocol gives one: the protocol's default,
ALFWorld's customary 50-step limit."""


DEMO_WORKERS = max(1, min(2, os.cpu_count() or 1))
"""Default processes for the demonstrations (each runs its own engine)."""


def alfworld_environment(horizon: int) -> Any:
    """A real-engine ALFWorld environment (module level, so worker processes can rebuild it)."""
    from creditaudit.replay.envs.alfworld.env import AlfworldEnv

    return AlfworldEnv(horizon=horizon)


def _build_args(build: Any) -> dict[str, Any]:
    """The build settings as a plain dict; a mapping is validated by ``PolicyBuild`` (its
    missing fields take the schema's defaults, a wrong name or type is refused)."""
    from pydantic import ValidationError

    from creditaudit.protocol.schema import PolicyBuild

    if build is None:
        build = PolicyBuild()
    elif not hasattr(build, "model_dump"):
        if not isinstance(build, dict):
            build = {k: getattr(build, k) for k in _BUILD_FIELDS if hasattr(build, k)}
        try:
            build = PolicyBuild(**build)
        except ValidationError as exc:
            raise InputError(f"policy build settings are invalid: {exc}") from None
    dumped = build.model_dump()
    return {k: dumped[k] for k in _BUILD_FIELDS}


def _stream_root(seed: int) -> str:
    return f"creditaudit-policy-build-v{BUILD_FORMAT_VERSION}:{int(seed)}"


def generate_build_games(out_dir: str | Path, n: int, *, seed: int, purpose: str, env: Any = None,
                         progress: Callable[[str, int, int], None] | None = None, workers: int = 1) -> list[Any]:
    """``n`` verified generated games for a build, from the build seed's stream ``policy/<purpose>``.

    Games are generated round-robin over the six task types (``ceil(n / 6)`` per type) and the
    first ``n`` in type-interleaved order are returned, so every type is represented. Games
    already written there by the same seed are reused (the generator resumes). ``workers`` engine
    processes verify them when ``env`` is not given (the games do not depend on it).
    """
    from creditaudit.replay.envs.alfworld.games import TASK_TYPES, generate_games

    per_type = -(-n // len(TASK_TYPES))
    report = generate_games(
        Path(out_dir) / purpose,
        games_per_type=per_type,
        rng=seed_streams.rng(_stream_root(seed), f"policy/{purpose}"),
        env=env,
        progress=None if progress is None else (lambda d, t, g: progress(f"generate/{purpose}", d, t)),
        workers=workers,
    )
    by_type: dict[str, list[Any]] = {}
    for g in report.games:
        by_type.setdefault(g.task_type, []).append(g)
    interleaved = [by_type[t][k] for k in range(per_type) for t in TASK_TYPES if k < len(by_type.get(t, []))]
    return interleaved[:n]


class Deterministic:
    """Deterministic torch algorithms and a fixed thread count for the duration of a build."""

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        import torch

        self._prev = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self._prev[0])
        torch.use_deterministic_algorithms(self._prev[1])


def _demonstration_record(demos: Any) -> dict[str, int]:
    return {
        "examples": len(demos.examples),
        "targets": sum(ex.target for ex in demos.examples),
        "mistakes": demos.mistakes,
        "episodes": demos.episodes,
        "episodes_won": demos.episodes_won,
    }


def build_default_policy(
    out_dir: str | Path,
    build: Any = None,
    *,
    train_games: Sequence[Any] | None = None,
    held_out_games: Sequence[Any] | None = None,
    games_dir: str | Path | None = None,
    env_factory: Callable[[], Any] | None = None,
    history_length: int = 2,
    evaluate: bool = True,
    eval_temperature: float = 0.7,
    eval_rollouts: int = 1,
    eval_horizon: int = EVAL_HORIZON,
    n_held_out: int = DEFAULT_HELD_OUT_GAMES,
    threads: int = BUILD_THREADS,
    decoding: str = "admissible",
    context_weight: float = CONTEXT_LOSS_WEIGHT,
    demo_workers: int = DEMO_WORKERS,
    train: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Build, save and (optionally) measure the embedded default policy.

    Parameters
    ----------
    out_dir : path
        Model directory to write (``save_pretrained`` of the model and the tokenizer, plus
        :data:`BUILD_RECORD`).
    build : PolicyBuild or mapping, optional
        ``seed, hidden_size, num_layers, num_heads, train_games, noise_rate, epochs,
        learning_rate`` (the protocol's ``policy.build``; its defaults when ``None``).
    train_games : sequence of GeneratedGame, optional
        Games the expert is demonstrated on (``build.passes`` episodes each); generated from the
        build seed when ``None``
        (``build.train_games`` of them, under ``games_dir``).
    held_out_games : sequence of GeneratedGame, optional
        Games the built policy is measured on; ``n_held_out`` are generated from the build seed's
        own held-out stream when ``None`` and ``evaluate`` is true.
    games_dir : path, optional
        Where generated games are written (a temporary directory when ``None``).
    env_factory : callable, optional
        ``env_factory(horizon)`` makes an environment; ALFWorld's by default.
    history_length : int, default 2
        Turns of history in the training prompts (use the protocol's ``policy.history_length``).
    evaluate : bool, default True
        Measure the saved policy, loaded back through :func:`~creditaudit.replay.policies.hf.load_policy`.
    eval_temperature, eval_rollouts : float, int
        Sampling temperature and rollouts per held-out game.
    eval_horizon : int, default 50
        Steps per held-out episode (use the protocol's ``environment.horizon``).
    decoding : {"admissible", "constrained", "free"}, default "admissible"
        How the built policy is evaluated (the protocol's ``policy.decoding``).
    threads : int, default min(2, CPUs)
        Torch threads during the build (see :data:`BUILD_THREADS`: pass 1 on a machine whose other
        core is busy).
    context_weight : float, default 0.0
        Auxiliary prompt-token loss weight (see :func:`train_behaviour_cloning`).
    demo_workers : int, default min(2, CPUs)
        Processes generating the games and playing the demonstrations on ALFWorld (only with the
        default ``env_factory``; the result does not depend on it). They are started with ``spawn``: a script that calls
        this must do so under ``if __name__ == "__main__":`` (or pass 1), as with
        ``multiprocessing`` anywhere.
    train : bool, default True
        False stops before the model: only the tokenizer and the record of the games and
        demonstrations are written (no weights, no ``training``, no evaluation) -- the part of the
        build that does not depend on the CPU's kernels, checked in a minute where training takes
        tens (a CPU without native bfloat16).
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    dict
        ``files`` (:func:`~creditaudit.replay.policies.hf.policy_file_hashes` of ``out_dir``),
        ``build``, ``vocab_size``, ``parameters``, ``demonstrations``, ``training``,
        ``evaluation`` (``success_rate``, ``admissible_rate`` ...; ``None`` when not evaluated),
        ``timings_s`` (wall-clock seconds per stage; not written to any file).

    Notes
    -----
    Streams of the build (root ``creditaudit-policy-build-v1:<seed>``): ``policy/train-games``,
    ``policy/held-out-games``, ``policy/demo/<episode>``, ``policy/init``, ``policy/order``; the
    evaluation samples with ``policy-eval:<seed>`` streams. Same seed, same games, same thread
    count and same torch build give byte-identical weight files.
    """
    import tempfile

    import torch

    from creditaudit.replay.envs.alfworld.env import ALFWORLD_PROMPT
    from creditaudit.replay.policies.hf import load_policy, policy_file_hashes

    args = _build_args(build)
    seed = int(args["seed"])
    root = _stream_root(seed)
    out = Path(out_dir)
    timings: dict[str, float] = {}
    parallel = env_factory is None and demo_workers > 1
    if env_factory is None:
        env_factory = alfworld_environment

    tmp = None
    if games_dir is None and (train_games is None or (evaluate and held_out_games is None)):
        tmp = tempfile.TemporaryDirectory(prefix="creditaudit-policy-games-")
        games_dir = tmp.name
    try:
        with Deterministic(threads):
            t0 = time.perf_counter()
            env = env_factory(DEMO_HORIZON)
            try:
                if train_games is None:
                    train_games = generate_build_games(games_dir, int(args["train_games"]), seed=seed,
                                                       purpose="train-games", env=None if parallel else env,
                                                       progress=progress, workers=demo_workers)
                timings["generate"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                if evaluate and held_out_games is None:
                    held_out_games = generate_build_games(games_dir, n_held_out, seed=seed,
                                                          purpose="held-out-games", env=None if parallel else env,
                                                          progress=progress, workers=demo_workers)
                timings["generate_held_out"] = time.perf_counter() - t0

                t0 = time.perf_counter()
                if not parallel:
                    demos = noisy_demonstrations(
                        [task_of(g) for g in train_games],
                        env,
                        noise_rate=float(args["noise_rate"]),
                        history_length=history_length,
                        passes=int(args["passes"]),
                        rng_for=lambda i: demo_rng(root, i),
                    )
            finally:
                env.close()
            if parallel:
                # The engine, not torch, is the cost here: one engine per core (same result for
                # any number of workers).
                demos = parallel_demonstrations(
                    [task_of(g) for g in train_games], functools.partial(alfworld_environment, DEMO_HORIZON), root=root,
                    noise_rate=float(args["noise_rate"]), history_length=history_length,
                    passes=int(args["passes"]), workers=demo_workers,
                )
            timings["demonstrations"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            texts = [ex.prompt for ex in demos.examples] + [ex.action for ex in demos.examples]
            vocabulary = build_vocabulary(texts)
            tokenizer = build_tokenizer(vocabulary)
            if not train:
                out.mkdir(parents=True, exist_ok=True)
                tokenizer.save_pretrained(out)
                return {"build": args, "vocab_size": len(vocabulary),
                        "train_games": [task_of(g).task_id for g in train_games],
                        "demonstrations": _demonstration_record(demos), "timings_s": timings}
            model = build_model(
                len(vocabulary), tokenizer,
                hidden_size=int(args["hidden_size"]), num_layers=int(args["num_layers"]),
                num_heads=int(args["num_heads"]), init_seed=seed_streams.seed_int(root, "policy/init"),
            )
            training = train_behaviour_cloning(
                model, tokenizer, demos.examples,
                epochs=int(args["epochs"]), learning_rate=float(args["learning_rate"]),
                rng=seed_streams.rng(root, "policy/order"), context_weight=context_weight, progress=progress,
                decisive_repeats=int(args["decisive_repeats"]), augment=float(args["augment_share"]) > 0,
                augment_share=float(args["augment_share"]), max_number=AUGMENT_NUMBERS,
                goal_variants=int(args["goal_variants"]),
                search_targets=args["search_targets"] == "distribution",
                autocast=None if args["train_dtype"] == "float32" else str(args["train_dtype"]),
            )
            timings["train"] = time.perf_counter() - t0
            out.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
        files = policy_file_hashes(out)
        record = {
            "format_version": BUILD_FORMAT_VERSION,
            "build": args,
            "history_length": history_length,
            "vocab_size": len(vocabulary),
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "train_games": [task_of(g).task_id for g in train_games],
            "demonstrations": _demonstration_record(demos),
            "training": training,
            "threads": threads,
            "context_weight": context_weight,
            "torch_version": torch.__version__,
        }
        evaluation = None
        if evaluate:
            t0 = time.perf_counter()
            policy = load_policy(out, device="cpu", history_length=history_length, decoding=decoding,
                                 instruction=ALFWORLD_PROMPT.instruction)
            with Deterministic(threads):
                result = evaluate_policy(
                    policy, held_out_games, env_factory=lambda: env_factory(eval_horizon), seed=seed,
                    temperature=eval_temperature, rollouts_per_task=eval_rollouts, progress=progress,
                )
            evaluation = {**result.to_dict(), "games": [task_of(g).task_id for g in held_out_games],
                          "horizon": eval_horizon}
            timings["evaluate"] = time.perf_counter() - t0
        record["evaluation"] = evaluation
        (out / BUILD_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return {**record, "files": files, "timings_s": timings}
    finally:
        if tmp is not None:
            tmp.cleanup()
