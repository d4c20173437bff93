"""The planted-effect environment: contract, determinism, and effects known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit import plugins
from creditaudit.replay.envs import Environment, EpisodeOver, SnapshotError
from creditaudit.replay.envs.planted import PlantedEnv, PlantedState


def _task(env, seed=0):
    return env.make_tasks(1, rng=np.random.default_rng(seed))[0]


def test_registered_contract_and_text():
    env = plugins.get("environment", "planted").create({"kinds": "PAN"}, horizon=12).make()
    assert isinstance(env, PlantedEnv) and isinstance(env, Environment)
    obs = env.reset(_task(env))
    assert obs.text.startswith("-= A maze of doors =-")
    assert obs.text.rstrip().endswith(obs.goal + ".")
    assert len(obs.admissible) == 5 and list(obs.admissible) == sorted(obs.admissible)
    result = env.step("shout")
    assert result.text == "Nothing happens." and env.state.steps == 1 and env.state.room == 0
    result = env.step(obs.admissible[0])
    assert result.text.startswith("You open the ") and env.state.room == 1


def test_task_ids_are_pinned_and_checked():
    env = PlantedEnv()
    task = env.task(42)
    assert task.task_id == PlantedEnv().task(42).task_id
    assert task.task_id != PlantedEnv(slip=0.1).task(42).task_id
    assert task.task_id == "63c676a11a179ab8fe3b0991d083964ea16c62e839576153195bb43d38282655"
    with pytest.raises(InputError, match="not made for this planted configuration"):
        PlantedEnv(n_actions=6).reset(task)
    with pytest.raises(InputError, match="`seed`"):
        env.task(-1)


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": "PXN"}, "`kinds`"),
    ({"n_good": 5}, "`n_good`"),
    ({"p_pivotal": 0.9, "p_absorbing": 0.2}, "`p_pivotal`"),
    ({"horizon": 0}, "`horizon`"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(InputError, match=message):
        PlantedEnv(**kwargs)


def test_effects_known_by_construction_single_pivotal_room():
    # one pivotal room, 3 good doors of 5, one success needed: V = 3/5, a good door wins for sure,
    # a bad one loses for sure; effect(good) = 1 - 2/4, effect(bad) = 0 - 3/4
    env = PlantedEnv(kinds="P", n_actions=5, n_good=3, threshold_frac=1.0)
    obs = env.reset(_task(env))
    assert env.value() == pytest.approx(0.6)
    effects = sorted(env.true_effect(a) for a in obs.admissible)
    assert effects == pytest.approx([-0.75, -0.75, 0.5, 0.5, 0.5])
    assert env.true_effect("wave") == pytest.approx(0.0)  # a wasted step changes nothing while time is left
    short = PlantedEnv(kinds="P", n_actions=5, n_good=3, threshold_frac=1.0, horizon=1)
    short.reset(_task(short))
    assert short.true_effect("wave") == pytest.approx(0.0 - 0.6)  # ... but here it wastes the only step

def test_effect_kinds_along_a_chain():
    env = PlantedEnv(kinds="NPAPN", n_actions=5, n_good=2, n_trap=1, threshold_frac=0.5)
    obs = env.reset(_task(env, 3))
    assert env.room_kind() == "noop"
    assert all(env.true_effect(a) == 0.0 for a in obs.admissible)
    env.step(obs.admissible[0])
    assert env.room_kind() == "pivotal"
    pivotal = {a: env.true_effect(a) for a in env.admissible_actions()}
    assert sum(v > 0 for v in pivotal.values()) == 2 and sum(v < 0 for v in pivotal.values()) == 3
    assert sum(pivotal.values()) == pytest.approx(0.0)
    good = max(pivotal, key=pivotal.get)
    env.step(good)
    assert env.room_kind() == "absorbing"
    absorbing = {a: env.true_effect(a) for a in env.admissible_actions()}
    trap = min(absorbing, key=absorbing.get)
    assert sum(v < 0 for v in absorbing.values()) == 1
    result = env.step(trap)
    assert result.done and not result.won and "floor gives way" in result.text
    assert env.admissible_actions() == ()
    with pytest.raises(EpisodeOver):
        env.step(good)


def test_true_effect_is_the_expected_replay_advantage():
    # Monte Carlo A_replay under the reference policy (uniform over admissible doors) from a
    # restored state converges to the planted effect.
    env = PlantedEnv(kinds="PPAPN", n_good=2, slip=0.25)
    obs = env.reset(_task(env, 9))
    env.step(obs.admissible[1])
    snap = env.snapshot()
    rng = np.random.default_rng(0)

    def rollout(first):
        env.restore(snap)
        result = env.step(first)
        while not result.done:
            result = env.step(result.admissible[int(rng.integers(len(result.admissible)))])
        return result.outcome

    actions = env.admissible_actions()
    n = 3000
    q = {a: np.mean([rollout(a) for _ in range(n)]) for a in actions}
    env.restore(snap)
    for a in actions:
        empirical = q[a] - np.mean([q[b] for b in actions if b != a])
        assert empirical == pytest.approx(env.true_effect(a), abs=0.04)
        assert q[a] == pytest.approx(env.q_value(a), abs=0.03)


def test_true_effects_along_a_trajectory_and_determinism():
    env = PlantedEnv(slip=0.3)
    task = _task(env, 4)
    obs = env.reset(task)
    rng = np.random.default_rng(1)
    actions, results, expected = [], [], []
    result = None
    while result is None or not result.done:
        adm = obs.admissible if result is None else result.admissible
        a = adm[int(rng.integers(len(adm)))]
        expected.append(env.true_effect(a))
        actions.append(a)
        result = env.step(a)
        results.append(result)
    assert env.true_effects(actions) == pytest.approx(expected)
    env.reset(task)
    assert [env.step(a) for a in actions] == results  # deterministic, slips included


def test_horizon_and_snapshots():
    env = PlantedEnv(kinds="NNNN", horizon=3)
    obs = env.reset(_task(env))
    assert env.value() == 0.0  # the exit is 4 rooms away, the horizon 3 steps
    snap = env.snapshot()
    for _ in range(3):
        result = env.step(obs.admissible[0])
    assert result.done and result.truncated and result.outcome == 0
    env.restore(snap)
    assert env.state == PlantedState(0, 0, 0)
    env.reset(_task(env))
    with pytest.raises(SnapshotError, match="before the last reset"):
        env.restore(snap)
    with pytest.raises(SnapshotError, match="another PlantedEnv"):
        _other_restore(snap)


def _other_restore(snap):
    other = PlantedEnv(kinds="NNNN", horizon=3)
    other.reset(_task(other))
    other.restore(snap)


def test_default_configuration_has_mid_range_success():
    env = PlantedEnv()
    values = []
    for task in env.make_tasks(100, rng=np.random.default_rng(0)):
        env.reset(task)
        values.append(env.value())
    assert 0.3 < np.mean(values) < 0.8
