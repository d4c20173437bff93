"""The ledger, report and walkthrough on a run with a (tiny) training-arms experiment."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from creditaudit.ledger import LEDGER_JSON, read_ledger, regenerate, write_report

pytestmark = pytest.mark.slow


def _make_arms_run():
    path = Path(__file__).resolve().parents[1] / "training_arms" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_arms_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_arms_run


@pytest.fixture(scope="module")
def arms_run(tmp_path_factory, planted_policy_dir):
    from creditaudit.replay.stage import run_replay
    from creditaudit.training_arms.stage import run_arms

    run, signer = _make_arms_run()(tmp_path_factory.mktemp("ledger-arms"), planted_policy_dir)
    run_replay(run / "protocol.yaml", signer, executor="inline")
    run_arms(run / "protocol.yaml", signer)
    return run, signer, regenerate(run, signer=signer)


def test_arms_entries_recompute_the_arms_analysis(arms_run):
    run, _, result = arms_run
    e = {name: entry.value for name, entry in read_ledger(run / LEDGER_JSON).entry_map().items()}
    assert "arms" in [p.name for p in result.ledger.producers]
    assert {"arms/evaluation.parquet", "arms/training.parquet", "arms/probe_distributions.parquet"} <= {
        a.path for a in result.ledger.artifacts}
    analysis = json.loads((run / "arms" / "analysis.json").read_text())["analysis"]
    for c in analysis["comparisons"]:
        assert e[f"arms.{c['id']}.pvalue_holm"] == c["pvalue_holm"]
        assert e[f"arms.{c['id']}.reading"] == c["reading"]
        assert e[f"arms.{c['id']}.estimate"] == c.get("estimate")
    for arm, dose in analysis["dose"].items():
        assert e[f"arms.{arm}.mean_steps_per_round"] == dose["mean_steps_per_round"]
        assert e[f"arms.{arm}.credit_sparsity"] == dose["credit_sparsity"]
    for stage in analysis["stages"]:
        if "undefined" not in stage:
            p = f"arms.stage.{stage['stage']}"
            assert e[f"{p}.js_between"] == stage["between_within"].get("mean_between")
            assert e[f"{p}.partial_mantel.statistic"] == stage["partial_mantel"].get("statistic")
            assert e[f"{p}.positive_control.pvalue"] == stage["positive_control"].get("pvalue")
    held = analysis["success"]["held_out"]
    assert e["arms.base.eval_success"] == held["base"]


def test_report_has_the_arms_section(arms_run, tmp_path):
    run, _, _ = arms_run
    result = write_report(run)
    md = result.markdown.read_text()
    assert "## Training arms" in md and "| C1 | implicit vs shuffled_implicit |" in md
    assert "never\n\"no difference\"" in md or 'never "no difference"' in md.replace("\n", " ")
    assert "arms.png" in {p.name for p in result.figures}


def test_arms_walkthrough_draws(arms_run, run_notebook):
    result = run_notebook("arms_walkthrough.ipynb", arms_run[0])
    assert result["images"] >= 3  # success, dose, JS heatmap
