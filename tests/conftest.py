"""Shared fixtures: a tiny trained policy for the planted environment and frozen planted runs."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def fake_policy_dir(tmp_path: Path) -> Path:
    """A directory with the file layout of a Hugging Face model (contents are irrelevant to pinning)."""
    directory = tmp_path / "policy"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "qwen2"}')
    (directory / "model.safetensors").write_bytes(b"\x01\x02weights")
    (directory / "tokenizer.json").write_text('{"model": {}}')
    (directory / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    return directory


@pytest.fixture(scope="session")
def planted_policy_dir(tmp_path_factory) -> Path:
    """A trained tiny policy for the planted environment (built once per test session); its
    tokenizer also encodes the judge's choices 1, 0, -1."""
    from helpers import train_planted_policy

    directory = tmp_path_factory.mktemp("planted-policy") / "policy"
    train_planted_policy(directory)
    return directory


@pytest.fixture(scope="session")
def judgeable_policy_dir(planted_policy_dir) -> Path:
    """The planted policy (its tokenizer encodes the judge's choices 1, 0, -1)."""
    return planted_policy_dir


@pytest.fixture(scope="module")
def collected_run(tmp_path_factory, planted_policy_dir):
    """A collected planted run (2 tasks x 2 rollouts) under the test signal set."""
    from helpers import make_run

    return make_run(tmp_path_factory.mktemp("signals-run"), planted_policy_dir)
