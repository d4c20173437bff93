"""The artifact catalogue: every file a run directory holds, by name.

An artifact has a *name* (``replay.turns``), a run-relative *path* or glob pattern
(``replay/turns.parquet``, ``replay/shards/*.parquet``), a *kind* (how its bytes are framed:
Parquet, JSON, PNG, text), the *stage* that writes it and the command that makes it, whether that
stage attests it in its link record, whether it is *raw* (data the ledger's producers may read) or
*derived* (a summary, a figure, the ledger itself), and the schema a Parquet artifact must have.

The ledger's manifest pairs every input it read as ``name <-> path <-> sha256``; the integrity
checks use the catalogue to know what each name must be. Stages added later (the training arms)
register their own artifacts with :func:`register_artifact`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

__all__ = [
    "ArtifactSpec",
    "CATALOGUE",
    "register_artifact",
    "artifact",
    "artifact_files",
    "spec_for_path",
    "LEDGER_JSON",
    "REPORT_DIR",
]

LEDGER_JSON = "ledger/ledger.json"
REPORT_DIR = "report"

Kind = Literal["parquet", "json", "png", "text", "yaml"]


@dataclass(frozen=True)
class ArtifactSpec:
    """One artifact of a run directory."""

    name: str
    """Catalogue name (``replay.turns``)."""
    pattern: str
    """Run-relative path, or a glob pattern for a set of files (shards, figures)."""
    kind: Kind
    """How its bytes are framed."""
    stage: str
    """The stage that writes it (the link record's name)."""
    command: str
    """The command that makes it (named in messages about a missing file)."""
    raw: bool = True
    """Raw data the ledger's producers may read (derived summaries and figures are not)."""
    attested: bool = True
    """Listed as an output of its stage's link record (shards are not: the concatenation is)."""
    stamped: bool = True
    """Carries the protocol id (a ``protocol_id`` column or field)."""
    schema: Callable[[], pa.Schema] | None = None
    """The Parquet schema it must have (checked without schema metadata), when fixed."""
    description: str = ""
    """What it holds."""

    @property
    def is_glob(self) -> bool:
        return any(ch in self.pattern for ch in "*?[")

    def matches(self, rel: str) -> bool:
        return fnmatch.fnmatchcase(rel, self.pattern) if self.is_glob else rel == self.pattern


def _collect_schema() -> pa.Schema:
    from creditaudit.replay.records import TURN_SCHEMA

    return TURN_SCHEMA


def _replay_turns_schema() -> pa.Schema:
    from creditaudit.replay.engine import TURN_TABLE_SCHEMA

    return TURN_TABLE_SCHEMA


def _replay_rollouts_schema() -> pa.Schema:
    from creditaudit.replay.engine import ROLLOUT_TABLE_SCHEMA

    return ROLLOUT_TABLE_SCHEMA


def _credit_schema() -> pa.Schema:
    from creditaudit.signals.base import CREDIT_SCHEMA

    return CREDIT_SCHEMA


CATALOGUE: dict[str, ArtifactSpec] = {}


def register_artifact(spec: ArtifactSpec) -> ArtifactSpec:
    """Add ``spec`` to the catalogue (a name is registered once; re-registering the same spec is a no-op)."""
    existing = CATALOGUE.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"artifact {spec.name!r} is already registered as {existing.pattern!r}")
    CATALOGUE[spec.name] = spec
    return spec


for _spec in (
    ArtifactSpec("protocol", "protocol.yaml", "yaml", "protocol", "creditaudit protocol init", attested=False,
                 stamped=False, description="the protocol as written (its identity is frozen in the lock)"),
    ArtifactSpec("lock", "protocol.lock.json", "json", "protocol", "creditaudit protocol freeze", attested=False,
                 stamped=False, description="the signed lock: protocol id, frozen protocol, deviations"),
    ArtifactSpec("registry", "registry.jsonl", "json", "protocol", "creditaudit protocol freeze", attested=False,
                 stamped=False, description="the hash-chained registry of freezes and amendments"),
    ArtifactSpec("tasks", "tasks.json", "json", "tasks", "creditaudit games",
                 description="the frozen task list with every game's hash"),
    ArtifactSpec("collect.trajectories", "collect/trajectories.parquet", "parquet", "collect", "creditaudit collect",
                 schema=_collect_schema, description="one row per collected turn"),
    ArtifactSpec("collect.shards", "collect/shards/*.parquet", "parquet", "collect", "creditaudit collect",
                 attested=False, schema=_collect_schema, description="one shard per task, concatenated above"),
    ArtifactSpec("collect.determinism", "collect/determinism.json", "json", "collect", "creditaudit collect",
                 stamped=False, description="the pre-collection determinism check (trace hash on n instances)"),
    ArtifactSpec("collect.summary", "collect/summary.json", "json", "collect", "creditaudit collect", raw=False,
                 description="the collection's counters"),
    ArtifactSpec("replay.turns", "replay/turns.parquet", "parquet", "replay", "creditaudit replay",
                 schema=_replay_turns_schema, description="one row per decision point: status, A_replay, noise floor"),
    ArtifactSpec("replay.rollouts", "replay/rollouts.parquet", "parquet", "replay", "creditaudit replay",
                 schema=_replay_rollouts_schema, description="one row per executed replay rollout"),
    ArtifactSpec("replay.turn_shards", "replay/shards/*.turns.parquet", "parquet", "replay", "creditaudit replay",
                 attested=False, schema=_replay_turns_schema, description="per-trajectory turn shards"),
    ArtifactSpec("replay.rollout_shards", "replay/shards/*.rollouts.parquet", "parquet", "replay",
                 "creditaudit replay", attested=False, schema=_replay_rollouts_schema,
                 description="per-trajectory rollout shards"),
    ArtifactSpec("replay.summary", "replay/summary.json", "json", "replay", "creditaudit replay", raw=False,
                 description="replay counters and the measurability map"),
    ArtifactSpec("signals.credit", "signals/credit.parquet", "parquet", "signals", "creditaudit signals",
                 schema=_credit_schema, description="one row per turn and family or control"),
    ArtifactSpec("signals.diagnostics", "signals/diagnostics/*.parquet", "parquet", "signals", "creditaudit signals",
                 description="each family's diagnostics (judge raw responses, parse outcomes, ...)"),
    ArtifactSpec("signals.summary", "signals/summary.json", "json", "signals", "creditaudit signals", raw=False,
                 description="abstentions, control strength, judge agreement, router"),
    ArtifactSpec("audit.document", "audit/audit.json", "json", "audit", "creditaudit audit", raw=False,
                 description="the audit's statistics, decisions and exclusions"),
    ArtifactSpec("audit.summary", "audit/summary.md", "text", "audit", "creditaudit audit", raw=False, stamped=False,
                 description="the audit's summary"),
    ArtifactSpec("audit.figures", "audit/figures/*.png", "png", "audit", "creditaudit audit", raw=False,
                 stamped=False, description="the audit's figures"),
    ArtifactSpec("ledger", LEDGER_JSON, "json", "ledger", "creditaudit ledger regenerate", raw=False,
                 description="every reported number with its inputs' hashes"),
    ArtifactSpec("report.markdown", "report/report.md", "text", "report", "creditaudit report", raw=False,
                 stamped=False, description="the report (Markdown)"),
    ArtifactSpec("report.html", "report/report.html", "text", "report", "creditaudit report", raw=False,
                 stamped=False, description="the report (HTML, figures embedded)"),
    ArtifactSpec("report.figures", "report/figures/*.png", "png", "report", "creditaudit report", raw=False,
                 stamped=False, description="the report's figures, drawn from ledger entries"),
    ArtifactSpec("links", "links/*.link.json", "json", "links", "any stage", attested=False, stamped=False,
                 description="signed in-toto link records"),
):
    register_artifact(_spec)


def artifact(name: str) -> ArtifactSpec:
    """The catalogue entry ``name`` (``KeyError`` with the known names otherwise)."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown artifact {name!r}; known: {', '.join(sorted(CATALOGUE))}") from None


def artifact_files(run_dir: Path, name: str) -> list[str]:
    """Run-relative paths of the files of artifact ``name`` present in ``run_dir`` (sorted)."""
    spec = artifact(name)
    if not spec.is_glob:
        return [spec.pattern] if (run_dir / spec.pattern).is_file() else []
    return sorted(p.relative_to(run_dir).as_posix() for p in run_dir.glob(spec.pattern) if p.is_file())


def spec_for_path(rel: str) -> ArtifactSpec | None:
    """The catalogue entry a run-relative path belongs to (a fixed path wins over a pattern)."""
    fixed = [s for s in CATALOGUE.values() if not s.is_glob and s.matches(rel)]
    if fixed:
        return fixed[0]
    matches = [s for s in CATALOGUE.values() if s.is_glob and s.matches(rel)]
    return sorted(matches, key=lambda s: -len(s.pattern))[0] if matches else None
