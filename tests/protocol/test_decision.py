import math

import pytest

from creditaudit.errors import InputError
from creditaudit.protocol.decision import UNDETERMINED, decide, decide_all
from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict

PROTOCOL = parse_protocol(default_template_text())
FAMILIES = [s.name for s in PROTOCOL.signals]


def _row(estimate, low, high, n_traj=50, n_piv=200):
    return {"estimate": estimate, "ci_low": low, "ci_high": high, "n_trajectories": n_traj, "n_pivotal_turns": n_piv}


def _table(**family_rows):
    """Null controls around 0, each family's shuffle around 0, overridden by ``family_rows``."""
    table = {"random": _row(0.0, -0.05, 0.05), "uniform": _row(0.01, -0.04, 0.06)}
    for family in FAMILIES:
        table[family] = _row(0.0, -0.05, 0.05)
        table[f"shuffle-{family}"] = _row(0.0, -0.05, 0.05)
    table["inverted-implicit"] = _row(0.0, -0.05, 0.05)
    table["inverted-judge"] = _row(0.0, -0.05, 0.05)
    for key, row in family_rows.items():
        table[key.replace("_", "-")] = row
    return table


def _verdict(table, family="implicit"):
    return decide_all(PROTOCOL, table, [family])[family]


def test_h1_tracks_contribution():
    d = _verdict(_table(implicit=_row(0.6, 0.45, 0.7)))
    assert (d.verdict, d.decided_by) == ("H1_TRACKS", "H1")
    assert [g.reached for g in d.gates] == [True, True, True, True, True, False]


def test_h3_when_ci_overlaps_its_shuffle_whatever_the_point_estimate():
    # A high point estimate whose CI still reaches into the shuffle control's CI is a placebo.
    d = _verdict(_table(implicit=_row(0.9, 0.04, 0.95)))
    assert (d.verdict, d.decided_by) == ("H3_PLACEBO", "H3")
    h3 = next(g for g in d.gates if g.gate_id == "H3")
    assert h3.inputs == {"implicit.ci_low": 0.04, "implicit.ci_high": 0.95,
                         "shuffle-implicit.ci_low": -0.05, "shuffle-implicit.ci_high": 0.05}


def test_h3_touching_endpoints_count_as_overlap():
    assert _verdict(_table(implicit=_row(0.3, 0.05, 0.5))).verdict == "H3_PLACEBO"
    assert _verdict(_table(implicit=_row(0.3, 0.0501, 0.5))).verdict == "H4_WEAK"


def test_h2_reversed():
    d = _verdict(_table(judge=_row(-0.4, -0.6, -0.2)), "judge")
    assert (d.verdict, d.decided_by) == ("H2_REVERSED", "H2")


def test_h4_weak_positive_below_rho_min():
    assert _verdict(_table(implicit=_row(0.2, 0.1, 0.29))).verdict == "H4_WEAK"


def test_negative_but_overlapping_shuffle_is_h3_not_h2():
    # The paper's Llama row: negative point estimate, CI excludes 0, but overlaps the shuffle band.
    table = _table(implicit=_row(-0.12, -0.2, -0.04), shuffle_implicit=_row(-0.05, -0.1, 0.0))
    assert _verdict(table).verdict == "H3_PLACEBO"


def test_infeasible_precedes_effects():
    d = _verdict(_table(implicit=_row(0.6, 0.45, 0.7, n_traj=12)))
    assert (d.verdict, d.decided_by) == ("INFEASIBLE", "INFEASIBLE")
    d = _verdict(_table(implicit=_row(0.6, 0.45, 0.7, n_piv=29)))
    assert d.verdict == "INFEASIBLE"


def test_controls_gate_withholds_every_effect_verdict():
    table = _table(implicit=_row(0.6, 0.45, 0.7), random=_row(0.2, 0.1, 0.3))
    for family in FAMILIES:
        d = _verdict(table, family)
        assert (d.verdict, d.decided_by) == ("INSTRUMENT_INVALID", "Controls")
        assert [g.reached for g in d.gates] == [True] + [False] * 5


def test_every_gate_is_recorded_with_inputs_and_outcome():
    d = _verdict(_table(implicit=_row(0.6, 0.45, 0.7)))
    record = d.to_dict()
    assert [g["gate"] for g in record["gates"]] == ["Controls", "INFEASIBLE", "H3", "H2", "H1", "H4"]
    assert [g["outcome"] for g in record["gates"]] == ["not fired", "not fired", "not fired", "not fired", "fired", "fired"]
    assert record["gates"][1]["inputs"] == {"implicit.n_trajectories": 50.0, "implicit.n_pivotal_turns": 200.0}


def test_tiny_collection_with_nan_controls_is_infeasible_not_an_error():
    nan = math.nan
    table = _table(implicit=_row(nan, nan, nan, n_traj=3, n_piv=2), random=_row(nan, nan, nan), uniform=_row(nan, nan, nan))
    d = _verdict(table)
    assert d.verdict == "INFEASIBLE"
    assert d.gates[0].outcome is None  # the controls gate was unknown and is recorded so


def test_effect_verdict_never_rests_on_an_unknown_gate():
    nan = math.nan
    d = _verdict(_table(implicit=_row(nan, nan, nan)))
    assert d.verdict == UNDETERMINED and d.decided_by == "H3"
    assert "implicit.ci_low" in d.reason


def test_order_is_the_frozen_one_reordering_changes_the_decision():
    # With H1 before H3 (still after the controls gates), an overlapping-but-high CI would be H1:
    # the engine follows the frozen order, whatever it is.
    data = protocol_dict(PROTOCOL)
    data["hypotheses"]["decision_order"] = ["Controls", "INFEASIBLE", "H1", "H3", "H2", "H4"]
    reordered = protocol_from_dict(data)
    table = _table(implicit=_row(0.5, 0.3, 0.7), shuffle_implicit=_row(0.3, 0.2, 0.35))
    assert decide_all(PROTOCOL, table, ["implicit"])["implicit"].verdict == "H3_PLACEBO"
    assert decide_all(reordered, table, ["implicit"])["implicit"].verdict == "H1_TRACKS"


def test_missing_subject_or_statistic_is_a_clear_error():
    table = _table()
    del table["shuffle-judge"]
    with pytest.raises(InputError, match="no row for subject 'shuffle\\(self\\)' \\('shuffle-judge'\\)"):
        decide_all(PROTOCOL, table, ["judge"])
    table = _table()
    del table["implicit"]["n_pivotal_turns"]
    with pytest.raises(InputError, match="lacks `n_pivotal_turns` for subject 'implicit'"):
        decide_all(PROTOCOL, table, ["implicit"])


def test_decide_with_explicit_aliases():
    table = {"fam": _row(0.5, 0.4, 0.6), "placebo": _row(0.0, -0.1, 0.1),
             "random": _row(0, -1, 1), "uniform": _row(0, -1, 1)}
    d = decide(PROTOCOL.hypotheses, family="fam", table=table, aliases={"shuffle(self)": "placebo"})
    assert d.verdict == "H1_TRACKS"
