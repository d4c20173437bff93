"""Freezing, verifying and amending protocols; the hash-chained append-only registry.

Files (beside the protocol ``P.yaml`` unless told otherwise):

- ``P.lock.json`` — the lock: protocol id, the full protocol as frozen (free text included, for
  field-level diffs), UTC freeze time, tool version, public key, and an Ed25519 signature over the
  RFC 8785 canonical JSON of every other field. Freezing never overwrites a lock.
- ``registry.jsonl`` — one entry per freeze or amendment; each entry holds the previous entry's
  hash, so editing or deleting any entry breaks the chain.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from creditaudit import __version__
from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import canonical_bytes, canonical_hash, sha256_bytes, sha256_file
from creditaudit.protocol.diff import FieldChange, field_diff
from creditaudit.protocol.inputs import policy_pins
from creditaudit.protocol.io import load_protocol, protocol_dict, protocol_from_dict
from creditaudit.protocol.schema import Protocol, identity_dict, protocol_id
from creditaudit.protocol.signing import Signer, key_id, load_public_key, public_key_from_b64, verify_signature
from creditaudit.versions import dependency_versions

__all__ = [
    "LOCK_VERSION",
    "GENESIS",
    "Lock",
    "RegistryEntry",
    "FrozenProtocol",
    "VerifyReport",
    "lock_path_for",
    "registry_path_for",
    "policy_dir",
    "input_problems",
    "freeze",
    "amend",
    "verify",
    "read_lock",
    "read_registry",
    "require_frozen",
    "check_plugins",
]

LOCK_VERSION = 2
GENESIS = "0" * 64


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, use_attribute_docstrings=True)


class Lock(_Record):
    """A signed lock on a frozen protocol."""

    version: Literal[2] = 2
    """Lock format version (2: the dependency versions are recorded)."""
    protocol_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the protocol's canonical identity view."""
    protocol_file: str
    """File name of the protocol (no directory: no machine path enters an artifact)."""
    protocol: dict[str, Any]
    """The full protocol as frozen (free text included), for field-level diffs."""
    freeze_time: str
    """UTC time of the freeze, ISO 8601 with a trailing Z."""
    tool_version: str
    """creditaudit version that froze it."""
    versions: dict[str, str]
    """Python and every dependency that can move a number (:mod:`creditaudit.versions`), at freeze time."""
    parent_id: str | None = None
    """Id of the amended parent protocol (amendments only)."""
    amendment_reason: str | None = None
    """Why the parent was amended (amendments only)."""
    deviations: list[dict[str, Any]] = Field(default_factory=list)
    """Field-level changes from the parent (amendments only)."""
    public_key: str
    """Base64 raw Ed25519 public key of the signer."""
    key_id: str
    """SHA-256 of the raw public key."""
    signature: str
    """Base64 Ed25519 signature of the canonical JSON of every other field."""

    def payload(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json", exclude={"signature"}))


class RegistryEntry(_Record):
    """One entry of the append-only registry."""

    index: int
    """Position in the registry (0-based)."""
    kind: Literal["freeze", "amend"]
    """Freeze of an original protocol or of an amendment."""
    protocol_id: str
    """Id of the protocol frozen."""
    parent_id: str | None
    """Parent protocol id for amendments."""
    protocol_file: str
    """Protocol file name."""
    lock_sha256: str
    """SHA-256 of the lock file's bytes."""
    freeze_time: str
    """UTC freeze time."""
    key_id: str
    """Signer's key id."""
    reason: str | None
    """Amendment reason."""
    prev_hash: str
    """entry_hash of the previous entry (``GENESIS`` for the first)."""
    entry_hash: str
    """SHA-256 of the canonical JSON of every other field."""


def lock_path_for(protocol_path: str | Path) -> Path:
    """``run/protocol.yaml`` -> ``run/protocol.lock.json``."""
    protocol_path = Path(protocol_path)
    return protocol_path.with_name(protocol_path.stem + ".lock.json")


def registry_path_for(protocol_path: str | Path) -> Path:
    """The default registry: ``registry.jsonl`` beside the protocol."""
    return Path(protocol_path).with_name("registry.jsonl")


def policy_dir(protocol: Protocol, protocol_path: str | Path) -> Path:
    """The policy directory, resolved relative to the protocol file's directory; for
    ``hf://ORG/NAME@REVISION``, its snapshot in the local Hugging Face cache
    (:mod:`creditaudit.protocol.hub`)."""
    from creditaudit.protocol.hub import is_hub_path, resolve_hub_path

    if is_hub_path(protocol.policy.path):
        return resolve_hub_path(protocol.policy.path)[0]
    path = Path(protocol.policy.path)
    return path if path.is_absolute() else Path(protocol_path).parent / path


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _atomic_write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` atomically; refuse if ``path`` exists."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)  # fails if path exists: never overwrite
    except FileExistsError:
        raise InputError(f"{path}: already exists; a lock is never overwritten (amend instead)") from None
    finally:
        tmp.unlink(missing_ok=True)


def read_lock(path: str | Path) -> Lock:
    """Read and validate a lock file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{path}: no lock; freeze the protocol first (`creditaudit protocol freeze`)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable lock file ({exc})") from None
    if isinstance(data, dict) and data.get("version") != LOCK_VERSION:
        raise InputError(
            f"{path}: field `version`: lock format {data.get('version')!r} is not {LOCK_VERSION}; a lock is never "
            "rewritten: verify it with the creditaudit that froze it, or migrate the protocol (`creditaudit protocol "
            "migrate`) and freeze the result"
        )
    try:
        return Lock.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join("`" + ".".join(map(str, e["loc"])) + "`" for e in exc.errors())
        raise InputError(f"{path}: malformed lock file (fields {fields})") from None


def read_registry(path: str | Path) -> list[RegistryEntry]:
    """Read the registry, checking every entry's hash and the chain; raises CheckFailed on a break."""
    path = Path(path)
    if not path.exists():
        return []
    entries: list[RegistryEntry] = []
    prev = GENESIS
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            raise CheckFailed(f"{path}:{lineno}: empty line in the registry (entries are never deleted)")
        try:
            entry = RegistryEntry.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise CheckFailed(f"{path}:{lineno}: registry entry is not valid ({exc.__class__.__name__})") from None
        body = entry.model_dump(mode="json", exclude={"entry_hash"})
        if canonical_hash(body) != entry.entry_hash:
            raise CheckFailed(f"{path}:{lineno}: registry entry {entry.index} was edited (its hash does not match)")
        if entry.index != lineno - 1:
            raise CheckFailed(f"{path}:{lineno}: registry entry index {entry.index}, expected {lineno - 1}")
        if entry.prev_hash != prev:
            raise CheckFailed(
                f"{path}:{lineno}: registry chain broken at entry {entry.index}: prev_hash does not match the "
                "previous entry (an entry was removed, reordered or edited)"
            )
        prev = entry.entry_hash
        entries.append(entry)
    return entries


def _append_registry(path: Path, *, kind: str, lock: Lock, lock_sha256: str) -> RegistryEntry:
    entries = read_registry(path)
    body = {
        "index": len(entries),
        "kind": kind,
        "protocol_id": lock.protocol_id,
        "parent_id": lock.parent_id,
        "protocol_file": lock.protocol_file,
        "lock_sha256": lock_sha256,
        "freeze_time": lock.freeze_time,
        "key_id": lock.key_id,
        "reason": lock.amendment_reason,
        "prev_hash": entries[-1].entry_hash if entries else GENESIS,
    }
    entry = RegistryEntry(**body, entry_hash=canonical_hash(body))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        handle.write(canonical_bytes(entry.model_dump(mode="json")) + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    return entry


def input_problems(protocol: Protocol, protocol_path: Path) -> list[str]:
    """Problems with the pinned policy files (empty when they match)."""
    pinned = protocol.policy
    if not pinned.model_files:
        return [
            "policy.model_files: no policy files are pinned; run `creditaudit policy build` (builtin) and "
            "`creditaudit protocol init --policy DIR`, or fill the hashes of a local model directory"
        ]
    from creditaudit.protocol.hub import is_commit, is_hub_path, parse_hub_path

    problems = []
    if is_hub_path(pinned.path) and not is_commit(revision := parse_hub_path(pinned.path).revision):
        problems.append(
            f"policy.path: revision {revision!r} is a branch or tag, which can move; name the commit "
            "(`creditaudit protocol pin` writes the one it resolves to in the local cache)"
        )
    directory = policy_dir(protocol, protocol_path)
    actual = policy_pins(directory)
    for group in ("model_files", "tokenizer_files"):
        expected, found = getattr(pinned, group), actual[group]
        for name in sorted(set(expected) | set(found)):
            if expected.get(name) != found.get(name):
                problems.append(
                    f"policy.{group}.{name}: pinned {expected.get(name) or '(absent)'}, "
                    f"found {found.get(name) or '(absent)'} in {directory.name}/"
                )
    if pinned.chat_template_sha256 != actual["chat_template_sha256"]:
        problems.append(
            f"policy.chat_template_sha256: pinned {pinned.chat_template_sha256}, found {actual['chat_template_sha256']}"
        )
    return problems


def check_plugins(protocol: Protocol, protocol_path: Path) -> None:
    """Refuse a protocol whose pinned plugins differ from the installed ones (exit 1), or that uses a
    plugin from a distribution other than creditaudit without pinning it (exit 2)."""
    from creditaudit import plugins

    plugins.check_pins([p.model_dump() for p in protocol.plugins], source=str(protocol_path))
    pinned = {(p.kind, p.name) for p in protocol.plugins}
    unpinned = [f"{kind} {name!r} ({plugins.get(kind, name).distribution})" for kind, name in protocol.plugins_used()
                if (kind, name) not in pinned and plugins.get(kind, name).distribution != "creditaudit"]
    if unpinned:
        raise InputError(
            f"{protocol_path}: third-party plugin(s) {', '.join(unpinned)} are not pinned; run "
            f"`creditaudit protocol pin {protocol_path}` before freezing"
        )


def _make_lock(
    protocol: Protocol,
    protocol_path: Path,
    signer: Signer,
    *,
    parent: Lock | None = None,
    reason: str | None = None,
    freeze_time: str | None = None,
) -> Lock:
    deviations = [c.to_dict() for c in field_diff(parent.protocol, protocol_dict(protocol))] if parent else []
    body = {
        "version": LOCK_VERSION,
        "protocol_id": protocol_id(protocol),
        "protocol_file": protocol_path.name,
        "protocol": protocol_dict(protocol),
        "freeze_time": freeze_time or _utc_now(),
        "tool_version": __version__,
        "versions": dependency_versions(),
        "parent_id": parent.protocol_id if parent else None,
        "amendment_reason": reason,
        "deviations": deviations,
        "public_key": signer.public_key_b64,
        "key_id": signer.key_id,
    }
    signature = signer.sign(canonical_bytes(body))
    return Lock(**body, signature=signature)


def freeze(
    protocol_path: str | Path,
    signer: Signer,
    *,
    registry_path: str | Path | None = None,
    check_inputs: bool = True,
    _parent: Lock | None = None,
    _reason: str | None = None,
) -> Lock:
    """Freeze ``protocol_path``: write its signed lock and append it to the registry.

    Refuses (``InputError``) when a lock exists, the protocol is invalid, or the pinned inputs are
    missing or do not match the files.
    """
    protocol_path = Path(protocol_path)
    protocol = load_protocol(protocol_path)
    lock_path = lock_path_for(protocol_path)
    if lock_path.exists():
        raise InputError(f"{lock_path}: the protocol is already frozen; a lock is never overwritten (amend instead)")
    if _parent is None and protocol.amends is not None:
        raise InputError(f"{protocol_path}: field `amends` is set: freeze an amendment with `protocol amend`")
    if check_inputs:
        problems = input_problems(protocol, protocol_path)
        if problems:
            raise InputError(f"{protocol_path}: pinned inputs do not match:\n  " + "\n  ".join(problems))
    check_plugins(protocol, protocol_path)
    lock = _make_lock(protocol, protocol_path, signer, parent=_parent, reason=_reason)
    data = json.dumps(lock.model_dump(mode="json"), indent=2, sort_keys=True).encode("utf-8") + b"\n"
    _atomic_write_new(lock_path, data)
    _append_registry(
        Path(registry_path) if registry_path else registry_path_for(protocol_path),
        kind="amend" if _parent else "freeze",
        lock=lock,
        lock_sha256=sha256_bytes(data),
    )
    return lock


def amend(
    parent_path: str | Path,
    child_path: str | Path,
    signer: Signer,
    *,
    reason: str,
    registry_path: str | Path | None = None,
    check_inputs: bool = True,
) -> Lock:
    """Freeze ``child_path`` as an amendment of the frozen ``parent_path``.

    The child must name its parent (``amends: <parent id>``); if the field is absent it is written
    into the child file before freezing. The parent's lock and registry entry stay as they are.
    """
    if not reason or not reason.strip():
        raise InputError("`--reason` is required: say why the frozen protocol is amended")
    parent_path, child_path = Path(parent_path), Path(child_path)
    report = verify(parent_path, registry_path=registry_path, check_inputs=False)
    if not report.ok:
        raise CheckFailed(f"{parent_path}: the parent does not verify; fix it before amending:\n{report.render()}")
    parent_lock = report.lock
    child = load_protocol(child_path)
    if child.amends is None:
        text = child_path.read_text("utf-8")
        line = f"amends: {parent_lock.protocol_id}  # written by `protocol amend`"
        text, n = re.subn(r"(?m)^amends:[ \t]*(null|~)?[ \t]*(#.*)?$", line, text, count=1)
        child_path.write_text(text if n else line + "\n" + text, "utf-8")
        child = load_protocol(child_path)
    if child.amends != parent_lock.protocol_id:
        raise InputError(
            f"{child_path}: field `amends` is {child.amends}, but the parent {parent_path.name} has id "
            f"{parent_lock.protocol_id}"
        )
    return freeze(
        child_path, signer, registry_path=registry_path or registry_path_for(parent_path),
        check_inputs=check_inputs, _parent=parent_lock, _reason=reason.strip(),
    )


@dataclass
class VerifyReport:
    """What ``protocol verify`` found; ``ok`` is False when any check failed."""

    protocol_path: Path
    lock: Lock | None = None
    protocol_id: str | None = None
    changes: list[FieldChange] = field(default_factory=list)
    free_text_changes: list[FieldChange] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.changes

    def render(self) -> str:
        lines = []
        if self.changes:
            lines.append("the protocol changed after freezing:")
            lines += [f"  {c}" for c in self.changes]
        lines += [f"FAILED: {f}" for f in self.failures]
        if self.free_text_changes:
            lines.append("free text or run settings changed (not part of the protocol id):")
            lines += [f"  {c}" for c in self.free_text_changes]
        lines += [f"note: {n}" for n in self.notes]
        if self.ok:
            lines.insert(0, f"OK: protocol {self.protocol_id} verifies (lock, signature, registry chain)")
        return "\n".join(lines)


def verify(
    protocol_path: str | Path,
    *,
    registry_path: str | Path | None = None,
    public_key_path: str | Path | None = None,
    check_inputs: bool = True,
) -> VerifyReport:
    """Recompute everything about a frozen protocol.

    Raises ``InputError`` (exit 2) when a file is missing or unreadable; returns a report whose
    ``ok`` is False (exit 1) when the protocol changed after freezing (with a field-level diff),
    the lock was edited, the signature fails, the key is not the trusted one, the registry chain is
    broken or lacks the lock, or the pinned inputs changed.
    """
    protocol_path = Path(protocol_path)
    lock_path = lock_path_for(protocol_path)
    report = VerifyReport(protocol_path)
    lock = read_lock(lock_path)
    report.lock = lock

    # 0. the plugins it pins must be the installed ones (before validating: an uninstalled family
    #    would otherwise read as an unknown one)
    from creditaudit import plugins

    stored_pins = lock.protocol.get("plugins") or []
    try:
        plugins.check_pins(stored_pins, source=str(protocol_path))
    except CheckFailed as exc:
        report.failures.append(str(exc))
        return report

    # 1. the lock's own consistency: its stored protocol must hash to its id
    try:
        stored = protocol_from_dict(lock.protocol, source=f"{lock_path.name} (stored protocol)")
    except InputError as exc:
        report.failures.append(f"the lock's stored protocol is not valid: {exc}")
        return report
    if protocol_id(stored) != lock.protocol_id:
        report.failures.append(f"{lock_path.name}: the lock was edited: its stored protocol does not hash to its id")

    # 2. the signature (and, when given, the trusted key)
    try:
        public = public_key_from_b64(lock.public_key)
    except ValueError as exc:
        report.failures.append(f"{lock_path.name}: field `public_key`: {exc}")
        return report
    if key_id(public) != lock.key_id:
        report.failures.append(f"{lock_path.name}: field `key_id` does not match `public_key`")
    if not verify_signature(public, lock.payload(), lock.signature):
        report.failures.append(f"{lock_path.name}: the signature does not verify (the lock was altered or forged)")
    if public_key_path is not None:
        trusted = load_public_key(public_key_path)
        if key_id(trusted) != lock.key_id:
            report.failures.append(
                f"{lock_path.name}: signed by key {lock.key_id[:16]}…, not by the trusted key "
                f"{key_id(trusted)[:16]}… in {Path(public_key_path).name}"
            )

    # 3. the protocol file now versus the frozen one
    current = load_protocol(protocol_path)
    if lock.protocol_file != protocol_path.name or stored.name != current.name:
        raise InputError(
            f"{lock_path}: this lock belongs to another protocol (field `protocol_file` {lock.protocol_file!r}, "
            f"field `name` {stored.name!r}; this is {protocol_path.name!r}, name {current.name!r}); "
            "freeze this protocol itself or use the lock that belongs to it"
        )
    report.protocol_id = protocol_id(current)
    if report.protocol_id != lock.protocol_id:
        report.changes = field_diff(identity_dict(stored), identity_dict(current))
        if not report.changes:  # pragma: no cover - same identity view but another hash is impossible
            report.failures.append("the protocol id differs from the lock's")
    else:
        # Through the current schema, so a field added since the freeze (at its default, or the
        # id would differ) is not reported as a change.
        report.free_text_changes = field_diff(protocol_dict(stored), protocol_dict(current))

    # 4. the registry chain and this lock's entry
    reg_path = Path(registry_path) if registry_path else registry_path_for(protocol_path)
    try:
        entries = read_registry(reg_path)
    except CheckFailed as exc:
        report.failures.append(str(exc))
        entries = []
    else:
        lock_sha = sha256_file(lock_path)
        mine = [e for e in entries if e.protocol_id == lock.protocol_id and e.lock_sha256 == lock_sha]
        if not entries:
            report.failures.append(f"{reg_path.name}: the registry is missing or empty; the freeze was not registered")
        elif not mine:
            report.failures.append(
                f"{reg_path.name}: no registry entry for this lock (protocol {lock.protocol_id[:16]}…, "
                "lock bytes as stored)"
            )
        if lock.parent_id is not None and not any(e.protocol_id == lock.parent_id for e in entries):
            report.failures.append(f"{reg_path.name}: the parent protocol {lock.parent_id[:16]}… is not registered")

    # 5. pinned inputs
    if check_inputs:
        try:
            directory = policy_dir(current, protocol_path)
        except InputError:  # a hub checkpoint absent from this machine's cache
            directory = Path(current.policy.path)
        if directory.is_dir():
            report.failures += input_problems(current, protocol_path)
        else:
            report.notes.append(f"policy directory {current.policy.path!r} not present here: its pins were not re-hashed")
    return report


@dataclass(frozen=True)
class FrozenProtocol:
    """A protocol that verified against its lock: what every later stage starts from."""

    protocol: Protocol
    lock: Lock
    path: Path

    @property
    def id(self) -> str:
        return self.lock.protocol_id

    @property
    def run_dir(self) -> Path:
        return self.path.parent


def require_frozen(protocol_path: str | Path, *, check_inputs: bool = True) -> FrozenProtocol:
    """Load a protocol and refuse (exit 1/2) unless it verifies against a valid lock."""
    report = verify(protocol_path, check_inputs=check_inputs)
    if not report.ok:
        raise CheckFailed(f"{protocol_path}: the protocol does not verify; no stage runs on it:\n{report.render()}")
    return FrozenProtocol(load_protocol(protocol_path), report.lock, Path(protocol_path).resolve())
