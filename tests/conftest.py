"""Shared fixtures."""

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
