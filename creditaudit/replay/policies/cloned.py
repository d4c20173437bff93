"""A tiny policy behaviour-cloned on an environment's expert: a policy for any environment that
offers one (ScienceWorld's gold paths), built on a CPU in a minute or two.

The default policy (:mod:`~creditaudit.replay.policies.default`) is a recipe for ALFWorld. For
another environment whose raw instances have ``expert_actions(task) -> list[str]``,
:func:`clone_expert_policy` plays the expert's path verbatim on a task list and writes one
behaviour-cloning example per step whose action is admissible there (the prompt collection would
show, with the environment's own instruction, and the expert's action); it then trains the tiny
word-level ``Qwen2ForCausalLM`` of the default recipe. The result is an ordinary Hugging Face model
directory for ``policy.source: local``.

Everything random comes from ``seed`` (task draw, weight initialisation, batch order); training
runs on one thread, so the same call writes the same model files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["clone_expert_policy"]


def clone_expert_policy(plugin: Any, directory: str | Path, *, n_tasks: int, seed: int, history_length: int = 0,
                        list_admissible: bool = True, hidden_size: int = 48, num_layers: int = 2,
                        num_heads: int = 2, epochs: int = 12, learning_rate: float = 5e-3) -> dict[str, Any]:
    """Train a tiny policy on ``n_tasks`` expert episodes of ``plugin``'s environment; save it.

    Parameters
    ----------
    plugin : EnvironmentPlugin
        The environment (``plugin.make_tasks`` draws the tasks; its raw instance plays the expert).
    directory : path
        Where the model and tokenizer are saved.
    n_tasks : int
        Expert episodes played.
    seed : int
        Seeds the task draw, the initialisation and training.
    history_length, list_admissible
        The prompt's settings (match the protocol's ``policy.history_length`` and
        ``policy.list_admissible``).

    Returns
    -------
    dict
        ``examples``, ``episodes``, ``expert_won`` (episodes the expert's path won),
        ``not_admissible`` (expert actions executed but not taught: not in the admissible list
        where they came), ``vocabulary``.
    """
    import torch

    from creditaudit.replay.policies import PromptBuilder, Turn
    from creditaudit.replay.policies.default import (SPECIAL_TOKENS, BCExample, build_model, build_tokenizer,
                                                     train_behaviour_cloning, words_from_texts)

    rng = np.random.default_rng(seed)
    tasks = plugin.make_tasks(n_tasks, rng=rng)
    builder = PromptBuilder(None, history_length=history_length, instruction=plugin.prompt.instruction,
                            list_admissible=list_admissible)
    env = plugin.raw()
    texts: list[str] = [plugin.prompt.instruction]
    examples: list[BCExample] = []
    won = not_admissible = 0
    try:
        for task in tasks:
            obs = env.reset(task)
            text, admissible, history = obs.text, obs.admissible, []
            texts += [obs.goal, text, *admissible]
            for action in env.expert_actions(task):
                if action in admissible:
                    examples.append(BCExample(builder.build(obs.goal, text, admissible, history), action))
                else:
                    not_admissible += 1
                result = env.step(action)
                history.append(Turn(text, action))
                text, admissible = result.text, result.admissible
                texts += [text, *admissible, action]
                if result.done:
                    won += int(result.won)
                    break
    finally:
        env.close()
    vocabulary = list(SPECIAL_TOKENS) + sorted(words_from_texts(texts) - set(SPECIAL_TOKENS))
    tokenizer = build_tokenizer(vocabulary)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_model(len(tokenizer), tokenizer, hidden_size=hidden_size, num_layers=num_layers,
                            num_heads=num_heads, init_seed=int(rng.integers(2**31)))
        train_behaviour_cloning(model, tokenizer, examples, epochs=epochs, learning_rate=learning_rate,
                                rng=np.random.default_rng(int(rng.integers(2**31))), batch_size=8)
    finally:
        torch.set_num_threads(threads)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return {"examples": len(examples), "episodes": len(tasks), "expert_won": won, "not_admissible": not_admissible,
            "vocabulary": len(vocabulary)}
