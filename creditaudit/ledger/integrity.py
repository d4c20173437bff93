"""Integrity checks on four separate questions (docs/design.md §7).

A hash proves only that bytes did not change; it does not prove that they are the right file, that
they were ever data, that they can still be read, or that they keep what a reader needs to act.
Each question is checked on its own and answered with its own message:

1. **intended** — is each hashed file the intended one? The ledger's manifest pairs every input's
   catalogue name with its path and hash; the link records say what each stage wrote. A file whose
   bytes differ from its attestation or from the manifest, a manifest that pairs a name with
   another artifact's path, a table whose columns are another artifact's, a file stamped with
   another protocol, or a file in a stage's directory that no link record attests (a shard left by
   an unfinished stage, a file put there by hand: nothing vouches for its bytes) is *not the
   intended file*.
2. **written** — was it written correctly? An empty file, a file of NUL bytes (its hash is valid,
   but it is not data), a Parquet file without its header or footer magic (truncated), a footer that
   cannot be parsed, JSON that does not parse, a PNG without its end chunk: *not written correctly*.
3. **readable** — is it fully readable now? Every row group of every Parquet file (shards
   included) is decoded, and the rows counted against the footer; figures are decoded: otherwise
   *not fully readable*.
4. **evidence** — does it keep the evidence needed to act? Every abstention has its reason, every
   excluded replay turn its status (and a no-counterfactual turn its draw count), every complete
   turn its A_replay and noise floor, the replay its divergence and restore-failure counts, the
   determinism check its trace hash, every judge call its parse outcome, the audit its exclusions
   and gate traces: otherwise the artifact *lacks the evidence needed to act*.

Questions 3 and 4 are asked only of files that passed question 2 (a file that was never written
correctly cannot be read); every failing file is named with its run-relative path.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditaudit.ledger.catalogue import CATALOGUE, LEDGER_JSON, ArtifactSpec, artifact_files, spec_for_path

__all__ = ["QUESTIONS", "VERDICTS", "Finding", "IntegrityReport", "check_integrity", "register_evidence_check"]

QUESTIONS: dict[str, str] = {
    "intended": "Is each hashed file the intended one (manifest name <-> path <-> hash, link records)?",
    "written": "Was each file written correctly?",
    "readable": "Is each file fully readable now (every row group and shard decoded)?",
    "evidence": "Does each artifact keep the evidence needed to act (exclusion reasons, error counts)?",
}

#: The phrase every finding of a question ends with.
VERDICTS: dict[str, str] = {
    "intended": "not the intended file",
    "written": "not written correctly",
    "readable": "not fully readable",
    "evidence": "lacks the evidence needed to act",
}

_OUTPUTS = ("ledger", "report.markdown", "report.html", "report.figures")
def _replay_statuses() -> set[str]:
    from creditaudit.replay.engine import STATUS

    return set(STATUS)


@dataclass(frozen=True)
class Finding:
    """One failed check: the question, the file and what is wrong with it."""

    question: str
    path: str
    detail: str

    @property
    def message(self) -> str:
        return f"{self.path}: {self.detail}: {VERDICTS[self.question]}"

    def __str__(self) -> str:
        return self.message


@dataclass
class IntegrityReport:
    """The answers to the four questions."""

    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: {q: 0 for q in QUESTIONS})

    @property
    def ok(self) -> bool:
        return not self.findings

    def failed(self, question: str) -> list[Finding]:
        return [f for f in self.findings if f.question == question]

    def render(self, *, failures_only: bool = False) -> str:
        lines = []
        for number, (question, text) in enumerate(QUESTIONS.items(), start=1):
            found = self.failed(question)
            if found:
                lines.append(f"{number}. {text} FAILED ({len(found)})")
                lines += [f"   {f.message}" for f in found]
            elif not failures_only:
                lines.append(f"{number}. {text} OK ({self.checked[question]} files)")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ helpers


def _all_nul(path: Path) -> bool:
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
    return True


def _files(run_dir: Path, *, outputs: bool) -> list[tuple[str, ArtifactSpec]]:
    out: dict[str, ArtifactSpec] = {}
    for name, spec in sorted(CATALOGUE.items()):
        if not outputs and name in _OUTPUTS:
            continue
        for rel in artifact_files(run_dir, name):
            owner = spec_for_path(rel)
            out.setdefault(rel, owner if owner is not None else spec)
    return sorted(out.items())


def _schema_difference(actual: Any, expected: Any) -> str | None:
    if actual.equals(expected, check_metadata=False):
        return None
    have = {f.name: str(f.type) for f in actual}
    want = {f.name: str(f.type) for f in expected}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    retyped = [f"{n} ({have[n]} instead of {want[n]})" for n in want if n in have and have[n] != want[n]]
    parts = ([f"lacks columns {', '.join(missing)}"] if missing else []) + \
            ([f"has unexpected columns {', '.join(extra)}"] if extra else []) + \
            ([f"retyped {', '.join(retyped)}"] if retyped else [])
    return "; ".join(parts) or "columns in another order or with other nullability"


# ------------------------------------------------------------------------------------------ 2. written


def _written(run_dir: Path, rel: str, spec: ArtifactSpec) -> str | None:
    path = run_dir / rel
    size = path.stat().st_size
    if size == 0:
        return "empty file (0 bytes): the write never happened"
    if _all_nul(path):
        return (f"all {size} bytes are NUL — space was allocated but data never written (its hash is still a "
                "valid hash)")
    if spec.kind == "parquet":
        with open(path, "rb") as handle:
            head = handle.read(4)
            handle.seek(max(0, size - 8))
            tail = handle.read(8)
        if head != b"PAR1":
            return "does not begin with the Parquet magic PAR1 (not a Parquet file, or its start was overwritten)"
        if tail[-4:] != b"PAR1":
            return "truncated Parquet: the footer magic PAR1 is missing at the end (the file was cut short)"
        footer = int.from_bytes(tail[:4], "little")
        if footer + 12 > size:
            return f"truncated Parquet: the footer claims {footer} bytes, the file holds {size}"
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pq.read_metadata(path)
        except (OSError, pa.ArrowException) as exc:
            return f"the Parquet footer cannot be parsed ({exc})"
        return None
    if spec.kind == "png":
        with open(path, "rb") as handle:
            head = handle.read(8)
            handle.seek(max(0, size - 12))
            tail = handle.read(12)
        if head != b"\x89PNG\r\n\x1a\n":
            return "does not begin with the PNG signature"
        if tail[4:8] != b"IEND":
            return "truncated PNG: no IEND chunk at the end"
        return None
    data = path.read_bytes()
    if b"\x00" in data:
        return f"holds NUL bytes (first at byte {data.index(0)}): a torn or padded write"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text ({exc})"
    if spec.kind == "json":
        lines = text.splitlines() if rel.endswith(".jsonl") else [text]
        for number, line in enumerate(lines, start=1):
            try:
                json.loads(line)
            except json.JSONDecodeError as exc:
                return f"not valid JSON ({exc}" + (f", line {number})" if len(lines) > 1 else ")")
    return None


# ------------------------------------------------------------------------------------------ 3. readable


def _readable(run_dir: Path, rel: str, spec: ArtifactSpec) -> str | None:
    path = run_dir / rel
    if spec.kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            handle = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            return f"cannot be opened ({exc})"
        meta = handle.metadata
        rows = 0
        for i in range(meta.num_row_groups):
            try:
                table = handle.read_row_group(i)
            except (OSError, pa.ArrowException) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                return f"row group {i} of {meta.num_row_groups} cannot be decoded ({first})"
            rows += table.num_rows
        if rows != meta.num_rows:
            return f"decoded {rows} rows, the footer records {meta.num_rows}"
        return None
    if spec.kind == "png":
        try:
            import matplotlib.image as mpimg

            mpimg.imread(path)
        except Exception as exc:  # noqa: BLE001 - any decoder error means the figure cannot be read
            return f"the image cannot be decoded ({type(exc).__name__}: {exc})"
    return None


# ------------------------------------------------------------------------------------------ 4. evidence


def _table(run_dir: Path, rel: str):
    import pyarrow.parquet as pq

    return pq.read_table(run_dir / rel)


def _credit_evidence(run_dir: Path, rel: str) -> list[str]:
    table = _table(run_dir, rel)
    missing = [c for c in ("abstained", "abstain_reason", "credit", "subject") if c not in table.column_names]
    if missing:
        return [f"has no column {', '.join(missing)} (abstentions and their reasons cannot be told apart from credit)"]
    df = table.select(["subject", "trajectory_id", "turn", "credit", "abstained", "abstain_reason"]).to_pandas()
    out = []
    reason = df.abstain_reason.astype(object)
    no_reason = df.abstained & (reason.isna() | (reason.astype(str).str.strip() == ""))
    if no_reason.any():
        first = df[no_reason].iloc[0]
        out.append(f"{int(no_reason.sum())} abstained credit(s) have no abstention reason (first: subject "
                   f"{first.subject!r}, trajectory {first.trajectory_id!r}, turn {int(first.turn)}); an abstention must "
                   "say why")
    silent = ~df.abstained & df.credit.isna()
    if silent.any():
        first = df[silent].iloc[0]
        out.append(f"{int(silent.sum())} credit(s) are undefined without an abstention (first: subject {first.subject!r}, "
                   f"trajectory {first.trajectory_id!r}, turn {int(first.turn)})")
    return out


def _replay_turns_evidence(run_dir: Path, rel: str) -> list[str]:
    table = _table(run_dir, rel)
    need = ["status", "a_replay", "sigma_floor", "pivotal", "alt_draws", "prefix_ok"]
    missing = [c for c in need if c not in table.column_names]
    if missing:
        return [f"has no column {', '.join(missing)}"]
    df = table.select(["trajectory_id", "turn", *need]).to_pandas()
    out = []
    unknown = ~df.status.isin(_replay_statuses())
    if unknown.any():
        first = df[unknown].iloc[0]
        out.append(f"{int(unknown.sum())} turn(s) have no known exclusion status (first: trajectory "
                   f"{first.trajectory_id!r}, turn {int(first.turn)}, status {first.status!r}; known: "
                   f"{', '.join(sorted(_replay_statuses()))})")
    complete = df.status == "complete"
    lacking = complete & (df.a_replay.isna() | df.sigma_floor.isna() | df.pivotal.isna())
    if lacking.any():
        first = df[lacking].iloc[0]
        out.append(f"{int(lacking.sum())} complete turn(s) lack A_replay, sigma_floor or pivotal (first: trajectory "
                   f"{first.trajectory_id!r}, turn {int(first.turn)})")
    no_cf = (df.status == "no_counterfactual") & ~(df.alt_draws > 0)
    if no_cf.any():
        first = df[no_cf].iloc[0]
        out.append(f"{int(no_cf.sum())} turn(s) excluded for want of a counterfactual record no alternative draws "
                   f"(first: trajectory {first.trajectory_id!r}, turn {int(first.turn)}): the spent budget is the "
                   "evidence for the exclusion")
    return out


def _replay_rollouts_evidence(run_dir: Path, rel: str) -> list[str]:
    table = _table(run_dir, rel)
    missing = [c for c in ("restore_ok", "outcome", "seed_stream") if c not in table.column_names]
    return [f"has no column {', '.join(missing)} (restore failures cannot be counted)"] if missing else []


def _json_keys(run_dir: Path, rel: str, keys: dict[str, str]) -> list[str]:
    data = json.loads((run_dir / rel).read_text("utf-8"))
    out = []
    for key, why in keys.items():
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            out.append(f"has no `{key}` ({why})")
    return out


def _replay_summary_evidence(run_dir: Path, rel: str) -> list[str]:
    out = _json_keys(run_dir, rel, {
        "prefix_divergences": "the divergence count is the evidence that replay is deterministic",
        "restore_failures": "the restore-failure count is the evidence that every rollout started from its state",
        "n_rollouts": "the number of executed rollouts",
        "measurability": "the measurability map",
    })
    data = json.loads((run_dir / rel).read_text("utf-8"))
    for key in ("prefix_divergences", "restore_failures"):
        if key in data and data[key] is not None and not isinstance(data[key], int):
            out.append(f"`{key}` is {data[key]!r}, not a count")
    return out


def _names_no_router(run_dir: Path) -> bool:
    """Whether the run's frozen protocol has no router (False when it cannot be read: then the
    report is required and its absence reported)."""
    from creditaudit.ledger.build import protocol_path
    from creditaudit.protocol.lock import require_frozen

    try:
        return require_frozen(protocol_path(run_dir), check_inputs=False).protocol.router is None
    except Exception:  # noqa: BLE001 - an unreadable protocol is reported by its own check
        return False


def _signals_summary_evidence(run_dir: Path, rel: str) -> list[str]:
    data = json.loads((run_dir / rel).read_text("utf-8"))
    out = []
    for group in ("families", "controls"):
        for name, entry in (data.get(group) or {}).items():
            if not isinstance(entry, dict) or "abstention_reasons" not in entry:
                out.append(f"{group} `{name}` has no `abstention_reasons`")
    router = data.get("router")
    if router is None and _names_no_router(run_dir):
        return out  # the router is optional: a protocol without one has no report of it
    if not isinstance(router, dict):
        out.append("has no `router` report (the router is published with its recall beside chance)")
    elif router.get("pivotal_recall") is None and not router.get("pivotal_recall_unavailable"):
        out.append("the router report has neither its pivotal recall nor the reason it is unavailable")
    return out


def _diagnostics_evidence(run_dir: Path, rel: str) -> list[str]:
    table = _table(run_dir, rel)
    if "parse_outcome" not in table.column_names:  # not a judge: nothing required beyond its stamp
        return []
    out = []
    df = table.select([c for c in ("trajectory_id", "turn", "parse_outcome", "raw_responses")
                       if c in table.column_names]).to_pandas()
    missing = df.parse_outcome.isna()
    if missing.any():
        first = df[missing].iloc[0]
        out.append(f"{int(missing.sum())} judge call(s) have no parse outcome (first: trajectory "
                   f"{first.trajectory_id!r}, turn {int(first.turn)})")
    if "raw_responses" not in df.columns:
        out.append("has no `raw_responses` column (the judge's answers are not recorded)")
    return out


def _audit_evidence(run_dir: Path, rel: str) -> list[str]:
    data = json.loads((run_dir / rel).read_text("utf-8"))
    out = _json_keys(run_dir, rel, {
        "exclusions.degenerate_trajectories": "which trajectories were excluded as degenerate",
        "exclusions.excluded_turns_by_status": "how many turns each exclusion reason removed",
    })
    for decision in data.get("decisions") or []:
        if not decision.get("gates"):
            out.append(f"the decision for `{decision.get('family')}` has no gate trace")
    if not data.get("decisions"):
        out.append("has no decisions")
    return out


_EVIDENCE: dict[str, Callable[[Path, str], list[str]]] = {
    "signals.credit": _credit_evidence,
    "replay.turns": _replay_turns_evidence,
    "replay.turn_shards": _replay_turns_evidence,
    "replay.rollouts": _replay_rollouts_evidence,
    "replay.summary": _replay_summary_evidence,
    "collect.determinism": lambda run_dir, rel: _json_keys(run_dir, rel, {
        "trace_hash": "the trajectory hash every instance reproduced",
        "n_instances": "on how many independent instances it was reproduced"}),
    "signals.summary": _signals_summary_evidence,
    "signals.diagnostics": _diagnostics_evidence,
    "audit.document": _audit_evidence,
}


def register_evidence_check(name: str, check: Callable[[Path, str], list[str]]) -> None:
    """Add the evidence check of an artifact (stages added later register theirs)."""
    _EVIDENCE[name] = check


# ------------------------------------------------------------------------------------------ 1. intended


def _stamp(run_dir: Path, rel: str, spec: ArtifactSpec) -> set[str] | None:
    """Protocol ids a stamped artifact carries (None: not stamped / cannot tell)."""
    if not spec.stamped:
        return None
    if spec.kind == "parquet":
        import pyarrow.parquet as pq

        handle = pq.ParquetFile(run_dir / rel)
        if "protocol_id" not in handle.schema_arrow.names:
            return set()
        return {str(v) for v in handle.read(columns=["protocol_id"]).column(0).unique().to_pylist()}
    if spec.kind == "json" and not rel.endswith(".jsonl"):
        data = json.loads((run_dir / rel).read_text("utf-8"))
        if isinstance(data, dict) and "protocol_id" in data:
            return {str(data["protocol_id"])}
    return None


def _intended_content(run_dir: Path, rel: str, spec: ArtifactSpec, protocol_id: str | None) -> list[str]:
    out = []
    if spec.kind == "parquet" and spec.schema is not None:
        import pyarrow.parquet as pq

        difference = _schema_difference(pq.read_schema(run_dir / rel), spec.schema())
        if difference:
            out.append(f"its columns are not those of `{spec.name}` ({difference})")
    if protocol_id is not None:
        ids = _stamp(run_dir, rel, spec)
        if ids is not None and spec.kind == "parquet" and not ids and spec.name != "signals.diagnostics":
            out.append("carries no protocol_id stamp")
        elif ids and ids != {protocol_id}:
            out.append(f"stamped with protocol {', '.join(sorted(i[:16] + '…' for i in ids))}, not this run's "
                       f"{protocol_id[:16]}…")
    return out


def _manifest(run_dir: Path, ledger_path: Path) -> tuple[list[Finding], int]:
    from creditaudit.errors import InputError
    from creditaudit.ledger.model import read_ledger
    from creditaudit.protocol.canonical import sha256_file

    try:
        ledger = read_ledger(ledger_path)
    except InputError:
        return [], 0  # an unreadable ledger is answered by question 2
    rel_ledger = ledger_path.relative_to(run_dir).as_posix() if ledger_path.is_relative_to(run_dir) else str(ledger_path)
    findings = []
    for record in ledger.artifacts:
        spec = CATALOGUE.get(record.name)
        where = f"{rel_ledger} manifest"
        if spec is None:
            findings.append(Finding("intended", record.path, f"{where} names it `{record.name}`, which is no known artifact"))
            continue
        if not spec.matches(record.path):
            findings.append(Finding("intended", record.path, f"{where} pairs the name `{record.name}` with this path, but "
                                                             f"`{record.name}` is {spec.pattern}"))
            continue
        full = run_dir / record.path
        if not full.is_file():
            findings.append(Finding("intended", record.path, f"{where} lists it as `{record.name}` but it is missing"))
        elif (digest := sha256_file(full)) != record.sha256:
            findings.append(Finding("intended", record.path,
                                    f"sha256 {digest[:16]}…, but the {where} records {record.sha256[:16]}… for "
                                    f"`{record.name}`: the ledger was not built from this file"))
    return findings, len(ledger.artifacts)


def _stage_dirs(*, outputs: bool) -> list[str]:
    """The run-relative directories the stages write (every file in them must be attested)."""
    dirs = {spec.pattern.split("/", 1)[0] for spec in CATALOGUE.values()
            if "/" in spec.pattern and spec.stage not in ("protocol", "links")}
    if not outputs:
        dirs -= {CATALOGUE[name].pattern.split("/", 1)[0] for name in _OUTPUTS if name in CATALOGUE}
    return sorted(dirs)


def _unvouched(run_dir: Path, attested: set[str], *, outputs: bool) -> list[Finding]:
    """A finding for every file in a stage's directory that no link record attests."""
    findings = []
    for top in _stage_dirs(outputs=outputs):
        base = run_dir / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_dir():
                continue
            rel = path.relative_to(run_dir).as_posix()
            if rel in attested:
                continue
            spec = spec_for_path(rel)
            if spec is not None and not spec.attested:
                detail = (f"a shard that no link record attests (left by an unfinished `{spec.command}`, or put "
                          f"here by hand); rerun `{spec.command}` to finish the stage (it removes its shards once "
                          "their concatenation is attested)")
            else:
                rerun = f"rerun `{spec.command}`" if spec is not None else "rerun the stage that writes it"
                detail = (f"no link record attests it (a file put here by hand, or left by an interrupted write): "
                          f"nothing vouches for its bytes; delete it or {rerun}")
            findings.append(Finding("intended", rel, detail))
    return findings


# ------------------------------------------------------------------------------------------ the checks


def check_integrity(run_dir: str | Path, *, outputs: bool = True, ledger_path: str | Path | None = None,
                    links: bool = True) -> IntegrityReport:
    """Answer the four questions for every artifact in ``run_dir``.

    Parameters
    ----------
    outputs : bool
        Also check the ledger and the report (``False`` while they are being rebuilt).
    ledger_path : path, optional
        The ledger whose manifest is checked (default ``ledger/ledger.json`` when ``outputs``).
    links : bool
        Walk the link-record chain (needs the frozen protocol).
    """
    import creditaudit.ledger.producers  # noqa: F401  (later stages register their artifacts and checks)

    run_dir = Path(run_dir)
    report = IntegrityReport()
    files = _files(run_dir, outputs=outputs)
    protocol_id = None
    frozen = None
    try:
        from creditaudit.ledger.build import protocol_path
        from creditaudit.protocol.lock import require_frozen

        frozen = require_frozen(protocol_path(run_dir), check_inputs=False)
        protocol_id = frozen.id
    except Exception as exc:  # noqa: BLE001 - reported as a finding of question 1, never a crash
        report.findings.append(Finding("intended", "protocol.yaml", f"the run's protocol does not verify ({exc})"))

    written_ok: list[tuple[str, ArtifactSpec]] = []
    for rel, spec in files:
        report.checked["written"] += 1
        problem = _written(run_dir, rel, spec)
        if problem:
            report.findings.append(Finding("written", rel, problem))
        else:
            written_ok.append((rel, spec))

    readable_ok: list[tuple[str, ArtifactSpec]] = []
    for rel, spec in written_ok:
        report.checked["readable"] += 1
        problem = _readable(run_dir, rel, spec)
        if problem:
            report.findings.append(Finding("readable", rel, problem))
        else:
            readable_ok.append((rel, spec))

    # 1. intended: the link records, the ledger's manifest, and what each file holds
    if links and frozen is not None:
        from creditaudit.ledger.chain import walk_chain

        chain = walk_chain(run_dir, frozen, skip_current=() if outputs else ("ledger/", "report/"))
        if chain.error:
            report.findings.append(Finding("intended", "links/", f"the link-record chain does not verify ({chain.error})"))
        for rel, message in chain.changed:
            report.findings.append(Finding("intended", rel, message.split(": ", 1)[1]))
        report.checked["intended"] += len(chain.attested)
        if chain.error is None:  # a broken chain attests nothing: its error is the finding
            report.findings += _unvouched(run_dir, set(chain.attested), outputs=outputs)
    if outputs:
        target = Path(ledger_path) if ledger_path else run_dir / LEDGER_JSON
        if target.is_file():
            findings, n = _manifest(run_dir, target)
            report.findings += findings
            report.checked["intended"] += n
    intended_ok: list[tuple[str, ArtifactSpec]] = []
    for rel, spec in readable_ok:
        problems = _intended_content(run_dir, rel, spec, protocol_id)
        report.findings += [Finding("intended", rel, p) for p in problems]
        if not problems:
            intended_ok.append((rel, spec))

    # 4. evidence (asked of files that hold the artifact they are named for)
    for rel, spec in intended_ok:
        check = _EVIDENCE.get(spec.name)
        if check is None:
            continue
        report.checked["evidence"] += 1
        try:
            problems = check(run_dir, rel)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            problems = [f"its evidence cannot be read ({type(exc).__name__}: {exc})"]
        report.findings += [Finding("evidence", rel, p) for p in problems]
    order = list(QUESTIONS)
    report.findings.sort(key=lambda f: (order.index(f.question), f.path))
    return report
