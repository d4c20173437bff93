"""Field-level differences between two protocol dictionaries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldChange", "flatten", "field_diff", "format_changes"]

_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One changed leaf: ``path`` (``statistics.bootstrap_iterations``, ``signals[0].temperature``)."""

    path: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new}

    def __str__(self) -> str:
        return f"{self.path}: {_show(self.old)} -> {_show(self.new)}"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested dicts/lists by path; empty containers are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for key in value:
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{index}]"))
    else:
        out[prefix] = value
    return out


def field_diff(old: Any, new: Any) -> list[FieldChange]:
    """Every leaf that differs between ``old`` and ``new``, in a stable order."""
    a, b = flatten(old), flatten(new)
    changes = []
    for path in list(a) + [p for p in b if p not in a]:
        va, vb = a.get(path, _MISSING), b.get(path, _MISSING)
        if va is _MISSING or vb is _MISSING or type(va) is not type(vb) or va != vb:
            changes.append(FieldChange(path, None if va is _MISSING else va, None if vb is _MISSING else vb))
    return changes


def format_changes(changes: list[FieldChange]) -> str:
    return "\n".join(f"  {change}" for change in changes)
