"""One policy for many environment workers: the Ray topology of ``replay --executor ray``.

For an in-process policy (``policy.source: builtin`` or ``local``) the Ray executor starts one
:class:`PolicyService` actor that loads the model once, with ``compute.policy_gpus`` GPUs, and
environment-worker actors (CPU, ``compute.worker_cpus``) that hold only the environment and a
:class:`RemotePolicy`: every request the replay engine makes of its policy (seeded draws, scores,
admissible-candidate scores) goes to the service. For ``policy.source: openai`` the inference
server is the service, and each worker holds a client of it (the server batches across them).

Two ways to serve (``compute.merge_requests``):

* **one request at a time** (default): the service computes each worker's request exactly as that
  worker would have in process -- the same rows in the same forward passes, the worker's own
  scoring memory (:meth:`~creditaudit.replay.policies.hf_candidates.CandidateDecoding.scoring_memo`,
  kept per worker session), one torch thread -- so the replay's bytes equal the local executor's.
* **merged**: requests pending at the same moment from different workers, with the same method and
  settings, are concatenated into one call of the policy (one shared scoring memory); a row's
  numbers then depend on which requests met (float rounding), so the run is not bit-reproducible.

The service runs its model on one thread, taking requests from a queue that worker calls fill
(Ray's threaded actor), and counts its forward passes and their rows with a forward pre-hook, so
the mean batch at the model is measured, not inferred. Ray Serve's ``@serve.batch`` does this
batching for Serve deployments; it needs the ``ray[serve]`` stack and a Serve application, so the
queue here is written by hand (:meth:`PolicyService._loop`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ROW_ARGUMENTS", "PolicyService", "RemotePolicy", "ServiceStats"]

#: The per-row arguments of each policy method a worker may call (the others are settings shared
#: by a whole request, which merged requests must agree on).
ROW_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "sample": ("prompts", "seeds", "candidates"),
    "score": ("prompts", "actions"),
    "score_candidates": ("prompts", "candidates"),
}


@dataclass
class ServiceStats:
    """What the service did: worker requests, calls of the policy, forward passes of the model."""

    requests: int = 0
    request_rows: int = 0
    policy_calls: int = 0
    forward_passes: int = 0
    forward_rows: int = 0
    busy_s: float = 0.0
    sessions: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "request_rows": self.request_rows,
            "policy_calls": self.policy_calls,
            "requests_per_policy_call": self.requests / self.policy_calls if self.policy_calls else 0.0,
            "forward_passes": self.forward_passes,
            "mean_rows_per_forward": self.forward_rows / self.forward_passes if self.forward_passes else 0.0,
            "busy_s": self.busy_s,
            "sessions": len(self.sessions),
        }


class _Request:
    __slots__ = ("session", "epoch", "method", "kwargs", "done", "result", "error")

    def __init__(self, session: str, epoch: int | None, method: str, kwargs: dict[str, Any]):
        self.session, self.epoch, self.method, self.kwargs = session, epoch, method, kwargs
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def key(self) -> tuple:
        """What merged requests must share: the method and every non-row setting."""
        rows = ROW_ARGUMENTS[self.method]
        return (self.method, "candidates" in self.kwargs,
                tuple(sorted((k, repr(v)) for k, v in self.kwargs.items() if k not in rows)))

    def n_rows(self) -> int:
        return len(self.kwargs["prompts"])


class PolicyService:
    """The policy of a frozen run, loaded once, answering environment workers' requests.

    Parameters
    ----------
    protocol_path : str
        The run's frozen protocol; the policy is loaded as every stage loads it (pinned hashes
        checked), ``policy.source`` ``builtin`` or ``local``.
    merge : bool, default False
        Concatenate requests pending together (see the module docstring).
    policy : object, optional
        An already loaded policy (tests); ``protocol_path`` is then not read.
    """

    def __init__(self, protocol_path: str, merge: bool = False, policy: Any = None):
        if policy is None:
            from creditaudit.protocol.lock import require_frozen
            from creditaudit.replay.collect import load_run_policy

            policy = load_run_policy(require_frozen(protocol_path))
        self.policy = policy
        self.merge = bool(merge)
        self.stats = ServiceStats()
        self._memos: dict[str, tuple[int, dict]] = {}
        self._shared_memo: dict = {}
        self._queue: queue.Queue[_Request] = queue.Queue()
        self._serving = threading.Lock()
        self._received_lock = threading.Lock()
        self.received = 0
        """Requests handed to :meth:`call` so far (queued, being served or answered)."""
        """Held while the model computes; holding it from outside lets requests queue up."""
        model = getattr(policy, "model", None)
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            model.register_forward_pre_hook(self._count_forward, with_kwargs=True)
        threading.Thread(target=self._loop, name="creditaudit-policy-service", daemon=True).start()

    # ------------------------------------------------------------------ what workers call

    def describe(self) -> dict[str, Any]:
        """What a worker's :class:`RemotePolicy` mirrors: the prompt builder (with its tokenizer)
        and the decoding rule."""
        return {"prompt_builder": self.policy.prompt_builder, "decoding": getattr(self.policy, "decoding", "free"),
                "max_action_tokens": getattr(self.policy, "max_action_tokens", None),
                "scoring_memo": hasattr(self.policy, "scoring_memo")}

    def call(self, session: str, epoch: int | None, method: str, kwargs: dict[str, Any]) -> Any:
        """Run ``policy.<method>(**kwargs)`` for worker ``session``; ``epoch`` names the worker's
        current scoring memory (None: outside one)."""
        if method not in ROW_ARGUMENTS:
            raise ValueError(f"the policy service serves {sorted(ROW_ARGUMENTS)}; got {method!r}")
        request = _Request(session, epoch, method, kwargs)
        with self._received_lock:
            self.received += 1
        self._queue.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def service_stats(self) -> dict[str, Any]:
        """Counters so far (:class:`ServiceStats`)."""
        return self.stats.as_dict()

    # ------------------------------------------------------------------ the model thread

    def _count_forward(self, _module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and hasattr(ids, "shape"):
            self.stats.forward_passes += 1
            self.stats.forward_rows += int(ids.shape[0])

    def _loop(self) -> None:
        held: list[_Request] = []  # taken from the queue but not mergeable with the last batch
        while True:
            first = held.pop(0) if held else self._queue.get()
            with self._serving:
                batch = [first]
                if self.merge:  # everything pending now that can share a call with the first
                    rest, held = held, []
                    while True:
                        try:
                            rest.append(self._queue.get_nowait())
                        except queue.Empty:
                            break
                    for other in rest:  # the others are served next, in arrival order
                        (batch if other.key() == first.key() else held).append(other)
                self._serve(batch)

    def _serve(self, batch: list[_Request]) -> None:
        from creditaudit.replay.compute import stored_numerics

        start = time.perf_counter()
        try:
            method = batch[0].method
            rows = ROW_ARGUMENTS[method]
            kwargs = dict(batch[0].kwargs)
            for name in rows:
                if name in kwargs:
                    kwargs[name] = [row for r in batch for row in r.kwargs[name]]
            with stored_numerics(), self._memory(batch[0]):
                results = getattr(self.policy, method)(**kwargs)
            at = 0
            for r in batch:
                n = r.n_rows()
                r.result = list(results[at : at + n])
                at += n
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, who re-raises it
            for r in batch:
                r.error = exc
        finally:
            self.stats.busy_s += time.perf_counter() - start
            self.stats.policy_calls += 1
            for r in batch:
                self.stats.requests += 1
                self.stats.request_rows += r.n_rows()
                self.stats.sessions.add(r.session)
                r.done.set()

    @contextmanager
    def _memory(self, request: _Request) -> Iterator[None]:
        """The scoring memory the request's worker would have had in process (merged: one shared)."""
        if not hasattr(self.policy, "_memo"):
            yield
            return
        if request.epoch is None:
            memo = None
        elif self.merge:
            memo = self._shared_memo
        else:
            epoch, memo = self._memos.get(request.session, (None, None))
            if epoch != request.epoch:  # the worker entered a new memory: the old one is dropped
                memo = {}
                self._memos[request.session] = (request.epoch, memo)
        self.policy._memo = memo
        try:
            yield
        finally:
            self.policy._memo = None


class RemotePolicy:
    """A worker's policy whose every request goes to a :class:`PolicyService` actor.

    It offers what replay asks of a policy (:class:`~creditaudit.replay.policies.base.ActionPolicy`:
    ``sample`` and ``score``, plus ``score_candidates``, ``scoring_memo``, ``decoding`` and the
    prompt builder). One request is in flight per worker at a time, as in process.
    """

    def __init__(self, service: Any, session: str, call: Any = None):
        import ray

        self._service = service
        self._session = session
        self._call = call or (lambda *args: ray.get(service.call.remote(*args)))
        info = ray.get(service.describe.remote()) if call is None else service.describe()
        self.prompt_builder = info["prompt_builder"]
        self.decoding = info["decoding"]
        self.max_action_tokens = info["max_action_tokens"]
        self._depth = 0
        self._epoch = 0

    def _request(self, method: str, **kwargs: Any) -> Any:
        return self._call(self._session, self._epoch if self._depth else None, method, kwargs)

    def sample(self, prompts: Sequence[str], *, seeds: Sequence[int], temperature: float, **kwargs: Any) -> list:
        return self._request("sample", prompts=list(prompts), seeds=list(seeds), temperature=temperature, **kwargs)

    def score(self, prompts: Sequence[str], actions: Sequence[str], **kwargs: Any) -> list:
        return self._request("score", prompts=list(prompts), actions=list(actions), **kwargs)

    def score_candidates(self, prompts: Sequence[str], candidates: Sequence[Sequence[str]], **kwargs: Any) -> list:
        return self._request("score_candidates", prompts=list(prompts), candidates=[list(c) for c in candidates],
                             **kwargs)

    @contextmanager
    def scoring_memo(self) -> Iterator[None]:
        """As the in-process policy's: within the block the service remembers this worker's scores."""
        if self._depth == 0:
            self._epoch += 1
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
