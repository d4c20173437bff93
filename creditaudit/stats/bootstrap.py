"""Cluster (group-resampling) percentile bootstrap.

The audit's unit of resampling is the trajectory (the group), never the turn: turns of one
trajectory are dependent. Every bootstrap here therefore takes *group-level* arrays — one entry
per group, computed once — and resamples whole groups with replacement.

Hand-written because no library offers the protocol's handling of degenerate resamples: a
resample on which the statistic is undefined is counted and left out of the interval, where
:func:`scipy.stats.bootstrap` returns a NaN interval. Otherwise it is scipy's percentile bootstrap:
it draws the same resamples from the same generator, and the tests check it against
:func:`scipy.stats.bootstrap` draw for draw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    check_batch,
    check_open_unit,
    check_positive_int,
    percentile_interval,
    readonly,
)

__all__ = ["BootstrapResult", "cluster_bootstrap"]

#: Resampled values held in memory at once (``batch * n_groups``) when ``batch`` is not given.
_MAX_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class BootstrapResult(Result):
    """Percentile cluster-bootstrap result.

    Attributes
    ----------
    statistic : float
        The statistic on the observed groups.
    ci : tuple of float
        Percentile interval at ``confidence_level``.
    confidence_level : float
    standard_error : float
        Standard deviation (ddof=1) of the non-degenerate bootstrap values.
    n_resamples : int
    n_degenerate : int
        Resamples on which the statistic was undefined (non-finite); they are kept as NaN in
        ``distribution``, counted here and left out of the interval.
    n_groups : int
    method : str
    distribution : numpy.ndarray
        The ``n_resamples`` bootstrap values, in draw order (NaN where degenerate).
    """

    statistic: float
    ci: tuple[float, float]
    confidence_level: float
    standard_error: float
    n_resamples: int
    n_degenerate: int
    n_groups: int
    method: str
    distribution: np.ndarray

    def _interval(self, level: float) -> tuple[float, float]:
        return percentile_interval(self.distribution, level)


def _cluster_bootstrap_iv(data, statistic, n_resamples, confidence_level, batch):
    if not isinstance(data, tuple):
        data = (data,)
    if len(data) == 0:
        raise ValueError("`data` must hold at least one group-level array")
    arrays = tuple(as_1d_finite(f"data[{i}]", a) for i, a in enumerate(data))
    sizes = {a.size for a in arrays}
    if len(sizes) != 1:
        raise ValueError(
            "every array in `data` must have one entry per group (same length); got lengths "
            + ", ".join(str(a.size) for a in arrays)
        )
    if not callable(statistic):
        raise ValueError("`statistic` must be callable")
    n_resamples = check_positive_int("n_resamples", n_resamples)
    confidence_level = check_open_unit("confidence_level", confidence_level)
    batch = check_batch(batch)
    return arrays, statistic, n_resamples, confidence_level, batch


def _draw_in_batches(n_groups: int, n_resamples: int, batch: int | None, rng: np.random.Generator):
    """Yield index arrays of shape ``(b, n_groups)``.

    The indices are ``rng.integers(0, n_groups, (b, n_groups))`` per batch — the draws
    :func:`scipy.stats.bootstrap` makes — and the stream does not depend on the batch size
    (``Generator.integers`` consumes the bit stream element by element).
    """
    if batch is None:
        batch = max(1, _MAX_ELEMENTS // max(n_groups, 1))
    done = 0
    while done < n_resamples:
        b = min(batch, n_resamples - done)
        yield rng.integers(0, n_groups, (b, n_groups), dtype=np.int64)
        done += b


def cluster_bootstrap(
    data,
    statistic: Callable[..., np.ndarray],
    *,
    n_resamples: int = 10_000,
    confidence_level: float = 0.95,
    rng=None,
    batch: int | None = None,
) -> BootstrapResult:
    """Percentile bootstrap that resamples whole groups.

    Parameters
    ----------
    data : array_like or tuple of array_like
        Group-level values: one 1-D array (or list), or a *tuple* of several of equal length
        that are resampled together (index ``i`` of every array belongs to group ``i``). No NaN.
    statistic : callable
        Vectorised statistic: called with one array per entry of ``data``, each of shape
        ``(b, n_groups)`` (one resample per row), it returns ``b`` values. It is also called
        on the observed data with ``b = 1``.
    n_resamples : int, default 10000
    confidence_level : float, default 0.95
        In (0, 1).
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng`; pass a named protocol stream
        (``creditaudit.protocol.seeds.rng(protocol_id, "audit/bootstrap/...")``).
    batch : int, optional
        Resamples evaluated at once (memory cap). Results do not depend on it.

    Returns
    -------
    BootstrapResult

    Notes
    -----
    With :math:`G` groups, resample :math:`b` draws indices :math:`i_{b1..bG}` uniformly from
    :math:`\\{0..G-1\\}` and computes :math:`\\theta^*_b = T(x_{i_{b1}}, ..., x_{i_{bG}})`.
    The percentile interval at level :math:`1-\\alpha` is the :math:`\\alpha/2` and
    :math:`1-\\alpha/2` quantiles (linear interpolation) of the finite :math:`\\theta^*_b`.
    A resample on which :math:`T` is undefined (non-finite) is *degenerate*: it is counted in
    ``n_degenerate``, kept as NaN in the distribution and left out of the interval — never
    returned as a NaN interval. The draws equal those of :func:`scipy.stats.bootstrap` with the
    same generator (``method='percentile'``), so on a single group-level array the two agree.

    References
    ----------
    .. [1] Efron, B. & Tibshirani, R. J. (1993). *An Introduction to the Bootstrap*, ch. 13.
    .. [2] Field, C. A. & Welsh, A. H. (2007). Bootstrapping clustered data. *JRSS B* 69(3).

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import cluster_bootstrap
    >>> per_group = np.array([0.1, 0.4, 0.35, 0.8, 0.5, 0.45, 0.2, 0.6])
    >>> res = cluster_bootstrap(per_group, lambda v: np.median(v, axis=-1), n_resamples=2000, rng=0)
    >>> round(res.statistic, 6)
    0.425
    >>> low, high = res.ci
    >>> bool(low < res.statistic < high), res.n_degenerate
    (True, 0)
    """
    arrays, statistic, n_resamples, confidence_level, batch = _cluster_bootstrap_iv(
        data, statistic, n_resamples, confidence_level, batch
    )
    n_groups = arrays[0].size
    with np.errstate(divide="ignore", invalid="ignore"):  # undefined values are handled below
        observed = np.asarray(statistic(*(a[None, :] for a in arrays)), dtype=float).reshape(-1)
    if observed.size != 1:
        raise ValueError("`statistic` must return one value per resample (row)")
    observed_value = float(observed[0])
    if not np.isfinite(observed_value):
        raise ValueError("`statistic` is undefined (non-finite) on the observed data")
    generator = np.random.default_rng(rng)
    parts = []
    for idx in _draw_in_batches(n_groups, n_resamples, batch, generator):
        with np.errstate(divide="ignore", invalid="ignore"):  # degenerate resamples are counted
            values = np.asarray(statistic(*(a[idx] for a in arrays)), dtype=float).reshape(-1)
        if values.size != idx.shape[0]:
            raise ValueError("`statistic` must return one value per resample (row)")
        parts.append(values)
    distribution = np.concatenate(parts)
    degenerate = ~np.isfinite(distribution)
    distribution[degenerate] = np.nan
    n_degenerate = int(degenerate.sum())
    ci = percentile_interval(distribution, confidence_level)
    finite = distribution[~degenerate]
    se = float(np.std(finite, ddof=1)) if finite.size > 1 else float("nan")
    return BootstrapResult(
        statistic=observed_value,
        ci=ci,
        confidence_level=confidence_level,
        standard_error=se,
        n_resamples=n_resamples,
        n_degenerate=n_degenerate,
        n_groups=n_groups,
        method="percentile bootstrap over groups",
        distribution=readonly(distribution),
    )
