"""Prefix replay: a reset/step environment restored by resetting and replaying the action prefix."""

from __future__ import annotations

import numpy as np
import pytest

from creditaudit import plugins
from creditaudit.replay.determinism import check_restore, random_actions
from creditaudit.replay.envs import EpisodeOver, PrefixReplayEnv, SnapshotError, StepResult
from creditaudit.replay.envs.planted import PlantedEnv


class _NoSnapshots:
    """The planted environment reduced to reset/step/close (no snapshot, no signature)."""

    name = "bare"

    def __init__(self, **kw):
        self.inner = PlantedEnv(**kw)

    def make_tasks(self, n, *, rng):
        return self.inner.make_tasks(n, rng=rng)

    def reset(self, task):
        return self.inner.reset(task)

    def step(self, action):
        return self.inner.step(action)

    def close(self):
        self.inner.close()


def _task(seed=0, **kw):
    return PlantedEnv(**kw).make_tasks(1, rng=np.random.default_rng(seed))[0]


def test_plugin_without_native_snapshots_is_wrapped():
    plugin = plugins.get("environment", "planted")
    native = plugin.create({"kinds": "PAN"}, horizon=6).make()
    wrapped = plugin.create({"kinds": "PAN", "native_snapshots": False}, horizon=6).make()
    assert isinstance(native, PlantedEnv)
    assert isinstance(wrapped, PrefixReplayEnv) and isinstance(wrapped.env, PlantedEnv)
    # the same signatures as the native environment: it has a state signature of its own
    task = _task(kinds="PAN")
    native.reset(task), wrapped.reset(task)
    for action in ("open the red door", "shout", native.admissible_actions()[0]):
        assert native.step(action) == wrapped.step(action)
        assert native.state_signature() == wrapped.state_signature()


def test_restore_replays_the_prefix_and_checks_every_state():
    env = PrefixReplayEnv(_NoSnapshots(kinds="PNPNP", horizon=9), horizon=9, name="bare")
    task = _task(3, kinds="PNPNP")
    actions = random_actions(env, task, 9, rng=np.random.default_rng(1), p_inadmissible=0.2)
    report = check_restore(env, task, actions)
    assert report.n_runs == len(actions) + 1  # one restore per state, every step compared
    assert env.counters["replayed_steps"] > 0 and env.divergences == 0
    # without a signature of its own, the signature hashes (task, prefix): distinct per prefix
    env.reset(task)
    first = env.state_signature()
    env.step(actions[0])
    assert env.state_signature() != first


def test_restore_plays_only_the_missing_tail():
    env = PrefixReplayEnv(_NoSnapshots(kinds="NNNN", horizon=9), horizon=9, name="bare")
    task = _task(kinds="NNNN")
    obs = env.reset(task)
    a = obs.admissible[0]
    env.step(a)
    short = env.snapshot()
    env.step(a)
    long = env.snapshot()
    resets = env.counters["resets"]
    env.restore(long)  # already there: nothing to do
    assert env.counters["resets"] == resets and env.counters["replayed_steps"] == 0
    env.restore(short)  # backwards: reset + 1 step
    assert env.counters["resets"] == resets + 1 and env.counters["replayed_steps"] == 1
    env.restore(long)  # forwards on the same prefix: 1 more step, no reset
    assert env.counters["resets"] == resets + 1 and env.counters["replayed_steps"] == 2
    assert env.state_signature() == long.signature


def test_snapshots_travel_between_instances():
    kw = {"kinds": "PNA", "horizon": 6}
    a = PrefixReplayEnv(_NoSnapshots(**kw), horizon=6, name="bare")
    b = PrefixReplayEnv(_NoSnapshots(**kw), horizon=6, name="bare")
    task = _task(kinds="PNA")
    obs = a.reset(task)
    a.step(obs.admissible[1])
    snap = a.snapshot()
    b.restore(snap)
    assert b.state_signature() == snap.signature and b.admissible_actions() == snap.admissible


def test_a_divergent_restore_is_counted_and_never_matches(monkeypatch):
    env = PrefixReplayEnv(_NoSnapshots(kinds="NNN", horizon=6), horizon=6, name="bare")
    task = _task(kinds="NNN")
    obs = env.reset(task)
    env.step(obs.admissible[0])
    snap = env.snapshot()
    env.reset(task)  # the restore must replay the step
    original = env.env.step
    monkeypatch.setattr(env.env, "step", lambda action: StepResult(original(action).text + " (changed)", (), False,
                                                                   False))
    env.restore(snap)
    assert env.divergences == 1 and env.counters["divergences"] == 1
    assert env.state_signature() != snap.signature
    with pytest.raises(SnapshotError, match="diverged state"):
        env.snapshot()


def test_horizon_is_enforced_and_episode_over():
    env = PrefixReplayEnv(_NoSnapshots(kinds="NNNN", horizon=50), horizon=2, name="bare")
    env.reset(_task(kinds="NNNN", horizon=50))
    assert not env.step("shout").done
    last = env.step("shout")
    assert last.done and last.truncated and not last.won
    with pytest.raises(EpisodeOver):
        env.step("shout")
    with pytest.raises(SnapshotError, match="not a PrefixSnapshot"):
        env.restore(object())


class _Unlisted(_NoSnapshots):
    """The planted environment listing no admissible commands (capability ``admissible`` false)."""

    def reset(self, task):
        obs = self.inner.reset(task)
        return type(obs)(obs.goal, obs.text, ())

    def step(self, action):
        r = self.inner.step(action)
        return StepResult(r.text, (), r.done, r.won, r.truncated)


class _AnyDoor:
    """Draws any of twelve doors (the environment lists none), one seeded draw per row."""

    from creditaudit.replay.policies import PromptBuilder

    prompt_builder = PromptBuilder(None, history_length=0)
    doors = [f"open the {c} door" for c in ("red", "blue", "green", "yellow", "white", "black", "orange", "purple",
                                             "grey", "brown", "pink", "gold")]

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        from creditaudit.replay.policies import SampledAction

        return [SampledAction(self.doors[int(np.random.default_rng(s).integers(12))], (), (), "eos", None, int(s))
                for s in seeds]


def test_without_admissible_lists_distinct_draws_are_the_alternatives():
    import pandas as pd

    from creditaudit.replay.engine import ReplaySettings, replay_trajectory

    env = PrefixReplayEnv(_Unlisted(kinds="PNPN", horizon=12), horizon=12, name="unlisted")
    task = _task(5, kinds="PNPN")
    obs = env.reset(task)
    actions, sigs, seen, text = [], [], [], obs.text
    for door in ("open the red door", "open the blue door", "open the green door"):
        sigs.append(env.state_signature()), seen.append(text), actions.append(door)
        text = env.step(door).text
    frame = pd.DataFrame({"trajectory_id": "u", "action": actions, "state_signature": sigs, "observation": seen,
                          "mean_logprob": 0.0})
    listed = replay_trajectory(env, _AnyDoor(), task=task, trajectory=frame, protocol_id="c" * 64,
                               settings=ReplaySettings(n_fact=1, n_alt=1)).turns.to_pandas()
    assert (listed.status == "no_counterfactual").all()  # nothing is admissible when nothing is listed
    open_ = replay_trajectory(env, _AnyDoor(), task=task, trajectory=frame, protocol_id="c" * 64,
                              settings=ReplaySettings(n_fact=1, n_alt=1, admissible_only=False)).turns.to_pandas()
    assert (open_.status == "complete").all() and open_.prefix_ok.all()
    assert all(len(set(a)) == 4 and actions[t] not in a for t, a in zip(open_.turn, open_.alternatives))
