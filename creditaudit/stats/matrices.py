"""Permutation tests on distance matrices: the partition test, Mantel and partial Mantel.

Used on the matrix of JS divergences between training-arm checkpoints (docs/design.md §6): is the
between-arm divergence larger than the within-arm one, and does the divergence matrix follow
the design matrix once parameter displacement is held fixed (partial Mantel)?

All three permute *objects* (rows and columns jointly) and compute the statistics of every
permutation in batches with matrix operations on the unrolled upper triangle.

What comes from a library and what is hand-written: the plain Mantel statistic is
:func:`skbio.stats.distance.mantel`'s. The permutation engine is hand-written, because no
library offers (a) the partial Mantel test — no Python package has vegan's ``mantel.partial`` —,
(b) the partition test (between- minus within-group mean distance; scikit-bio's ANOSIM ranks
the distances and PERMANOVA uses a pseudo-F), (c) explicit permutation matrices (vegan's
``permutations=`` matrix, which makes a full enumeration an exact test), or (d) vegan's tie rule,
which counts a permuted statistic within :data:`~creditaudit.stats._common.TIE_EPS` of the
observed one as a tie. scikit-bio compares exactly, and on tied matrices — a training-arm design
matrix is mostly ties — statistics equal to the observed one up to float error fall on either
side of it, so its p-value drifts from vegan's (the tests show one case). One engine therefore
serves all three tests, plain Mantel included. Drawn permutations are the ones scikit-bio draws
from the same generator (``Generator.permutation(n)`` per permutation), so on untied data the
plain Mantel p-value equals scikit-bio's. The tests pin R vegan 2.6-4's numbers (exact
enumeration) and enumerate the partition test by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from creditaudit.stats._common import (
    TIE_EPS,
    Result,
    as_labels,
    check_alternative,
    check_batch,
    check_choice,
    check_positive_int,
    readonly,
)

__all__ = ["PartitionTestResult", "MantelResult", "partition_test", "mantel", "partial_mantel"]

_MANTEL_METHODS = ("pearson", "spearman")
#: Permuted upper-triangle values held in memory at once when ``batch`` is not given (small
#: enough to stay in cache: faster than larger batches, measured on 100 x 100).
_MAX_ELEMENTS = 1 << 18


def _check_distance_matrix(name: str, m, *, atol: float = 1e-12) -> np.ndarray:
    try:
        a = np.asarray(m, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a square matrix of numbers") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"`{name}` must be a square matrix; got shape {a.shape}")
    if a.shape[0] < 3:
        raise ValueError(f"`{name}` must be at least 3 x 3; got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` contains NaN or infinite values")
    if not np.allclose(a, a.T, rtol=0.0, atol=atol * max(1.0, float(np.abs(a).max()))):
        raise ValueError(f"`{name}` must be symmetric")
    if np.any(np.diag(a) != 0):
        raise ValueError(f"`{name}` must have a zero diagonal (a distance matrix)")
    return a


def _permutations_iv(permutations, n: int):
    """``permutations``: a count, or an explicit ``(P, n)`` array of permutations of ``0..n-1``."""
    if isinstance(permutations, (int, np.integer)) and not isinstance(permutations, bool):
        return check_positive_int("permutations", permutations), None
    try:
        perms = np.asarray(permutations)
    except (TypeError, ValueError):
        perms = None
    if perms is None or perms.ndim != 2 or perms.shape[1] != n or perms.shape[0] == 0 or perms.dtype.kind not in "iu":
        raise ValueError(
            f"`permutations` must be a positive integer or an integer array of shape (P, {n}) "
            "whose rows are permutations of 0..n-1"
        )
    if not (np.sort(perms, axis=1) == np.arange(n)).all():
        raise ValueError(f"every row of `permutations` must be a permutation of 0..{n - 1}")
    return int(perms.shape[0]), perms.astype(np.intp)


def _permutation_batches(n: int, count: int, explicit, batch, per_row: int, rng):
    """Yield ``(b, n)`` permutation arrays: explicit rows, or ``rng.permuted`` draws.

    Drawn permutations are the rows of ``rng.permuted(np.tile(arange(n), (b, 1)), axis=1)``;
    the stream does not depend on the batch size (each row is shuffled in turn), and it is the
    stream of ``rng.permutation(n)`` called once per permutation, as scikit-bio's ``mantel`` draws.
    """
    if batch is None:
        batch = max(1, _MAX_ELEMENTS // max(per_row, 1))
    if explicit is not None:
        for start in range(0, count, batch):
            yield explicit[start : start + batch]
        return
    gen = np.random.default_rng(rng)
    done = 0
    while done < count:
        b = min(batch, count - done)
        yield gen.permuted(np.tile(np.arange(n), (b, 1)), axis=1)
        done += b


def _pvalue(null: np.ndarray, observed: float, alternative: str) -> tuple[float, int]:
    """``(count of as-or-more-extreme + 1) / (valid permutations + 1)``, ties within TIE_EPS.

    Non-finite permuted statistics (degenerate permutations) are neither counted nor in the
    denominator; their number is returned.
    """
    valid = null[np.isfinite(null)]
    n_degenerate = int(null.size - valid.size)
    if alternative == "greater":
        hits = np.count_nonzero(valid >= observed - TIE_EPS)
    elif alternative == "less":
        hits = np.count_nonzero(valid <= observed + TIE_EPS)
    else:
        hits = np.count_nonzero(np.abs(valid) >= abs(observed) - TIE_EPS)
    return float((hits + 1) / (valid.size + 1)), n_degenerate


@dataclass(frozen=True)
class PartitionTestResult(Result):
    """Between-group vs within-group permutation test on a distance matrix.

    Attributes
    ----------
    statistic : float
        ``mean_between - mean_within``.
    mean_between, mean_within : float
        Mean distance over pairs in different groups / in the same group.
    pvalue : float
    permutations : int
    alternative : str
    n_objects, n_groups : int
    n_between_pairs, n_within_pairs : int
    method : str
    null_distribution : numpy.ndarray
        ``mean_between - mean_within`` under each label permutation.
    """

    statistic: float
    mean_between: float
    mean_within: float
    pvalue: float
    permutations: int
    alternative: str
    n_objects: int
    n_groups: int
    n_between_pairs: int
    n_within_pairs: int
    method: str
    null_distribution: np.ndarray


def _partition_iv(distances, labels, permutations, alternative, batch):
    d = _check_distance_matrix("distances", distances)
    n = d.shape[0]
    uniques, codes = as_labels("labels", labels, n)
    if uniques.size < 2:
        raise ValueError("`labels` must define at least 2 groups")
    if uniques.size == n:
        raise ValueError("`labels` must put at least two objects in one group (no within-group pair otherwise)")
    count, explicit = _permutations_iv(permutations, n)
    return d, uniques, codes, count, explicit, check_alternative(alternative), check_batch(batch)


def partition_test(
    distances,
    labels,
    *,
    permutations=9999,
    alternative: str = "greater",
    rng=None,
    batch: int | None = None,
) -> PartitionTestResult:
    """Permutation test of mean between-group vs mean within-group distance.

    Parameters
    ----------
    distances : array_like
        ``(n, n)`` symmetric distance matrix with a zero diagonal (e.g. JS divergences between
        checkpoints).
    labels : array_like
        Group (arm) of each object; at least 2 groups and one within-group pair.
    permutations : int or array_like, default 9999
        Number of random label permutations, or an explicit ``(P, n)`` integer array of
        permutations of ``0..n-1`` (e.g. a full enumeration for an exact test).
    alternative : {'greater', 'less', 'two-sided'}, default 'greater'
        'greater': between-group distances exceed within-group ones (the partition matters).
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng` (pass a named protocol stream).
    batch : int, optional
        Permutations evaluated at once; the result does not depend on it.

    Returns
    -------
    PartitionTestResult

    Notes
    -----
    Over the pairs :math:`i<j`, :math:`T = \\overline{d}_{between} - \\overline{d}_{within}`.
    Labels are permuted (the group sizes, hence the pair counts, are fixed), and
    :math:`p = (\\#\\{T^*_b \\ge T\\} + 1)/(B + 1)` for 'greater' ('less': :math:`\\le`;
    'two-sided': :math:`|T^*_b| \\ge |T|`), ties within :math:`\\sqrt{\\epsilon}`.
    Hand-written: no library offers this statistic (scikit-bio's ANOSIM and PERMANOVA test other
    ones); the tests check it by full enumeration.

    References
    ----------
    .. [1] Anderson, M. J. (2001). A new method for non-parametric multivariate analysis of
       variance. *Austral Ecol.* 26, 32-46.
    .. [2] Good, P. (2005). *Permutation, Parametric and Bootstrap Tests of Hypotheses*, 3rd ed.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import partition_test
    >>> points = np.array([0.0, 0.1, 0.2, 0.3, 5.0, 5.1, 5.2, 5.3])
    >>> d = np.abs(points[:, None] - points[None, :])
    >>> res = partition_test(d, [0, 0, 0, 0, 1, 1, 1, 1], permutations=999, rng=0)
    >>> round(res.mean_between, 3), round(res.mean_within, 3), res.pvalue < 0.05
    (5.0, 0.167, True)
    """
    d, uniques, codes, count, explicit, alternative, batch = _partition_iv(
        distances, labels, permutations, alternative, batch
    )
    n = d.shape[0]
    i, j = np.triu_indices(n, k=1)
    dv = d[i, j]
    total = float(dv.sum())
    same = codes[i] == codes[j]
    n_within = int(same.sum())
    n_between = int(dv.size - n_within)
    mean_within = float(dv[same].mean())
    mean_between = float(dv[~same].mean())
    observed = mean_between - mean_within
    parts = []
    for perms in _permutation_batches(n, count, explicit, batch, dv.size, rng):
        lab = codes[perms]
        within_sum = (lab[:, i] == lab[:, j]) @ dv
        parts.append((total - within_sum) / n_between - within_sum / n_within)
    null = np.concatenate(parts)
    pvalue, _ = _pvalue(null, observed, alternative)
    return PartitionTestResult(
        statistic=observed,
        mean_between=mean_between,
        mean_within=mean_within,
        pvalue=pvalue,
        permutations=count,
        alternative=alternative,
        n_objects=n,
        n_groups=int(uniques.size),
        n_between_pairs=n_between,
        n_within_pairs=n_within,
        method="between- vs within-group mean distance; label permutation",
        null_distribution=readonly(null),
    )


@dataclass(frozen=True)
class MantelResult(Result):
    """Mantel or partial Mantel test.

    Attributes
    ----------
    statistic : float
        Correlation of the upper triangles (partial correlation given ``z`` for the partial test).
    pvalue : float
    permutations : int
        Permutations evaluated (including any degenerate ones).
    n_degenerate : int
        Permutations whose statistic was undefined; left out of the p-value's count and
        denominator.
    alternative : str
    method : str
        'pearson' or 'spearman'.
    n : int
        Objects (matrix size).
    partial : bool
    test : str
    null_distribution : numpy.ndarray
    """

    statistic: float
    pvalue: float
    permutations: int
    n_degenerate: int
    alternative: str
    method: str
    n: int
    partial: bool
    test: str
    null_distribution: np.ndarray


def _unit_vector(name: str, values: np.ndarray, method: str) -> np.ndarray:
    v = rankdata(values) if method == "spearman" else values.astype(float)
    v = v - v.mean()
    norm = float(np.sqrt(v @ v))
    if norm == 0.0 or norm < 1e-14 * max(1.0, float(np.abs(values).max())):
        raise ValueError(f"`{name}` has constant off-diagonal entries; its correlation is undefined")
    return v / norm


def _mantel_iv(x, y, z, method, permutations, alternative, batch):
    x = _check_distance_matrix("x", x)
    y = _check_distance_matrix("y", y)
    if y.shape != x.shape:
        raise ValueError(f"`x` and `y` must have the same shape; got {x.shape} and {y.shape}")
    if z is not None:
        z = _check_distance_matrix("z", z)
        if z.shape != x.shape:
            raise ValueError(f"`z` must have the shape of `x`; got {z.shape} and {x.shape}")
    method = check_choice("method", method, _MANTEL_METHODS)
    count, explicit = _permutations_iv(permutations, x.shape[0])
    return x, y, z, method, count, explicit, check_alternative(alternative), check_batch(batch)


def _skbio_mantel_statistic(x: np.ndarray, y: np.ndarray, method: str) -> float:
    """scikit-bio's Mantel correlation of the upper triangles (no permutations)."""
    from skbio.stats.distance import mantel as skbio_mantel

    n = x.shape[0]
    i, j = np.triu_indices(n, k=1)

    def exactly_symmetric(m):  # the validation allows float asymmetry; scikit-bio does not
        out = np.zeros((n, n))
        out[i, j] = m[i, j]
        out[j, i] = m[i, j]
        return out

    # seed: no permutation is drawn, but scikit-bio would seed from numpy's global RNG without one
    statistic, _, _ = skbio_mantel(exactly_symmetric(x), exactly_symmetric(y), method=method, permutations=0, seed=0)
    return float(statistic)


def _mantel_core(x, y, z, method, count, explicit, alternative, rng, batch) -> MantelResult:
    n = x.shape[0]
    i, j = np.triu_indices(n, k=1)
    xs = _unit_vector("x", x[i, j], method)
    ys = _unit_vector("y", y[i, j], method)
    # Full symmetric matrix of the standardised x values: a permutation's unrolled upper
    # triangle is gathered from it; as a rearrangement of the same values it keeps their mean
    # and norm, so its correlation with a unit vector is a dot product.
    xfull = np.zeros((n, n))
    xfull[i, j] = xs
    xfull[j, i] = xs
    flat = xfull.reshape(-1)
    if z is None:
        targets = ys[:, None]
        observed = _skbio_mantel_statistic(x, y, method)  # after the unit vectors refused constant input
    else:
        zs = _unit_vector("z", z[i, j], method)
        ryz = float(np.clip(ys @ zs, -1.0, 1.0))
        if abs(ryz) >= 1.0 - 1e-12:
            raise ValueError("`y` and `z` are perfectly correlated; the partial correlation is undefined")
        targets = np.column_stack([ys, zs])
        rxy, rxz = float(xs @ ys), float(xs @ zs)
        if abs(rxz) >= 1.0 - 1e-12:
            raise ValueError("`x` and `z` are perfectly correlated; the partial correlation is undefined")
        observed = (rxy - rxz * ryz) / np.sqrt(1.0 - rxz * rxz) / np.sqrt(1.0 - ryz * ryz)
        observed = float(observed)
    # flat indices of a permuted upper triangle: perm[i] * n + perm[j], in the narrowest integer
    # type that holds n * n (int32 halves the memory traffic of the gather, the hot loop)
    itype = np.int32 if n * n < 2**31 else np.int64
    ii, jj = i.astype(itype), j.astype(itype)
    parts = []
    for perms in _permutation_batches(n, count, explicit, batch, i.size, rng):
        p = perms.astype(itype, copy=False)
        flat_index = p[:, ii] * itype(n)
        flat_index += p[:, jj]
        gathered = flat.take(flat_index)  # (b, m)
        r = gathered @ targets
        if z is None:
            parts.append(r[:, 0])
        else:
            prxy, prxz = r[:, 0], r[:, 1]
            with np.errstate(divide="ignore", invalid="ignore"):
                parts.append((prxy - prxz * ryz) / np.sqrt(1.0 - prxz * prxz) / np.sqrt(1.0 - ryz * ryz))
    null = np.concatenate(parts)
    null[~np.isfinite(null)] = np.nan
    pvalue, n_degenerate = _pvalue(null, observed, alternative)
    return MantelResult(
        statistic=observed,
        pvalue=pvalue,
        permutations=count,
        n_degenerate=n_degenerate,
        alternative=alternative,
        method=method,
        n=n,
        partial=z is not None,
        test="partial mantel" if z is not None else "mantel",
        null_distribution=readonly(null),
    )


def mantel(
    x,
    y,
    *,
    method: str = "pearson",
    permutations=9999,
    alternative: str = "greater",
    rng=None,
    batch: int | None = None,
) -> MantelResult:
    """Mantel test of the correlation between two distance matrices.

    Parameters
    ----------
    x, y : array_like
        ``(n, n)`` symmetric matrices with zero diagonals, ``n >= 3``.
    method : {'pearson', 'spearman'}, default 'pearson'
        Correlation of the unrolled upper triangles (Spearman: average ranks).
    permutations : int or array_like, default 9999
        Number of random permutations, or an explicit ``(P, n)`` integer array of
        permutations of ``0..n-1`` (as R vegan's ``permutations=`` matrix).
    alternative : {'greater', 'less', 'two-sided'}, default 'greater'
        vegan's test is 'greater'; 'two-sided' compares absolute values (as scikit-bio).
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng` (pass a named protocol stream).
    batch : int, optional
        Permutations evaluated at once; the result does not depend on it.

    Returns
    -------
    MantelResult

    Notes
    -----
    :math:`r = \\operatorname{cor}(\\operatorname{ut}(X), \\operatorname{ut}(Y))`, computed by
    :func:`skbio.stats.distance.mantel`. Each permutation :math:`\\pi` reorders rows and columns
    of :math:`X` jointly; the statistic is recomputed on :math:`\\operatorname{ut}(X_{\\pi\\pi})`
    by the module's permutation engine, and
    :math:`p = (\\#\\{r^*_b \\ge r - \\sqrt\\epsilon\\} + 1)/(B+1)` for 'greater' (vegan's
    rule; see the module docstring for why not scikit-bio's p-value). With the same generator the
    permutations are scikit-bio's, so on untied data the p-value is scikit-bio's too.

    References
    ----------
    .. [1] Mantel, N. (1967). The detection of disease clustering and a generalized regression
       approach. *Cancer Res.* 27(2), 209-220.
    .. [2] Legendre, P. & Legendre, L. (2012). *Numerical Ecology*, 3rd ed., §10.5.1.
    .. [3] Oksanen, J. et al. vegan: Community Ecology Package, ``mantel``.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import mantel
    >>> gen = np.random.default_rng(0)
    >>> pts = gen.normal(size=(12, 2))
    >>> x = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    >>> res = mantel(x, x ** 2, permutations=999, rng=1)
    >>> res.statistic > 0.9, res.pvalue < 0.01
    (True, True)
    """
    x, y, _, method, count, explicit, alternative, batch = _mantel_iv(
        x, y, None, method, permutations, alternative, batch
    )
    return _mantel_core(x, y, None, method, count, explicit, alternative, rng, batch)


def partial_mantel(
    x,
    y,
    z,
    *,
    method: str = "pearson",
    permutations=9999,
    alternative: str = "greater",
    rng=None,
    batch: int | None = None,
) -> MantelResult:
    """Partial Mantel test of ``x`` and ``y`` controlling for ``z`` (vegan's ``mantel.partial``).

    Parameters
    ----------
    x, y, z : array_like
        ``(n, n)`` symmetric matrices with zero diagonals, ``n >= 3`` (e.g. JS divergence,
        design, parameter displacement). ``x`` is the one permuted.
    method : {'pearson', 'spearman'}, default 'pearson'
    permutations : int or array_like, default 9999
        Number of random permutations, or an explicit ``(P, n)`` integer array of permutations
        (vegan's ``permutations=`` matrix; a full enumeration makes the test exact).
    alternative : {'greater', 'less', 'two-sided'}, default 'greater'
        vegan's ``mantel.partial`` is one-sided, 'greater'.
    rng : None, int, numpy.random.Generator or SeedSequence, optional
        Passed through :func:`numpy.random.default_rng` (pass a named protocol stream).
    batch : int, optional
        Permutations evaluated at once; the result does not depend on it.

    Returns
    -------
    MantelResult

    Notes
    -----
    With :math:`r_{xy}, r_{xz}, r_{yz}` the correlations of the unrolled upper triangles,
    :math:`r_{xy\\cdot z} = (r_{xy} - r_{xz} r_{yz}) / \\sqrt{(1-r_{xz}^2)(1-r_{yz}^2)}`.
    Each permutation reorders rows and columns of :math:`X` jointly and recomputes
    :math:`r_{xy}` and :math:`r_{xz}` (:math:`r_{yz}` is fixed); Spearman ranks each triangle
    once (ranks of a rearrangement are the rearranged ranks).
    :math:`p = (\\#\\{r^*_b \\ge r - \\sqrt\\epsilon\\} + 1)/(B + 1)` for 'greater' — the
    algorithm of Legendre & Legendre as implemented by vegan 2.6 ``mantel.partial``, against
    which the tests pin reference values. Hand-written: no Python library has a partial Mantel
    test.

    References
    ----------
    .. [1] Smouse, P. E., Long, J. C. & Sokal, R. R. (1986). Multiple regression and
       correlation extensions of the Mantel test of matrix correspondence. *Syst. Zool.* 35(4),
       627-632.
    .. [2] Legendre, P. & Legendre, L. (2012). *Numerical Ecology*, 3rd ed., §10.5.2.
    .. [3] Oksanen, J. et al. vegan: Community Ecology Package, ``mantel.partial``.

    Examples
    --------
    >>> import numpy as np
    >>> from creditaudit.stats import partial_mantel
    >>> gen = np.random.default_rng(0)
    >>> pts = gen.normal(size=(10, 3))
    >>> dist = lambda a: np.abs(a[:, None] - a[None, :])
    >>> x, y, z = dist(pts[:, 0] + pts[:, 1]), dist(pts[:, 0]), dist(pts[:, 1])
    >>> res = partial_mantel(x, y, z, permutations=999, rng=1)
    >>> res.test, res.alternative, res.statistic > 0
    ('partial mantel', 'greater', True)
    """
    x, y, z, method, count, explicit, alternative, batch = _mantel_iv(x, y, z, method, permutations, alternative, batch)
    return _mantel_core(x, y, z, method, count, explicit, alternative, rng, batch)
