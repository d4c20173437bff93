"""The audit's own metric: precision-at-pivotal lift (docs/design.md §5).

Hand-written because no library offers it: the share of pivotal turns among each trajectory's
top-credited turns — ties across the cut-off sharing the remaining slots, the expectation under
uniform random tie-breaking — over the share chance would give the same slots, with a percentile
bootstrap over trajectories (:func:`creditaudit.stats.cluster_bootstrap`). The tests check it by
brute-force enumeration of tie orders, by hand-computed group sizes and against
:func:`scipy.stats.bootstrap` on the same draws.

Importing this module registers the metric as a factory of kind ``"statistic"``, next to the
statistics of :mod:`creditaudit.stats.registered`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    as_labels,
    check_batch,
    check_open_unit,
    check_positive_int,
    percentile_interval,
)
from creditaudit.stats.bootstrap import cluster_bootstrap
from creditaudit.stats.registered import register_statistic

__all__ = ["LiftResult", "precision_at_pivotal_lift"]


@dataclass(frozen=True)
class LiftResult(Result):
    """Precision-at-pivotal lift with its cluster-bootstrap CI.

    Attributes
    ----------
    statistic : float
        ``precision / base_rate`` (1.0 = chance).
    precision : float
        Expected share of pivotal items among the top-k credited items of every group.
    base_rate : float
        Chance precision: the pivotal share a random within-group ranking would give the same
        top-k slots (the pooled pivotal base rate when ``k_g / n_g`` is the same in every group).
    ci : tuple of float
        Percentile bootstrap interval of the lift over groups.
    confidence_level : float
    top_fraction : float
    n_groups, n_items, n_pivotal, n_top : int
        ``n_top`` is the total of the per-group ``k``.
    n_resamples : int
    n_degenerate : int
        Resamples without any pivotal item (lift undefined); counted, left out of the interval.
    method : str
    distribution : numpy.ndarray
    """

    statistic: float
    precision: float
    base_rate: float
    ci: tuple[float, float]
    confidence_level: float
    top_fraction: float
    n_groups: int
    n_items: int
    n_pivotal: int
    n_top: int
    n_resamples: int
    n_degenerate: int
    method: str
    distribution: np.ndarray

    def _interval(self, level: float) -> tuple[float, float]:
        return percentile_interval(self.distribution, level)


def _lift_iv(credit, pivotal, groups, top_fraction, n_resamples, confidence_level, batch):
    credit = as_1d_finite("credit", credit)
    piv = np.asarray(pivotal)
    if piv.ndim != 1 or piv.size != credit.size:
        raise ValueError(f"`pivotal` must be 1-D with one entry per item ({credit.size}); got shape {piv.shape}")
    if piv.dtype != bool:
        if piv.dtype.kind not in "iuf" or not np.isin(piv, (0, 1)).all():
            raise ValueError("`pivotal` must be boolean (A_replay != 0), or 0/1")
        piv = piv.astype(bool)
    _, codes = as_labels("groups", groups, credit.size)
    try:
        top_fraction = float(top_fraction)
    except (TypeError, ValueError):
        raise ValueError(f"`top_fraction` must be a number in (0, 1]; got {top_fraction!r}") from None
    if not (0.0 < top_fraction <= 1.0):
        raise ValueError(f"`top_fraction` must be a number in (0, 1]; got {top_fraction!r}")
    if not piv.any():
        raise ValueError("`pivotal` has no pivotal item; the lift over the base rate is undefined")
    return (
        credit,
        piv,
        codes,
        top_fraction,
        check_positive_int("n_resamples", n_resamples),
        check_open_unit("confidence_level", confidence_level),
        check_batch(batch),
    )


def _group_top_hits(credit: np.ndarray, piv: np.ndarray, k: int) -> float:
    """Expected pivotal items among the top ``k`` by credit, ties broken uniformly at random."""
    order = np.sort(credit)[::-1]
    cutoff = order[k - 1]
    above = credit > cutoff
    tied = credit == cutoff
    slots = k - int(above.sum())
    return float(piv[above].sum() + slots * piv[tied].sum() / tied.sum())


def _ratio_of_sums(hits: np.ndarray, chance: np.ndarray) -> np.ndarray:
    num = hits.sum(axis=-1)
    den = chance.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return num / den


def precision_at_pivotal_lift(
    credit,
    pivotal,
    groups,
    *,
    top_fraction: float,
    n_resamples: int = 10_000,
    confidence_level: float = 0.95,
    rng=None,
    batch: int | None = None,
) -> LiftResult:
    """Lift of the top-credited items' precision at being pivotal over chance, with bootstrap CI.

    Parameters
    ----------
    credit : array_like
        Credit of each item (turn); no NaN. Higher = more credit.
    pivotal : array_like of bool
        Whether each item is pivotal (``A_replay != 0``).
    groups : array_like
        Group (trajectory) of each item.
    top_fraction : float
        Share of each group's items taken as its top: :math:`k_g = \\lceil f\\, n_g \\rceil`
        (at least 1). Required: the protocol fixes it.
    n_resamples : int, default 10000
    confidence_level : float, default 0.95
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng` (pass a named protocol stream).
    batch : int, optional

    Returns
    -------
    LiftResult

    Notes
    -----
    In group :math:`g` with :math:`n_g` items, :math:`P_g` pivotal, the top :math:`k_g` by
    credit hold :math:`h_g` pivotal items; at a tie across the cut-off the tied items share the
    remaining slots equally (the expectation under uniform random tie-breaking — tie-heavy
    credit such as judge scores in {1, 0, -1} is not favoured or penalised by item order).
    Chance hits are :math:`c_g = k_g P_g / n_g`, and
    :math:`\\text{lift} = \\sum_g h_g / \\sum_g c_g = \\text{precision}/\\text{base rate}`
    with precision :math:`\\sum h_g/\\sum k_g` and base rate :math:`\\sum c_g / \\sum k_g`.
    The CI resamples groups (:func:`cluster_bootstrap`); resamples without a pivotal item are
    degenerate and counted.

    References
    ----------
    .. [1] Manning, C. D., Raghavan, P. & Schütze, H. (2008). *Introduction to Information
       Retrieval*, §8.4 (precision at k).

    Examples
    --------
    >>> from creditaudit.audit import precision_at_pivotal_lift
    >>> credit = [0.9, 0.1, 0.2, 0.3, 0.8, 0.1, 0.0, 0.2]
    >>> pivotal = [True, False, False, False, True, False, False, False]
    >>> res = precision_at_pivotal_lift(credit, pivotal, [0, 0, 0, 0, 1, 1, 1, 1],
    ...                                 top_fraction=0.25, n_resamples=200, rng=0)
    >>> res.precision, res.base_rate, res.statistic
    (1.0, 0.25, 4.0)
    """
    credit, piv, codes, top_fraction, n_resamples, confidence_level, batch = _lift_iv(
        credit, pivotal, groups, top_fraction, n_resamples, confidence_level, batch
    )
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    hits, chance, ks = [], [], []
    for idx in np.split(order, bounds):
        n_g = idx.size
        k = min(n_g, max(1, math.ceil(top_fraction * n_g - 1e-12)))
        hits.append(_group_top_hits(credit[idx], piv[idx], k))
        chance.append(k * piv[idx].sum() / n_g)
        ks.append(k)
    hits_a, chance_a = np.asarray(hits), np.asarray(chance)
    boot = cluster_bootstrap(
        (hits_a, chance_a),
        _ratio_of_sums,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        rng=rng,
        batch=batch,
    )
    n_top = int(sum(ks))
    return LiftResult(
        statistic=boot.statistic,
        precision=float(hits_a.sum() / n_top),
        base_rate=float(chance_a.sum() / n_top),
        ci=boot.ci,
        confidence_level=confidence_level,
        top_fraction=top_fraction,
        n_groups=len(ks),
        n_items=int(credit.size),
        n_pivotal=int(piv.sum()),
        n_top=n_top,
        n_resamples=n_resamples,
        n_degenerate=boot.n_degenerate,
        method="precision at top-k per group over chance; percentile bootstrap over groups",
        distribution=boot.distribution,
    )


register_statistic(precision_at_pivotal_lift)
