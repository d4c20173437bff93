"""Policy interface over Hugging Face ``transformers`` causal language models.

Any directory that ``AutoModelForCausalLM.from_pretrained`` loads is a policy: Qwen2.5 or
Llama 3.1 on a GPU, the embedded default policy (:mod:`creditaudit.replay.default_policy`) on a
CPU. Nothing is ever downloaded: paths are local directories, loaded with
``local_files_only=True``.

The interface has three parts.

* :class:`PromptBuilder` turns a decision point (task goal, the last ``history_length``
  (observation, action) turns, the current observation, the admissible commands, and optionally a
  hindsight outcome for HCAPO) into prompt text, through the tokenizer's chat template when it has
  one and a plain template otherwise. Its :attr:`PromptBuilder.template_hash` pins the template.
* :meth:`HFPolicy.sample` draws one action per prompt at a temperature. Every row has its own seed
  and its own ``torch.Generator`` (Gumbel-max sampling), so a row's action depends only on its
  prompt, its seed and the model -- never on what else is in the batch.
* :meth:`HFPolicy.score` returns the token-level log-probability of a given action string after a
  given prompt (per token, sum, mean), batched.

Log-probabilities are always those of the policy itself (temperature 1): sampling at temperature
``T`` changes which action is drawn, not the log-probabilities reported for it.

:func:`policy_file_hashes` hashes a model directory the way the protocol pins a policy.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from creditaudit.errors import InputError
from creditaudit.protocol.inputs import _TOKENIZER_NAMES, _require_dir, chat_template_sha256, policy_pins
from creditaudit.protocol.canonical import canonical_hash

__all__ = [
    "PROMPT_FORMAT_VERSION",
    "Turn",
    "PromptBuilder",
    "SampledAction",
    "ActionScore",
    "ActionPolicy",
    "HFPolicy",
    "load_policy",
    "policy_file_hashes",
    "takes_tree_mask",
    "chat_template_sha256",
    "format_hindsight",
]

PROMPT_FORMAT_VERSION = 1
"""Version of the prompt format; part of every prompt template hash."""

_MEMO_LIMIT = 200_000
"""Entries kept by a policy's scoring memo and action-encoding memo before they start afresh."""

# -------------------------------------------------------------------------------- file hashes

# What a model directory is for the protocol is defined once, beside the protocol's pins.
policy_file_hashes = policy_pins


# -------------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Turn:
    """One past turn shown in the prompt: what the agent saw, and what it did next."""

    observation: str
    action: str


def format_hindsight(final_observation: str, won: bool) -> str:
    """The outcome text HCAPO injects for hindsight scoring.

    Examples
    --------
    >>> format_hindsight("You put the apple 1 in the fridge 1.", True)
    'the task was completed successfully. final observation: You put the apple 1 in the fridge 1.'
    """
    verdict = "the task was completed successfully" if won else "the task was not completed"
    return f"{verdict}. final observation: {' '.join(final_observation.split())}"


_INSTRUCTION = "You are an agent in a household text game. Reply with exactly one admissible action."

# The body of every prompt. Plain mode uses it as the whole prompt (followed by the action
# cue); chat mode sends it as the single user message (no system role: not every chat template
# has one) and lets the template add the assistant cue. Whitespace inside observations is
# collapsed so that a prompt's text does not depend on how an adapter wraps lines.
_BODY_TEMPLATE = (
    "{instruction}\n"
    "{history}"
    "admissible actions: {admissible}\n"
    "observation: {observation}\n"
    "task: {goal}\n"
    "{hindsight}"
)
_HISTORY_TEMPLATE = "observation: {observation}\naction: {action}\n"
_HINDSIGHT_TEMPLATE = "outcome: {hindsight}\n"
_ADMISSIBLE_SEPARATOR = " | "
_PLAIN_CUE = "action:"


def _squash(text: str) -> str:
    return " ".join(str(text).split())


DECODINGS = ("free", "admissible", "constrained")
"""How a policy turns its distribution into an action (the protocol's ``policy.decoding``)."""


def _draw_constrained(rows: Sequence[tuple[str, Any]], temperature: float, seed: int) -> tuple[str, Any]:
    """Token-by-token draw restricted to the prefixes of the candidates (see ``HFPolicy.sample``).

    ``rows`` are ``(candidate, ActionScore)`` with the candidates' token ids, token
    log-probabilities and end-token log-probability from one teacher-forced pass; the log-prob of
    a token after a prefix is the same in every candidate sharing that prefix. Candidates with
    identical token sequences (words a word-level tokenizer maps to the same unknown id) are
    split uniformly with the same generator.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    live = list(range(len(rows)))
    depth = 0
    while True:
        options: dict[int, float] = {}  # next token id (-1: end) -> log-prob
        for k in live:
            ids = rows[k][1].token_ids
            if depth < len(ids):
                options.setdefault(int(ids[depth]), float(rows[k][1].token_logprobs[depth]))
            else:
                options.setdefault(-1, float(rows[k][1].stop_logprob or 0.0))
        keys = sorted(options)
        logp = np.array([options[t] for t in keys])
        if len(keys) == 1:
            choice = keys[0]
        elif temperature == 0:
            choice = keys[int(np.argmax(logp))]
        else:
            choice = keys[int(np.argmax(logp / temperature + rng.gumbel(size=len(keys))))]
        if choice == -1:
            done = [k for k in live if len(rows[k][1].token_ids) == depth]
            k = done[int(rng.integers(len(done)))] if len(done) > 1 else done[0]
            return rows[k]
        live = [k for k in live if depth < len(rows[k][1].token_ids) and int(rows[k][1].token_ids[depth]) == choice]
        depth += 1


class PromptBuilder:
    """Builds the prompt of one decision point.

    Parameters
    ----------
    tokenizer : transformers tokenizer, optional
        Its ``chat_template`` is used when it has one (and ``use_chat_template`` allows it).
    history_length : int, default 2
        Past (observation, action) turns shown, most recent last; 0 shows none.
    use_chat_template : {"auto", True, False}, default "auto"
        ``"auto"`` uses the tokenizer's chat template when it has one; ``True`` requires one;
        ``False`` always uses the plain template.

    Notes
    -----
    The prompt is::

        <instruction>
        observation: <obs t-h>     # the last h turns
        action: <action t-h>
        ...
        admissible actions: <a1> | <a2> | ...
        observation: <current observation>
        task: <goal>
        outcome: <hindsight>       # only for hindsight scoring
        action:                    # plain mode; chat mode: the template's assistant cue

    What the next action depends on most (the current observation and the goal) comes last,
    next to the action: a small model attends to nearby text far more easily than to text
    hundreds of tokens back.

    The action itself follows the prompt directly (tokenized on its own), so the same builder
    serves sampling and scoring.
    """

    def __init__(self, tokenizer: Any = None, *, history_length: int = 2, use_chat_template: bool | str = "auto"):
        if not isinstance(history_length, int) or isinstance(history_length, bool) or history_length < 0:
            raise ValueError(f"`history_length` must be a non-negative integer; got {history_length!r}")
        if use_chat_template not in ("auto", True, False):
            raise ValueError(f"`use_chat_template` must be one of {{'auto', True, False}}; got {use_chat_template!r}")
        template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
        if use_chat_template is True and template is None:
            raise InputError(
                "`use_chat_template` is True but the tokenizer has no chat template; set it to 'auto' "
                "or False, or add a chat_template to the tokenizer"
            )
        self.tokenizer = tokenizer
        self.history_length = history_length
        self.chat_template = template if use_chat_template is not False else None
        self.mode = "chat" if self.chat_template is not None else "plain"

    @property
    def template_settings(self) -> dict[str, Any]:
        """Everything that determines prompt text besides the inputs (hashed by
        :attr:`template_hash`)."""
        return {
            "format_version": PROMPT_FORMAT_VERSION,
            "mode": self.mode,
            "instruction": _INSTRUCTION,
            "body": _BODY_TEMPLATE,
            "history": _HISTORY_TEMPLATE,
            "hindsight": _HINDSIGHT_TEMPLATE,
            "admissible_separator": _ADMISSIBLE_SEPARATOR,
            "plain_cue": _PLAIN_CUE if self.mode == "plain" else None,
            "chat_template_sha256": chat_template_sha256(self.chat_template),
            "history_length": self.history_length,
        }

    @property
    def template_hash(self) -> str:
        """``prompt_template_hash``: SHA-256 of the canonical JSON of :attr:`template_settings`."""
        return canonical_hash(self.template_settings)

    def body(
        self,
        goal: str,
        observation: str,
        admissible: Sequence[str],
        history: Sequence[Turn | tuple[str, str]] = (),
        hindsight: str | None = None,
    ) -> str:
        """The prompt body (the user message in chat mode)."""
        turns = [t if isinstance(t, Turn) else Turn(*t) for t in history]
        shown = turns[len(turns) - self.history_length :] if self.history_length else []
        history_text = "".join(
            _HISTORY_TEMPLATE.format(observation=_squash(t.observation), action=_squash(t.action)) for t in shown
        )
        return _BODY_TEMPLATE.format(
            instruction=_INSTRUCTION,
            goal=_squash(goal),
            history=history_text,
            observation=_squash(observation),
            admissible=_ADMISSIBLE_SEPARATOR.join(_squash(a) for a in admissible),
            hindsight="" if hindsight is None else _HINDSIGHT_TEMPLATE.format(hindsight=_squash(hindsight)),
        )

    def build(
        self,
        goal: str,
        observation: str,
        admissible: Sequence[str],
        history: Sequence[Turn | tuple[str, str]] = (),
        hindsight: str | None = None,
    ) -> str:
        """The full prompt text after which the action is generated or scored.

        Parameters
        ----------
        goal : str
            The task goal (``Observation.goal``).
        observation : str
            The current observation text.
        admissible : sequence of str
            The admissible commands, listed in the given order.
        history : sequence of Turn or (observation, action) pairs
            All past turns, oldest first; only the last ``history_length`` are shown.
        hindsight : str, optional
            An outcome text (see :func:`format_hindsight`) for HCAPO's hindsight scoring.
        """
        body = self.body(goal, observation, admissible, history, hindsight)
        if self.mode == "plain":
            return body + _PLAIN_CUE
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": body}], tokenize=False, add_generation_prompt=True
        )


# -------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SampledAction:
    """One sampled action.

    Attributes
    ----------
    text : str
        The action text: the decoded tokens up to the first end of line or end-of-sequence,
        stripped of surrounding whitespace.
    token_ids : tuple of int
        The generated action tokens (the stop token excluded).
    token_logprobs : tuple of float
        Natural-log probability of each action token under the policy at temperature 1 (the
        policy's own probabilities, whatever the sampling temperature).
    stop_reason : {"eos", "newline", "max_tokens", "candidate"}
        Why generation stopped (``"candidate"``: chosen among admissible commands).
    stop_logprob : float or None
        Log-probability (temperature 1) of the stop token; ``None`` for ``"max_tokens"``.
    seed : int
        The row's seed.
    """

    text: str
    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    stop_reason: str
    stop_logprob: float | None
    seed: int

    @property
    def sum_logprob(self) -> float:
        """Sum of the action tokens' log-probabilities."""
        return float(math.fsum(self.token_logprobs))

    @property
    def mean_logprob(self) -> float:
        """Mean of the action tokens' log-probabilities (NaN for an empty action)."""
        return self.sum_logprob / len(self.token_logprobs) if self.token_logprobs else float("nan")


@dataclass(frozen=True)
class ActionScore:
    """Token-level log-probability of a given action after a given prompt (temperature 1).

    Attributes
    ----------
    token_ids : tuple of int
        The action's tokens (the action tokenized on its own, no special tokens added).
    token_logprobs : tuple of float
        ``log pi(y_j | prompt, y_<j)`` per action token.
    stop_logprob : float or None
        Log-probability of the end-of-sequence token after the action, when requested.
    """

    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    stop_logprob: float | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def sum_logprob(self) -> float:
        """``sum_j log pi(y_j | ...)``."""
        return float(math.fsum(self.token_logprobs))

    @property
    def mean_logprob(self) -> float:
        """``mean_j log pi(y_j | ...)`` (HCAPO's and the confidence signal's per-token mean)."""
        return self.sum_logprob / len(self.token_logprobs)


@runtime_checkable
class ActionPolicy(Protocol):
    """What collection, replay and the signals need from a policy."""

    prompt_builder: PromptBuilder

    def sample(
        self, prompts: Sequence[str], *, seeds: Sequence[int], temperature: float, max_action_tokens: int | None = None
    ) -> list[SampledAction]: ...

    def score(self, prompts: Sequence[str], actions: Sequence[str], *, include_stop: bool = False) -> list[ActionScore]: ...


# -------------------------------------------------------------------------------- the policy

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def _torch():
    import torch

    return torch


def takes_tree_mask(config: Any) -> bool:
    """Whether a model (by its config) can score candidates under a custom tree attention mask.

    The mask is handed to the attention as a ready 4-D additive mask, which replaces the model's
    own: so the attention must accept one (``sdpa`` or ``eager``, not ``flash_attention_2``), and no
    layer may rely on a mask of its own kind (sliding-window layers: Mistral's ``sliding_window``,
    Qwen2's ``use_sliding_window``, Gemma's ``layer_types``). Other models score candidates from
    the prompt's key/value cache (:meth:`HFPolicy.score_candidates`).

    >>> from types import SimpleNamespace as C
    >>> takes_tree_mask(C(_attn_implementation="sdpa", sliding_window=None))
    True
    >>> takes_tree_mask(C(_attn_implementation="sdpa", sliding_window=4096))  # Mistral 7B v0.1
    False
    >>> takes_tree_mask(C(_attn_implementation="sdpa", sliding_window=131072, use_sliding_window=False))  # Qwen2.5
    True
    >>> takes_tree_mask(C(_attn_implementation="flash_attention_2"))
    False
    """
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return not any("sliding" in str(t) for t in (getattr(config, "layer_types", None) or ()))


class HFPolicy:
    """A ``transformers`` causal LM with its tokenizer, as a policy.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM (``AutoModelForCausalLM``); put in eval mode.
    tokenizer : transformers tokenizer
        Must define an end-of-sequence token.
    history_length : int, default 2
        Past turns shown in prompts (see :class:`PromptBuilder`).
    max_action_tokens : int, default 12
        Default cap on generated tokens per action.
    use_chat_template : {"auto", True, False}, default "auto"
    batch_size : int, default 32
        Rows per forward pass; results do not depend on it.
    source : str, optional
        The directory the policy was loaded from (for messages and records).
    decoding : {"free", "admissible", "constrained"}, default "free"
        ``free``: generate the action text; ``admissible``: draw it from the policy's own
        distribution restricted to the admissible commands (see :meth:`sample`).

    Notes
    -----
    Padding is on the left with an attention mask and explicit position ids (``cumsum(mask) - 1``),
    so a row's computation is the same as if it were alone; tests check batched against
    unbatched log-probabilities to 1e-5.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        history_length: int = 2,
        max_action_tokens: int = 12,
        use_chat_template: bool | str = "auto",
        batch_size: int = 32,
        source: str | None = None,
        decoding: str = "free",
    ):
        torch = _torch()
        if decoding not in DECODINGS:
            raise ValueError(f"`decoding` must be one of {{'free', 'admissible', 'constrained'}}; got {decoding!r}")
        self.decoding = decoding
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source = source or "<in-memory model>"
        if max_action_tokens < 1:
            raise ValueError(f"`max_action_tokens` must be >= 1; got {max_action_tokens!r}")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1; got {batch_size!r}")
        self.max_action_tokens = int(max_action_tokens)
        self.batch_size = int(batch_size)
        self.prompt_builder = PromptBuilder(tokenizer, history_length=history_length, use_chat_template=use_chat_template)
        if tokenizer.eos_token_id is None:
            raise InputError(
                f"the tokenizer of policy {self.source!r} has no end-of-sequence token, so an action cannot "
                "end; set `eos_token` in its tokenizer_config.json (or special_tokens_map.json)"
            )
        self.eos_token_id = int(tokenizer.eos_token_id)
        if not tokenizer("look", add_special_tokens=False)["input_ids"]:
            raise InputError(
                f"the tokenizer of policy {self.source!r} encodes the text 'look' to no tokens, so it cannot "
                "read prompts or actions; check tokenizer_class in its tokenizer_config.json"
            )
        # Padding values never reach a real token (attention mask + explicit positions), so any
        # id will do; the tokenizer's pad token when it has one, else the eos token.
        self.pad_token_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else self.eos_token_id
        self.stop_token_ids = self._stop_ids()
        self.newline_token_ids = self._newline_ids()
        self.device = next(model.parameters()).device
        self._vocab_size = int(model.get_output_embeddings().weight.shape[0])
        params = inspect.signature(model.forward).parameters
        # transformers >= 5 renamed ``past_key_values`` to ``cache`` (the old name is deprecated).
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        self._tree_attention = takes_tree_mask(model.config)
        self._memo: dict[tuple[str, str, bool], ActionScore] | None = None
        self._action_ids: dict[str, list[int]] = {}
        self._torch = torch

    # ---------------------------------------------------------------- loading

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "float32",
        history_length: int = 2,
        max_action_tokens: int = 12,
        use_chat_template: bool | str = "auto",
        batch_size: int = 32,
        decoding: str = "free",
    ) -> HFPolicy:
        """Load a policy from a local model directory (never from the hub).

        Parameters
        ----------
        path : str or Path
            A directory ``AutoModelForCausalLM.from_pretrained`` loads.
        device : {"auto", "cpu", "cuda"}, default "auto"
            ``"auto"`` is CUDA when available, else CPU.
        dtype : {"float32", "bfloat16", "float16"}, default "float32"

        Raises
        ------
        InputError
            The path does not exist, is not a model directory, is not a causal LM, its weights or
            tokenizer cannot be loaded, or its tokenizer lacks an end-of-sequence token.
        """
        torch = _torch()
        import transformers

        root = _require_dir(path)
        if dtype not in _DTYPES:
            raise ValueError(f"`dtype` must be one of {set(_DTYPES)}; got {dtype!r}")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"`device` must be one of {{'auto', 'cpu', 'cuda'}}; got {device!r}")
        if not (root / "config.json").is_file():
            raise InputError(
                f"policy path {str(root)!r} holds no config.json, so it is not a Hugging Face model "
                "directory; save a causal LM there with `model.save_pretrained(path)` and "
                "`tokenizer.save_pretrained(path)`, or build the default policy with `creditaudit policy build`"
            )
        try:
            config = transformers.AutoConfig.from_pretrained(root, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"policy path {str(root)!r}: config.json cannot be read as a model config ({exc})") from exc
        if type(config) not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
            raise InputError(
                f"policy path {str(root)!r} holds a {type(config).__name__} model, which is not a causal "
                "language model; point `policy.path` at a causal LM (AutoModelForCausalLM) directory"
            )
        resolved = "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
        try:
            # transformers 5 names the argument ``dtype``; 4.x calls it ``torch_dtype``.
            dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
            model = transformers.AutoModelForCausalLM.from_pretrained(
                root, local_files_only=True, **{dtype_kw: getattr(torch, dtype)}
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise InputError(
                f"policy path {str(root)!r}: the model cannot be loaded ({exc}); check that the weight files "
                "are complete and match config.json"
            ) from exc
        if not any((root / name).is_file() for name in _TOKENIZER_NAMES):
            raise InputError(
                f"policy path {str(root)!r} holds no tokenizer file (tokenizer.json, tokenizer_config.json ...), "
                "so the tokenizer cannot be loaded; save it beside the model with `tokenizer.save_pretrained(path)`"
            )
        try:
            tokenizer = _load_tokenizer(root)
        except (OSError, ValueError, TypeError) as exc:
            raise InputError(
                f"policy path {str(root)!r}: the tokenizer cannot be loaded ({exc}); save it beside the model "
                "with `tokenizer.save_pretrained(path)`"
            ) from exc
        return cls(
            model.to(resolved),
            tokenizer,
            history_length=history_length,
            max_action_tokens=max_action_tokens,
            use_chat_template=use_chat_template,
            batch_size=batch_size,
            source=str(root),
            decoding=decoding,
        )

    # ---------------------------------------------------------------- token sets

    def _stop_ids(self) -> frozenset[int]:
        ids = {self.eos_token_id}
        gen = getattr(self.model, "generation_config", None)
        extra = getattr(gen, "eos_token_id", None) if gen is not None else None
        if isinstance(extra, int):
            ids.add(extra)
        elif isinstance(extra, (list, tuple)):
            ids.update(int(i) for i in extra)
        return frozenset(ids)

    def _newline_ids(self) -> frozenset[int]:
        # Tokens whose text contains a line break end an action: computed once per policy.
        vocab = self.tokenizer.get_vocab()
        out = set()
        for token, idx in vocab.items():
            if "\n" in token or "Ċ" in token or "<0x0A>" in token:
                if "\n" in self.tokenizer.decode([idx]):
                    out.add(int(idx))
        return frozenset(out)

    # ---------------------------------------------------------------- encoding

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a prompt. Chat-template prompts already hold their special tokens; plain
        prompts get the tokenizer's usual ones (e.g. a BOS token)."""
        return list(self.tokenizer(prompt, add_special_tokens=self.prompt_builder.mode == "plain")["input_ids"])

    def encode_action(self, action: str) -> list[int]:
        """Token ids of an action string, tokenized on its own without special tokens."""
        return list(self.tokenizer(action, add_special_tokens=False)["input_ids"])

    def _left_pad(self, rows: Sequence[Sequence[int]]):
        torch = self._torch
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
                mask[i, width - len(r) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _forward(self, ids, mask, positions, *, cache=None, use_cache=False, keep: int = 0):
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "use_cache": use_cache}
        if cache is not None:
            kwargs[self._cache_kw] = cache
        if keep and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        out = self.model(**kwargs)
        logits = out.logits
        if keep and not self._has_logits_to_keep:
            logits = logits[:, -keep:]
        new_cache = getattr(out, "cache", None) if self._cache_kw == "cache" else getattr(out, "past_key_values", None)
        return logits, new_cache

    def _chunks(self, n: int, order: list[int], batch_size: int | None):
        size = batch_size or self.batch_size
        return [order[i : i + size] for i in range(0, n, size)]

    # ---------------------------------------------------------------- scoring

    def score(
        self,
        prompts: Sequence[str],
        actions: Sequence[str],
        *,
        include_stop: bool = False,
        batch_size: int | None = None,
    ) -> list[ActionScore]:
        """Token-level log-probabilities (temperature 1) of ``actions[i]`` after ``prompts[i]``.

        Parameters
        ----------
        prompts, actions : sequence of str
            Same length; each action is tokenized on its own and appended to its prompt's tokens.
        include_stop : bool, default False
            Also return the log-probability of the end-of-sequence token after the action.
        batch_size : int, optional
            Rows per forward pass (default: the policy's); results do not depend on it.

        Returns
        -------
        list of ActionScore
            One per row, in input order.

        Notes
        -----
        ``log pi(y_j | x, y_<j) = log_softmax(logits(x, y_<j))[y_j]``; HCAPO's hindsight term is
        ``exp(mean_j log pi(y_j | ...) / T)`` of the hindsight prompt's score.
        """
        torch = self._torch
        if len(prompts) != len(actions):
            raise ValueError(f"`prompts` and `actions` must have the same length; got {len(prompts)} and {len(actions)}")
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        action_ids = []
        for i, a in enumerate(actions):
            ids = self.encode_action(a)
            if not ids:
                raise InputError(f"`actions[{i}]` ({a!r}) tokenizes to no tokens; an action must be a non-empty string")
            action_ids.append(ids)
        targets = [a + [self.eos_token_id] if include_stop else a for a in action_ids]
        order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]) + len(targets[i]))
        results: list[ActionScore | None] = [None] * len(prompts)
        with torch.inference_mode():
            for chunk in self._chunks(len(order), order, batch_size):
                rows = [prompt_ids[i] + targets[i] for i in chunk]
                ids, mask, positions = self._left_pad(rows)
                # Left padding puts every row's targets at the end: keep only the logits that
                # predict them (the vocabulary can be large).
                keep = max(len(targets[i]) for i in chunk) + 1
                logits, _ = self._forward(ids, mask, positions, keep=keep)
                logp = torch.log_softmax(logits.float(), dim=-1)
                for b, i in enumerate(chunk):
                    n = len(targets[i])
                    # logits[:, -1] follows the last token; the target y_j (j-th of n) is predicted
                    # from position -(n - j) - 1.
                    pred = logp[b, keep - 1 - n : keep - 1]
                    tgt = torch.tensor(targets[i], device=pred.device)
                    values = pred.gather(-1, tgt[:, None])[:, 0].double().cpu().tolist()
                    stop = values.pop() if include_stop else None
                    results[i] = ActionScore(tuple(action_ids[i]), tuple(values), stop)
        return results  # type: ignore[return-value]

    def score_candidates(
        self,
        prompts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        include_stop: bool = True,
        batch_size: int | None = None,
    ) -> list[list[ActionScore]]:
        """Token log-probabilities of every candidate action after its prompt, encoding each
        prompt once.

        The same quantities as :meth:`score` on every (prompt, candidate) pair, computed the way
        tree-structured decoders (speculative decoding's token trees) do it: each prompt's
        candidates are merged into a prefix tree and the tree's tokens are appended to the prompt
        in one row, under an attention mask where every tree token sees the prompt and its own
        ancestors only, at position ``len(prompt) + depth``. With ``m`` candidates after a prompt
        of ``L`` tokens this costs ``L + n`` token positions in one forward pass, ``n`` being the
        tree's size (the candidates' distinct prefixes: ``go to cabinet 1`` and ``go to cabinet 2``
        share three), instead of ``m (L + k)``. Results agree with :meth:`score` to float
        rounding (the attention sums run in another order; about 1e-6).

        Models that cannot take the tree mask (:func:`takes_tree_mask`: ``flash_attention_2``,
        sliding-window layers) score the candidates from the prompt's key/value cache instead (one
        pass over the prompts, one over every candidate row).

        Inside :meth:`scoring_memo` a pair already scored is not scored again.

        Parameters
        ----------
        prompts : sequence of str
        candidates : sequence of sequence of str
            ``candidates[i]``: the actions scored after ``prompts[i]`` (each non-empty).
        include_stop : bool, default True
            Also return the end-of-sequence log-probability after each action.
        batch_size : int, optional
            Prompts per forward pass (default: the policy's); a prompt's candidates are never
            split.

        Returns
        -------
        list of list of ActionScore
            ``[i][j]`` scores ``candidates[i][j]`` after ``prompts[i]``.
        """
        if len(prompts) != len(candidates):
            raise ValueError(f"`candidates` must have one list per prompt; got {len(candidates)} for {len(prompts)}")
        action_ids: list[list[list[int]]] = []
        for i, cands in enumerate(candidates):
            row = []
            for j, a in enumerate(cands):
                ids = self._encode_candidate(a)
                if not ids:
                    raise InputError(f"`candidates[{i}][{j}]` ({a!r}) tokenizes to no tokens; an action must be a "
                                     "non-empty string")
                row.append(ids)
            action_ids.append(row)
        memo = self._memo
        # The pairs still to score, by prompt: (prompt index, [candidate indices]).
        todo: list[tuple[int, list[int]]] = []
        computed: dict[tuple[int, int], ActionScore] = {}
        for i, (prompt, cands) in enumerate(zip(prompts, candidates)):
            missing = [j for j, a in enumerate(cands) if memo is None or (prompt, a, include_stop) not in memo]
            if missing:
                todo.append((i, missing))
        if todo:
            prompt_ids = [self.encode_prompt(prompts[i]) for i, _ in todo]
            targets = [[action_ids[i][j] + ([self.eos_token_id] if include_stop else []) for j in js] for i, js in todo]
            size = batch_size or self.batch_size
            scorer = self._score_tree if self._tree_attention else self._score_cached
            values = scorer(prompt_ids, targets, size)
            for (i, js), rows in zip(todo, values):
                for j, v in zip(js, rows):
                    v = list(v)
                    stop = v.pop() if include_stop else None
                    computed[i, j] = ActionScore(tuple(action_ids[i][j]), tuple(v), stop)
            if memo is not None:
                if len(memo) + len(computed) > _MEMO_LIMIT:
                    memo.clear()
                for (i, j), sc in computed.items():
                    memo[prompts[i], candidates[i][j], include_stop] = sc
        results: list[list[ActionScore]] = []
        for i, (prompt, cands) in enumerate(zip(prompts, candidates)):
            row = []
            for j, a in enumerate(cands):
                sc = computed.get((i, j))
                row.append(sc if sc is not None else memo[prompt, a, include_stop])  # type: ignore[index]
            results.append(row)
        return results

    @contextmanager
    def scoring_memo(self) -> Iterator[None]:
        """Within the block, every (prompt, candidate) pair :meth:`score_candidates` has scored is
        remembered and not scored again (nested blocks share the outer block's memory).

        For work that meets the same decision points many times -- the replay's rollouts from one
        trajectory revisit the states (and so the prompts) of its other turns. Scores of a pair
        depend on nothing but the pair, so the memory changes only float rounding (a pair's
        numbers come from whichever pass scored it first), never a result that does not hinge on
        the seventh digit; its scope should be a unit of work that always runs in the same order.
        """
        previous = self._memo
        if previous is None:
            self._memo = {}
        try:
            yield
        finally:
            self._memo = previous

    def _encode_candidate(self, action: str) -> list[int]:
        ids = self._action_ids.get(action)
        if ids is None:
            if len(self._action_ids) >= _MEMO_LIMIT:
                self._action_ids.clear()
            ids = self._action_ids[action] = self.encode_action(action)
        return list(ids)

    def _score_tree(self, prompt_ids: list[list[int]], targets: list[list[list[int]]], size: int) -> list[list[list[float]]]:
        """Log-probabilities of ``targets[r][c]`` after ``prompt_ids[r]``: one pass per chunk of
        prompts, each row the prompt followed by its candidates' prefix tree (see
        :meth:`score_candidates`)."""
        import numpy as np

        torch = self._torch
        trees = []  # per prompt: (node tokens, node parents, node depths, per-target node rows)
        for tgts in targets:
            tokens: list[int] = []
            parents: list[int] = []
            depths: list[int] = []
            index: dict[tuple[int, int], int] = {}
            reads = []
            for t in tgts:
                # t[d] is predicted after the prompt (-1) or after the tree node holding t[d - 1].
                where, parent = [-1], -1
                for d in range(len(t) - 1):
                    k = index.get((parent, t[d]))
                    if k is None:
                        k = index[parent, t[d]] = len(tokens)
                        tokens.append(t[d])
                        parents.append(parent)
                        depths.append(d)
                    where.append(k)
                    parent = k
                reads.append(where)
            trees.append((tokens, parents, depths, reads))
        order = sorted(range(len(prompt_ids)), key=lambda r: len(prompt_ids[r]) + len(trees[r][0]))
        out: list[list[list[float]]] = [[] for _ in prompt_ids]
        dtype = next(self.model.parameters()).dtype
        with torch.inference_mode():
            for s in range(0, len(order), size):
                chunk = order[s : s + size]
                width = max(len(prompt_ids[r]) + len(trees[r][0]) for r in chunk)
                keep = max(len(trees[r][0]) for r in chunk) + 1
                ids = np.full((len(chunk), width), self.pad_token_id, dtype=np.int64)
                pos = np.zeros((len(chunk), width), dtype=np.int64)
                allow = np.zeros((len(chunk), width, width), dtype=bool)
                for b, r in enumerate(chunk):
                    tokens, parents, depths, _ = trees[r]
                    n_prompt, n_tree = len(prompt_ids[r]), len(tokens)
                    off = width - n_prompt - n_tree
                    base = off + n_prompt
                    ids[b, off:base] = prompt_ids[r]
                    ids[b, base:] = tokens
                    pos[b, off:base] = np.arange(n_prompt)
                    pos[b, base:] = n_prompt + np.asarray(depths, dtype=np.int64)
                    allow[b, off:base, off:base] = np.tri(n_prompt, dtype=bool)
                    allow[b, base:, off:base] = True
                    tree = allow[b, base:, base:]
                    for k, parent in enumerate(parents):
                        if parent >= 0:
                            tree[k] = tree[parent]
                        tree[k, k] = True
                    allow[b, np.arange(off), np.arange(off)] = True  # padding sees itself (no empty row)
                mask = torch.zeros(allow.shape, dtype=dtype)
                mask.masked_fill_(torch.from_numpy(~allow), torch.finfo(dtype).min)
                logits, _ = self._forward(torch.from_numpy(ids).to(self.device), mask[:, None].to(self.device),
                                          torch.from_numpy(pos).to(self.device), keep=keep)
                logp = torch.log_softmax(logits.float(), dim=-1)
                rows, cols, toks, spans = [], [], [], []
                for b, r in enumerate(chunk):
                    n_tree = len(trees[r][0])
                    for t, where in zip(targets[r], trees[r][3]):
                        spans.append((r, len(t)))
                        rows += [b] * len(t)
                        cols += [keep - 1 - n_tree if k < 0 else keep - n_tree + k for k in where]
                        toks += t
                flat = logp[torch.tensor(rows), torch.tensor(cols), torch.tensor(toks)].double().cpu().tolist()
                at = 0
                for r, n in spans:
                    out[r].append(flat[at : at + n])
                    at += n
        return out

    def _score_cached(self, prompt_ids: list[list[int]], targets: list[list[list[int]]], size: int) -> list[list[list[float]]]:
        """:meth:`_score_tree`'s numbers from the prompts' key/value cache: one pass over a chunk's
        prompts, then one over all its candidate rows (``Cache.reorder_cache`` gives each row its
        prompt's cache). For attention implementations that take no custom mask."""
        torch = self._torch
        order = sorted(range(len(prompt_ids)), key=lambda r: len(prompt_ids[r]))
        chunks = [order[s : s + size] for s in range(0, len(order), size)]
        out: list[list[list[float]]] = [[] for _ in prompt_ids]
        with torch.inference_mode():
            for chunk in chunks:
                ids, mask, positions = self._left_pad([prompt_ids[r] for r in chunk])
                first, cache = self._forward(ids, mask, positions, use_cache=True, keep=1)
                first_logp = torch.log_softmax(first[:, -1].float(), dim=-1)
                rows = [(b, r, c) for b, r in enumerate(chunk) for c in range(len(targets[r]))]
                width = max(len(targets[r][c]) for _, r, c in rows) - 1
                logp = None
                if width > 0:
                    index = torch.tensor([b for b, _, _ in rows], dtype=torch.long, device=ids.device)
                    feed = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
                    feed_mask = torch.zeros((len(rows), width), dtype=torch.long)
                    for q, (_, r, c) in enumerate(rows):
                        t = targets[r][c]
                        if len(t) > 1:
                            feed[q, : len(t) - 1] = torch.tensor(t[:-1], dtype=torch.long)
                            feed_mask[q, : len(t) - 1] = 1
                    cache.reorder_cache(index)
                    full_mask = torch.cat([mask.index_select(0, index), feed_mask.to(mask.device)], dim=1)
                    start = positions[:, -1:].index_select(0, index) + 1
                    pos = start + torch.arange(width, device=ids.device)[None, :]
                    logits, _ = self._forward(feed.to(ids.device), full_mask, pos, cache=cache)
                    logp = torch.log_softmax(logits.float(), dim=-1)
                for q, (b, r, c) in enumerate(rows):
                    t = targets[r][c]
                    values = [float(first_logp[b, t[0]])]
                    if len(t) > 1:
                        tgt = torch.tensor(t[1:], device=logp.device)
                        values += logp[q, : len(t) - 1].gather(-1, tgt[:, None])[:, 0].double().cpu().tolist()
                    out[r].append(values)
        return out

    # ---------------------------------------------------------------- sampling

    def sample(
        self,
        prompts: Sequence[str],
        *,
        seeds: Sequence[int],
        temperature: float,
        max_action_tokens: int | None = None,
        batch_size: int | None = None,
        candidates: Sequence[Sequence[str]] | None = None,
    ) -> list[SampledAction]:
        """Sample one action per prompt.

        Parameters
        ----------
        prompts : sequence of str
        seeds : sequence of int
            One non-negative seed per row (derive them from named streams, e.g.
            ``seed_int(pid, "collect/rollout/<task>/<g>/<t>")``). Row ``i``'s action depends only on
            ``prompts[i]``, ``seeds[i]``, the temperature and the model.
        temperature : float
            ``0`` is greedy decoding; otherwise tokens are drawn from ``softmax(logits / T)``.
        max_action_tokens : int, optional
            Cap on generated tokens (default: the policy's).
        batch_size : int, optional
            Rows per forward pass; results do not depend on it.
        candidates : sequence of sequence of str, optional
            The admissible commands of each row. Used only when the policy's ``decoding`` is
            ``"admissible"`` or ``"constrained"``: the action is then drawn from the policy's own
            distribution restricted to these commands (see Notes); ignored under ``"free"``
            decoding.

        Returns
        -------
        list of SampledAction
            In input order; log-probabilities are at temperature 1.

        Notes
        -----
        Gumbel-max: ``y = argmax_v (logits_v / T + g_v)``, ``g_v = -log(-log u_v)``, with ``u`` drawn
        from the row's own ``torch.Generator`` (CPU, seeded with ``seeds[i]``) one vocabulary-sized
        vector per generated token. Generation stops at an end-of-sequence token (the tokenizer's
        and the model's generation config's), at a token containing a line break, or after
        ``max_action_tokens`` tokens. Identical rows in different batches can differ only if the
        batched arithmetic moves a logit across an exact tie (float rounding of padded batches).

        Admissible decoding (``decoding="admissible"``), the candidate-ranking style of LM agents:
        each candidate command ``c`` gets its sequence log-probability
        ``s_c = sum_j log pi(c_j | prompt, c_<j) + log pi(<end> | prompt, c)`` and the row draws
        ``argmax_c (s_c / T + g_c)`` with Gumbel noise ``g`` from ``numpy.random.default_rng(seed)``
        (``T = 0``: the most probable command). The returned log-probabilities are the chosen
        command's own token log-probabilities at temperature 1.

        Constrained decoding (``decoding="constrained"``), token-level masking as in grammar- or
        trie-constrained generation: the action is generated token by token from
        ``softmax(logits / T)`` restricted, at each step, to the tokens that continue at least one
        candidate (and the end token where a candidate is complete). Unlike admissible decoding,
        mass the model puts on inadmissible completions of a prefix (``take`` + an object that is
        not there) is renormalised within the prefix instead of lost, so the choice of verb is
        the model's own. The log-probabilities come from the same single scoring pass; the draws
        are Gumbel-max per step from ``numpy.random.default_rng(seed)``.
        """
        if self.decoding in ("admissible", "constrained") and candidates is not None:
            return self._sample_candidates(prompts, seeds, temperature, candidates, batch_size)
        torch = self._torch
        if len(seeds) != len(prompts):
            raise ValueError(f"`seeds` must have one entry per prompt; got {len(seeds)} seeds for {len(prompts)} prompts")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0; got {temperature!r}")
        limit = self.max_action_tokens if max_action_tokens is None else int(max_action_tokens)
        if limit < 1:
            raise ValueError(f"`max_action_tokens` must be >= 1; got {max_action_tokens!r}")
        for s in seeds:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0 or s >= 2**64:
                raise ValueError(f"`seeds` must hold integers in [0, 2**64); got {s!r}")
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]))
        results: list[SampledAction | None] = [None] * len(prompts)
        with torch.inference_mode():
            for chunk in self._chunks(len(order), order, batch_size):
                out = self._sample_chunk([prompt_ids[i] for i in chunk], [seeds[i] for i in chunk], temperature, limit)
                for i, r in zip(chunk, out):
                    results[i] = r
        return results  # type: ignore[return-value]

    def _sample_candidates(self, prompts, seeds, temperature, candidates, batch_size) -> list[SampledAction]:
        import numpy as np

        if len(candidates) != len(prompts):
            raise ValueError(f"`candidates` must have one list per prompt; got {len(candidates)} for {len(prompts)}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0; got {temperature!r}")
        # Each distinct (prompt, candidate) pair is scored once, and each distinct prompt encoded
        # once: several draws from one state (the replay's search for alternatives, a group's
        # rollouts at their shared first turn) share them.
        prompt_index: dict[str, int] = {}
        cands_of: list[dict[str, int]] = []
        rows_of: list[list[tuple[str, int, int]]] = []
        for i, (prompt, cands) in enumerate(zip(prompts, candidates)):
            if not cands:
                raise ValueError(f"`candidates[{i}]` is empty: admissible decoding needs at least one command")
            k = prompt_index.setdefault(prompt, len(prompt_index))
            if k == len(cands_of):
                cands_of.append({})
            rows_of.append([(c, k, cands_of[k].setdefault(c, len(cands_of[k]))) for c in cands])
        scores = self.score_candidates(list(prompt_index), [list(c) for c in cands_of], include_stop=True,
                                       batch_size=batch_size)
        per_row: list[list[tuple[str, ActionScore]]] = [[(c, scores[k][j]) for c, k, j in row] for row in rows_of]
        out = []
        for seed, rows in zip(seeds, per_row):
            if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0 or seed >= 2**64:
                raise ValueError(f"`seeds` must hold integers in [0, 2**64); got {seed!r}")
            if self.decoding == "constrained":
                action, sc = _draw_constrained(rows, temperature, seed)
                out.append(SampledAction(action, sc.token_ids, sc.token_logprobs, "candidate", sc.stop_logprob, int(seed)))
                continue
            total = np.array([sc.sum_logprob + (sc.stop_logprob or 0.0) for _, sc in rows])
            if temperature == 0:
                k = int(np.argmax(total))
            else:
                k = int(np.argmax(total / temperature + np.random.default_rng(seed).gumbel(size=len(rows))))
            action, sc = rows[k]
            out.append(SampledAction(action, sc.token_ids, sc.token_logprobs, "candidate", sc.stop_logprob, int(seed)))
        return out

    def _sample_chunk(self, rows, seeds, temperature, limit) -> list[SampledAction]:
        torch = self._torch
        n = len(rows)
        generators = []
        for s in seeds:
            g = torch.Generator(device="cpu")
            g.manual_seed(int(s))
            generators.append(g)
        ids, mask, positions = self._left_pad(rows)
        logits, cache = self._forward(ids, mask, positions, use_cache=True, keep=1)
        next_pos = positions[:, -1:] + 1
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        stop: list[tuple[str, float | None] | None] = [None] * n
        tiny = torch.finfo(torch.float32).tiny
        for step in range(limit):
            last = logits[:, -1].float()
            logp = torch.log_softmax(last, dim=-1).cpu()
            if temperature == 0:
                chosen = logp.argmax(-1)
            else:
                scaled = (last / temperature).cpu()
                noise = torch.empty_like(scaled)
                for b in range(n):
                    if stop[b] is None:
                        u = torch.rand(scaled.shape[-1], generator=generators[b], dtype=torch.float64)
                        noise[b] = (-torch.log(-torch.log(u.clamp(min=tiny, max=1.0 - 1e-16)))).float()
                chosen = (scaled + noise).argmax(-1)
            for b in range(n):
                if stop[b] is not None:
                    continue
                t = int(chosen[b])
                lp = float(logp[b, t])
                if t in self.stop_token_ids:
                    stop[b] = ("eos", lp)
                elif t in self.newline_token_ids:
                    stop[b] = ("newline", lp)
                    tokens[b].append(t)  # decoded below for any text before the break, then dropped
                else:
                    tokens[b].append(t)
                    logps[b].append(lp)
            if all(s is not None for s in stop) or step == limit - 1:
                break
            feed = torch.tensor(
                [(tokens[b][-1] if tokens[b] and stop[b] is None else self.pad_token_id) for b in range(n)],
                dtype=torch.long,
                device=self.device,
            )[:, None]
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            logits, cache = self._forward(feed, mask, next_pos, cache=cache, use_cache=True, keep=1)
            next_pos = next_pos + 1
        out = []
        for b in range(n):
            reason, stop_lp = stop[b] if stop[b] is not None else ("max_tokens", None)
            ids_b = tokens[b]
            if reason == "newline":
                text = self.tokenizer.decode(ids_b, skip_special_tokens=False).split("\n", 1)[0]
                ids_b = ids_b[:-1]
            else:
                text = self.tokenizer.decode(ids_b, skip_special_tokens=False)
            out.append(SampledAction(text.strip(), tuple(ids_b), tuple(logps[b]), reason, stop_lp, int(seeds[b])))
        return out


_GENERIC_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def _load_tokenizer(root: Path) -> Any:
    """The tokenizer of a model directory, as the directory declares it.

    ``AutoTokenizer`` in transformers 5 replaces the declared class by the model type's own for
    some model types (``qwen2`` among them), which rebuilds a byte-level BPE pipeline and ignores a
    word-level ``tokenizer.json``; a directory that declares the generic fast tokenizer is
    therefore loaded with that class directly. Every other directory goes through ``AutoTokenizer``.
    """
    import transformers

    declared = None
    config = root / "tokenizer_config.json"
    if config.is_file():
        try:
            declared = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
            raise ValueError(f"{config} is not a valid JSON object ({exc})") from exc
    if declared in _GENERIC_TOKENIZER_CLASSES and (root / "tokenizer.json").is_file():
        return transformers.PreTrainedTokenizerFast.from_pretrained(root, local_files_only=True)
    return transformers.AutoTokenizer.from_pretrained(root, local_files_only=True)


def load_policy(path: str | Path, **kwargs: Any) -> HFPolicy:
    """Load any local causal LM directory as a policy (see :meth:`HFPolicy.from_pretrained`)."""
    return HFPolicy.from_pretrained(path, **kwargs)
