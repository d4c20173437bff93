"""Reading and writing stage artifacts: atomic writes, and reads that refuse another protocol's data.

Every Parquet artifact carries a ``protocol_id`` column; a stage reading one refuses a file that
is missing (naming the command that makes it), unreadable, or stamped with another protocol —
a run directory never mixes protocols.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from creditaudit.errors import InputError

__all__ = ["write_bytes_atomic", "write_parquet_atomic", "read_stamped_parquet"]


def _temporary(path: Path) -> Path:
    """A temporary name beside ``path``, unique per process and thread (two threads writing one
    path each rename a whole file of their own)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and a rename (never a torn file).
    The one atomic write of the package (Parquet: :func:`write_parquet_atomic`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` (zstd) to ``path`` through a temporary file, fsync and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_stamped_parquet(path: Path, protocol_id: str, *, what: str, command: str) -> pa.Table:
    """Read a Parquet artifact of this protocol.

    Raises ``InputError`` naming the file when it is missing (``command`` makes it), unreadable,
    or stamped with another protocol id.
    """
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no {what}; run `{command}` first") from None
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: unreadable {what} ({exc}); delete it and rerun `{command}`") from None
    if "protocol_id" not in table.column_names:
        raise InputError(f"{path}: the {what} has no protocol_id column; it was not written by creditaudit")
    ids = set(table.column("protocol_id").unique().to_pylist())
    if ids and ids != {protocol_id}:
        raise InputError(
            f"{path}: {what} stamped with protocol(s) {', '.join(sorted(i[:16] + '…' for i in ids))}, not "
            f"{protocol_id[:16]}…; a run directory never mixes protocols"
        )
    return table
