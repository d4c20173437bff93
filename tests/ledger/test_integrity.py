"""Integrity checks: corrupt each class and get its own, specific message."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from creditaudit.ledger import LEDGER_JSON, QUESTIONS, VERDICTS, check_integrity


def _rewrite(path, table):
    from creditaudit.artifacts import write_parquet_atomic

    write_parquet_atomic(table, path)


_UNATTESTED = "that no link record attests"


def _only(report, question):
    """The findings of ``question``; every other question must have passed (a leftover shard, which no
    link record attests, is also reported as not the intended file: that finding is set aside)."""
    leftovers = [f for f in report.findings if f.question == "intended" and _UNATTESTED in f.detail]
    others = [f.message for f in report.findings if f.question != question and f not in leftovers]
    assert not others, others
    found = [f for f in report.failed(question) if f not in leftovers or question == "intended"]
    assert found, f"no finding for {question}"
    for f in found:
        assert f.message.endswith(VERDICTS[question])
    return [f for f in found if f not in leftovers] or found


def _leftover_shard(run, rel):
    """A shard as an interrupted stage leaves it (the rows of its stage's attested table); its path."""
    source = "collect/trajectories.parquet" if rel.startswith("collect/") else (
        "replay/rollouts.parquet" if rel.endswith(".rollouts.parquet") else "replay/turns.parquet")
    _rewrite(run / rel, pq.read_table(run / source))
    return run / rel


def test_a_clean_run_passes_all_four_questions(ledgered_run):
    report = check_integrity(ledgered_run[0])
    assert report.ok, report.render()
    text = report.render()
    assert text.count("OK") == 4 and all(q in text for q in QUESTIONS.values())
    assert report.checked["readable"] >= 20  # every shard and table decoded


# ------------------------------------------------------------------------------ 1. intended


def test_a_manifest_pairing_a_name_with_another_path_is_not_the_intended_file(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    data = json.loads((run / LEDGER_JSON).read_text())
    for record in data["artifacts"]:
        if record["name"] == "replay.turns":
            record["path"] = "signals/credit.parquet"
    (run / "altered.json").write_text(json.dumps(data))
    report = check_integrity(run, ledger_path=run / "altered.json")
    found = _only(report, "intended")
    assert any("pairs the name `replay.turns` with this path, but `replay.turns` is replay/turns.parquet"
               in f.message and f.path == "signals/credit.parquet" for f in found)


def test_a_table_with_another_artifacts_columns_is_not_the_intended_file(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "replay/shards/t-0.turns.parquet")
    shard.write_bytes((run / "replay" / "rollouts.parquet").read_bytes())
    found = _only(check_integrity(run), "intended")
    assert len(found) == 1
    assert "its columns are not those of `replay.turn_shards`" in found[0].message


def test_a_file_stamped_with_another_protocol_is_not_the_intended_file(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "collect/shards/0000.parquet")
    table = pq.read_table(shard)
    stamp = pa.array(["a" * 64] * table.num_rows, pa.string())
    _rewrite(shard, table.set_column(0, pa.field("protocol_id", pa.string(), nullable=False), stamp))
    found = _only(check_integrity(run), "intended")
    assert [f.path for f in found] == ["collect/shards/0000.parquet"]
    assert "stamped with protocol aaaaaaaaaaaaaaaa…, not this run's" in found[0].message


def test_bytes_that_differ_from_the_attestation_and_the_manifest(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    path = run / "replay" / "turns.parquet"
    table = pq.read_table(path)
    _rewrite(path, table.slice(1))  # still a valid, readable turn table
    found = _only(check_integrity(run), "intended")
    messages = [f.message for f in found if f.path == "replay/turns.parquet"]
    assert any("are not what stage 'replay' attested in links/0002-replay.link.json" in m for m in messages)
    assert any("ledger/ledger.json manifest records" in m and "the ledger was not built from this file" in m
               for m in messages)


# ------------------------------------------------------------------------------ 2. written


def test_a_file_of_nul_bytes_is_not_written_correctly(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "collect/shards/0001.parquet")
    size = shard.stat().st_size
    shard.write_bytes(b"\x00" * size)
    found = _only(check_integrity(run), "written")
    assert [f.message for f in found] == [
        f"collect/shards/0001.parquet: all {size} bytes are NUL — space was allocated but data never written (its "
        "hash is still a valid hash): not written correctly"]


def test_a_truncated_parquet_file_is_not_written_correctly(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "replay/shards/t-0.rollouts.parquet")
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    found = _only(check_integrity(run), "written")
    assert "truncated Parquet: the footer magic PAR1 is missing at the end" in found[0].message


def test_truncated_json_is_not_written_correctly(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    path = run / "collect" / "determinism.json"
    path.write_bytes(path.read_bytes()[:20])
    report = check_integrity(run)
    written = report.failed("written")
    assert [f.path for f in written] == ["collect/determinism.json"]
    assert "not valid JSON" in written[0].message and written[0].message.endswith("not written correctly")
    # the same file also differs from its attestation: a separate question, a separate message
    assert any(f.path == "collect/determinism.json" for f in report.failed("intended"))
    assert not report.failed("readable") and not report.failed("evidence")


# ------------------------------------------------------------------------------ 3. readable


def test_a_shard_whose_row_group_cannot_be_decoded_is_not_fully_readable(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "collect/shards/0000.parquet")
    column = pq.read_metadata(shard).row_group(0).column(7)
    offset = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(shard.read_bytes())
    for k in range(offset + 2, offset + column.total_compressed_size - 2):
        data[k] ^= 0x5A  # framing and footer intact; the page itself is garbage
    shard.write_bytes(bytes(data))
    found = _only(check_integrity(run), "readable")
    assert found[0].path == "collect/shards/0000.parquet"
    assert "row group 0 of 1 cannot be decoded" in found[0].message


# ------------------------------------------------------------------------------ 4. evidence


def test_an_abstention_without_its_reason_lacks_the_evidence(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    path = run / "signals" / "credit.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[3, ["credit", "abstained", "abstain_reason"]] = [None, True, None]
    _rewrite(path, pa.Table.from_pandas(df, schema=pq.read_schema(path), preserve_index=False))
    report = check_integrity(run)
    evidence = report.failed("evidence")
    assert [f.path for f in evidence] == ["signals/credit.parquet"]
    assert ("1 abstained credit(s) have no abstention reason (first: subject 'implicit'" in evidence[0].message
            and evidence[0].message.endswith("lacks the evidence needed to act"))
    assert not report.failed("written") and not report.failed("readable")


def test_a_replay_summary_without_its_error_counts_lacks_the_evidence(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    path = run / "replay" / "summary.json"
    data = json.loads(path.read_text())
    del data["prefix_divergences"]
    path.write_text(json.dumps(data))
    evidence = check_integrity(run).failed("evidence")
    assert len(evidence) == 1 and evidence[0].path == "replay/summary.json"
    assert "has no `prefix_divergences` (the divergence count is the evidence" in evidence[0].message


def test_excluded_turns_without_a_status_lack_the_evidence(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    shard = _leftover_shard(run, "replay/shards/t-0.turns.parquet")
    table = pq.read_table(shard)
    status = pa.array(["skipped"] + table.column("status").to_pylist()[1:], pa.string())
    field = pa.field("status", pa.string(), nullable=False)
    _rewrite(shard, table.set_column(table.schema.get_field_index("status"), field, status))
    found = _only(check_integrity(run), "evidence")
    assert "1 turn(s) have no known exclusion status" in found[0].message and "'skipped'" in found[0].message


@pytest.mark.parametrize("rel", ["collect/shards/0000.parquet", "replay/shards/t-0.turns.parquet",
                                 "replay/shards/t-0.rollouts.parquet"])
def test_a_shard_left_in_a_finished_run_is_not_the_intended_file(ledgered_run, copy_run, rel):
    """A finished stage keeps no shards (its attested table holds every row); a shard found there —
    left by an interrupted stage, swapped in or put there by hand — is vouched for by nothing."""
    run = copy_run(ledgered_run[0])
    assert not (run / "collect" / "shards").exists() and not (run / "replay" / "shards").exists()
    _leftover_shard(run, rel)
    found = _only(check_integrity(run), "intended")
    assert [f.path for f in found] == [rel]
    command = "creditaudit " + rel.split("/")[0]
    assert f"a shard that no link record attests (left by an unfinished `{command}`" in found[0].message
    assert f"rerun `{command}` to finish the stage" in found[0].message


@pytest.mark.parametrize("rel", ["collect/notes.txt", "replay/extra/turns.parquet", "signals/.credit.parquet.tmp-1",
                                 "audit/figures/extra.png"])
def test_a_file_no_link_record_attests_is_not_the_intended_file(ledgered_run, copy_run, rel):
    run = copy_run(ledgered_run[0])
    (run / rel).parent.mkdir(parents=True, exist_ok=True)
    (run / rel).write_bytes((run / "replay" / "turns.parquet").read_bytes())
    report = check_integrity(run)
    unvouched = [f for f in report.failed("intended") if "no link record attests it" in f.message]
    assert [f.path for f in unvouched] == [rel]
    assert "nothing vouches for its bytes; delete it or rerun" in unvouched[0].message


def test_a_finished_run_leaves_no_file_unattested(ledgered_run):
    """Every file in a stage's directory of a finished run is an output of a link record."""
    from creditaudit.ledger.chain import walk_chain
    from creditaudit.protocol.lock import require_frozen

    run = ledgered_run[0]
    attested = set(walk_chain(run, require_frozen(run / "protocol.yaml")).attested)
    for top in ("collect", "replay", "signals", "audit", "ledger"):
        files = {p.relative_to(run).as_posix() for p in (run / top).rglob("*") if p.is_file()}
        assert files and files <= attested, files - attested


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_every_question_has_its_own_verdict(question):
    assert VERDICTS[question] and len(set(VERDICTS.values())) == len(VERDICTS)
