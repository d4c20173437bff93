"""Helpers of the tests of the example plugin distributions under ``examples/``: install one for real
(``pip install --target``, leaving a ``dist-info`` with its entry points) and run creditaudit in a
fresh process that sees it -- no registry is patched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["ROOT", "install", "process_env", "creditaudit", "STAGES", "run_stages"]

ROOT = Path(__file__).resolve().parents[1]


def install(source: Path, target: Path) -> None:
    """``pip install`` the example from a copy (pip builds in the source tree) into ``target``."""
    copy = target.parent / f"{target.name}-src"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                             "--no-index", "--quiet", "--target", str(target), str(copy)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def process_env(site: Path) -> dict[str, str]:
    """The environment of a fresh process that sees the installed example (and this source tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def creditaudit(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``creditaudit ARGS`` in a fresh process that sees ``site``."""
    return subprocess.run([sys.executable, "-m", "creditaudit", *args], capture_output=True, text=True,
                          env=process_env(site), cwd=cwd, timeout=600)


#: The stages of an audit, in order, as CLI arguments (``{run}`` is the run directory).
STAGES = (("protocol", "pin", "{run}/protocol.yaml"), ("protocol", "keygen", "--out", "{run}/keys"),
          ("protocol", "freeze", "{run}/protocol.yaml"), ("collect", "--run", "{run}", "--quiet"),
          ("replay", "--run", "{run}", "--quiet"), ("signals", "--run", "{run}", "--quiet"),
          ("audit", "--run", "{run}"))

_PIPELINE = textwrap.dedent('''
    import json, sys
    from creditaudit.cli import main

    if __name__ == "__main__":  # replay's worker processes must not run the pipeline again
        steps, kind, name, run = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
        codes = []
        for step in steps:
            try:
                main(step)
                code = 0
            except SystemExit as exc:
                code = exc.code
            codes.append(code)
            if code != 0:
                break
        from creditaudit import plugins
        plugin = plugins.get(kind, name)
        result = {"codes": codes, "distribution": plugin.distribution, "version": plugin.version,
                  "target": plugin.target}
        if kind == "environment" and codes == [0] * len(steps):
            # what the stages made of the protocol's environment (its replay contract's class)
            from creditaudit.protocol.io import load_protocol
            result["made"] = type(load_protocol(f"{run}/protocol.yaml").environment.plugin().make()).__name__
        print("RESULT " + json.dumps(result))
''')


def run_stages(site: Path, run: Path, plugin: tuple[str, str], *, stages=STAGES) -> tuple[dict, str]:
    """Run ``stages`` in one fresh process that sees ``site``, stopping at the first that fails;
    ``({codes, distribution, version, target} of the ``(kind, name)`` plugin as that process
    discovered it, and for an environment ``made``: the class of the instance the protocol's
    environment makes; the process's stderr)``."""
    steps = [[part.format(run=run) for part in stage] for stage in stages]
    result = subprocess.run([sys.executable, "-c", _PIPELINE, json.dumps(steps), *plugin, str(run)],
                            capture_output=True, text=True, env=process_env(site), timeout=900)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):]), result.stderr
