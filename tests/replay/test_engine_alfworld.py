"""Executed replay end to end on the real ALFWorld engine (generated games)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from creditaudit.replay.engine import ReplaySettings, replay_trajectory
from creditaudit.replay.envs.alfworld import AlfworldEnv
from creditaudit.replay.policies import PromptBuilder, SampledAction


class AdmissiblePolicy:
    """Uniform over the admissible commands listed in the prompt, one seeded draw per row."""

    prompt_builder = PromptBuilder(None, history_length=1)

    def sample(self, prompts, *, seeds, temperature, max_action_tokens=None):
        out = []
        for prompt, seed in zip(prompts, seeds):
            line = [l for l in prompt.splitlines() if l.startswith("admissible actions: ")][-1]
            admissible = line[len("admissible actions: "):].split(" | ")
            out.append(SampledAction(admissible[int(np.random.default_rng(seed).integers(len(admissible)))],
                                     (), (), "eos", None, int(seed)))
        return out


@pytest.mark.slow
@pytest.mark.parametrize("task_type", ["pick_and_place_simple", "pick_heat_then_place_in_recep"])
def test_replay_of_a_walkthrough_prefix_on_the_real_engine(task_type, game_by_type):
    game = game_by_type[task_type]
    env = AlfworldEnv(horizon=len(game.walkthrough) + 2)
    policy = AdmissiblePolicy()
    try:
        obs = env.reset(game.task)
        # The recorded trajectory: the first turns of the expert's walkthrough, as collection records them.
        text, records, won = obs.text, [], False
        for action in game.walkthrough:
            records.append({"action": action, "state_signature": env.state_signature(), "observation": text})
            result = env.step(action)
            text, won = result.text, result.won
            if result.done:
                break
        assert won
        trajectory = pd.DataFrame(records[:3]).assign(trajectory_id="expert", mean_logprob=0.0)
        result = replay_trajectory(env, policy, task=game.task, trajectory=trajectory, protocol_id="a" * 64,
                                   settings=ReplaySettings(n_fact=3, n_alt=3, n_alternatives=4))
    finally:
        env.close()
    out = result.turns.to_pandas()
    rollouts = result.rollouts.to_pandas()
    assert result.counters["divergences"] == 0 and rollouts.restore_ok.all()
    assert list(out.prefix_ok) == [True, True, True]
    complete = out[out.status == "complete"]
    assert len(complete) >= 2
    per_turn = rollouts.groupby(["turn", "arm"]).size().unstack()
    assert (per_turn.loc[complete.turn, "fact"] == 3).all() and (per_turn.loc[complete.turn, "alt"] == 12).all()
    # Every alternative is admissible at its turn and differs from the factual action.
    for row in complete.itertuples():
        assert len(set(row.alternatives)) == 4 and row.action not in row.alternatives
    assert result.counters["cache_hits"] > 0
