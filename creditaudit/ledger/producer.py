"""Registered number producers and the context they read raw artifacts through.

A producer is a function registered with :func:`producer` under a name, a version and the
catalogue names of the raw artifacts it reads. It receives a :class:`ProducerContext` that opens
only those artifacts (reading anything else is a programming error, raised at once), and returns
:class:`Value` objects; the builder turns each into a :class:`~creditaudit.ledger.model.LedgerEntry`
carrying the hashes of the producer's inputs, the protocol id and the code version.

``when`` makes a producer conditional on the run directory (the training-arms producers register
only when ``arms/`` exists). Every producer also reads the protocol and its lock.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from creditaudit.errors import InputError
from creditaudit.ledger.catalogue import artifact, artifact_files
from creditaudit.ledger.model import ENTRY_NAME
from creditaudit.protocol.lock import FrozenProtocol

__all__ = ["Value", "Producer", "ProducerContext", "PRODUCERS", "producer", "active_producers", "format_value",
           "stage_ran"]

_NAME = re.compile(ENTRY_NAME)


def format_value(value: Any, spec: str | None) -> str:
    """The text of ``value``: ``undefined`` for ``None``; numbers with the format ``spec``.

    Examples
    --------
    >>> format_value(0.30512, ".3f"), format_value(None, ".3f"), format_value(12, None), format_value(True, None)
    ('0.305', 'undefined', '12', 'yes')
    """
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec) if spec else (str(value) if isinstance(value, int) else format(value, ".4g"))
    if isinstance(value, str):
        return value
    raise TypeError(f"value of type {type(value).__name__} needs an explicit text")


@dataclass(frozen=True)
class Value:
    """What a producer returns: an entry's name, value, and either its text or a format spec."""

    name: str
    value: Any
    fmt: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"ledger entry name {self.name!r} does not match {ENTRY_NAME}")
        value = self.value
        if hasattr(value, "item") and not isinstance(value, (list, dict, str)):  # numpy scalars
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # undefined, never NaN: the ledger is canonical JSON
        object.__setattr__(self, "value", value)

    def rendered(self) -> str:
        return self.text if self.text is not None else format_value(self.value, self.fmt)


@dataclass(frozen=True)
class Producer:
    """A registered producer."""

    name: str
    function: Callable[["ProducerContext"], Iterable[Value]]
    inputs: tuple[str, ...]
    version: int = 1
    description: str = ""
    when: Callable[[Path], bool] | None = None
    optional: tuple[str, ...] = ()
    """Inputs that may be absent (the producer then works without them)."""


PRODUCERS: dict[str, Producer] = {}


def producer(name: str, *, inputs: Iterable[str] = (), version: int = 1, description: str = "",
             when: Callable[[Path], bool] | None = None, optional: Iterable[str] = ()) -> Callable[[Callable], Callable]:
    """Register ``function(ctx) -> Iterable[Value]`` as the producer ``name`` reading ``inputs``.

    ``when(run_dir)`` makes it conditional; ``optional`` names inputs that may be absent.
    """
    inputs, optional = tuple(inputs), tuple(optional)
    if set(optional) - set(inputs):
        raise ValueError(f"producer {name!r}: optional inputs {sorted(set(optional) - set(inputs))} are not declared")
    for input_name in inputs:
        spec = artifact(input_name)
        if not spec.raw:
            raise ValueError(f"producer {name!r}: {input_name!r} is a derived artifact; producers read raw artifacts only")

    def decorate(function: Callable) -> Callable:
        existing = PRODUCERS.get(name)
        if existing is not None and existing.function is not function:
            raise ValueError(f"ledger producer {name!r} is already registered by {existing.function!r}")
        summary = description or (function.__doc__ or "").strip().split("\n")[0]
        PRODUCERS[name] = Producer(name, function, inputs, version, summary, when, optional)
        return function

    return decorate


def stage_ran(stage: str, artifact_name: str) -> Callable[[Path], bool]:
    """A producer's ``when``: the run holds ``stage``'s link record, or the file of ``artifact_name``
    (a kept copy of a run's ledger inputs has no link records). A run where the stage ran and its
    file is gone keeps the producer, which then names the missing file."""
    def when(run_dir: Path) -> bool:
        return any((Path(run_dir) / "links").glob(f"*-{stage}.link.json")) or bool(artifact_files(Path(run_dir), artifact_name))
    when.__name__ = f"stage_ran_{stage}"
    return when


def active_producers(run_dir: Path) -> list[Producer]:
    """The producers that apply to ``run_dir`` (conditional ones only when their ``when`` holds), by name."""
    import creditaudit.ledger.producers  # noqa: F401  (registration)

    return [p for _, p in sorted(PRODUCERS.items()) if p.when is None or p.when(run_dir)]


@dataclass
class ProducerContext:
    """What one producer may read: the frozen protocol and its declared artifacts (nothing else)."""

    frozen: FrozenProtocol
    producer: Producer
    _tables: dict[str, pa.Table] = field(default_factory=dict)

    @property
    def protocol(self) -> Any:
        return self.frozen.protocol

    @property
    def protocol_id(self) -> str:
        return self.frozen.id

    @property
    def run_dir(self) -> Path:
        return self.frozen.run_dir

    def _declared(self, name: str) -> None:
        if name not in self.producer.inputs:
            raise RuntimeError(
                f"ledger producer {self.producer.name!r} read artifact {name!r}, which it does not declare "
                f"(declared: {', '.join(self.producer.inputs) or 'none'})"
            )

    def files(self, name: str) -> list[str]:
        """Run-relative paths of the files of a declared artifact."""
        self._declared(name)
        return artifact_files(self.run_dir, name)

    def table(self, name: str, path: str | None = None) -> pa.Table:
        """A declared Parquet artifact (refusing another protocol's; ``path`` picks one file of a set)."""
        from creditaudit.artifacts import read_stamped_parquet

        self._declared(name)
        spec = artifact(name)
        rel = path or spec.pattern
        if rel not in self._tables:
            self._tables[rel] = read_stamped_parquet(self.run_dir / rel, self.protocol_id, what=spec.description or name,
                                                     command=spec.command)
        return self._tables[rel]

    def json(self, name: str) -> Any:
        """A declared JSON artifact (refusing one stamped with another protocol)."""
        self._declared(name)
        spec = artifact(name)
        path = self.run_dir / spec.pattern
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: missing; run `{spec.command}` first") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: unreadable ({exc}); rerun `{spec.command}`") from None
        if spec.stamped and isinstance(data, dict) and data.get("protocol_id") not in (None, self.protocol_id):
            raise InputError(f"{path}: stamped with protocol {str(data['protocol_id'])[:16]}…, not "
                             f"{self.protocol_id[:16]}…; a run directory never mixes protocols")
        return data
