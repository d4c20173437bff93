"""The embedded default policy: a tiny Qwen2 model trained here by behaviour cloning.

The toolkit must run an audit end to end on a machine without a GPU and without any download,
so it ships the recipe for a policy, not the policy: a word-level tokenizer built over the
ALFWorld vocabulary and a tiny ``Qwen2ForCausalLM`` trained on noisy demonstrations of an
observation-only searching expert on generated games. The result is an ordinary Hugging Face
model directory (``save_pretrained``) that :func:`creditaudit.replay.policy.load_policy` loads
like any other model.

The build is reproducible from its seed: every random choice (game order, the expert's search
draws, injected mistakes, weight initialisation, data order) comes from a named stream of the
build seed, training runs with deterministic algorithms at a fixed thread count, and the same
seed gives byte-identical weight files.

The demonstrator
----------------
A planner's walkthrough knows where every object lies; a policy that reads only the game's text
cannot, and cloning such walkthroughs taught the first version of this policy to guess (0 of 24
held-out games won). The demonstrator is instead :func:`creditaudit.replay.searcher.expert_action`,
which decides from exactly what a prompt shows (goal, observation, admissible commands, two turns
of history) and searches for objects by drawing receptacles that can hold them. Its search draws
are where the policy's own randomness, and so its failures, come from.

Mistakes
--------
At each step, with probability ``noise_rate`` (at most twice in a row), a mistake is injected
that does not make the task impossible: half of the time an inadmissible variant of the expert's
command (the engine answers "Nothing happens." and nothing changes), otherwise a wrong admissible
``go to``, ``examine`` or ``open``. The expert then acts from the state the mistake produced.
Mistaken actions appear in later prompts' history but are never training targets (their loss is
masked): the policy learns to recover from states off the expert path (DART-style noise
injection) without learning to imitate deliberate errors.

Loss
----
Cross-entropy on the action tokens and ``<eoa>`` only (``context_weight = 0``; an auxiliary
next-token loss on the prompt tokens is kept for experiments). Three choices make the policy
succeed at all on held-out games:

* the examples that handle an object (take, move, heat ...; a tenth of the data, and what every
  task turns on) are shown ``decisive_repeats`` times an epoch;
* from the second epoch on a share ``augment_share`` of the examples have their object names and
  instance numbers consistently renamed (:func:`rename_entities`), so the network must copy
  "watch 1" from its prompt instead of memorising which objects are taken;
* (v4) every step is trained beside ``goal_variants`` relabelled goals (:func:`relabel_goal`): the
  expert is a pure function of the prompt, so the same state is labelled under a goal naming
  another object in view (``take`` it), an absent one (search on), another receptacle or another
  task kind (another appliance, or none). A demonstration shows each of these decisions a few
  dozen times; the variants make minimal pairs in which the goal alone decides. They share the
  step's prompt prefix in one packed row, each attending to the prefix and to itself only, so a
  variant costs its own ~15 tokens, not a whole prompt;
* (v5) a searching ``go to`` step is trained against the expert's whole distribution over the
  places it searches (:func:`expert_search`), not against its one draw: soft targets on the
  place's kind and number words. A draw says "cabinet 3" where the expert would as gladly have
  gone to any of eight places and never back to the two it just left; the distribution says all
  of that at every search step. With draws, the v4 policy went back to a place it had just left
  in over a third of its ``go to`` steps in the games it lost, and most of those games were lost
  without ever seeing the object. Because the targets are recomputed for the renamed example,
  a renamed object is also searched for where its new type can lie.

Batches group examples of similar length (little padding).

Decoding
--------
A from-scratch model of this size puts part of its mass on commands that are not admissible
(``take`` + an object not in the room), so it is run restricted to the admissible commands, by
default with ``decoding: admissible``: a command is drawn with probability proportional to its
whole-command probability under the model, tempered by T
(:meth:`~creditaudit.replay.policy.HFPolicy.sample`). Token-level masking (``constrained``)
chooses the verb before the object; this model cannot tell at the verb whether the task's
object is in view (its probability of ``take`` was the same, about 0.5, with and without it), so
under masking it takes whatever lies there. Whole-command scoring lets the object's probability
veto the verb.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol import seeds as seed_streams
from creditaudit.replay.policy import PromptBuilder
from creditaudit.replay.rollout import candidate_kwargs

__all__ = [
    "PAD_TOKEN",
    "EOA_TOKEN",
    "UNK_TOKEN",
    "NEWLINE_TOKEN",
    "SPECIAL_TOKENS",
    "BUILD_FORMAT_VERSION",
    "BUILD_THREADS",
    "DEMO_HORIZON",
    "EVAL_HORIZON",
    "CONTEXT_LOSS_WEIGHT",
    "entity_names",
    "rename_entities",
    "environment_words",
    "words_from_texts",
    "build_vocabulary",
    "build_tokenizer",
    "is_decisive",
    "build_model",
    "BCExample",
    "DemoState",
    "expert_search",
    "DemonstrationReport",
    "noisy_demonstrations",
    "parallel_demonstrations",
    "train_behaviour_cloning",
    "PolicyEvaluation",
    "evaluate_policy",
    "generate_build_games",
    "build_default_policy",
    "BUILD_RECORD",
]

PAD_TOKEN = "<pad>"
"""Padding token (never attended to)."""
EOA_TOKEN = "<eoa>"
"""End of action: the tokenizer's and the model's end-of-sequence token."""
UNK_TOKEN = "<unk>"
"""Any word outside the vocabulary."""
SPECIAL_TOKENS = (PAD_TOKEN, EOA_TOKEN, UNK_TOKEN)
NEWLINE_TOKEN = "\n"
"""A line break is a word of its own: prompts are line-structured, and a line break ends an
action in the prompt's history just as ``<eoa>`` ends a generated one (both stop sampling)."""

# Words of the tokenizer's pre-tokenization: runs of letters/digits/underscore, or runs of other
# non-space characters (the ``tokenizers`` ``Whitespace`` pre-tokenizer's rule).
_WORD = re.compile(r"\w+|[^\w\s]+")
_MAX_NUMBER = 99


def words_from_texts(texts: Iterable[str]) -> set[str]:
    """The lower-cased words of ``texts`` as the default tokenizer splits them.

    Examples
    --------
    >>> sorted(words_from_texts(["On the desk 1, you see a mug 2."]))
    [',', '.', '1', '2', 'a', 'desk', 'mug', 'on', 'see', 'the', 'you']
    """
    out: set[str] = set()
    for text in texts:
        out.update(w.lower() for w in _WORD.findall(text))
    return out


def environment_words() -> set[str]:
    """The vocabulary of the ALFWorld environment, without reading any game.

    Object and receptacle names from ``alfworld/gen/constants.py`` (singular and plural, lower
    case, as the text engine writes them), every word of the text grammar
    (``alfworld/data/alfred.twl2``: action templates and feedback), the numbers 0-99 (instance
    numbers), and the words of the prompt template.
    """
    import alfworld.gen.constants as constants

    words: set[str] = set()
    names = list(constants.OBJECTS) + list(constants.RECEPTACLES) + list(constants.MOVABLE_RECEPTACLES)
    words.update(n.lower() for n in names)
    words.update(n.lower() for n in constants.OBJECTS_SINGULAR)
    words.update(n.lower() for n in constants.OBJECTS_PLURAL)
    grammar = Path(constants.__file__).resolve().parent.parent / "data" / "alfred.twl2"
    if grammar.is_file():
        text = grammar.read_text(encoding="utf-8")
        # Only the quoted strings (templates and feedback) are game text; skip placeholders'
        # attribute names such as ``indefinite`` by keeping the braces' contents out.
        for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', text):
            words |= words_from_texts([re.sub(r"\{[^}]*\}|#[^#]*#", " ", quoted)])
    words.update(str(i) for i in range(_MAX_NUMBER + 1))
    # The prompt template's own words (instruction, field names, separators).
    words |= words_from_texts([PromptBuilder(None).build("g", "o", ["a", "b"], [("o", "a")], hindsight="h")])
    from creditaudit.replay.policy import format_hindsight

    words |= words_from_texts([format_hindsight("x", True), format_hindsight("x", False)])
    # The default local judge is the audited policy itself: it must encode the choices 1, 0, -1.
    words |= words_from_texts(["-1 0 1"])
    return words


def build_vocabulary(texts: Iterable[str] = ()) -> list[str]:
    """Special tokens, then the sorted union of :func:`environment_words` and the words of
    ``texts`` (e.g. every observation, goal and command of the generated games)."""
    words = environment_words() | words_from_texts(texts)
    words -= set(SPECIAL_TOKENS) | {NEWLINE_TOKEN}
    return list(SPECIAL_TOKENS) + [NEWLINE_TOKEN] + sorted(words)


def build_tokenizer(vocabulary: Sequence[str], *, model_max_length: int = 4096):
    """A word-level ``PreTrainedTokenizerFast`` over ``vocabulary``.

    Lower-cases, splits on whitespace and punctuation (a line break is a token of its own when
    the vocabulary has it), maps unknown words to ``<unk>``, and decodes by joining words with
    single spaces (so an action decodes to its command text).
    ``<eoa>`` is the end-of-sequence token and ``<pad>`` the padding token. No chat template:
    prompts use the plain template.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if list(vocabulary[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS):
        raise ValueError(f"`vocabulary` must start with the special tokens {SPECIAL_TOKENS}")
    if len(set(vocabulary)) != len(vocabulary):
        raise ValueError("`vocabulary` must not repeat a word")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocabulary)}, unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # WordPiece's decoder with no continuation prefix in use joins words with spaces.
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    if NEWLINE_TOKEN in vocabulary:
        # Matched on the raw text before pre-tokenization (which would drop it as whitespace).
        tok.add_tokens([AddedToken(NEWLINE_TOKEN, normalized=False, special=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOA_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


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


@dataclass(frozen=True)
class DemoState:
    """What the demonstrator saw at one step: the inputs of :func:`expert_action` and of the
    prompt (``history`` holds the last ``history_length`` turns, at least two)."""

    goal: str
    observation: str
    admissible: tuple[str, ...]
    history: tuple[tuple[str, str], ...]
    history_length: int


@dataclass(frozen=True)
class BCExample:
    """One behaviour-cloning example: a prompt, the action that follows, and whether the action
    is a training target (mistakes are context only). ``state`` (demonstrations only) keeps the
    structured inputs, so the example can be relabelled under another goal
    (:func:`relabel_goal`)."""

    prompt: str
    action: str
    target: bool = True
    state: DemoState | None = None


# ------------------------------------------------------------------------- noisy demonstrations

# Verbs of mistakes that never make a task impossible: moving, looking, opening. Taking,
# putting, heating, cooling, cleaning, slicing or using the wrong thing can (an object put in the
# wrong place may stay reachable, but a wrong ``heat`` or ``use`` changes what the verifier sees).
_SAFE_MISTAKES = ("go to ", "examine ", "open ")
_MAX_CONSECUTIVE_MISTAKES = 2


@dataclass(frozen=True)
class DemonstrationReport:
    """What :func:`noisy_demonstrations` produced.

    Attributes
    ----------
    examples : tuple of BCExample
        Every step taken, in play order; mistakes have ``target=False``.
    mistakes : int
        Injected mistakes.
    episodes : int
        Demonstration episodes played (games x passes).
    episodes_won : int
        Episodes that ended in a win before the horizon.
    """

    examples: tuple[BCExample, ...]
    mistakes: int
    episodes: int
    episodes_won: int


def _garbled(expert: str, admissible: Sequence[str]) -> str | None:
    """An inadmissible variant of the expert's command (its last instance number changed), which
    the engine answers with "Nothing happens." and which changes nothing."""
    words = expert.split()
    for k in range(len(words) - 1, -1, -1):
        if words[k].isdigit():
            for delta in (1, 2, 3):
                candidate = " ".join(words[:k] + [str(int(words[k]) + delta)] + words[k + 1 :])
                if candidate not in admissible:
                    return candidate
            return None
    return None


def _mistake_candidates(admissible: Sequence[str], expert: str) -> list[str]:
    return [a for a in admissible if a != expert and a.startswith(_SAFE_MISTAKES)]


def noisy_demonstrations(
    tasks: Sequence[Any],
    env: Any,
    *,
    noise_rate: float,
    history_length: int,
    rng_for: Callable[[int], Any],
    passes: int = 1,
    expert: Callable[..., str] | None = None,
    inadmissible_share: float = 0.5,
) -> DemonstrationReport:
    """Play the searching expert on every task with injected mistakes and record the prompts.

    Parameters
    ----------
    tasks : sequence of Task
        The games (``env.reset(task)``).
    env : Environment
        An environment instance (reset per episode; its horizon ends an episode).
    noise_rate : float
        Probability, at each step, of first taking a plausible wrong action (at most two in a
        row): half of the time an inadmissible variant of the expert's command (its last instance
        number changed; the engine answers "Nothing happens." and nothing changes), otherwise a
        wrong admissible ``go to``, ``examine`` or ``open``.
    history_length : int
        Turns of history in the prompts (the policy's ``history_length``).
    rng_for : callable
        ``rng_for(episode)`` returns the ``numpy.random.Generator`` of that episode (its mistakes
        and the expert's search draws); episode ``k`` is pass ``k // len(tasks)`` of task
        ``k % len(tasks)``.
    passes : int, default 1
        Episodes per task (each with its own draws: the search goes elsewhere, the mistakes
        fall elsewhere).
    expert : callable, optional
        ``expert(goal, observation, admissible, history, rng) -> action``; the observation-only
        searcher :func:`creditaudit.replay.searcher.expert_action` by default.

    Notes
    -----
    The expert labels every state the episode reaches, including those a mistake led to, so the
    policy learns to act from states off the expert's own path (DART-style noise injection),
    including the "Nothing happens." its own rollouts produce. Mistaken actions appear in later
    prompts' history but are never training targets.
    """
    episodes = [
        _play_demonstration(tasks[k % len(tasks)], env, rng_for(k), noise_rate=noise_rate,
                            history_length=history_length, expert=expert, inadmissible_share=inadmissible_share)
        for k in range(len(tasks) * int(passes))
    ]
    return _merge_episodes(episodes)


def _merge_episodes(episodes: Sequence[tuple[list[BCExample], int, bool]]) -> DemonstrationReport:
    examples = [ex for played, _, _ in episodes for ex in played]
    return DemonstrationReport(tuple(examples), sum(m for _, m, _ in episodes), len(episodes),
                               sum(bool(w) for _, _, w in episodes))


def _play_demonstration(task: Any, env: Any, rng: Any, *, noise_rate: float, history_length: int,
                        expert: Callable[..., str] | None = None,
                        inadmissible_share: float = 0.5) -> tuple[list[BCExample], int, bool]:
    """One noisy demonstration episode: (examples, mistakes, won)."""
    if expert is None:
        from creditaudit.replay.searcher import expert_action as expert
    builder = PromptBuilder(None, history_length=history_length)
    examples: list[BCExample] = []
    mistakes = 0
    obs = env.reset(task)
    goal, text, admissible = obs.goal, obs.text, tuple(obs.admissible)
    history: list[tuple[str, str]] = []
    in_a_row = 0
    while True:
        label = expert(goal, text, admissible, history, rng)
        action, target = label, True
        if in_a_row < _MAX_CONSECUTIVE_MISTAKES and rng.random() < noise_rate:
            candidates = _mistake_candidates(admissible, label)
            garbled = _garbled(label, admissible)
            if garbled is not None and (not candidates or rng.random() < inadmissible_share):
                action, target = garbled, False
            elif candidates:
                action, target = candidates[int(rng.integers(len(candidates)))], False
        in_a_row = 0 if target else in_a_row + 1
        mistakes += not target
        state = DemoState(goal, text, admissible, tuple(history[-max(2, history_length):]), history_length)
        examples.append(BCExample(builder.build(goal, text, admissible, history), action, target, state))
        result = env.step(action)
        history.append((text, action))
        text, admissible = result.text, tuple(result.admissible)
        if result.done:
            return examples, mistakes, bool(result.won)


def _demo_rng(root: str, episode: int) -> Any:
    return seed_streams.rng(root, f"policy/demo/{episode}")


def _demonstration_worker(job: tuple[Any, Sequence[tuple[int, Any]], str, float, int]) -> list[tuple[list[BCExample], int, bool]]:
    """Play the episodes ``[(k, task), ...]`` of one worker on its own engine."""
    env_factory, work, root, noise_rate, history_length = job
    env = env_factory()
    try:
        return [_play_demonstration(task, env, _demo_rng(root, k), noise_rate=noise_rate,
                                    history_length=history_length) for k, task in work]
    finally:
        env.close()


def parallel_demonstrations(tasks: Sequence[Any], env_factory: Callable[[], Any], *, root: str, noise_rate: float,
                            history_length: int, passes: int = 1, workers: int = 1) -> DemonstrationReport:
    """:func:`noisy_demonstrations` with episode ``k`` drawn from stream ``policy/demo/<k>`` of
    ``root``, played on ``workers`` processes (each with its own engine from the picklable
    ``env_factory``). Episodes are dealt round-robin and merged back in episode order, so the
    result is identical for any number of workers."""
    jobs = [(k, tasks[k % len(tasks)]) for k in range(len(tasks) * int(passes))]
    workers = max(1, min(int(workers), len(jobs)))
    if workers == 1:
        played = _demonstration_worker((env_factory, jobs, root, noise_rate, history_length))
        return _merge_episodes(played)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = [jobs[w::workers] for w in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_demonstration_worker,
                                [(env_factory, share, root, noise_rate, history_length) for share in shares]))
    by_episode: dict[int, tuple[list[BCExample], int, bool]] = {}
    for share, result in zip(shares, results):
        by_episode.update({k: r for (k, _), r in zip(share, result)})
    return _merge_episodes([by_episode[k] for k, _ in jobs])


# ------------------------------------------------------------------------- training


def entity_names() -> tuple[str, ...]:
    """Lower-case names of ALFWorld's portable objects that are not receptacles
    (``alfworld/gen/constants.py``): the names an augmented example may rename."""
    import alfworld.gen.constants as constants

    receptacles = {n.lower() for n in constants.RECEPTACLES}
    names = {n.lower() for n in constants.OBJECTS} - receptacles
    return tuple(sorted(names))


_TOKEN = re.compile(r"\w+")


def rename_entities(prompt: str, action: str, rng: Any, names: Sequence[str], max_number: int = 0) -> tuple[str, str]:
    """Rename the entities of one example consistently (a data augmentation).

    Every name of ``names`` in the example is mapped to a name drawn without replacement from
    ``names``, and (when ``max_number`` > 0) every instance number 1..``max_number`` to a random
    permutation of them, identically in the prompt and the action. The example keeps its
    structure (which listed command the expert chose, which object it names) while the surface
    names change, so the network must read the names from the prompt instead of memorising them.

    Examples
    --------
    >>> import numpy as np
    >>> p, a = rename_entities("you see a mug 1. action:", "take mug 1 from desk 2",
    ...                        np.random.default_rng(0), ["mug", "desk", "apple", "sofa"])
    >>> a.split()[0], a.split()[2] == p.split()[4].rstrip(".")
    ('take', True)
    """
    sub = _renamer(prompt + " " + action, rng, names, max_number)
    return sub(prompt), sub(action)


def _renamer(text: str, rng: Any, names: Sequence[str], max_number: int = 0) -> Callable[[str], str]:
    """The renaming of :func:`rename_entities` drawn for the names found in ``text``, as a
    function to apply to every text of one example."""
    name_set = set(names)
    present = sorted({w.lower() for w in _TOKEN.findall(text)})
    found = [w for w in present if w in name_set]
    drawn = rng.choice(len(names), size=len(found), replace=False) if found else []
    mapping = {w: names[int(i)] for w, i in zip(found, drawn)}
    if max_number > 0:
        perm = rng.permutation(max_number) + 1
        mapping.update({str(n): str(int(perm[n - 1])) for n in range(1, max_number + 1)})

    def sub(text: str) -> str:
        return _TOKEN.sub(lambda m: mapping.get(m.group(0).lower(), m.group(0)), text)

    return sub


_KIND_GOALS = {"simple": "put a {obj} in {recep}.", "clean": "put a clean {obj} in {recep}.",
               "heat": "put a hot {obj} in {recep}.", "cool": "put a cool {obj} in {recep}."}
_TAKE_COMMAND = re.compile(r"^take (?P<obj>\S+) \d+ from ")


def relabel_goal(example: BCExample, rng: Any, names: Sequence[str], *, absent_share: float = 0.5,
                 expert: Callable[..., str] | None = None) -> BCExample | None:
    """The example's state under another goal, labelled by the expert.

    The searching expert is a pure function of what a prompt shows, so any state of a
    demonstration can be labelled under a different goal without touching the engine (hindsight
    relabelling of the goal, as in HER):

    * holding nothing, the new goal names another object that lies here (the label becomes
      ``take`` it) or, for a ``take`` example with probability ``absent_share``, an object that is
      nowhere in sight (the label becomes a search step);
    * holding the object, the new goal names, half of the time, another task kind (``put a hot
      ...``: another appliance, or none), otherwise another receptacle: half of the time the kind
      of place the agent stands at (the label becomes ``move`` it here), else another kind in the
      room (go there).

    Minimal pairs of this kind (same room, same view, the goal alone decides) teach the comparison
    of the goal with what is listed, which the demonstrations alone show a few dozen times.

    Returns ``None`` when the example has no :class:`DemoState`, is not a target (a mistake), its
    goal does not parse, or no other goal fits (nothing else in view; a ``look`` goal in hand).

    Examples
    --------
    >>> import numpy as np
    >>> state = DemoState("put a mug in desk.", "On the shelf 1, you see a pen 1, and a mug 2.",
    ...                   ("go to desk 1", "take mug 2 from shelf 1", "take pen 1 from shelf 1",
    ...                    "examine shelf 1"), (), 2)
    >>> ex = BCExample("...", "take mug 2 from shelf 1", True, state)
    >>> new = relabel_goal(ex, np.random.default_rng(0), ["mug", "pen", "apple"], absent_share=0.0)
    >>> new.state.goal, new.action
    ('put a pen in desk.', 'take pen 1 from shelf 1')
    """
    from creditaudit.replay.searcher import parse_goal

    state = example.state
    if state is None or not example.target:
        return None
    parsed = parse_goal(state.goal)
    if parsed is None:
        return None
    if any(a.startswith("move ") for a in state.admissible):
        if parsed.recep is None:
            return None
        # Holding the object: the goal's receptacle is another kind of place in this room.
        kinds = sorted({a[len("go to "):].rsplit(" ", 1)[0] for a in state.admissible if a.startswith("go to ")}
                       - {parsed.recep})
        here = sorted({a.rsplit(" to ", 1)[1].rsplit(" ", 1)[0] for a in state.admissible if a.startswith("move ")}
                      - {parsed.recep})
        if not kinds and not here:
            return None
        # Half of the time the place the agent stands at (the label becomes ``move`` it here).
        pool = here if here and (not kinds or rng.random() < 0.5) else kinds
        new_recep = pool[int(rng.integers(len(pool)))]
        if parsed.kind in _KIND_GOALS and rng.random() < 0.5:
            # Another task kind (the appliance to use changes, or none is needed).
            kind = [k for k in _KIND_GOALS if k != parsed.kind][int(rng.integers(len(_KIND_GOALS) - 1))]
            goal = _KIND_GOALS[kind].format(obj=parsed.obj, recep=parsed.recep)
        else:
            goal = re.sub(rf"\b{re.escape(parsed.recep)}\b", new_recep, state.goal, count=1, flags=re.IGNORECASE)
        return _relabelled(state, goal, rng, expert)
    present = sorted({m.group("obj") for a in state.admissible if (m := _TAKE_COMMAND.match(a))} - {parsed.obj})
    seen = {w.lower() for w in _TOKEN.findall(state.observation)}
    if example.action.startswith("take ") and rng.random() < absent_share:
        present = [n for n in names if n not in seen and n != parsed.obj]
    if not present:
        return None
    new_obj = present[int(rng.integers(len(present)))]
    goal = re.sub(rf"\b{re.escape(parsed.obj)}\b", new_obj, state.goal, count=1, flags=re.IGNORECASE)
    return _relabelled(state, goal, rng, expert)


def _relabelled(state: DemoState, goal: str, rng: Any, expert: Callable[..., str] | None) -> BCExample:
    from creditaudit.replay.searcher import expert_action

    label = (expert or expert_action)(goal, state.observation, state.admissible, state.history, rng)
    builder = PromptBuilder(None, history_length=state.history_length)
    new_state = DemoState(goal, state.observation, state.admissible, state.history, state.history_length)
    return BCExample(builder.build(goal, state.observation, state.admissible, state.history), label, True, new_state)


class _DrawRecorder:
    """Stands in for the expert's random generator: draws with ``rng`` and keeps the
    probabilities of the draw (the expert draws only when it searches)."""

    def __init__(self, rng: Any):
        self.rng = rng
        self.p: list[float] | None = None

    def choice(self, n: int, p: Sequence[float]) -> Any:
        self.p = [float(x) for x in p]
        return self.rng.choice(n, p=self.p)


def expert_search(state: DemoState, rng: Any, expert: Callable[..., str] | None = None) -> tuple[str, dict[str, float] | None]:
    """The expert's action in ``state`` (drawn with ``rng``) and, when that action is a search
    step, the whole distribution it was drawn from, ``{place: probability}`` (places of zero
    probability left out); ``None`` for a decision the expert takes deterministically.

    Examples
    --------
    >>> import numpy as np
    >>> state = DemoState("put a mug in desk.", "You arrive at shelf 1.",
    ...                   ("go to cabinet 1", "go to desk 1", "go to sofa 1", "examine shelf 1"), (), 2)
    >>> action, dist = expert_search(state, np.random.default_rng(0))
    >>> sorted(dist), action[len("go to "):] in dist
    (['cabinet 1', 'desk 1', 'sofa 1'], True)
    """
    from creditaudit.replay.searcher import expert_action

    recorder = _DrawRecorder(rng)
    action = (expert or expert_action)(state.goal, state.observation, state.admissible, state.history, recorder)
    if recorder.p is None:
        return action, None
    places = [a[len("go to "):] for a in state.admissible if a.startswith("go to ")]
    if len(places) != len(recorder.p):
        raise ValueError("the expert drew among something other than the `go to` commands")
    return action, {place: q for place, q in zip(places, recorder.p) if q > 0}


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


def _length_bucketed_batches(lengths: Sequence[int], batch_size: int, rng: Any) -> list[list[int]]:
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


def _split_at_goal(prompt: str) -> tuple[str, str] | None:
    """``(prefix, goal part)`` of a plain-template prompt: everything up to the ``task:`` line, and
    the rest (the goal line and the action cue). ``None`` when the prompt has no such line."""
    at = prompt.rfind(_TASK_LINE)
    return None if at < 0 else (prompt[: at + 1], prompt[at + 1 :])


def _place_tokens(tokenizer: Any, place: str, cache: dict[str, tuple[int, int] | None]) -> tuple[int, int] | None:
    """``(kind id, number id)`` of a place name such as ``cabinet 3``; ``None`` unless it is
    exactly two known words."""
    if place not in cache:
        ids = list(tokenizer(place, add_special_tokens=False)["input_ids"])
        cache[place] = (ids[0], ids[1]) if len(ids) == 2 and tokenizer.unk_token_id not in ids else None
    return cache[place]


def _search_soft_targets(tokenizer: Any, action_ids: Sequence[int], dist: dict[str, float],
                         cache: dict[str, tuple[int, int] | None]) -> list[tuple[int, list[int], list[float]]] | None:
    """Soft targets of a ``go to <kind> <number>`` search step: at the kind word, the expert's
    probability of each kind (summed over its places); at the number, the expert's probability of
    each place of the drawn kind, renormalised. Together they are the cross-entropy against the
    expert's whole distribution over places (the number's term for the kind drawn, an unbiased
    estimate of the rest), instead of against one draw from it. ``(offset in the action, ids,
    probabilities)`` pairs; ``None`` when the names do not tokenize as two words."""
    tokens = {place: _place_tokens(tokenizer, place, cache) for place in dist}
    if len(action_ids) != 4 or any(t is None for t in tokens.values()):
        return None
    kind_id = action_ids[2]
    kinds: dict[int, float] = {}
    numbers: dict[int, float] = {}
    for place, q in dist.items():
        k, num = tokens[place]
        kinds[k] = kinds.get(k, 0.0) + q
        if k == kind_id:
            numbers[num] = numbers.get(num, 0.0) + q
    if kind_id not in kinds or action_ids[3] not in numbers:
        return None
    total_k, total_n = sum(kinds.values()), sum(numbers.values())
    return [(2, list(kinds), [q / total_k for q in kinds.values()]),
            (3, list(numbers), [q / total_n for q in numbers.values()])]


def _packed_row(tokenizer: Any, prefix: str, branches: Sequence[tuple[str, str] | tuple[str, str, Any]],
                cache: dict[str, tuple[int, int] | None] | None = None) -> tuple[list[int], ...] | None:
    """One training row holding a shared prompt prefix and several (goal part, action) branches.

    A branch may carry a third item, the expert's search distribution ``{place: probability}``
    (:func:`expert_search`): its place's words then get soft targets
    (:func:`_search_soft_targets`).

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
        targets = _search_soft_targets(tokenizer, a_ids, dist, cache) if dist else None
        for offset, t_ids, probs in targets or ():
            labels[start + offset] = -100
            soft.append((start + offset, t_ids, probs))
    return ids, pos, branch_of, labels, soft


def _renamed_state(state: DemoState, sub: Callable[[str], str]) -> DemoState:
    return DemoState(sub(state.goal), sub(state.observation), tuple(sub(a) for a in state.admissible),
                     tuple((sub(o), sub(a)) for o, a in state.history), state.history_length)


def _packed_batch(tokenizer: Any, rows: Sequence[BCExample], rng: Any, names: Sequence[str], *, goal_variants: int,
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
        split = _split_at_goal(ex.prompt)
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
                b_split = _split_at_goal(b.prompt)
                if b_split is None or b_split[0] != prefix:
                    continue
                kept.append((b_split[1], b.action, b.state))
        sub = None
        if rename and rng.random() < augment_share:
            sub = _renamer(" ".join([prefix] + [g + " " + a for g, a, _ in kept]), rng, names, max_number)
            prefix = sub(prefix)
        parts = []
        for goal_part, action, state in kept:
            if sub is not None:
                goal_part, action = sub(goal_part), sub(action)
            dist = None
            if search_targets and state is not None and action.startswith("go to "):  # a search step goes
                drawn, dist = expert_search(state if sub is None else _renamed_state(state, sub), rng)
                if dist is not None:
                    action = drawn
            parts.append((goal_part, action, dist))
        row = _packed_row(tokenizer, prefix, parts, cache)
        if row is None:  # the split tokenizes differently: the example alone
            row = _packed_row(tokenizer, ex.prompt, [("", ex.action)], cache)
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
        :class:`DemoState`, packed with it in one row (:func:`_packed_batch`); the renaming
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
        for batch_rows in _length_bucketed_batches(lengths, batch_size, rng):
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
    """Mean action-token cross-entropy of one batch of packed rows (:func:`_packed_batch`): hard
    labels, and soft targets where the batch has them (each counts as one token)."""
    import torch

    ids, mask, positions, labels, soft = _packed_batch(tokenizer, rows, rng, names, **packing)
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


# ------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class PolicyEvaluation:
    """Success and admissibility of a policy's sampled rollouts on a set of games.

    Attributes
    ----------
    episodes : int
        Rollouts played.
    successes : int
        Rollouts that won before the horizon.
    steps : int
        Actions taken in all rollouts.
    admissible_steps : int
        Actions that were in the admissible list of the state they were taken in.
    temperature : float
    per_task : dict
        ``{task_id: [won, ...]}`` per rollout.
    """

    episodes: int
    successes: int
    steps: int
    admissible_steps: int
    temperature: float
    per_task: dict[str, list[bool]]

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    @property
    def admissible_rate(self) -> float:
        return self.admissible_steps / self.steps if self.steps else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "steps": self.steps,
            "admissible_steps": self.admissible_steps,
            "admissible_rate": self.admissible_rate,
            "temperature": self.temperature,
        }


def evaluate_policy(
    policy: Any,
    tasks: Sequence[Any],
    *,
    env_factory: Callable[[], Any],
    seed: int | str,
    temperature: float = 0.7,
    rollouts_per_task: int = 1,
    n_envs: int = 8,
    progress: Callable[[str, int, int], None] | None = None,
) -> PolicyEvaluation:
    """Roll out ``policy`` on ``tasks`` and measure its success and admissible-action rates.

    Parameters
    ----------
    policy : HFPolicy (or any ActionPolicy)
    tasks : sequence of Task (or GeneratedGame)
    env_factory : callable
        Makes one environment instance (its ``horizon`` ends an episode); ``n_envs`` are made and
        closed.
    seed : int or str
        Root of the rollout seeds: the action of rollout ``r`` of task ``i`` at step ``t`` is
        sampled with ``seed_int(str(seed), "policy/eval/<i>/<r>/<t>")``, so results do not depend
        on ``n_envs`` or on how rollouts are batched.
    temperature : float, default 0.7
    rollouts_per_task : int, default 1
    n_envs : int, default 8
        Rollouts played in lockstep (one environment each), sampled in one batch per step.
    progress : callable, optional
        ``progress("evaluate", episodes_done, episodes_total)``.
    """
    tasks = [_task_of(t) for t in tasks]
    jobs = [(i, r) for i in range(len(tasks)) for r in range(rollouts_per_task)]
    root = f"policy-eval:{seed}"
    builder = policy.prompt_builder
    per_task: dict[str, list[bool]] = {t.task_id: [] for t in tasks}
    results: dict[tuple[int, int], bool] = {}
    steps = admissible_steps = 0
    envs = [env_factory() for _ in range(max(1, min(n_envs, len(jobs))))]
    try:
        for wave in range(0, len(jobs), len(envs)):
            live = []
            for env, job in zip(envs, jobs[wave : wave + len(envs)]):
                obs = env.reset(tasks[job[0]])
                live.append({"env": env, "job": job, "goal": obs.goal, "text": obs.text,
                             "admissible": tuple(obs.admissible), "history": [], "t": 0})
            while live:
                prompts = [builder.build(s["goal"], s["text"], s["admissible"], s["history"]) for s in live]
                seeds = [
                    seed_streams.seed_int(root, f"policy/eval/{s['job'][0]}/{s['job'][1]}/{s['t']}") for s in live
                ]
                actions = policy.sample(prompts, seeds=seeds, temperature=temperature,
                                        **candidate_kwargs(policy, [s["admissible"] for s in live]))
                still = []
                for s, a in zip(live, actions):
                    steps += 1
                    admissible_steps += a.text in s["admissible"]
                    result = s["env"].step(a.text)
                    s["history"].append((s["text"], a.text))
                    s["text"], s["admissible"], s["t"] = result.text, tuple(result.admissible), s["t"] + 1
                    if result.done:
                        results[s["job"]] = bool(result.won)
                        if progress is not None:
                            progress("evaluate", len(results), len(jobs))
                    else:
                        still.append(s)
                live = still
    finally:
        for env in envs:
            env.close()
    for (i, r) in jobs:
        per_task[tasks[i].task_id].append(results[(i, r)])
    return PolicyEvaluation(
        episodes=len(jobs),
        successes=sum(results.values()),
        steps=steps,
        admissible_steps=admissible_steps,
        temperature=float(temperature),
        per_task=per_task,
    )


# ------------------------------------------------------------------------- the build

BUILD_FORMAT_VERSION = 5
"""Version of the build recipe; bumped whenever the same seed would give different weights."""
BUILD_RECORD = "creditaudit_policy.json"
"""Build record written beside the model (not part of the policy's identity hashes)."""
DEFAULT_HELD_OUT_GAMES = 24
"""Held-out games generated to measure a built policy (4 per task type)."""
BUILD_THREADS = max(1, min(2, os.cpu_count() or 1))
"""Torch threads during the build: fixed, because the reduction order of CPU kernels (and so the
last bits of the weights) may depend on the thread count (the default recipe measured
byte-identical weights with one and two threads); two where there are two cores: training took
179 s instead of 266 s on an otherwise idle 2-core machine. A second thread that must wait for a
core another process keeps busy slows training several-fold (0.4 s -> 3 s a step measured), so
pass ``threads=1`` when the machine is shared."""

CONTEXT_LOSS_WEIGHT = 0.0
"""Weight of the auxiliary next-token loss on prompt tokens (see :func:`train_behaviour_cloning`)."""

_BUILD_FIELDS = ("seed", "hidden_size", "num_layers", "num_heads", "train_games", "passes", "noise_rate", "epochs",
                 "learning_rate", "decisive_repeats", "augment_share", "goal_variants", "train_dtype",
                 "search_targets")
AUGMENT_NUMBERS = 9
"""Instance numbers 1..9 are permuted by the renaming augmentation (ALFWorld rooms rarely hold
more than nine of a kind; higher numbers keep their names)."""
DEMO_HORIZON = 30
"""Steps a demonstration episode may take. The expert wins about nine games in ten within 30
steps; what it plays after that is more of the same memoryless search, which adds training time
and teaches nothing new. (The protocol's horizon, 50 by default, is what the policy is measured
at.)"""
EVAL_HORIZON = 50
"""Horizon of the build's held-out evaluation when no protocol gives one: the protocol's default,
ALFWorld's customary 50-step limit."""


DEMO_WORKERS = max(1, min(2, os.cpu_count() or 1))
"""Default processes for the demonstrations (each runs its own engine)."""


def _alfworld_env(horizon: int) -> Any:
    """A real-engine ALFWorld environment (module level, so worker processes can rebuild it)."""
    from creditaudit.replay.alfworld_env import AlfworldEnv

    return AlfworldEnv(horizon=horizon)


def _task_of(game: Any) -> Any:
    """The ``Task`` of a generated game (or the task itself)."""
    from creditaudit.replay.env import Task

    return game if isinstance(game, Task) else game.task


def _build_args(build: Any) -> dict[str, Any]:
    """The build settings as a plain dict; a mapping is validated by ``PolicyBuild`` (its
    missing fields take the schema's defaults, a wrong name or type is refused)."""
    from pydantic import ValidationError

    from creditaudit.protocol.schema import PolicyBuild

    if build is None:
        build = PolicyBuild()
    elif not hasattr(build, "model_dump"):
        if not isinstance(build, dict):
            build = {k: getattr(build, k) for k in _BUILD_FIELDS if hasattr(build, k)}
        try:
            build = PolicyBuild(**build)
        except ValidationError as exc:
            raise InputError(f"policy build settings are invalid: {exc}") from None
    dumped = build.model_dump()
    return {k: dumped[k] for k in _BUILD_FIELDS}


def _stream_root(seed: int) -> str:
    return f"creditaudit-policy-build-v{BUILD_FORMAT_VERSION}:{int(seed)}"


def generate_build_games(out_dir: str | Path, n: int, *, seed: int, purpose: str, env: Any = None,
                         progress: Callable[[str, int, int], None] | None = None, workers: int = 1) -> list[Any]:
    """``n`` verified generated games for a build, from the build seed's stream ``policy/<purpose>``.

    Games are generated round-robin over the six task types (``ceil(n / 6)`` per type) and the
    first ``n`` in type-interleaved order are returned, so every type is represented. Games
    already written there by the same seed are reused (the generator resumes). ``workers`` engine
    processes verify them when ``env`` is not given (the games do not depend on it).
    """
    from creditaudit.replay.alfworld_games import TASK_TYPES, generate_games

    per_type = -(-n // len(TASK_TYPES))
    report = generate_games(
        Path(out_dir) / purpose,
        games_per_type=per_type,
        rng=seed_streams.rng(_stream_root(seed), f"policy/{purpose}"),
        env=env,
        progress=None if progress is None else (lambda d, t, g: progress(f"generate/{purpose}", d, t)),
        workers=workers,
    )
    by_type: dict[str, list[Any]] = {}
    for g in report.games:
        by_type.setdefault(g.task_type, []).append(g)
    interleaved = [by_type[t][k] for k in range(per_type) for t in TASK_TYPES if k < len(by_type.get(t, []))]
    return interleaved[:n]


class _Deterministic:
    """Deterministic torch algorithms and a fixed thread count for the duration of a build."""

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        import torch

        self._prev = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self._prev[0])
        torch.use_deterministic_algorithms(self._prev[1])


def build_default_policy(
    out_dir: str | Path,
    build: Any = None,
    *,
    train_games: Sequence[Any] | None = None,
    held_out_games: Sequence[Any] | None = None,
    games_dir: str | Path | None = None,
    env_factory: Callable[[], Any] | None = None,
    history_length: int = 2,
    evaluate: bool = True,
    eval_temperature: float = 0.7,
    eval_rollouts: int = 1,
    eval_horizon: int = EVAL_HORIZON,
    n_held_out: int = DEFAULT_HELD_OUT_GAMES,
    threads: int = BUILD_THREADS,
    decoding: str = "admissible",
    context_weight: float = CONTEXT_LOSS_WEIGHT,
    demo_workers: int = DEMO_WORKERS,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Build, save and (optionally) measure the embedded default policy.

    Parameters
    ----------
    out_dir : path
        Model directory to write (``save_pretrained`` of the model and the tokenizer, plus
        :data:`BUILD_RECORD`).
    build : PolicyBuild or mapping, optional
        ``seed, hidden_size, num_layers, num_heads, train_games, noise_rate, epochs,
        learning_rate`` (the protocol's ``policy.build``; its defaults when ``None``).
    train_games : sequence of GeneratedGame, optional
        Games the expert is demonstrated on (``build.passes`` episodes each); generated from the
        build seed when ``None``
        (``build.train_games`` of them, under ``games_dir``).
    held_out_games : sequence of GeneratedGame, optional
        Games the built policy is measured on; ``n_held_out`` are generated from the build seed's
        own held-out stream when ``None`` and ``evaluate`` is true.
    games_dir : path, optional
        Where generated games are written (a temporary directory when ``None``).
    env_factory : callable, optional
        ``env_factory(horizon)`` makes an environment; ALFWorld's by default.
    history_length : int, default 2
        Turns of history in the training prompts (use the protocol's ``policy.history_length``).
    evaluate : bool, default True
        Measure the saved policy, loaded back through :func:`~creditaudit.replay.policy.load_policy`.
    eval_temperature, eval_rollouts : float, int
        Sampling temperature and rollouts per held-out game.
    eval_horizon : int, default 50
        Steps per held-out episode (use the protocol's ``environment.horizon``).
    decoding : {"admissible", "constrained", "free"}, default "admissible"
        How the built policy is evaluated (the protocol's ``policy.decoding``).
    threads : int, default min(2, CPUs)
        Torch threads during the build (see :data:`BUILD_THREADS`: pass 1 on a machine whose other
        core is busy).
    context_weight : float, default 0.0
        Auxiliary prompt-token loss weight (see :func:`train_behaviour_cloning`).
    demo_workers : int, default min(2, CPUs)
        Processes generating the games and playing the demonstrations on ALFWorld (only with the
        default ``env_factory``; the result does not depend on it). They are started with ``spawn``: a script that calls
        this must do so under ``if __name__ == "__main__":`` (or pass 1), as with
        ``multiprocessing`` anywhere.
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    dict
        ``files`` (:func:`~creditaudit.replay.policy.policy_file_hashes` of ``out_dir``),
        ``build``, ``vocab_size``, ``parameters``, ``demonstrations``, ``training``,
        ``evaluation`` (``success_rate``, ``admissible_rate`` ...; ``None`` when not evaluated),
        ``timings_s`` (wall-clock seconds per stage; not written to any file).

    Notes
    -----
    Streams of the build (root ``creditaudit-policy-build-v1:<seed>``): ``policy/train-games``,
    ``policy/held-out-games``, ``policy/demo/<episode>``, ``policy/init``, ``policy/order``; the
    evaluation samples with ``policy-eval:<seed>`` streams. Same seed, same games, same thread
    count and same torch build give byte-identical weight files.
    """
    import tempfile

    import torch

    from creditaudit.replay.policy import load_policy, policy_file_hashes

    args = _build_args(build)
    seed = int(args["seed"])
    root = _stream_root(seed)
    out = Path(out_dir)
    timings: dict[str, float] = {}
    parallel = env_factory is None and demo_workers > 1
    if env_factory is None:
        env_factory = _alfworld_env

    tmp = None
    if games_dir is None and (train_games is None or (evaluate and held_out_games is None)):
        tmp = tempfile.TemporaryDirectory(prefix="creditaudit-policy-games-")
        games_dir = tmp.name
    try:
        with _Deterministic(threads):
            t0 = time.perf_counter()
            env = env_factory(DEMO_HORIZON)
            try:
                if train_games is None:
                    train_games = generate_build_games(games_dir, int(args["train_games"]), seed=seed,
                                                       purpose="train-games", env=None if parallel else env,
                                                       progress=progress, workers=demo_workers)
                timings["generate"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                if evaluate and held_out_games is None:
                    held_out_games = generate_build_games(games_dir, n_held_out, seed=seed,
                                                          purpose="held-out-games", env=None if parallel else env,
                                                          progress=progress, workers=demo_workers)
                timings["generate_held_out"] = time.perf_counter() - t0

                t0 = time.perf_counter()
                if not parallel:
                    demos = noisy_demonstrations(
                        [_task_of(g) for g in train_games],
                        env,
                        noise_rate=float(args["noise_rate"]),
                        history_length=history_length,
                        passes=int(args["passes"]),
                        rng_for=lambda i: _demo_rng(root, i),
                    )
            finally:
                env.close()
            if parallel:
                # The engine, not torch, is the cost here: one engine per core (same result for
                # any number of workers).
                demos = parallel_demonstrations(
                    [_task_of(g) for g in train_games], functools.partial(_alfworld_env, DEMO_HORIZON), root=root,
                    noise_rate=float(args["noise_rate"]), history_length=history_length,
                    passes=int(args["passes"]), workers=demo_workers,
                )
            timings["demonstrations"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            texts = [ex.prompt for ex in demos.examples] + [ex.action for ex in demos.examples]
            vocabulary = build_vocabulary(texts)
            tokenizer = build_tokenizer(vocabulary)
            model = build_model(
                len(vocabulary), tokenizer,
                hidden_size=int(args["hidden_size"]), num_layers=int(args["num_layers"]),
                num_heads=int(args["num_heads"]), init_seed=seed_streams.seed_int(root, "policy/init"),
            )
            training = train_behaviour_cloning(
                model, tokenizer, demos.examples,
                epochs=int(args["epochs"]), learning_rate=float(args["learning_rate"]),
                rng=seed_streams.rng(root, "policy/order"), context_weight=context_weight, progress=progress,
                decisive_repeats=int(args["decisive_repeats"]), augment=float(args["augment_share"]) > 0,
                augment_share=float(args["augment_share"]), max_number=AUGMENT_NUMBERS,
                goal_variants=int(args["goal_variants"]),
                search_targets=args["search_targets"] == "distribution",
                autocast=None if args["train_dtype"] == "float32" else str(args["train_dtype"]),
            )
            timings["train"] = time.perf_counter() - t0
            out.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
        files = policy_file_hashes(out)
        record = {
            "format_version": BUILD_FORMAT_VERSION,
            "build": args,
            "history_length": history_length,
            "vocab_size": len(vocabulary),
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "train_games": [_task_of(g).task_id for g in train_games],
            "demonstrations": {
                "examples": len(demos.examples),
                "targets": sum(ex.target for ex in demos.examples),
                "mistakes": demos.mistakes,
                "episodes": demos.episodes,
                "episodes_won": demos.episodes_won,
            },
            "training": training,
            "threads": threads,
            "context_weight": context_weight,
            "torch_version": torch.__version__,
        }
        evaluation = None
        if evaluate:
            t0 = time.perf_counter()
            policy = load_policy(out, device="cpu", history_length=history_length, decoding=decoding)
            with _Deterministic(threads):
                result = evaluate_policy(
                    policy, held_out_games, env_factory=lambda: env_factory(eval_horizon), seed=seed,
                    temperature=eval_temperature, rollouts_per_task=eval_rollouts, progress=progress,
                )
            evaluation = {**result.to_dict(), "games": [_task_of(g).task_id for g in held_out_games],
                          "horizon": eval_horizon}
            timings["evaluate"] = time.perf_counter() - t0
        record["evaluation"] = evaluation
        (out / BUILD_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return {**record, "files": files, "timings_s": timings}
    finally:
        if tmp is not None:
            tmp.cleanup()
