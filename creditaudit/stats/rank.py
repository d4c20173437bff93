"""Rank fidelity: within-group Spearman, its median across groups, and a cluster bootstrap CI.

This is the audit's headline statistic (docs/design.md §5): per trajectory, the Spearman correlation
between a family's credit and ``A_replay`` over included turns; the median across trajectories;
a percentile bootstrap CI over trajectories.

Hand-written because no library offers the protocol's statistic: Spearman within each group with
its rule for groups without rank information (a constant ``x`` or ``y`` — scipy returns NaN with a
warning; here the group is excluded and counted, or the call raises), then the cluster bootstrap
of the median across groups (:func:`~creditaudit.stats.cluster_bootstrap`, whose draws the tests
check against :func:`scipy.stats.bootstrap`). Each group's value is the Pearson correlation of
scipy's average ranks (:func:`scipy.stats.rankdata`) rather than :func:`scipy.stats.spearmanr`,
which returns 1 - 1e-16 for a perfect ranking where this gives 1.0 (a test pins that). The tests
check the per-group values against :func:`scipy.stats.spearmanr`, a published worked example and
average ranks computed without scipy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from creditaudit.stats._common import (
    Result,
    as_1d_finite,
    as_labels,
    check_batch,
    check_choice,
    check_open_unit,
    check_positive_int,
    check_same_length,
    percentile_interval,
    readonly,
)
from creditaudit.stats.bootstrap import cluster_bootstrap

__all__ = ["GroupSpearmanResult", "MedianSpearmanResult", "group_spearman", "median_spearman"]

_CONSTANT_RULES = ("exclude", "raise")


@dataclass(frozen=True)
class GroupSpearmanResult(Result):
    """Within-group Spearman correlations.

    Attributes
    ----------
    groups : numpy.ndarray
        Labels of the groups with rank information, sorted.
    rho : numpy.ndarray
        Spearman correlation of each group in ``groups``.
    n_items : numpy.ndarray
        Items in each group of ``groups``.
    excluded_groups : numpy.ndarray
        Labels of the groups excluded because ``x`` or ``y`` is constant within them (fewer
        than two distinct values — a single-item group included): no rank information.
    n_groups : int
        Groups with rank information (``len(groups)``).
    n_excluded_constant : int
    constant_rule : str
        ``'exclude'`` (the protocol rule ``spearman_constant: exclude``) or ``'raise'``.
    method : str
    """

    groups: np.ndarray
    rho: np.ndarray
    n_items: np.ndarray
    excluded_groups: np.ndarray
    n_groups: int
    n_excluded_constant: int
    constant_rule: str
    method: str


@dataclass(frozen=True)
class MedianSpearmanResult(Result):
    """Median within-group Spearman with its cluster-bootstrap percentile CI.

    Attributes
    ----------
    statistic : float
        Median across groups of the within-group Spearman correlation.
    ci : tuple of float
        Percentile bootstrap interval at ``confidence_level``.
    confidence_level : float
    n_groups : int
        Groups with rank information (those the median is over).
    n_excluded_constant : int
        Groups excluded as constant (no rank information).
    n_resamples : int
    n_degenerate : int
        Resamples whose median was undefined (cannot happen once constant groups are excluded;
        reported so that the convention is visible).
    constant_rule : str
    method : str
    per_group : GroupSpearmanResult
        The per-group correlations the median is over.
    distribution : numpy.ndarray
        Bootstrap distribution of the median (draw order).
    """

    statistic: float
    ci: tuple[float, float]
    confidence_level: float
    n_groups: int
    n_excluded_constant: int
    n_resamples: int
    n_degenerate: int
    constant_rule: str
    method: str
    per_group: GroupSpearmanResult
    distribution: np.ndarray

    def _interval(self, level: float) -> tuple[float, float]:
        return percentile_interval(self.distribution, level)


def _group_spearman_iv(x, y, groups, constant):
    x = as_1d_finite("x", x)
    y = as_1d_finite("y", y)
    check_same_length(x=x, y=y)
    labels, codes = as_labels("groups", groups, x.size)
    constant = check_choice("constant", constant, _CONSTANT_RULES)
    return x, y, labels, codes, constant


def group_spearman(x, y, groups, *, constant: str = "exclude") -> GroupSpearmanResult:
    """Spearman correlation of ``x`` and ``y`` within each group, with average ranks.

    Parameters
    ----------
    x, y : array_like
        Paired values (e.g. a family's credit and ``A_replay``), one per item; no NaN.
    groups : array_like
        Group label (trajectory id) of each item.
    constant : {'exclude', 'raise'}, default 'exclude'
        What to do with a group in which ``x`` or ``y`` has fewer than two distinct values
        (Spearman is undefined there: no rank information). ``'exclude'`` drops the group and
        counts it; ``'raise'`` raises ``ValueError``.

    Returns
    -------
    GroupSpearmanResult

    Notes
    -----
    Within group :math:`g`, :math:`\\rho_g` is the Pearson correlation of the average ranks
    (ties get the mean of the ranks they span) of :math:`x` and :math:`y`:
    :math:`\\rho_g = \\sum (r_i - \\bar r)(s_i - \\bar s) / \\sqrt{\\sum (r_i-\\bar r)^2 \\sum (s_i-\\bar s)^2}`.

    References
    ----------
    .. [1] Spearman, C. (1904). The proof and measurement of association between two things.
       *Am. J. Psychol.* 15(1), 72-101.

    Examples
    --------
    >>> from creditaudit.stats import group_spearman
    >>> res = group_spearman([1, 2, 3, 1, 2, 3, 5, 5], [1, 2, 3, 3, 2, 1, 0, 1],
    ...                      ["a", "a", "a", "b", "b", "b", "c", "c"])
    >>> res.groups.tolist(), res.rho.tolist(), res.excluded_groups.tolist()
    (['a', 'b'], [1.0, -1.0], ['c'])
    """
    x, y, labels, codes, constant = _group_spearman_iv(x, y, groups, constant)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    keep, rhos, sizes, excluded = [], [], [], []
    for g, idx in enumerate(np.split(order, bounds)):
        xg, yg = x[idx], y[idx]
        if np.ptp(xg) == 0 or np.ptp(yg) == 0:
            if constant == "raise":
                raise ValueError(
                    f"group {labels[g].item()!r} has constant `x` or `y` (no rank information) and "
                    "`constant` is 'raise'"
                )
            excluded.append(g)
            continue
        rx = rankdata(xg) - (xg.size + 1) / 2.0
        ry = rankdata(yg) - (yg.size + 1) / 2.0
        rho = float(rx @ ry / np.sqrt((rx @ rx) * (ry @ ry)))
        keep.append(g)
        rhos.append(min(1.0, max(-1.0, rho)))
        sizes.append(idx.size)
    return GroupSpearmanResult(
        groups=readonly(labels[keep]),
        rho=readonly(np.asarray(rhos, dtype=float)),
        n_items=readonly(np.asarray(sizes, dtype=np.int64)),
        excluded_groups=readonly(labels[excluded]),
        n_groups=len(keep),
        n_excluded_constant=len(excluded),
        constant_rule=constant,
        method="within-group Spearman (average ranks)",
    )


def _median_spearman_iv(n_resamples, confidence_level, batch):
    return (
        check_positive_int("n_resamples", n_resamples),
        check_open_unit("confidence_level", confidence_level),
        check_batch(batch),
    )


def _median(values: np.ndarray) -> np.ndarray:
    return np.median(values, axis=-1)


def median_spearman(
    x,
    y,
    groups,
    *,
    n_resamples: int = 10_000,
    confidence_level: float = 0.95,
    rng=None,
    batch: int | None = None,
    constant: str = "exclude",
) -> MedianSpearmanResult:
    """Median within-group Spearman with a cluster (group-resampling) percentile bootstrap CI.

    Parameters
    ----------
    x, y : array_like
        Paired values, one per item; no NaN.
    groups : array_like
        Group (trajectory) label of each item.
    n_resamples : int, default 10000
    confidence_level : float, default 0.95
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng` (pass a named protocol stream).
    batch : int, optional
        Resamples evaluated at once; the result does not depend on it.
    constant : {'exclude', 'raise'}, default 'exclude'
        Rule for groups without rank information, see :func:`group_spearman`.

    Returns
    -------
    MedianSpearmanResult

    Notes
    -----
    The per-group :math:`\\rho_g` are computed once (:func:`group_spearman`); resample
    :math:`b` draws :math:`G` groups with replacement and takes
    :math:`\\operatorname{median}(\\rho_{i_{b1}}, ..., \\rho_{i_{bG}})`; the interval is the
    percentile interval of those medians (:func:`cluster_bootstrap`). Resampling whole groups
    respects the dependence of items within a trajectory.

    Raises
    ------
    ValueError
        If no group has rank information.

    References
    ----------
    .. [1] Efron, B. & Tibshirani, R. J. (1993). *An Introduction to the Bootstrap*, ch. 13.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import median_spearman
    >>> gen = np.random.default_rng(1)
    >>> groups = np.repeat(np.arange(20), 6)
    >>> truth = gen.normal(size=groups.size)
    >>> credit = truth + gen.normal(size=groups.size)
    >>> res = median_spearman(credit, truth, groups, n_resamples=1000, rng=2)
    >>> res.n_groups, res.n_excluded_constant, res.n_degenerate
    (20, 0, 0)
    >>> bool(0.3 < res.statistic < 1.0 and res.ci[0] < res.statistic < res.ci[1])
    True
    """
    n_resamples, confidence_level, batch = _median_spearman_iv(n_resamples, confidence_level, batch)
    per_group = group_spearman(x, y, groups, constant=constant)
    if per_group.n_groups == 0:
        raise ValueError(
            f"no group of `groups` has rank information ({per_group.n_excluded_constant} "
            "constant group(s) excluded); the median Spearman is undefined"
        )
    boot = cluster_bootstrap(
        per_group.rho,
        _median,
        n_resamples=n_resamples,
        confidence_level=confidence_level,
        rng=rng,
        batch=batch,
    )
    return MedianSpearmanResult(
        statistic=boot.statistic,
        ci=boot.ci,
        confidence_level=confidence_level,
        n_groups=per_group.n_groups,
        n_excluded_constant=per_group.n_excluded_constant,
        n_resamples=n_resamples,
        n_degenerate=boot.n_degenerate,
        constant_rule=per_group.constant_rule,
        method="median within-group Spearman; percentile bootstrap over groups",
        per_group=per_group,
        distribution=boot.distribution,
    )
