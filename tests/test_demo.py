"""The demo end to end on the real engine, at a size CI affords (the main job a new user runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_alfworld_policy(tmp_path_factory):
    """A tiny default-recipe policy built on six generated games (the demo's own build is minutes)."""
    pytest.importorskip("textworld")
    from creditaudit.replay.policies.default import build_default_policy

    out = tmp_path_factory.mktemp("tiny-policy")
    build = {"seed": 5, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "train_games": 6, "passes": 1,
             "noise_rate": 0.25, "epochs": 1, "learning_rate": 3e-3}
    build_default_policy(out / "policy", build, games_dir=out / "games", evaluate=False)
    return out / "policy"


def test_demo_runs_end_to_end_and_resumes_to_the_same_ledger(tiny_alfworld_policy, tmp_path):
    import shutil

    from creditaudit.demo import DEMO_OVERRIDES, run_demo
    from creditaudit.ledger import verify_ledger

    run = tmp_path / "demo-run"
    run.mkdir()
    shutil.copytree(tiny_alfworld_policy, run / "policy")  # the build step then reuses it
    overrides = {
        **DEMO_OVERRIDES,
        "environment": {"generator": {"games_per_type": 1, "max_objects": 10, "max_receptacles": 8}, "horizon": 5},
        "collection": {"n_tasks": 2, "group_size": 2},
        "replay": {"n_alternatives": 2, "turns_per_trajectory": 3},
        "statistics": {"bootstrap_iterations": 500},
    }
    first = run_demo(run, quiet=True, overrides=overrides)
    assert first["ledger"]["identical_runs"] == 2 and first["ledger"]["entries"] > 0
    for key in ("markdown", "html"):
        text = Path(first["report"][key]).read_text()
        assert first["protocol_id"] in text
    assert not (run / "arms").exists()  # the training arms are their own command, not part of the demo
    calibration = json.loads((run / "calibration" / "calibration.json").read_text())
    assert calibration["recovered"] == calibration["of"] == 5
    assert "recovers planted answers: 5/5" in Path(first["report"]["markdown"]).read_text()
    assert set(first["verdicts"]) == {"implicit", "judge", "confidence"}
    from creditaudit.demo import findings_lines

    lines = findings_lines(first, run)
    subjects = {s["subject"]: s for s in first["audit"]["subjects"]}
    verdicts = {d["family"]: d["verdict"] for d in first["audit"]["decisions"]}
    for family in ("implicit", "judge", "confidence"):
        row = next(line for line in lines if line.strip().startswith(family + " "))
        assert verdicts[family] in row and f"over {subjects[family]['n_trajectories']} trajectories" in row
    assert any("paper: +0.019 [-0.109, +0.081]" in line for line in lines)  # implicit beside the paper's
    assert any(line.startswith("How sure: ") for line in lines)
    assert any("creditaudit ledger verify --run" in line for line in lines)
    assert any("creditaudit calibrate --run" in line for line in lines)
    ledger_bytes = (run / "ledger" / "ledger.json").read_bytes()

    links_before = sorted(p.name for p in (run / "links").glob("*.link.json"))
    second = run_demo(run, quiet=True, overrides=overrides)  # resumes: nothing new is computed
    assert second["protocol_id"] == first["protocol_id"]
    assert second["verdicts"] == first["verdicts"]
    assert (run / "ledger" / "ledger.json").read_bytes() == ledger_bytes
    assert verify_ledger(run).ok
    new_links = sorted(set(p.name for p in (run / "links").glob("*.link.json")) - set(links_before))
    assert new_links == []  # every finished, verified stage was skipped without writing anything

    from creditaudit.protocol.links import stage_is_current
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, load_signer

    key = load_signer(run / "keys" / PRIVATE_KEY_NAME).key_id
    assert stage_is_current(run, "audit", first["protocol_id"], key)
    assert not stage_is_current(run, "audit", "0" * 64, key)  # another protocol
    assert not stage_is_current(run, "audit", first["protocol_id"], "another-key")
    summary = run / "audit" / "summary.md"
    summary.write_text(summary.read_text() + "edited\n")  # an output changed: the stage runs again
    assert not stage_is_current(run, "audit", first["protocol_id"], key)


def test_a_copied_policy_must_come_from_the_protocols_build(tiny_alfworld_policy, tmp_path):
    """``policy_source`` is refused, naming the field, when it was built from another recipe or
    is not a built policy at all; nothing is copied."""
    from creditaudit.demo import run_demo
    from creditaudit.errors import InputError

    with pytest.raises(InputError, match=r"field `build` was built with .*'hidden_size': 16"):
        run_demo(tmp_path / "run", quiet=True, policy_source=tiny_alfworld_policy)
    assert not (tmp_path / "run" / "policy").exists()
    with pytest.raises(InputError, match="not a built default policy"):
        run_demo(tmp_path / "run", quiet=True, policy_source=tmp_path)
    with pytest.raises(ValueError, match="`through`"):
        run_demo(tmp_path / "run", quiet=True, through="arms")
