"""Fixtures of the training-arms tests: a frozen planted run with collected trajectories and the
implicit and judge credit tables, and a tiny arms section."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

#: A tiny experiment: every arm, two seeds, two rounds (seconds on a CPU).
TINY_ARMS = {
    "seeds": 2,
    "rounds": 2,
    "tasks_per_round": 2,
    "group_size": 3,
    "lora_rank": 4,
    "lora_alpha": 8.0,
    "learning_rate": 0.01,
    "minibatch_size": 4,
    "dose_matched": False,
    "eval_tasks": 3,
    "eval_rollouts": 2,
    "probe_states": 4,
    "pivotal_resolution_n": 1,
}

#: A planted maze where about half the rollouts of the tiny policy fail (groups with mixed outcomes).
PLANTED = {"n_steps": 4, "n_trap": 2, "p_absorbing": 0.25, "threshold_frac": 0.75}

SIGNALS = [
    {"name": "implicit", "family": "implicit"},
    {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
]
CONTROLS = [
    {"name": "random", "kind": "random", "null_control": True},
    {"name": "uniform", "kind": "uniform", "null_control": True},
    {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"},
    {"name": "shuffle-judge", "kind": "shuffle", "of": "judge"},
]


def make_arms_run(root: Path, policy_dir: Path, *, arms: dict | None = None, n_tasks: int = 4,
                  signals_now: bool = True, permutations: int = 199, signals: list | None = None,
                  controls: list | None = None) -> tuple[Path, object]:
    """A frozen planted run (collected, with credit) whose protocol carries ``arms``."""
    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.protocol.io import default_template_text
    from creditaudit.protocol.lock import freeze
    from creditaudit.protocol.signing import generate_keypair, load_signer
    from creditaudit.replay.collect import collect
    from creditaudit.signals.stage import run_signals

    run = root / "run"
    run.mkdir(parents=True)
    shutil.copytree(policy_dir, run / "policy")
    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "planted", "source": "generated", "horizon": 8, "args": PLANTED}
    data["collection"] = {"n_tasks": n_tasks, "group_size": 2, "determinism_instances": 2}
    data["policy"].update(source="local", history_length=0, max_action_tokens=6, decoding="admissible")
    data["signals"] = signals if signals is not None else SIGNALS
    data["controls"] = controls if controls is not None else CONTROLS
    names = [s["name"] for s in data["signals"]]
    data["router"] = {"confidence_family": names[0], "judge_family": names[-1], "routed_share": 0.5}
    data["replay"].update(n_alternatives=2, max_alt_draws=48)  # a cheap low-resolution replay
    data["statistics"]["bootstrap_iterations"] = 200
    data["statistics"]["permutations"] = permutations
    data["arms"] = {**data["arms"], **TINY_ARMS, **(arms or {})}
    (run / "protocol.yaml").write_text(pin_policy_text(yaml.safe_dump(data, sort_keys=False), run / "policy"))
    signer = load_signer(generate_keypair(run / "keys")[0])
    freeze(run / "protocol.yaml", signer)
    if signals_now:
        collect(run / "protocol.yaml", signer)
        run_signals(run / "protocol.yaml", signer)
    return run, signer


@pytest.fixture()
def arms_run_factory():
    """``make_arms_run(root, policy_dir, *, arms, n_tasks, signals_now, permutations, signals, controls)``."""
    return make_arms_run


@pytest.fixture(scope="module")
def credited_run(tmp_path_factory, planted_policy_dir):
    """A collected planted run with the implicit and judge credit tables (no arms trained yet)."""
    return make_arms_run(tmp_path_factory.mktemp("arms-base"), planted_policy_dir)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, credited_run):
    """``credited_run`` copied and trained: (run directory, signer, ArmsDocument)."""
    from creditaudit.training_arms.stage import run_arms

    run = copy_run(credited_run[0], tmp_path_factory.mktemp("arms-trained"))
    return run, credited_run[1], run_arms(run / "protocol.yaml", credited_run[1])


def copy_run(run: Path, root: Path) -> Path:
    """A copy of a run directory (same protocol, lock, keys and artifacts)."""
    target = root / "run"
    shutil.copytree(run, target)
    return target


def arms_digests(run: Path) -> dict[str, str]:
    """SHA-256 of every file under ``run/arms`` by relative path."""
    from creditaudit.protocol.canonical import sha256_file

    base = run / "arms"
    return {p.relative_to(base).as_posix(): sha256_file(p) for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture()
def run_copier():
    """``copy_run(run, root)``."""
    return copy_run


@pytest.fixture()
def digests():
    """``arms_digests(run)``."""
    return arms_digests
