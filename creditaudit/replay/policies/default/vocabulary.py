"""The default policy's words: the vocabulary of the ALFWorld environment and the word-level
tokenizer built over it (no download: everything comes from the ``alfworld`` package, the
generated games' texts and the prompt template).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from creditaudit.replay.policies.prompts import PromptBuilder, format_hindsight

__all__ = [
    "PAD_TOKEN",
    "EOA_TOKEN",
    "UNK_TOKEN",
    "NEWLINE_TOKEN",
    "SPECIAL_TOKENS",
    "words_from_texts",
    "environment_words",
    "build_vocabulary",
    "build_tokenizer",
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
    from creditaudit.replay.envs.alfworld.env import ALFWORLD_PROMPT

    builder = PromptBuilder(None, instruction=ALFWORLD_PROMPT.instruction)
    words |= words_from_texts([builder.build("g", "o", ["a", "b"], [("o", "a")], hindsight="h")])
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


def build_tokenizer(vocabulary: Sequence[str], *, model_max_length: int = 4096, added_words: Sequence[str] = ()):
    """A word-level ``PreTrainedTokenizerFast`` over ``vocabulary``.

    Lower-cases, splits on whitespace and punctuation (a line break is a token of its own when
    the vocabulary has it), maps unknown words to ``<unk>``, and decodes by joining words with
    single spaces (so an action decodes to its command text).
    ``<eoa>`` is the end-of-sequence token and ``<pad>`` the padding token. No chat template:
    prompts use the plain template.

    ``added_words`` (each also in ``vocabulary``) are matched on the raw text as whole words
    before pre-tokenization, so a phrase such as ``turn 7`` becomes one token (the embedded judge
    model's turn markers); none by default.
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
    missing = [w for w in added_words if w not in vocabulary]
    if missing:
        raise ValueError(f"`added_words` must be in `vocabulary`; missing {missing[:3]}")
    if added_words:
        tok.add_tokens([AddedToken(w, normalized=False, single_word=True, special=False) for w in added_words])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOA_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
