"""The main job, timed as a new user runs it: ``creditaudit demo`` from an empty directory.

Regenerate (about 8 minutes on 2 cores; keep the machine otherwise idle, installation excluded)::

    python benchmarks/demo_bench.py

Runs ``creditaudit demo --run demo-run --quiet`` as a subprocess in a fresh temporary directory (the
README's first command after its install), then ``creditaudit ledger verify --run demo-run``, then
the demo again (it resumes: every stage finds its outputs), and checks that the second run left the
ledger byte-identical. Wall time of each command, the demo's CPU time and peak resident memory
(``getrusage`` of the children; the peak is its largest process's), and what the demo printed (its
result lines: the policy, collection, replay, measurability, calibration, ledger, each family's
verdict beside the paper's, the resolution statement) go to ``benchmarks/results/demo_bench.json``,
and are printed.
Paths in the printed lines are relative to the run's directory, so the file names no machine path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _run(args: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"`{' '.join(args)}` exited {done.returncode}")
    return seconds, done.stdout


def _result_lines(stdout: str) -> list[str]:
    """The demo's result lines, without the run's progress and the report's file names."""
    keep = ("policy ", "collected ", "replay:", "measurability:", "calibration:", "ledger:", "  ", "How sure")
    return [line.rstrip() for line in stdout.splitlines() if line.startswith(keep)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "demo_bench.json")
    args = parser.parse_args(argv)
    cli = shutil.which("creditaudit")
    if cli is None:
        raise SystemExit("`creditaudit` is not on PATH: install the package first (README, 'Set up')")
    work = Path(tempfile.mkdtemp(prefix="creditaudit-demo-bench-"))
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        demo_s, stdout = _run([cli, "demo", "--run", "demo-run", "--quiet"], work)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ledger = work / "demo-run" / "ledger" / "ledger.json"
        first_sha = hashlib.sha256(ledger.read_bytes()).hexdigest()
        verify_s, verify_out = _run([cli, "ledger", "verify", "--run", "demo-run"], work)
        resume_s, resume_out = _run([cli, "demo", "--run", "demo-run", "--quiet"], work)
        second_sha = hashlib.sha256(ledger.read_bytes()).hexdigest()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "command": "creditaudit demo --run demo-run --quiet (from an empty directory)",
        "seconds": {"demo": demo_s, "ledger_verify": verify_s, "demo_again": resume_s},
        "demo_cpu_seconds": {"user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime},
        "demo_peak_rss_mib": after.ru_maxrss / 1024,  # kB on Linux
        "printed": _result_lines(stdout),
        "ledger_verify": [line for line in verify_out.splitlines() if line.startswith(("OK", "link-record"))],
        "ledger_sha256": first_sha,
        "ledger_identical_after_rerun": first_sha == second_sha,
        "rerun_printed_the_same": _result_lines(resume_out) == _result_lines(stdout),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"demo: {demo_s:.0f} s wall (user {result['demo_cpu_seconds']['user']:.0f} s, "
          f"peak RSS {result['demo_peak_rss_mib']:.0f} MiB); ledger verify {verify_s:.1f} s; "
          f"demo again {resume_s:.1f} s, ledger identical: {result['ledger_identical_after_rerun']}")
    print("\n".join(result["printed"]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
