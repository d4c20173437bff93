"""The ``http`` judge backend: any OpenAI-compatible chat-completions endpoint (the TARL judge
prompt, one request per trajectory, ``{"scores": [...]}`` asked for; see :mod:`.judge`).

Retries, abstention reasons and the answer cache are described on :class:`HttpJudge`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_hash, sha256_bytes
from creditaudit.signals.base import Trajectory
from creditaudit.signals.families.judge import (
    API_KEY_ENV,
    GENERIC_SETTING,
    HTTP_ANSWER,
    JudgeVerdict,
    MalformedAnswer,
    judge_prompt,
    parse_judge_answer,
)

__all__ = ["HttpJudge"]


class _RecordingTransport:
    """An ``httpx`` transport that keeps every answer the judge endpoint gave (its body, or what
    went wrong), retries included, so a verdict records all of them (``raw_responses``)."""

    def __init__(self, inner: Any, timeout_s: float):
        self.inner, self.timeout_s, self.records = inner, timeout_s, []

    def handle_request(self, request: Any) -> Any:
        import httpx

        try:
            response = self.inner.handle_request(request)
        except httpx.TimeoutException as exc:
            self.records.append(f"<timeout after {self.timeout_s} s: {exc.__class__.__name__}>")
            raise
        except httpx.TransportError as exc:
            self.records.append(f"<transport error: {exc.__class__.__name__}>")
            raise
        response.read()
        self.records.append(response.text)
        return response

    def close(self) -> None:
        self.inner.close()


@dataclass
class HttpJudge:
    """OpenAI-compatible chat-completions judge, one request per trajectory, through the ``openai``
    client (the policy's server backend uses the same one).

    The client retries connection errors, timeouts and HTTP 408/409/429/5xx up to ``max_retries``
    times with exponential backoff that honours ``Retry-After``; an answer that arrives but does
    not parse is asked again, up to ``max_retries`` more times. Every HTTP answer (retries
    included) is kept in the verdict. A parsed answer is cached under ``cache_dir`` by the SHA-256
    of its request, so a resumed signals stage sends no request twice (abstentions are not cached:
    a resumed stage asks again).

    Parameters
    ----------
    endpoint : str
        Base URL (``http://host:port`` or ``.../v1``).
    model : str
        The endpoint's model name.
    max_retries : int, default 3
    timeout_s : float, default 60.0
    max_negative : int, default 1
    backoff_s : float, default 1.0
        Seconds before the ``k``-th re-ask after a malformed answer: ``backoff_s * 2**(k-1)``.
    cache_dir : path, optional
        Where parsed answers are cached (none: no cache).
    max_concurrency : int, default 4
        Trajectories judged at once (:meth:`judge_all`).
    """

    endpoint: str
    model: str
    max_retries: int = 3
    timeout_s: float = 60.0
    max_negative: int = 1
    backoff_s: float = 1.0
    setting: str = GENERIC_SETTING
    cache_dir: Path | None = None
    max_concurrency: int = 4
    backend: str = field(default="http", init=False)

    @property
    def judge_id(self) -> str:
        return f"http:{self.model}@{self.endpoint.rstrip('/')}"

    @property
    def base_url(self) -> str:
        base = self.endpoint.rstrip("/")
        return base if base.endswith("/v1") else base + "/v1"

    @property
    def url(self) -> str:
        return self.base_url + "/chat/completions"

    def prompt(self, trajectory: Trajectory) -> str:
        n = len(trajectory)
        return (judge_prompt(trajectory, max_negative=self.max_negative, setting=self.setting) + "\n"
                + HTTP_ANSWER.format(last=n - 1, n=n))

    def _client(self) -> tuple[Any, _RecordingTransport]:
        try:
            import httpx
            import openai
        except ImportError:
            raise InputError("the http judge backend needs the openai client: pip install 'creditaudit[http]'") from None
        transport = _RecordingTransport(httpx.HTTPTransport(), self.timeout_s)
        client = openai.OpenAI(base_url=self.base_url, api_key=os.environ.get(API_KEY_ENV) or "none",
                               max_retries=self.max_retries, timeout=self.timeout_s,
                               http_client=httpx.Client(transport=transport, timeout=self.timeout_s))
        return client, transport

    def judge_all(self, trajectories: list[Trajectory]):
        """Verdicts of ``trajectories`` in order, up to :attr:`max_concurrency` requests at once."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, self.max_concurrency)) as pool:
            yield from pool.map(self.judge, trajectories)

    def judge(self, trajectory: Trajectory) -> JudgeVerdict:
        import openai

        prompt = self.prompt(trajectory)
        digest = sha256_bytes(prompt.encode("utf-8"))
        request = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0}
        digests = [digest] * len(trajectory)
        cached = self._cache_path(request)
        if cached is not None and cached.is_file():
            try:
                hit = json.loads(cached.read_text("utf-8"))
                return JudgeVerdict(list(hit["scores"]), None, "ok", int(hit["attempts"]), list(hit["raw"]), digests)
            except (OSError, ValueError, KeyError, TypeError):
                pass  # an unreadable entry is asked again and rewritten
        client, transport = self._client()
        reason, outcome = "judge_malformed", "no attempt"
        try:
            for ask in range(self.max_retries + 1):
                if ask and self.backoff_s:
                    time.sleep(self.backoff_s * 2 ** (ask - 1))
                try:
                    completion = client.chat.completions.create(**request)
                except openai.APITimeoutError:
                    reason, outcome = "judge_timeout", f"timeout after {self.timeout_s} s"
                    break
                except openai.APIConnectionError as exc:
                    reason, outcome = "judge_unreachable", f"transport error ({exc.__class__.__name__})"
                    break
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if status in (408, 409, 429) or status >= 500:  # the client's retries are spent
                        reason, outcome = "judge_http_error", f"HTTP {status}"
                        break
                    raise InputError(
                        f"judge endpoint {self.url} answered HTTP {status} for model {self.model!r}: "
                        f"{exc.response.text[:200]!r}; check the judge's `endpoint` and `model` (and "
                        f"${API_KEY_ENV} if it needs a key)"
                    ) from None
                try:
                    content = completion.choices[0].message.content
                    scores = parse_judge_answer(content, n_turns=len(trajectory), max_negative=self.max_negative)
                except MalformedAnswer as exc:
                    reason, outcome = "judge_malformed", f"malformed answer: {exc}"
                    continue
                except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                    reason, outcome = "judge_malformed", f"malformed response: {exc.__class__.__name__}"
                    continue
                raw = list(transport.records)
                if cached is not None:
                    from creditaudit.artifacts import write_bytes_atomic

                    cached.parent.mkdir(parents=True, exist_ok=True)
                    write_bytes_atomic(cached, json.dumps({"scores": scores, "attempts": len(raw), "raw": raw},
                                                          sort_keys=True).encode("utf-8"))
                return JudgeVerdict(scores, None, "ok", len(raw), raw, digests)
        finally:
            client.close()
        raw = list(transport.records)
        return JudgeVerdict(None, reason, outcome, len(raw), raw, digests)

    def _cache_path(self, request: dict[str, Any]) -> Path | None:
        if self.cache_dir is None:
            return None
        key = canonical_hash({"endpoint": self.base_url, "request": request, "max_negative": self.max_negative})
        return Path(self.cache_dir) / key[:2] / f"{key}.json"
