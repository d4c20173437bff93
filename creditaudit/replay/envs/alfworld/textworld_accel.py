"""Two shortcuts in textworld's text generation (and a memo of its per-state infos) that change
nothing the engine produces, and the textworld versions they were checked against.

textworld derives every observation and every admissible command from grammar templates. It
parses each template string with a TatSu (PEG) parser on every use, and deep-copies the
derivation context (entity records and variable bindings) at every symbol: together about 85% of
a step's time. :func:`accelerate_textworld` (applied when :class:`~creditaudit.replay.envs.alfworld.env.AlfworldEnv`
loads an engine) keeps the parsed form of each distinct string and hands out deep copies of it,
copies a context's binding tables without cloning the entity records in them (the grammar only
reads them), and keeps what ``PddlEnv._gather_infos`` derives after each step (the admissible
commands' text) per planner state, which replay revisits often. The engine's output is
unchanged: a test plays the same commands, restores and revisits with and without it and
compares every observation, admissible list and state signature.

The shortcuts replace private functions of textworld (``textworld.envs.pddl.textgen``,
``textworld.logic``, ``textworld.envs.pddl.pddl.PddlEnv``), so they are applied only to the
textworld versions in :data:`TESTED_TEXTWORLD`: the equivalence test ran on 1.7.0, and 1.6.2's
``textworld/envs/pddl`` and ``textworld/logic`` sources are identical to 1.7.0's (both pin
``tatsu==5.8.3``). Any other installed version is refused with an :class:`~creditaudit.errors.InputError`
rather than patched blind.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from creditaudit.errors import InputError

__all__ = ["TESTED_TEXTWORLD", "PARSE_MEMO_SIZE", "accelerate_textworld", "textworld_shortcuts", "textworld_version"]

TESTED_TEXTWORLD = ("1.6.2", "1.7.0")
"""textworld versions whose internals :func:`accelerate_textworld` was checked against (keep
``pyproject.toml``'s bound on textworld in step with it)."""

#: Distinct template strings kept parsed per parser (a generated game uses a few thousand).
PARSE_MEMO_SIZE = 1 << 16
_SHORTCUTS = {"enabled": True}
#: What ``PddlEnv._gather_infos`` computes from the planner state alone (its memo's content).
_STATE_INFOS = ("command_templates", "won", "lost", "_entity_infos", "_facts", "facts", "_valid_actions",
                "_valid_commands", "admissible_commands")


@lru_cache(maxsize=1)
def textworld_version() -> str:
    """The installed textworld distribution's version (``importlib.metadata``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("textworld")
    except PackageNotFoundError:
        import textworld

        return str(getattr(textworld, "__version__", "unknown"))


def _check_textworld_version() -> None:
    installed = textworld_version()
    if installed not in TESTED_TEXTWORLD:
        raise InputError(
            f"textworld {installed} is installed, but creditaudit's ALFWorld engine patches textworld internals "
            f"and was tested with textworld {' and '.join(TESTED_TEXTWORLD)} only; install a tested version "
            f"(pip install 'textworld=={TESTED_TEXTWORLD[-1]}'), or check the shortcuts against {installed} "
            "(tests/replay/envs/alfworld/test_env.py) and add it to TESTED_TEXTWORLD in "
            "creditaudit/replay/envs/alfworld/textworld_accel.py"
        )


def accelerate_textworld() -> None:
    """Two shortcuts in textworld's text generation that change nothing it produces.

    * Memoised parsers: ``textworld.envs.pddl.textgen`` and ``textworld.logic`` parse strings
      through a module-level ``_parse_and_convert(text, rule_name=...)`` that returns freshly
      built objects the caller then mutates (contexts are attached to the symbols). The memo
      keeps one parsed object per distinct call and returns a deep copy of it, which is what a
      fresh parse returns.
    * ``textgen.copy_context`` deep-copies the ``variables`` (placeholder -> the environment's
      own entity records) and ``mapping`` (placeholder -> logic variable) tables of a derivation
      context at every symbol. The grammar only reads the records and variables, and only ever
      adds entries to a copied table, so copying the tables one level deep is equivalent.

    * ``PddlEnv._gather_infos`` re-derives, after every step, the command text of every
      applicable action through the grammar (most of a step's time). What it computes -- the
      goal test, the fact list, the applicable actions and their commands, and the planner's
      operator table that the next ``apply`` reads -- is a function of the planner state, which
      the planner's state registry names by an id. The memo keeps them per state id, for one
      ``PddlState`` (a load or reset starts a new one), and hands out fresh list copies; what
      belongs to the step (the last action, the move count) is always set anew.

    Idempotent; :func:`textworld_shortcuts` switches all three off (for the equivalence test).

    Raises
    ------
    InputError
        When the installed textworld is not one of :data:`TESTED_TEXTWORLD`.
    """
    _check_textworld_version()
    import textworld.envs.pddl.pddl as pddl
    import textworld.envs.pddl.textgen as textgen

    if not getattr(pddl.PddlEnv._gather_infos, "_creditaudit_memo", False):
        original_gather = pddl.PddlEnv._gather_infos

        def _gather_infos(self: Any, _gather=original_gather) -> None:
            infos = self.request_infos
            if not _SHORTCUTS["enabled"] or infos.policy_commands:  # a replan is not a state function here
                return _gather(self)
            ps = self._pddl_state
            owner, memo = self.__dict__.get("_creditaudit_infos", (None, None))
            if owner is not ps:
                memo = {}
                self._creditaudit_infos = (ps, memo)
            state_id = int(self.downward_lib.get_state_id())
            entry = memo.get(state_id)
            if entry is None:
                _gather(self)
                entry = memo[state_id] = (
                    {k: self.state[k] for k in _STATE_INFOS if k in self.state}, dict(ps._operators),
                )
            else:
                for key, value in entry[0].items():
                    self.state[key] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
                ps._operators = dict(entry[1])
                self.state["last_action"] = None
                self.state["_last_action"] = self._last_action
                if infos.moves:
                    self.state["moves"] = self._moves

        _gather_infos._creditaudit_memo = True  # type: ignore[attr-defined]
        _gather_infos.__wrapped__ = original_gather  # type: ignore[attr-defined]
        pddl.PddlEnv._gather_infos = _gather_infos
    import textworld.logic as logic

    if not getattr(textgen.copy_context, "_creditaudit_shortcut", False):
        original_copy = textgen.copy_context

        def copy_context(context: dict, _copy=original_copy) -> dict:
            if not _SHORTCUTS["enabled"]:
                return _copy(context)
            return {
                "state": context["state"],
                "facts": context["facts"],
                "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]),
                "entity_infos": context["entity_infos"],
            }

        copy_context._creditaudit_shortcut = True  # type: ignore[attr-defined]
        copy_context.__wrapped__ = original_copy  # type: ignore[attr-defined]
        textgen.copy_context = copy_context

    for module in (textgen, logic):
        original = module._parse_and_convert
        if getattr(original, "_creditaudit_memo", False):
            continue

        @functools.lru_cache(maxsize=PARSE_MEMO_SIZE)
        def parsed(args: tuple, kwargs: tuple, _parse=original) -> Any:
            return _parse(*args, **dict(kwargs))

        def memoized(*args: Any, _parse=original, _parsed=parsed, **kwargs: Any) -> Any:
            if not _SHORTCUTS["enabled"]:
                return _parse(*args, **kwargs)
            try:
                key = (args, tuple(sorted(kwargs.items())))
                hash(key)
            except TypeError:  # an unhashable argument: parse as textworld does
                return _parse(*args, **kwargs)
            return copy.deepcopy(_parsed(*key))

        memoized._creditaudit_memo = True  # type: ignore[attr-defined]
        memoized.__wrapped__ = original  # type: ignore[attr-defined]
        module._parse_and_convert = memoized


@contextlib.contextmanager
def textworld_shortcuts(enabled: bool) -> Iterator[None]:
    """Within the block, :func:`accelerate_textworld`'s shortcuts are on or bypassed."""
    previous = _SHORTCUTS["enabled"]
    _SHORTCUTS["enabled"] = bool(enabled)
    try:
        yield
    finally:
        _SHORTCUTS["enabled"] = previous
