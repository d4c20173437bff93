"""The number ledger: registered producers over raw artifacts, byte-identical regeneration, verify."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.ledger import (
    CATALOGUE,
    LEDGER_JSON,
    PRODUCERS,
    Value,
    active_producers,
    compare_ledgers,
    compute_ledger,
    read_ledger,
    regenerate,
    verify_ledger,
)
from creditaudit.ledger.model import code_version, parse_ledger
from creditaudit.ledger.producer import ProducerContext, format_value, producer
from creditaudit.protocol.canonical import canonical_bytes, sha256_file
from creditaudit.protocol.lock import require_frozen


def _entries(run):
    return read_ledger(run / LEDGER_JSON).entry_map()


def _rewrite(path, table):
    from creditaudit.artifacts import write_parquet_atomic

    write_parquet_atomic(table, path)


# ------------------------------------------------------------------------------ registry


def test_value_names_and_undefined():
    assert Value("audit.implicit.estimate", float("nan")).value is None  # undefined, never NaN
    assert Value("x.y", 0.5, ".1%").rendered() == "50.0%"
    assert Value("x.y", None, ".3f").rendered() == "undefined"
    with pytest.raises(ValueError, match="does not match"):
        Value("Audit.bad name", 1)
    with pytest.raises(TypeError, match="needs an explicit text"):
        format_value([1, 2], None)


def test_producers_declare_raw_inputs_only():
    import creditaudit.ledger.producers  # noqa: F401

    assert {"protocol", "collect", "replay", "measurability", "signals", "router", "audit", "arms"} <= set(PRODUCERS)
    for p in PRODUCERS.values():
        for name in p.inputs:
            assert CATALOGUE[name].raw, (p.name, name)
    with pytest.raises(ValueError, match="derived artifact"):
        producer("bad", inputs=("audit.document",))(lambda ctx: [])
    assert "bad" not in PRODUCERS


def test_a_producer_cannot_read_what_it_does_not_declare(audited_run):
    run, _ = audited_run
    frozen = require_frozen(run / "protocol.yaml")
    ctx = ProducerContext(frozen, PRODUCERS["collect"])
    assert ctx.table("collect.trajectories").num_rows > 0
    with pytest.raises(RuntimeError, match="read artifact 'signals.credit', which it does not declare"):
        ctx.table("signals.credit")


def test_arms_producers_register_only_with_an_arms_directory(audited_run, copy_run):
    run = copy_run(audited_run[0])
    assert "arms" not in [p.name for p in active_producers(run)]
    (run / "arms").mkdir()
    assert "arms" in [p.name for p in active_producers(run)]


# ------------------------------------------------------------------------------ regenerate


def test_regenerate_is_byte_identical_typed_and_attested(ledgered_run):
    from creditaudit.ledger.chain import walk_chain

    run, _, result = ledgered_run
    data = (run / LEDGER_JSON).read_bytes()
    assert result.identical_runs == 2 and result.sha256 == sha256_file(run / LEDGER_JSON)
    ledger = parse_ledger(data, source="test")
    assert data == canonical_bytes(ledger.model_dump(mode="json")) + b"\n"  # canonical bytes as stored
    frozen = require_frozen(run / "protocol.yaml")
    assert ledger.protocol_id == frozen.id and ledger.code_version == code_version()
    names = [e.name for e in ledger.entries]
    assert names == sorted(names) and len(names) == len(set(names)) > 300
    manifest = {a.path: a for a in ledger.artifacts}
    for entry in ledger.entries:
        assert entry.protocol_id == frozen.id and entry.code_version == ledger.code_version
        assert {"protocol.yaml", "protocol.lock.json"} <= set(entry.inputs)
        for path, digest in entry.inputs.items():
            assert manifest[path].sha256 == digest == sha256_file(run / path)
    for record in ledger.artifacts:  # manifest name <-> path
        assert CATALOGUE[record.name].matches(record.path)
    assert {a.path for a in ledger.artifacts} >= {"signals/credit.parquet", "replay/turns.parquet",
                                                  "collect/trajectories.parquet"}
    assert not any(a.path.endswith("summary.json") or a.path.startswith("audit/") for a in ledger.artifacts)
    chain = walk_chain(run, frozen)
    assert chain.ok and chain.records[-1].stage == "ledger" and result.link is not None
    assert chain.attested[LEDGER_JSON].digest == result.sha256


def test_ledger_recomputes_every_stage_number_from_raw_artifacts(ledgered_run):
    """The producers reach the numbers the stages reported, without reading the stages' summaries."""
    run, _, _ = ledgered_run
    e = {name: entry.value for name, entry in _entries(run).items()}
    audit = json.loads((run / "audit" / "audit.json").read_text())
    for subject in audit["subjects"]:
        for stat, value in subject.items():  # every number the audit reports for a subject
            if stat not in ("subject", "kind", "of", "note"):
                assert e[f"audit.{subject['subject']}.{stat}"] == value, (subject["subject"], stat)
    for decision in audit["decisions"]:
        assert e[f"verdict.{decision['family']}"] == decision["verdict"]
        for gate in decision["gates"]:
            assert e[f"verdict.{decision['family']}.gate.{gate['gate']}.inputs"] == gate["inputs"]
    for family, sentence in audit["sentences"].items():
        assert e[f"verdict.{family}.sentence"] == sentence
    replay = json.loads((run / "replay" / "summary.json").read_text())
    for key, value in replay["measurability"].items():
        if key != "logprob_gap_ci":
            assert e[f"measurability.{key}"] == value, key
    assert e["replay.n_rollouts"] == replay["n_rollouts"]
    assert e["replay.prefix_divergences"] == replay["prefix_divergences"]
    assert e["replay.restore_failures"] == replay["restore_failures"]
    signals = json.loads((run / "signals" / "summary.json").read_text())
    router = signals["router"]
    assert e["router.routed_share"] == router["routed_share"]
    assert e["router.judge_calls_saved_per_trajectory"] == router["judge_calls_saved_per_trajectory"]
    assert e["router.pivotal_recall"] == router["pivotal_recall"]["recall"]
    assert e["router.chance"] == router["pivotal_recall"]["chance"]
    for name, control in signals["controls"].items():
        if control["kind"] == "shuffle":
            assert e[f"signals.{name}.changed_share"] == control["changed_share"]
    collect = json.loads((run / "collect" / "summary.json").read_text())
    for key in ("n_tasks", "n_trajectories", "n_turns", "success_rate", "admissible_rate", "mean_turns"):
        assert e[f"collect.{key}"] == collect[key], key


def test_regenerate_refuses_two_different_computations_and_keeps_the_ledger(ledgered_run, copy_run, monkeypatch):
    from creditaudit.ledger import build

    run = copy_run(ledgered_run[0])
    good = (run / LEDGER_JSON).read_bytes()
    ledger = parse_ledger(good, source="t")
    (share,) = [e.value for e in ledger.entries if e.name == "measurability.share_pivotal"]
    other = share + 0.125 if share < 0.5 else share - 0.125  # differs from the run's value
    changed = ledger.model_copy(update={"entries": [
        e.model_copy(update={"value": other, "text": f"{other:.3f}"}) if e.name == "measurability.share_pivotal"
        else e for e in ledger.entries]})
    from creditaudit.ledger.model import ledger_bytes

    assert ledger_bytes(changed) != good

    monkeypatch.setattr(build, "compute_in_fresh_processes", lambda run_dir, n=2: [good, ledger_bytes(changed)])
    with pytest.raises(CheckFailed, match=r"not byte-identical.*entry measurability.share_pivotal differs"):
        regenerate(run)
    assert (run / LEDGER_JSON).read_bytes() == good


def test_regenerate_refuses_artifacts_that_changed_after_attestation(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    good = (run / LEDGER_JSON).read_bytes()
    path = run / "replay" / "turns.parquet"
    table = pq.read_table(path)
    _rewrite(path, table.slice(0, table.num_rows - 1))
    with pytest.raises(CheckFailed, match=r"replay/turns\.parquet.*(not what stage 'replay' attested|not the intended)"):
        regenerate(run)
    assert (run / LEDGER_JSON).read_bytes() == good


# ------------------------------------------------------------------------------ bad input


def test_missing_artifacts_name_the_command(audited_run, copy_run):
    run = copy_run(audited_run[0])
    shutil.rmtree(run / "signals")
    with pytest.raises(InputError, match=r"signals/credit\.parquet: missing .*run `creditaudit signals` first"):
        compute_ledger(run)


def test_artifacts_of_another_protocol_are_refused(audited_run, copy_run):
    run = copy_run(audited_run[0])
    path = run / "signals" / "credit.parquet"
    table = pq.read_table(path)
    stamp = pa.array(["f" * 64] * table.num_rows, pa.string())
    field = pa.field("protocol_id", pa.string(), nullable=False)
    _rewrite(path, table.set_column(table.schema.get_field_index("protocol_id"), field, stamp))
    with pytest.raises(InputError, match=r"stamped with protocol\(s\) ffffffffffffffff…, not .*never mixes protocols"):
        compute_ledger(run)


def test_a_run_without_a_frozen_protocol_is_refused(tmp_path):
    with pytest.raises(InputError, match="no protocol in the run directory"):
        compute_ledger(tmp_path)


def test_verify_refuses_a_ledger_of_another_protocol_or_format(ledgered_run, copy_run):
    run = copy_run(ledgered_run[0])
    data = json.loads((run / LEDGER_JSON).read_text())
    (run / "other.json").write_text(json.dumps({**data, "protocol_id": "e" * 64}))
    with pytest.raises(InputError, match="the ledger belongs to protocol eeeeeeeeeeeeeeee…"):
        verify_ledger(run, ledger_path=run / "other.json")
    (run / "old.json").write_text(json.dumps({**data, "version": 0}))
    with pytest.raises(InputError, match=r"field `version`: ledger format 0"):
        verify_ledger(run, ledger_path=run / "old.json")
    with pytest.raises(InputError, match="no ledger; run `creditaudit ledger regenerate` first"):
        verify_ledger(run, ledger_path=run / "absent.json")


# ------------------------------------------------------------------------------ verify


def test_verify_names_the_entries_an_edited_artifact_affects(ledgered_run, copy_run, capsys):
    """Edit one raw artifact: verify prints the first differing entry with both values, every entry
    computed from the edited file, and the link chain's break; exit 1."""
    from creditaudit.cli import main

    run = copy_run(ledgered_run[0])
    before = _entries(run)
    path = run / "replay" / "turns.parquet"
    df = pq.read_table(path).to_pandas()
    complete = df.index[(df.status == "complete") & df.pivotal.astype(bool)]
    df.loc[complete[0], ["a_replay", "pivotal"]] = [0.0, False]  # one pivotal turn becomes non-pivotal
    _rewrite(path, pa.Table.from_pandas(df, schema=pq.read_schema(path), preserve_index=False))

    with pytest.raises(SystemExit) as exc:
        main(["ledger", "verify", "--run", str(run)])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "FAILED: input replay/turns.parquet changed since the ledger was written" in out
    assert "entry measurability.n_zero differs (value):" in out or "differs (value):" in out
    assert "stored:" in out and "recomputed:" in out
    affected = out.split("entries computed from a changed input")[1].split("\n")[0]
    for name, entry in before.items():
        if "replay/turns.parquet" in entry.inputs:
            assert name in affected
    assert "collect.n_turns" not in affected and "protocol.id" not in affected
    assert "measurability.share_pivotal" in out.split("entries that differ:")[1].split("\n")[0]
    assert "link-record chain: FAILED: replay/turns.parquet: its bytes" in out


def test_compare_ledgers_orders_by_name(ledgered_run):
    ledger = read_ledger(ledgered_run[0] / LEDGER_JSON)
    edited = ledger.model_copy(update={"entries": [
        e.model_copy(update={"text": "x"}) if e.name in ("router.n_routed", "audit.implicit.estimate") else e
        for e in ledger.entries]})
    diffs = compare_ledgers(ledger, edited)
    assert [d.name for d in diffs] == ["audit.implicit.estimate", "router.n_routed"]
    assert diffs[0].kind == "text" and "stored:" in diffs[0].render()


def test_the_code_version_covers_computation_not_presentation(tmp_path):
    # Docstrings, comments, formatting and the command line do not move a number; a constant does.


    import creditaudit
    from creditaudit.ledger.model import code_digest

    root = tmp_path / "creditaudit"
    shutil.copytree(Path(creditaudit.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    base = code_digest(root)
    rank = root / "stats" / "rank.py"
    text = rank.read_text("utf-8")
    rank.write_text(text.replace('"""', '"""Edited docstring. ', 1) + "\n# a comment\n", "utf-8")
    (root / "cli" / "protocol.py").write_text((root / "cli" / "protocol.py").read_text("utf-8") + "\nX = 1\n", "utf-8")
    (root / "demo.py").write_text((root / "demo.py").read_text("utf-8") + "\nY = 2\n", "utf-8")
    assert code_digest(root) == base
    controls = root / "signals" / "controls.py"
    controls.write_text(controls.read_text("utf-8").replace("uniform(-1.0, 1.0", "uniform(-1.0, 1.5"), "utf-8")
    assert code_digest(root) != base


def test_lock_and_ledger_record_the_dependency_versions(ledgered_run):
    from importlib import metadata

    from creditaudit.protocol.lock import lock_path_for, read_lock
    from creditaudit.versions import NUMBER_DEPENDENCIES, dependency_versions

    run = ledgered_run[0]
    versions = dependency_versions()
    assert set(versions) == {"python", *NUMBER_DEPENDENCIES}
    assert versions["numpy"] == metadata.version("numpy") and versions["torch"] == metadata.version("torch")
    assert read_lock(lock_path_for(run / "protocol.yaml")).versions == versions
    assert read_ledger(run / LEDGER_JSON).versions == versions


def test_a_run_without_a_router_goes_through_signals_audit_ledger_and_report(tmp_path, planted_policy_dir):
    """Issue 25, item 3: the router is optional end to end, not only in validation."""
    from helpers import make_run

    from creditaudit.audit.stage import run_audit
    from creditaudit.ledger import check_integrity, write_report
    from creditaudit.replay.stage import run_replay
    from creditaudit.signals.stage import run_signals

    signals = [{"name": "implicit", "family": "implicit"}, {"name": "grpo", "family": "grpo"}]
    controls = [{"name": "random", "kind": "random", "null_control": True},
                {"name": "uniform", "kind": "uniform", "null_control": True},
                {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"},
                {"name": "shuffle-grpo", "kind": "shuffle", "of": "grpo"}]
    run, signer = make_run(tmp_path, planted_policy_dir, signals=signals, controls=controls, router=None)
    run_replay(run / "protocol.yaml", signer, executor="inline")
    assert run_signals(run / "protocol.yaml", signer).document["router"] is None
    run_audit(run / "protocol.yaml", signer)
    regenerate(run, signer=signer)
    e = _entries(run)
    assert e["protocol.router.present"].value is False and "protocol.router.confidence_family" not in e
    assert e["router.reading"].value == "absent"
    report = check_integrity(run)
    assert report.ok, report.render(failures_only=True)
    write_report(run)
    assert "The protocol names no router (no router: the protocol names none)." in \
        (run / "report" / "report.md").read_text()


def test_a_kept_copy_of_the_ledger_inputs_recomputes_the_ledger(ledgered_run, copy_run, tmp_path):
    """keep_ledger_inputs copies the ledger and its manifest (no keys, links, policy or derived
    file): the producers recompute every entry there; a changed artifact is refused, the copy kept."""
    from creditaudit.ledger.build import compare_ledgers, compute_ledger, keep_ledger_inputs

    run = ledgered_run[0]
    out = tmp_path / "kept"
    (out / "signals").mkdir(parents=True)
    (out / "signals" / "stale.parquet").write_bytes(b"left by an earlier copy")
    copied = keep_ledger_inputs(run, out)
    stored = parse_ledger((run / LEDGER_JSON).read_bytes(), source="stored")
    assert sorted(copied) == sorted([LEDGER_JSON, *(a.path for a in stored.artifacts)])
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(copied)
    assert not (out / "keys").exists() and not (out / "policy").exists()
    recomputed = parse_ledger(compute_ledger(out), source="recomputed")
    assert compare_ledgers(stored, recomputed) == []

    changed = copy_run(run)
    path = changed / "replay" / "turns.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(1), path)
    before = (out / LEDGER_JSON).read_bytes()
    with pytest.raises(CheckFailed, match=r"turns\.parquet: not the bytes the ledger recorded"):
        keep_ledger_inputs(changed, out)
    assert (out / LEDGER_JSON).read_bytes() == before


def test_the_replay_producers_apply_to_a_run_that_was_replayed_only(audited_run, copy_run):
    """A run that never replayed (the training arms do not read replay) has no audit, replay,
    measurability or router entries; a replayed run whose turns table is gone is refused, naming it."""
    from creditaudit.ledger.producer import active_producers

    replay_producers = {"audit", "replay", "measurability", "router"}
    run = copy_run(audited_run[0])
    assert replay_producers <= {p.name for p in active_producers(run)}
    (run / "replay" / "turns.parquet").unlink()
    assert replay_producers <= {p.name for p in active_producers(run)}  # its link record says it ran
    with pytest.raises(InputError, match=r"turns\.parquet: missing.*creditaudit replay"):
        compute_ledger(run)
    for link in (run / "links").glob("*-replay.link.json"):
        link.unlink()
    shutil.rmtree(run / "replay")
    assert not replay_producers & {p.name for p in active_producers(run)}
