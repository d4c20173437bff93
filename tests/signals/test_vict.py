"""VICT: the pure pieces (direction, closure, cores, margins, normalisation, calibration), the
abstentions, and -- on the real ALFWorld engine with small generated games -- conformance of the
aggregator with the engine's ``won``, the eligibility invariant, and greedy-vs-exhaustive cores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from creditaudit.signals.base import Trajectory, TurnRecord, reasons_of
from creditaudit.signals.families.vict import (
    VictFamily,
    calibrate,
    closure,
    direction,
    displacement,
    exhaustive_core,
    greedy_core,
    loo_margins,
    robust_normalise,
)
from creditaudit.signals.families.vict.atoms import Instrumentation, annotate, instrument, mutations, run_trace

GAME_SEED = 20261202


def _clean_inst() -> Instrumentation:
    return Instrumentation(
        task_type="pick_clean_then_place_in_recep", obj_type="pot", recep_type="fridge", transform="isclean",
        object_types={"pot_1": "pot"}, recep_types={"fridge_1": "fridge"},
        atoms=("seen", "held", "transformed", "placed"), goal_atoms=("transformed", "placed"),
        depends={"held": ("seen",), "transformed": ("held",), "placed": ("held",)},
        evidence={},
    )


# ------------------------------------------------------------------------------ pure pieces


def test_direction_tie_band():
    assert direction(0.3, tie_band=0.1) == 1 and direction(-0.3, tie_band=0.1) == -1
    assert direction(0.1, tie_band=0.1) == 0 and direction(0.0, tie_band=0.0) == 0


def test_closure_follows_the_dependencies_in_the_direction_of_the_edit():
    inst = _clean_inst()
    assert closure(inst, ["seen"], +1) == {"seen", "held", "transformed", "placed"}  # removing seen removes all
    assert closure(inst, ["placed"], -1) == {"placed", "held", "seen"}  # repairing placed needs held, seen


def test_success_and_repair_cores_margins():
    inst = _clean_inst()
    won = {"seen": "sat", "held": "sat", "transformed": "sat", "placed": "sat"}
    core = greedy_core(inst, won, +1)
    assert core.core == {"transformed"} and not core.budget_hit  # ties: smaller closure, then atom order
    assert displacement(inst, won, core.core, +1) == 1
    assert loo_margins(inst, won, core.core, +1) == {"transformed": 1.0}
    # a failure that held the pot but neither cleaned nor placed it: the repair core needs both
    lost = {"seen": "sat", "held": "sat", "transformed": "viol", "placed": "unsat"}
    core = greedy_core(inst, lost, -1)
    assert core.core == {"transformed", "placed"}  # held and seen are sat: no repair needed
    assert closure(inst, ["placed"], -1, lost) == {"placed"}
    assert exhaustive_core(inst, lost, -1) is not None
    margins = loo_margins(inst, lost, core.core, -1)
    assert margins["transformed"] == -1.0 and margins["placed"] == -1.0  # signed by the direction
    # budget: one atom cannot reach the target
    assert greedy_core(inst, lost, -1, budget=1).budget_hit


def test_greedy_equals_exhaustive_on_every_assignment_of_a_small_atom_set():
    inst = _clean_inst()
    agree = total = 0
    for values in __import__("itertools").product(("sat", "unsat"), repeat=4):
        z = dict(zip(inst.atoms, values))
        for q in (1, -1):
            ex = exhaustive_core(inst, z, q)
            gr = greedy_core(inst, z, q, budget=8).core
            if ex is None:
                assert gr is None
                continue
            total += 1
            agree += len(gr) == len(ex)
    assert total > 0 and agree == total


def test_robust_normalise_and_calibration():
    assert robust_normalise([1.0, 1.0]).tolist() == [0.0, 0.0]  # zero scale
    assert robust_normalise([2.0], min_support=2).tolist() == [0.0]  # too little support
    x = robust_normalise([1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0])
    assert x[:3] == pytest.approx([2.0 / 0.75] * 3) and (x[3:] == 0).all()
    lam, c = calibrate([0.5, -0.5, 1.5, -1.5], [0.0, 0.0, 1.0, -3.0], lambda_scale=0.5, clip_quantile=0.95)
    assert lam == pytest.approx(0.5 * 1.0 / 2.0) and c == pytest.approx(np.quantile([0.5, 0.5, 1.5, 1.5], 0.95))


def test_planted_environment_abstains_with_a_reason(trajectory_factory, context_factory):
    class _P:
        class environment:
            name, args, horizon = "planted", {}, 8

    trajs = [trajectory_factory(f"t{i}", "k", n_turns=3, outcome=i % 2, rollout=i) for i in range(4)]
    out = VictFamily(name="vict").compute(context_factory(trajs, protocol=_P()))
    assert out.credit.credit.isna().all()
    assert set(reasons_of(out.credit)) == {"environment_not_instrumented"}
    assert out.report["trajectory_abstention_reasons"] == {"environment_not_instrumented": 4}


def test_stage_no_longer_refuses_vict():
    from creditaudit.signals.base import implemented_families

    assert {"prover", "vict"} <= set(implemented_families())


# ------------------------------------------------------------------------------ real engine


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    from creditaudit.replay.envs.alfworld import TASK_TYPES, generate_games

    out = tmp_path_factory.mktemp("vict-run") / "games"  # inside a run directory (see the compute test)
    report = generate_games(out, task_types=TASK_TYPES, games_per_type=1, max_objects=12, max_receptacles=10,
                            rng=np.random.default_rng(GAME_SEED))
    return {g.task_type: g for g in report.games}


@pytest.fixture(scope="module")
def engine():
    from creditaudit.replay.envs.alfworld import AlfworldEnv

    env = AlfworldEnv(horizon=50)
    yield env
    env.close()


def _task(game):
    from creditaudit.replay.envs import Task

    return Task(game.task_id, game.task_type, str(game.path))


def _trajectory(env, task, actions, tid, rollout, signatures=None) -> Trajectory:
    obs = env.reset(task)
    text, admissible, turns, won = obs.text, obs.admissible, [], False
    for t, a in enumerate(actions):
        if signatures is not None:
            signatures.append(env.state_signature())
        r = env.step(a)
        turns.append(TurnRecord(t, text, tuple(admissible), a, (-0.1,), -0.1, r.text))
        text, admissible, won = r.text, r.admissible, r.won
        if r.done:
            break
    return Trajectory(tid, task.task_id, rollout, obs.goal, int(won), tuple(turns))


def _group(env, game):
    """Eight rollouts of one game: the walkthrough, a detour, and every verifier mutation of it."""
    task = _task(game)
    inst = instrument(game.task_type, json.loads(game.path.read_text()))
    walk = list(game.walkthrough)
    base = annotate(inst, run_trace(env, task, walk))
    variants = [walk, ["look"] + walk, *mutations(inst, base, env, task).values()]
    variants += [walk[:1], ["inventory"] + walk[:2]]
    variants = (variants * 2)[:8]
    made = {}
    for v in variants:
        made.setdefault(tuple(v), _trajectory(env, task, v, "", 0))
    trajs = [made[tuple(v)] for v in variants]
    return task, inst, [Trajectory(f"{game.task_type}-{k}", t.task_id, k, t.goal, t.outcome, t.turns)
                        for k, t in enumerate(trajs)]


@pytest.mark.slow
def test_vict_on_the_real_engine(games, engine):
    family = VictFamily(name="vict")
    groups, task_of, inst_of = {}, {}, {}
    for tt, game in sorted(games.items()):
        task, inst, trajs = _group(engine, game)
        groups[task.task_id], task_of[task.task_id], inst_of[task.task_id] = trajs, task, inst
    rolls = family.run_groups(groups, env=engine, task_of=task_of, inst_of=inst_of, signatures={})
    trajectories = [t for g in groups.values() for t in g]
    out = family.finish(trajectories, rolls)  # asserts the eligibility invariant on every output
    report = out.report
    # the aggregator reproduces the engine's `won` on every conformance case it accepts
    for r in rolls:
        if r.conformance is not None and r.conformance.ok:
            assert all(f == v for f, v in r.conformance.cases.values())
    assert report["conformance_rate"] == 1.0, [(r.trajectory_id, r.conformance.cases) for r in rolls
                                               if r.conformance is not None and not r.conformance.ok]
    diag = out.diagnostics.to_pandas()
    nonzero = diag[diag.correction != 0]
    assert len(nonzero) > 0 and nonzero.eligible.all()  # eligibility invariant, 100%
    assert report["greedy_exhaustive_compared"] > 0
    # the ledger's figures, recomputed from the stored table alone, are the family's own
    from creditaudit.signals.families.vict import diagnostics_report

    recomputed = diagnostics_report(out.diagnostics)
    assert recomputed == {k: report[k] for k in recomputed}
    assert 0 < recomputed["proof_coverage"] < 1 and recomputed["nonzero_action_share"] > 0
    # corrections sit on commit / transform / take actions, never on a bare "look"
    assert not any(a == "look" for a in [dict(((t.trajectory_id, r.turn), r.action) for t in trajectories
                                              for r in t.turns)[(row.trajectory_id, row.turn)]
                                         for row in nonzero.itertuples()])
    print("\nVICT report (6 generated games x 8 rollouts):\n" + json.dumps(report, indent=1, sort_keys=True))


@pytest.mark.slow
def test_family_compute_replays_a_run_directory_and_checks_signatures(games, engine):
    """``VictFamily.compute`` on a run directory: recorded signatures checked, credit table complete."""
    import types

    import pyarrow as pa
    import pyarrow.parquet as pq

    from creditaudit.signals.base import SignalContext

    game = games["pick_heat_then_place_in_recep"]
    run = game.path.parent.parent.parent
    pid = "a" * 64
    task, inst, trajs = _group(engine, game)
    sigs = {}
    for t in trajs:
        sigs[t.trajectory_id] = []
        _trajectory(engine, task, [r.action for r in t.turns], "", 0, signatures=sigs[t.trajectory_id])
    sigs[trajs[-1].trajectory_id][0] = "0" * 64  # a recorded state the engine does not reproduce
    rows = [(t.trajectory_id, r.turn, sigs[t.trajectory_id][r.turn]) for t in trajs for r in t.turns]
    (run / "collect").mkdir(exist_ok=True)
    pq.write_table(pa.table({"protocol_id": [pid] * len(rows), "trajectory_id": [r[0] for r in rows],
                             "turn": [r[1] for r in rows], "state_signature": [r[2] for r in rows]}),
                   run / "collect" / "trajectories.parquet")
    (run / "tasks.json").write_text(json.dumps({"protocol_id": pid, "tasks": [
        {"task_id": game.task_id, "task_type": game.task_type, "path": str(game.path.relative_to(run)),
         "params": {}}]}))
    protocol = types.SimpleNamespace(environment=types.SimpleNamespace(
        name="alfworld", source="generated", horizon=50, args={}, data_dir=None))
    context = SignalContext(pid, protocol, run, trajs, lambda: None)
    out = VictFamily(name="vict").compute(context)
    assert len(out.credit) == sum(len(t) for t in trajs)
    reasons = dict(zip(zip(out.credit.trajectory_id, out.credit.turn), reasons_of(out.credit)))
    assert reasons[(trajs[-1].trajectory_id, 0)] == "replay_mismatch"
    assert out.report["trajectory_abstention_reasons"]["replay_mismatch"] == 1
    assert out.report["conformance_rate"] == 1.0
    from creditaudit.signals.families.vict import diagnostics_report

    recomputed = diagnostics_report(out.diagnostics)
    assert recomputed == {k: out.report[k] for k in recomputed}  # the abstaining trajectory included
    diag = out.diagnostics.to_pandas()
    assert (diag[diag.correction != 0].eligible).all()
    assert (out.credit.credit.isna() == [r is not None for r in reasons_of(out.credit)]).all()


def test_stage_writes_vict_abstentions_on_the_planted_environment(tmp_path, planted_policy_dir, signal_set):
    """Through the stage: one row per turn, every one an abstention with its reason, summary entry."""
    import pyarrow.parquet as pq
    from helpers import make_run

    from creditaudit.signals.stage import CREDIT, DIAGNOSTICS_DIR, run_signals

    signals, controls = signal_set
    signals.append({"name": "vict", "family": "vict"})
    controls.append({"name": "shuffle-vict", "kind": "shuffle", "of": "vict"})
    run, signer = make_run(tmp_path, planted_policy_dir, signals=signals, controls=controls, n_tasks=1, group=2)
    summary = run_signals(run / "protocol.yaml", signer)
    df = pq.read_table(run / CREDIT).to_pandas()
    vict = df[df.subject == "vict"]
    assert len(vict) == summary.n_turns and vict.abstained.all()
    assert set(vict.abstain_reason) == {"environment_not_instrumented"}
    entry = summary.document["families"]["vict"]
    assert entry["family"] == "vict"
    assert entry["abstention_reasons"] == {"environment_not_instrumented": summary.n_turns}
    assert (run / DIAGNOSTICS_DIR / "vict.parquet").is_file()


def test_a_task_type_without_instrumentation_gets_none():
    assert instrument("pick_and_place_with_movable_recep", {"pddl_problem": "(:goal (and))"}) is None
    assert instrument("pick_and_place_simple", {"pddl_problem": "(define (problem p))"}) is None


def test_an_atom_family_inconsistent_with_the_dependencies_is_masked():
    from creditaudit.signals.families.vict.atoms import Trace, conformance

    inst = Instrumentation(
        task_type="pick_and_place_simple", obj_type="pot", recep_type="fridge", transform=None,
        object_types={"pot_1": "pot"}, recep_types={"fridge_1": "fridge"},
        atoms=("seen", "held", "placed"), goal_atoms=("placed",), depends={"held": ("seen",), "placed": ("held",)},
        evidence={},
    )
    # `placed` turns sat although `held` never was: the held family's evidence is not trustworthy
    trace = Trace(actions=["look"], facts=[{}, {}], texts=["", ""], signatures=[""], won=True, names={},
                  statuses=[{"seen": "unk", "held": "unsat", "placed": "unsat"},
                            {"seen": "sat", "held": "unsat", "placed": "sat"}])
    result, _ = conformance(inst, trace, env=None, task=None)
    assert result.ok and result.cases == {"factual": (1, 1)}
    assert result.masked_families == ("seen", "held")
    assert greedy_core(inst, trace.final, +1, masked=result.masked_families).core == {"placed"}
