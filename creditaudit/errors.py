"""Errors a user can cause, with the exit code the command line maps them to.

Every message says what was wrong, where (file, field, row) and what to do.
Exit codes: 0 success, 1 a check failed, 2 bad usage or input.
"""

from __future__ import annotations

__all__ = ["CreditAuditError", "InputError", "CheckFailed", "NotYetAvailable"]


class CreditAuditError(Exception):
    """Base class; ``exit_code`` is what the command line exits with."""

    exit_code = 2


class InputError(CreditAuditError, ValueError):
    """Bad usage or bad input: a file, field or row the user must fix (exit 2)."""

    exit_code = 2


class CheckFailed(CreditAuditError):
    """A verification or precondition check failed (exit 1)."""

    exit_code = 1


class NotYetAvailable(CreditAuditError):
    """A stage of the toolkit that is not implemented in this version (exit 2)."""

    exit_code = 2
