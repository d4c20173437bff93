"""Policy interface over Hugging Face ``transformers`` causal language models.

Any directory that ``AutoModelForCausalLM.from_pretrained`` loads is a policy: Qwen2.5 or
Llama 3.1 on a GPU, the embedded default policy (:mod:`creditaudit.replay.policies.default`) on a
CPU. Nothing is ever downloaded: paths are local directories, loaded with
``local_files_only=True``.

The interface has three parts.

* :class:`~creditaudit.replay.policies.prompts.PromptBuilder` turns a decision point (task goal,
  the last ``history_length`` (observation, action) turns, the current observation, the admissible
  commands, and optionally a hindsight outcome for HCAPO) into prompt text, through the
  tokenizer's chat template when it has one and a plain template otherwise.
* :meth:`HFPolicy.sample` draws one action per prompt at a temperature. Every row has its own seed
  and its own ``torch.Generator`` (Gumbel-max sampling), so a row's action depends only on its
  prompt, its seed and the model -- never on what else is in the batch.
* :meth:`HFPolicy.score` returns the token-level log-probability of a given action string after a
  given prompt (per token, sum, mean), batched.

Scoring every admissible command after a prompt at once, and drawing among them (``decoding:
admissible`` or ``constrained``), are the methods :class:`HFPolicy` inherits from
:class:`~creditaudit.replay.policies.hf_candidates.CandidateDecoding`.

Log-probabilities are always those of the policy itself (temperature 1): sampling at temperature
``T`` changes which action is drawn, not the log-probabilities reported for it.

:func:`policy_file_hashes` hashes a model directory the way the protocol pins a policy.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.inputs import TOKENIZER_NAMES, policy_pins, require_dir
from creditaudit.replay.policies.base import DECODINGS, ActionScore, SampledAction, distinct_rows
from creditaudit.replay.policies.hf_candidates import CandidateDecoding, takes_tree_mask
from creditaudit.replay.policies.prompts import PromptBuilder

__all__ = ["HFPolicy", "load_policy", "policy_file_hashes"]

# What a model directory is for the protocol is defined once, beside the protocol's pins.
policy_file_hashes = policy_pins


_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def _torch():
    import torch

    return torch


class HFPolicy(CandidateDecoding):
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
    instruction : str, optional
        The prompt's first line, the environment's (``PromptText.instruction`` of the protocol's
        environment plugin); see :class:`~creditaudit.replay.policies.prompts.PromptBuilder`.

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
        instruction: str | None = None,
        list_admissible: bool = True,
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
        self.prompt_builder = PromptBuilder(tokenizer, history_length=history_length, use_chat_template=use_chat_template,
                                            instruction=instruction, list_admissible=list_admissible)
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
        instruction: str | None = None,
        list_admissible: bool = True,
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

        root = require_dir(path)
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
        if not any((root / name).is_file() for name in TOKENIZER_NAMES):
            raise InputError(
                f"policy path {str(root)!r} holds no tokenizer file (tokenizer.json, tokenizer_config.json ...), "
                "so the tokenizer cannot be loaded; save it beside the model with `tokenizer.save_pretrained(path)`"
            )
        try:
            tokenizer = load_tokenizer(root)
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
            instruction=instruction,
            list_admissible=list_admissible,
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
            Rows per forward pass (default: the policy's); results depend on it only in float
            rounding (about 1e-7).

        Returns
        -------
        list of ActionScore
            One per row, in input order. Rows with the same prompt and action are scored once
            and share their numbers (:func:`~creditaudit.replay.policies.base.distinct_rows`).

        Notes
        -----
        ``log pi(y_j | x, y_<j) = log_softmax(logits(x, y_<j))[y_j]``; HCAPO's hindsight term is
        ``exp(mean_j log pi(y_j | ...) / T)`` of the hindsight prompt's score.
        """
        torch = self._torch
        if len(prompts) != len(actions):
            raise ValueError(f"`prompts` and `actions` must have the same length; got {len(prompts)} and {len(actions)}")
        action_ids = []
        for i, a in enumerate(actions):
            ids = self.encode_action(a)
            if not ids:
                raise InputError(f"`actions[{i}]` ({a!r}) tokenizes to no tokens; an action must be a non-empty string")
            action_ids.append(ids)
        first, source = distinct_rows(prompts, actions)
        prompt_ids = {i: self.encode_prompt(prompts[i]) for i in first}
        targets = {i: action_ids[i] + [self.eos_token_id] if include_stop else action_ids[i] for i in first}
        order = sorted(first, key=lambda i: len(prompt_ids[i]) + len(targets[i]))
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
        return [results[first[k]] for k in source]  # type: ignore[misc]

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


def load_tokenizer(root: Path) -> Any:
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
