"""Behaviour cloning of the default policy: the training loop, its batches and its losses.

Cross-entropy on the action tokens and ``<eoa>`` only; decisive examples repeated; from the
second epoch on renamed examples (:mod:`~creditaudit.replay.policies.default.augmentation`);
relabelled goals packed beside each example in one row (:func:`packed_batch`: a shared prompt
prefix, each branch attending to the prefix and to itself only); searching steps against soft
targets (:mod:`~creditaudit.replay.policies.default.targets`). Batches group examples of similar
length.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from creditaudit.errors import InputError
from creditaudit.replay.policies.default.augmentation import (
    entity_names,
    relabel_goal,
    rename_entities,
    renamed_state,
    renamer,
)
from creditaudit.replay.policies.default.demonstrations import BCExample
from creditaudit.replay.policies.default.targets import expert_search, search_soft_targets

__all__ = [
    "DECISIVE_VERBS",
    "is_decisive",
    "length_bucketed_batches",
    "split_at_goal",
    "packed_batch",
    "train_behaviour_cloning",
]

DECISIVE_VERBS = frozenset({"take", "move", "put", "heat", "cool", "clean", "slice", "use"})
"""First words of the commands that handle an object (see ``decisive_repeats``)."""
_BUCKET_BATCHES = 8
_HOLDING = re.compile(r"^admissible actions: (?:.* \| )?move ", re.MULTILINE)


def is_decisive(example: BCExample) -> bool:
    """Whether an example's action is one a task turns on: it handles an object (its verb is in
    :data:`DECISIVE_VERBS`), or it is a ``go to`` while the agent holds something (a ``move``
    command is admissible), i.e. towards the appliance or the target, not a search draw.

    Examples
    --------
    >>> is_decisive(BCExample("admissible actions: go to safe 1 | move watch 1 to desk 1", "go to safe 1"))
    True
    >>> is_decisive(BCExample("admissible actions: go to safe 1 | open desk 1", "go to safe 1"))
    False
    """
    verb = example.action.split(" ", 1)[0]
    return verb in DECISIVE_VERBS or (verb == "go" and _HOLDING.search(example.prompt) is not None)


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, rng: Any) -> list[list[int]]:
    """One epoch's batches: a random permutation cut into windows of ``8 * batch_size``
    examples, each window sorted by length and cut into batches, the batches shuffled.

    Examples of similar length share a batch, so right-padding wastes little compute, while
    every example still meets random neighbours from epoch to epoch.
    """
    order = [int(i) for i in rng.permutation(len(lengths))]
    window = batch_size * _BUCKET_BATCHES
    batches: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: (lengths[i], i))
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [batches[int(k)] for k in rng.permutation(len(batches))]


def _encode(tokenizer: Any, prompt: str, action: str) -> tuple[list[int], int]:
    """(token ids of prompt + action + <eoa>, number of prompt tokens)."""
    p = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    a = list(tokenizer(action, add_special_tokens=False)["input_ids"])
    return p + a + [tokenizer.eos_token_id], len(p)


_TASK_LINE = "\ntask: "


def split_at_goal(prompt: str) -> tuple[str, str] | None:
    """``(prefix, goal part)`` of a plain-template prompt: everything up to the ``task:`` line, and
    the rest (the goal line and the action cue). ``None`` when the prompt has no such line."""
    at = prompt.rfind(_TASK_LINE)
    return None if at < 0 else (prompt[: at + 1], prompt[at + 1 :])


def packed_row(tokenizer: Any, prefix: str, branches: Sequence[tuple[str, str] | tuple[str, str, Any]],
                cache: dict[str, tuple[int, int] | None] | None = None) -> tuple[list[int], ...] | None:
    """One training row holding a shared prompt prefix and several (goal part, action) branches.

    A branch may carry a third item, the expert's search distribution ``{place: probability}``
    (:func:`expert_search`): its place's words then get soft targets
    (:func:`search_soft_targets`).

    Returns ``(ids, positions, branch_of, labels, soft)``: the token ids, their position ids
    (every branch continues the prefix's positions), the branch of each token (-1 for the prefix),
    its label (-100 where no hard-label loss is taken) and the soft targets ``(position, ids,
    probabilities)``; ``None`` when the prefix and the first branch tokenize differently apart
    than together (the example is then trained alone).
    """
    cache = {} if cache is None else cache
    head = list(tokenizer(prefix, add_special_tokens=True)["input_ids"])
    ids, pos, branch_of, labels = list(head), list(range(len(head))), [-1] * len(head), [-100] * len(head)
    soft: list[tuple[int, list[int], list[float]]] = []
    for b, branch in enumerate(branches):
        goal_part, action = branch[0], branch[1]
        dist = branch[2] if len(branch) > 2 else None
        g = list(tokenizer(goal_part, add_special_tokens=False)["input_ids"])
        a_ids = list(tokenizer(action, add_special_tokens=False)["input_ids"])
        a = a_ids + [tokenizer.eos_token_id]
        if b == 0 and head + g != list(tokenizer(prefix + goal_part, add_special_tokens=True)["input_ids"]):
            return None
        start = len(ids) + len(g)
        ids += g + a
        pos += list(range(len(head), len(head) + len(g) + len(a)))
        branch_of += [b] * (len(g) + len(a))
        labels += [-100] * len(g) + a
        targets = search_soft_targets(tokenizer, a_ids, dist, cache) if dist else None
        for offset, t_ids, probs in targets or ():
            labels[start + offset] = -100
            soft.append((start + offset, t_ids, probs))
    return ids, pos, branch_of, labels, soft


def packed_batch(tokenizer: Any, rows: Sequence[BCExample], rng: Any, names: Sequence[str], *, goal_variants: int,
                  rename: bool, augment_share: float, max_number: int,
                  search_targets: bool = False, place_cache: dict | None = None) -> tuple[Any, ...]:
    """A batch of packed rows: each example's prompt prefix once, then its own goal and action and
    up to ``goal_variants`` relabelled goals with the expert's actions (:func:`relabel_goal`),
    each branch attending to the prefix and to itself only (a 4-D additive mask; positions
    continue the prefix in every branch, as if each were alone). A share ``augment_share`` of the
    rows (when ``rename``) has its names renamed consistently across all its branches.

    With ``search_targets``, every branch whose (renamed) state the expert searches from is
    labelled with a fresh draw of the expert and soft targets over the places it draws among
    (:func:`expert_search`), so the object's renamed type decides where it is searched for.

    Returns ``(ids, mask, positions, labels, soft)``; ``soft`` is ``(rows, positions, targets)``
    (a dense target distribution per soft position) or ``None``."""
    import numpy as np
    import torch

    packed, cache = [], {} if place_cache is None else place_cache
    for ex in rows:
        split = split_at_goal(ex.prompt)
        branches_ex = [ex]
        if split is not None and ex.state is not None:
            for _ in range(goal_variants):
                variant = relabel_goal(ex, rng, names)
                if variant is not None:
                    branches_ex.append(variant)
        if split is None:
            prefix, kept = ex.prompt, [("", ex.action, None)]
        else:
            prefix = split[0]
            kept = []
            for b in branches_ex:
                b_split = split_at_goal(b.prompt)
                if b_split is None or b_split[0] != prefix:
                    continue
                kept.append((b_split[1], b.action, b.state))
        sub = None
        if rename and rng.random() < augment_share:
            sub = renamer(" ".join([prefix] + [g + " " + a for g, a, _ in kept]), rng, names, max_number)
            prefix = sub(prefix)
        parts = []
        for goal_part, action, state in kept:
            if sub is not None:
                goal_part, action = sub(goal_part), sub(action)
            dist = None
            if search_targets and state is not None and action.startswith("go to "):  # a search step goes
                drawn, dist = expert_search(state if sub is None else renamed_state(state, sub), rng)
                if dist is not None:
                    action = drawn
            parts.append((goal_part, action, dist))
        row = packed_row(tokenizer, prefix, parts, cache)
        if row is None:  # the split tokenizes differently: the example alone
            row = packed_row(tokenizer, ex.prompt, [("", ex.action)], cache)
        packed.append(row)
    width = max(len(r[0]) for r in packed)
    ids = np.full((len(packed), width), tokenizer.pad_token_id, dtype=np.int64)
    positions = np.zeros((len(packed), width), dtype=np.int64)
    labels = np.full((len(packed), width), -100, dtype=np.int64)
    allow = np.zeros((len(packed), width, width), dtype=bool)
    soft_rows, soft_pos, soft_targets = [], [], []
    vocab_size = len(tokenizer) if any(r[4] for r in packed) else 0
    for r, (row_ids, row_pos, branch_of, row_labels, row_soft) in enumerate(packed):
        n = len(row_ids)
        ids[r, :n], positions[r, :n], labels[r, :n] = row_ids, row_pos, row_labels
        bo = np.asarray(branch_of)
        allow[r, :n, :n] = np.tri(n, dtype=bool) & ((bo[None, :] == -1) | (bo[None, :] == bo[:, None]))
        allow[r, np.arange(n, width), np.arange(n, width)] = True  # padding sees itself
        for at, t_ids, probs in row_soft:
            target = np.zeros(vocab_size, dtype=np.float32)
            target[t_ids] = probs
            soft_rows.append(r)
            soft_pos.append(at)
            soft_targets.append(target)
    mask = torch.zeros(allow.shape, dtype=torch.float32)
    mask.masked_fill_(torch.from_numpy(~allow), torch.finfo(torch.float32).min)
    soft = None
    if soft_rows:
        soft = (torch.tensor(soft_rows), torch.tensor(soft_pos), torch.from_numpy(np.stack(soft_targets)))
    return torch.from_numpy(ids), mask[:, None], torch.from_numpy(positions), torch.from_numpy(labels), soft


def train_behaviour_cloning(
    model: Any,
    tokenizer: Any,
    examples: Sequence[BCExample],
    *,
    epochs: int,
    learning_rate: float,
    rng: Any,
    batch_size: int = 16,
    weight_decay: float = 0.01,
    augment: bool = False,
    augment_share: float = 0.5,
    max_number: int = 0,
    decisive_repeats: int = 1,
    context_weight: float = 0.0,
    goal_variants: int = 0,
    search_targets: bool = False,
    autocast: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Behaviour cloning: cross-entropy on the action tokens (and ``<eoa>``) of target examples.

    Batches are right-padded, so real tokens keep positions ``0..len-1`` as at inference.

    Parameters
    ----------
    model : Qwen2ForCausalLM
        Trained in place.
    tokenizer : PreTrainedTokenizerFast
    examples : sequence of BCExample
        Non-target examples (mistakes) are skipped: they only appear in later prompts' history.
    epochs, learning_rate : int, float
        AdamW with linear warm-up (first 5% of steps) and linear decay to 0.
    rng : numpy.random.Generator
        Data order (one permutation per epoch) and the augmentation's draws.
    batch_size : int, default 16
    weight_decay : float, default 0.01
    augment : bool, default False
        From the second epoch on, rename the object names of a share ``augment_share`` of the
        examples (:func:`rename_entities`).
    augment_share : float, default 0.5
    max_number : int, default 0
        When augmenting, also permute the instance numbers 1..``max_number``.
    decisive_repeats : int, default 1
        Times each decisive example (:func:`is_decisive`: it handles an object, or goes to the
        appliance or target with the object in hand) is shown per epoch. They are a fifth of the
        examples, yet every task turns on them; the searching ``go to`` steps, whose targets are
        the expert's random draws, dominate the loss otherwise.
    context_weight : float, default 0.0
        Weight of an auxiliary next-token loss on the prompt tokens (0: action tokens only; only
        without ``goal_variants``).
    goal_variants : int, default 0
        Relabelled goals (:func:`relabel_goal`) trained beside each example that keeps its
        :class:`DemoState`, packed with it in one row (:func:`packed_batch`); the renaming
        augmentation then renames a row's branches together.
    search_targets : bool, default False
        Train the searching ``go to`` steps against the expert's whole distribution over places
        (soft targets; :func:`expert_search`) instead of its one draw (only with
        ``goal_variants``, whose packed rows carry the states).
    autocast : {"bfloat16", None}, default None
        Compute dtype of the forward and backward passes (CPU autocast; weights and optimizer
        state stay float32).
    progress : callable, optional
        ``progress("train", step, total_steps)``.

    Returns
    -------
    dict
        ``{"examples": n, "steps": n, "first_epoch_loss": x, "last_epoch_loss": x}``.
    """
    import torch

    if goal_variants and context_weight:
        raise ValueError("`context_weight` needs unpacked rows: set `goal_variants` to 0 to use it")
    targets = [ex for ex in examples if ex.target]
    if not targets:
        raise InputError("behaviour cloning got no target example; generate more training games")
    if decisive_repeats > 1:
        targets += [ex for ex in targets if is_decisive(ex)] * (decisive_repeats - 1)
    names = entity_names() if augment or goal_variants else ()
    cast = (lambda: torch.autocast("cpu", dtype=getattr(torch, autocast))) if autocast else contextlib.nullcontext
    n = len(targets)
    steps_per_epoch = (n + batch_size - 1) // batch_size
    total = steps_per_epoch * epochs
    warmup = max(1, total // 20)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup)))
    )
    model.train()
    epoch_losses = []
    step = 0
    lengths = [len(_encode(tokenizer, ex.prompt, ex.action)[0]) for ex in targets]
    place_cache: dict[str, tuple[int, int] | None] = {}  # place name -> its two token ids
    for epoch in range(epochs):
        running, count = 0.0, 0
        for batch_rows in length_bucketed_batches(lengths, batch_size, rng):
            rows = [targets[i] for i in batch_rows]
            if augment and not goal_variants:
                # The first epoch shows the examples as they are; later ones renamed.
                rows = [
                    BCExample(*rename_entities(ex.prompt, ex.action, rng, names, max_number), True)
                    if epoch and rng.random() < augment_share else ex
                    for ex in rows
                ]
            if goal_variants:
                step_loss = _packed_loss(model, tokenizer, rows, rng, names, cast, goal_variants=goal_variants,
                                         rename=augment and epoch > 0, augment_share=augment_share,
                                         max_number=max_number, search_targets=search_targets,
                                         place_cache=place_cache)
            else:
                step_loss = _plain_loss(model, tokenizer, rows, cast, context_weight)
            optimizer.zero_grad(set_to_none=True)
            step_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += float(step_loss.detach()) * len(rows)
            count += len(rows)
            step += 1
            if progress is not None:
                progress("train", step, total)
        epoch_losses.append(running / count)
    model.eval()
    return {
        "examples": n,
        "steps": total,
        "first_epoch_loss": epoch_losses[0],
        "last_epoch_loss": epoch_losses[-1],
    }


def _packed_loss(model: Any, tokenizer: Any, rows: Sequence[BCExample], rng: Any, names: Sequence[str],
                 cast: Callable[[], Any], **packing: Any) -> Any:
    """Mean action-token cross-entropy of one batch of packed rows (:func:`packed_batch`): hard
    labels, and soft targets where the batch has them (each counts as one token)."""
    import torch

    ids, mask, positions, labels, soft = packed_batch(tokenizer, rows, rng, names, **packing)
    with cast():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    flat = logits[:, :-1].reshape(-1, logits.shape[-1])
    target = labels[:, 1:].reshape(-1)
    if soft is None:
        return torch.nn.functional.cross_entropy(flat, target, ignore_index=-100)
    hard = torch.nn.functional.cross_entropy(flat, target, ignore_index=-100, reduction="sum")
    soft_rows, soft_pos, soft_targets = soft
    logp = torch.log_softmax(logits[soft_rows, soft_pos - 1], dim=-1)
    soft_sum = -(soft_targets * logp).sum()
    return (hard + soft_sum) / (int((target != -100).sum()) + len(soft_rows))


def _plain_loss(model: Any, tokenizer: Any, rows: Sequence[BCExample], cast: Callable[[], Any],
                context_weight: float) -> Any:
    """Mean action-token cross-entropy of one batch of whole examples (plus ``context_weight``
    times the prompt tokens' next-token loss)."""
    import torch

    pad = tokenizer.pad_token_id
    batch = [_encode(tokenizer, ex.prompt, ex.action) for ex in rows]
    width = max(len(ids) for ids, _ in batch)
    # Right padding: real tokens keep positions 0..len-1, exactly as at inference (where left
    # padding comes with explicit positions).
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    context = torch.full((len(batch), width), -100, dtype=torch.long)
    for b, (row, n_prompt) in enumerate(batch):
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
        labels[b, n_prompt : len(row)] = torch.tensor(row[n_prompt:])
        context[b, 1:n_prompt] = torch.tensor(row[1:n_prompt])
    with cast():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    flat = logits[:, :-1].reshape(-1, logits.shape[-1])
    loss = torch.nn.functional.cross_entropy(flat, labels[:, 1:].reshape(-1), ignore_index=-100)
    if context_weight:
        loss = loss + context_weight * torch.nn.functional.cross_entropy(flat, context[:, 1:].reshape(-1),
                                                                         ignore_index=-100)
    return loss
