"""Content hashes of a protocol's inputs (the policy directory), pinned before freezing.

One function, :func:`policy_pins`, says what a model directory *is* for the protocol: every model
file (config, generation config, weights, shard indexes) and every tokenizer file by relative
name, and the chat template's hash. The policy layer re-exports it as ``policy_file_hashes``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_hash, sha256_file

__all__ = ["TOKENIZER_NAMES", "policy_pins", "chat_template_sha256", "require_dir"]


#: Tokenizer files as ``save_pretrained`` writes them (fast and slow tokenizers, sentencepiece,
#: BPE vocab/merges, chat templates saved beside the tokenizer).
TOKENIZER_NAMES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "tokenizer.model",
        "spiece.model",
        "sentencepiece.bpe.model",
        "chat_template.json",
        "chat_template.jinja",
    }
)
_MODEL_NAMES = frozenset({"config.json", "generation_config.json"})
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")


def _classify(relative: str) -> str | None:
    name = relative.rsplit("/", 1)[-1]
    if name in TOKENIZER_NAMES or relative.startswith("additional_chat_templates/"):
        return "tokenizer"
    if name in _MODEL_NAMES or name.endswith(_WEIGHT_SUFFIXES) or name.endswith(".index.json"):
        return "model"
    return None


def require_dir(path: str | Path, what: str = "policy") -> Path:
    """``path`` as a ``Path`` when it is an existing directory; else an ``InputError`` saying what to do."""
    p = Path(path)
    if not p.exists():
        raise InputError(
            f"{what} path {str(p)!r} does not exist; build the embedded default policy there with "
            f"`creditaudit policy build --out {p}` or point `policy.path` at a local Hugging Face "
            "model directory (one that holds config.json, the weights and the tokenizer files)"
        )
    if not p.is_dir():
        raise InputError(
            f"{what} path {str(p)!r} is a file, not a model directory; point `policy.path` at the "
            "directory that holds config.json, the weights and the tokenizer files"
        )
    return p


def _read_chat_template_text(directory: Path) -> str | list | dict | None:
    """The default chat template as saved in ``directory`` (``None`` when there is none)."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        f = directory / name
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise InputError(f"{f}: not valid JSON ({exc}); re-save the tokenizer with save_pretrained") from exc
            if isinstance(data, dict) and data.get("chat_template") is not None:
                return data["chat_template"]
    return None


def chat_template_sha256(template: str | list | dict | None) -> str | None:
    """SHA-256 of a chat template: of its UTF-8 text, or of the canonical JSON of a list of named
    templates; ``None`` when there is no template.

    Examples
    --------
    >>> chat_template_sha256(None) is None
    True
    >>> chat_template_sha256("{{ x }}")[:12]
    'e52c737297f7'
    """
    if template is None:
        return None
    if isinstance(template, str):
        return hashlib.sha256(template.encode("utf-8")).hexdigest()
    return canonical_hash(template)


def policy_pins(path: str | Path) -> dict[str, Any]:
    """SHA-256 of every model file and tokenizer file of a model directory, by relative name.

    Parameters
    ----------
    path : str or Path
        A local Hugging Face model directory.

    Returns
    -------
    dict
        ``{"model_files": {name: sha256}, "tokenizer_files": {name: sha256},
        "chat_template_sha256": str | None}``, the three fields the protocol's ``PolicySection``
        pins. Model files are ``config.json``, ``generation_config.json`` and the weights
        (``*.safetensors``, ``*.bin``, shard indexes ...); tokenizer files are those
        ``save_pretrained`` writes for a tokenizer, chat template files included. Other files
        (README, licences, hidden files) are not part of the policy's identity and are skipped.

    Raises
    ------
    InputError
        When the path does not exist, is not a directory, or holds no ``config.json``, no
        weights or no tokenizer file.
    """
    root = require_dir(path)
    model: dict[str, str] = {}
    tokenizer: dict[str, str] = {}
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if not f.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        kind = _classify(rel)
        if kind == "model":
            model[rel] = sha256_file(f)
        elif kind == "tokenizer":
            tokenizer[rel] = sha256_file(f)
    if "config.json" not in model:
        raise InputError(
            f"policy path {str(root)!r} holds no config.json, so it is not a Hugging Face model "
            "directory; save the model there with `model.save_pretrained(path)`"
        )
    if not any(name.endswith(_WEIGHT_SUFFIXES) for name in model):
        raise InputError(
            f"policy path {str(root)!r} holds config.json but no weight file (*.safetensors, *.bin); "
            "copy the weights into the directory or re-save with `model.save_pretrained(path)`"
        )
    if not tokenizer:
        raise InputError(
            f"policy path {str(root)!r} holds no tokenizer file (tokenizer.json, tokenizer_config.json ...); "
            "save the tokenizer beside the model with `tokenizer.save_pretrained(path)`"
        )
    return {
        "model_files": model,
        "tokenizer_files": tokenizer,
        "chat_template_sha256": chat_template_sha256(_read_chat_template_text(root)),
    }
