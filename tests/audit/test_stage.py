"""``creditaudit audit`` end to end on a small planted run: collect, replay, signals, audit."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from creditaudit.audit.stage import AUDIT_JSON, AuditDocument, run_audit
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.protocol.lock import require_frozen


@pytest.fixture(scope="module")
def audited(collected_run):
    from creditaudit.replay.stage import run_replay
    from creditaudit.signals.stage import run_signals

    run, signer = collected_run
    run_replay(run / "protocol.yaml", signer, executor="inline")
    run_signals(run / "protocol.yaml", signer)
    doc = run_audit(run / "protocol.yaml", signer)
    return run, signer, doc


def test_audit_document_is_typed_and_complete(audited):
    run, _, doc = audited
    frozen = require_frozen(run / "protocol.yaml")
    stored = AuditDocument.model_validate(json.loads((run / AUDIT_JSON).read_text()))
    assert stored == doc and stored.protocol_id == frozen.id
    names = {s.name for s in frozen.protocol.signals} | {c.name for c in frozen.protocol.controls}
    assert {s["subject"] for s in doc.subjects} == names
    assert {d["family"] for d in doc.decisions} == {s.name for s in frozen.protocol.signals}
    for decision in doc.decisions:  # every gate's inputs and outcome are recorded
        assert [g["gate"] for g in decision["gates"]] == frozen.protocol.hypotheses.decision_order
        assert decision["verdict"]
    # a two-task collection is far below the protocol's minimum: every family is INFEASIBLE
    assert {d["verdict"] for d in doc.decisions} <= {"INFEASIBLE", "UNDETERMINED", "INSTRUMENT_INVALID"}
    assert doc.statistics_settings["bootstrap_iterations"] == 500


def test_summary_wording_and_figures(audited):
    run, _, doc = audited
    text = (run / "audit" / "summary.md").read_text()
    assert doc.protocol_id in text
    # every verdict of this tiny run is reported as a null that is not an effect claim
    assert "inconclusive" in text or "no effect verdict" in text
    assert "no effect" not in text.replace("not shown to have no effect", "").replace("no effect verdict", "")
    for name in ("forest.png", "measurability.png"):
        data = (run / "audit" / "figures" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_audit_is_reproducible(audited):
    run, signer, _ = audited
    before = sha256_file(run / AUDIT_JSON)
    run_audit(run / "protocol.yaml", signer)
    assert sha256_file(run / AUDIT_JSON) == before


def test_signals_from_another_protocol_are_refused(audited, tmp_path, planted_policy_dir):
    from helpers import make_run

    run, _, _ = audited
    other, other_signer = make_run(tmp_path, planted_policy_dir, group=1)
    from creditaudit.replay.stage import run_replay

    run_replay(other / "protocol.yaml", other_signer, executor="inline")
    (other / "signals").mkdir()
    shutil.copy(run / "signals" / "credit.parquet", other / "signals" / "credit.parquet")
    with pytest.raises(InputError, match="credit table stamped with protocol.*a run directory never mixes protocols"):
        run_audit(other / "protocol.yaml", other_signer)


def test_missing_signals_is_a_clear_error(tmp_path, planted_policy_dir):
    from helpers import make_run

    from creditaudit.replay.stage import run_replay

    run, signer = make_run(tmp_path, planted_policy_dir, group=1)
    run_replay(run / "protocol.yaml", signer, executor="inline")
    with pytest.raises(InputError, match="no credit table; run `creditaudit signals` first"):
        run_audit(run / "protocol.yaml", signer)
