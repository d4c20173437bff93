"""``policy.path: hf://ORG/NAME@REVISION``: a checkpoint named by its Hugging Face hub id, resolved
from the local Hugging Face cache only.

A researcher's policy usually already sits in the cache that ``transformers`` filled when they
downloaded it (``~/.cache/huggingface/hub``, or ``HF_HUB_CACHE`` / ``HF_HOME``). Naming it by hub id
saves copying it into the run; nothing is ever downloaded at run time (``local_files_only``). The
revision is a branch, a tag or a commit; ``creditaudit protocol pin`` replaces a branch or tag by the
40-hex commit it resolves to in the cache, and freezing refuses a revision that is not a commit
(a branch moves), so a frozen protocol names one snapshot and the hashes of its files.

Resolution is :func:`huggingface_hub.snapshot_download` with ``local_files_only=True``: the
library's own reading of its cache layout (``refs/``, ``snapshots/<commit>/``), not ours.

    >>> parse_hub_path("hf://Qwen/Qwen2.5-7B-Instruct@main")
    HubPath(repo_id='Qwen/Qwen2.5-7B-Instruct', revision='main')
    >>> is_hub_path("policy"), is_hub_path("hf://Qwen/Qwen2.5-7B-Instruct@main")
    (False, True)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from creditaudit.errors import InputError

__all__ = ["HUB_PREFIX", "HubPath", "is_commit", "is_hub_path", "parse_hub_path", "resolve_hub_path"]

HUB_PREFIX = "hf://"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubPath(NamedTuple):
    """A parsed ``hf://ORG/NAME@REVISION``."""

    repo_id: str
    revision: str

    def text(self, revision: str | None = None) -> str:
        """The ``policy.path`` text, with another revision if given."""
        return f"{HUB_PREFIX}{self.repo_id}@{revision or self.revision}"


def is_hub_path(path: str) -> bool:
    """Whether ``policy.path`` names a hub checkpoint rather than a directory."""
    return str(path).startswith(HUB_PREFIX)


def is_commit(revision: str) -> bool:
    """Whether ``revision`` is a full commit hash (the only revision a frozen protocol may name)."""
    return bool(_COMMIT.match(revision))


def parse_hub_path(path: str) -> HubPath:
    """``hf://ORG/NAME@REVISION`` -> :class:`HubPath`; a malformed one is an ``InputError`` saying
    what it should look like."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    body = str(path)[len(HUB_PREFIX):]
    repo_id, sep, revision = body.partition("@")
    if not sep or not revision or "@" in revision or "/" not in repo_id:
        raise InputError(
            f"policy.path {path!r}: a hub checkpoint is written hf://ORG/NAME@REVISION (REVISION: a branch, "
            "tag or commit, e.g. hf://Qwen/Qwen2.5-7B-Instruct@main)"
        )
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InputError(f"policy.path {path!r}: {repo_id!r} is not a hub repository id ({exc})") from None
    return HubPath(repo_id, revision)


def resolve_hub_path(path: str) -> tuple[Path, str]:
    """The snapshot directory of ``hf://ORG/NAME@REVISION`` in the local Hugging Face cache and the
    commit it is; ``InputError`` (exit 2) naming the cache and what to do when it is not there."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    ref = parse_hub_path(path)
    try:
        snapshot = Path(snapshot_download(ref.repo_id, revision=ref.revision, local_files_only=True))
    except LocalEntryNotFoundError:
        raise InputError(
            f"policy.path {path!r}: {ref.repo_id} at revision {ref.revision!r} is not in the local Hugging Face "
            f"cache ({constants.HF_HUB_CACHE}); nothing is downloaded at run time: fetch it where there is a "
            f"network (`hf download {ref.repo_id} --revision {ref.revision}`) and copy the cache here, or point "
            "HF_HUB_CACHE at the cache that holds it"
        ) from None
    return snapshot, snapshot.name
