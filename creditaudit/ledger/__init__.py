"""The ledger: artifact manifest, number producers, byte-identical regeneration, integrity checks, report.

Every reported number is a :class:`LedgerEntry` computed by a registered producer
(:func:`producer`) from raw artifacts named in the artifact catalogue (:data:`CATALOGUE`):
``regenerate`` rebuilds all entries twice in fresh processes and stores ``ledger/ledger.json``
only when both are byte-identical; ``verify_ledger`` recomputes and names the first differing
entry; ``check_integrity`` answers the four integrity questions; ``write_report`` renders the
Markdown/HTML report from the ledger alone.
"""

from creditaudit.ledger.build import (
    EntryDifference,
    RegenerateResult,
    VerifyResult,
    compare_ledgers,
    compute_in_fresh_processes,
    compute_ledger,
    regenerate,
    verify_ledger,
)
from creditaudit.ledger.catalogue import CATALOGUE, LEDGER_JSON, ArtifactSpec, artifact_files, register_artifact
from creditaudit.ledger.chain import ChainResult, walk_chain
from creditaudit.ledger.integrity import QUESTIONS, VERDICTS, Finding, IntegrityReport, check_integrity
from creditaudit.ledger.model import (
    LEDGER_VERSION,
    ArtifactRecord,
    Ledger,
    LedgerEntry,
    ProducerRecord,
    code_version,
    read_ledger,
)
from creditaudit.ledger.producer import PRODUCERS, Producer, ProducerContext, Value, active_producers, producer
from creditaudit.ledger.report import ReportResult, render_markdown, write_report

__all__ = [
    "CATALOGUE",
    "LEDGER_JSON",
    "LEDGER_VERSION",
    "PRODUCERS",
    "QUESTIONS",
    "VERDICTS",
    "ArtifactRecord",
    "ArtifactSpec",
    "ChainResult",
    "EntryDifference",
    "Finding",
    "IntegrityReport",
    "Ledger",
    "LedgerEntry",
    "Producer",
    "ProducerContext",
    "ProducerRecord",
    "RegenerateResult",
    "ReportResult",
    "Value",
    "VerifyResult",
    "active_producers",
    "artifact_files",
    "check_integrity",
    "code_version",
    "compare_ledgers",
    "compute_in_fresh_processes",
    "compute_ledger",
    "producer",
    "read_ledger",
    "register_artifact",
    "regenerate",
    "render_markdown",
    "verify_ledger",
    "walk_chain",
    "write_report",
]
