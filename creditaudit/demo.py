"""``creditaudit demo``: the main job on the embedded default, from nothing, resumable.

In a run directory (``demo-run`` by default) it writes a demo-size protocol derived from the
default template, installs the embedded default policy shipped in the package (the default seed's
build; a protocol with another build section builds it), pins the policy into the protocol, makes
a key pair, freezes, generates the games, collects, replays a preregistered sample of turns,
extracts the signals, audits, calibrates the decision order on planted answers, regenerates the
ledger twice and writes the report. Every step is skipped when its output exists and verifies, so
re-running resumes rather than redoes. The training arms are not part of the demo (``creditaudit
arms``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import typer
import yaml

__all__ = ["DEMO_OVERRIDES", "demo_command", "demo_protocol_text", "findings_lines", "run_demo"]

#: How the demo departs from the paper-size default template, to reach verdicts in ~10 minutes on 2 cores.
#: The policy (the shipped default build), the horizon (50), the replay budgets and every gate's
#: minimums are the default template's; the demo collects fewer tasks and replays a preregistered
#: sample of each trajectory's turns (``replay.turns_per_trajectory``).
DEMO_OVERRIDES: dict[str, Any] = {
    "environment": {"generator": {"games_per_type": 3}},
    "collection": {"n_tasks": 16, "group_size": 4},
    "replay": {"turns_per_trajectory": 10},
    "statistics": {"bootstrap_iterations": 2000},
    # The families that run without a GPU in minutes (ProVer and VICT: benchmarks/alfworld_audit_bench.py).
    "signals": [
        {"name": "implicit", "family": "implicit"},
        # the small judge model shipped in the package (the tiny policy scores every turn alike)
        {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "embedded"}},
        {"name": "confidence", "family": "confidence"},
    ],
    "controls": [
        {"name": "random", "kind": "random", "null_control": True},
        {"name": "uniform", "kind": "uniform", "null_control": True},
        {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"},
        {"name": "shuffle-judge", "kind": "shuffle", "of": "judge"},
        {"name": "shuffle-confidence", "kind": "shuffle", "of": "confidence"},
        {"name": "inverted-implicit", "kind": "inverted", "of": "implicit"},
        {"name": "inverted-judge", "kind": "inverted", "of": "judge"},
    ],
}


#: Held-out games the demo measures its policy on (one per task type; the benchmark uses 24).
DEMO_HELD_OUT_GAMES = 6


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in (mappings recursively; lists replaced)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def demo_protocol_text(overrides: dict[str, Any] | None = None) -> str:
    """The default template with the demo's smaller sizes (comments replaced by a header)."""
    from creditaudit.protocol.io import default_template_text, parse_protocol

    data = _merge(yaml.safe_load(default_template_text()), overrides or DEMO_OVERRIDES)
    data["description"] = (
        "Demo-size audit of the embedded default policy on offline-generated ALFWorld games "
        "(the default template with smaller sizes; `creditaudit protocol init` writes the commented template)."
    )
    text = "# creditaudit demo protocol (schema version 1)\n" + yaml.safe_dump(data, sort_keys=False, width=100)
    parse_protocol(text, source="demo protocol")
    return text


def _say(message: str) -> None:
    typer.echo(message, err=True)


#: The stages :func:`run_demo` can stop after.
DEMO_STAGES = ("audit", "report")


def run_demo(run: Path, *, quiet: bool = False, overrides: dict[str, Any] | None = None,
             through: str = "report", policy_source: Path | None = None,
             held_out_games: int = DEMO_HELD_OUT_GAMES) -> dict[str, Any]:
    """Run (or resume) the demo in ``run``; returns what each stage reported.

    Parameters
    ----------
    run : Path
        Run directory (created; a second call resumes).
    quiet : bool
        No progress bars.
    overrides : dict, optional
        Departures from the default template (:data:`DEMO_OVERRIDES` when ``None``).
    through : {"audit", "report"}
        ``"audit"`` stops after the fidelity audit (no calibration, ledger or report).
    policy_source : Path, optional
        An already built default policy (a directory :func:`build_default_policy` wrote) to copy
        instead of building one; its build record must match the protocol's ``policy.build``.
    held_out_games : int
        Held-out games the built policy is measured on.
    """
    if through not in DEMO_STAGES:
        raise ValueError(f"`through` must be one of {DEMO_STAGES}; got {through!r}")
    from creditaudit.progress import progress_bars
    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.protocol.io import load_protocol
    from creditaudit.protocol.lock import freeze, lock_path_for, policy_dir, verify
    from creditaudit.protocol.signing import PRIVATE_KEY_NAME, generate_keypair, load_signer
    from creditaudit.replay.collect import collect
    from creditaudit.replay.policies.default import BUILD_RECORD, build_default_policy
    from creditaudit.replay.policies.default.shipped import install_built_policy, shipped_build
    from creditaudit.replay.stage import SUMMARY, run_replay
    from creditaudit.replay.tasks import prepare_tasks
    from creditaudit.audit.stage import run_audit
    from creditaudit.signals.stage import SUMMARY as SIGNALS_SUMMARY, run_signals

    run.mkdir(parents=True, exist_ok=True)
    protocol_path = run / "protocol.yaml"
    # wall seconds of each stage this call ran (for benchmarks; never written into the run)
    report: dict[str, Any] = {"run": str(run), "seconds": {}}

    @contextlib.contextmanager
    def seconds(stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            report["seconds"][stage] = round(time.perf_counter() - start, 1)

    # 1. the protocol text (not yet pinned or frozen)
    if not protocol_path.exists():
        protocol_path.write_text(demo_protocol_text(overrides), "utf-8")
        _say(f"[1/11] wrote the demo protocol {protocol_path}")
    else:
        _say(f"[1/11] protocol {protocol_path} exists")
    protocol = load_protocol(protocol_path)

    # 2. the policy: an input, built before the freeze from the protocol's build section
    target = policy_dir(protocol, protocol_path)
    if (target / BUILD_RECORD).is_file():
        _say(f"[2/11] default policy already in {target}")
    else:
        if target.exists():
            shutil.rmtree(target)  # an interrupted copy or build: start it again
        if policy_source is not None or protocol.policy.build.model_dump(mode="json") == shipped_build():
            install_built_policy(target, protocol.policy.build, source=policy_source)
            origin = policy_source or "the package (the default seed's build, shipped)"
            _say(f"[2/11] installed the default policy from {origin}")
        else:
            _say(f"[2/11] building the default policy in {target} (behaviour cloning on generated games)")
            with progress_bars(enabled=not quiet) as update:
                build_default_policy(
                    target, protocol.policy.build, history_length=protocol.policy.history_length,
                    eval_temperature=protocol.policy.temperature, eval_horizon=protocol.environment.horizon,
                    games_dir=run / ".policy-build-games",
                    decoding=protocol.policy.decoding, n_held_out=held_out_games,
                    progress=update,
                )
    record = json.loads((target / BUILD_RECORD).read_text())
    report["policy"] = record.get("evaluation", {})

    # 3. pin, keys, freeze
    lock = lock_path_for(protocol_path)
    if not lock.exists():
        if not protocol.policy.model_files:
            protocol_path.write_text(pin_policy_text(protocol_path.read_text("utf-8"), target), "utf-8")
        if not (run / "keys" / PRIVATE_KEY_NAME).exists():
            generate_keypair(run / "keys")
        frozen_lock = freeze(protocol_path, load_signer(run / "keys" / PRIVATE_KEY_NAME))
        _say(f"[3/11] froze the protocol: id {frozen_lock.protocol_id}")
    else:
        _say("[3/11] protocol already frozen")
    check = verify(protocol_path)
    if not check.ok:
        from creditaudit.errors import CheckFailed

        raise CheckFailed(f"{protocol_path}: the demo's protocol does not verify:\n{check.render()}")
    report["protocol_id"] = check.protocol_id
    signer = load_signer(run / "keys" / PRIVATE_KEY_NAME)

    from creditaudit.protocol.lock import require_frozen

    frozen = require_frozen(protocol_path)
    with progress_bars(enabled=not quiet) as update:
        # 4. games (data: generated after the freeze from the protocol's stream)
        _say("[4/11] task list (games generated offline and checked solvable on the real engine)")
        with seconds("games"):
            entries = prepare_tasks(frozen, signer, progress=lambda d, t: update("games", d, t))
        report["tasks"] = len(entries)
        # 5. collect
        _say("[5/11] collecting trajectories")
        with seconds("collect"):
            summary = collect(protocol_path, signer, progress=update)
        report["collect"] = summary.to_dict()
        # 6. replay
        _say("[6/11] executed counterfactual replay")
        with seconds("replay"):
            run_replay(protocol_path, signer, progress=update)
    document = json.loads((run / SUMMARY).read_text())
    report["replay"] = {k: v for k, v in document.items() if k != "measurability"}
    report["measurability"] = document["measurability"]
    # 7. signals (a finished stage whose inputs and outputs are unchanged is not run again)
    from creditaudit.protocol.links import stage_is_current

    if stage_is_current(run, "signals", frozen.id, signer.key_id):
        _say("[7/11] credit signals already computed")
    else:
        _say("[7/11] credit signals and controls")
        with seconds("signals"):
            run_signals(protocol_path, signer)
    report["signals"] = json.loads((run / SIGNALS_SUMMARY).read_text())
    # 8. audit
    if stage_is_current(run, "audit", frozen.id, signer.key_id):
        _say("[8/11] fidelity audit already done")
        sentences = json.loads((run / "audit" / "audit.json").read_text("utf-8"))["sentences"]
    else:
        _say("[8/11] fidelity audit through the frozen decision order")
        with seconds("audit"):
            sentences = run_audit(protocol_path, signer).sentences
    report["verdicts"] = dict(sentences)
    report["audit_summary"] = str(run / "audit" / "summary.md")
    report["audit"] = json.loads((run / "audit" / "audit.json").read_text("utf-8"))
    if through == "audit":
        return report
    # 9. calibration: the same decision order on credits of known fidelity (planted environment)
    from creditaudit.audit.calibration import CALIBRATION_JSON, calibrate_run

    if stage_is_current(run, "calibrate", frozen.id, signer.key_id):
        _say("[9/11] calibration already done")
    else:
        _say("[9/11] calibration: the decision order on planted credits of known fidelity")
        with seconds("calibrate"):
            calibrate_run(protocol_path, signer)
    report["calibration"] = json.loads((run / CALIBRATION_JSON).read_text("utf-8"))
    # 10. the ledger, regenerated twice in fresh processes and compared byte for byte
    from creditaudit.ledger import regenerate, write_report
    from creditaudit.ledger.catalogue import LEDGER_JSON, REPORT_DIR

    if stage_is_current(run, "ledger", frozen.id, signer.key_id):
        _say("[10/11] ledger already regenerated (twice, byte-identical) from the current artifacts")
        from creditaudit.ledger.model import read_ledger
        from creditaudit.protocol.canonical import sha256_file

        path = run / LEDGER_JSON
        report["ledger"] = {"path": str(path), "entries": len(read_ledger(path).entries), "sha256": sha256_file(path),
                            "identical_runs": 2}
    else:
        _say("[10/11] ledger: every number regenerated twice from the raw artifacts")
        with progress_bars(enabled=not quiet) as update, seconds("ledger"):
            ledger = regenerate(run, signer=signer, progress=update)
        report["ledger"] = {"path": str(ledger.path), "entries": ledger.n_entries, "sha256": ledger.sha256,
                            "identical_runs": ledger.identical_runs}
    # 11. the report
    if stage_is_current(run, "report", frozen.id, signer.key_id):
        _say("[11/11] report already written from the current ledger")
        report["report"] = {"markdown": str(run / REPORT_DIR / "report.md"), "html": str(run / REPORT_DIR / "report.html")}
    else:
        _say("[11/11] report")
        with seconds("report"):
            written = write_report(run, signer=signer)
        report["report"] = {"markdown": str(written.markdown), "html": str(written.html)}
    return report


def demo_command(
    run: Path = typer.Option(Path("demo-run"), "--run", help="Run directory (created; re-running resumes)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Run the end-to-end demo on the embedded default (resumable): protocol, policy, games, collect, replay,
    signals, audit, calibration, ledger, report."""
    from creditaudit.cli.paths import dir_to_write
    from creditaudit.papers import measurability_text

    report = run_demo(dir_to_write(run, "--run"), quiet=quiet)
    collect = report["collect"]
    mmap = report["measurability"]
    fmt = (lambda v: "undefined" if v is None else f"{v:.3f}")
    typer.echo(f"run directory: {run}")
    typer.echo(f"protocol id: {report['protocol_id']}")
    policy = report["policy"] or {}
    played = f"T={policy.get('temperature', 0.7)}" + (f", {policy['horizon']} steps" if "horizon" in policy else "")
    typer.echo(
        f"policy (held-out, {played}): success {fmt(policy.get('success_rate'))}, "
        f"admissible actions {fmt(policy.get('admissible_rate'))}"
    )
    typer.echo(
        f"collected {collect['n_trajectories']} trajectories on {collect['n_tasks']} tasks: "
        f"success {collect['success_rate']:.3f}, admissible {collect['admissible_rate']:.3f}"
    )
    typer.echo(
        f"replay: {report['replay']['n_rollouts']} rollouts, {report['replay']['prefix_divergences']} divergences, "
        f"cache hit rate {report['replay']['cache_hit_rate']:.3f}"
    )
    typer.echo(
        f"measurability: pivotal {fmt(mmap['share_pivotal'])}, sigma_floor = 0 {fmt(mmap['share_sigma_floor_zero'])}, "
        f"no counterfactual {fmt(mmap['share_no_counterfactual'])} (paper: {measurability_text()})"
    )
    cal = report["calibration"]
    typer.echo(f"calibration: the instrument recovers planted answers: {cal['recovered']}/{cal['of']} "
               f"(the same decision order on credits of known fidelity; `creditaudit calibrate` prints the table)")
    typer.echo(f"audit summary: {report['audit_summary']}")
    ledger = report["ledger"]
    typer.echo(f"ledger: {ledger['entries']} entries, regenerated {ledger['identical_runs']} times byte-identical "
               f"(sha256 {ledger['sha256'][:16]}…) in {ledger['path']}")
    typer.echo(f"report: {report['report']['markdown']} and {report['report']['html']}; attestations in {run / 'links'}")
    for line in findings_lines(report, run):
        typer.echo(line)


def findings_lines(report: dict[str, Any], run: Path) -> list[str]:
    """The demo's last lines: what was found (each family's verdict and median rho with its interval,
    beside the paper's), how sure it is (the resolution statement), and how to re-check it."""
    from creditaudit.papers import paper_values

    paper = paper_values()
    subjects = {s["subject"]: s for s in report["audit"]["subjects"]}
    verdicts = {d["family"]: d["verdict"] for d in report["audit"]["decisions"]}
    fmt = (lambda v: "undefined" if v is None else f"{v:+.3f}")
    lines = ["", "What the audit found (median within-trajectory Spearman of credit with executed-replay "
             "A_replay, 95% cluster-bootstrap interval; paper: Qwen2.5-7B on ALFWorld):"]
    # the audit's order (the protocol's), also when the verdicts were read back from a resumed run
    order = [d["family"] for d in report["audit"]["decisions"] if d["family"] in report["verdicts"]]
    order += [f for f in report["verdicts"] if f not in order]
    for family in order:
        s = subjects.get(family, {})
        ref = paper.get(f"paper.audit_rho.{family}")
        lines.append(f"  {family:<11} {verdicts.get(family, '?'):<19} rho {fmt(s.get('estimate'))} "
                     f"[{fmt(s.get('ci_low'))}, {fmt(s.get('ci_high'))}] over {s.get('n_trajectories', 0)} trajectories"
                     f" | paper: {ref.text if ref else 'not reported'}")
    lines += ["", *(report["verdicts"][f] for f in order), "",
              "How sure: " + report["measurability"]["resolution_statement"],
              "", "Re-check it:",
              f"  creditaudit ledger verify --run {run}   # recompute every number from the raw artifacts",
              f"  creditaudit calibrate --run {run}       # the decision order on planted answers of known fidelity",
              "", "The seven-arm training experiment is not part of the demo (it cannot reach a finding in minutes "
              f"on a CPU): `creditaudit arms --run {run}` trains the arms on this run at the protocol's size, and "
              "`python benchmarks/arms_bench.py` is the measured CPU configuration (README: 'Training arms on a CPU')."]
    return lines
