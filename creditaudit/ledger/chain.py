"""Walking the run's link-record chain (in-toto style stage attestations).

:func:`walk_chain` checks every record's signature against the protocol's key, its protocol id,
its sequence, and that every input a stage consumed is an output of an earlier stage with the same
digest — or a *root*: the protocol file, its lock and the registry as they are now, and the input
files the protocol pins (policy and judge model files inside the run directory). It then compares
every attested file's current bytes with the digest its latest producer recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from creditaudit.errors import CheckFailed
from creditaudit.protocol.canonical import sha256_file
from creditaudit.protocol.hub import is_hub_path
from creditaudit.protocol.links import LinkRecord, verify_links
from creditaudit.protocol.lock import FrozenProtocol, lock_path_for, policy_dir, registry_path_for

__all__ = ["Attested", "ChainResult", "chain_roots", "walk_chain"]


@dataclass(frozen=True)
class Attested:
    """The latest attestation of one file: its digest, the stage and the record that attested it."""

    digest: str
    stage: str
    record: str


@dataclass
class ChainResult:
    """The walk's outcome: the records, what each file should hold, and the first break (if any)."""

    records: list[LinkRecord] = field(default_factory=list)
    attested: dict[str, Attested] = field(default_factory=dict)
    error: str | None = None
    changed: list[tuple[str, str]] = field(default_factory=list)
    """(run-relative path, message) of every attested file whose bytes differ now or that is missing."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.changed

    def render(self) -> str:
        if self.ok:
            return f"OK: {len(self.records)} link records; every stage consumed what an earlier stage attested"
        lines = [f"FAILED: {self.error}"] if self.error else []
        lines += [f"FAILED: {message}" for _, message in self.changed]
        return "\n".join(lines)


def _rel(run_dir: Path, path: Path) -> str | None:
    try:
        return path.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return None


def chain_roots(frozen: FrozenProtocol) -> dict[str, str]:
    """Run-relative name -> digest of every file a stage may consume without an earlier stage making it."""
    run_dir = frozen.run_dir
    roots: dict[str, str] = {}
    for path in (frozen.path, lock_path_for(frozen.path), registry_path_for(frozen.path)):
        rel = _rel(run_dir, path)
        if rel is not None and path.is_file():
            roots[rel] = sha256_file(path)
    protocol = frozen.protocol
    # a hub checkpoint lives in the Hugging Face cache, outside the run, like any absolute path
    directory = None if is_hub_path(protocol.policy.path) else _rel(run_dir, policy_dir(protocol, frozen.path))
    if directory is not None:  # pinned policy files: the pins are the digests
        for name, digest in {**protocol.policy.model_files, **protocol.policy.tokenizer_files}.items():
            roots[name if directory == "." else f"{directory}/{name}"] = digest
    for spec in protocol.signals:  # a local judge model inside the run is an input identified by its files
        if getattr(spec, "family", None) == "judge" and getattr(spec, "backend", None) == "local" and spec.model != "policy":
            model = Path(spec.model) if Path(spec.model).is_absolute() else run_dir / spec.model
            rel = _rel(run_dir, model)
            if rel is not None and model.is_dir():
                for file in sorted(model.rglob("*")):
                    if file.is_file():
                        roots[f"{rel}/{file.relative_to(model).as_posix()}"] = sha256_file(file)
    for game in protocol.environment.games:  # user-supplied games pinned by the protocol
        rel = _rel(run_dir, run_dir / game.path) if not Path(game.path).is_absolute() else _rel(run_dir, Path(game.path))
        if rel is not None:
            roots[rel] = game.sha256
    return roots


def walk_chain(run_dir: str | Path, frozen: FrozenProtocol, *, skip_current: tuple[str, ...] = ()) -> ChainResult:
    """Walk the chain; never raises for a break (the result says where it broke).

    ``skip_current``: run-relative prefixes whose current bytes are not compared (the ledger and
    report, while they are being rebuilt).
    """
    run_dir = Path(run_dir)
    result = ChainResult()
    try:
        result.records = verify_links(run_dir, protocol_id=frozen.id, trusted_key_id=frozen.lock.key_id,
                                      roots=chain_roots(frozen), check_current=False)
    except CheckFailed as exc:
        result.error = str(exc)
        return result
    for record in result.records:
        external = set(record.statement["predicate"]["byproducts"].get("external_inputs", ()))
        for material in record.materials:  # a user's file (a precomputed credit file) as its first user saw it
            if material["name"] in external and material["name"] not in result.attested:
                result.attested[material["name"]] = Attested(material["digest"]["sha256"], record.stage,
                                                             f"links/{record.path.name}")
        for product in record.products:
            result.attested[product["name"]] = Attested(product["digest"]["sha256"], record.stage,
                                                        f"links/{record.path.name}")
    for name, att in sorted(result.attested.items()):
        if any(name.startswith(prefix) for prefix in skip_current):
            continue
        full = run_dir / name
        if not full.is_file():
            result.changed.append((name, f"{name}: attested by {att.record} (stage {att.stage}) but missing"))
        elif (digest := sha256_file(full)) != att.digest:
            result.changed.append((name, f"{name}: its bytes (sha256 {digest[:16]}…) are not what stage "
                                         f"{att.stage!r} attested in {att.record} ({att.digest[:16]}…)"))
    return result
