"""Precomputed credit: per-turn credit a user computed with their own code, read from a file.

The researcher's trainer already holds step credit (rLLM's ``Step.advantage``, verl-agent's GiGPO
step advantages, a reward model's per-turn scores). They compute it on the collected trajectories
(``collect/trajectories.parquet``, whose columns the README's data dictionary lists) and write one
file with a row per credited turn:

=================  ========  ===================================================================
column             type      meaning
=================  ========  ===================================================================
``trajectory_id``  string    a collected trajectory (``collect/trajectories.parquet``)
``turn``           integer   a decision index of that trajectory
``credit``         number    the turn's credit; empty / NaN / null = an abstention (reason ``nan``)
``abstain_reason`` string    optional: the turn abstains with this reason (leave ``credit`` empty)
=================  ========  ===================================================================

as Parquet (``.parquet``), CSV (``.csv``) or JSON Lines (``.jsonl``). The file lies inside the run
directory and is named relative to it, so the signals stage's signed link record attests its
SHA-256 (and records its row count and columns), and ``creditaudit ledger check`` fails naming the
file if it changes afterwards.

Rules: a row for a turn that was not collected, a duplicate (trajectory, turn), a credit that is not
a number, a row with both a credit and an abstention reason, or a missing column is an
:class:`~creditaudit.errors.InputError` (exit 2) naming the file, the row and what to do, raised
before the stage writes anything. A collected turn without a row abstains with reason ``missing``;
a NaN credit abstains with reason ``nan`` -- never a silent 0.

The protocol sets the neutral credit (``neutral``, default 0: sign agreement takes signs relative
to it) or centres the credit within each trajectory (``centre: true``, for a score with no neutral
point).

Examples
--------
>>> family = precomputed_family(name="mine", path="credit/mine.csv", centre=True)
>>> family.neutral, family.needs
('trajectory-mean', frozenset())
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import sha256_file
from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, credit_frame

__all__ = ["COLUMNS", "FORMATS", "read_credit_file", "PrecomputedFamily", "precomputed_family"]

#: Required columns of a credit file, then the optional one.
COLUMNS = ("trajectory_id", "turn", "credit")
OPTIONAL = ("abstain_reason",)
#: File formats by suffix.
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

_HINT = ("columns trajectory_id (string), turn (integer), credit (number) and optionally abstain_reason "
         "(string), one row per credited turn of collect/trajectories.parquet")


def _read_rows(path: Path, shown: str) -> tuple[list[str], list[dict[str, Any]], str]:
    """The file's column names and rows as Python values, and how a row is located (``row`` / ``line``)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{shown}: unknown credit file format {path.suffix!r}; use one of "
                         f"{sorted(FORMATS)} holding {_HINT}")
    try:
        if fmt == "parquet":
            table = pq.read_table(path)
            return table.column_names, table.to_pylist(), "row"
        if fmt == "csv":
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
            rows = [{k: (None if v == "" else v) for k, v in r.items()} for r in frame.to_dict("records")]
            return list(frame.columns), rows, "line"
        rows, names = [], []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{shown}: line {i} is not valid JSON ({exc.msg}); write one JSON object per line "
                                 f"with {_HINT}") from None
            if not isinstance(row, dict):
                raise InputError(f"{shown}: line {i} is not a JSON object; write one object per line with {_HINT}")
            rows.append(row)
            names += [k for k in row if k not in names]
        return names, rows, "line"
    except (OSError, pa.ArrowException, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{shown}: cannot be read as {fmt} ({exc}); write {_HINT}") from None


def _where(kind: str, index: int) -> str:
    """1-based position: a Parquet row, or a text line (the CSV header is line 1)."""
    return f"row {index + 1}" if kind == "row" else f"line {index + 2}"


def _number(value: Any) -> float | None:
    """A credit value as a float (NaN for empty/null), or ``None`` when it is not a number."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def read_credit_file(path: str | Path, collected: set[tuple[str, int]], *, shown: str | None = None
                     ) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], str], int, list[str]]:
    """Read and check a credit file against the collected turns.

    Parameters
    ----------
    path : str or Path
        The file (``.parquet``, ``.csv``, ``.jsonl``).
    collected : set of (str, int)
        The collected (trajectory_id, turn) keys.
    shown : str, optional
        How messages name the file (default: the path).

    Returns
    -------
    values : dict
        Finite credit by (trajectory_id, turn).
    reasons : dict
        Abstention reason by key, for rows with a NaN credit (``nan``) or an ``abstain_reason``.
    n_rows : int
    columns : list of str

    Raises
    ------
    InputError
        A missing column, a row for a turn that was not collected, a duplicate key, a credit that is
        not a number, or a row with both a credit and an abstention reason: the message names the
        file, the row and what to do.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "c.csv")
    >>> _ = open(p, "w").write("trajectory_id,turn,credit\\na,0,0.5\\na,1,\\n")
    >>> read_credit_file(p, {("a", 0), ("a", 1), ("a", 2)}, shown="c.csv")[:3]
    ({('a', 0): 0.5}, {('a', 1): 'nan'}, 2)
    """
    path = Path(path)
    shown = shown or str(path)
    names, rows, kind = _read_rows(path, shown)
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InputError(f"{shown}: column {', '.join(f'`{c}`' for c in missing)} missing (it has {names}); "
                         f"the file needs {_HINT}")
    values: dict[tuple[str, int], float] = {}
    reasons: dict[tuple[str, int], str] = {}
    seen: dict[tuple[str, int], int] = {}
    for i, row in enumerate(rows):
        where = f"{shown} {_where(kind, i)}"
        tid, turn_raw = row.get("trajectory_id"), row.get("turn")
        try:
            turn = int(turn_raw) if not isinstance(turn_raw, bool) else None
            if turn is None or (isinstance(turn_raw, float) and not turn_raw.is_integer()):
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(f"{where}: `turn` is {turn_raw!r}, not an integer decision index") from None
        if not isinstance(tid, str) or not tid:
            raise InputError(f"{where}: `trajectory_id` is {tid!r}; give the id of a collected trajectory")
        key = (tid, turn)
        if key not in collected:
            raise InputError(f"{where}: ({tid}, turn {turn}) is not a collected turn; credit only the turns of "
                             "collect/trajectories.parquet (same trajectory_id and turn), or remove the row")
        if key in seen:
            raise InputError(f"{where}: ({tid}, turn {turn}) is a duplicate of {_where(kind, seen[key])}; give each "
                             "turn one row")
        seen[key] = i
        credit = _number(row.get("credit"))
        if credit is None:
            raise InputError(f"{where}: `credit` is {row.get('credit')!r}, not a number; write a number, or leave it "
                             "empty (an abstention)")
        reason = row.get("abstain_reason")
        if reason is not None and not (isinstance(reason, str) and reason):
            raise InputError(f"{where}: `abstain_reason` is {reason!r}; give a non-empty string or leave it empty")
        if reason is not None:
            if not math.isnan(credit):
                raise InputError(f"{where}: the row gives both a credit ({credit!r}) and an abstain_reason "
                                 f"({reason!r}); leave credit empty when the turn abstains")
            reasons[key] = reason
        elif math.isnan(credit) or math.isinf(credit):
            reasons[key] = "nan"
        else:
            values[key] = credit
    return values, reasons, len(rows), list(names)


class PrecomputedFamily(FamilyBase):
    """The ``precomputed`` credit family: credit read from a user's file (see the module docstring)."""

    def __init__(self, *, name: str, path: str, neutral: float = 0.0, centre: bool = False):
        self.name, self.path = name, path
        self.neutral = "trajectory-mean" if centre else float(neutral)
        self.facts: dict[str, Any] = {}

    def _resolve(self, run_dir: Path) -> Path:
        full = (run_dir / self.path).resolve()
        try:
            full.relative_to(run_dir.resolve())
        except ValueError:
            raise InputError(f"signal {self.name!r}: args.path {self.path!r} lies outside the run directory; copy the "
                             "credit file into the run directory and name it relative to it") from None
        if not full.is_file():
            raise InputError(f"signal {self.name!r}: credit file {self.path!r} (args.path, relative to the run "
                             f"directory) does not exist; compute credit from collect/trajectories.parquet and "
                             f"write it there with {_HINT}")
        return full

    def inputs(self, run_dir: Path) -> list[Path]:
        """The credit file: the signals stage attests its SHA-256."""
        return [self._resolve(run_dir)]

    def input_facts(self) -> dict[str, Any]:
        """What the signals stage's link record states about the file read (after :meth:`compute`)."""
        return dict(self.facts)

    def compute(self, context: SignalContext) -> FamilyOutput:
        full = self._resolve(context.run_dir)
        collected = {(t.trajectory_id, r.turn) for t in context.trajectories for r in t.turns}
        values, reasons, n_rows, columns = read_credit_file(full, collected, shown=self.path)
        for key in collected - values.keys() - reasons.keys():
            reasons[key] = "missing"
        self.facts = {"path": Path(self.path).as_posix(), "sha256": sha256_file(full), "rows": n_rows,
                      "columns": columns}
        report = {"file": self.facts, "n_missing": sum(r == "missing" for r in reasons.values()),
                  "n_nan": sum(r == "nan" for r in reasons.values())}
        return FamilyOutput(credit_frame(context.trajectories, values, reasons), None, report)


def precomputed_family(
    *, name: str, path: str, neutral: float = 0.0, centre: bool = False,
) -> PrecomputedFamily:
    """The precomputed family (entry point ``precomputed`` of group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's signal name (reserved).
    path : str
        The credit file, relative to the run directory.
    neutral : float, default 0.0
        The credit meaning "neither good nor bad".
    centre : bool, default False
        Centre the credit within each trajectory instead (``neutral`` must then stay 0).
    """
    if centre and neutral != 0.0:
        raise ValueError("`neutral` and `centre` exclude each other: a centred credit's neutral point is its "
                         "trajectory mean")
    if not path or Path(path).is_absolute():
        raise ValueError(f"`path` must be a file path relative to the run directory; got {path!r}")
    if Path(path).suffix.lower() not in FORMATS:
        raise ValueError(f"`path` must end in one of {sorted(FORMATS)}; got {path!r}")
    return PrecomputedFamily(name=name, path=path, neutral=neutral, centre=centre)

