"""Environment plugins end to end: prefix replay against native snapshots on the same run, the
determinism certificate refusing a nondeterministic environment, a third-party environment found
through a real entry point, and an unknown environment name."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from creditaudit.errors import InputError
from creditaudit.protocol.io import default_template_text, protocol_from_dict

ROOT = Path(__file__).resolve().parents[2]


def _bytes(table: pa.Table) -> bytes:
    """The Parquet bytes of a table's data and schema (without the file's key-value stamps)."""
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(None), sink)
    return sink.getvalue()


def _replay_all(frozen, env):
    """Every trajectory of the run replayed on ``env`` exactly as a replay worker does."""
    from creditaudit.replay.collect import load_run_policy, read_trajectories
    from creditaudit.replay.compute import stored_numerics
    from creditaudit.replay.engine import ReplaySettings, replay_trajectory
    from creditaudit.replay.tasks import read_tasks, task_for

    policy = load_run_policy(frozen)
    tasks = {t.task_id: t for t in read_tasks(frozen)}
    settings = ReplaySettings.from_protocol(frozen.protocol)
    df = read_trajectories(frozen).select(
        ["trajectory_id", "task_id", "turn", "action", "state_signature", "observation", "mean_logprob"]).to_pandas()
    units = []
    for _, frame in df.groupby("trajectory_id", sort=False):
        frame = frame.sort_values("turn").reset_index(drop=True)
        with stored_numerics():
            units.append(replay_trajectory(env, policy, task=task_for(tasks[str(frame.task_id.iloc[0])],
                                                                       frozen.protocol, frozen.run_dir),
                                           trajectory=frame, protocol_id=frozen.id, settings=settings))
    turns = pa.concat_tables([u.turns for u in units]).combine_chunks()
    rollouts = pa.concat_tables([u.rollouts for u in units]).combine_chunks()
    return turns, rollouts, units


def test_prefix_replay_gives_the_native_tables_byte_for_byte(tmp_path, planted_policy_dir):
    from helpers import make_run

    from creditaudit import plugins
    from creditaudit.protocol.lock import require_frozen
    from creditaudit.replay.envs import PrefixReplayEnv
    from creditaudit.replay.stage import ROLLOUTS, TURNS, run_replay

    run, signer = make_run(tmp_path, planted_policy_dir)
    frozen = require_frozen(run / "protocol.yaml")
    assert frozen.protocol.environment.args["native_snapshots"] is True
    run_replay(run / "protocol.yaml", signer, executor="inline")  # the stage, on native snapshots
    plugin = plugins.get("environment", "planted")
    native = plugin.create(frozen.protocol.environment.args, horizon=frozen.protocol.environment.horizon).make()
    prefix = plugin.create({**frozen.protocol.environment.args, "native_snapshots": False},
                           horizon=frozen.protocol.environment.horizon).make()
    assert isinstance(prefix, PrefixReplayEnv) and not isinstance(native, PrefixReplayEnv)
    n_turns, n_rolls, _ = _replay_all(frozen, native)
    p_turns, p_rolls, units = _replay_all(frozen, prefix)
    # the helper replays as the stage does (a Parquet round trip renames list items: compare values)
    assert n_turns.to_pylist() == pq.read_table(run / TURNS).to_pylist()
    assert n_rolls.to_pylist() == pq.read_table(run / ROLLOUTS).to_pylist()
    assert _bytes(p_turns) == _bytes(n_turns)
    assert _bytes(p_rolls) == _bytes(n_rolls)
    # ... and it really restored by resetting and replaying prefixes, with no divergence
    assert prefix.counters["restores"] > 0 and prefix.counters["replayed_steps"] > 0
    assert prefix.divergences == 0 and sum(u.counters["divergences"] for u in units) == 0
    assert p_rolls.column("restore_ok").to_pylist().count(False) == 0


_TOY = '''
from creditaudit.replay.envs import Capabilities, EnvironmentPlugin, Observation, PromptText, StepResult, Task

BUTTONS = tuple(f"press button {i}" for i in range(1, 6))


class Buttons:
    """Press the task's secret button within the horizon: deterministic, reset/step only."""

    name = "buttons"
    instances = 0

    def __init__(self, flaky=False):
        Buttons.instances += 1
        self.serial, self.flaky = Buttons.instances, flaky

    def make_tasks(self, n, *, rng):
        return [Task(task_id=f"buttons-{int(s)}", task_type="buttons", source="buttons",
                     params={"secret": int(s) % 5 + 1}) for s in rng.integers(0, 2**31, size=n)]

    def reset(self, task):
        self.secret, self.steps = task.params["secret"], 0
        return Observation(goal="press the secret button", text="five buttons on a wall", admissible=BUTTONS)

    def step(self, action):
        self.steps += 1
        won = action == f"press button {self.secret}"
        text = "a bell rings" if won else "nothing happens"
        if self.flaky:  # from the first step (the check's random commands may win at once)
            text += f" (instance {self.serial})"  # what the agent sees depends on the instance
        return StepResult(text=text, admissible=() if won else BUTTONS, done=won, won=won)

    def close(self):
        pass


def buttons_environment(horizon: int = 6, flaky: bool = False) -> EnvironmentPlugin:
    return EnvironmentPlugin(
        name="buttons", horizon=horizon, factory=lambda: Buttons(flaky=flaky),
        capabilities=Capabilities(native_snapshot=False, admissible=True, state_signature=False,
                                  generates_tasks=True),
        prompt=PromptText(setting="a room of buttons", commands="Commands look like: press button 3."))
'''


@pytest.fixture()
def toy_distribution(tmp_path) -> Path:
    """A throwaway distribution publishing ``buttons`` under creditaudit.environments (a real dist-info)."""
    site = tmp_path / "site"
    (site / "toy_buttons").mkdir(parents=True)
    (site / "toy_buttons" / "__init__.py").write_text(_TOY)
    info = site / "toy_buttons-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-buttons\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[creditaudit.environments]\nbuttons = toy_buttons:buttons_environment\n")
    return site


_SCRIPT = '''
import sys, yaml
from pathlib import Path
sys.path.insert(0, {tests!r})
from helpers import make_run
from creditaudit.errors import CreditAuditError
from creditaudit.replay.collect import collect
from creditaudit.replay.stage import run_replay

run, signer = make_run(Path({root!r}), Path({policy!r}), collect_now=False,
                       sections={{"environment": {{"name": "buttons", "horizon": 6, "args": {{"flaky": {flaky}}}}}}})
try:
    summary = collect(run / "protocol.yaml", signer)
    replay = run_replay(run / "protocol.yaml", signer, executor="inline")
except CreditAuditError as exc:
    print("REFUSED", type(exc).__name__, exc.exit_code, exc)
    print("COLLECTED", (run / "collect" / "shards").exists() or (run / "collect" / "trajectories.parquet").exists())
else:
    print("OK", summary.n_trajectories, replay.n_rollouts, replay.divergences, replay.restore_failures)
    import pyarrow.parquet as pq
    print("PROMPT", pq.read_table(run / "collect" / "trajectories.parquet").column("prompt")[0].as_py().splitlines()[0])
'''


def _run_with_toy(tmp_path, toy_distribution, policy_dir, *, flaky: bool) -> str:
    script = _SCRIPT.format(tests=str(ROOT / "tests"), root=str(tmp_path / "work"), policy=str(policy_dir),
                            flaky=flaky)
    (tmp_path / "work").mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(toy_distribution), str(ROOT)]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_third_party_environment_from_an_entry_point_collects_and_replays(tmp_path, toy_distribution,
                                                                          planted_policy_dir):
    stdout = _run_with_toy(tmp_path, toy_distribution, planted_policy_dir, flaky=False)
    ok = [line for line in stdout.splitlines() if line.startswith("OK")]
    assert ok, stdout
    _, n_traj, n_rollouts, divergences, restore_failures = ok[0].split()
    assert int(n_traj) == 4 and int(n_rollouts) > 0 and int(divergences) == 0 and int(restore_failures) == 0
    # the policy's prompt carries the environment's own words, not ALFWorld's
    assert ("PROMPT You are an agent in a room of buttons. Reply with exactly one admissible action. Commands look "
            "like: press button 3.") in stdout


def test_nondeterministic_environment_is_refused_before_collection(tmp_path, toy_distribution, planted_policy_dir):
    stdout = _run_with_toy(tmp_path, toy_distribution, planted_policy_dir, flaky=True)
    assert "REFUSED NondeterminismError 1" in stdout, stdout
    assert "at step 1" in stdout and "'buttons'" in stdout
    assert "COLLECTED False" in stdout  # no rollout was written


def test_unknown_environment_exits_2_naming_the_installed_ones(tmp_path):
    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "webshop", "args": {}}
    with pytest.raises(InputError, match=r"unknown environment 'webshop'; installed: alfworld, planted") as info:
        protocol_from_dict(data)
    assert info.value.exit_code == 2
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    out = subprocess.run([sys.executable, "-m", "creditaudit", "protocol", "id", str(path)], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 2 and "unknown environment 'webshop'" in out.stdout + out.stderr


def test_environment_args_are_bound_and_params_is_refused():
    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "planted", "args": {"n_steps": 4, "colour": "red"}}
    with pytest.raises(InputError, match=r"environment 'planted': args .*`colour`: Extra inputs"):
        protocol_from_dict(data)
    data["environment"] = {"name": "planted", "args": {"n_actions": 1}}
    with pytest.raises(InputError, match="`n_actions` must be an integer"):
        protocol_from_dict(data)
    data["environment"] = {"name": "planted", "params": {"n_steps": 4}}
    with pytest.raises(InputError, match="`params` was renamed `args`"):
        protocol_from_dict(data)
    data["environment"] = {"name": "planted", "args": {"n_steps": 4}}
    protocol = protocol_from_dict(data)
    assert protocol.environment.args["n_steps"] == 4 and protocol.environment.args["slip"] == 0.0
    assert ("environment", "planted") in protocol.plugins_used()


# Template hashes of every prompt ALFWorld runs carried before the environment supplied its words;
# the alfworld plugin's text must keep them (runs and their recorded prompt hashes stay valid).
# judge_local changed once since, on purpose: the local judge's per-turn cue restates the turn's
# action and what followed (judge recipe v2; it was "score of turn {turn}:" alone).
ALFWORLD_PROMPT_HASHES = {
    "policy": "d3799dcce1bb9cedc43623c308b129ab5c55c7663164857577b9d09b333fdd5f",
    "judge_local": "a0d21d22e0fa1bad3ae38e61bcfd1afddc3e1d5a848692645b4fce6b8c6093e6",
    "judge_http": "480a4a6ac132918883e5f4e2dc61644d3d7cd23764eb6edf1037b7cbe21f00b5",
    "prover": "685ebd5ea9069558fe7e691ce5bbf6e6a21972cf7d11575736a134819bb304a3",
}


def test_prompt_text_comes_from_the_environment():
    from creditaudit import plugins
    from creditaudit.replay.policies import PromptBuilder
    from creditaudit.signals.families import judge, prover_proposers

    alfworld = plugins.get("environment", "alfworld").create({}, horizon=5).prompt
    planted = plugins.get("environment", "planted").create({}, horizon=5).prompt
    hashes = {
        "policy": PromptBuilder(None, history_length=2, instruction=alfworld.instruction).template_hash,
        "judge_local": judge._template_hash("local", alfworld.setting),
        "judge_http": judge._template_hash("http", alfworld.setting),
        "prover": prover_proposers._judge_template_hash(alfworld.setting),
    }
    assert hashes == ALFWORLD_PROMPT_HASHES
    assert alfworld.instruction == ("You are an agent in a household text game. Reply with exactly one admissible "
                                    "action.")
    assert planted.instruction == alfworld.instruction  # the words every planted run carried (see PLANTED_PROMPT)
    text = PromptBuilder(None, instruction="You are an agent in a maze.").build("g", "o", ["open the red door"])
    assert text.startswith("You are an agent in a maze.\n") and "household" not in text
    assert judge.judge_instruction("a maze of doors").startswith("You are judging the decisions of an agent in a maze")
    # nothing about ALFWorld is written into the policy's or the judges' prompt code
    for module in ("creditaudit/replay/policies/prompts.py", "creditaudit/signals/families/judge.py",
                   "creditaudit/signals/families/judge_http.py", "creditaudit/signals/families/prover.py",
                   "creditaudit/signals/families/prover_proposers.py"):
        assert "household" not in (ROOT / module).read_text(), module


def test_a_factory_must_return_an_environment_plugin_and_take_the_horizon(tmp_path):
    site = tmp_path / "site"
    (site / "toy_bad").mkdir(parents=True)
    (site / "toy_bad" / "__init__.py").write_text(
        "def no_horizon(size: int = 1):\n    return None\n\ndef not_a_plugin(horizon: int = 5):\n    return 'env'\n")
    info = site / "toy_bad-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-bad\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[creditaudit.environments]\nnohorizon = toy_bad:no_horizon\nnotplugin = toy_bad:not_a_plugin\n")
    script = textwrap.dedent('''
        import yaml
        from creditaudit.errors import InputError
        from creditaudit.protocol.io import default_template_text, protocol_from_dict
        for name in ("nohorizon", "notplugin"):
            data = yaml.safe_load(default_template_text())
            data["environment"] = {"name": name}
            try:
                protocol_from_dict(data)
            except InputError as exc:
                print(name, "|", " ".join(str(exc).split()))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" | ", 1) for line in out.stdout.splitlines())
    assert "must take the parameter(s) horizon" in lines["nohorizon"]
    assert "returned a str, not a creditaudit.replay.envs.EnvironmentPlugin" in lines["notplugin"]
