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


def protocol_from_dict(data: Any, *, source: str = "<protocol>") -> Protocol:
    """Validate a mapping as a :class:`Protocol`, raising :class:`InputError` naming every field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: a protocol is a YAML mapping at the top level, got {type(data).__name__}")
    version = data.get("version")
    if version != PROTOCOL_VERSION:
        raise InputError(
            f"{source}: field `version`: this creditaudit reads protocol schema version {PROTOCOL_VERSION}, "
            f"got {version!r}; write `version: {PROTOCOL_VERSION}` (or migrate the file explicitly)"
        )
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, source)) from None


def parse_protocol(text: str, *, source: str = "<protocol>") -> Protocol:
    """Parse YAML text into a validated :class:`Protocol`."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: malformed YAML: {exc}") from None
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
