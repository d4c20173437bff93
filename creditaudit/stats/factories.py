"""Named factories that remember their arguments (the statistics the ledger rebuilds).

A factory is kept under a kind (``"statistic"``) and a name. ``Factories.spec(name, **kwargs)``
binds the arguments against the factory's signature (defaults applied) into a frozen
:class:`FactorySpec` that a protocol can freeze and the ledger can rebuild from;
``Factories.create(spec)`` rebuilds the object. (Plugins -- families, environments, proposers, arm
rules -- are :mod:`creditaudit.plugins`; the protocol's *registry* is its hash-chained log of
freezes, ``registry.jsonl``.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from creditaudit.protocol.canonical import canonical_hash, to_json_value

__all__ = ["FactorySpec", "Factories", "factories"]


@dataclass(frozen=True)
class FactorySpec:
    """A factory call frozen as data: ``kind``, ``name``, bound ``args`` and ``version``."""

    kind: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    version: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "args": to_json_value(self.args), "version": self.version}

    @property
    def hash(self) -> str:
        return canonical_hash(self.to_dict())


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Any]
    version: int


class Factories:
    """Factories of one kind (``"statistic"``)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, _Entry] = {}

    def register(self, name: str, *, version: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``factory`` under ``name``."""

        def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
            existing = self._entries.get(name)
            if existing is not None and existing.factory is not factory:
                raise ValueError(f"{self.kind} {name!r} is already registered by {existing.factory!r}")
            self._entries[name] = _Entry(factory, version)
            return factory

        return decorate

    def names(self) -> list[str]:
        return sorted(self._entries)

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; registered: {', '.join(self.names()) or '(none)'}"
            ) from None

    def spec(self, name: str, /, **kwargs: Any) -> FactorySpec:
        """Bind ``kwargs`` to the factory's signature (defaults applied) as a frozen spec."""
        entry = self._entry(name)
        try:
            bound = inspect.signature(entry.factory).bind(**kwargs)
        except TypeError as exc:
            raise ValueError(f"{self.kind} {name!r}: {exc}") from None
        bound.apply_defaults()
        args = dict(bound.arguments)
        to_json_value(args)  # every argument must be freezable
        return FactorySpec(kind=self.kind, name=name, args=args, version=entry.version)

    def create(self, spec: FactorySpec | str, /, **kwargs: Any) -> Any:
        """Build the object a spec describes (or ``create(name, **kwargs)``)."""
        if isinstance(spec, str):
            spec = self.spec(spec, **kwargs)
        elif kwargs:
            raise TypeError("pass either a FactorySpec or a name with keyword arguments, not both")
        if spec.kind != self.kind:
            raise ValueError(f"spec of kind {spec.kind!r} given to the {self.kind} factories")
        entry = self._entry(spec.name)
        if spec.version != entry.version:
            raise ValueError(
                f"{self.kind} {spec.name!r} spec is version {spec.version}, the registered factory is "
                f"version {entry.version}; migrate the spec explicitly"
            )
        return entry.factory(**spec.args)


_KINDS: dict[str, Factories] = {}


def factories(kind: str) -> Factories:
    """The process-wide factories of ``kind``."""
    if kind not in _KINDS:
        _KINDS[kind] = Factories(kind)
    return _KINDS[kind]
