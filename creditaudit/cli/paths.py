"""Checks of the paths a user types, made before a command reads or writes anything.

A file where a directory is expected (or the reverse), or a path under a regular file, is bad
usage: :class:`~creditaudit.errors.InputError` (exit 2) naming the path, the option and what to do,
never an ``OSError`` traceback from deep inside a stage.
"""

from __future__ import annotations

from pathlib import Path

from creditaudit.errors import InputError

__all__ = ["existing_file", "dir_to_write", "file_to_write"]


def _file_above(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists and is not a directory (None when there is none)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _no_file_above(path: Path, option: str) -> None:
    above = _file_above(path)
    if above is not None:
        raise InputError(f"{path}: {above} is a file, not a directory, so nothing can be made under it; "
                         f"give {option} a path in a directory")


def existing_file(path: Path, option: str) -> Path:
    """``path``, which must be an existing regular file."""
    _no_file_above(path, option)
    if not path.exists():
        raise InputError(f"{path}: no such file; {option} names an existing file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file; {option} names a file")
    return path


def dir_to_write(path: Path, option: str) -> Path:
    """``path``, a directory a command creates or writes into: absent, or an existing directory."""
    _no_file_above(path, option)
    if path.exists() and not path.is_dir():
        raise InputError(f"{path}: is a file, not a directory; {option} names a directory to write into "
                         "(choose another path)")
    return path


def file_to_write(path: Path, option: str) -> Path:
    """``path``, a file a command writes: absent or a regular file, in a directory that exists or can be made."""
    _no_file_above(path, option)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file; {option} names a file to write (choose a file "
                         "name)")
    return path
