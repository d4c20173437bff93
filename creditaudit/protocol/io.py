"""Reading and writing protocols: YAML in (duplicate keys refused), canonical JSON out."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes
from creditaudit.protocol.schema import PROTOCOL_VERSION, Protocol

__all__ = [
    "default_template_text",
    "load_protocol",
    "parse_protocol",
    "protocol_from_dict",
    "protocol_dict",
    "protocol_canonical_json",
    "format_validation_error",
    "yaml_error_message",
    "migrate",
]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def default_template_text() -> str:
    """The fully commented default protocol template."""
    return resources.files("creditaudit.protocol").joinpath("default_protocol.yaml").read_text("utf-8")


def _loc(loc: tuple) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in {"Compare", "AllOf", "AnyOf", "Not", "Overlaps", "Contains", "Always"} or item in {
            "implicit",
            "judge",
            "confidence",
            "prover",
            "vict",
            "grpo",
            "rloo",
        } and parts and parts[-1].startswith("["):
            continue  # union tags add nothing a user can act on
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per problem: ``source: field `a.b[0].c`: message (got value)``."""
    lines = [f"{source}: the protocol is not valid ({exc.error_count()} problem(s)):"]
    for err in exc.errors(include_url=False):
        where = _loc(tuple(err.get("loc", ())))
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"  field `{where}`: {err['msg']}{shown}")
    lines.append("  Fix the field(s) named above; `creditaudit protocol init` writes a valid commented template.")
    return "\n".join(lines)


#: Keys a schema-1 signal section kept beside its constants (the rest move into ``args``).
_V1_SIGNAL_KEYS = ("name", "family", "description")


def migrate(data: dict[str, Any], *, source: str = "<protocol>") -> dict[str, Any]:
    """An older protocol document rewritten in the current schema (explicitly; never on load).

    Schema 1 -> 2: a signal's constants move from the signal section into its ``args`` (the
    family's factory signature is their only statement); the router may be null; ``plugins`` pins
    are added by ``protocol pin``. The protocol id changes (the canonical form changed): a frozen
    schema-1 protocol stays verifiable only by the creditaudit that froze it, and its migration is
    a new protocol to freeze (``protocol amend`` records the relation).

    Examples
    --------
    >>> old = {"version": 1, "signals": [{"family": "implicit", "name": "implicit", "temperature": 5.0}]}
    >>> migrate(old)["signals"]
    [{'name': 'implicit', 'family': 'implicit', 'args': {'temperature': 5.0}}]
    """
    version = data.get("version")
    if version == PROTOCOL_VERSION:
        return dict(data)
    if version != 1:
        raise InputError(f"{source}: field `version`: no migration from protocol schema version {version!r}")
    out = dict(data, version=2)
    signals = []
    for spec in data.get("signals") or []:
        if not isinstance(spec, dict):
            raise InputError(f"{source}: field `signals`: every signal must be a mapping")
        moved = {k: v for k, v in spec.items() if k not in _V1_SIGNAL_KEYS}
        signals.append({k: spec[k] for k in _V1_SIGNAL_KEYS if k in spec} | ({"args": moved} if moved else {}))
    out["signals"] = signals
    return out


def protocol_from_dict(data: Any, *, source: str = "<protocol>") -> Protocol:
    """Validate a mapping as a :class:`Protocol`, raising :class:`InputError` naming every field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: a protocol is a YAML mapping at the top level, got {type(data).__name__}")
    version = data.get("version")
    if version != PROTOCOL_VERSION:
        hint = (f"migrate it with `creditaudit protocol migrate {source} NEW.yaml`" if version == 1
                else f"write `version: {PROTOCOL_VERSION}`")
        raise InputError(
            f"{source}: field `version`: this creditaudit reads protocol schema version {PROTOCOL_VERSION}, "
            f"got {version!r}; {hint}"
        )
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, source)) from None


def yaml_error_message(exc: yaml.YAMLError, source: str) -> str:
    r"""One line naming ``source`` (the file, not PyYAML's ``"<unicode string>"``), the line and column
    of the problem, the problem, and the construct it was found in.

    Examples
    --------
    >>> try:
    ...     yaml.safe_load("a: 1\nb: [1, 2\nc: 3\n")
    ... except yaml.YAMLError as exc:
    ...     print(yaml_error_message(exc, "protocol.yaml"))
    protocol.yaml, line 3, column 2: malformed YAML: expected ',' or ']', but got ':' (while parsing a flow sequence that starts at line 2, column 4); fix the YAML syntax there
    """
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None:  # not a marked error: PyYAML's text without its mark lines
        return f"{source}: malformed YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else source
    context = getattr(exc, "context", None)
    started = getattr(exc, "context_mark", None)
    inside = ""
    if context:
        inside = f" ({context}" + (f" that starts at line {started.line + 1}, column {started.column + 1}"
                                   if started is not None else "") + ")"
    return f"{where}: malformed YAML: {problem}{inside}; fix the YAML syntax there"


def parse_protocol(text: str, *, source: str = "<protocol>") -> Protocol:
    """Parse YAML text into a validated :class:`Protocol`."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(yaml_error_message(exc, source)) from None
    return protocol_from_dict(data, source=source)


def load_protocol(path: str | Path) -> Protocol:
    """Read and validate a protocol YAML file."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: protocol file not found; create one with `creditaudit protocol init`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the protocol file: {exc}") from None
    return parse_protocol(text, source=str(path))


def protocol_dict(protocol: Protocol) -> dict[str, Any]:
    """The full protocol (free text included) as plain JSON values, by alias."""
    return protocol.model_dump(mode="json", by_alias=True)


def protocol_canonical_json(protocol: Protocol) -> bytes:
    """RFC 8785 canonical JSON of the full protocol (free text included)."""
    return canonical_bytes(protocol_dict(protocol))
