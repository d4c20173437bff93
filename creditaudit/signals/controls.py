"""Control credits: null controls (random, uniform) and derived controls (shuffle, inverted).

* ``random``: i.i.d. N(0, 1) per turn.
* ``uniform``: i.i.d. Uniform(-1, 1) per turn.
* ``shuffle`` of a family: within every trajectory, a seeded permutation of that trajectory's
  non-abstained credits over its non-abstained positions (marginal-matched: the multiset of
  credits of every trajectory is preserved); abstained positions stay abstained. When the replay
  results are known, the turns the audit can include (replay status ``complete``) are permuted
  among themselves and the other turns among themselves, so a control and its family share their
  set of audited turns and the multiset of credits on it: a family constant on its included turns
  has a constant shuffle there too, never credit moved in from turns the audit excludes.
* ``inverted`` of a family: minus its credit (abstentions carried over).

Every random draw comes from the named stream ``signals/control/<control name>/<trajectory id>``,
so a control's values for one trajectory do not depend on any other trajectory or control.

A shuffle's strength is measured, not assumed: :func:`changed_share` is the share of
non-abstained positions whose value the permutation actually changed (ties make a permutation
change fewer positions: the audit paper measured 90.4% for continuous credit and 26.0% for
tie-heavy judge scores).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from creditaudit.protocol.seeds import SeedStreams
from creditaudit.signals.base import reasons_of

__all__ = ["CONTROL_KINDS", "control_stream", "null_control", "shuffle_control", "inverted_control",
           "changed_share", "shuffle_values"]

CONTROL_KINDS = ("random", "uniform", "shuffle", "inverted")
SOURCE_ABSTAINED = "source_abstained"


def control_stream(control: str, trajectory_id: str) -> str:
    """The seed-stream name of a control's draws for one trajectory."""
    return f"signals/control/{control}/{trajectory_id}"


def shuffle_values(values: Sequence[float], *, rng: np.random.Generator | int | None = None) -> np.ndarray:
    """A seeded permutation of ``values`` (NaN marks an abstention and stays in place).

    Examples
    --------
    >>> out = shuffle_values([1.0, float("nan"), 2.0, 3.0], rng=0)
    >>> bool(np.isnan(out[1])), sorted(out[[0, 2, 3]].tolist())
    (True, [1.0, 2.0, 3.0])
    """
    rng = np.random.default_rng(rng)
    x = np.asarray(values, dtype=float)
    out = x.copy()
    keep = np.flatnonzero(~np.isnan(x))
    out[keep] = x[keep][rng.permutation(keep.size)]
    return out


def _frame(credit: pd.DataFrame, values: np.ndarray, reasons: list) -> pd.DataFrame:
    return pd.DataFrame({"trajectory_id": pd.Series(credit["trajectory_id"].to_numpy(), dtype=object),
                         "turn": credit["turn"].to_numpy(), "credit": values,
                         "abstain_reason": pd.Series(reasons, dtype=object)})


def null_control(kind: str, name: str, trajectories: pd.DataFrame, protocol_id: str) -> pd.DataFrame:
    """A ``random`` (N(0,1)) or ``uniform`` (U(-1,1)) control over the rows of ``trajectories``
    (columns ``trajectory_id``, ``turn``; one draw per turn, in turn order)."""
    if kind not in ("random", "uniform"):
        raise ValueError(f"`kind` must be one of {{'random', 'uniform'}}; got {kind!r}")
    streams = SeedStreams(protocol_id)
    values = np.empty(len(trajectories))
    tids = trajectories["trajectory_id"].to_numpy()
    for tid in pd.unique(tids):
        idx = np.flatnonzero(tids == tid)
        idx = idx[np.argsort(trajectories["turn"].to_numpy()[idx], kind="stable")]
        gen = streams.rng(control_stream(name, tid))
        values[idx] = gen.standard_normal(idx.size) if kind == "random" else gen.uniform(-1.0, 1.0, idx.size)
    return _frame(trajectories, values, [None] * len(trajectories))


def shuffle_control(name: str, credit: pd.DataFrame, protocol_id: str, *,
                    audited: Sequence[bool] | np.ndarray | None = None) -> pd.DataFrame:
    """Within-trajectory, marginal-matched, seeded shuffle of a family's credit frame.

    ``audited`` (one flag per row, optional): the turns the audit can include (replay status
    ``complete``); they are permuted only among themselves, and the other turns among themselves,
    each trajectory's with the one generator of its stream (audited turns first).
    """
    streams = SeedStreams(protocol_id)
    src = credit["credit"].to_numpy(dtype=float)
    values = src.copy()
    tids = credit["trajectory_id"].to_numpy()
    turns = credit["turn"].to_numpy()
    flags = None if audited is None else np.asarray(audited, dtype=bool)
    if flags is not None and flags.shape != src.shape:
        raise ValueError(f"`audited` must have one flag per row ({src.size}); got shape {flags.shape}")
    for tid in pd.unique(tids):
        idx = np.flatnonzero(tids == tid)
        idx = idx[np.argsort(turns[idx], kind="stable")]
        gen = streams.rng(control_stream(name, tid))
        if flags is None:
            values[idx] = shuffle_values(src[idx], rng=gen)
        else:
            for part in (idx[flags[idx]], idx[~flags[idx]]):
                values[part] = shuffle_values(src[part], rng=gen)
    reasons = [SOURCE_ABSTAINED if r is not None else None for r in reasons_of(credit)]
    return _frame(credit, values, reasons)


def inverted_control(credit: pd.DataFrame) -> pd.DataFrame:
    """Minus a family's credit (abstentions carried over)."""
    reasons = [SOURCE_ABSTAINED if r is not None else None for r in reasons_of(credit)]
    return _frame(credit, -credit["credit"].to_numpy(dtype=float), reasons)


def changed_share(original: pd.DataFrame, control: pd.DataFrame) -> dict:
    """Share of non-abstained positions whose value the control changed.

    Returns
    -------
    dict
        ``{"n_positions", "n_changed", "changed_share"}`` (share null when there is no position).
    """
    a = original["credit"].to_numpy(dtype=float)
    b = control["credit"].to_numpy(dtype=float)
    mask = ~np.isnan(a)
    n = int(mask.sum())
    changed = int((a[mask] != b[mask]).sum())
    return {"n_positions": n, "n_changed": changed, "changed_share": changed / n if n else None}
