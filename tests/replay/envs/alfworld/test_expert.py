"""The observation-only searching expert that demonstrates the default policy, and the generated
games' walkthroughs played as demonstrations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit.replay.envs.alfworld import game_task
from creditaudit.replay.envs.alfworld.expert import (
    UNLIKELY_WEIGHT,
    expert_action,
    expert_demonstration,
    expert_demonstrations,
    parse_goal,
    search_weights,
)

KINDS = {
    "pick_and_place_simple": "simple",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "two",
}


@pytest.mark.parametrize("task_type", sorted(KINDS))
def test_every_alfworld_goal_template_parses(task_type):
    import alfworld.gen.goal_library as goal_library

    for template in goal_library.gdict[task_type]["templates"]:
        text = template.format(obj="soapbar", recep="cabinet", toggle="desklamp", mrecep="bowl") + "."
        goal = parse_goal(text)
        assert goal is not None and goal.kind == KINDS[task_type] and goal.obj == "soapbar", text
        if task_type == "look_at_obj_in_light":
            assert goal.toggle == "desklamp" and goal.recep is None
        else:
            assert goal.recep == "cabinet"
    assert parse_goal("dance with the toaster.") is None


def test_search_prefers_holders_and_avoids_recent_places():
    import alfworld.gen.constants as constants

    places = ["cabinet 1", "fridge 1", "toilet 1", "countertop 1"]
    weights = search_weights(places, "egg", recent={"countertop 1"})
    can_hold = {r.lower() for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items() if "Egg" in objs}
    for place, w in zip(places, weights):
        kind = place.split()[0]
        expected = 0.0 if place == "countertop 1" else (1.0 if kind in can_hold else UNLIKELY_WEIGHT)
        assert w == expected, place
    # when every place was visited recently, the mask is dropped rather than leaving nothing
    assert search_weights(["fridge 1"], "egg", recent={"fridge 1"}) == [1.0]


def test_expert_reads_the_state_from_the_prompt():
    goal = "heat some egg and put it in countertop."
    # holding the egg at the microwave: heat it (the microwave works closed)
    adm = ["examine egg 1", "examine microwave 1", "go to countertop 1", "heat egg 1 with microwave 1",
           "open microwave 1"]
    assert expert_action(goal, "You arrive at microwave 1. The microwave 1 is closed.", adm) == \
        "heat egg 1 with microwave 1"
    # once the last two turns show the heat, it goes to the target
    history = [("You arrive at microwave 1.", "heat egg 1 with microwave 1")]
    assert expert_action(goal, "You heat the egg 1 using the microwave 1.", adm, history) == "go to countertop 1"
    # a target object is taken where it is seen; anything else is searched for
    adm = ["examine sinkbasin 1", "go to countertop 1", "go to fridge 1", "take egg 2 from sinkbasin 1",
           "take fork 1 from sinkbasin 1"]
    assert expert_action(goal, "On the sinkbasin 1, you see a egg 2, and a fork 1.", adm) == "take egg 2 from sinkbasin 1"
    rng = np.random.default_rng(0)
    draws = {expert_action("put a fork in drawer.", "x", ["go to fridge 1", "go to countertop 1", "go to toilet 1"],
                           rng=rng) for _ in range(50)}
    assert draws <= {"go to fridge 1", "go to countertop 1", "go to toilet 1"} and "go to countertop 1" in draws


@pytest.mark.slow
def test_expert_wins_generated_games_of_every_type(alfworld_games, alfworld_env):
    """Played on the real engine (horizon 30), the searcher wins games of all six task types."""
    won: dict[str, int] = {}
    for k, game in enumerate(alfworld_games.games):
        obs = alfworld_env.reset(game.task)
        text, adm, history = obs.text, tuple(obs.admissible), []
        rng = np.random.default_rng(k)
        for _ in range(30):
            action = expert_action(obs.goal, text, adm, history, rng)
            assert action in adm, (game.task_type, action)
            result = alfworld_env.step(action)
            history.append((text, action))
            text, adm = result.text, tuple(result.admissible)
            if result.done:
                won[game.task_type] = won.get(game.task_type, 0) + bool(result.won)
                break
    assert set(won) == set(KINDS) and sum(won.values()) >= len(alfworld_games.games) - 1, won


@pytest.mark.slow
def test_walkthroughs_win_on_the_engine(alfworld_games, alfworld_env):
    demos = expert_demonstrations(alfworld_games.games, env=alfworld_env)
    for game in alfworld_games.games:
        steps = demos[game.task_id]
        assert [s.action for s in steps] == list(game.walkthrough)
        assert "Your task is to:" in steps[0].observation
        for step in steps:
            assert step.action in step.admissible  # every expert action is admissible where it is taken
    assert alfworld_env.won and alfworld_env.done  # the last game played ends won


@pytest.mark.slow
def test_expert_demonstration_needs_a_walkthrough(alfworld_games, alfworld_env, tmp_path):
    game = alfworld_games.games[0]
    content = json.loads(game.path.read_text())
    del content["walkthrough"]
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(content))
    task = game_task(path, game.task_type)
    with pytest.raises(InputError, match="has no `walkthrough`"):
        expert_demonstration(task, env=alfworld_env)
    content["walkthrough"] = ["look"]
    path.write_text(json.dumps(content))
    with pytest.raises(RuntimeError, match="does not win"):
        expert_demonstration(game_task(path, game.task_type), env=alfworld_env)
