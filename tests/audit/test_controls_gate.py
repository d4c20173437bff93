"""The Controls gate is calibrated (docs/design.md §5, issue 25 item 4): with k null controls each is
judged at level 1 - alpha/k, so on null credit -- a valid instrument -- the gate fires (some null
control's interval excludes 0) in at most alpha of the redraws.

The simulation redraws null credit for k controls over one fixed replay design and computes each
control's interval exactly as the audit does (:func:`creditaudit.stats.median_spearman`: the
per-trajectory Spearman of average ranks, the median, the percentile cluster bootstrap), vectorised
over redraws; a check pins the vectorised interval to ``median_spearman``'s on the first redraw.
As in the audit, a control's bootstrap stream does not change between redraws (it is named by the
protocol id and the control's place), so the resample indices are drawn once per control.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, rankdata

from creditaudit.audit import audit_tables, null_control_level
from creditaudit.protocol.io import default_template_text, parse_protocol, protocol_dict, protocol_from_dict
from creditaudit.stats import median_spearman

G, N_TURNS, B, REDRAWS, ALPHA = 40, 8, 2000, 400, 0.05


def _protocol(k: int):
    """The default template with ``k`` null controls, every one of them named by the Controls gate."""
    data = protocol_dict(parse_protocol(default_template_text()))
    nulls = [{"name": f"null-{j}", "kind": "random" if j % 2 == 0 else "uniform", "null_control": True}
             for j in range(k)]
    data["controls"] = nulls + [c for c in data["controls"] if not c.get("null_control")]
    gate = next(g for g in data["hypotheses"]["gates"] if g["kind"] == "controls")
    gate["when"] = {"not": {"all": [{"contains": {"of": f"control:{c['name']}", "value": 0.0}} for c in nulls]}}
    data["statistics"]["alpha"] = ALPHA
    return protocol_from_dict(data)


def _design(gen: np.random.Generator) -> np.ndarray:
    """A_replay of G trajectories x N_TURNS complete turns: differences of two 3-rollout means
    (ties, as in a real replay), no trajectory constant."""
    a = (gen.integers(0, 4, (G, N_TURNS)) - gen.integers(0, 4, (G, N_TURNS))) / 3.0
    a[:, 0], a[:, 1] = 1.0, -1.0
    return a


def _intervals(credit: np.ndarray, a_replay: np.ndarray, idx: np.ndarray, level: float) -> np.ndarray:
    """(redraws, 2) percentile intervals of the median within-trajectory Spearman (credit has no ties)."""
    rank_c = credit.argsort(-1).argsort(-1).astype(float)
    rank_a = rankdata(a_replay, axis=-1)
    dc = rank_c - rank_c.mean(-1, keepdims=True)
    da = rank_a - rank_a.mean(-1, keepdims=True)
    rho = (dc * da).sum(-1) / np.sqrt((dc**2).sum(-1) * (da**2).sum(-1))  # (redraws, G)
    q = (1.0 - level) / 2.0
    out = np.empty((len(rho), 2))
    for start in range(0, len(rho), 25):  # memory: 25 x B x G at a time
        boot = np.median(rho[start:start + 25][:, idx], axis=-1)
        out[start:start + 25] = np.quantile(boot, [q, 1.0 - q], axis=-1).T
    return out


def _false_alarms(k: int, level: float, seed: int = 0) -> tuple[int, float]:
    """Redraws (of REDRAWS) on which some null control's interval excludes 0, and the mean share of
    single controls that do."""
    gen = np.random.default_rng(seed)
    a_replay = _design(gen)
    excludes = np.zeros((REDRAWS, k), bool)
    for j in range(k):
        idx = np.random.default_rng([seed, j]).integers(0, G, (B, G), dtype=np.int64)
        credit = gen.standard_normal((REDRAWS, G, N_TURNS))
        ci = _intervals(credit, a_replay, idx, level)
        excludes[:, j] = (ci[:, 0] > 0) | (ci[:, 1] < 0)
    return int(excludes.any(axis=1).sum()), float(excludes.mean())


def test_the_vectorised_interval_is_the_audits():
    gen = np.random.default_rng(1)
    a_replay = _design(gen)
    credit = gen.standard_normal((1, G, N_TURNS))
    groups = np.repeat(np.arange(G), N_TURNS)
    idx = np.random.default_rng(7).integers(0, G, (B, G), dtype=np.int64)
    res = median_spearman(credit.ravel(), a_replay.ravel(), groups, n_resamples=B, confidence_level=0.99, rng=7)
    assert np.allclose(_intervals(credit, a_replay, idx, 0.99)[0], res.ci, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_the_null_control_level_is_bonferroni(k):
    assert null_control_level(_protocol(k)) == pytest.approx(1 - ALPHA / k)


def test_the_audit_judges_null_controls_at_the_bonferroni_level():
    """audit_tables computes every null control's intervals at 1 - alpha/k; other subjects at ci_level."""
    import pandas as pd

    protocol = _protocol(5)
    data = protocol_dict(protocol)
    data["statistics"]["bootstrap_iterations"] = 500
    protocol = protocol_from_dict(data)
    gen = np.random.default_rng(2)
    a_replay = _design(gen).ravel()
    replay = pd.DataFrame({"trajectory_id": np.repeat([f"t{g:02d}" for g in range(G)], N_TURNS),
                           "turn": np.tile(np.arange(N_TURNS), G), "status": "complete", "a_replay": a_replay,
                           "pivotal": a_replay != 0})
    names = [s.name for s in protocol.signals] + [c.name for c in protocol.controls]
    credit = pd.concat([replay[["trajectory_id", "turn"]].assign(subject=name, credit=gen.normal(size=len(replay)),
                                                                 abstained=False) for name in names])
    result = audit_tables(credit, replay, protocol=protocol, protocol_id="3" * 64)
    for name, s in result.subjects.items():
        expected = 0.99 if name.startswith("null-") else protocol.statistics.ci_level
        assert s.ci_level == pytest.approx(expected), name
    s = result.subjects["null-0"]
    rows = credit[credit.subject == "null-0"]
    again = median_spearman(rows.credit.to_numpy(), a_replay, rows.trajectory_id.to_numpy(), n_resamples=500,
                            confidence_level=0.99, rng=__import__("creditaudit.protocol.seeds", fromlist=["rng"])
                            .rng("3" * 64, "audit/bootstrap/control/0"))
    assert (s.ci_low, s.ci_high) == pytest.approx(again.ci)


def test_the_controls_gate_false_alarm_rate_is_at_most_alpha():
    """Five null controls on null credit, 400 redraws: the gate fires in at most alpha of them, up to
    binomial noise (the count may exceed alpha * 400 = 20 by chance; it is refused above the
    binomial(400, alpha) 0.999 quantile, 34). Measured: 23 of 400 (5.8%; each control 1.15%, alpha/k = 1%).
    Judged at the unadjusted 95% instead, each control excludes 0 in about 5% of the redraws and the
    gate fires in 84 of 400 (21%, about 1 - 0.95^5): the test fails."""
    k = 5
    protocol = _protocol(k)
    fired, per_control = _false_alarms(k, null_control_level(protocol))
    limit = int(binom.ppf(0.999, REDRAWS, ALPHA))
    assert fired <= limit, (fired, per_control)
