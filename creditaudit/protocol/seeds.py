"""Named seed streams derived from the protocol id.

Every random number the pipeline uses comes from a stream named for its purpose
(``"collect/rollout/task-3/7"``, ``"audit/bootstrap/implicit"``) and derived from the protocol
id, so the data itself proves it could not exist before the protocol did, and adding an analysis
never shifts another's random numbers.

The derivation is ``SeedSequence(entropy=int(SHA-256("creditaudit-seed-v1\\0" + id + "\\0" + name)))``;
it is part of the artifact format: changing it changes every derived number.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

__all__ = ["SeedStreams", "seed_sequence", "rng", "seed_int", "torch_generator"]

_NAME = re.compile(r"^[A-Za-z0-9_.:\-]+(/[A-Za-z0-9_.:\-]+)*$")
_DOMAIN = b"creditaudit-seed-v1"


def _check(protocol_id: str, name: str) -> None:
    if not isinstance(protocol_id, str) or not protocol_id:
        raise ValueError("`protocol_id` must be a non-empty string (the frozen protocol's id)")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"`name` must be a '/'-separated stream name of letters, digits, '_', '.', ':', '-'; got {name!r}"
        )


def seed_sequence(protocol_id: str, name: str) -> np.random.SeedSequence:
    """The ``numpy.random.SeedSequence`` of the stream ``name`` under ``protocol_id``."""
    _check(protocol_id, name)
    digest = hashlib.sha256(_DOMAIN + b"\0" + protocol_id.encode() + b"\0" + name.encode()).digest()
    return np.random.SeedSequence(entropy=int.from_bytes(digest, "big"))


def rng(protocol_id: str, name: str) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` (PCG64) for the stream ``name``.

    Examples
    --------
    >>> a = rng("p" * 64, "audit/bootstrap").integers(0, 1000, 3)
    >>> b = rng("p" * 64, "audit/bootstrap").integers(0, 1000, 3)
    >>> bool((a == b).all())
    True
    """
    return np.random.default_rng(seed_sequence(protocol_id, name))


def seed_int(protocol_id: str, name: str) -> int:
    """A 63-bit non-negative integer seed for APIs that take an int (torch, transformers)."""
    state = seed_sequence(protocol_id, name).generate_state(1, dtype=np.uint64)[0]
    return int(state) & ((1 << 63) - 1)


def torch_generator(protocol_id: str, name: str, device: str = "cpu"):
    """A ``torch.Generator`` seeded from the stream ``name``."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed_int(protocol_id, name))
    return generator


class SeedStreams:
    """The streams of one protocol: ``SeedStreams(pid).rng("replay/alt/3")``."""

    def __init__(self, protocol_id: str):
        _check(protocol_id, "root")
        self.protocol_id = protocol_id

    def rng(self, name: str) -> np.random.Generator:
        return rng(self.protocol_id, name)

    def seed_int(self, name: str) -> int:
        return seed_int(self.protocol_id, name)

    def torch_generator(self, name: str, device: str = "cpu"):
        return torch_generator(self.protocol_id, name, device)

    def __repr__(self) -> str:
        return f"SeedStreams({self.protocol_id[:12]}…)"
