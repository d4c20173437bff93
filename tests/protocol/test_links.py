import base64
import json

import pytest

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.links import LINK_PREDICATE_TYPE, STATEMENT_TYPE, StageLink, read_link, verify_links
from creditaudit.protocol.signing import generate_keypair, load_signer, pae, verify_signature, public_key_from_b64

PID = "e" * 64


@pytest.fixture()
def run(tmp_path):
    private, _ = generate_keypair(tmp_path / "keys")
    signer = load_signer(private)
    (tmp_path / "protocol.lock.json").write_text("{}")
    with StageLink(tmp_path, "collect", PID, signer, command=["creditaudit", "collect"],
                   parameters={"n_tasks": 2}, inputs=["protocol.lock.json"]) as link:
        (tmp_path / "trajectories.parquet").write_bytes(b"PAR1data")
        link.add_output("trajectories.parquet")
    with StageLink(tmp_path, "replay", PID, signer, inputs=["trajectories.parquet"]) as link:
        (tmp_path / "replay.parquet").write_bytes(b"PAR1replay")
        link.add_output(tmp_path / "replay.parquet")
    from creditaudit.protocol.canonical import sha256_file

    roots = {"protocol.lock.json": sha256_file(tmp_path / "protocol.lock.json")}
    return tmp_path, signer, roots


def test_link_is_an_in_toto_statement_in_a_dsse_envelope(run):
    run_dir, signer, _ = run
    envelope = json.loads((run_dir / "links" / "0000-collect.link.json").read_text())
    payload = base64.b64decode(envelope["payload"])
    statement = json.loads(payload)
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == LINK_PREDICATE_TYPE
    assert statement["subject"][0]["name"] == "trajectories.parquet"
    assert statement["predicate"]["materials"][0]["name"] == "protocol.lock.json"
    assert statement["predicate"]["byproducts"]["protocol_id"] == PID
    # The signature covers DSSE's pre-authentication encoding, checked here with the raw primitive.
    sig = envelope["signatures"][0]
    assert verify_signature(public_key_from_b64(sig["publicKey"]), pae(envelope["payloadType"], payload), sig["sig"])
    assert str(run_dir) not in payload.decode()


def test_chain_verifies(run):
    run_dir, signer, roots = run
    records = verify_links(run_dir, protocol_id=PID, trusted_key_id=signer.key_id, roots=roots)
    assert [r.stage for r in records] == ["collect", "replay"]


def test_inputs_are_hashed_before_the_stage_runs(tmp_path):
    signer = load_signer(generate_keypair(tmp_path / "keys")[0])
    (tmp_path / "in.txt").write_text("before")
    with StageLink(tmp_path, "s", PID, signer, inputs=["in.txt"]) as link:
        (tmp_path / "in.txt").write_text("changed during the stage")
        link.add_output("in.txt")
    record = read_link(next((tmp_path / "links").glob("*.json")))
    assert record.materials[0]["digest"]["sha256"] != record.products[0]["digest"]["sha256"]


def test_changed_output_is_caught(run):
    run_dir, signer, roots = run
    (run_dir / "replay.parquet").write_bytes(b"PAR1tampered")
    with pytest.raises(CheckFailed, match="replay.parquet: its bytes changed"):
        verify_links(run_dir, protocol_id=PID, trusted_key_id=signer.key_id, roots=roots)


def test_input_no_earlier_stage_produced_is_caught(run):
    run_dir, signer, roots = run
    (run_dir / "trajectories.parquet").write_bytes(b"PAR1other")
    with StageLink(run_dir, "signals", PID, signer, inputs=["trajectories.parquet"]) as link:
        (run_dir / "signals.parquet").write_bytes(b"x")
        link.add_output("signals.parquet")
    with pytest.raises(CheckFailed, match="stage 'signals' consumed trajectories.parquet"):
        verify_links(run_dir, protocol_id=PID, trusted_key_id=signer.key_id, roots=roots, check_current=False)


def test_forged_or_foreign_records_are_caught(run, tmp_path):
    run_dir, signer, roots = run
    path = run_dir / "links" / "0001-replay.link.json"
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))
    with pytest.raises(CheckFailed, match="0001-replay.link.json: the signature does not verify"):
        verify_links(run_dir, protocol_id=PID, trusted_key_id=signer.key_id, roots=roots)
    other = load_signer(generate_keypair(tmp_path / "other")[0])
    with pytest.raises(CheckFailed, match="not the protocol's key"):
        verify_links(run_dir, protocol_id=PID, trusted_key_id=other.key_id, roots=roots)


def test_other_protocol_id_is_caught(run):
    run_dir, signer, roots = run
    with pytest.raises(CheckFailed, match="stamped with protocol eeeeeeee"):
        verify_links(run_dir, protocol_id="f" * 64, trusted_key_id=signer.key_id, roots=roots)


def test_removed_record_breaks_the_sequence(run):
    run_dir, signer, roots = run
    (run_dir / "links" / "0000-collect.link.json").unlink()
    with pytest.raises(CheckFailed, match="sequence number out of order"):
        verify_links(run_dir, protocol_id=PID, trusted_key_id=signer.key_id, roots=roots)


def test_paths_outside_the_run_are_refused(tmp_path):
    signer = load_signer(generate_keypair(tmp_path / "keys")[0])
    (tmp_path / "outside.txt").write_text("x")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(InputError, match="must lie inside the run directory"):
        with StageLink(run_dir, "s", PID, signer, inputs=[tmp_path / "outside.txt"]):
            pass
