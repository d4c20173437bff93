"""The default policy's network: a randomly initialised tiny ``Qwen2ForCausalLM``.
"""

from __future__ import annotations

from typing import Any

from creditaudit.errors import InputError

__all__ = ["build_model"]

def build_model(vocab_size: int, tokenizer: Any, *, hidden_size: int, num_layers: int, num_heads: int, init_seed: int):
    """A randomly initialised tiny ``Qwen2ForCausalLM``.

    ``transformers`` initialises weights from torch's global generator; the global state is
    forked, seeded with ``init_seed`` (from the build's named stream ``policy/init``), and
    restored, so initialisation is reproducible and leaves the caller's global RNG untouched.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if hidden_size % num_heads:
        raise InputError(f"`hidden_size` ({hidden_size}) must be a multiple of `num_heads` ({num_heads})")
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)  # fenced: model init draws from the global generator
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
