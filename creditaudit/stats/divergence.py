"""Jensen-Shannon divergence between action distributions (docs/design.md §6).

A *divergence* with the log base stated, computed as the square of
:func:`scipy.spatial.distance.jensenshannon` (scipy returns the Jensen-Shannon *distance*, the
divergence's square root). Inputs must already be probability distributions: they are checked
here and a vector that is not one is refused, never renormalised (scipy divides each vector by its
sum; for a vector that passed the check that changes the value only within the check's
tolerance). The tests check the values against closed forms and the definition computed with
numpy's logarithms, not against scipy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from creditaudit.stats._common import Result, check_finite_float, readonly

__all__ = ["JSDivergenceResult", "js_divergence", "js_divergence_matrix"]

#: Default tolerance on a distribution's total mass and on tiny negative entries.
DEFAULT_ATOL = 1e-6


@dataclass(frozen=True)
class JSDivergenceResult(Result):
    """Jensen-Shannon divergence.

    Attributes
    ----------
    statistic : float
        The divergence, in ``[0, log_base(2)]`` (``[0, 1]`` in bits).
    base : float
        Logarithm base (2: bits; e: nats).
    method : str
    """

    statistic: float
    base: float
    method: str

    def __float__(self) -> float:
        return self.statistic


def _check_base(base) -> float:
    base = check_finite_float("base", base)
    if base <= 0 or base == 1:
        raise ValueError(f"`base` must be positive and not 1 (e.g. 2 for bits, math.e for nats); got {base}")
    return base


def _check_distributions(name: str, p, atol: float) -> np.ndarray:
    """Validate rows of ``p`` as distributions; clamp negatives above ``-atol`` to zero."""
    try:
        a = np.array(p, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be an array of probabilities") from None
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError(f"`{name}` must have at least one outcome")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` contains NaN or infinite values")
    if (a < -atol).any():
        raise ValueError(f"`{name}` has negative probabilities (min {a.min():.3g}); it is not a distribution")
    a[a < 0] = 0.0  # float error only: these are within atol of 0
    total = a.sum(axis=-1)
    bad = np.abs(total - 1.0) > atol
    if bad.any():
        worst = float(total.reshape(-1)[np.argmax(np.abs(total - 1.0).reshape(-1))])
        raise ValueError(
            f"`{name}` must sum to 1 along its last axis (within atol={atol:g}); found a total of "
            f"{worst!r}. Distributions are not renormalised silently: normalise them first"
        )
    return a


def _jsd(p: np.ndarray, q: np.ndarray, base: float) -> np.ndarray:
    """The divergence: scipy's distance along the last axis, squared."""
    from scipy.spatial.distance import jensenshannon

    with np.errstate(invalid="ignore"):  # scipy takes the square root of a float-error negative
        distance = jensenshannon(p, q, base=base, axis=-1)
    # the validated inputs leave no other source of NaN: a divergence within float error below 0 is 0
    return np.where(np.isnan(distance), 0.0, np.square(distance))


def _js_iv(p, q, base, atol):
    atol = check_finite_float("atol", atol)
    if atol < 0:
        raise ValueError(f"`atol` must be >= 0; got {atol}")
    p = _check_distributions("p", p, atol)
    q = _check_distributions("q", q, atol)
    if p.ndim != 1 or q.ndim != 1:
        raise ValueError("`p` and `q` must be 1-D distributions (use js_divergence_matrix for many)")
    if p.shape != q.shape:
        raise ValueError(f"`p` and `q` must have the same support; shapes {p.shape} and {q.shape}")
    return p, q, _check_base(base), atol


def js_divergence(p, q, *, base: float = 2.0, atol: float = DEFAULT_ATOL) -> JSDivergenceResult:
    """Jensen-Shannon divergence of two discrete distributions.

    Parameters
    ----------
    p, q : array_like
        Probability vectors on the same support: non-negative, summing to 1 within ``atol``.
        Not renormalised: a vector that is not a distribution raises ``ValueError``.
    base : float, default 2
        Logarithm base (2 gives bits and a divergence in [0, 1]).
    atol : float, default 1e-6
        Tolerance on the total mass and on negative entries (float error; such entries are
        clamped to 0).

    Returns
    -------
    JSDivergenceResult

    Notes
    -----
    :math:`JSD(P\\|Q) = \\tfrac12 KL(P\\|M) + \\tfrac12 KL(Q\\|M)`, :math:`M = \\tfrac12(P+Q)`,
    :math:`KL(P\\|M) = \\sum_i p_i \\log_b (p_i/m_i)` with :math:`0 \\log 0 = 0`. Computed as the
    square of :func:`scipy.spatial.distance.jensenshannon` with the same base (the distance).
    Results within float error below 0 are 0.

    References
    ----------
    .. [1] Lin, J. (1991). Divergence measures based on the Shannon entropy. *IEEE Trans. Inf.
       Theory* 37(1), 145-151.

    Examples
    --------
    >>> from creditaudit.stats import js_divergence
    >>> js_divergence([1.0, 0.0], [0.0, 1.0]).statistic
    1.0
    >>> round(js_divergence([0.5, 0.5], [0.9, 0.1]).statistic, 6)
    0.146793
    """
    p, q, base, _ = _js_iv(p, q, base, atol)
    return JSDivergenceResult(statistic=float(_jsd(p, q, base)), base=base, method="jensen-shannon divergence")


def js_divergence_matrix(distributions, *, base: float = 2.0, atol: float = DEFAULT_ATOL) -> np.ndarray:
    """Pairwise Jensen-Shannon divergences between the rows of ``distributions``.

    Parameters
    ----------
    distributions : array_like
        Shape ``(n, k)``: one distribution per row (e.g. a checkpoint's action distribution on
        a probe state; concatenate or average over states before, as the protocol fixes).
    base : float, default 2
    atol : float, default 1e-6

    Returns
    -------
    numpy.ndarray
        ``(n, n)`` symmetric divergence matrix with a zero diagonal (read-only), ready for
        :func:`partition_test` and :func:`mantel`.

    Notes
    -----
    Entry :math:`(i, j)` is :func:`js_divergence` of rows :math:`i` and :math:`j`; the matrix is
    computed for :math:`i < j` and mirrored, so it is exactly symmetric.

    References
    ----------
    .. [1] Lin, J. (1991). *IEEE Trans. Inf. Theory* 37(1), 145-151.

    Examples
    --------
    >>> from creditaudit.stats import js_divergence_matrix
    >>> js_divergence_matrix([[1, 0], [0, 1], [0.5, 0.5]]).round(4).tolist()
    [[0.0, 1.0, 0.3113], [1.0, 0.0, 0.3113], [0.3113, 0.3113, 0.0]]
    """
    atol = check_finite_float("atol", atol)
    if atol < 0:
        raise ValueError(f"`atol` must be >= 0; got {atol}")
    d = _check_distributions("distributions", distributions, atol)
    if d.ndim != 2:
        raise ValueError(f"`distributions` must be 2-D (one distribution per row); got shape {d.shape}")
    base = _check_base(base)
    n = d.shape[0]
    i, j = np.triu_indices(n, k=1)
    out = np.zeros((n, n))
    values = _jsd(d[i], d[j], base) if i.size else np.empty(0)
    out[i, j] = values
    out[j, i] = values
    return readonly(out)
