"""Policies: the contract (:mod:`~.base`), prompt text (:mod:`~.prompts`), any local Hugging Face
causal LM as a policy (:mod:`~.hf`, with candidate scoring and drawing in :mod:`~.hf_candidates`),
the same policy served by an OpenAI-compatible server (:mod:`~.server`),
and the embedded default policy's recipe (:mod:`creditaudit.replay.policies.default`)."""

from creditaudit.replay.policies.base import (
    DECODINGS,
    ActionPolicy,
    ActionScore,
    SampledAction,
    Turn,
    candidate_kwargs,
)
from creditaudit.replay.policies.hf import HFPolicy, load_policy, policy_file_hashes
from creditaudit.replay.policies.hf_candidates import takes_tree_mask
from creditaudit.replay.policies.prompts import PROMPT_FORMAT_VERSION, PromptBuilder, format_hindsight
from creditaudit.replay.policies.server import ServerPolicy, load_server_policy

__all__ = [
    "DECODINGS",
    "PROMPT_FORMAT_VERSION",
    "Turn",
    "PromptBuilder",
    "SampledAction",
    "ActionScore",
    "ActionPolicy",
    "HFPolicy",
    "ServerPolicy",
    "candidate_kwargs",
    "format_hindsight",
    "load_policy",
    "load_server_policy",
    "policy_file_hashes",
    "takes_tree_mask",
]
