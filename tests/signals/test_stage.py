"""The ``creditaudit signals`` stage on a small planted run: outputs, attestation, refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.protocol.links import verify_links
from creditaudit.protocol.lock import require_frozen
from creditaudit.replay.collect import TRAJECTORIES
from creditaudit.signals.base import CREDIT_SCHEMA
from creditaudit.cli.signals import signals_command
from creditaudit.signals.stage import CREDIT, DIAGNOSTICS_DIR, SUMMARY, read_credit, run_signals


@pytest.fixture(scope="module")
def signals_run(collected_run):
    from creditaudit.replay.stage import run_replay

    run, signer = collected_run
    run_replay(run / "protocol.yaml", signer, executor="inline")
    summary = run_signals(run / "protocol.yaml", signer)
    return run, signer, summary


def test_credit_table_covers_every_turn_family_and_control(signals_run):
    run, signer, summary = signals_run
    frozen = require_frozen(run / "protocol.yaml")
    table = read_credit(frozen)
    assert table.schema == CREDIT_SCHEMA
    df = table.to_pandas()
    names = [s.name for s in frozen.protocol.signals] + [c.name for c in frozen.protocol.controls]
    n_turns = pq.read_table(run / TRAJECTORIES).num_rows
    assert summary.n_turns == n_turns and len(df) == n_turns * len(names)
    assert list(dict.fromkeys(df.subject)) == names
    assert set(df.protocol_id) == {frozen.id}
    assert (df.groupby("subject").size() == n_turns).all()
    assert set(df[df.kind == "family"].subject) == {s.name for s in frozen.protocol.signals}
    assert (df.credit.isna() == df.abstained).all() and (df.abstain_reason.notna() == df.abstained).all()
    judge = df[df.subject == "judge"]
    assert set(judge.credit.dropna()) <= {-1.0, 0.0, 1.0}
    assert (judge.groupby("trajectory_id").credit.apply(lambda s: (s == -1).sum()) <= 1).all()
    assert (df[df.subject == "judge-strict"].credit != -1).all()
    implicit = df[df.subject == "implicit"].credit.dropna()
    assert implicit.between(0.8, 1.2).all()
    assert df[df.subject == "shuffle-implicit"].of.unique().tolist() == ["implicit"]
    for name in ("implicit", "judge", "confidence"):
        for kind in ("shuffle", "inverted"):
            control = frozen.protocol.control_of(name, kind) if name != "confidence" or kind == "shuffle" else None
            if control is None:
                continue
            a = df[df.subject == name].credit.to_numpy()
            b = df[df.subject == control].credit.to_numpy()
            if kind == "inverted":
                np.testing.assert_array_equal(np.nan_to_num(b), -np.nan_to_num(a))
            else:
                for tid in df.trajectory_id.unique():
                    rows = (df[df.subject == name].trajectory_id == tid).to_numpy()
                    assert sorted(a[rows][~np.isnan(a[rows])]) == sorted(b[rows][~np.isnan(b[rows])])


def test_summary_diagnostics_and_link(signals_run):
    run, signer, summary = signals_run
    frozen = require_frozen(run / "protocol.yaml")
    doc = json.loads((run / SUMMARY).read_text())
    assert doc == summary.document and doc["protocol_id"] == frozen.id
    assert set(doc["families"]) == {s.name for s in frozen.protocol.signals}
    for entry in doc["families"].values():
        assert 0.0 <= entry["abstention_share"] <= 1.0
    shuffle = doc["controls"]["shuffle-implicit"]
    assert shuffle["kind"] == "shuffle" and 0.0 <= shuffle["changed_share"] <= 1.0
    assert doc["controls"]["shuffle-grpo"]["changed_share"] == 0.0  # constant within a trajectory
    router = doc["router"]
    n_scored = router["n_turns"] - router["n_turns_without_confidence"]
    assert n_scored > 0  # the nearest achievable share k / n_scored to the target
    assert router["target_routed_share"] == 0.87 and abs(router["routed_share_of_scored"] - 0.87) <= 0.5 / n_scored
    assert router["pivotal_recall"]["n_complete_turns"] > 0 and "chance" in router["pivotal_recall"]
    (agreement,) = doc["judge_agreement"]
    assert agreement["judges"] == ["judge", "judge-strict"] and agreement["n"] == summary.n_turns
    for name in ("implicit", "judge", "confidence", "grpo", "rloo"):
        assert (run / DIAGNOSTICS_DIR / f"{name}.parquet").is_file()
    judge = pq.read_table(run / DIAGNOSTICS_DIR / "judge.parquet").to_pandas()
    assert set(judge.protocol_id) == {frozen.id}
    assert judge.judge_id.str.startswith("local:policy@").all() and judge.prompt_sha256.str.len().eq(64).all()
    assert "pi_hind" in pq.read_table(run / DIAGNOSTICS_DIR / "implicit.parquet").column_names
    assert str(run) not in (run / SUMMARY).read_text()

    pins = {f"policy/{k}": v for k, v in {**frozen.protocol.policy.model_files,
                                          **frozen.protocol.policy.tokenizer_files}.items()}
    pins["protocol.yaml"] = sha256_file(run / "protocol.yaml")
    pins["protocol.lock.json"] = sha256_file(run / "protocol.lock.json")
    records = verify_links(run, protocol_id=frozen.id, trusted_key_id=signer.key_id, roots=pins)
    assert [r.stage for r in records][-1] == "signals"
    materials = {m["name"] for m in records[-1].materials}
    assert {TRAJECTORIES, "replay/turns.parquet", "protocol.lock.json"} <= materials
    assert {p["name"] for p in records[-1].products} >= {CREDIT, SUMMARY, f"{DIAGNOSTICS_DIR}/judge.parquet"}


def test_rerun_is_byte_identical(signals_run):
    run, signer, _ = signals_run
    before = {name: sha256_file(run / name) for name in (CREDIT, SUMMARY, f"{DIAGNOSTICS_DIR}/implicit.parquet")}
    run_signals(run / "protocol.yaml", signer)
    assert {name: sha256_file(run / name) for name in before} == before


def test_an_interrupted_stage_resumes_at_the_family_it_had_not_finished(signals_run, tmp_path, monkeypatch):
    import creditaudit.signals.stage as stage

    ref, signer, _ = signals_run
    run = tmp_path / "run"
    shutil.copytree(ref, run)
    shutil.rmtree(run / "signals")
    names = [s.name for s in require_frozen(run / "protocol.yaml").protocol.signals]
    computed: list[str] = []
    make_family = stage.make_family

    def watched(spec, **kw):  # the stage's families, each computation recorded; `stop` interrupts
        family = make_family(spec, **kw)
        compute = family.compute

        def run_it(context):
            if family.name == stop:
                raise KeyboardInterrupt
            computed.append(family.name)
            return compute(context)

        family.compute = run_it
        return family

    monkeypatch.setattr(stage, "make_family", watched)
    stop = names[2]
    with pytest.raises(KeyboardInterrupt):
        run_signals(run / "protocol.yaml", signer)
    assert computed == names[:2] and not (run / CREDIT).exists()
    assert sorted(p.name for p in (run / stage.SHARDS_DIR).glob("*.report.json")) == sorted(
        f"{n}.report.json" for n in names[:2])
    stop, computed[:] = None, []
    run_signals(run / "protocol.yaml", signer)
    assert computed == names[2:]  # the two finished families were read back, not computed again
    for name in (CREDIT, SUMMARY, *(f"{DIAGNOSTICS_DIR}/{p.name}" for p in (ref / DIAGNOSTICS_DIR).iterdir())):
        assert sha256_file(run / name) == sha256_file(ref / name), name
    assert not (run / stage.SHARDS_DIR).exists()


def test_cli_runs_the_stage(signals_run):
    run, _, _ = signals_run
    app = typer.Typer()
    app.command()(signals_command)
    result = CliRunner().invoke(app, ["--run", str(run), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "families" in result.output and "pivotal recall" in result.output and "chance" in result.output


def test_refuses_a_family_without_a_registered_factory(tmp_path, judgeable_policy_dir, run_factory, signal_set,
                                                       monkeypatch):
    # A family whose plug-in is not installed (here: hidden from discovery after the freeze) must
    # be refused before any credit is written, never stubbed: the pin check names it first.
    from creditaudit import plugins
    from creditaudit.errors import CreditAuditError

    signals, controls = signal_set
    signals.append({"name": "my-prover", "family": "prover"})
    controls.append({"name": "shuffle-my-prover", "kind": "shuffle", "of": "my-prover"})
    run, signer = run_factory(tmp_path, judgeable_policy_dir, signals=signals, controls=controls, collect_now=False)
    installed = {k: v for k, v in plugins.plugins("family").items() if k != "prover"}
    monkeypatch.setitem(plugins._CACHE, "family", installed)
    with pytest.raises(CreditAuditError, match=r"family plugin 'prover' .*is pinned but not installed"):
        run_signals(run / "protocol.yaml", signer)
    assert not (run / "signals").exists()


def test_refuses_trajectories_stamped_with_another_protocol(tmp_path, signals_run, judgeable_policy_dir, run_factory):
    run, _, _ = signals_run
    other, signer = run_factory(tmp_path, judgeable_policy_dir, n_tasks=1, collect_now=False)
    (other / "collect").mkdir()
    shutil.copy(run / TRAJECTORIES, other / TRAJECTORIES)
    with pytest.raises(InputError, match="stamped with protocol"):
        run_signals(other / "protocol.yaml", signer)
    assert not (other / CREDIT).exists()


def test_cli_without_a_protocol_is_an_input_error(tmp_path):
    app = typer.Typer()
    app.command()(signals_command)
    result = CliRunner().invoke(app, ["--run", str(tmp_path), "--quiet"])
    assert isinstance(result.exception, InputError) and result.exception.exit_code == 2
    assert "no protocol in the run directory" in str(result.exception)


def test_stage_with_an_http_judge_and_judge_agreement(tmp_path, judgeable_policy_dir, run_factory):
    """End to end with a real OpenAI-compatible server on 127.0.0.1 answering a valid score list
    (counted from the prompt) for every trajectory but the first, which gets garbage."""
    import re
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    requests = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            n = len(re.findall(r"^turn \d+$", body["messages"][0]["content"], flags=re.M))
            content = "no idea" if len(requests) <= 2 else json.dumps({"scores": [k % 2 for k in range(n)]})
            payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        signals = [{"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
                   {"name": "remote", "family": "judge", "args": {"backend": "http", "model": "m", "endpoint": endpoint,
                                                                  "max_retries": 1, "timeout_s": 10.0}},
                   {"name": "confidence", "family": "confidence"}]
        controls = [{"name": "random", "kind": "random", "null_control": True},
                    {"name": "uniform", "kind": "uniform", "null_control": True}]
        controls += [{"name": f"shuffle-{s['name']}", "kind": "shuffle", "of": s["name"]} for s in signals]
        run, signer = run_factory(tmp_path, judgeable_policy_dir, signals=signals, controls=controls, n_tasks=1)
        # one request at a time: the server answers by arrival order (concurrency: tests/signals/test_judge.py)
        summary = run_signals(run / "protocol.yaml", signer, overrides={"remote": {"backoff_s": 0.0,
                                                                                   "max_concurrency": 1}})
    finally:
        server.shutdown()
        server.server_close()
    n_traj = summary.n_trajectories
    assert len(requests) == n_traj + 1  # the first trajectory: garbage twice (one retry), then abstained
    remote = summary.document["families"]["remote"]
    credit = read_credit(require_frozen(run / "protocol.yaml")).to_pandas()
    rows = credit[credit.subject == "remote"]
    first = rows.trajectory_id.iloc[0]
    assert rows[rows.trajectory_id == first].abstain_reason.eq("judge_malformed").all()
    assert rows[rows.trajectory_id != first].credit.notna().all()
    assert remote["abstention_reasons"] == {"judge_malformed": int((rows.trajectory_id == first).sum())}
    (agreement,) = summary.document["judge_agreement"]
    assert agreement["judges"] == ["judge", "remote"] and agreement["n"] == int(rows.credit.notna().sum())
    assert 0.0 <= agreement["agreement"] <= 1.0


def test_shuffles_permute_the_audited_turns_among_themselves(signals_run):
    """Issue 25, item 6: with replay results, every shuffle has its family's multiset of credits on
    each trajectory's complete turns (the turns the audit includes) and abstains where it abstains."""
    from collections import Counter

    run, _, summary = signals_run
    frozen = require_frozen(run / "protocol.yaml")
    df = read_credit(frozen).to_pandas()
    status = pq.read_table(run / "replay" / "turns.parquet", columns=["trajectory_id", "turn", "status"]).to_pandas()
    df = df.merge(status, on=["trajectory_id", "turn"], how="left")
    shuffles = [c for c in frozen.protocol.controls if c.kind == "shuffle"]
    assert shuffles
    for control in shuffles:
        entry = summary.document["controls"][control.name]
        assert entry["shuffled_within"].startswith("complete replay turns")
        family, shuffle = df[df.subject == control.of], df[df.subject == control.name]
        assert family.abstained.tolist() == shuffle.abstained.tolist()
        for (tid, complete), rows in family.groupby(["trajectory_id", family.status == "complete"]):
            other = shuffle[(shuffle.trajectory_id == tid) & ((shuffle.status == "complete") == complete)]
            assert Counter(rows.credit.dropna()) == Counter(other.credit.dropna()), (control.name, tid)
