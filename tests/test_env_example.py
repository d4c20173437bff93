"""The example environment distribution (``examples/creditaudit-example-env``): a third-party
environment installed as a real distribution and used from a protocol, with no change to creditaudit.

The game ``gridworld`` has only ``reset`` / ``step`` / ``close`` (no native snapshots, no state
signature), so every replay of it goes through prefix replay. End to end: the example is installed
with ``pip install --target`` (a ``dist-info`` with its entry points), and a fresh process with that
directory on ``PYTHONPATH`` discovers the environment from it -- no registry is patched -- and takes
a protocol naming it through ``protocol pin``, ``freeze``, ``collect``, ``replay``, ``signals``,
``audit``, ``ledger regenerate`` and ``ledger verify``, with a small policy behaviour-cloned on the
game. Bad ``args`` are refused by protocol validation (exit 2, naming the argument); editing or
uninstalling the distribution after the freeze stops the next stage (exit 1, naming the plugin).
"""

from __future__ import annotations

import doctest
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from example_dists import ROOT, STAGES, creditaudit, install, run_stages

EXAMPLE = ROOT / "examples" / "creditaudit-example-env"
MODULE = Path("creditaudit_example_env") / "gridworld.py"
INSTRUCTION = ("You are an agent in a key-and-door gridworld text game. Reply with exactly one admissible action. "
               "Commands are 'go north', 'go south', 'go east', 'go west', 'take key', 'open door' and 'look'; "
               "take the key before opening the door.")
SIZE, HORIZON = 2, 8


def _gridworld():
    """The example's module, imported from its source (no distribution installed in this process)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from creditaudit_example_env import gridworld
    finally:
        sys.path.remove(str(EXAMPLE))
    return gridworld


def _protocol(*, size: object = SIZE, horizon: int = HORIZON, n_tasks: int = 5, group: int = 2) -> str:
    from creditaudit.protocol.io import default_template_text

    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "gridworld", "source": "generated", "horizon": horizon, "args": {"size": size}}
    data["collection"] = {"n_tasks": n_tasks, "group_size": group, "determinism_instances": 2}
    data["policy"].update(source="local", path="policy", history_length=0, max_action_tokens=6, temperature=1.0)
    data["signals"] = [{"name": "confidence", "family": "confidence"}, {"name": "grpo", "family": "grpo"}]
    data["controls"] = [{"name": "random", "kind": "random", "null_control": True},
                        {"name": "uniform", "kind": "uniform", "null_control": True},
                        {"name": "shuffle-confidence", "kind": "shuffle", "of": "confidence"},
                        {"name": "shuffle-grpo", "kind": "shuffle", "of": "grpo"}]
    data["router"] = None
    # one alternative per turn: the behaviour-cloned policy rarely draws two distinct non-factual
    # commands among a 2 x 2 room's three or four; this test is about the environment, not the estimator
    data["replay"]["n_alternatives"] = 1
    data["statistics"]["bootstrap_iterations"] = 500
    return yaml.safe_dump(data, sort_keys=False)


# ----------------------------------------------------------------------------- the game itself


def test_the_game_is_a_deterministic_reset_step_game_that_needs_the_key():
    from creditaudit.replay.envs import PrefixReplayEnv, Task

    gridworld = _gridworld()
    failures, _ = doctest.testmod(gridworld)
    assert failures == 0
    plugin = gridworld.gridworld_environment(horizon=HORIZON, size=SIZE)
    assert plugin.capabilities.to_dict() == {"native_snapshot": False, "admissible": True, "state_signature": False,
                                             "generates_tasks": True, "pddl_games": False}
    assert plugin.prompt.instruction == INSTRUCTION
    raw = plugin.raw()
    assert not any(hasattr(raw, a) for a in ("snapshot", "restore", "state_signature"))
    tasks = plugin.make_tasks(12, rng=np.random.default_rng(3))
    assert tasks == plugin.make_tasks(12, rng=np.random.default_rng(3))  # tasks are a function of the seed
    assert len({t.task_id for t in tasks}) > 1
    for task in tasks:
        solution = gridworld.shortest_solution(task)
        assert len(solution) <= HORIZON
        for game in (raw, plugin.raw()):  # two instances, the same texts
            game.reset(task)
            results = [game.step(c) for c in solution]
            assert [r.done for r in results] == [False] * (len(solution) - 1) + [True] and results[-1].won
        # going straight to the door, without the key: opening it is a wasted step
        game = plugin.raw()
        game.reset(task)
        keyless = Task(task.task_id, task.task_type, task.source, {**task.params, "key": task.params["start"]})
        at_door = [game.step(c) for c in gridworld.shortest_solution(keyless) if c.startswith("go ")][-1]
        assert "open door" in at_door.admissible and "take key" not in at_door.admissible
        locked = game.step("open door")
        assert (locked.done, locked.won) == (False, False) and locked.text.startswith("The door is locked.")
        assert game.step("dance").text == "Nothing happens."

    # the stages' instance: the raw game wrapped by prefix replay, restoring by reset + replayed prefix
    env = plugin.make()
    assert isinstance(env, PrefixReplayEnv)
    task = tasks[0]
    env.reset(task)
    solution = gridworld.shortest_solution(task)
    env.step(solution[0])
    snap = env.snapshot()
    rest = [env.step(c) for c in solution[1:]]
    env.restore(snap)
    assert [env.step(c) for c in solution[1:]] == rest and env.divergences == 0
    assert env.counters["replayed_steps"] == 1
    # the horizon is the wrapper's: looking around until it runs out loses
    env.reset(task)
    last = [env.step("look") for _ in range(HORIZON)][-1]
    assert (last.done, last.won, last.truncated) == (True, False, True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"size": 1}, r"`size` must be an integer in \[2, 6\], got 1"),
    ({"size": 7}, r"`size` must be an integer in \[2, 6\], got 7"),
    ({"size": 3, "horizon": 9}, r"a horizon of 9 is too short for `size` 3: a task may need 10 commands"),
])
def test_the_factory_checks_its_arguments(kwargs, message):
    gridworld = _gridworld()
    with pytest.raises(ValueError, match=message):
        gridworld.gridworld_environment(**{"horizon": 12, **kwargs})


# ----------------------------------------------------------------------------- installed, before the run


def test_the_installed_example_is_validated_pinned_and_refused_once_changed_or_gone(tmp_path, fake_policy_dir):
    site = tmp_path / "site"
    install(EXAMPLE, site)
    info = next(site.glob("creditaudit_example_env-*.dist-info"))
    assert ("gridworld = creditaudit_example_env.gridworld:gridworld_environment"
            in (info / "entry_points.txt").read_text())

    # bad arguments: protocol validation stops with exit 2, naming the argument (the factory's own
    # checks, then a type the signature refuses)
    bad = tmp_path / "bad.yaml"
    for text, words in [(_protocol(size=9), ["field `environment`", "gridworld: `size` must be an integer in [2, 6], "
                                                                      "got 9"]),
                        (_protocol(size=3, horizon=8), ["field `environment`", "gridworld: a horizon of 8 is too "
                                                                                "short for `size` 3"]),
                        (_protocol(size="two"), ["args of environment 'gridworld' (creditaudit-example-env 0.1.0): "
                                                 "`size`: Input should be a valid integer; it takes size"])]:
        bad.write_text(text)
        result = creditaudit(site, "protocol", "id", str(bad))
        output = " ".join((result.stdout + result.stderr).split())
        assert result.returncode == 2 and all(w in output for w in words), (words, output)
        assert "Traceback" not in result.stderr

    # a good protocol is pinned and frozen in a fresh process that discovers the environment from the dist-info
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(fake_policy_dir, run / "policy")
    (run / "protocol.yaml").write_text(_protocol())
    outcome, stderr = run_stages(site, run, ("environment", "gridworld"), stages=STAGES[:3])
    assert outcome["codes"] == [0, 0, 0], stderr[-3000:]
    assert (outcome["distribution"], outcome["version"], outcome["made"]) == \
        ("creditaudit-example-env", "0.1.0", "PrefixReplayEnv")
    from creditaudit.protocol.canonical import sha256_file

    lock = json.loads((run / "protocol.lock.json").read_text())
    assert {"kind": "environment", "name": "gridworld", "distribution": "creditaudit-example-env", "version": "0.1.0",
            "source_sha256": sha256_file(site / MODULE)} in lock["protocol"]["plugins"]
    assert lock["protocol"]["environment"]["args"] == {"size": SIZE}

    # (b) its installed source edited after the freeze: the next stage stops, naming it
    module = site / MODULE
    original = module.read_text()
    module.write_text(original.replace('text = "Nothing happens."', 'text = "Nothing at all happens."'))
    result = creditaudit(site, "collect", "--run", str(run), "--quiet")
    assert result.returncode == 1, result.stderr
    assert "environment plugin 'gridworld' (creditaudit-example-env 0.1.0)" in result.stderr
    assert "changed after the protocol was pinned" in result.stderr
    module.write_text(original)

    # (a) the distribution uninstalled: the next stage stops, naming it and what to install
    shutil.rmtree(info)
    shutil.rmtree(site / "creditaudit_example_env")
    result = creditaudit(site, "collect", "--run", str(run), "--quiet")
    assert result.returncode == 1, result.stderr
    assert ("environment plugin 'gridworld' (creditaudit-example-env 0.1.0) is pinned but not installed; install "
            "creditaudit-example-env==0.1.0") in result.stderr
    assert not (run / "collect").exists()


# ----------------------------------------------------------------------------- end to end


def train_gridworld_policy(directory: Path, *, noise: float = 0.4, n_tasks: int = 24, epochs: int = 20) -> None:
    """A tiny real Qwen2 policy behaviour-cloned on the game's shortest solutions, with ``noise`` of
    the demonstrated steps taken at random (the label stays the expert's command, so it also learns
    to recover). It wins some episodes within the horizon and wastes steps in others."""
    import torch

    from creditaudit.replay.policies import PromptBuilder
    from creditaudit.replay.policies.default import (
        SPECIAL_TOKENS,
        BCExample,
        build_model,
        build_tokenizer,
        train_behaviour_cloning,
        words_from_texts,
    )

    gridworld = _gridworld()
    rng = np.random.default_rng(5)
    game = gridworld.GridWorld(size=SIZE)
    builder = PromptBuilder(None, history_length=0, instruction=gridworld.PROMPT.instruction)
    texts, examples = [gridworld.PROMPT.instruction], []
    for task in game.make_tasks(n_tasks, rng=rng):
        obs = game.reset(task)
        text, admissible = obs.text, obs.admissible
        texts += [obs.goal, text, *admissible]
        for _ in range(HORIZON):
            expert = game.expert_command()
            examples.append(BCExample(builder.build(obs.goal, text, admissible, []), expert))
            action = admissible[int(rng.integers(len(admissible)))] if rng.random() < noise else expert
            result = game.step(action)
            text, admissible = result.text, result.admissible
            texts += [text, *admissible]
            if result.done:
                break
    vocabulary = list(SPECIAL_TOKENS) + sorted(words_from_texts(texts) - set(SPECIAL_TOKENS))
    tokenizer = build_tokenizer(vocabulary)
    model = build_model(len(tokenizer), tokenizer, hidden_size=32, num_layers=1, num_heads=2, init_seed=11)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains many times faster on one thread of a busy machine
    try:
        train_behaviour_cloning(model, tokenizer, examples, epochs=epochs, learning_rate=1e-2,
                                rng=np.random.default_rng(3))
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


LEDGER = (("ledger", "regenerate", "--run", "{run}", "--quiet"), ("ledger", "verify", "--run", "{run}"))


@pytest.mark.slow
def test_the_installed_environment_is_audited_end_to_end_through_prefix_replay(tmp_path):
    import pandas as pd

    site = tmp_path / "site"
    install(EXAMPLE, site)
    run = tmp_path / "run"
    run.mkdir()
    train_gridworld_policy(run / "policy")
    (run / "protocol.yaml").write_text(_protocol())
    outcome, stderr = run_stages(site, run, ("environment", "gridworld"), stages=STAGES + LEDGER)
    assert outcome["codes"] == [0] * 9, (outcome, stderr[-3000:])
    # discovered from the installed dist-info, and replayed through the prefix-replay wrapper
    assert (outcome["distribution"], outcome["version"], outcome["made"]) == \
        ("creditaudit-example-env", "0.1.0", "PrefixReplayEnv")

    # collection: the determinism certificate passed on the game, the prompt carries the game's words
    summary = json.loads((run / "collect" / "summary.json").read_text())
    certificate = json.loads((run / "collect" / "determinism.json").read_text())
    assert certificate["n_instances"] >= 2 and certificate["task_id"].startswith("gridworld-")
    assert certificate["trace_hash"] == summary["determinism_trace_hash"]
    turns = pd.read_parquet(run / "collect" / "trajectories.parquet")
    assert summary["n_trajectories"] == 10 and len(turns) == summary["n_turns"]
    assert turns.prompt.map(lambda p: p.splitlines()[0]).eq(INSTRUCTION).all()
    assert turns.action_admissible.all()
    won = turns.groupby("trajectory_id").outcome.max()
    assert 0 < won.sum() < len(won)  # the policy wins some episodes, not all
    # every collected text is the game's: replaying each trajectory's actions on the source's game gives them
    gridworld = _gridworld()
    from creditaudit.replay.envs import Task

    tasks = {t["task_id"]: Task(t["task_id"], t["task_type"], "gridworld", t["params"])
             for t in json.loads((run / "tasks.json").read_text())["tasks"]}
    game = gridworld.GridWorld(size=SIZE)
    for tid, rows in turns.groupby("trajectory_id", sort=False):
        rows = rows.sort_values("turn")
        assert game.reset(tasks[rows.task_id.iloc[0]]).text == rows.observation.iloc[0]
        assert [game.step(a).text for a in rows.action] == rows.feedback.tolist(), tid

    # replay: restored by prefix replay without a divergence, and some steps matter
    replay = json.loads((run / "replay" / "summary.json").read_text())
    assert (replay["prefix_divergences"], replay["restore_failures"]) == (0, 0) and replay["n_rollouts"] > 0
    effects = pd.read_parquet(run / "replay" / "turns.parquet")
    complete = effects[effects.status == "complete"]
    assert len(complete) > 0 and (complete.a_replay != 0).any()
    # taking the key is necessary: the turns that took it beat their alternatives on average
    assert complete[complete.action == "take key"].a_replay.mean() > 0

    # signals and the audit ran on it
    credit = pd.read_parquet(run / "signals" / "credit.parquet")
    assert {"confidence", "grpo"} <= set(credit.subject)
    audit = json.loads((run / "audit" / "audit.json").read_text())
    assert {d["family"] for d in audit["decisions"]} >= {"confidence", "grpo"}
