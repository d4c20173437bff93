"""The analysis: C1-C6 readings with Holm and MDE, and the matrix tests on planted structure."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from creditaudit.training_arms.analysis import compare_arms, divergence_stage, js_matrix, learning_check
from creditaudit.training_arms.rules import ARM_NAMES

STATS = SimpleNamespace(permutations=999, js_log_base=2.0, mantel_method="pearson", mantel_alternative="greater")
PID = "a" * 64


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _checkpoints(kind: str, *, seeds: int = 3, n_probe: int = 12, k: int = 5, seed: int = 1):
    """Synthetic checkpoints of the seven arms.

    ``dose``: an arm's credit sparsity sets its dose, hence its parameter displacement, and the
    action distributions move along one direction in proportion to the displacement -- the
    paper's dose channel. ``instrument``: each instrument moves the distributions in its own
    direction, whatever the dose. ``null``: independent noise only.
    """
    gen = np.random.default_rng(seed)
    base = gen.normal(size=(n_probe, k))
    direction = gen.normal(size=(n_probe, k))
    instrument_dirs = {name: gen.normal(size=(n_probe, k)) for name in ("outcome", "implicit", "judge", "replay")}
    sparsity_of = {"outcome_only": 0.1, "implicit": 0.1, "shuffled_implicit": 0.1, "inverted_implicit": 0.1,
                   "judge": 0.9, "shuffled_judge": 0.9, "pivotal_masked": 0.6}
    from creditaudit.training_arms.rules import instrument_labels

    out = []
    for arm, instrument in zip(ARM_NAMES, instrument_labels(ARM_NAMES)):
        for s in range(seeds):
            if kind == "dose":
                sparsity = sparsity_of[arm] + gen.normal(scale=0.02)
                displacement = 2.0 * (1.0 - sparsity) + gen.normal(scale=0.05)
                logits = base + displacement * direction + gen.normal(scale=0.05, size=base.shape)
            elif kind == "instrument":
                sparsity, displacement = gen.uniform(), gen.uniform()
                logits = base + 1.5 * instrument_dirs[instrument] + gen.normal(scale=0.1, size=base.shape)
            else:
                sparsity, displacement = gen.uniform(), gen.uniform()
                logits = base + gen.normal(scale=0.3, size=base.shape)
            out.append({"arm": arm, "seed": s, "probe": list(_softmax(logits)), "displacement": float(displacement),
                        "credit_sparsity": float(sparsity)})
    return out


def test_js_matrix_is_a_symmetric_divergence_matrix():
    p = [[np.array([0.5, 0.5]), np.array([1.0, 0.0])], [np.array([0.5, 0.5]), np.array([0.0, 1.0])],
         [np.array([0.9, 0.1]), np.array([0.5, 0.5])]]
    m = js_matrix(p)
    assert m.shape == (3, 3) and (np.diag(m) == 0).all() and np.allclose(m, m.T)
    assert m[0, 1] == pytest.approx(0.5)  # identical on state 0, JS 1 bit on state 1


def test_dose_structure_is_recovered_by_the_positive_control_and_explained_away_in_the_partial_mantel():
    stage = divergence_stage(1, _checkpoints("dose"), protocol_id=PID, statistics=STATS)
    assert stage["positive_control"]["statistic"] > 0.5
    assert stage["positive_control"]["pvalue"] < 0.01
    assert stage["partial_mantel"]["pvalue"] > 0.05  # the design adds nothing once displacement is held
    assert stage["information_partition"]["pvalue"] > 0.05


def test_instrument_structure_is_recovered_by_the_partition_tests():
    stage = divergence_stage(2, _checkpoints("instrument"), protocol_id=PID, statistics=STATS)
    assert stage["instrument_partition"]["pvalue"] < 0.01
    assert stage["between_within"]["pvalue"] < 0.01
    assert stage["between_within"]["mean_between"] > stage["between_within"]["mean_within"]
    assert stage["partial_mantel"]["statistic"] > 0.5 and stage["partial_mantel"]["pvalue"] < 0.01
    assert stage["information_partition"]["statistic"] < stage["instrument_partition"]["statistic"]


def test_a_null_structure_is_not_detected():
    stage = divergence_stage(3, _checkpoints("null"), protocol_id=PID, statistics=STATS)
    for key in ("between_within", "instrument_partition", "information_partition", "partial_mantel",
                "positive_control"):
        assert stage[key]["pvalue"] > 0.05, key


def test_divergence_stage_is_deterministic_and_reports_undefined_tests():
    cps = _checkpoints("dose")
    assert divergence_stage(1, cps, protocol_id=PID, statistics=STATS) == divergence_stage(
        1, cps, protocol_id=PID, statistics=STATS)
    one_seed = [c for c in cps if c["seed"] == 0]
    stage = divergence_stage(1, one_seed, protocol_id=PID, statistics=STATS)
    assert "undefined" in stage["between_within"]  # no within-arm pair with one seed
    assert "undefined" in divergence_stage(1, cps[:2], protocol_id=PID, statistics=STATS)


def _held_out(success: dict[str, list[int]], seeds: int = 2) -> pd.DataFrame:
    rows = []
    for arm, values in success.items():
        for s in range(seeds):
            for k, v in enumerate(values):
                rows.append({"arm": arm, "seed": s, "task_index": k, "success": v})
    return pd.DataFrame(rows)


def test_comparisons_read_equivalent_different_or_inconclusive_with_holm_and_mde():
    gen = np.random.default_rng(0)
    n = 400
    base = gen.integers(0, 2, n)
    flip = lambda share: np.where(gen.random(n) < share, 1 - base, base)  # noqa: E731
    success = {
        "outcome_only": base,
        "implicit": base.copy(),  # identical to outcome-only on all but a few tasks
        "shuffled_implicit": flip(0.02),
        "judge": np.ones(n, dtype=int),  # far better than outcome-only
        "shuffled_judge": flip(0.5),
    }
    success["implicit"][:4] = 1 - success["implicit"][:4]
    frame = _held_out({k: list(v) for k, v in success.items()})
    included = {(a, s) for a in success for s in range(2)}
    result = compare_arms(frame, included, band=0.03, alpha=0.05, power=0.8)
    by_id = {c["id"]: c for c in result["comparisons"]}
    assert by_id["C3"]["reading"] == "equivalent"
    assert by_id["C4"]["reading"] == "different"
    assert by_id["C6"]["reading"] == "different"  # judge superior
    assert by_id["C5"]["reading"] == "inconclusive"
    for c in result["comparisons"]:
        assert c["reading"] in {"equivalent", "different", "inconclusive"}
        assert c["mde"]["mde"] > 0 and c["pvalue_holm"] >= c["pvalue"]
    assert result["holm"]["names"] == ["C1", "C2", "C3", "C4", "C5", "C6"]


def test_a_missing_arm_or_a_degenerate_test_is_resolved_explicitly():
    frame = _held_out({"outcome_only": [1, 0, 1, 0], "implicit": [1, 0, 1, 0]})
    included = {("outcome_only", 0), ("outcome_only", 1), ("implicit", 0), ("implicit", 1)}
    result = compare_arms(frame, included, band=0.03, alpha=0.05, power=0.8)
    by_id = {c["id"]: c for c in result["comparisons"]}
    assert "zero variance" in by_id["C3"]["resolved"] and by_id["C3"]["reading"] == "inconclusive"
    assert "judge has no included checkpoint" in by_id["C4"]["resolved"]
    assert by_id["C3"]["mde"]["sd_source"] == "fallback"
    assert all(c["pvalue"] == 1.0 for c in result["comparisons"])


def _train_episodes(values: dict[tuple[str, int], np.ndarray], tasks: int, rollouts: int) -> pd.DataFrame:
    rows = []
    for (arm, seed), v in values.items():
        for k in range(tasks):
            for r in range(rollouts):
                rows.append({"arm": arm, "seed": seed, "task_index": k, "rollout": r,
                             "success": int(v[k * rollouts + r])})
    return pd.DataFrame(rows)


def test_the_learning_check_pairs_episodes_and_matches_scipy():
    from scipy import stats as sps

    gen = np.random.default_rng(4)
    tasks, rollouts = 8, 6
    n = tasks * rollouts
    base = (gen.random(n) < 0.25).astype(int)
    learned = {s: np.maximum(base, (gen.random(n) < 0.5).astype(int)) for s in range(2)}  # better, paired
    noisy = {s: (gen.random(n) < 0.25).astype(int) for s in range(2)}
    values = {("base", -1): base, **{("outcome_only", s): v for s, v in learned.items()},
              **{("implicit", s): v for s, v in noisy.items()}}
    frame = _train_episodes(values, tasks, rollouts).sample(frac=1.0, random_state=0)  # row order must not matter
    included = {("outcome_only", 0), ("outcome_only", 1), ("implicit", 0)}  # implicit seed 1 excluded
    result = learning_check(frame, included, arms=["outcome_only", "implicit", "judge"], alpha=0.05)
    assert result["n_episodes"] == n

    x = (learned[0] + learned[1]) / 2.0
    ref = sps.ttest_rel(x, base, alternative="greater")
    got = result["arms"]["outcome_only"]
    assert got["pvalue"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert got["pvalue_two_sided"] == pytest.approx(sps.ttest_rel(x, base).pvalue, rel=1e-9)
    assert got["estimate"] == pytest.approx(x.mean() - base.mean())
    assert got["moved"] is True and got["seeds"] == [0, 1]

    ref = sps.ttest_rel(noisy[0], base, alternative="greater")  # only the included seed
    got = result["arms"]["implicit"]
    assert got["pvalue"] == pytest.approx(ref.pvalue, rel=1e-9) and got["seeds"] == [0]
    assert got["moved"] is bool(ref.pvalue <= 0.05)
    assert result["arms"]["judge"]["moved"] is False and "no included checkpoint" in result["arms"]["judge"]["resolved"]


def test_the_learning_check_resolves_an_arm_that_did_not_move_at_all():
    base = np.array([0, 1, 0, 1])
    frame = _train_episodes({("base", -1): base, ("outcome_only", 0): base}, 2, 2)
    got = learning_check(frame, {("outcome_only", 0)}, arms=["outcome_only"], alpha=0.05)["arms"]["outcome_only"]
    assert got["estimate"] == 0.0 and got["discordant"] == 0 and got["moved"] is False
    assert got["pvalue"] is None and "zero variance" in got["resolved"]
