"""Validity of the audit itself (issue 25): no statistic depends on a name, a protocol names only
statistics the audit produces, and the planted environment's known answers hold on both
definitions of a pivotal turn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from creditaudit.audit.calibration import _planted_replay, credit_table
from creditaudit.audit.core import audit_tables
from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict

PID = "5" * 64


@pytest.fixture(scope="module")
def planted() -> pd.DataFrame:
    """A replayed planted run (90 trajectories) with each action's true effect in ``truth``."""
    return _planted_replay(PID, 90)


def _families_protocol(names: dict[str, str] | None = None):
    """Three families whose neutral values differ (implicit 1.0, confidence trajectory-mean, judge 0)
    with null, shuffle and inverted controls and a router, every name passed through ``names``."""
    n = (names or {}).get
    data = protocol_dict(parse_protocol(default_template_text()))
    data["signals"] = [{"name": n("implicit", "implicit"), "family": "implicit"},
                       {"name": n("confidence", "confidence"), "family": "confidence"},
                       {"name": n("judge", "judge"), "family": "judge"}]
    data["controls"] = [
        {"name": n("random", "random"), "kind": "random", "null_control": True},
        {"name": n("uniform", "uniform"), "kind": "uniform", "null_control": True},
        {"name": n("shuffle-implicit", "shuffle-implicit"), "kind": "shuffle", "of": n("implicit", "implicit")},
        {"name": n("shuffle-confidence", "shuffle-confidence"), "kind": "shuffle", "of": n("confidence", "confidence")},
        {"name": n("shuffle-judge", "shuffle-judge"), "kind": "shuffle", "of": n("judge", "judge")},
        {"name": n("inverted-implicit", "inverted-implicit"), "kind": "inverted", "of": n("implicit", "implicit")},
    ]
    data["router"] = {"confidence_family": n("confidence", "confidence"), "judge_family": n("judge", "judge"),
                      "routed_share": 0.87}
    gates = data["hypotheses"]["gates"]
    for gate in gates:
        if gate["kind"] == "controls":
            gate["when"] = {"not": {"all": [{"contains": {"of": f"control:{n(c, c)}", "value": 0.0}}
                                            for c in ("random", "uniform")]}}
    data["statistics"]["bootstrap_iterations"] = 1000
    return protocol_from_dict(data)


def _family_credit(replay: pd.DataFrame) -> pd.DataFrame:
    """Credit of the three families (by their default names) and their controls, and fluency."""
    gen = np.random.default_rng(3)
    truth = replay.truth.to_numpy()
    n = len(replay)
    values = {
        "implicit": 1.0 + 0.5 * truth + gen.normal(0, 0.05, n),  # a ratio around 1
        "confidence": 0.6 + 0.3 * truth + gen.normal(0, 0.05, n),  # a probability, no neutral point
        "judge": np.sign(truth + gen.normal(0, 0.05, n)),  # categorical around 0
        "random": gen.normal(size=n), "uniform": gen.uniform(-1, 1, n),
    }
    for family in ("implicit", "confidence", "judge"):
        shuffled = values[family].copy()
        for _, idx in sorted(replay.groupby("trajectory_id").groups.items()):
            idx = np.asarray(idx)
            shuffled[idx] = values[family][gen.permutation(idx)]
        values[f"shuffle-{family}"] = shuffled
    values["inverted-implicit"] = -values["implicit"]
    return credit_table(replay, values)


RENAMED = {"implicit": "hcapo", "confidence": "conf", "judge": "grader", "random": "noise-a", "uniform": "noise-b",
           "shuffle-implicit": "perm-1", "shuffle-confidence": "perm-2", "shuffle-judge": "perm-3",
           "inverted-implicit": "neg-1"}


def test_renaming_every_signal_and_control_changes_no_statistic(planted):
    """Issue 25, item 1: the same credit under other names gets identical statistics, gate inputs,
    verdicts, Holm and fluency echo (at one seed root: the protocol id is passed unchanged)."""
    credit = _family_credit(planted)
    fluency = planted[["trajectory_id", "turn"]].assign(fluency=np.random.default_rng(4).normal(size=len(planted)))
    before = audit_tables(credit, planted, protocol=_families_protocol(), protocol_id=PID, fluency=fluency)
    renamed = credit.assign(subject=credit.subject.map(RENAMED))
    after = audit_tables(renamed, planted, protocol=_families_protocol(RENAMED), protocol_id=PID, fluency=fluency)

    def numbers(stats) -> dict:
        return {k: v for k, v in stats.to_dict().items() if k not in ("subject", "of")}

    for old, new in RENAMED.items():
        assert numbers(before.subjects[old]) == numbers(after.subjects[new]), old
        assert before.table[old] == after.table[new], old
    # the neutral value comes from the family: rho_t around 1, confidence centred per trajectory
    assert before.subjects["implicit"].sign_agreement > 0.7
    assert before.subjects["confidence"].sign_agreement > 0.6
    for old in ("implicit", "confidence", "judge"):
        b, a = before.decisions[old], after.decisions[RENAMED[old]]
        assert (b.verdict, b.decided_by) == (a.verdict, a.decided_by), old
        assert [g.outcome for g in b.gates] == [g.outcome for g in a.gates]
    assert before.holm["adjusted"] == after.holm["adjusted"]
    assert before.fluency["family"] == "implicit" and after.fluency["family"] == "hcapo"
    assert {k: v for k, v in before.fluency.items() if k != "family"} == \
        {k: v for k, v in after.fluency.items() if k != "family"}


def test_every_nameable_statistic_is_produced_and_gates_on_it_run(planted):
    """Issue 25, item 2: the statistics a gate may name are exactly the ones the audit puts in its
    statistics table; a gate naming each of them validates and is decided end to end, and a name
    the audit does not produce fails validation."""
    from creditaudit.errors import InputError
    from creditaudit.protocol.schema import AUDIT_STATISTICS, GATE_STATISTICS

    data = protocol_dict(_families_protocol())
    feasibility = next(g for g in data["hypotheses"]["gates"] if g["kind"] == "feasibility")
    never = [{"stat": name, "of": "self", "cmp": "<", "value": -1.0e9} for name in GATE_STATISTICS]
    feasibility["when"] = {"any": [feasibility["when"], *never]}
    protocol = protocol_from_dict(data)
    result = audit_tables(_family_credit(planted), planted, protocol=protocol, protocol_id=PID)
    for subject, row in result.table.items():
        assert set(row) == AUDIT_STATISTICS, subject
    for family, decision in result.decisions.items():
        gate = next(g for g in decision.gates if g.kind == "feasibility")
        assert {f"{family}.{name}" for name in GATE_STATISTICS} <= set(gate.inputs), family
        # every statistic a family has is defined on this run (p_holm: every family enters Holm)
        assert all(gate.inputs[f"{family}.{name}"] is not None for name in GATE_STATISTICS), gate.inputs
    assert "shuffle_changed_share" not in AUDIT_STATISTICS
    feasibility["when"]["any"].append({"stat": "shuffle_changed_share", "of": "self", "cmp": "<", "value": 0.1})
    with pytest.raises(InputError, match="'shuffle_changed_share' is not produced by the audit"):
        protocol_from_dict(data)


def test_the_oracle_lifts_resolved_pivotal_turns_above_chance(planted):
    """Issue 25, item 5: on the planted environment (3 rollouts an arm) much of the paper's pivotal
    (A_replay != 0) is noise, while resolved-pivotal turns (A_replay interval excludes 0) are what
    the planted effects are; lift and sign agreement are reported on both, as is the map.

    The lift ranks turns by credit, so the credit that is perfect *for the lift* is the oracle's
    magnitude (|planted effect|): its lift on resolved-pivotal turns has a CI above 1 and exceeds its
    lift on pivotal turns. The signed oracle's sign agreement rises on resolved-pivotal turns; its
    lift there is below 1 on this environment because most resolved effects are harmful (A_replay < 0)
    and a signed credit ranks them last -- the negated oracle's lift there is above 1."""
    import pyarrow as pa

    from creditaudit.audit.calibration import _credits, calibration_protocol
    from creditaudit.audit.measurability import measurability_map, resolved_pivotal

    base = calibration_protocol(parse_protocol(default_template_text()))
    data = protocol_dict(base)
    data["signals"].append({"name": "magnitude", "family": "confidence"})
    data["controls"].append({"name": "shuffle-magnitude", "kind": "shuffle", "of": "magnitude"})
    protocol = protocol_from_dict(data)
    credit = _credits(planted, PID, [c for c in base.controls if c.null_control])
    oracle_rows = credit[credit.subject == "oracle"]
    magnitude = oracle_rows.assign(subject="magnitude", credit=oracle_rows.credit.abs())
    gen = np.random.default_rng(8)
    shuffled = magnitude.assign(subject="shuffle-magnitude",
                                credit=magnitude.groupby("trajectory_id").credit.transform(lambda v: gen.permutation(v.to_numpy())))
    result = audit_tables(pd.concat([credit, magnitude, shuffled], ignore_index=True), planted, protocol=protocol,
                          protocol_id=PID)

    complete = planted[planted.status == "complete"]
    no_effect = complete[complete.truth == 0]
    assert no_effect.pivotal.mean() > 0.3  # the paper's pivotal: much of it noise at 3 rollouts an arm
    resolved = resolved_pivotal(planted)
    assert 0 < resolved.sum() < complete.pivotal.sum()
    assert (planted.truth[resolved] != 0).mean() > (complete.truth[complete.pivotal] != 0).mean()
    kept = planted.trajectory_id.isin(set(planted.trajectory_id) - set(result.exclusions["degenerate_trajectories"]))
    mag, oracle, negated = (result.subjects[n] for n in ("magnitude", "oracle", "negated"))
    assert oracle.n_resolved_pivotal_turns == int(resolved[kept.to_numpy()].sum())

    assert mag.lift_resolved_ci_low > 1.0, mag
    assert mag.lift_resolved > mag.lift
    assert oracle.sign_agreement_resolved > oracle.sign_agreement
    assert oracle.sign_resolved_n_both_nonzero <= oracle.n_resolved_pivotal_turns
    assert negated.lift_resolved_ci_low > 1.0 > oracle.lift_resolved
    assert (planted.a_replay[resolved] < 0).mean() > 0.5  # why: the resolved effects here are mostly harmful
    random = result.subjects["random"]
    assert random.lift_resolved_ci_low < 1.0 < random.lift_resolved_ci_high  # chance credit: lift 1 in its CI

    def lifts(s) -> str:
        return (f"pivotal {s.lift:.3f} [{s.lift_ci_low:.3f}, {s.lift_ci_high:.3f}], resolved-pivotal "
                f"{s.lift_resolved:.3f} [{s.lift_resolved_ci_low:.3f}, {s.lift_resolved_ci_high:.3f}]")
    print(f"\n|oracle| lift: {lifts(mag)}\noracle lift: {lifts(oracle)}; sign agreement {oracle.sign_agreement:.3f} "
          f"vs {oracle.sign_agreement_resolved:.3f}\nnegated lift: {lifts(negated)}\n"
          f"turns: {oracle.n_pivotal_turns} pivotal, {oracle.n_resolved_pivotal_turns} resolved-pivotal; "
          f"no-effect turns pivotal {int(no_effect.pivotal.sum())}/{len(no_effect)}")

    m = measurability_map(pa.Table.from_pandas(planted.drop(columns="truth"), preserve_index=False),
                          protocol_id=PID, protocol=protocol)
    assert m.n_pivotal == int(complete.pivotal.sum()) and m.n_resolved_pivotal == int(resolved.sum())
    assert m.share_resolved_pivotal == pytest.approx(resolved.sum() / len(complete))
    assert m.share_resolved_pivotal < m.share_pivotal


def test_a_control_that_does_not_share_its_familys_turns_is_refused(planted):
    """Issue 25, item 6 (audit side): a shuffle or inverted control is audited on exactly its
    family's turns; a credit table where one abstains where the other does not is refused."""
    from creditaudit.errors import InputError

    credit = _family_credit(planted)
    protocol = _families_protocol()
    first = planted.iloc[0]
    at = (credit.trajectory_id == first.trajectory_id) & (credit.turn == first.turn)
    broken = credit.copy()
    broken.loc[at & (broken.subject == "implicit"), ["credit", "abstained"]] = [np.nan, True]
    with pytest.raises(InputError, match=r"control 'shuffle-implicit' and its family 'implicit' do not share"):
        audit_tables(broken, planted, protocol=protocol, protocol_id=PID)
    both = broken.copy()
    both.loc[at & both.subject.isin(["shuffle-implicit", "inverted-implicit"]), ["credit", "abstained"]] = [np.nan, True]
    result = audit_tables(both, planted, protocol=protocol, protocol_id=PID)
    assert result.subjects["shuffle-implicit"].n_abstained == result.subjects["implicit"].n_abstained == 1


def test_the_resolved_statistics_flow_into_the_statistics_table():
    """Issue 25, item 5: every new statistic is a row of audit/statistics.parquet, with its interval."""
    from creditaudit.audit.export import statistics_table
    from creditaudit.audit.fidelity import SubjectStats

    stats = SubjectStats(subject="oracle", kind="family", of=None, estimate=0.6, ci_low=0.5, ci_high=0.7,
                         p_value=0.0, n_trajectories=90, n_included_turns=690, n_pivotal_turns=470,
                         n_excluded_constant=0, n_abstained=0, n_degenerate_resamples=0, sign_agreement=0.7,
                         sign_ci_low=0.65, sign_ci_high=0.75, sign_n_agree=300, sign_n_both_nonzero=430, lift=1.3,
                         lift_ci_low=1.2, lift_ci_high=1.4, note="", ci_level=0.95, n_resolved_pivotal_turns=41,
                         sign_agreement_resolved=0.9, sign_agreement_resolved_ci_low=0.77,
                         sign_agreement_resolved_ci_high=0.96, sign_resolved_n_agree=37,
                         sign_resolved_n_both_nonzero=41, lift_resolved=2.2, lift_resolved_ci_low=1.6,
                         lift_resolved_ci_high=2.8)
    rows = {r["statistic"]: r for r in statistics_table({"subjects": [stats.to_dict()]}).to_pylist()}
    assert (rows["lift_resolved"]["value"], rows["lift_resolved"]["ci_low"], rows["lift_resolved"]["ci_high"]) == \
        (2.2, 1.6, 2.8)
    assert (rows["sign_agreement_resolved"]["ci_low"], rows["sign_agreement_resolved"]["ci_high"]) == (0.77, 0.96)
    assert rows["n_resolved_pivotal_turns"]["value"] == 41 and rows["sign_resolved_n_agree"]["value"] == 37
    assert "lift_resolved_ci_low" not in rows and "sign_agreement_resolved_ci_high" not in rows
