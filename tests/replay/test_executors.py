"""Replay executors: local worker processes die with the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

psutil = pytest.importorskip("psutil")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_killing_only_the_main_replay_process_leaves_no_worker_behind(tmp_path, planted_policy_dir):
    """``kill -9`` of the ``replay`` process alone (not its process group): its worker processes,
    however far they got, exit within seconds instead of waiting forever for work (SPEC: no orphan
    holding a loaded policy)."""
    from helpers import make_run

    run, _ = make_run(tmp_path, planted_policy_dir)
    cmd = [sys.executable, "-m", "creditaudit", "replay", "--run", str(run), "--executor", "local", "--workers", "2",
           "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    parent = psutil.Process(proc.pid)
    descendants: list = []
    try:
        deadline = time.time() + 120
        workers: list = []
        while time.time() < deadline and len(workers) < 2:
            workers = [c for c in parent.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
            time.sleep(0.05)
        assert len(workers) >= 2, "the replay never started its worker processes"
        descendants = parent.children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)  # the main process only: its workers are not signalled
        proc.wait()
        _, alive = psutil.wait_procs(descendants, timeout=30)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:  # never leave an orphan behind a failed test
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for child in descendants:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
