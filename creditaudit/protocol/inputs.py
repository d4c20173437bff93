"""Content hashes of a protocol's inputs (the policy directory), pinned before freezing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_bytes, sha256_file

__all__ = ["policy_pins", "TOKENIZER_FILE_PREFIXES"]

#: File names (prefixes) that belong to the tokenizer; every other file of a model directory is a
#: model file (config, generation config, weights, weight index).
TOKENIZER_FILE_PREFIXES = (
    "tokenizer",
    "vocab",
    "merges",
    "special_tokens_map",
    "added_tokens",
    "chat_template",
    "spiece",
    "sentencepiece",
)


def _chat_template_hash(directory: Path) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return sha256_bytes(jinja.read_bytes())
    config = directory / "tokenizer_config.json"
    if config.is_file():
        try:
            template = json.loads(config.read_text("utf-8")).get("chat_template")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{config}: not valid JSON ({exc})") from None
        if template is not None:
            text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
            return sha256_bytes(text.encode("utf-8"))
    return None


def policy_pins(directory: str | Path) -> dict[str, Any]:
    """Hash every file of a model directory: ``model_files``, ``tokenizer_files`` (name -> SHA-256)
    and ``chat_template_sha256`` (null when the tokenizer has no chat template).

    Hidden files and sub-directories are ignored; names are relative to ``directory``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(
            f"{directory}: policy directory not found; build the default policy with "
            "`creditaudit policy build` or point --policy at a local model directory"
        )
    model: dict[str, str] = {}
    tokenizer: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        target = tokenizer if path.name.lower().startswith(TOKENIZER_FILE_PREFIXES) else model
        target[path.name] = sha256_file(path)
    if not model:
        raise InputError(f"{directory}: no model files (config.json, weights) found in the policy directory")
    return {"model_files": model, "tokenizer_files": tokenizer, "chat_template_sha256": _chat_template_hash(directory)}
