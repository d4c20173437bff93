"""ProVer: eligibility, candidate segments, the boundary estimate and its variance, the three
proposers on a planted run (oracle on a planted pivotal segment, random below it), and the stage."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from creditaudit.errors import InputError
from creditaudit.signals.base import SignalContext, reasons_of, trajectories_from_table
from creditaudit.signals.families.prover import (
    ProverFamily,
    candidate_segments,
    is_eligible,
    proposer_table,
    segment_estimate,
    source_trajectory,
)

GROUP = 8
N_TASKS = 8


def _controls(signals):
    return ([{"name": "random", "kind": "random", "null_control": True},
             {"name": "uniform", "kind": "uniform", "null_control": True}]
            + [{"name": f"shuffle-{s['name']}", "kind": "shuffle", "of": s["name"]} for s in signals])


PROVER_SIGNALS = [
    {"name": "confidence", "family": "confidence"},
    {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
    {"name": "prover-random", "family": "prover", "args": {"proposer": "random", "compare": ["oracle"]}},
]


#: The known-answer layout: rooms noop, noop, pivotal (two good doors of five), noop; the outcome is
#: decided at the third room (threshold 1 of 1 pivotal room), so under a near-uniform policy about
#: a third of the rollouts succeed (eligible groups), and the only segments with a positive boundary
#: difference are those containing the turn that took the good door. The horizon leaves room for
#: the policy's inadmissible commands.
KNOWN_ANSWER_ENV = {"name": "planted", "source": "generated", "horizon": 16,
                    "args": {"kinds": "NNPN", "n_good": 2}}


def make_planted_run(root, policy_dir, *, signals, n_tasks, group, environment):
    """``helpers.make_run`` with another planted environment section."""
    import shutil

    import yaml

    from creditaudit.cli.protocol import pin_policy_text
    from creditaudit.protocol.io import default_template_text
    from creditaudit.protocol.lock import freeze
    from creditaudit.protocol.signing import generate_keypair, load_signer
    from creditaudit.replay.collect import collect

    run = root / "run"
    run.mkdir(parents=True)
    shutil.copytree(policy_dir, run / "policy")
    data = yaml.safe_load(default_template_text())
    data["environment"] = environment
    data["collection"] = {"n_tasks": n_tasks, "group_size": group, "determinism_instances": 2}
    data["policy"].update(source="local", history_length=0, max_action_tokens=6)
    data["signals"] = signals
    data["controls"] = _controls(signals)
    data["statistics"]["bootstrap_iterations"] = 500
    (run / "protocol.yaml").write_text(pin_policy_text(yaml.safe_dump(data, sort_keys=False), run / "policy"))
    signer = load_signer(generate_keypair(run / "keys")[0])
    freeze(run / "protocol.yaml", signer)
    collect(run / "protocol.yaml", signer)
    return run, signer


@pytest.fixture(scope="module")
def prover_run(tmp_path_factory, planted_policy_dir):
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.collect import load_run_policy, read_trajectories

    run, signer = make_planted_run(tmp_path_factory.mktemp("prover-run"), planted_policy_dir, signals=PROVER_SIGNALS,
                                   n_tasks=N_TASKS, group=GROUP, environment=KNOWN_ANSWER_ENV)
    frozen = require_frozen(run / "protocol.yaml")
    policy = load_run_policy(frozen)
    trajectories = trajectories_from_table(read_trajectories(frozen))
    context = SignalContext(frozen.id, frozen.protocol, frozen.run_dir, trajectories, lambda: policy)
    return run, signer, frozen, context


@pytest.fixture(scope="module")
def oracle_output(prover_run):
    *_, context = prover_run
    return ProverFamily(name="prover-oracle", proposer="oracle").compute(context)


# ------------------------------------------------------------------------------ pure pieces


def test_eligibility_is_strictly_between_zero_and_half_the_group():
    assert [s for s in range(9) if is_eligible(s, 8)] == [1, 2, 3]
    assert [s for s in range(5) if is_eligible(s, 4)] == [1]
    with pytest.raises(ValueError, match="`group_size`"):
        is_eligible(1, 0)


def test_candidate_segments_are_contiguous_non_terminal_and_short():
    cands = candidate_segments(7, 4)
    assert all(0 <= l <= r <= 5 and r - l + 1 <= 4 for l, r in cands)
    assert (5, 5) in cands and (0, 3) in cands and (0, 4) not in cands
    assert len(cands) == len(set(cands)) == 6 + 5 + 4 + 3  # lengths 1..4 over 6 non-terminal turns
    assert candidate_segments(2, 4) == [(0, 0)]
    assert candidate_segments(1, 4) == [] and candidate_segments(0, 4) == []
    with pytest.raises(ValueError, match="`max_segment`"):
        candidate_segments(5, 0)


def test_delta_and_variance_match_a_hand_computation():
    # p_pre = 2/8, p_post = 6/8: Delta = 0.5; Var = (0.25*0.75 + 0.75*0.25) / 8 = 0.375 / 8
    est = segment_estimate([1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0])
    assert est.p_pre == 0.25 and est.p_post == 0.75 and est.k == 8
    assert est.delta == 0.5 and est.accepted
    assert est.var == pytest.approx(0.046875, abs=0, rel=1e-15)
    neg = segment_estimate([1, 1, 1, 1], [0, 0, 0, 1])
    assert neg.delta == -0.75 and not neg.accepted and neg.var == pytest.approx((0.0 + 0.1875) / 4)
    with pytest.raises(ValueError, match="same length"):
        segment_estimate([1, 0], [1])
    with pytest.raises(ValueError, match="binary"):
        segment_estimate([0.5], [1])


def test_source_is_the_shortest_successful_trajectory(trajectory_factory):
    a = trajectory_factory("a", "k", n_turns=4, outcome=1, rollout=0)
    b = trajectory_factory("b", "k", n_turns=2, outcome=1, rollout=1)
    c = trajectory_factory("c", "k", n_turns=1, outcome=0, rollout=2)
    d = trajectory_factory("d", "k", n_turns=2, outcome=1, rollout=3)
    assert source_trajectory([a, b, c, d]).trajectory_id == "b"
    assert source_trajectory([c]) is None


def test_ineligible_and_incomplete_groups_abstain_without_touching_the_environment(trajectory_factory,
                                                                                    context_factory):
    # no run directory, no environment, no policy: ineligible groups never replay
    won = [trajectory_factory(f"w{i}", "all-won", n_turns=3, outcome=1, rollout=i) for i in range(8)]
    lost = [trajectory_factory(f"l{i}", "all-lost", n_turns=3, outcome=0, rollout=i) for i in range(8)]
    half = [trajectory_factory(f"h{i}", "half", n_turns=3, outcome=int(i < 4), rollout=i) for i in range(8)]
    short = [trajectory_factory(f"s{i}", "short", n_turns=3, outcome=int(i == 0), rollout=i) for i in range(3)]
    out = ProverFamily(name="p", proposer="random").compute(context_factory(won + lost + half + short))
    reasons = dict(zip(zip(out.credit.trajectory_id, out.credit.turn), reasons_of(out.credit)))
    assert out.credit.credit.isna().all()
    assert {reasons[(f"{p}{i}", 0)] for p in "wlh" for i in range(8)} == {"ineligible_group"}
    assert {reasons[(f"s{i}", 0)] for i in range(3)} == {"incomplete_group"}
    diag = out.diagnostics.to_pandas()
    assert diag.set_index("task_id").status.to_dict() == {"all-won": "ineligible_group", "all-lost": "ineligible_group",
                                                          "half": "ineligible_group", "short": "incomplete_group"}
    assert out.report["n_eligible"] == 0 and out.report["acceptance_rate"] is None


def test_group_size_must_match_the_collection(trajectory_factory, context_factory):
    class _P:
        class collection:
            group_size = 4

    with pytest.raises(InputError, match=r"`group_size` 8 but `collection.group_size` is 4"):
        ProverFamily(name="p").compute(context_factory([trajectory_factory()], protocol=_P()))


# ------------------------------------------------------------------------------ planted run


def _planted_truth(context, trajectory):
    """The planted environment's exact V(s_t) (reference policy) and score of every state s_0..s_n."""
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.tasks import make_environment, read_tasks, task_for

    frozen = require_frozen(context.run_dir / "protocol.yaml")
    entry = {e.task_id: e for e in read_tasks(frozen)}[trajectory.task_id]
    env = make_environment(context.protocol)
    env.reset(task_for(entry, context.protocol, context.run_dir))
    values, scores = [], []
    for rec in trajectory.turns:
        values.append(env.value())
        scores.append(env.state.score)
        env.step(rec.action)
    scores.append(env.state.score)
    return values, scores


def test_oracle_finds_a_planted_pivotal_segment_and_credits_exactly_it(prover_run, oracle_output):
    *_, context = prover_run
    out = oracle_output
    diag = out.diagnostics.to_pandas()
    measured = diag[diag.status == "measured"]
    assert len(measured) >= 3, diag[["task_id", "successes", "status"]]
    # the oracle's pick is re-measured with fresh seeds, so a rejection is possible, but rare
    assert measured.accepted.mean() >= 0.8
    assert ((measured.delta > 0) == measured.accepted.astype(bool)).all()
    by_id = {t.trajectory_id: t for t in context.trajectories}
    credit = out.credit.set_index(["trajectory_id", "turn"]).credit
    for row in measured.itertuples():
        traj = by_id[row.source_trajectory_id]
        assert traj.won and len(traj) == min(len(t) for t in context.trajectories
                                             if t.task_id == row.task_id and t.won)
        seg = range(int(row.segment_start), int(row.segment_end) + 1)
        assert 1 <= len(seg) <= 4 and row.segment_end < len(traj) - 1
        got = [credit[(traj.trajectory_id, t)] for t in range(len(traj))]
        assert got == [max(row.delta, 0.0) if t in seg else 0.0 for t in range(len(traj))]
        assert row.var == pytest.approx((row.p_pre * (1 - row.p_pre) + row.p_post * (1 - row.p_post)) / 8)
        if not row.accepted:
            continue
        # known answer: the segment holds the turn that took the planted good door, and the
        # reference policy's exact value rises across it
        values, scores = _planted_truth(context, traj)
        assert any(scores[t + 1] > scores[t] for t in seg)
        assert values[seg[-1] + 1] - values[seg[0]] > 0
    # every other trajectory of a verified group abstains; nothing is credited outside sources
    sources = set(measured.source_trajectory_id)
    reasons = dict(zip(zip(out.credit.trajectory_id, out.credit.turn), reasons_of(out.credit)))
    for traj in context.trajectories:
        if traj.task_id in set(measured.task_id) and traj.trajectory_id not in sources:
            assert {reasons[(traj.trajectory_id, r.turn)] for r in traj.turns} == {"not_verified_trajectory"}
    assert out.report["acceptance_rate"] == 1.0


def test_random_proposer_accepts_less_often_than_the_oracle_and_the_table(prover_run, oracle_output):
    *_, context = prover_run
    table = proposer_table(context, ("random", "judge")).set_index("proposer")
    oracle = oracle_output.report
    assert table.loc["random", "n_measured"] == oracle["n_measured"]  # the same groups
    assert table.loc["random", "acceptance_rate"] < oracle["acceptance_rate"]
    assert table.loc["judge", "n_measured"] == oracle["n_measured"]
    for p in ("random", "judge"):
        assert 1.0 <= table.loc[p, "mean_segment_length"] <= 4.0
        assert 0.0 <= table.loc[p, "acceptance_rate"] <= 1.0
    print("\nProVer proposer table (planted, 8 tasks x 8):\n" + table.to_string()
          + f"\noracle acceptance {oracle['acceptance_rate']:.3f}, mean segment {oracle['mean_segment_length']:.3f}")


def test_a_boundary_that_does_not_restore_abstains(prover_run, monkeypatch):
    *_, context = prover_run
    from creditaudit.signals.families import prover as module

    real = module.recorded_signatures

    def tampered(ctx):
        signatures, entries = real(ctx)
        return {tid: ["0" * 64] * len(s) for tid, s in signatures.items()}, entries

    monkeypatch.setattr(module, "recorded_signatures", tampered)
    out = ProverFamily(name="p", proposer="random").compute(context)
    diag = out.diagnostics.to_pandas()
    eligible = diag[diag.eligible]
    assert len(eligible) and set(eligible.status) == {"restore_mismatch"}
    reasons = set(reasons_of(out.credit))
    assert "restore_mismatch" in reasons and out.credit.credit.isna().all()


def test_stage_writes_prover_credit_and_diagnostics(prover_run):
    from creditaudit.signals.stage import CREDIT, DIAGNOSTICS_DIR, run_signals

    run, signer, frozen, context = prover_run
    summary = run_signals(run / "protocol.yaml", signer)
    df = pq.read_table(run / CREDIT).to_pandas()
    prover = df[df.subject == "prover-random"]
    assert len(prover) == summary.n_turns
    assert (prover.credit.dropna() >= 0).all() and (prover.credit.isna() == prover.abstained).all()
    entry = summary.document["families"]["prover-random"]
    assert entry["family"] == "prover" and entry["proposer"] == "random"
    assert set(entry["abstention_reasons"]) <= {"ineligible_group", "not_verified_trajectory", "no_segment_candidates",
                                                "restore_mismatch", "invalid_proposal"}
    diag = pq.read_table(run / DIAGNOSTICS_DIR / "prover-random.parquet").to_pandas()
    # one row per group for the signal's proposer, then one per group for each compared proposer
    assert set(diag.protocol_id) == {frozen.id} and list(diag.proposer) == ["random"] * N_TASKS + ["oracle"] * N_TASKS
    own = diag[diag.proposer == "random"]
    assert math.isclose(entry["acceptance_rate"], float(own[own.status == "measured"].accepted.mean()))
    shuffle = summary.document["controls"]["shuffle-prover-random"]
    assert shuffle["of"] == "prover-random"
    # same seeds, same credit: the stage's numbers equal a direct computation's, and the compared
    # proposer changes neither the credit nor the proposer's own rows
    direct = ProverFamily(name="prover-random", proposer="random").compute(context)
    np.testing.assert_array_equal(prover.credit.to_numpy(dtype=float), direct.credit.credit.to_numpy())
    assert own.drop(columns="protocol_id").reset_index(drop=True).equals(direct.diagnostics.to_pandas())
    table = proposer_table(context, ("random", "oracle"))
    assert entry["proposer_table"] == table.to_dict(orient="records")


def test_ledger_recomputes_the_proposer_table_from_the_diagnostics(prover_run):
    """The ledger's ``prover`` entries: the stored rows give the table the stage reported, and the
    acceptance interval is the Wilson interval (scipy's, an independent implementation)."""
    import json

    from scipy.stats import binomtest

    from creditaudit.ledger.producer import PRODUCERS, ProducerContext
    from creditaudit.ledger.producers.diagnostics import prover_entries
    from creditaudit.signals.stage import run_signals

    run, signer, frozen, _ = prover_run
    run_signals(run / "protocol.yaml", signer)  # resumes when the stage test ran first
    entries = {v.name: v.value for v in prover_entries(ProducerContext(frozen, PRODUCERS["prover"]))}
    assert entries["prover.signals"] == ["prover-random"]
    assert entries["prover.prover-random.proposers"] == ["random", "oracle"]
    stage = json.loads((run / "signals" / "summary.json").read_text())["families"]["prover-random"]["proposer_table"]
    for row in stage:
        key = f"prover.prover-random.{row['proposer']}"
        for stat in ("n_groups", "n_eligible", "n_measured", "n_accepted", "acceptance_rate", "mean_segment_length"):
            assert entries[f"{key}.{stat}"] == row[stat], (key, stat)
        assert row["n_measured"] > 0
        ci = binomtest(row["n_accepted"], row["n_measured"]).proportion_ci(0.95, method="wilson")
        assert math.isclose(entries[f"{key}.acceptance_ci_low"], ci.low, abs_tol=1e-12)
        assert math.isclose(entries[f"{key}.acceptance_ci_high"], ci.high, abs_tol=1e-12)
    assert entries["prover.prover-random.oracle.acceptance_rate"] > entries["prover.prover-random.random.acceptance_rate"]
