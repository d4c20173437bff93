"""The textworld acceleration: it changes nothing the engine shows, and it applies only to the
textworld versions it was checked against."""

from __future__ import annotations

import re

import numpy as np
import pytest

from creditaudit.errors import InputError
from creditaudit.replay.determinism import random_actions
from creditaudit.replay.envs.alfworld import AlfworldEnv, textworld_accel


def test_the_installed_textworld_is_a_tested_version():
    assert textworld_accel.textworld_version() in textworld_accel.TESTED_TEXTWORLD


def test_an_untested_textworld_version_is_refused_with_what_to_do(monkeypatch):
    monkeypatch.setattr(textworld_accel, "textworld_version", lambda: "1.8.0")
    with pytest.raises(InputError) as caught:
        textworld_accel.accelerate_textworld()
    message = str(caught.value)
    assert message.startswith("textworld 1.8.0 is installed")
    assert "tested with textworld 1.6.2 and 1.7.0 only" in message
    assert re.search(r"pip install 'textworld==1\.7\.0'", message)
    assert "TESTED_TEXTWORLD" in message


def test_an_untested_textworld_version_refuses_the_engine_before_loading_a_game(monkeypatch, tmp_path):
    from creditaudit.replay.envs import Task
    from creditaudit.replay.envs.alfworld import AlfworldEnv

    game = tmp_path / "game.tw-pddl"
    game.write_text('{"pddl_domain": "d", "grammar": "g", "pddl_problem": "p"}')
    monkeypatch.setattr(textworld_accel, "textworld_version", lambda: "1.5.4")
    with AlfworldEnv(horizon=5) as env, pytest.raises(InputError, match="textworld 1.5.4 is installed"):
        env.reset(Task(task_id="t", task_type="pick_and_place_simple", source=str(game)))


@pytest.mark.slow  # (the marker of test_env.py, where this test was)
@pytest.mark.parametrize("task_type", ["pick_heat_then_place_in_recep", "look_at_obj_in_light", "pick_two_obj_and_place"])
def test_textworld_shortcuts_change_nothing_the_engine_shows(game_by_type, task_type):
    """Every observation, admissible list, outcome and state signature is the same with
    textworld's grammar parsers memoised, its contexts copied shallowly and its per-state infos
    memoised as without (fresh engines, so nothing is shared) -- through restores to earlier
    states and revisits, where the infos memo answers."""
    import textworld.envs.pddl.pddl as pddl
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    from creditaudit.replay.envs.alfworld import textworld_shortcuts

    game = game_by_type[task_type]
    with AlfworldEnv(horizon=60, reuse_engine=False) as probe:
        actions = random_actions(probe, game.task, 12, rng=np.random.default_rng(11), p_inadmissible=0.1)
    actions += ["look", "inventory"] + list(game.walkthrough)
    memo_sizes = []

    def play(enabled: bool) -> list:
        with textworld_shortcuts(enabled), AlfworldEnv(horizon=60, reuse_engine=False) as env:
            obs = env.reset(game.task)
            seen = [(obs.text, obs.admissible, env.state_signature())]
            marks = []
            for a in actions:
                marks.append(env.snapshot())
                r = env.step(a)
                seen.append((r.text, r.admissible, r.done, r.won, env.state_signature()))
                if r.done:
                    break
            # back to earlier states, then other commands from there (the walkthrough again from
            # the start, each state's admissible commands in turn)
            for mark in marks[:: max(1, len(marks) // 5)]:
                env.restore(mark)
                seen.append(("restored", env.state_signature()))
                for a in env.admissible_actions()[:3]:
                    env.restore(mark)
                    r = env.step(a)
                    seen.append((a, r.text, r.admissible, r.done, r.won, env.state_signature()))
            env.restore(marks[0])
            for a in game.walkthrough:
                r = env.step(a)
                seen.append((r.text, r.admissible, r.done, r.won, env.state_signature()))
            memo_sizes.append(len(env._pddl.__dict__.get("_creditaudit_infos", (None, {}))[1]))
            return seen

    memoised, plain = play(True), play(False)
    assert getattr(textgen._parse_and_convert, "_creditaudit_memo", False)
    assert getattr(logic._parse_and_convert, "_creditaudit_memo", False)
    assert getattr(textgen.copy_context, "_creditaudit_shortcut", False)
    assert getattr(pddl.PddlEnv._gather_infos, "_creditaudit_memo", False)
    assert memoised == plain
    assert memoised[-1][3]  # the walkthrough replayed after the restores still wins
    steps = sum(1 for row in memoised if row[0] != "restored") - 1
    assert 0 < memo_sizes[0] < steps  # the memo answered some steps ...
    assert memo_sizes[1] == 0  # ... and is not used when the shortcuts are off
    assert len(memoised) > 12 and len({row[-1] for row in memoised}) > 5  # the world did change
