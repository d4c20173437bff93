"""The one strict canonical serializer for everything that is hashed.

Canonical form is RFC 8785 (JSON Canonicalization Scheme): keys sorted by UTF-16 code units,
no insignificant whitespace, ECMAScript number formatting, UTF-8. ``NaN`` and infinities are an
error, and so is any type that is not a JSON type (plus the numpy scalars and pydantic models,
which are converted explicitly, never through a permissive fallback).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

__all__ = ["canonical_bytes", "canonical_hash", "sha256_bytes", "sha256_file", "to_json_value"]


def to_json_value(obj: Any, *, _path: str = "$") -> Any:
    """Return ``obj`` as plain JSON values, raising ``TypeError`` that names the path of any
    value that has no canonical JSON form."""
    # Local imports keep this module light for callers that only hash bytes.
    import numpy as np
    from pydantic import BaseModel

    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        if not math.isfinite(value):
            raise TypeError(f"{_path}: {value!r} has no canonical JSON form (NaN/inf are not allowed)")
        return value
    if isinstance(obj, BaseModel):
        return to_json_value(obj.model_dump(mode="json"), _path=_path)
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"{_path}: key {key!r} is not a string")
            out[key] = to_json_value(value, _path=f"{_path}.{key}")
        return out
    if isinstance(obj, (list, tuple)) or (isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray))):
        return [to_json_value(v, _path=f"{_path}[{i}]") for i, v in enumerate(obj)]
    raise TypeError(f"{_path}: value of type {type(obj).__name__} has no canonical JSON form")


def canonical_bytes(obj: Any) -> bytes:
    """RFC 8785 canonical JSON of ``obj`` as UTF-8 bytes.

    Examples
    --------
    >>> canonical_bytes({"b": 1, "a": [1.5, True, None]})
    b'{"a":[1.5,true,null],"b":1}'
    """
    value = to_json_value(obj)
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:  # integer out of the IEEE-754 safe range, etc.
        raise TypeError(f"cannot canonicalise: {exc}") from exc


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def canonical_hash(obj: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``obj``.

    Examples
    --------
    >>> canonical_hash({"a": 1})[:16]
    '015abd7f5cc57a2d'
    """
    return sha256_bytes(canonical_bytes(obj))


def sha256_file(path, *, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes as stored."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
