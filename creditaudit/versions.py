"""The versions of everything that can move a number, recorded in every lock and ledger.

A regenerated number is only guaranteed identical under the same code *and* the same numerical
stack: a new BLAS, kernel or engine release can move the last bits of a log-probability, a
bootstrap quantile or an engine's admissible list. The lock records the versions at freeze time,
the ledger those it was computed under; ``ledger verify`` reports any difference beside its
verdict.
"""

from __future__ import annotations

import platform
from importlib import metadata

__all__ = ["NUMBER_DEPENDENCIES", "dependency_versions"]

#: Distributions whose version can move a number the toolkit reports.
NUMBER_DEPENDENCIES = (
    "numpy",
    "scipy",
    "pandas",
    "statsmodels",
    "pingouin",
    "scikit-bio",
    "pyarrow",
    "torch",
    "transformers",
    "tokenizers",
    "peft",
    "alfworld",
    "textworld",
)


def dependency_versions() -> dict[str, str]:
    """``{"python": ..., distribution: version}`` for :data:`NUMBER_DEPENDENCIES` (``"absent"``
    for one that is not installed).

    Examples
    --------
    >>> versions = dependency_versions()
    >>> sorted(versions)[:3], versions["python"] == platform.python_version()
    (['alfworld', 'numpy', 'pandas'], True)
    """
    out = {"python": platform.python_version()}
    for name in NUMBER_DEPENDENCIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
