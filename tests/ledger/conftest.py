"""Fixtures of the ledger tests: one small planted run taken through collect -> replay -> signals ->
audit, and the same run with its ledger regenerated. Tests that change a run work on a copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def audited_run(tmp_path_factory, planted_policy_dir):
    """(run directory, signer) of a small planted run with replay, signals and audit (never modified)."""
    from helpers import make_run

    from creditaudit.audit.stage import run_audit
    from creditaudit.replay.stage import run_replay
    from creditaudit.signals.stage import run_signals

    run, signer = make_run(tmp_path_factory.mktemp("ledger-run"), planted_policy_dir)
    run_replay(run / "protocol.yaml", signer, executor="inline")
    run_signals(run / "protocol.yaml", signer)
    run_audit(run / "protocol.yaml", signer)
    return run, signer


@pytest.fixture(scope="session")
def ledgered_run(audited_run, tmp_path_factory):
    """(run directory, signer, RegenerateResult): a copy of the audited run with its ledger (never modified)."""
    from creditaudit.ledger import regenerate

    src, signer = audited_run
    run = tmp_path_factory.mktemp("ledgered") / "run"
    shutil.copytree(src, run)
    return run, signer, regenerate(run, signer=signer)


@pytest.fixture()
def copy_run(tmp_path):
    """``copy_run(src) -> Path``: a private copy of a run directory."""
    counter = {"n": 0}

    def copy(src: Path) -> Path:
        counter["n"] += 1
        dst = tmp_path / f"copy-{counter['n']}" / "run"
        shutil.copytree(src, dst)
        return dst

    return copy


@pytest.fixture()
def run_notebook(tmp_path, monkeypatch):
    """``run_notebook(name, run) -> {"images": n, "text": printed text}``: execute a walkthrough
    (nbclient, a fresh kernel) on ``run`` and summarise what it drew and printed."""
    import nbformat
    from nbclient import NotebookClient

    notebooks = Path(__file__).resolve().parents[2] / "notebooks"

    def execute(name: str, run: Path) -> dict:
        monkeypatch.setenv("CREDITAUDIT_RUN", str(run))
        monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        notebook = nbformat.read(notebooks / name, as_version=4)
        NotebookClient(notebook, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
        return {"images": sum("image/png" in o.get("data", {}) for o in outputs),
                "text": "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")}

    return execute
