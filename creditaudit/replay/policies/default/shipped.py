"""The embedded default policy as shipped: the default seed's build, inside the package.

``creditaudit policy build`` trains the embedded default policy from its seed in about five
minutes; the package also carries that build's files (about 2 MB: ``config.json``,
``model.safetensors``, the tokenizer files and the build record), so that a new user's first
audit does not start with a training run. The shipped files are what the default seed's build
writes, byte for byte (a slow test rebuilds them: ``tests/replay/test_shipped_policy.py``).
:func:`install_built_policy` copies a build (the shipped one by default) into a run, refusing one
whose build record names another recipe than the protocol's ``policy.build``.

Examples
--------
>>> from creditaudit.protocol.schema import PolicyBuild
>>> shipped_build() == PolicyBuild().model_dump(mode="json")
True
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError

__all__ = ["SHIPPED_POLICY_DIR", "shipped_record", "shipped_build", "install_built_policy"]

SHIPPED_POLICY_DIR = Path(__file__).resolve().parent / "shipped"
"""Directory of the shipped build (a Hugging Face model directory plus the build record)."""


def _record_name() -> str:
    from creditaudit.replay.policies.default.build import BUILD_RECORD

    return BUILD_RECORD


def shipped_record() -> dict[str, Any]:
    """The shipped build's record (recipe, demonstrations, training losses, held-out evaluation)."""
    path = SHIPPED_POLICY_DIR / _record_name()
    if not path.is_file():
        raise InputError(f"{path}: the package's shipped default policy is missing; reinstall creditaudit or "
                         "build the policy with `creditaudit policy build`")
    return json.loads(path.read_text("utf-8"))


def shipped_build() -> dict[str, Any]:
    """The ``policy.build`` section the shipped files were built from."""
    return shipped_record()["build"]


def install_built_policy(target: Path, build: Any, *, source: Path | None = None) -> Path:
    """Copy a built default policy (the shipped one when ``source`` is None) to ``target``.

    Parameters
    ----------
    target : Path
        Model directory to create (absent or empty).
    build : PolicyBuild or dict
        The protocol's ``policy.build``; the source's build record must name the same recipe.
    source : Path, optional
        A directory ``creditaudit policy build`` wrote.

    Raises
    ------
    InputError
        The source is not a build, or was built from another recipe.
    """
    source = SHIPPED_POLICY_DIR if source is None else Path(source)
    record_path = source / _record_name()
    if not record_path.is_file():
        raise InputError(f"{source}: not a built default policy (no {_record_name()}); build one with "
                         "`creditaudit policy build`")
    recorded = json.loads(record_path.read_text("utf-8")).get("build")
    wanted = build.model_dump(mode="json") if hasattr(build, "model_dump") else dict(build)
    if recorded != wanted:
        raise InputError(f"{record_path}: field `build` was built with {recorded}, but the protocol's "
                         f"policy.build is {wanted}; build the policy from this protocol with "
                         "`creditaudit policy build` instead")
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"{target}: already exists and is not empty; delete it or choose another --out")
    if target.exists():
        target.rmdir()
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    partial.rename(target)
    return target
