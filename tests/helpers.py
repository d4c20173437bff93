"""Test helpers shared across test packages (importable: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import yaml

__all__ = ["SIGNALS", "CONTROLS", "train_planted_policy", "make_run"]


def train_planted_policy(directory: Path, *, hidden_size: int = 32, num_layers: int = 1, num_heads: int = 2) -> None:
    """A tiny real Qwen2 policy behaviour-cloned on uniformly random doors of the planted environment.

    It samples (nearly) uniformly among the admissible doors, which makes it close to the
    planted environment's reference policy while being a real ``transformers`` model loaded from
    disk like any other.
    """

    from creditaudit.replay.policies.default import (
        SPECIAL_TOKENS,
        BCExample,
        build_model,
        build_tokenizer,
        train_behaviour_cloning,
        words_from_texts,
    )
    from creditaudit.replay.envs.planted import PLANTED_PROMPT, PlantedEnv
    from creditaudit.replay.policies import PromptBuilder, Turn

    rng = np.random.default_rng(7)
    env = PlantedEnv(n_steps=4, horizon=8)
    # short prompts (a fast build), with the planted environment's own instruction, as collection writes them
    builder = PromptBuilder(None, history_length=0, instruction=PLANTED_PROMPT.instruction)
    texts, examples = [], []
    for task in env.make_tasks(30, rng=rng):
        obs = env.reset(task)
        text, admissible, history = obs.text, obs.admissible, []
        texts += [obs.goal, text, *admissible]
        for _ in range(8):
            action = admissible[int(rng.integers(len(admissible)))]
            examples.append(BCExample(builder.build(obs.goal, text, admissible, history), action))
            result = env.step(action)
            history.append(Turn(text, action))
            text, admissible = result.text, result.admissible
            texts += [text, *admissible]
            if result.done:
                break
    from creditaudit.replay.policies import format_hindsight
    from creditaudit.signals.families import judge as judge_module

    # the judge's prompt words and its choices "1", "0", "-1", so the same policy can judge
    texts += ["nothing happens .", "score of turn 0 : -1 0 1", judge_module.judge_instruction(PLANTED_PROMPT.setting),
              judge_module.HTTP_ANSWER,
              format_hindsight("x", True), format_hindsight("x", False),
              builder.build("g", "o", ["a"], [("o", "a")], hindsight="h")]
    vocabulary = list(SPECIAL_TOKENS) + sorted(words_from_texts(texts) - set(SPECIAL_TOKENS))
    tokenizer = build_tokenizer(vocabulary)
    model = build_model(len(tokenizer), tokenizer, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                        init_seed=11)
    train_behaviour_cloning(model, tokenizer, examples, epochs=10, learning_rate=1e-2, rng=np.random.default_rng(3))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


SIGNALS = [
    {"name": "implicit", "family": "implicit"},
    {"name": "judge", "family": "judge", "args": {"backend": "local", "model": "policy"}},
    {"name": "judge-strict", "family": "judge", "args": {"backend": "local", "model": "policy", "max_negative": 0}},
    {"name": "confidence", "family": "confidence"},
    {"name": "grpo", "family": "grpo"},
    {"name": "rloo", "family": "rloo"},
]
CONTROLS = [
    {"name": "random", "kind": "random", "null_control": True},
    {"name": "uniform", "kind": "uniform", "null_control": True},
    {"name": "shuffle-implicit", "kind": "shuffle", "of": "implicit"},
    {"name": "shuffle-judge", "kind": "shuffle", "of": "judge"},
    {"name": "shuffle-judge-strict", "kind": "shuffle", "of": "judge-strict"},
    {"name": "shuffle-confidence", "kind": "shuffle", "of": "confidence"},
    {"name": "shuffle-grpo", "kind": "shuffle", "of": "grpo"},
    {"name": "shuffle-rloo", "kind": "shuffle", "of": "rloo"},
    {"name": "inverted-implicit", "kind": "inverted", "of": "implicit"},
    {"name": "inverted-judge", "kind": "inverted", "of": "judge"},
]


def make_run(root: Path, policy_dir: Path, *, signals=None, controls=None, n_tasks=2, group=2,
             collect_now: bool = True, router="template", sections: dict | None = None) -> tuple[Path, object]:
    """A frozen planted-environment run directory (collected unless ``collect_now`` is False;
    ``router``: the template's unless given, ``None`` for none; ``sections`` replaces other
    top-level protocol sections)."""
    from creditaudit.cli.protocol import pin_plugins_text, pin_policy_text
    from creditaudit.protocol.io import default_template_text, parse_protocol
    from creditaudit.protocol.lock import freeze
    from creditaudit.protocol.signing import generate_keypair, load_signer
    from creditaudit.replay.collect import collect

    run = root / "run"
    run.mkdir(parents=True)
    shutil.copytree(policy_dir, run / "policy")
    data = yaml.safe_load(default_template_text())
    data["environment"] = {"name": "planted", "source": "generated", "horizon": 8, "args": {"n_steps": 4}}
    data["collection"] = {"n_tasks": n_tasks, "group_size": group, "determinism_instances": 2}
    data["policy"].update(source="local", history_length=0, max_action_tokens=6)
    data["signals"] = signals if signals is not None else SIGNALS
    data["controls"] = controls if controls is not None else CONTROLS
    if router != "template":
        data["router"] = router
    data["statistics"]["bootstrap_iterations"] = 500
    data.update(sections or {})
    text = pin_policy_text(yaml.safe_dump(data, sort_keys=False), run / "policy")
    text = pin_plugins_text(text, parse_protocol(text))  # as `creditaudit protocol pin` does
    (run / "protocol.yaml").write_text(text)
    signer = load_signer(generate_keypair(run / "keys")[0])
    freeze(run / "protocol.yaml", signer)
    if collect_now:
        collect(run / "protocol.yaml", signer)
    return run, signer
