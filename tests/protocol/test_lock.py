import json
import re
from pathlib import Path

import pytest
import yaml

from creditaudit.errors import CheckFailed, InputError
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.cli.protocol import render_template
from creditaudit.protocol.diff import flatten
from creditaudit.protocol.io import protocol_dict, protocol_from_dict
from creditaudit.protocol.lock import (
    amend,
    freeze,
    lock_path_for,
    read_lock,
    read_registry,
    registry_path_for,
    require_frozen,
    verify,
)
from creditaudit.protocol.signing import generate_keypair, load_signer


@pytest.fixture()
def run(tmp_path, fake_policy_dir):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "protocol.yaml"
    path.write_text(render_template(fake_policy_dir, run_dir))
    private, public = generate_keypair(run_dir / "keys")
    signer = load_signer(private)
    lock = freeze(path, signer)
    return {"path": path, "signer": signer, "lock": lock, "public": public, "dir": run_dir}


def test_freeze_then_verify_is_ok(run):
    report = verify(run["path"], public_key_path=run["public"])
    assert report.ok, report.render()
    assert report.protocol_id == run["lock"].protocol_id
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", run["lock"].freeze_time)
    entries = read_registry(registry_path_for(run["path"]))
    assert [e.kind for e in entries] == ["freeze"] and entries[0].prev_hash == "0" * 64


def test_lock_holds_no_machine_path(run):
    text = lock_path_for(run["path"]).read_text()
    assert str(run["dir"]) not in text and str(Path.home()) not in text


def test_freeze_never_overwrites_a_lock(run):
    before = lock_path_for(run["path"]).read_bytes()
    with pytest.raises(InputError, match="already frozen"):
        freeze(run["path"], run["signer"])
    assert lock_path_for(run["path"]).read_bytes() == before
    assert len(read_registry(registry_path_for(run["path"]))) == 1


def test_freeze_refuses_unpinned_policy(tmp_path):
    path = tmp_path / "protocol.yaml"
    path.write_text(render_template())
    generate_keypair(tmp_path / "keys")
    with pytest.raises(InputError, match="policy.model_files: no policy files are pinned"):
        freeze(path, load_signer(tmp_path / "keys" / "creditaudit.key"))
    assert not lock_path_for(path).exists()


def test_freeze_refuses_pins_that_do_not_match(run, fake_policy_dir, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(render_template(fake_policy_dir, tmp_path))
    (fake_policy_dir / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(InputError, match=r"policy.model_files.model.safetensors: pinned"):
        freeze(other, run["signer"])
    report = verify(run["path"])
    assert not report.ok and any("model.safetensors" in f for f in report.failures)


_STRING_ALTERNATIVES = [
    "planted", "directory", "local", "http", "random", "uniform", "inverted", "pearson", "spearman",
    "less", "two-sided", "float16", "bfloat16", "feasibility", "controls", "effect", "H3_OTHER",
    "control:random", "family:judge", "self", "<=", ">", "oracle", "random", "x",
]


_STRING_POOL: list[str] = []  # every string value of the frozen protocol (filled by the test)


def _candidates(path, value):
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1]
    if isinstance(value, float):
        return [value * 0.5, value * 1.5, value + 0.1, 0.25]
    if isinstance(value, str):
        return [value + "x"] + _STRING_ALTERNATIVES + _STRING_POOL
    if value is None:
        return ["a" * 64, "x", 1, 0.5]
    if value == {}:
        return [{"x.bin": "b" * 64}, {"x": 1}]
    if value == []:
        return [[1], ["implicit"], [{"x": 1}]]
    raise AssertionError(path)


def _leaves(value, keys=()):
    """(key tuple, display path as `flatten` writes it, value) for every leaf."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, keys + (k,))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, keys + (i,))
    else:
        text = ""
        for k in keys:
            text += f"[{k}]" if isinstance(k, int) else (f".{k}" if text else k)
        yield keys, text, value


def _set(data, keys, value):
    node = data
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value


def test_tampering_any_leaf_is_caught_and_named(run):
    path, frozen = run["path"], protocol_dict(read_protocol(run))
    leaves = list(_leaves(frozen))
    _STRING_POOL[:] = sorted({v for _, _, v in leaves if isinstance(v, str)})
    assert len(leaves) == len(flatten(frozen))
    by_diff = by_validation = free_text = 0
    for keys, leaf, value in leaves:
        for candidate in [c for c in _candidates(leaf, value) if c != value]:
            data = json.loads(json.dumps(frozen))
            _set(data, keys, candidate)
            try:
                protocol_from_dict(data)
            except InputError:
                continue
            break
        else:  # no valid tamper exists: write the last one and require a refusal naming the field
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            with pytest.raises(InputError) as info:
                verify(path, check_inputs=False)
            assert "field `" in str(info.value), leaf
            by_validation += 1
            continue
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        if leaf == "name":  # renaming the protocol makes the lock another protocol's: refused, named
            with pytest.raises(InputError, match="field `name`"):
                verify(path, check_inputs=False)
            by_validation += 1
            continue
        report = verify(path, check_inputs=False)
        # free text, and where replay runs (``compute``: Ray resources, outside the protocol id), may
        # change after freezing: verify passes and lists the change
        if leaf.rsplit(".", 1)[-1] in ("description", "notes") or leaf.startswith("compute."):
            assert report.ok and [c.path for c in report.free_text_changes] == [leaf], leaf
            free_text += 1
            continue
        assert not report.ok, leaf
        named = [c.path for c in report.changes]
        assert any(p == leaf or p.startswith(leaf + "[") or p.startswith(leaf + ".") for p in named), (leaf, named)
        by_diff += 1
    path.write_text(yaml.safe_dump(frozen, sort_keys=False))
    assert verify(path, check_inputs=False).ok
    # Most leaves have a valid alternative value (caught by the diff); the rest (gate ids, order
    # entries, family names) cannot change alone without breaking validation (refused, named).
    assert by_diff >= 0.65 * (len(leaves) - free_text) and free_text >= 5
    assert by_diff + by_validation + free_text == len(leaves)


def read_protocol(run):
    from creditaudit.protocol.io import load_protocol

    return load_protocol(run["path"])


def test_verify_prints_the_field_level_diff(run):
    text = run["path"].read_text().replace("bootstrap_iterations: 10000", "bootstrap_iterations: 9999")
    run["path"].write_text(text)
    report = verify(run["path"])
    assert not report.ok
    assert "statistics.bootstrap_iterations: 10000 -> 9999" in report.render()


def test_lock_of_another_protocol_is_refused(run, tmp_path, fake_policy_dir):
    other = run["dir"] / "other.yaml"
    data = protocol_dict(read_protocol(run))
    data["name"] = "another-audit"
    other.write_text(yaml.safe_dump(data))
    lock_path_for(other).write_bytes(lock_path_for(run["path"]).read_bytes())
    with pytest.raises(InputError, match=r"belongs to another protocol .*field `protocol_file`"):
        verify(other)


def test_missing_lock_is_exit_2(tmp_path, fake_policy_dir):
    path = tmp_path / "protocol.yaml"
    path.write_text(render_template(fake_policy_dir, tmp_path))
    with pytest.raises(InputError, match="no lock; freeze the protocol first") as info:
        verify(path)
    assert info.value.exit_code == 2
    with pytest.raises(InputError, match="no lock"):
        require_frozen(path)


def test_require_frozen_refuses_a_changed_protocol(run):
    assert require_frozen(run["path"]).id == run["lock"].protocol_id
    run["path"].write_text(run["path"].read_text().replace("n_fact: 3", "n_fact: 4"))
    with pytest.raises(CheckFailed, match="replay.n_fact: 3 -> 4") as info:
        require_frozen(run["path"])
    assert info.value.exit_code == 1


def test_edited_lock_fails_the_signature(run):
    lock_path = lock_path_for(run["path"])
    data = json.loads(lock_path.read_text())
    data["freeze_time"] = "2020-01-01T00:00:00Z"  # backdating the freeze
    lock_path.write_text(json.dumps(data))
    report = verify(run["path"])
    assert any("signature does not verify" in f for f in report.failures)


def test_forged_signature_by_another_key_fails_against_the_trusted_key(run, tmp_path):
    # A forger re-signs an edited lock with their own key: the lock is self-consistent, so the
    # trusted public key is what catches it (and the registry entry no longer matches the lock).
    forger_private, _ = generate_keypair(tmp_path / "forger")
    forger = load_signer(forger_private)
    lock_path = lock_path_for(run["path"])
    data = json.loads(lock_path.read_text())
    data.update(public_key=forger.public_key_b64, key_id=forger.key_id)
    data.pop("signature")
    data["signature"] = forger.sign(canonical_bytes(data))
    lock_path.write_text(json.dumps(data, indent=2, sort_keys=True))
    report = verify(run["path"], public_key_path=run["public"])
    assert any("not by the trusted key" in f for f in report.failures)
    assert any("no registry entry for this lock" in f for f in report.failures)


def test_garbage_signature_fails(run):
    lock_path = lock_path_for(run["path"])
    data = json.loads(lock_path.read_text())
    data["signature"] = "AAAA" + data["signature"][4:]
    lock_path.write_text(json.dumps(data))
    assert any("signature does not verify" in f for f in verify(run["path"]).failures)


def _second_protocol(run, fake_policy_dir, name="second"):
    path = run["dir"] / f"{name}.yaml"
    text = render_template(fake_policy_dir, run["dir"]).replace("name: creditaudit-default", f"name: {name}")
    path.write_text(text)
    freeze(path, run["signer"], registry_path=registry_path_for(run["path"]))
    return path


def test_registry_chain_breaks_are_caught(run, fake_policy_dir):
    second = _second_protocol(run, fake_policy_dir)
    third = _second_protocol(run, fake_policy_dir, "third")
    reg = registry_path_for(run["path"])
    lines = reg.read_text().splitlines()
    assert len(read_registry(reg)) == 3

    reg.write_text("\n".join([lines[0], lines[2]]) + "\n")  # an entry deleted
    with pytest.raises(CheckFailed, match="index 2, expected 1"):
        read_registry(reg)
    assert not verify(third).ok

    reg.write_text("\n".join([lines[1], lines[0], lines[2]]) + "\n")  # reordered
    with pytest.raises(CheckFailed):
        read_registry(reg)

    edited = json.loads(lines[1])
    edited["reason"] = "sneaky"
    reg.write_text("\n".join([lines[0], json.dumps(edited), lines[2]]) + "\n")  # edited in place
    with pytest.raises(CheckFailed, match="entry 1 was edited"):
        read_registry(reg)
    report = verify(second)
    assert any("was edited" in f for f in report.failures)


def test_amend_keeps_parent_and_records_deviations(run):
    child = run["dir"] / "protocol-v2.yaml"
    child.write_text(run["path"].read_text().replace("n_alt: 3 ", "n_alt: 5 "))
    lock = amend(run["path"], child, run["signer"], reason="more alternative rollouts")
    assert lock.parent_id == run["lock"].protocol_id
    assert {"path": "replay.n_alt", "old": 3, "new": 5} in lock.deviations
    entries = read_registry(registry_path_for(run["path"]))
    assert [e.kind for e in entries] == ["freeze", "amend"]
    assert entries[1].parent_id == run["lock"].protocol_id and entries[1].reason == "more alternative rollouts"
    assert verify(child).ok and verify(run["path"]).ok
    assert read_lock(lock_path_for(run["path"])) == run["lock"]


def test_amend_needs_a_reason_and_a_matching_parent(run):
    child = run["dir"] / "child.yaml"
    child.write_text(run["path"].read_text())
    with pytest.raises(InputError, match="`--reason` is required"):
        amend(run["path"], child, run["signer"], reason=" ")
    child.write_text(run["path"].read_text().replace("amends: null", "amends: " + "c" * 64))
    with pytest.raises(InputError, match="field `amends`"):
        amend(run["path"], child, run["signer"], reason="x")


def test_unreadable_key_is_a_clear_error(tmp_path):
    bad = tmp_path / "creditaudit.key"
    bad.write_text("not a key")
    with pytest.raises(InputError, match="not a readable unencrypted PEM private key"):
        load_signer(bad)
    with pytest.raises(InputError, match="cannot read the private key"):
        load_signer(tmp_path / "missing.key")
