"""The walkthrough notebooks: stored without outputs, and executed (nbclient) on a small run."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["audit_walkthrough.ipynb", "arms_walkthrough.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_are_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, name


def test_audit_walkthrough_runs_and_draws(ledgered_run, run_notebook):
    result = run_notebook("audit_walkthrough.ipynb", ledgered_run[0])
    assert result["images"] >= 5  # measurability, credit vs A_replay, forest, fluency echo, router
    assert "protocol id:" in result["text"] and "entries, code version" in result["text"]


def test_arms_walkthrough_says_so_without_arms(ledgered_run, run_notebook):
    result = run_notebook("arms_walkthrough.ipynb", ledgered_run[0])
    assert "no training-arms artifacts in this run" in result["text"] and result["images"] == 0


def test_a_run_without_an_audit_gets_a_clear_message(audited_run, copy_run, run_notebook):
    from nbclient.exceptions import CellExecutionError

    run = copy_run(audited_run[0])
    (run / "audit" / "audit.json").unlink()
    with pytest.raises(CellExecutionError, match=r"audit/audit\.json: missing; run `creditaudit audit"):
        run_notebook("audit_walkthrough.ipynb", run)
