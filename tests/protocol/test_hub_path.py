"""``policy.path: hf://ORG/NAME@REVISION``: a checkpoint resolved from the local Hugging Face cache,
its commit and file hashes pinned, never downloaded.

The cache is laid out as ``huggingface_hub`` writes it (blobs, refs, snapshots of symlinks), holding
the shipped default policy, and ``huggingface_hub.scan_cache_dir`` -- the library's own reader --
confirms it sees the repository and the commit before anything of ours reads it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from creditaudit.protocol.canonical import sha256_file
from creditaudit.replay.policies.default.shipped import SHIPPED_POLICY_DIR

REPO = "creditaudit-test/tiny-policy"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture()
def hf_cache(tmp_path) -> Path:
    """A Hugging Face hub cache holding :data:`REPO` at :data:`COMMIT`, branch ``main``."""
    from huggingface_hub import scan_cache_dir

    cache = tmp_path / "hf-cache"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in FILES:
        data = (SHIPPED_POLICY_DIR / name).read_bytes()
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        os.symlink(Path("..", "..", "blobs", blob), snapshot / name)
    info = scan_cache_dir(cache)
    (seen,) = info.repos
    assert seen.repo_id == REPO and {r.commit_hash for r in seen.revisions} == {COMMIT}
    assert {r.refs for r in seen.revisions} == {frozenset({"main"})}
    return cache


def cli(args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``creditaudit ARGS`` in a fresh process with ``HF_HUB_CACHE`` set, as a user runs it."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "creditaudit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def hub_protocol(tmp_path: Path, cache: Path, path: str) -> Path:
    """An unpinned default protocol whose policy is ``path`` (source local)."""
    proto = tmp_path / "protocol.yaml"
    assert cli(["protocol", "init", str(proto)], cache, tmp_path).returncode == 0
    text = proto.read_text()
    text = text.replace("  source: builtin\n", "  source: local\n", 1).replace("  path: policy ", f"  path: {path} ", 1)
    proto.write_text(text)
    return proto


def test_pin_writes_the_commit_a_branch_resolves_to_and_the_files_hashes(tmp_path, hf_cache):
    proto = hub_protocol(tmp_path, hf_cache, f"hf://{REPO}@main")
    result = cli(["protocol", "pin", str(proto)], hf_cache, tmp_path)
    assert result.returncode == 0, result.stderr
    assert COMMIT in result.stdout
    policy = yaml.safe_load(proto.read_text())["policy"]
    assert policy["path"] == f"hf://{REPO}@{COMMIT}"
    pinned = {**policy["model_files"], **policy["tokenizer_files"]}
    assert pinned == {name: sha256_file(SHIPPED_POLICY_DIR / name) for name in FILES}

    assert cli(["protocol", "keygen", "--out", str(tmp_path / "keys")], hf_cache, tmp_path).returncode == 0
    result = cli(["protocol", "freeze", str(proto)], hf_cache, tmp_path)
    assert result.returncode == 0, result.stderr
    assert cli(["protocol", "verify", str(proto)], hf_cache, tmp_path).returncode == 0


def test_the_frozen_hub_policy_loads_from_the_cache_snapshot(tmp_path, hf_cache, monkeypatch):
    import torch
    from huggingface_hub import constants

    from creditaudit.protocol.lock import freeze, require_frozen
    from creditaudit.protocol.signing import generate_keypair, load_signer
    from creditaudit.replay.collect import check_run_policy, load_run_policy
    from creditaudit.replay.policies.hf import load_policy

    proto = hub_protocol(tmp_path, hf_cache, f"hf://{REPO}@main")
    assert cli(["protocol", "pin", str(proto)], hf_cache, tmp_path).returncode == 0
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache))  # this process read the variable at import
    generate_keypair(tmp_path / "keys")
    freeze(proto, load_signer(tmp_path / "keys" / "creditaudit.key"))
    frozen = require_frozen(proto)
    directory = check_run_policy(frozen)
    assert directory == hf_cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT
    policy = load_run_policy(frozen)
    reference = load_policy(SHIPPED_POLICY_DIR)
    for (name, a), (_, b) in zip(policy.model.state_dict().items(), reference.model.state_dict().items()):
        assert torch.equal(a, b), name

    # a blob changed in the cache after the freeze: the pins catch it
    blob = (directory / "config.json").resolve()
    blob.write_text(blob.read_text().replace("}", ', "note": "edited"}', 1))
    from creditaudit.errors import CheckFailed

    with pytest.raises(CheckFailed, match=r"policy\.model_files\.config\.json"):
        check_run_policy(frozen)


def test_a_branch_cannot_be_frozen(tmp_path, hf_cache):
    proto = hub_protocol(tmp_path, hf_cache, f"hf://{REPO}@{COMMIT}")
    assert cli(["protocol", "pin", str(proto)], hf_cache, tmp_path).returncode == 0
    proto.write_text(proto.read_text().replace(f"@{COMMIT}", "@main"))  # hashes pinned, revision a branch
    assert cli(["protocol", "keygen", "--out", str(tmp_path / "keys")], hf_cache, tmp_path).returncode == 0
    result = cli(["protocol", "freeze", str(proto)], hf_cache, tmp_path)
    assert result.returncode == 2
    assert "revision 'main' is a branch or tag" in result.stderr and "protocol pin" in result.stderr
    assert not (tmp_path / "protocol.lock.json").exists()


@pytest.mark.parametrize(("path", "expected"), [
    (f"hf://{REPO}@v9", "is not in the local Hugging Face cache"),
    ("hf://someone/absent@main", "is not in the local Hugging Face cache"),
    (f"hf://{REPO}", "hf://ORG/NAME@REVISION"),
    ("hf://no-slash@main", "hf://ORG/NAME@REVISION"),
    ("hf://a/b/c@main", "is not a hub repository id"),
])
def test_a_checkpoint_that_cannot_be_resolved_is_exit_2_and_the_protocol_is_unchanged(
        tmp_path, hf_cache, path, expected):
    proto = hub_protocol(tmp_path, hf_cache, path)
    before = proto.read_bytes()
    result = cli(["protocol", "pin", str(proto)], hf_cache, tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    if "cache" in expected:
        assert str(hf_cache) in result.stderr and "hf download" in result.stderr
    assert proto.read_bytes() == before


def test_a_builtin_policy_cannot_name_a_hub_checkpoint(tmp_path, hf_cache):
    proto = hub_protocol(tmp_path, hf_cache, f"hf://{REPO}@main")
    proto.write_text(proto.read_text().replace("  source: local\n", "  source: builtin\n", 1))
    result = cli(["protocol", "id", str(proto)], hf_cache, tmp_path)
    assert result.returncode == 2 and "set source: local" in result.stderr
