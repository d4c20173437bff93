"""Candidate actions under a Hugging Face policy: scoring every admissible command after a prompt
at once, and drawing among them (``decoding: admissible`` and ``constrained``).

:class:`CandidateDecoding` holds :class:`~creditaudit.replay.policies.hf.HFPolicy`'s methods for
this (the policy class inherits them; they use its tokenizer, model and forward pass):
:meth:`~CandidateDecoding.score_candidates` merges a prompt's candidates into a prefix tree scored
in one pass under a tree attention mask (or, for models that cannot take the mask, from the
prompt's key/value cache), :meth:`~CandidateDecoding.scoring_memo` remembers scored pairs, and the
admissible and constrained draws pick a command from those scores with Gumbel noise of the row's
own seed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from creditaudit.errors import InputError
from creditaudit.replay.policies.base import ActionScore, SampledAction

__all__ = ["CandidateDecoding", "takes_tree_mask", "draw_constrained"]

_MEMO_LIMIT = 200_000
"""Entries kept by a policy's scoring memo and action-encoding memo before they start afresh."""

SHARED_TREE_TOKENS = 4096
"""Branch tokens one row of :meth:`CandidateDecoding.score_shared_prefix` holds (its mask is
``width x width``: about 100 MB in float32 at this size beside a 1,000-token prefix)."""


def takes_tree_mask(config: Any) -> bool:
    """Whether a model (by its config) can score candidates under a custom tree attention mask.

    The mask is handed to the attention as a ready 4-D additive mask, which replaces the model's
    own: so the attention must accept one (``sdpa`` or ``eager``, not ``flash_attention_2``), and no
    layer may rely on a mask of its own kind (sliding-window layers: Mistral's ``sliding_window``,
    Qwen2's ``use_sliding_window``, Gemma's ``layer_types``). Other models score candidates from
    the prompt's key/value cache (:meth:`CandidateDecoding.score_candidates`).

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


def draw_constrained(rows: Sequence[tuple[str, Any]], temperature: float, seed: int) -> tuple[str, Any]:
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


class CandidateDecoding:
    """Scoring of and drawing among candidate actions (mixed into
    :class:`~creditaudit.replay.policies.hf.HFPolicy`, whose attributes it uses: ``model``,
    ``batch_size``, ``eos_token_id``, ``pad_token_id``, ``device``, ``decoding``, the encoders and
    the forward pass)."""

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
        action_ids = self._candidate_ids(candidates)
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

    def score_shared_prefix(
        self,
        prompts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        include_stop: bool = True,
        max_tree_tokens: int = SHARED_TREE_TOKENS,
    ) -> list[list[ActionScore]]:
        """:meth:`score_candidates`' numbers for prompts that begin alike (a judge's per-turn
        prompts all start with the same transcript), encoding their common beginning once.

        The prompts' longest common *token* prefix is the row's prompt; each prompt's remaining
        tokens followed by each of its candidates (and the end token, with ``include_stop``) are
        the branches of one prefix tree after it, scored under the tree attention mask of
        :meth:`score_candidates`. The token sequences scored are exactly those of
        :meth:`score_candidates` (each prompt tokenized whole, the prefix cut at the token level),
        so the numbers agree with it to float rounding (about 1e-6). With ``n`` prompts of ``L``
        common tokens this costs ``L`` plus the branches' distinct tokens instead of ``n * L``.
        A tree larger than ``max_tree_tokens`` is split into rows that each repeat the prefix.

        Models that cannot take the tree mask, fewer than two prompts, or prompts that share no
        token are scored by :meth:`score_candidates` instead. The scoring memo is not consulted.
        Hand-written: no library scores branches of a shared prefix in one pass on a stock
        ``transformers`` model.
        """
        if len(prompts) != len(candidates):
            raise ValueError(f"`candidates` must have one list per prompt; got {len(candidates)} for {len(prompts)}")
        if not self._tree_attention or len(prompts) < 2:
            return self.score_candidates(prompts, candidates, include_stop=include_stop)
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        shared = 0  # the common token prefix (never longer than the shortest prompt: zip stops there)
        for column in zip(*prompt_ids):
            if any(t != column[0] for t in column):
                break
            shared += 1
        if shared == 0:  # the first branch token is predicted after the prefix's last token
            return self.score_candidates(prompts, candidates, include_stop=include_stop)
        prefix = prompt_ids[0][:shared]
        stop = [self.eos_token_id] if include_stop else []
        # per prompt: (candidate ids, branch tokens)
        branches = [[(a_ids, ids[shared:] + a_ids + stop) for a_ids in row]
                    for ids, row in zip(prompt_ids, self._candidate_ids(candidates))]
        # rows of whole prompts, each holding at most max_tree_tokens branch tokens (or one prompt;
        # counted before the tree merges shared branch beginnings, so a bound on the row's width)
        rows: list[list[int]] = [[]]
        size = 0
        for i, row in enumerate(branches):
            tokens = len(prompt_ids[i]) - shared + sum(len(a) + len(stop) for a, _ in row)
            if rows[-1] and size + tokens > max_tree_tokens:
                rows.append([])
                size = 0
            rows[-1].append(i)
            size += tokens
        values = self._score_tree([prefix] * len(rows), [[b for i in r for _, b in branches[i]] for r in rows], 1)
        out: list[list[ActionScore]] = [[] for _ in prompts]
        for r, scored in zip(rows, values):
            at = 0
            for i in r:
                for a_ids, _ in branches[i]:
                    v = scored[at]
                    at += 1
                    tail = v[len(v) - len(a_ids) - len(stop):]
                    out[i].append(ActionScore(tuple(a_ids), tuple(tail[: len(a_ids)]),
                                              tail[-1] if include_stop else None))
        return out

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

    def _candidate_ids(self, candidates: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """Token ids of every candidate (``InputError`` naming one that tokenizes to nothing)."""
        out = []
        for i, cands in enumerate(candidates):
            row = []
            for j, a in enumerate(cands):
                ids = self._encode_candidate(a)
                if not ids:
                    raise InputError(f"`candidates[{i}][{j}]` ({a!r}) tokenizes to no tokens; an action must be a "
                                     "non-empty string")
                row.append(ids)
            out.append(row)
        return out

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
        torch = self._torch
        trees = [self._prefix_tree(tgts) for tgts in targets]
        order = sorted(range(len(prompt_ids)), key=lambda r: len(prompt_ids[r]) + len(trees[r][0]))
        out: list[list[list[float]]] = [[] for _ in prompt_ids]
        with torch.inference_mode():
            for s in range(0, len(order), size):
                chunk = order[s : s + size]
                flat, spans = self._tree_pass(chunk, prompt_ids, targets, trees)
                flat = flat.double().cpu().tolist()
                at = 0
                for r, n in spans:
                    out[r].append(flat[at : at + n])
                    at += n
        return out

    @staticmethod
    def _prefix_tree(tgts: list[list[int]]) -> tuple[list[int], list[int], list[int], list[list[int]]]:
        """The prefix tree of one prompt's targets: (node tokens, node parents, node depths, and per
        target the node after which each of its tokens is predicted, -1 for the prompt's end)."""
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
        return tokens, parents, depths, reads

    def _tree_pass(self, chunk: list[int], prompt_ids, targets, trees):
        """One forward pass over the rows ``chunk`` (prompt, then its prefix tree, under the tree
        mask): the flat tensor of every target token's log-probability, in target order, and the
        ``(row, length)`` span of each target. Differentiable unless called under inference mode."""
        import numpy as np

        torch = self._torch
        dtype = next(self.model.parameters()).dtype
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
        return logp[torch.tensor(rows), torch.tensor(cols), torch.tensor(toks)], spans

    def candidate_sequence_logprobs(self, prompts: Sequence[str], candidates: Sequence[Sequence[str]], *,
                                    batch_size: int | None = None) -> list[Any]:
        """Differentiable: per prompt, a tensor of its candidates' sequence log-probabilities
        ``sum_j log pi(c_j | prompt, c_<j) + log pi(<end> | prompt, c)`` -- what admissible decoding
        draws from -- computed like :meth:`score_candidates` (one prefix-tree pass per chunk of
        prompts) but with gradients, for training. Models that cannot take the tree mask
        (:attr:`tree_scoring` false) raise ``ValueError``: score their rows one by one.
        """
        torch = self._torch
        if len(prompts) != len(candidates):
            raise ValueError(f"`candidates` must have one list per prompt; got {len(candidates)} for {len(prompts)}")
        action_ids = self._candidate_ids(candidates)
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        targets = [[ids + [self.eos_token_id] for ids in row] for row in action_ids]
        if not self._tree_attention:
            raise ValueError("this model cannot take the tree attention mask (see takes_tree_mask): score its "
                             "candidates row by row instead")
        out: list[Any] = [None] * len(prompts)
        size = batch_size or self.batch_size
        trees = [self._prefix_tree(t) for t in targets]
        for s in range(0, len(prompts), size):
            chunk = list(range(s, min(s + size, len(prompts))))
            flat, spans = self._tree_pass(chunk, prompt_ids, targets, trees)
            sums: dict[int, list[Any]] = {r: [] for r in chunk}
            at = 0
            for r, n in spans:
                sums[r].append(flat[at : at + n].sum())
                at += n
            for r in chunk:
                out[r] = torch.stack(sums[r])
        return out

    @property
    def tree_scoring(self) -> bool:
        """Whether candidates are scored in one prefix-tree pass per prompt (:func:`takes_tree_mask`);
        :meth:`candidate_sequence_logprobs` needs it."""
        return bool(self._tree_attention)

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
        # rows with the same prompt and candidates (rollouts at one decision point) share one
        # index of their candidates, one list of scored rows and one array of log-probabilities
        index_of: dict[tuple[int, tuple[str, ...]], list[tuple[str, int, int]]] = {}
        row_keys: list[tuple[int, tuple[str, ...]]] = []
        for i, (prompt, cands) in enumerate(zip(prompts, candidates)):
            if not cands:
                raise ValueError(f"`candidates[{i}]` is empty: admissible decoding needs at least one command")
            k = prompt_index.setdefault(prompt, len(prompt_index))
            if k == len(cands_of):
                cands_of.append({})
            key = (k, tuple(cands))
            if key not in index_of:
                index_of[key] = [(c, k, cands_of[k].setdefault(c, len(cands_of[k]))) for c in cands]
            row_keys.append(key)
        scores = self.score_candidates(list(prompt_index), [list(c) for c in cands_of], include_stop=True,
                                       batch_size=batch_size)
        shared: dict[tuple[int, tuple[str, ...]], tuple[list[tuple[str, ActionScore]], Any]] = {}
        out = []
        for seed, key in zip(seeds, row_keys):
            if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0 or seed >= 2**64:
                raise ValueError(f"`seeds` must hold integers in [0, 2**64); got {seed!r}")
            entry = shared.get(key)
            if entry is None:
                rows = [(c, scores[k][j]) for c, k, j in index_of[key]]
                entry = shared[key] = (rows, None if self.decoding == "constrained" else
                                       np.array([sc.sum_logprob + (sc.stop_logprob or 0.0) for _, sc in rows]))
            rows, total = entry
            if self.decoding == "constrained":
                action, sc = draw_constrained(rows, temperature, seed)
                out.append(SampledAction(action, sc.token_ids, sc.token_logprobs, "candidate", sc.stop_logprob, int(seed)))
                continue
            if temperature == 0:
                k = int(np.argmax(total))
            else:
                k = int(np.argmax(total / temperature + np.random.default_rng(seed).gumbel(size=len(rows))))
            action, sc = rows[k]
            out.append(SampledAction(action, sc.token_ids, sc.token_logprobs, "candidate", sc.stop_logprob, int(seed)))
        return out
