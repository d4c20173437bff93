"""Calibration: does this protocol's decision order recover answers known by construction?

``creditaudit calibrate`` runs the audit -- the protocol's own statistics conventions, exclusion
rules, gates and decision order -- on the planted-effect environment
(:mod:`creditaudit.replay.envs.planted`), whose per-step causal effects are known exactly, with
credits whose fidelity is known by construction:

=================  ===========================================================  ===============
subject            credit                                                       expected
=================  ===========================================================  ===============
``oracle``         the planted true effect of each action, plus small noise      ``H1_TRACKS``
``negated``        minus the oracle                                              ``H2_REVERSED``
``noise``          independent of the effects                                    ``H3_PLACEBO``
``shuffle-oracle`` the oracle shuffled within trajectory (decided as a family)   ``H3_PLACEBO``
Controls gate      the protocol's null controls (random, uniform credit): their   ``passes``
                   intervals contain 0, so the gate lets the families through
=================  ===========================================================  ===============

The trajectories are collected and replayed for real on the planted environment with its
reference policy (uniform over the admissible doors); every random number comes from a named
stream of the calibration protocol's id (``calibrate/...``). If any row misses its expected
answer the instrument is not valid as configured, and the command exits 1.

Example:
    >>> from creditaudit.protocol.io import default_template_text, parse_protocol
    >>> result = run_calibration(parse_protocol(default_template_text()), n_tasks=90)
    >>> result.ok, f"{result.n_recovered}/{len(result.rows)}"
    (True, '5/5')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from creditaudit.protocol.seeds import rng, seed_int

__all__ = ["CALIBRATION_TASKS", "CALIBRATION_JSON", "CalibrationRow", "Calibration", "calibration_protocol",
           "credit_table", "run_calibration", "calibrate_run"]

#: The attested calibration table of a run (``creditaudit calibrate --run DIR`` on a frozen run).
CALIBRATION_JSON = "calibration/calibration.json"

#: Planted tasks (one trajectory each) of a calibration run: enough for every gate's minimums.
CALIBRATION_TASKS = 90

_SIGNALS = ("oracle", "negated", "noise")
_EXPECTED = {"oracle": "H1_TRACKS", "negated": "H2_REVERSED", "noise": "H3_PLACEBO",
             "shuffle-oracle": "H3_PLACEBO"}
_CREDIT = {"oracle": "planted true effect + N(0, 0.02) noise", "negated": "minus the oracle",
           "noise": "N(0, 1), independent of the effects", "shuffle-oracle": "the oracle shuffled within trajectory"}


@dataclass(frozen=True)
class CalibrationRow:
    """One known answer: the subject, its credit, the expected and the obtained verdict."""

    subject: str
    credit: str
    expected: str
    verdict: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None

    @property
    def ok(self) -> bool:
        return self.verdict == self.expected


@dataclass(frozen=True)
class Calibration:
    """The calibration table (``rows``) with the run's size; ``ok`` when every answer is recovered."""

    rows: list[CalibrationRow]
    protocol_id: str
    n_trajectories: int
    n_included_turns: int

    @property
    def n_recovered(self) -> int:
        return sum(r.ok for r in self.rows)

    @property
    def ok(self) -> bool:
        return self.n_recovered == len(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "recovered": self.n_recovered, "of": len(self.rows), "protocol_id": self.protocol_id,
                "n_trajectories": self.n_trajectories, "n_included_turns": self.n_included_turns,
                "rows": [dict(asdict(r), ok=r.ok) for r in self.rows]}

    def render(self) -> str:
        def num(v: float | None) -> str:
            return "—" if v is None else f"{v:+.3f}"

        lines = [f"{'subject':<15} {'credit':<42} {'expected':<15} {'verdict':<19} median rho [CI]"]
        for r in self.rows:
            mark = "ok" if r.ok else "MISSED"
            lines.append(f"{r.subject:<15} {r.credit:<42} {r.expected:<15} {r.verdict:<19} "
                         f"{num(r.estimate)} [{num(r.ci_low)}, {num(r.ci_high)}]  {mark}")
        lines.append(f"the instrument recovers planted answers: {self.n_recovered}/{len(self.rows)} "
                     f"({self.n_trajectories} planted trajectories, {self.n_included_turns} included turns)")
        return "\n".join(lines)


def calibration_protocol(protocol: Any) -> Any:
    """``protocol`` with its audited signals and controls replaced by the calibration's (its
    statistics, exclusions and hypotheses -- gates and decision order -- kept as they are)."""
    from creditaudit.protocol.io import protocol_dict, protocol_from_dict

    data = protocol_dict(protocol)
    nulls = [c for c in data["controls"] if c.get("null_control")]
    if not nulls:
        nulls = [{"name": "random", "kind": "random", "null_control": True}]
    data["signals"] = [{"name": name, "family": "confidence"} for name in _SIGNALS]
    data["controls"] = nulls + [{"name": f"shuffle-{name}", "kind": "shuffle", "of": name} for name in _SIGNALS]
    data["router"] = None
    hypotheses = data["hypotheses"]
    if hypotheses.get("confirmatory"):
        hypotheses["confirmatory"] = list(_SIGNALS)
    data["plugins"] = []
    data["amends"] = None
    return protocol_from_dict(data)


class _ReferencePolicy:
    """The planted environment's reference policy: uniform over the admissible doors, which it reads
    from the prompt the toolkit's own prompt builder wrote (``admissible actions: a | b``)."""

    def __init__(self) -> None:
        from creditaudit.replay.envs.planted import PLANTED_PROMPT
        from creditaudit.replay.policies import PromptBuilder

        self.prompt_builder = PromptBuilder(None, history_length=0, instruction=PLANTED_PROMPT.instruction)

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        from creditaudit.replay.policies import SampledAction

        out = []
        for prompt, seed in zip(prompts, seeds):
            line = [text for text in prompt.splitlines() if text.startswith("admissible actions: ")][-1]
            admissible = line[len("admissible actions: "):].split(" | ")
            choice = admissible[int(np.random.default_rng(int(seed)).integers(len(admissible)))]
            out.append(SampledAction(choice, (), (), "eos", None, int(seed)))
        return out


def _planted_replay(protocol_id: str, n_tasks: int) -> pd.DataFrame:
    from creditaudit.replay.engine import ReplaySettings, replay_trajectory
    from creditaudit.replay.envs.planted import PlantedEnv
    from creditaudit.replay.rollout import advance, start_rollout

    env, policy = PlantedEnv(n_steps=8, horizon=30, p_absorbing=0.05, p_pivotal=0.6), _ReferencePolicy()
    frames = []
    for i, task in enumerate(env.make_tasks(n_tasks, rng=rng(protocol_id, "calibrate/tasks"))):
        obs = env.reset(task)
        rollout = start_rollout(env, 0, goal=obs.goal, observation=obs.text, admissible=obs.admissible)
        base = seed_int(protocol_id, f"calibrate/collect/{i}") % (2**31)
        advance(env, policy, policy.prompt_builder, [rollout], seed_for=lambda r, base=base: base + r.steps,
                temperature=1.0)
        trajectory = pd.DataFrame({"trajectory_id": f"calibrate-{i:03d}", "action": [t.action for t in rollout.turns],
                                   "state_signature": [t.state_signature for t in rollout.turns],
                                   "observation": [t.observation for t in rollout.turns], "mean_logprob": 0.0})
        env.reset(task)
        truth = env.true_effects(list(trajectory.action))
        turns = replay_trajectory(env, policy, task=task, trajectory=trajectory, protocol_id=protocol_id,
                                  settings=ReplaySettings()).turns.to_pandas()
        turns["truth"] = truth
        frames.append(turns)
    return pd.concat(frames, ignore_index=True)


def _credits(replay: pd.DataFrame, protocol_id: str, null_controls: list[Any]) -> pd.DataFrame:
    gen = rng(protocol_id, "calibrate/credit")
    n = len(replay)
    oracle = replay.truth.to_numpy() + gen.normal(0, 0.02, n)
    values = {"oracle": oracle, "negated": -oracle, "noise": gen.normal(size=n)}
    for control in null_controls:
        values[control.name] = gen.normal(size=n) if control.kind == "random" else gen.uniform(-1, 1, n)
    groups = replay.groupby("trajectory_id").groups
    for name in _SIGNALS:
        shuffled = values[name].copy()
        for _, idx in sorted(groups.items()):
            idx = np.asarray(idx)
            shuffled[idx] = values[name][gen.permutation(idx)]
        values[f"shuffle-{name}"] = shuffled
    return credit_table(replay, values)


def credit_table(replay: pd.DataFrame, values: dict[str, np.ndarray]) -> pd.DataFrame:
    """Long-form credit (``trajectory_id, turn, subject, credit, abstained``) of every subject in
    ``values``, one array per subject aligned with the rows of ``replay``; no turn abstains."""
    frames = []
    for name, credit in values.items():
        frame = replay[["trajectory_id", "turn"]].copy()
        frame["subject"], frame["credit"], frame["abstained"] = name, credit, False
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def run_calibration(protocol: Any, *, n_tasks: int = CALIBRATION_TASKS) -> Calibration:
    """Audit known-fidelity credits on the planted environment under ``protocol``'s decision order."""
    from creditaudit.audit.core import audit_tables
    from creditaudit.protocol.decision import decide

    cal = calibration_protocol(protocol)
    pid = cal.id
    replay = _planted_replay(pid, n_tasks)
    nulls = [c for c in cal.controls if c.null_control]
    result = audit_tables(_credits(replay, pid, nulls), replay, protocol=cal, protocol_id=pid)
    decisions = {name: result.decisions[name] for name in _SIGNALS}
    # the shuffle control audited as a family of its own, against the noise family's shuffle
    decisions["shuffle-oracle"] = decide(cal.hypotheses, family="shuffle-oracle", table=result.table,
                                         aliases={"shuffle(self)": "shuffle-noise"})
    rows = []
    for name, decision in decisions.items():
        s = result.subjects[name]
        rows.append(CalibrationRow(name, _CREDIT[name], _EXPECTED[name], decision.verdict, s.estimate,
                                   s.ci_low, s.ci_high))
    controls = [g for g in decisions["oracle"].gates if g.kind == "controls"]
    state = ("absent" if not controls else "passes" if all(g.outcome is False for g in controls)
             else "fires" if any(g.outcome for g in controls) else "unknown")
    names = ", ".join(c.name for c in nulls)
    rows.append(CalibrationRow("Controls gate", f"null controls ({names}) contain 0", "passes", state,
                               None, None, None))
    return Calibration(rows, pid, int(result.exclusions["n_trajectories"]), int(result.exclusions["n_included_turns"]))


def calibrate_run(protocol_path: Any, signer: Any, *, n_tasks: int = CALIBRATION_TASKS) -> Calibration:
    """Calibrate a frozen run's protocol and write the table to :data:`CALIBRATION_JSON` under a
    signed link record (stage ``calibrate``), so that the ledger regenerates it and the report shows it.

    The table depends on the frozen protocol alone (and the code), never on the run's data."""
    from pathlib import Path

    from creditaudit.artifacts import write_bytes_atomic
    from creditaudit.protocol.canonical import canonical_bytes
    from creditaudit.protocol.links import StageLink
    from creditaudit.protocol.lock import require_frozen

    frozen = require_frozen(Path(protocol_path))
    result = run_calibration(frozen.protocol, n_tasks=n_tasks)
    run_dir = frozen.run_dir
    target = run_dir / CALIBRATION_JSON
    target.parent.mkdir(parents=True, exist_ok=True)
    with StageLink(run_dir, "calibrate", frozen.id, signer, command=["creditaudit", "calibrate"],
                   parameters={"n_tasks": n_tasks},
                   inputs=[frozen.path, frozen.path.with_name(frozen.path.stem + ".lock.json")]) as link:
        document = {**result.to_json(), "calibration_protocol_id": result.protocol_id, "protocol_id": frozen.id,
                    "n_tasks": n_tasks}
        write_bytes_atomic(target, canonical_bytes(document) + b"\n")
        link.add_output(target)
    return result
