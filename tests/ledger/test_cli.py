"""``creditaudit ledger regenerate / verify / check`` and ``report`` on the command line: exit codes 0 / 1 / 2."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from creditaudit.cli import main


def _cli(args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def test_help(capsys):
    for args in (["ledger", "--help"], ["ledger", "regenerate", "--help"], ["ledger", "verify", "--help"],
                 ["ledger", "check", "--help"], ["report", "--help"]):
        assert _cli(args) == 0, args
    assert "byte-identical" in capsys.readouterr().out


def test_verify_and_check_pass_on_a_good_run(ledgered_run, capsys):
    run = ledgered_run[0]
    assert _cli(["ledger", "verify", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "recompute identically from the raw artifacts" in out and "link-record chain: OK" in out
    assert _cli(["ledger", "check", "--run", str(run)]) == 0
    assert capsys.readouterr().out.count(" OK (") == 4


def test_check_fails_with_the_question_that_failed(ledgered_run, copy_run, capsys):
    run = copy_run(ledgered_run[0])
    shard = run / "collect" / "shards" / "0000.parquet"  # left by an interrupted collection, then torn
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"\x00" * 4096)
    assert _cli(["ledger", "check", "--run", str(run)]) == 1
    out = capsys.readouterr().out
    assert "1. Is each hashed file the intended one (manifest name <-> path <-> hash, link records)? FAILED (1)" in out
    assert "collect/shards/0000.parquet: a shard that no link record attests" in out
    assert "2. Was each file written correctly? FAILED (1)" in out
    assert "collect/shards/0000.parquet: all" in out and "not written correctly" in out


def test_regenerate_refuses_a_broken_chain_with_exit_1(ledgered_run, copy_run, capsys):
    from creditaudit.artifacts import write_parquet_atomic

    run = copy_run(ledgered_run[0])
    before = (run / "ledger" / "ledger.json").read_bytes()
    path = run / "signals" / "credit.parquet"
    write_parquet_atomic(pq.read_table(path).slice(1), path)
    assert _cli(["ledger", "regenerate", "--run", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "signals/credit.parquet" in err and "no ledger is built from them" in err
    assert (run / "ledger" / "ledger.json").read_bytes() == before


def test_bad_usage_is_exit_2(tmp_path, capsys):
    assert _cli(["ledger", "regenerate", "--run", str(tmp_path)]) == 2
    assert "no protocol in the run directory" in capsys.readouterr().err
    assert _cli(["ledger", "verify", "--run", str(tmp_path)]) == 2
    assert _cli(["report", "--run", str(tmp_path)]) == 2


def test_verify_json_for_scripts(ledgered_run, copy_run, capsys):
    import json

    from creditaudit.artifacts import write_parquet_atomic

    run = ledgered_run[0]
    assert _cli(["ledger", "verify", "--run", str(run), "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    stored = json.loads((run / "ledger" / "ledger.json").read_text())
    assert ok["ok"] is True and ok["n_entries"] == len(stored["entries"]) and ok["differences"] == []
    assert ok["chain_ok"] is True

    import pyarrow as pa
    import pyarrow.compute as pc

    changed = copy_run(run)
    path = changed / "signals" / "credit.parquet"
    table = pq.read_table(path)
    doubled = pc.multiply(table.column("credit"), pa.scalar(2.0))
    write_parquet_atomic(table.set_column(table.schema.get_field_index("credit"), table.schema.field("credit"),
                                          doubled), path)
    assert _cli(["ledger", "verify", "--run", str(changed), "--json"]) == 1
    bad = json.loads(capsys.readouterr().out)
    assert bad["ok"] is False
    assert [c["path"] for c in bad["changed_inputs"]] == ["signals/credit.parquet"]
    kinds = {d["kind"] for d in bad["differences"]}
    assert "inputs" in kinds and bad["affected"]


def test_verify_reports_inputs_too_broken_to_recompute(ledgered_run, copy_run, capsys):
    # a row deleted from the credit table: no ledger computes from it, and verify says which input
    # changed instead of relaying the recomputation's traceback
    from creditaudit.artifacts import write_parquet_atomic

    run = copy_run(ledgered_run[0])
    path = run / "signals" / "credit.parquet"
    write_parquet_atomic(pq.read_table(path).slice(1), path)
    assert _cli(["ledger", "verify", "--run", str(run)]) == 1
    out = capsys.readouterr().out
    assert "FAILED: input signals/credit.parquet changed since the ledger was written" in out
    assert "no ledger can be recomputed from the changed inputs" in out and "Traceback" not in out


@pytest.mark.parametrize("command", [["ledger", "check"], ["ledger", "integrity"]])
def test_check_of_a_missing_run_is_bad_usage(command, tmp_path, capsys):
    """A run directory that does not exist (or holds no protocol) is bad usage, as for every other
    ``--run`` command: exit 2 with a one-line error, not exit 1 with an integrity report."""
    for run in (tmp_path / "no-such-run", tmp_path):
        assert _cli([*command, "--run", str(run)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert len(err.strip().splitlines()) == 1 and "no protocol in the run directory" in err, err


def test_rerunning_finished_stages_writes_nothing(ledgered_run, copy_run, capsys):
    """Every stage re-run on a finished run whose artifacts match their link records is skipped: no
    new link record, not one byte changed (a ``demo`` resume runs them all again)."""
    run = copy_run(ledgered_run[0])
    assert _cli(["report", "--run", str(run)]) == 0  # the one stage the fixture has not run
    capsys.readouterr()

    def snapshot():
        return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}

    before = snapshot()
    for stage in (["games"], ["collect"], ["replay"], ["signals"], ["audit"], ["ledger", "regenerate"], ["report"]):
        assert _cli([*stage, "--run", str(run)] + (["--quiet"] if stage[0] in ("games", "collect", "replay",
                                                                                 "signals") else [])) == 0, stage
        assert snapshot() == before, stage
    out = capsys.readouterr().out
    for said in ("replay already finished", "signals already computed", "audit already done",
                 "report already written"):
        assert said in out
