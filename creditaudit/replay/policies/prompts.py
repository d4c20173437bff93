"""Prompt text: :class:`PromptBuilder` turns a decision point into the prompt after which an action
is sampled or scored, and :func:`format_hindsight` writes the outcome HCAPO's hindsight scoring
injects.

The first line, the instruction, is the environment's (its plugin's
:class:`~creditaudit.replay.envs.PromptText`: what the task is, what the commands look like); nothing
about any particular environment is written here. A decision point is the task goal, the last ``history_length`` (observation, action) turns, the
current observation and the admissible commands (and optionally a hindsight outcome). The prompt
goes through the tokenizer's chat template when it has one and a plain template otherwise;
:attr:`PromptBuilder.template_hash` pins the template (``prompt_template_sha256`` of every
collected turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_hash
from creditaudit.protocol.inputs import chat_template_sha256
from creditaudit.replay.policies.base import Turn

__all__ = ["PROMPT_FORMAT_VERSION", "GENERIC_INSTRUCTION", "PromptBuilder", "format_hindsight"]

PROMPT_FORMAT_VERSION = 1
"""Version of the prompt format; part of every prompt template hash."""


def format_hindsight(final_observation: str, won: bool) -> str:
    """The outcome text HCAPO injects for hindsight scoring.

    Examples
    --------
    >>> format_hindsight("You put the apple 1 in the fridge 1.", True)
    'the task was completed successfully. final observation: You put the apple 1 in the fridge 1.'
    """
    verdict = "the task was completed successfully" if won else "the task was not completed"
    return f"{verdict}. final observation: {' '.join(final_observation.split())}"


#: The instruction of a builder made without an environment's (tests, tools that show no environment).
GENERIC_INSTRUCTION = "You are an agent in a text environment. Reply with exactly one admissible action."

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
# The body when the admissible commands are not listed (``list_admissible=False``: an environment
# with hundreds of commands per state, such as ScienceWorld, whose list would be most of the prompt;
# under ``decoding: admissible`` the policy still draws among them).
_BODY_TEMPLATE_UNLISTED = (
    "{instruction}\n"
    "{history}"
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


class PromptBuilder:
    """Builds the prompt of one decision point.

    Parameters
    ----------
    tokenizer : transformers tokenizer, optional
        Its ``chat_template`` is used when it has one (and ``use_chat_template`` allows it).
    instruction : str, optional
        The prompt's first line: the environment's ``PromptText.instruction`` (the protocol's
        environment plugin supplies it); :data:`GENERIC_INSTRUCTION` when not given.
    history_length : int, default 2
        Past (observation, action) turns shown, most recent last; 0 shows none.
    use_chat_template : {"auto", True, False}, default "auto"
        ``"auto"`` uses the tokenizer's chat template when it has one; ``True`` requires one;
        ``False`` always uses the plain template.
    list_admissible : bool, default True
        List the admissible commands in the prompt (the protocol's ``policy.list_admissible``);
        False leaves the line out.

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

    def __init__(self, tokenizer: Any = None, *, history_length: int = 2, use_chat_template: bool | str = "auto",
                 instruction: str | None = None, list_admissible: bool = True):
        if not isinstance(list_admissible, bool):
            raise ValueError(f"`list_admissible` must be True or False; got {list_admissible!r}")
        self.list_admissible = list_admissible
        if instruction is None:
            instruction = GENERIC_INSTRUCTION
        if not isinstance(instruction, str) or not instruction.strip() or "\n" in instruction:
            raise ValueError(f"`instruction` must be one non-empty line of text; got {instruction!r}")
        self.instruction = instruction
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
            "instruction": self.instruction,
            "body": _BODY_TEMPLATE,
            "history": _HISTORY_TEMPLATE,
            "hindsight": _HINDSIGHT_TEMPLATE,
            "admissible_separator": _ADMISSIBLE_SEPARATOR,
            "plain_cue": _PLAIN_CUE if self.mode == "plain" else None,
            "chat_template_sha256": chat_template_sha256(self.chat_template),
            "history_length": self.history_length,
            # only when not the default, so every earlier template keeps its hash
            **({} if self.list_admissible else {"body": _BODY_TEMPLATE_UNLISTED, "list_admissible": False}),
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
        return (_BODY_TEMPLATE if self.list_admissible else _BODY_TEMPLATE_UNLISTED).format(
            instruction=self.instruction,
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
