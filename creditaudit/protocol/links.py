"""Stage attestations: signed link records in the in-toto layout, and the chain verifier.

A stage hashes its inputs *before* it runs and its outputs after, then writes a link record:
an in-toto Statement (``https://in-toto.io/Statement/v1``) whose subjects are the outputs and whose
predicate is an in-toto link (``https://in-toto.io/attestation/link/v0.3``: name, command,
materials, byproducts), wrapped in a DSSE envelope signed with the protocol key. Paths are
relative to the run directory (no machine path enters an artifact); digests are SHA-256 of bytes
as stored.

``verify_links`` walks the records in order: every signature must verify, every stage's protocol
id must be the run's, and every input must be an output of an earlier stage (or a root: the frozen
protocol and lock, or an input the protocol pins) with the same digest.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditaudit.artifacts import write_bytes_atomic
from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import canonical_bytes, sha256_file, to_json_value
from creditaudit.protocol.signing import Signer, key_id, pae, public_key_from_b64, verify_signature

__all__ = [
    "STATEMENT_TYPE",
    "LINK_PREDICATE_TYPE",
    "PAYLOAD_TYPE",
    "LINKS_DIR",
    "stage_is_current",
    "StageLink",
    "LinkRecord",
    "read_link",
    "verify_links",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
LINK_PREDICATE_TYPE = "https://in-toto.io/attestation/link/v0.3"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
LINKS_DIR = "links"


def _rel(run_dir: Path, path: str | Path) -> str:
    path = Path(path)
    full = path if path.is_absolute() else run_dir / path
    try:
        return full.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        raise InputError(f"{path}: stage inputs and outputs must lie inside the run directory {run_dir}") from None


def _digest_all(run_dir: Path, paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    out = []
    for name in sorted({_rel(run_dir, p) for p in paths}):
        full = run_dir / name
        if not full.is_file():
            raise InputError(f"{name}: stage file not found in the run directory")
        out.append({"name": name, "digest": {"sha256": sha256_file(full)}})
    return out


@dataclass
class StageLink:
    """Context manager that attests one stage run.

    Examples
    --------
    >>> # with StageLink(run_dir, "collect", pid, signer, command=[...], inputs=[lock]) as link:
    >>> #     ...write shards...; link.add_output(path)
    """

    run_dir: Path
    stage: str
    protocol_id: str
    signer: Signer
    command: list[str] = field(default_factory=list)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    inputs: list[str | Path] = field(default_factory=list)
    outputs: list[str | Path] = field(default_factory=list)
    external_inputs: list[str | Path] = field(default_factory=list)
    _materials: list[dict[str, Any]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)

    def __enter__(self) -> "StageLink":
        self._materials = _digest_all(self.run_dir, self.inputs)  # hashed before the stage runs
        return self

    def add_output(self, path: str | Path) -> None:
        self.outputs.append(path)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.write()

    def write(self) -> Path:
        """Hash the outputs, sign and write the link record; returns its path."""
        links_dir = self.run_dir / LINKS_DIR
        links_dir.mkdir(parents=True, exist_ok=True)
        sequence = len(list(links_dir.glob("*.link.json")))
        statement = {
            "_type": STATEMENT_TYPE,
            "subject": _digest_all(self.run_dir, self.outputs),
            "predicateType": LINK_PREDICATE_TYPE,
            "predicate": {
                "name": self.stage,
                "command": [str(c) for c in self.command],
                "materials": self._materials,
                "byproducts": {
                    "protocol_id": self.protocol_id,
                    "sequence": sequence,
                    "parameters": to_json_value(dict(self.parameters)),
                    **({"external_inputs": sorted({_rel(self.run_dir, p) for p in self.external_inputs})}
                       if self.external_inputs else {}),
                },
                "environment": {},
            },
        }
        payload = canonical_bytes(statement)
        envelope = {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": [
                {"keyid": self.signer.key_id, "sig": self.signer.sign(pae(PAYLOAD_TYPE, payload)), "publicKey": self.signer.public_key_b64}
            ],
        }
        path = links_dir / f"{sequence:04d}-{self.stage}.link.json"
        write_bytes_atomic(path, json.dumps(envelope, indent=2, sort_keys=True).encode() + b"\n")
        return path


@dataclass(frozen=True)
class LinkRecord:
    """A link record read back: its file, statement, and whether its signature verified."""

    path: Path
    statement: dict[str, Any]
    signature_ok: bool
    key_id: str

    @property
    def stage(self) -> str:
        return self.statement["predicate"]["name"]

    @property
    def protocol_id(self) -> str:
        return self.statement["predicate"]["byproducts"]["protocol_id"]

    @property
    def materials(self) -> list[dict[str, Any]]:
        return self.statement["predicate"]["materials"]

    @property
    def products(self) -> list[dict[str, Any]]:
        return self.statement["subject"]


def read_link(path: str | Path) -> LinkRecord:
    """Read a DSSE-wrapped link record and check its signature."""
    path = Path(path)
    try:
        envelope = json.loads(path.read_text("utf-8"))
        payload = base64.b64decode(envelope["payload"], validate=True)
        statement = json.loads(payload)
        sig = envelope["signatures"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise CheckFailed(f"{path.name}: unreadable link record ({exc.__class__.__name__}: {exc})") from None
    if envelope.get("payloadType") != PAYLOAD_TYPE or statement.get("_type") != STATEMENT_TYPE:
        raise CheckFailed(f"{path.name}: not an in-toto statement in a DSSE envelope")
    try:
        public = public_key_from_b64(sig["publicKey"])
    except (KeyError, ValueError):
        return LinkRecord(path, statement, False, sig.get("keyid", ""))
    ok = key_id(public) == sig.get("keyid") and verify_signature(public, pae(PAYLOAD_TYPE, payload), sig["sig"])
    return LinkRecord(path, statement, ok, sig.get("keyid", ""))


def stage_is_current(run_dir: str | Path, stage: str, protocol_id: str, key_id: str) -> bool:
    """Whether ``stage`` need not run again: its latest link record in ``run_dir`` is signed by
    ``key_id`` for ``protocol_id``, and every input it read and every output it wrote is still on
    disk with the recorded SHA-256.

    A resumed pipeline uses this to skip a finished stage; anything changed, missing or signed by
    another key makes the stage run again (and attest again).
    """
    run_dir = Path(run_dir)
    records = sorted((run_dir / LINKS_DIR).glob(f"*-{stage}.link.json"))
    if not records:
        return False
    try:
        record = read_link(records[-1])
    except CheckFailed:
        return False
    if not record.signature_ok or record.key_id != key_id or record.protocol_id != protocol_id:
        return False
    for entry in [*record.materials, *record.products]:
        full = run_dir / entry["name"]
        if not full.is_file() or sha256_file(full) != entry["digest"]["sha256"]:
            return False
    return bool(record.products)


def verify_links(
    run_dir: str | Path,
    *,
    protocol_id: str,
    trusted_key_id: str,
    roots: Mapping[str, str] | None = None,
    check_current: bool = True,
) -> list[LinkRecord]:
    """Walk the run's link records in sequence; raise ``CheckFailed`` naming the first break.

    ``roots`` maps run-relative names to SHA-256 digests that may be consumed without an earlier
    stage having produced them (pinned inputs). A record's ``external_inputs`` (a user's file that
    no stage writes, such as a precomputed credit file) are attested by the first record that
    consumes them: later records, and the current bytes, must match that digest. ``check_current``: also require every file's
    current bytes to match the digest the last stage that produced it recorded.
    """
    run_dir = Path(run_dir)
    paths = sorted((run_dir / LINKS_DIR).glob("*.link.json"))
    if not paths:
        raise CheckFailed(f"{run_dir / LINKS_DIR}: no link records; no stage has been attested")
    produced: dict[str, str] = dict(roots or {})
    records = []
    for index, path in enumerate(paths):
        record = read_link(path)
        if not record.signature_ok:
            raise CheckFailed(f"{path.name}: the signature does not verify (the record was altered or forged)")
        if record.key_id != trusted_key_id:
            raise CheckFailed(f"{path.name}: signed by key {record.key_id[:16]}…, not the protocol's key")
        if record.protocol_id != protocol_id:
            raise CheckFailed(f"{path.name}: stamped with protocol {record.protocol_id[:16]}…, not {protocol_id[:16]}…")
        if record.statement["predicate"]["byproducts"].get("sequence") != index:
            raise CheckFailed(f"{path.name}: sequence number out of order (a record was removed or renamed)")
        external = set(record.statement["predicate"]["byproducts"].get("external_inputs", ()))
        for material in record.materials:
            name, digest = material["name"], material["digest"]["sha256"]
            if name in external and name not in produced:
                produced[name] = digest  # a user's file, attested from its first use on
            if produced.get(name) != digest:
                raise CheckFailed(
                    f"{path.name}: stage {record.stage!r} consumed {name} with sha256 {digest[:16]}…, which no "
                    "earlier stage produced (or a pinned input) with that digest"
                )
        for product in record.products:
            produced[product["name"]] = product["digest"]["sha256"]
        records.append(record)
    if check_current:
        for name, digest in sorted(produced.items()):
            full = run_dir / name
            if full.is_file() and sha256_file(full) != digest:
                raise CheckFailed(f"{name}: its bytes changed after the stage that wrote it was attested")
    return records
