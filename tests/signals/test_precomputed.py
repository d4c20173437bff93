"""The ``precomputed`` family: a user's per-turn credit file, checked row by row and attested.

End to end on the planted environment: the planted true effects of each collected action (computed
exactly by the environment, never by creditaudit's audit), written by "the user" as CSV, are audited
to H1; the same values shuffled within trajectory to H3; negated to H2.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from creditaudit.cli import main
from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.signals.families.precomputed import precomputed_family, read_credit_file

COLLECTED = {("a", 0), ("a", 1), ("a", 2), ("b", 0)}


def _cli(args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def _write(path, frame: pd.DataFrame):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_each_format_reads_to_the_same_credit_with_nan_and_missing_as_abstentions(tmp_path, suffix):
    path = tmp_path / f"credit{suffix}"
    _write(path, pd.DataFrame({"trajectory_id": ["a", "a", "b"], "turn": [0, 2, 0],
                               "credit": [0.5, float("nan"), -1.25]}))
    values, reasons, n_rows, columns = read_credit_file(path, COLLECTED)
    assert values == {("a", 0): 0.5, ("b", 0): -1.25}
    assert reasons == {("a", 2): "nan"}  # ("a", 1) has no row: the family marks it `missing`
    assert n_rows == 3 and columns == ["trajectory_id", "turn", "credit"]


def test_an_abstain_reason_column_is_carried_per_turn(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"trajectory_id": "a", "turn": 0, "credit": null, "abstain_reason": "no_judge"}\n'
                    '{"trajectory_id": "a", "turn": 1, "credit": 2}\n')
    values, reasons, _, columns = read_credit_file(path, COLLECTED)
    assert values == {("a", 1): 2.0} and reasons == {("a", 0): "no_judge"}
    assert columns == ["trajectory_id", "turn", "credit", "abstain_reason"]


BAD = {
    "missing column": ("trajectory_id,turn,score\na,0,1\n", r"c\.csv: column `credit` missing"),
    "turn not collected": ("trajectory_id,turn,credit\na,0,1\na,7,1\n", r"c\.csv line 3: \(a, turn 7\) is not a collected"),
    "unknown trajectory": ("trajectory_id,turn,credit\nzz,0,1\n", r"c\.csv line 2: \(zz, turn 0\) is not a collected"),
    "duplicate key": ("trajectory_id,turn,credit\na,0,1\nb,0,1\na,0,2\n",
                      r"c\.csv line 4: \(a, turn 0\) is a duplicate of line 2"),
    "non-numeric credit": ("trajectory_id,turn,credit\na,0,1\na,1,high\n", r"c\.csv line 3: `credit` is 'high', not a number"),
    "non-integer turn": ("trajectory_id,turn,credit\na,one,1\n", r"c\.csv line 2: `turn` is 'one', not an integer"),
    "credit and reason": ("trajectory_id,turn,credit,abstain_reason\na,0,1,judge_failed\n",
                          r"c\.csv line 2: the row gives both a credit"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_malformed_file_class_names_the_file_and_row(tmp_path, case):
    text, message = BAD[case]
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises(InputError, match=message):
        read_credit_file(tmp_path / "c.csv", COLLECTED, shown="c.csv")


def test_parquet_rows_are_numbered_from_one(tmp_path):
    path = tmp_path / "c.parquet"
    _write(path, pd.DataFrame({"trajectory_id": ["a", "a"], "turn": [0, 0], "credit": [1.0, 2.0]}))
    with pytest.raises(InputError, match=r"c\.parquet row 2: \(a, turn 0\) is a duplicate of row 1"):
        read_credit_file(path, COLLECTED, shown="c.parquet")


def test_the_factory_checks_its_arguments():
    assert precomputed_family(name="x", path="c.csv").neutral == 0.0
    assert precomputed_family(name="x", path="c.csv", neutral=0.5).neutral == 0.5
    assert precomputed_family(name="x", path="c.csv", centre=True).neutral == "trajectory-mean"
    with pytest.raises(ValueError, match="`neutral` and `centre` exclude each other"):
        precomputed_family(name="x", path="c.csv", neutral=1.0, centre=True)
    with pytest.raises(ValueError, match="relative to the run directory"):
        precomputed_family(name="x", path="/abs/c.csv")
    with pytest.raises(ValueError, match=r"must end in one of"):
        precomputed_family(name="x", path="c.xlsx")


# ----------------------------------------------------------------------------- end to end

SIGNALS = ("truth", "shuffled", "negated")


def _files_of(run):
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def precomputed_run(tmp_path_factory, planted_policy_dir):
    """A planted run of 30 tasks whose credit files hold the planted truth, shuffled and negated."""
    from helpers import make_run

    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.tasks import make_environment, read_tasks, task_for

    signals = [{"name": n, "family": "precomputed", "args": {"path": f"credit/{n}.csv"}} for n in SIGNALS]
    controls = ([{"name": "random", "kind": "random", "null_control": True},
                 {"name": "uniform", "kind": "uniform", "null_control": True}]
                + [{"name": f"shuffle-{n}", "kind": "shuffle", "of": n} for n in SIGNALS])
    run, _ = make_run(tmp_path_factory.mktemp("precomputed"), planted_policy_dir, signals=signals, controls=controls,
                      n_tasks=30, group=1, router=None)
    # "the user's code": reads collect/trajectories.parquet only, with pandas, and writes CSV files
    frozen = require_frozen(run / "protocol.yaml")
    trajectories = pd.read_parquet(run / "collect" / "trajectories.parquet")
    env, entries = make_environment(frozen.protocol), {e.task_id: e for e in read_tasks(frozen)}
    rows = []
    for tid, turns in trajectories.groupby("trajectory_id", sort=False):
        env.reset(task_for(entries[turns.task_id.iloc[0]], frozen.protocol, run))
        rows += zip([tid] * len(turns), turns.turn.tolist(), env.true_effects(turns.action.tolist()))
    truth = pd.DataFrame(rows, columns=["trajectory_id", "turn", "credit"])
    gen = np.random.default_rng(5)
    shuffled = truth.assign(credit=truth.groupby("trajectory_id").credit.transform(lambda s: gen.permutation(s.values)))
    (run / "credit").mkdir()
    truth.to_csv(run / "credit" / "truth.csv", index=False)
    shuffled.to_csv(run / "credit" / "shuffled.csv", index=False)
    truth.assign(credit=-truth.credit).to_csv(run / "credit" / "negated.csv", index=False)
    assert _cli(["replay", "--run", str(run), "--quiet"]) == 0
    return run, len(truth)


@pytest.mark.slow
def test_bad_credit_files_exit_2_and_leave_the_run_untouched(precomputed_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(precomputed_run[0], run)
    good = (run / "credit" / "truth.csv").read_text()
    first = good.splitlines()[1].split(",")
    bad = {
        "missing column": good.replace("trajectory_id,turn,credit", "trajectory_id,turn,value", 1),
        "not collected": good + f"{first[0]},999,0.5\n",
        "duplicate": good + ",".join(first) + "\n",
        "non-numeric": good.replace(good.splitlines()[1], ",".join(first[:2] + ["abc"]), 1),
    }
    for case, text in bad.items():
        (run / "credit" / "truth.csv").write_text(text)
        before = _files_of(run)
        assert _cli(["signals", "--run", str(run), "--quiet"]) == 2, case
        err = capsys.readouterr().err
        assert "credit/truth.csv" in err and ("line" in err or "column" in err), (case, err)
        assert "Traceback" not in err
        assert _files_of(run) == before, case


@pytest.mark.slow
def test_planted_truth_audits_to_h1_its_shuffle_to_h3_its_negation_to_h2(precomputed_run, capsys):
    run, n_turns = precomputed_run
    assert _cli(["signals", "--run", str(run), "--quiet"]) == 0
    assert _cli(["audit", "--run", str(run)]) == 0
    audit = json.loads((run / "audit" / "audit.json").read_text())
    verdicts = {d["family"]: d["verdict"] for d in audit["decisions"]}
    assert verdicts == {"truth": "H1_TRACKS", "shuffled": "H3_PLACEBO", "negated": "H2_REVERSED"}
    # the signed link record states which file was audited: its hash, rows and columns
    from creditaudit.protocol.links import read_link

    (path,) = sorted((run / "links").glob("*-signals.link.json"))
    link = read_link(path)
    assert link.signature_ok
    facts = link.statement["predicate"]["byproducts"]["parameters"]["input_facts"]["truth"]
    assert facts == {"path": "credit/truth.csv", "sha256": sha256_file(run / "credit" / "truth.csv"),
                     "rows": n_turns, "columns": ["trajectory_id", "turn", "credit"]}
    assert {"name": "credit/truth.csv", "digest": {"sha256": facts["sha256"]}} in link.materials
    summary = json.loads((run / "signals" / "summary.json").read_text())
    assert summary["families"]["truth"]["n_missing"] == 0 and summary["families"]["truth"]["abstention_share"] == 0
    # the ledger recomputes from the raw artifacts, the file included
    assert _cli(["ledger", "regenerate", "--run", str(run), "--quiet"]) == 0
    assert _cli(["ledger", "verify", "--run", str(run)]) == 0
    capsys.readouterr()
    # editing the credit file after the signals stage is caught, naming the file
    path = run / "credit" / "truth.csv"
    path.write_text(path.read_text().replace(",0.0\n", ",0.5\n", 1))
    assert _cli(["ledger", "check", "--run", str(run)]) == 1
    assert "credit/truth.csv" in capsys.readouterr().out
