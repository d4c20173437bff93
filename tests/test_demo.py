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
    from creditaudit.replay.default_policy import build_default_policy

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
        "replay": {"n_alternatives": 2},
        "statistics": {"bootstrap_iterations": 500},
        "arms": {**DEMO_OVERRIDES["arms"], "eval_tasks": 1, "probe_states": 4},
    }
    first = run_demo(run, quiet=True, overrides=overrides)
    assert first["ledger"]["identical_runs"] == 2 and first["ledger"]["entries"] > 0
    for key in ("markdown", "html"):
        text = Path(first["report"][key]).read_text()
        assert first["protocol_id"] in text
    assert (run / "arms" / "analysis.json").is_file() and json.loads((run / "arms" / "analysis.json").read_text())
    assert set(first["verdicts"]) == {"implicit", "judge", "confidence"}
    ledger_bytes = (run / "ledger" / "ledger.json").read_bytes()

    second = run_demo(run, quiet=True, overrides=overrides)  # resumes: nothing new is computed
    assert second["protocol_id"] == first["protocol_id"]
    assert (run / "ledger" / "ledger.json").read_bytes() == ledger_bytes
    assert verify_ledger(run).ok
