"""The ledger document: typed, versioned, canonical.

``ledger/ledger.json`` is the RFC 8785 canonical JSON of a :class:`Ledger` followed by a newline.
Every reported number is one :class:`LedgerEntry`: its name, its value (plain JSON; ``null`` when
undefined), its formatted text (the only place a number is rounded), the producer that made it,
the SHA-256 of every input file it was computed from, the protocol id and the code version. The
manifest (:class:`ArtifactRecord`) pairs every input's catalogue name, path and hash.

The code version is ``<tool version>+<code digest>``: a SHA-256 over the code that produces
numbers -- every module of the package except the command line and presentation
(:data:`PRESENTATION`), each as its syntax tree without docstrings, so comments, docstrings,
formatting, the CLI and the README do not invalidate a stored ledger, while any change to a
computation does. The ledger also records the versions of Python and of every dependency that can
move a number (:func:`creditaudit.versions.dependency_versions`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from creditaudit import __version__
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes

__all__ = [
    "LEDGER_VERSION",
    "ENTRY_NAME",
    "ArtifactRecord",
    "ProducerRecord",
    "LedgerEntry",
    "Ledger",
    "code_version",
    "code_digest",
    "PRESENTATION",
    "ledger_bytes",
    "read_ledger",
    "parse_ledger",
]

LEDGER_VERSION = 2

#: Modules (package-relative paths or folders) that present numbers but never produce one: left
#: out of the code version.
PRESENTATION = ("cli", "cli.py", "__main__.py", "demo.py", "progress.py", "figures.py", "ledger/report.py",
                "ledger/figures.py", "training_arms/figures.py")

#: Entry names: dot-separated segments, the first lower-case (``audit.implicit.estimate``).
ENTRY_NAME = r"^[a-z][a-z0-9_\-]*(\.[A-Za-z0-9_\-~]+)*$"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ArtifactRecord(_Model):
    """One input file of the ledger: the manifest's ``name <-> path <-> hash``."""

    name: str
    """Catalogue name of the artifact (``replay.turns``)."""
    path: str
    """Run-relative path of the file."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the file's bytes as stored, hashed before any producer read it."""
    size: int = Field(ge=0)
    """Size in bytes."""


class ProducerRecord(_Model):
    """A registered producer as it ran."""

    name: str
    """Producer name."""
    version: int = Field(ge=1)
    """Producer version (bumped when its numbers change meaning)."""
    inputs: list[str]
    """Catalogue names of the artifacts it declares (besides the protocol and its lock)."""
    description: str
    """What it computes."""


class LedgerEntry(_Model):
    """One reported number (or verdict, or sentence)."""

    name: Annotated[str, Field(pattern=ENTRY_NAME)]
    """Entry name; templates refer to entries by it."""
    value: Any
    """The value as plain JSON (``null`` when undefined)."""
    text: str
    """The value as the report prints it (rounding happens here only)."""
    producer: str
    """Name of the registered producer that computed it."""
    inputs: dict[str, str]
    """Run-relative path -> SHA-256 of every file the producer read."""
    protocol_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The protocol every input was stamped with."""
    code_version: str
    """``<tool version>+<source digest>`` of the code that computed it."""


class Ledger(_Model):
    """``ledger/ledger.json``."""

    version: Literal[2] = LEDGER_VERSION
    """Ledger format version (2: dependency versions recorded; the code version covers computation only)."""
    protocol_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The run's protocol id."""
    code_version: str
    """``<tool version>+<code digest>`` of the code that computed every entry."""
    versions: dict[str, str]
    """Python and every dependency that can move a number, as the ledger was computed."""
    artifacts: list[ArtifactRecord]
    """The manifest: every input file, sorted by path."""
    producers: list[ProducerRecord]
    """Every producer that ran, sorted by name."""
    entries: list[LedgerEntry]
    """Every entry, sorted by name."""

    def entry_map(self) -> dict[str, LedgerEntry]:
        return {e.name: e for e in self.entries}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _is_presentation(rel: str) -> bool:
    return any(rel == p or rel.startswith(p + "/") or rel.endswith("/" + p) for p in PRESENTATION)


def code_digest(root: str | Path | None = None) -> str:
    """SHA-256 over the number-producing modules' syntax trees (names and ``ast.dump`` without
    docstrings), in sorted order, of the package at ``root`` (this one by default); package data
    (the default protocol, JSON and text files) is hashed as bytes."""
    import creditaudit

    root = Path(root) if root is not None else Path(creditaudit.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or "__pycache__" in path.parts or _is_presentation(rel):
            continue
        if path.suffix == ".py":
            tree = _strip_docstrings(ast.parse(path.read_bytes(), filename=rel))
            data = ast.dump(tree, annotate_fields=True, include_attributes=False).encode("utf-8")
        elif path.suffix in (".yaml", ".json", ".txt"):
            data = path.read_bytes()
        else:
            continue
        name = rel.encode()
        digest.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``<tool version>+<first 16 hex digits of the source digest>``."""
    return f"{__version__}+{code_digest()[:16]}"


def ledger_bytes(ledger: Ledger) -> bytes:
    """The ledger's bytes as stored: canonical JSON and a newline."""
    return canonical_bytes(ledger.model_dump(mode="json")) + b"\n"


def parse_ledger(data: bytes, *, source: str) -> Ledger:
    """Parse ledger bytes; ``InputError`` naming ``source`` (and the field) when they are not a ledger."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{source}: not a ledger (not JSON: {exc}); run `creditaudit ledger regenerate`") from None
    if not isinstance(raw, dict):
        raise InputError(f"{source}: not a ledger (a JSON {type(raw).__name__}, not an object)")
    if raw.get("version") != LEDGER_VERSION:
        raise InputError(
            f"{source}: field `version`: ledger format {raw.get('version')!r}, this creditaudit reads format "
            f"{LEDGER_VERSION}; regenerate it with `creditaudit ledger regenerate`"
        )
    try:
        return Ledger.model_validate(raw)
    except ValidationError as exc:
        where = ", ".join("`" + ".".join(map(str, e["loc"])) + "`" for e in exc.errors()[:5])
        raise InputError(f"{source}: malformed ledger (fields {where}); run `creditaudit ledger regenerate`") from None


def read_ledger(path: str | Path) -> Ledger:
    """Read a stored ledger (``InputError`` when it is missing or not a ledger of this format)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no ledger; run `creditaudit ledger regenerate` first") from None
    except OSError as exc:
        raise InputError(f"{path}: unreadable ledger ({exc})") from None
    return parse_ledger(data, source=str(path))
