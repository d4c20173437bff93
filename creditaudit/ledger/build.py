"""Building, regenerating and verifying the ledger.

- :func:`compute_ledger` runs every active producer in this process and returns the ledger's
  bytes. Each producer's inputs are hashed before it reads them (and again after every producer
  ran: a file that changed meanwhile is refused).
- :func:`compute_in_fresh_processes` runs it in ``n`` fresh Python processes (``python -m
  creditaudit.ledger.build``), each with its own hash seed and one BLAS/OpenMP thread so the
  numbers do not depend on the machine's thread count.
- :func:`regenerate` refuses a run whose raw artifacts fail the integrity checks or the link
  chain, computes the ledger twice in fresh processes, and writes ``ledger/ledger.json``
  atomically — only when both outputs are byte-identical; a failed regeneration leaves the
  previous ledger in place. The write is attested by a link record (stage ``ledger``).
- :func:`verify_ledger` recomputes the ledger in a fresh process, compares it entry by entry with
  a stored one, names the first differing entry (both values), every entry whose inputs changed,
  and walks the link-record chain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditaudit.errors import CheckFailed, CreditAuditError, InputError
from creditaudit.ledger.catalogue import LEDGER_JSON, artifact, artifact_files
from creditaudit.ledger.model import (
    ArtifactRecord,
    Ledger,
    LedgerEntry,
    ProducerRecord,
    code_version,
    ledger_bytes,
    parse_ledger,
    read_ledger,
)
from creditaudit.ledger.producer import ProducerContext, active_producers
from creditaudit.protocol.canonical import canonical_bytes, sha256_bytes, sha256_file
from creditaudit.versions import dependency_versions

__all__ = [
    "PROTOCOL_FILE",
    "EntryDifference",
    "RegenerateResult",
    "VerifyResult",
    "protocol_path",
    "compute_ledger",
    "keep_ledger_inputs",
    "compute_in_fresh_processes",
    "regenerate",
    "verify_ledger",
    "compare_ledgers",
]

PROTOCOL_FILE = "protocol.yaml"
_IMPLICIT_INPUTS = ("protocol", "lock")


def protocol_path(run_dir: str | Path) -> Path:
    """The run's protocol file (``InputError`` naming the command that writes one when absent)."""
    path = Path(run_dir) / PROTOCOL_FILE
    if not path.is_file():
        raise InputError(f"{path}: no protocol in the run directory; `creditaudit protocol init {path}` writes one")
    return path


# ------------------------------------------------------------------------------------------ compute


def _input_files(run_dir: Path, producer) -> list[tuple[str, str]]:
    """(catalogue name, run-relative path) of every file ``producer`` reads; a missing required file
    is an ``InputError`` naming the command that makes it."""
    out = []
    for name in (*_IMPLICIT_INPUTS, *producer.inputs):
        spec = artifact(name)
        files = artifact_files(run_dir, name)
        if not files and not spec.is_glob and name not in producer.optional:
            raise InputError(
                f"{run_dir / spec.pattern}: missing ({spec.description or name}), needed by the ledger producer "
                f"{producer.name!r}; run `{spec.command}` first"
            )
        out += [(name, rel) for rel in files]
    return out


def compute_ledger(run_dir: str | Path, *, progress: Callable[[str, int, int], None] | None = None) -> bytes:
    """Run every active producer on ``run_dir`` in this process; returns the ledger's bytes."""
    from creditaudit.protocol.lock import require_frozen

    run_dir = Path(run_dir)
    frozen = require_frozen(protocol_path(run_dir))
    version = code_version()
    producers = active_producers(run_dir)
    inputs = {p.name: _input_files(run_dir, p) for p in producers}
    digests: dict[str, str] = {}
    manifest: dict[str, ArtifactRecord] = {}
    for files in inputs.values():  # hashed before any producer reads them
        for name, rel in files:
            if rel not in digests:
                digests[rel] = sha256_file(run_dir / rel)
                manifest[rel] = ArtifactRecord(name=name, path=rel, sha256=digests[rel], size=(run_dir / rel).stat().st_size)

    entries: dict[str, LedgerEntry] = {}
    for index, producer in enumerate(producers):
        ctx = ProducerContext(frozen, producer)
        used = {rel: digests[rel] for _, rel in inputs[producer.name]}
        for value in producer.function(ctx):
            if value.name in entries:
                raise RuntimeError(f"ledger entry {value.name!r} is produced by both {entries[value.name].producer!r} "
                                   f"and {producer.name!r}")
            entries[value.name] = LedgerEntry(
                name=value.name, value=_json(value.value, value.name), text=value.rendered(), producer=producer.name,
                inputs=dict(sorted(used.items())), protocol_id=frozen.id, code_version=version,
            )
        if progress:
            progress("ledger", index + 1, len(producers))
    for rel, digest in sorted(digests.items()):
        if sha256_file(run_dir / rel) != digest:
            raise CheckFailed(f"{rel}: changed while the ledger was being computed; run the command again")
    ledger = Ledger(
        protocol_id=frozen.id,
        code_version=version,
        versions=dependency_versions(),
        artifacts=[manifest[rel] for rel in sorted(manifest)],
        producers=[ProducerRecord(name=p.name, version=p.version, inputs=list(p.inputs), description=p.description)
                   for p in producers],
        entries=[entries[name] for name in sorted(entries)],
    )
    return ledger_bytes(ledger)


def _json(value: Any, name: str) -> Any:
    from creditaudit.protocol.canonical import to_json_value

    try:
        return to_json_value(value)
    except TypeError as exc:
        raise RuntimeError(f"ledger entry {name!r}: {exc}") from None


def _worker_env(hash_seed: int) -> dict[str, str]:
    import creditaudit

    env = dict(os.environ)
    env["PYTHONHASHSEED"] = str(hash_seed)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS"):
        env[var] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    package_root = str(Path(creditaudit.__file__).resolve().parent.parent)  # the same code as this process
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def compute_in_fresh_processes(run_dir: str | Path, n: int = 2, *, timeout_s: float = 3600.0) -> list[bytes]:
    """The ledger's bytes computed in ``n`` fresh Python processes (run concurrently).

    Each process gets another ``PYTHONHASHSEED`` (so nothing may depend on set or dict-of-str order)
    and one BLAS/OpenMP thread. A producer's ``InputError``/``CheckFailed`` is raised here with its
    message and exit code.
    """
    run_dir = Path(run_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="creditaudit-ledger-") as tmp:
        procs = []
        for i in range(n):
            out = Path(tmp) / f"ledger-{i}.json"
            cmd = [sys.executable, "-m", "creditaudit.ledger.build", str(run_dir), str(out)]
            procs.append((out, subprocess.Popen(cmd, env=_worker_env(i + 1), stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, cwd=tmp)))
        outputs = []
        for out, proc in procs:
            try:
                _, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for _, other in procs:
                    other.kill()
                raise CheckFailed(f"computing the ledger took longer than {timeout_s:.0f} s") from None
            error = out.with_suffix(".error.json")
            if error.exists():
                info = json.loads(error.read_text("utf-8"))
                cls = CheckFailed if info["exit_code"] == 1 else InputError
                raise cls(info["message"])
            if proc.returncode != 0 or not out.exists():
                tail = stderr.decode("utf-8", "replace").strip().splitlines()[-15:]
                raise CheckFailed("computing the ledger failed in a fresh process (exit code "
                                  f"{proc.returncode}):\n  " + "\n  ".join(tail))
            outputs.append(out.read_bytes())
    return outputs


def _worker_main(argv: list[str]) -> int:
    """``python -m creditaudit.ledger.build RUN_DIR OUT``: write the ledger's bytes to OUT."""
    run_dir, out = Path(argv[0]), Path(argv[1])
    try:
        data = compute_ledger(run_dir)
    except CreditAuditError as exc:
        out.with_suffix(".error.json").write_text(json.dumps({"exit_code": exc.exit_code, "message": str(exc)}))
        return exc.exit_code
    out.write_bytes(data)
    return 0


# ------------------------------------------------------------------------------------------ compare


@dataclass(frozen=True)
class EntryDifference:
    """One entry that differs between a stored and a recomputed ledger."""

    name: str
    kind: str
    """``value``, ``text``, ``inputs``, ``missing`` (stored only) or ``new`` (recomputed only)."""
    stored: LedgerEntry | None
    recomputed: LedgerEntry | None

    def render(self) -> str:
        def show(entry: LedgerEntry | None) -> str:
            if entry is None:
                return "(absent)"
            value = canonical_bytes(entry.value).decode()
            value = value if len(value) <= 160 else value[:157] + "..."
            return f"{entry.text!r} (value {value})"

        return (f"entry {self.name} differs ({self.kind}):\n  stored:     {show(self.stored)}\n"
                f"  recomputed: {show(self.recomputed)}")


def compare_ledgers(stored: Ledger, recomputed: Ledger) -> list[EntryDifference]:
    """Every entry whose value, text or input hashes differ, in entry-name order."""
    a, b = stored.entry_map(), recomputed.entry_map()
    out = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            out.append(EntryDifference(name, "missing" if y is None else "new", x, y))
        elif canonical_bytes(x.value) != canonical_bytes(y.value):
            out.append(EntryDifference(name, "value", x, y))
        elif x.text != y.text:
            out.append(EntryDifference(name, "text", x, y))
        elif x.inputs != y.inputs:
            out.append(EntryDifference(name, "inputs", x, y))
    return out


# ------------------------------------------------------------------------------------------ regenerate


@dataclass(frozen=True)
class RegenerateResult:
    """A regenerated ledger: where it is, its hash, and the proof of byte identity."""

    path: Path
    ledger: Ledger
    sha256: str
    n_entries: int
    identical_runs: int
    link: Path | None


def regenerate(run_dir: str | Path, *, signer: Any = None, ledger_path: str | Path | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> RegenerateResult:
    """Rebuild the ledger from the raw artifacts in two fresh processes and store it if both agree.

    Raises
    ------
    InputError
        No frozen protocol, a missing artifact, an artifact of another protocol (exit 2).
    CheckFailed
        The raw artifacts fail an integrity check or the link chain, or the two computations
        differ (exit 1). The stored ledger is left as it was.
    """
    from creditaudit.ledger.chain import walk_chain
    from creditaudit.ledger.integrity import check_integrity
    from creditaudit.protocol.links import StageLink
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.protocol.signing import load_signer

    run_dir = Path(run_dir)
    frozen = require_frozen(protocol_path(run_dir))
    target = Path(ledger_path) if ledger_path else run_dir / LEDGER_JSON
    if signer is None and _inside(frozen.run_dir, target):
        key = run_dir / "keys" / "creditaudit.key"
        if not key.is_file():
            raise InputError(f"{key}: no signing key; a ledger inside the run directory is attested by a link record "
                             "signed with the run's key (without it, write the ledger elsewhere: `--ledger FILE`)")
        signer = load_signer(key)
    integrity = check_integrity(run_dir, outputs=False)
    if not integrity.ok:
        raise CheckFailed("the run's artifacts fail the integrity checks; no ledger is built from them:\n"
                          + integrity.render(failures_only=True))
    chain = walk_chain(run_dir, frozen, skip_current=("ledger/", "report/"))
    if not chain.ok:
        raise CheckFailed("the link-record chain does not verify; no ledger is built from these artifacts:\n"
                          + chain.render())
    if progress:
        progress("ledger", 0, 2)
    first, second = compute_in_fresh_processes(run_dir, 2)
    if progress:
        progress("ledger", 2, 2)
    if first != second:
        a, b = parse_ledger(first, source="first computation"), parse_ledger(second, source="second computation")
        diffs = compare_ledgers(a, b)
        detail = diffs[0].render() if diffs else "the bytes differ outside the entries"
        raise CheckFailed(
            "two fresh computations of the ledger are not byte-identical (sha256 "
            f"{sha256_bytes(first)[:16]}… vs {sha256_bytes(second)[:16]}…); the stored ledger is unchanged. "
            f"First difference: {detail}"
        )
    ledger = parse_ledger(first, source="computed ledger")
    if ledger.protocol_id != frozen.id:  # pragma: no cover - producers stamp the run's id
        raise CheckFailed("the computed ledger is stamped with another protocol id")
    from creditaudit.artifacts import write_bytes_atomic

    root = frozen.run_dir  # absolute: link records name files relative to it
    inputs = [frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json")]
    inputs += [root / a.path for a in ledger.artifacts if artifact(a.name).attested]
    link_path = None
    if _inside(root, target) and _unchanged(root, target, first, frozen.id, signer.key_id):
        # the ledger stored and attested is byte-identical to both computations: nothing to rewrite
        link_path = sorted((root / "links").glob("*-ledger.link.json"))[-1]
    elif _inside(root, target):
        link = StageLink(root, "ledger", frozen.id, signer, command=["creditaudit", "ledger", "regenerate"],
                         parameters={"producers": [p.name for p in ledger.producers],
                                     "code_version": ledger.code_version, "identical_runs": 2},
                         inputs=inputs)
        with link:
            write_bytes_atomic(target, first)
            link.add_output(target.resolve())
        link_path = sorted((root / "links").glob("*-ledger.link.json"))[-1]
    else:
        write_bytes_atomic(target, first)
    return RegenerateResult(target, ledger, sha256_bytes(first), len(ledger.entries), 2, link_path)


def _unchanged(root: Path, target: Path, computed: bytes, protocol_id: str, key_id: str) -> bool:
    """Whether ``target`` already holds ``computed`` and the latest ledger link record still vouches
    for it and for every input it read."""
    from creditaudit.protocol.links import LINKS_DIR, read_link, stage_is_current

    if not (target.is_file() and target.read_bytes() == computed
            and stage_is_current(root, "ledger", protocol_id, key_id)):
        return False
    latest = read_link(sorted((root / LINKS_DIR).glob("*-ledger.link.json"))[-1])
    rel = target.resolve().relative_to(root.resolve()).as_posix()
    return rel in {p["name"] for p in latest.products}


def _inside(run_dir: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(run_dir.resolve())
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------------ verify


@dataclass
class VerifyResult:
    """What ``ledger verify`` found."""

    ledger_path: Path
    stored: Ledger
    recomputed: Ledger
    differences: list[EntryDifference] = field(default_factory=list)
    changed_inputs: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    """(path, stored sha256, current sha256) of every manifest file whose bytes changed."""
    affected: list[str] = field(default_factory=list)
    """Entries computed from a changed input."""
    chain: Any = None
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What differs without failing the check (dependency versions)."""

    @property
    def ok(self) -> bool:
        return not self.differences and not self.changed_inputs and not self.failures and (self.chain is None or self.chain.ok)

    def to_json(self) -> dict[str, Any]:
        """The result for scripts (``ledger verify --json``): ``ok``, the entry count, every difference
        with both values, changed inputs, entries they affect, failures and notes."""
        def value(entry: LedgerEntry | None) -> Any:
            return None if entry is None else {"value": entry.value, "text": entry.text}

        return {
            "ok": self.ok,
            "ledger": str(self.ledger_path),
            "n_entries": len(self.stored.entries),
            "differences": [{"name": d.name, "kind": d.kind, "stored": value(d.stored),
                             "recomputed": value(d.recomputed)} for d in self.differences],
            "changed_inputs": [{"path": p, "stored_sha256": old, "current_sha256": new}
                               for p, old, new in self.changed_inputs],
            "affected": list(self.affected),
            "failures": list(self.failures),
            "chain_ok": None if self.chain is None else bool(self.chain.ok),
            "notes": list(self.notes),
        }

    def render(self) -> str:
        lines: list[str] = []
        if self.differences:
            # A changed number says more than a changed input hash: show the first entry whose
            # value differs, else the first difference of any kind.
            rank = {"value": 0, "text": 1, "missing": 2, "new": 2, "inputs": 3}
            first = min(self.differences, key=lambda d: rank.get(d.kind, 4))
            lines.append(f"FAILED: {len(self.differences)} of {len(self.stored.entries)} ledger entries differ from "
                         "their recomputation from the raw artifacts; the first whose value differs:"
                         if first.kind == "value" else
                         f"FAILED: {len(self.differences)} of {len(self.stored.entries)} ledger entries differ from "
                         "their recomputation from the raw artifacts; the first:")
            lines.append("  " + first.render().replace("\n", "\n  "))
            lines.append("entries that differ: " + ", ".join(d.name for d in self.differences))
        for path, old, new in self.changed_inputs:
            lines.append(f"FAILED: input {path} changed since the ledger was written "
                         f"(sha256 {(old or '(absent)')[:16]}… -> {(new or '(absent)')[:16]}…)")
        if self.affected:
            lines.append(f"entries computed from a changed input ({len(self.affected)}): " + ", ".join(self.affected))
        lines += [f"FAILED: {f}" for f in self.failures]
        if self.chain is not None:
            lines.append("link-record chain: " + self.chain.render().replace("\n", "\n  "))
        lines += [f"note: {n}" for n in self.notes]
        if self.ok:
            lines.insert(0, f"OK: all {len(self.stored.entries)} ledger entries in {self.ledger_path} recompute "
                            "identically from the raw artifacts")
        return "\n".join(lines)


def verify_ledger(run_dir: str | Path, *, ledger_path: str | Path | None = None, walk_links: bool = True) -> VerifyResult:
    """Recompute the ledger (a fresh process) and compare it with the stored one.

    Raises ``InputError`` (exit 2) when the ledger is missing, not a ledger of this format, or
    belongs to another protocol; returns a result whose ``ok`` is False (exit 1) otherwise.
    """
    from creditaudit.ledger.chain import walk_chain
    from creditaudit.protocol.lock import require_frozen

    run_dir = Path(run_dir)
    frozen = require_frozen(protocol_path(run_dir))
    path = Path(ledger_path) if ledger_path else run_dir / LEDGER_JSON
    stored = read_ledger(path)
    if stored.protocol_id != frozen.id:
        raise InputError(f"{path}: the ledger belongs to protocol {stored.protocol_id[:16]}…, this run's is "
                         f"{frozen.id[:16]}…; verify it against the run it was built from")
    changed_inputs = []
    for record in stored.artifacts:
        full = run_dir / record.path
        current = sha256_file(full) if full.is_file() else None
        if current != record.sha256:
            changed_inputs.append((record.path, record.sha256, current))
    try:
        (data,) = compute_in_fresh_processes(run_dir, 1)
    except (CheckFailed, InputError) as exc:
        if not changed_inputs:
            raise
        # The inputs changed so much that no ledger computes from them: that is the finding.
        result = VerifyResult(path, stored, stored, changed_inputs=changed_inputs)
        result.failures.append("no ledger can be recomputed from the changed inputs: " + str(exc).splitlines()[0])
        changed = {p for p, *_ in changed_inputs}
        result.affected = [e.name for e in stored.entries if changed & set(e.inputs)]
        if walk_links:
            result.chain = walk_chain(run_dir, frozen)
        return result
    recomputed = parse_ledger(data, source="recomputed ledger")
    result = VerifyResult(path, stored, recomputed, compare_ledgers(stored, recomputed))
    if stored.versions != recomputed.versions:
        result.notes.append("dependency versions differ from the stored ledger's: " + ", ".join(
            f"{k} {stored.versions.get(k, '(absent)')} -> {recomputed.versions.get(k, '(absent)')}"
            for k in sorted(set(stored.versions) | set(recomputed.versions))
            if stored.versions.get(k) != recomputed.versions.get(k)))
    if stored.code_version != recomputed.code_version:
        result.failures.append(
            f"the ledger was written by code version {stored.code_version}, this is {recomputed.code_version}: "
            "its numbers are only guaranteed to regenerate with the code that wrote them (regenerate it)"
        )
    result.changed_inputs = changed_inputs
    changed = {p for p, *_ in result.changed_inputs}
    result.affected = [e.name for e in stored.entries if changed & set(e.inputs)]
    if walk_links:
        result.chain = walk_chain(run_dir, frozen)
    return result


if __name__ == "__main__":  # pragma: no cover - exercised through compute_in_fresh_processes
    sys.exit(_worker_main(sys.argv[1:]))


def keep_ledger_inputs(run_dir: str | Path, out_dir: str | Path) -> list[str]:
    """Copy a run's ledger and every raw artifact of its manifest into ``out_dir`` (same relative
    paths; a stage directory there is replaced whole, so nothing of an earlier copy lingers).

    ``out_dir`` is then a run directory without keys, links or policy from which
    :func:`compute_ledger` recomputes the ledger: what to archive or commit beside a published
    result. Returns the copied paths. ``CheckFailed`` when an artifact no longer has the bytes the
    ledger recorded (regenerate the ledger first).
    """
    import shutil

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    ledger = read_ledger(run_dir / LEDGER_JSON)
    for record in ledger.artifacts:
        if sha256_file(run_dir / record.path) != record.sha256:
            raise CheckFailed(f"{run_dir / record.path}: not the bytes the ledger recorded; run `creditaudit ledger "
                              "regenerate` first")
    paths = [LEDGER_JSON, *(a.path for a in ledger.artifacts)]
    for top in sorted({Path(p).parts[0] for p in paths}):
        if (out_dir / top).is_dir():
            shutil.rmtree(out_dir / top)
    for rel in paths:
        (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / rel, out_dir / rel)
    return paths
