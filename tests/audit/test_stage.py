"""``creditaudit audit`` end to end on a small planted run: collect, replay, signals, audit."""

from __future__ import annotations

import json
import shutil

import pandas as pd
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


def test_the_statistics_table_is_audit_json_in_long_form(audited):
    # independent of the reshaping code: walk audit.json's subjects and look every number up
    run, _, doc = audited
    table = pq.read_table(run / "audit" / "statistics.parquet").to_pandas()
    assert set(table.protocol_id) == {doc.protocol_id}
    assert not table.duplicated(["subject", "statistic"]).any()
    for subject in doc.subjects:
        rows = table[table.subject == subject["subject"]].set_index("statistic")
        for key, value in subject.items():
            if key in ("subject", "kind", "of", "note") or key.endswith(("ci_low", "ci_high")):
                continue
            got = rows.loc[key, "value"]
            assert (value is None and got != got) or got == pytest.approx(float(value)), (subject["subject"], key)
        est = rows.loc["estimate"]
        assert (subject["ci_low"] is None and est.ci_low != est.ci_low) or est.ci_low == subject["ci_low"]
        sign = rows.loc["sign_agreement"]
        assert (subject["sign_ci_high"] is None and sign.ci_high != sign.ci_high) or sign.ci_high == subject["sign_ci_high"]


def test_export_writes_replay_truth_beside_every_credit(audited, tmp_path):
    from typer.testing import CliRunner

    from creditaudit.cli import app
    from creditaudit.replay.collect import TRAJECTORIES
    from creditaudit.replay.stage import TURNS
    from creditaudit.signals.stage import CREDIT

    run, _, doc = audited
    out = tmp_path / "turns.parquet"
    result = CliRunner().invoke(app, ["export", "--run", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out).to_pandas().set_index(["trajectory_id", "turn"])
    collected = pq.read_table(run / TRAJECTORIES).to_pandas()
    assert len(table) == len(collected)
    replay = pq.read_table(run / TURNS).to_pandas().set_index(["trajectory_id", "turn"])
    credit = pq.read_table(run / CREDIT).to_pandas()
    subjects = [s["subject"] for s in doc.subjects]
    assert [c for c in table.columns if c.startswith("credit__")] == [f"credit__{s}" for s in subjects]
    for key, row in replay.iterrows():
        assert (row.a_replay != row.a_replay and table.loc[key, "a_replay"] != table.loc[key, "a_replay"]) or \
            table.loc[key, "a_replay"] == row.a_replay
        assert table.loc[key, "status"] == row.status
    for rec in credit.itertuples():
        got = table.loc[(rec.trajectory_id, rec.turn), f"credit__{rec.subject}"]
        assert (rec.credit != rec.credit and got != got) or got == rec.credit
        reason = table.loc[(rec.trajectory_id, rec.turn), f"abstain_reason__{rec.subject}"]
        assert (pd.isna(reason) and pd.isna(rec.abstain_reason)) or reason == rec.abstain_reason
    degenerate = set(doc.exclusions["degenerate_trajectories"])
    expected_included = (table.status == "complete") & ~table.index.get_level_values(0).isin(degenerate)
    assert (table.included == expected_included).all()
    # never overwritten: a second export to the same path is bad usage and leaves the file alone
    from creditaudit.cli import main

    before = out.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--run", str(run), "--out", str(out)])
    assert exit_info.value.code == 2 and out.read_bytes() == before


def test_audit_json_flag_prints_the_document(audited):
    from typer.testing import CliRunner

    from creditaudit.cli import app

    run, _, doc = audited
    result = CliRunner().invoke(app, ["audit", "--run", str(run), "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["protocol_id"] == doc.protocol_id
    assert {d["family"]: d["verdict"] for d in printed["decisions"]} == {d["family"]: d["verdict"] for d in doc.decisions}
