"""One fixed CPU thread count for every policy computation whose numbers are stored.

Float reductions on the CPU split work by thread count, so a log-probability's last bits can
depend on it; the stored artifacts must not. Collection and replay therefore compute with one
torch thread (the policies audited on a laptop are tiny; on a GPU the thread count does not enter
the numbers), and the caller's setting is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["STORED_THREADS", "stored_numerics"]

STORED_THREADS = 1


@contextmanager
def stored_numerics() -> Iterator[None]:
    """Run the block with :data:`STORED_THREADS` torch threads, restoring the previous count."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(STORED_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
