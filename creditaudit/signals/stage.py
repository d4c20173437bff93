"""``creditaudit signals``: per-turn credit from every family and control the protocol names.

Under a frozen protocol only. Reads ``collect/trajectories.parquet`` (refusing another protocol's)
and, when present, ``replay/turns.parquet`` (for the router's pivotal recall); builds every family
from its registered factory with the protocol's constants (a family this version does not
implement is refused, never stubbed); derives the controls; computes with one torch thread
(:func:`creditaudit.replay.compute.stored_numerics`) so the stored numbers do not depend on the
machine's thread count; and writes, attested by a signed link record:

* ``signals/credit.parquet`` -- one row per (trajectory, turn, family or control), columns
  :data:`~creditaudit.signals.base.CREDIT_SCHEMA`, stamped with the protocol id;
* ``signals/diagnostics/<name>.parquet`` -- each family's diagnostics;
* ``signals/summary.json`` -- abstention shares and reasons per family and control, each shuffle's
  changed share, judge-vs-judge agreement, and the router report.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from creditaudit.artifacts import read_stamped_parquet, write_parquet_atomic
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.protocol.links import StageLink
from creditaudit.protocol.lock import FrozenProtocol, require_frozen
from creditaudit.protocol.signing import Signer
from creditaudit.signals.base import CREDIT_SCHEMA, SignalContext, agreement_groups, make_family, reasons_of, trajectories_from_table
from creditaudit.signals.controls import changed_share, inverted_control, null_control, shuffle_control

__all__ = ["SIGNALS_DIR", "CREDIT", "SUMMARY", "DIAGNOSTICS_DIR", "SignalsSummary", "run_signals", "read_credit",
           "check_implemented"]

SIGNALS_DIR = "signals"
CREDIT = "signals/credit.parquet"
SUMMARY = "signals/summary.json"
DIAGNOSTICS_DIR = "signals/diagnostics"
SHARDS_DIR = "signals/shards"
"""Each family's output as soon as it is computed (credit, diagnostics, report), so an interrupted
stage resumes at the first family it had not finished; removed once the stage's outputs are attested."""


@dataclass(frozen=True)
class SignalsSummary:
    """What the stage produced (the full document is ``signals/summary.json``)."""

    protocol_id: str
    n_trajectories: int
    n_turns: int
    families: list[str]
    controls: list[str]
    document: dict[str, Any]


def check_implemented(frozen: FrozenProtocol) -> None:
    """Refuse a protocol naming a family this version does not implement (before any work)."""
    for i, spec in enumerate(frozen.protocol.signals):
        make_family(spec, source=f"{frozen.path.name}: signals[{i}]")


def _abstention(frame: pd.DataFrame) -> dict[str, Any]:
    reasons = [r for r in reasons_of(frame) if r is not None]
    n = len(frame)
    return {
        "n_turns": n,
        "n_abstained": len(reasons),
        "abstention_share": len(reasons) / n if n else None,
        "abstention_reasons": {r: reasons.count(r) for r in sorted(set(reasons))},
    }


def _rows(frame: pd.DataFrame, *, protocol_id: str, task_of: dict[str, str], family: str, kind: str,
          of: str | None) -> pd.DataFrame:
    credit = frame["credit"].to_numpy(dtype=float)
    reasons = reasons_of(frame)
    abstained = np.array([r is not None for r in reasons])
    if (np.isnan(credit) != abstained).any():
        raise RuntimeError(f"{family}: a credit is undefined without an abstention reason (or the reverse)")
    return pd.DataFrame({
        "protocol_id": protocol_id,
        "trajectory_id": pd.Series(frame["trajectory_id"].to_numpy(), dtype=object),
        "task_id": [task_of[t] for t in frame["trajectory_id"]],
        "turn": frame["turn"].to_numpy(dtype=np.int32),
        "subject": family,
        "kind": kind,
        "credit": [None if a else float(c) for c, a in zip(credit, abstained)],
        "abstained": abstained,
        "abstain_reason": pd.Series(reasons, dtype=object),
        "of": pd.Series([of] * len(frame), dtype=object),
    })


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null (canonical JSON refuses them; undefined is written as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def run_signals(
    protocol_path: str | Path,
    signer: Signer,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    policy: Any = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> SignalsSummary:
    """Extract every family and control of the frozen protocol at ``protocol_path``.

    Parameters
    ----------
    protocol_path : str or Path
        The frozen protocol (its directory is the run directory).
    signer : Signer
        Signs the stage's link record.
    progress : callable, optional
        ``progress(phase, done, total)``.
    policy : HFPolicy, optional
        The pinned policy already loaded (tests); by default it is loaded, refusing changed files.
    overrides : dict, optional
        Per-family test hooks (e.g. ``{"judge": {"backoff_s": 0.0}}``); never change credit values.

    Raises
    ------
    InputError
        No trajectories, trajectories of another protocol, or a family this version does not
        implement.
    """
    from creditaudit.replay.collect import TRAJECTORIES, load_run_policy, policy_files_in_run, read_trajectories
    from creditaudit.replay.compute import stored_numerics
    from creditaudit.replay.stage import SUMMARY as REPLAY_SUMMARY
    from creditaudit.replay.stage import TURNS as REPLAY_TURNS
    from creditaudit.replay.stage import read_replay
    from creditaudit.signals.families.judge import judge_agreement
    from creditaudit.signals.router import router_report

    frozen = require_frozen(protocol_path)
    protocol = frozen.protocol
    run_dir = frozen.run_dir
    families = [make_family(spec, source=f"{frozen.path.name}: signals[{i}]")
                for i, spec in enumerate(protocol.signals)]
    table = read_trajectories(frozen)
    trajectories = trajectories_from_table(table, source=TRAJECTORIES)
    replay_turns = None
    inputs: list[Path] = [frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json"), run_dir / TRAJECTORIES]
    if (run_dir / REPLAY_TURNS).is_file():
        turns, _ = read_replay(frozen)
        replay_turns = turns.select(["trajectory_id", "turn", "status", "pivotal"]).to_pandas()
        inputs += [run_dir / REPLAY_TURNS, run_dir / REPLAY_SUMMARY]
    needs = set().union(*(f.needs for f in families))
    if "environment" in needs:  # a family that executes the environment: task list and games are inputs
        from creditaudit.signals.families.prover import replay_inputs

        inputs += [p for p in replay_inputs(run_dir, protocol) if p not in inputs]
    if "policy" in needs:
        inputs += policy_files_in_run(frozen)
    external: list[Path] = []
    for family in families:
        extra = family.inputs(run_dir) if hasattr(family, "inputs") else []
        external += [p for p in extra if p not in inputs]
        inputs += [p for p in extra if p not in inputs]

    context = SignalContext(
        protocol_id=frozen.id, protocol=protocol, run_dir=run_dir, trajectories=trajectories,
        load_policy=(lambda: policy) if policy is not None else (lambda: load_run_policy(frozen)),
        progress=progress, overrides=dict(overrides or {}),
    )
    task_of = {t.trajectory_id: t.task_id for t in trajectories}
    spine = pd.DataFrame({"trajectory_id": [t.trajectory_id for t in trajectories for _ in t.turns],
                          "turn": np.asarray([r.turn for t in trajectories for r in t.turns], dtype=np.int32)})

    outputs: dict[str, Any] = {}
    shards = run_dir / SHARDS_DIR
    with stored_numerics():
        for family in families:
            out = _read_shard(shards, family.name, frozen.id)
            if out is None:
                out = family.compute(context)
                _write_shard(shards, family.name, frozen.id, out)
            same = (len(out.credit) == len(spine)
                    and out.credit["trajectory_id"].tolist() == spine["trajectory_id"].tolist()
                    and out.credit["turn"].tolist() == spine["turn"].tolist())
            if not same:
                raise RuntimeError(f"family {family.name!r} did not return one row per collected turn in order")
            outputs[family.name] = out

    audited = None  # the turns the audit can include: a shuffle permutes them among themselves
    if replay_turns is not None:
        complete = replay_turns.loc[replay_turns["status"] == "complete", ["trajectory_id", "turn"]]
        keys = set(zip(complete["trajectory_id"], complete["turn"].astype(int)))
        audited = np.array([(t, int(u)) in keys for t, u in zip(spine["trajectory_id"], spine["turn"])], dtype=bool)

    frames: list[pd.DataFrame] = []
    document: dict[str, Any] = {
        "protocol_id": frozen.id,
        "n_trajectories": len(trajectories),
        "n_turns": len(spine),
        "families": {},
        "controls": {},
    }
    for spec in protocol.signals:
        out = outputs[spec.name]
        frames.append(_rows(out.credit, protocol_id=frozen.id, task_of=task_of, family=spec.name, kind="family", of=None))
        document["families"][spec.name] = {"family": spec.family, **_abstention(out.credit), **out.report}

    for control in protocol.controls:
        if control.kind in ("random", "uniform"):
            frame = null_control(control.kind, control.name, spine, frozen.id)
            entry: dict[str, Any] = {"kind": control.kind, "of": None, "null_control": control.null_control}
        elif control.kind == "shuffle":
            source = outputs[control.of].credit
            frame = shuffle_control(control.name, source, frozen.id, audited=audited)
            entry = {"kind": "shuffle", "of": control.of, "null_control": control.null_control,
                     "shuffled_within": ("complete replay turns and the other turns of each trajectory, separately"
                                         if audited is not None else
                                         "each trajectory's turns (no replay results when the signals ran)"),
                     **changed_share(source, frame)}
        else:
            frame = inverted_control(outputs[control.of].credit)
            entry = {"kind": "inverted", "of": control.of, "null_control": control.null_control}
        frames.append(_rows(frame, protocol_id=frozen.id, task_of=task_of, family=control.name, kind="control",
                            of=control.of))
        document["controls"][control.name] = {**entry, **_abstention(frame)}

    document["judge_agreement"] = [
        entry for group in agreement_groups(families)
        for entry in judge_agreement({n: outputs[n].credit for n in group}, confidence_level=protocol.statistics.ci_level)
    ]
    router = protocol.router
    document["router"] = None if router is None else router_report(
        outputs[router.confidence_family].credit, routed_share=router.routed_share,
        confidence_family=router.confidence_family, judge_family=router.judge_family,
        replay_turns=replay_turns, confidence_level=protocol.statistics.ci_level,
    )
    document = _json_safe(document)

    credit = pa.Table.from_pandas(pd.concat(frames, ignore_index=True), schema=CREDIT_SCHEMA, preserve_index=False)
    parameters: dict[str, Any] = {"families": [s.name for s in protocol.signals],
                                  "controls": [c.name for c in protocol.controls]}
    facts = {f.name: f.input_facts() for f in families if hasattr(f, "input_facts") and f.input_facts()}
    if facts:  # e.g. a precomputed credit file's path, SHA-256, row count and columns
        parameters["input_facts"] = facts
    with StageLink(
        run_dir, "signals", frozen.id, signer,
        command=["creditaudit", "signals"],
        parameters=parameters,
        inputs=inputs,
        external_inputs=external,
    ) as link:
        write_parquet_atomic(credit, run_dir / CREDIT)
        link.add_output(run_dir / CREDIT)
        for name, out in outputs.items():
            if out.diagnostics is not None:
                path = run_dir / DIAGNOSTICS_DIR / f"{name}.parquet"
                stamp = pa.array([frozen.id] * out.diagnostics.num_rows, pa.string())
                write_parquet_atomic(out.diagnostics.add_column(0, "protocol_id", stamp), path)
                link.add_output(path)
        (run_dir / SUMMARY).write_bytes(canonical_bytes(document) + b"\n")
        link.add_output(run_dir / SUMMARY)
    shutil.rmtree(shards, ignore_errors=True)  # the attested outputs hold every family's
    return SignalsSummary(frozen.id, len(trajectories), len(spine), [s.name for s in protocol.signals],
                          [c.name for c in protocol.controls], document)


def _write_shard(shards: Path, name: str, protocol_id: str, out: Any) -> None:
    """A family's output, written before the next family starts (the report last: it marks the
    shard complete)."""
    from creditaudit.artifacts import write_bytes_atomic

    def arrow_bytes(table: pa.Table) -> bytes:  # Arrow IPC keeps the schema exactly (Parquet renames list items)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    shards.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(shards / f"{name}.credit.arrow", arrow_bytes(pa.Table.from_pandas(out.credit, preserve_index=False)))
    if out.diagnostics is not None:
        write_bytes_atomic(shards / f"{name}.diagnostics.arrow", arrow_bytes(out.diagnostics))
    record = {"protocol_id": protocol_id, "family": name, "diagnostics": out.diagnostics is not None,
              "report": _json_safe(out.report)}
    write_bytes_atomic(shards / f"{name}.report.json", canonical_bytes(record) + b"\n")


def _read_shard(shards: Path, name: str, protocol_id: str) -> Any:
    """The family's output from an interrupted run of this protocol, or None to compute it."""
    import json

    from creditaudit.signals.base import FamilyOutput

    def arrow_table(path: Path) -> pa.Table:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()

    marker = shards / f"{name}.report.json"
    if not marker.is_file():
        return None
    try:
        record = json.loads(marker.read_text("utf-8"))
        if record.get("protocol_id") != protocol_id or record.get("family") != name:
            return None
        credit = arrow_table(shards / f"{name}.credit.arrow").to_pandas()
        diagnostics = arrow_table(shards / f"{name}.diagnostics.arrow") if record["diagnostics"] else None
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None  # unreadable: computed again
    credit["abstain_reason"] = pd.Series(reasons_of(credit), dtype=object)
    return FamilyOutput(credit, diagnostics, record["report"])


def read_credit(frozen: FrozenProtocol) -> pa.Table:
    """The credit table of this protocol (refusing another protocol's)."""
    return read_stamped_parquet(frozen.run_dir / CREDIT, frozen.id, what="credit table",
                                command="creditaudit signals")


