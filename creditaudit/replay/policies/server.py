"""A policy served by an OpenAI-compatible inference server (``policy.source: openai``).

:class:`ServerPolicy` is the same policy as :class:`~creditaudit.replay.policies.hf.HFPolicy`
(the contract of :mod:`~creditaudit.replay.policies.base`) with the model's arithmetic done by a
server -- vLLM, SGLang, ``transformers serve`` -- that batches the requests of every worker. The
tokenizer and the chat template stay local (``policy.path``, pinned as for ``source: local``), so
prompts are token for token those of the in-process backend and actions are scored on the token
ids the in-process backend scores.

What the stages ask of a policy, and how it reaches the server:

* **token log-probabilities of given actions** (:meth:`ServerPolicy.score`, the candidates'
  scores, HCAPO's hindsight term, the confidence signal): ``POST /completions`` with the prompt and
  action as one token-id prompt and either ``echo: true, logprobs: 0, max_tokens: 0`` (the
  OpenAI completions protocol) or vLLM's ``prompt_logprobs: 0``. Which one the server offers is
  detected on the first request and recorded (:attr:`ServerPolicy.logprob_mode`, and
  ``policy_server.json`` in the run directory);
* **admissible and constrained decoding**: every candidate is scored as above and the draw is made
  here, with the row's own seed, exactly as the in-process backend draws it (so equal scores give
  equal actions);
* **free decoding**: ``POST /completions`` with the row's ``seed`` and ``temperature``; the action is
  the text up to the first line break, then scored as above for its temperature-1 log-probabilities.
  A server samples with its own generator, so a free-decoded action equals the in-process one at
  temperature 0 only.

Requests are sent ``batch_size`` rows at a time (one when the server takes no list of token-id
prompts), at most ``max_concurrency`` at once, each retried with exponential backoff honouring
``Retry-After`` by the ``openai`` client, and cached on disk by the hash of the request body, so a
resumed stage sends nothing twice. A missing or malformed log-probability is an
:class:`~creditaudit.errors.InputError` naming the request, never a value.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes, sha256_bytes
from creditaudit.replay.policies.base import DECODINGS, ActionScore, SampledAction, distinct_rows
from creditaudit.replay.policies.hf_candidates import CandidateDecoding
from creditaudit.replay.policies.prompts import PromptBuilder

__all__ = ["ServerPolicy", "LOGPROB_MODES", "SERVER_RECORD", "load_server_policy"]

LOGPROB_MODES = ("echo", "prompt_logprobs")
"""How a server returns the log-probabilities of prompt tokens: OpenAI completions' ``echo`` +
``logprobs`` with ``max_tokens: 0``, or vLLM's ``prompt_logprobs``."""

SERVER_RECORD = "policy_server.json"
"""What the run's policy server reported (served model, log-prob mode, prompt form), in the run
directory."""

_PIN_KEYS = ("id", "object", "owned_by", "root", "parent", "max_model_len")
"""Fields of ``GET /models`` that pin a served model (``created`` is the server's start time)."""

_TOLERANCE = 1e-6
"""A log-probability above this is malformed (log p <= 0, allowing float rounding)."""


def _openai():
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - the extra is installed with [all]
        raise InputError(
            "policy.source is 'openai' but the `openai` package is not installed; "
            "install creditaudit with `pip install 'creditaudit[server]'`"
        ) from exc
    return openai


class _DiskCache:
    """Responses by request hash, one JSON file each (atomic writes: several workers may share it)."""

    def __init__(self, root: Path | None):
        self.root = Path(root) if root is not None else None

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        if self.root is None:
            return None
        path = self._path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a torn file from a killed writer of an older version: ask again

    def put(self, key: str, value: Any) -> None:
        if self.root is None:
            return
        from creditaudit.artifacts import write_bytes_atomic

        write_bytes_atomic(self._path(key), json.dumps(value, sort_keys=True).encode("utf-8"))


class ServerPolicy(CandidateDecoding):
    """A policy whose model runs behind an OpenAI-compatible server.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The served model's tokenizer (loaded from ``policy.path``).
    endpoint : str
        Base URL of the API (``http://HOST:PORT/v1``).
    model : str
        The served model's name.
    api_key : str, optional
        Sent as a bearer token (never recorded); servers without authentication take any.
    history_length, max_action_tokens, use_chat_template, decoding
        As for :class:`~creditaudit.replay.policies.hf.HFPolicy`.
    batch_size : int, default 16
        Rows per request.
    max_concurrency : int, default 4
        Requests in flight at once.
    max_retries : int, default 5
    timeout_s : float, default 120
    cache_dir : Path, optional
        Responses cached by request hash (the run directory's ``policy_cache/``); none when None.
    served : dict, optional
        The pinned ``GET /models`` entry; a server reporting another is refused.
    api_key_env : str, optional
        The variable the key came from (for messages only).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        history_length: int = 2,
        max_action_tokens: int = 12,
        use_chat_template: bool | str = "auto",
        decoding: str = "free",
        batch_size: int = 16,
        max_concurrency: int = 4,
        max_retries: int = 5,
        timeout_s: float = 120.0,
        cache_dir: Path | None = None,
        served: dict[str, Any] | None = None,
        api_key_env: str | None = None,
        source: str | None = None,
        record_dir: Path | None = None,
        instruction: str | None = None,
        list_admissible: bool = True,
    ):
        openai = _openai()
        if decoding not in DECODINGS:
            raise ValueError(f"`decoding` must be one of {{'free', 'admissible', 'constrained'}}; got {decoding!r}")
        if max_action_tokens < 1 or batch_size < 1 or max_concurrency < 1:
            raise ValueError("`max_action_tokens`, `batch_size` and `max_concurrency` must be >= 1")
        self.decoding = decoding
        self.tokenizer = tokenizer
        self.endpoint = endpoint.rstrip("/")
        self.model_name = model
        self.source = source or f"{self.endpoint} ({model})"
        self.api_key_env = api_key_env
        self.max_action_tokens = int(max_action_tokens)
        self.batch_size = int(batch_size)
        self.max_concurrency = int(max_concurrency)
        self.prompt_builder = PromptBuilder(tokenizer, history_length=history_length, use_chat_template=use_chat_template,
                                            instruction=instruction, list_admissible=list_admissible)
        if tokenizer.eos_token_id is None:
            raise InputError(
                f"the tokenizer of policy {self.source!r} has no end-of-sequence token, so an action cannot "
                "end; set `eos_token` in its tokenizer_config.json"
            )
        self.eos_token_id = int(tokenizer.eos_token_id)
        self._client = openai.OpenAI(base_url=self.endpoint, api_key=api_key or "EMPTY",
                                     max_retries=int(max_retries), timeout=float(timeout_s))
        self._cache = _DiskCache(cache_dir)
        self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="creditaudit-policy")
        self._lock = threading.Lock()
        self._memo = None
        self._action_ids: dict[str, list[int]] = {}
        self._tree_attention = False  # candidates are scored through _score_cached (the server)
        self.logprob_mode: str | None = None
        self.prompt_form: str | None = None  # "tokens" (list of token-id prompts) or "text"
        self.stats = {"requests": 0, "rows": 0, "cache_hits": 0}
        self.record_dir = record_dir
        self.served = self._check_served(served or {})

    # ---------------------------------------------------------------- requests

    def _fail(self, what: str, exc: Exception) -> InputError:
        openai = _openai()
        if isinstance(exc, openai.APIConnectionError):
            return InputError(
                f"policy server {self.endpoint}: no answer to {what} ({exc}); start the server (e.g. "
                f"`vllm serve DIR --served-model-name {self.model_name}`) or fix policy.server.endpoint"
            )
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            where = f"the environment variable {self.api_key_env}" if self.api_key_env else "no variable (api_key_env is null)"
            return InputError(
                f"policy server {self.endpoint} refused the API key from {where} on {what} "
                f"({getattr(exc, 'status_code', '?')}); export the right key there or fix policy.server.api_key_env"
            )
        if isinstance(exc, openai.NotFoundError):
            return InputError(
                f"policy server {self.endpoint}: {what} answered 404 ({exc}); check policy.server.model "
                f"({self.model_name!r}) against `GET {self.endpoint}/models` and policy.server.endpoint (it ends in /v1)"
            )
        if isinstance(exc, openai.APIStatusError):
            detail = _short(getattr(getattr(exc, "response", None), "text", "") or str(exc), 160)
            return InputError(
                f"policy server {self.endpoint} refused {what} ({exc.status_code}: {detail}); the server does not "
                "take this request: see the server's log"
            )
        return InputError(f"policy server {self.endpoint}: {what} failed ({exc})")

    def _post(self, body: dict[str, Any], *, extra: dict[str, Any] | None = None, use_cache: bool = True) -> dict:
        """``POST /completions`` with ``body`` (+ non-OpenAI fields ``extra``); cached by request."""
        request = {**body, **(extra or {})}
        key = sha256_bytes(canonical_bytes(request))
        if use_cache:
            hit = self._cache.get(key)
            if hit is not None:
                with self._lock:
                    self.stats["cache_hits"] += 1
                return hit
        try:
            raw = self._client.completions.with_raw_response.create(**body, extra_body=extra or None)
            data = raw.http_response.json()
        except Exception as exc:
            raise self._fail(f"request {key[:12]} ({_describe(body)})", exc) from exc
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise InputError(f"policy server {self.endpoint}: request {key[:12]} ({_describe(body)}) got an answer "
                             "without `choices`; the server does not speak the completions API")
        prompt = body["prompt"]
        with self._lock:
            self.stats["requests"] += 1
            self.stats["rows"] += len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else 1
        if use_cache:
            self._cache.put(key, data)
        return data

    def _check_served(self, pinned: dict[str, Any]) -> dict[str, Any]:
        try:
            listed = self._client.models.with_raw_response.list().http_response.json()
        except Exception as exc:
            raise self._fail("GET /models", exc) from exc
        entries = [e for e in (listed.get("data") or []) if isinstance(e, dict)] if isinstance(listed, dict) else []
        found = next((e for e in entries if e.get("id") == self.model_name), None)
        if found is None:
            names = sorted(str(e.get("id")) for e in entries)
            raise InputError(
                f"policy server {self.endpoint} serves {names or 'no model'}, not policy.server.model "
                f"{self.model_name!r}; set policy.server.model to the served name (or start the server with it)"
            )
        pin = {k: found[k] for k in _PIN_KEYS if k in found and found[k] is not None}
        if pinned and pinned != pin:
            raise InputError(
                f"policy server {self.endpoint} reports {pin} for {self.model_name!r}, but the protocol pins "
                f"policy.server.served = {pinned}; serve the pinned model, or amend the protocol"
            )
        return pin

    def _map(self, fn, items: list) -> list:
        if len(items) <= 1:
            return [fn(x) for x in items]
        return list(self._pool.map(fn, items))

    # ---------------------------------------------------------------- encoding

    def encode_prompt(self, prompt: str) -> list[int]:
        """As :meth:`HFPolicy.encode_prompt <creditaudit.replay.policies.hf.HFPolicy.encode_prompt>`."""
        return list(self.tokenizer(prompt, add_special_tokens=self.prompt_builder.mode == "plain")["input_ids"])

    def encode_action(self, action: str) -> list[int]:
        """Token ids of an action string, tokenized on its own without special tokens."""
        return list(self.tokenizer(action, add_special_tokens=False)["input_ids"])

    # ---------------------------------------------------------------- log-probabilities

    def _detect(self, ids: list[int]) -> None:
        """Find how the server returns prompt log-probabilities (and whether it takes token ids)."""
        problems = []
        for mode in LOGPROB_MODES:
            try:
                self.logprob_mode, self.prompt_form = mode, "tokens"
                values = self._logprob_request([ids])[0]
                if len(values) == len(ids) - 1:
                    self._write_record()
                    return
                problems.append(f"{mode}: {len(values)} values for {len(ids) - 1} tokens")
            except InputError as exc:
                problems.append(f"{mode}: {exc}")
        self.logprob_mode = self.prompt_form = None
        raise InputError(
            f"policy server {self.endpoint} ({self.model_name!r}) returns no log-probabilities of prompt tokens: "
            "it offers neither `echo` + `logprobs` with `max_tokens: 0` on /v1/completions nor vLLM's "
            "`prompt_logprobs`, which scoring actions needs; serve the policy with vLLM (`vllm serve`), or use "
            "policy.source: local. Tried:\n  " + "\n  ".join(problems)
        )

    def _logprob_request(self, rows: list[list[int]]) -> list[list[float]]:
        """``log p(x_j | x_<j)`` for j >= 1 of every token-id row, one request."""
        body: dict[str, Any] = {"model": self.model_name, "prompt": rows, "temperature": 0.0}
        if self.logprob_mode == "echo":
            body.update(echo=True, logprobs=0, max_tokens=0)
            extra = None
        else:
            body.update(max_tokens=1)
            extra = {"prompt_logprobs": 0}
        data = self._post(body, extra=extra)
        key = sha256_bytes(canonical_bytes({**body, **(extra or {})}))[:12]
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        if len(choices) != len(rows):
            raise InputError(f"policy server {self.endpoint}: request {key} sent {len(rows)} prompts and got "
                             f"{len(choices)} choices")
        out = []
        for r, (row, choice) in enumerate(zip(rows, choices)):
            where = f"request {key}, prompt {r} ({len(row)} tokens)"
            if self.logprob_mode == "echo":
                lp = (choice.get("logprobs") or {}).get("token_logprobs") if isinstance(choice, dict) else None
                if not isinstance(lp, list) or len(lp) < len(row):
                    raise InputError(f"policy server {self.endpoint}: {where}: `choices[].logprobs.token_logprobs` is "
                                     f"missing or shorter than the prompt ({_short(lp)}); the server ignores `echo`/`logprobs`")
                values = lp[1 : len(row)]
            else:
                pl = choice.get("prompt_logprobs") if isinstance(choice, dict) else None
                if not isinstance(pl, list) or len(pl) < len(row):
                    raise InputError(f"policy server {self.endpoint}: {where}: `choices[].prompt_logprobs` is missing "
                                     f"or shorter than the prompt ({_short(pl)})")
                values = []
                for j in range(1, len(row)):
                    entry = pl[j] if isinstance(pl[j], dict) else {}
                    got = entry.get(str(row[j]), entry.get(row[j]))  # type: ignore[call-overload]
                    values.append(got.get("logprob") if isinstance(got, dict) else got)
            for j, v in enumerate(values, start=1):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v > _TOLERANCE:
                    raise InputError(f"policy server {self.endpoint}: {where}: token {j} (id {row[j]}) has log-prob "
                                     f"{v!r}, not a finite number <= 0")
            out.append([float(v) for v in values])
        return out

    def _target_logprobs(self, prompt_ids: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """``log p(target_j | prompt, target_<j)`` of every row (the rows batched and concurrent)."""
        rows = [p + t for p, t in zip(prompt_ids, targets)]
        if not rows:
            return []
        if self.logprob_mode is None:
            self._detect(rows[0])
        size = self.batch_size
        chunks = [rows[i : i + size] for i in range(0, len(rows), size)]
        values = [v for chunk in self._map(self._logprob_request, chunks) for v in chunk]
        return [v[len(p) - 1 :] for v, p in zip(values, prompt_ids)]

    def score(self, prompts: Sequence[str], actions: Sequence[str], *, include_stop: bool = False,
              batch_size: int | None = None) -> list[ActionScore]:
        """Token-level log-probabilities (temperature 1) of ``actions[i]`` after ``prompts[i]`` (see
        :meth:`HFPolicy.score <creditaudit.replay.policies.hf.HFPolicy.score>`; ``batch_size`` is
        ignored: rows per request is the protocol's ``policy.server.batch_size``; rows with the same
        prompt and action are sent once and share their numbers)."""
        if len(prompts) != len(actions):
            raise ValueError(f"`prompts` and `actions` must have the same length; got {len(prompts)} and {len(actions)}")
        action_ids = []
        for i, a in enumerate(actions):
            ids = self.encode_action(a)
            if not ids:
                raise InputError(f"`actions[{i}]` ({a!r}) tokenizes to no tokens; an action must be a non-empty string")
            action_ids.append(ids)
        first, source = distinct_rows(prompts, actions)
        targets = [action_ids[i] + [self.eos_token_id] if include_stop else action_ids[i] for i in first]
        values = self._target_logprobs([self.encode_prompt(prompts[i]) for i in first], targets)
        out = []
        for i, v in zip(first, values):
            v = list(v)
            stop = v.pop() if include_stop else None
            out.append(ActionScore(tuple(action_ids[i]), tuple(v), stop))
        return [out[k] for k in source]

    def _score_cached(self, prompt_ids: list[list[int]], targets: list[list[list[int]]], size: int) -> list[list[list[float]]]:
        """Candidate scores for :meth:`score_candidates` (every (prompt, candidate) row to the server)."""
        flat_p = [p for p, ts in zip(prompt_ids, targets) for _ in ts]
        flat_t = [t for ts in targets for t in ts]
        values = iter(self._target_logprobs(flat_p, flat_t))
        return [[next(values) for _ in ts] for ts in targets]

    # ---------------------------------------------------------------- sampling

    def generate(self, prompts: Sequence[str], *, seeds: Sequence[int], temperature: float,
                 max_tokens: int | None = None) -> list[tuple[str, str]]:
        """The server's own draw for each row: ``(text, finish_reason)`` of ``POST /completions``
        with the row's ``seed`` and ``temperature`` (no log-probabilities asked)."""
        limit = self.max_action_tokens if max_tokens is None else int(max_tokens)

        def one(args):
            prompt, seed = args
            body: dict[str, Any] = {"model": self.model_name, "max_tokens": limit, "temperature": float(temperature),
                                    "seed": int(seed) % 2**63}
            extra = None
            if self.prompt_form == "tokens":
                body["prompt"] = [self.encode_prompt(prompt)]
            else:
                body["prompt"] = prompt
                # A text-only server is `transformers serve`, which samples only when the request's
                # generation config says so (else it decodes greedily whatever the temperature).
                extra = {"generation_config": json.dumps({"do_sample": temperature > 0})}
            data = self._post(body, extra=extra)
            choice = data["choices"][0] if data["choices"] else {}
            text = choice.get("text") if isinstance(choice, dict) else None
            if not isinstance(text, str):
                raise InputError(f"policy server {self.endpoint}: a draw ({_describe(body)}) got no `choices[0].text`")
            return text, str(choice.get("finish_reason"))

        items = list(zip(prompts, seeds))
        if items and self.prompt_form is None:
            self.prompt_form = "tokens"
            try:
                first = [one(items[0])]
            except InputError:
                # a server that takes text prompts only (``transformers serve``): it tokenizes them
                self.prompt_form = "text"
                first = [one(items[0])]
            self._write_record()
            return first + self._map(one, items[1:])
        return self._map(one, items)

    def sample(self, prompts: Sequence[str], *, seeds: Sequence[int], temperature: float,
               max_action_tokens: int | None = None, batch_size: int | None = None,
               candidates: Sequence[Sequence[str]] | None = None) -> list[SampledAction]:
        """One action per prompt (see :meth:`HFPolicy.sample <creditaudit.replay.policies.hf.HFPolicy.sample>`).

        Admissible and constrained decoding draw here, from the server's scores, exactly as the
        in-process backend does. Free decoding takes the server's draw (its own generator: equal
        to the in-process draw at temperature 0) up to the first line break, and scores it for the
        temperature-1 log-probabilities.
        """
        if self.decoding in ("admissible", "constrained") and candidates is not None:
            return self._sample_candidates(prompts, seeds, temperature, candidates, batch_size)
        if len(seeds) != len(prompts):
            raise ValueError(f"`seeds` must have one entry per prompt; got {len(seeds)} seeds for {len(prompts)} prompts")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0; got {temperature!r}")
        for s in seeds:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0 or s >= 2**64:
                raise ValueError(f"`seeds` must hold integers in [0, 2**64); got {s!r}")
        drawn = self.generate(prompts, seeds=seeds, temperature=temperature, max_tokens=max_action_tokens)
        rows = []
        for text, finish in drawn:
            if "\n" in text:
                rows.append((text.split("\n", 1)[0].strip(), "newline"))
            else:
                rows.append((text.strip(), "max_tokens" if finish == "length" else "eos"))
        scored_idx = [i for i, (a, _) in enumerate(rows) if a and self.encode_action(a)]
        scores = self.score([prompts[i] for i in scored_idx], [rows[i][0] for i in scored_idx], include_stop=True)
        by_row = dict(zip(scored_idx, scores))
        out = []
        for i, (action, reason) in enumerate(rows):
            sc = by_row.get(i)
            ids, lps = (sc.token_ids, sc.token_logprobs) if sc is not None else ((), ())
            stop = sc.stop_logprob if (sc is not None and reason == "eos") else None
            out.append(SampledAction(action, tuple(ids), tuple(lps), reason, stop, int(seeds[i])))
        return out

    def record(self) -> dict[str, Any]:
        """What the run records about the server (no key): endpoint, model, served pin, modes."""
        return {"endpoint": self.endpoint, "model": self.model_name, "served": self.served,
                "logprob_mode": self.logprob_mode, "prompt_form": self.prompt_form, "bit_reproducible": False}

    def _write_record(self) -> None:
        if self.record_dir is not None:
            path = Path(self.record_dir) / SERVER_RECORD
            path.write_text(json.dumps(self.record(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()


def _describe(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    n = len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else 1
    keys = ", ".join(f"{k}={body[k]!r}" for k in ("model", "max_tokens", "temperature", "seed", "echo") if k in body)
    return f"{n} prompt(s), {keys}"


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) < width else text[: width - 3] + "..."


def load_server_policy(directory: str | Path, server: Any, *, cache_dir: Path | None = None,
                       history_length: int = 2, max_action_tokens: int = 12, decoding: str = "free",
                       use_chat_template: bool | str = "auto", record_dir: Path | None = None,
                       instruction: str | None = None, list_admissible: bool = True) -> ServerPolicy:
    """The policy of ``policy.source: openai``: the tokenizer from ``directory``, the model behind
    ``server`` (a :class:`~creditaudit.protocol.schema.PolicyServer`).

    Raises
    ------
    InputError
        The key's variable is unset, the server does not answer, does not serve the model, or
        reports another model than the pinned one; the tokenizer cannot be loaded.
    """
    from creditaudit.protocol.inputs import require_dir
    from creditaudit.replay.policies.hf import load_tokenizer

    root = require_dir(directory)
    api_key = None
    if server.api_key_env:
        api_key = os.environ.get(server.api_key_env)
        if not api_key:
            raise InputError(
                f"policy.server.api_key_env names {server.api_key_env!r}, which is not set; "
                f"`export {server.api_key_env}=...` with the server's key (it is never recorded)"
            )
    try:
        tokenizer = load_tokenizer(root)
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(f"policy path {str(root)!r}: the tokenizer cannot be loaded ({exc}); the served model's "
                         "tokenizer files must be there") from exc
    policy = ServerPolicy(
        tokenizer, endpoint=server.endpoint, model=server.model, api_key=api_key, history_length=history_length,
        max_action_tokens=max_action_tokens, use_chat_template=use_chat_template, decoding=decoding,
        batch_size=server.batch_size, max_concurrency=server.max_concurrency, max_retries=server.max_retries,
        timeout_s=server.timeout_s, cache_dir=cache_dir, served=dict(server.served), api_key_env=server.api_key_env,
        source=str(root), record_dir=record_dir, instruction=instruction, list_admissible=list_admissible,
    )
    policy._write_record()
    return policy
