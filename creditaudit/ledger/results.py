"""``creditaudit results``: the toolkit's results beside the papers', one table per result, from ledgers.

The page is the template ``templates/results.md.jinja`` rendered against an audit run's ledger and,
optionally, a training-arms run's ledger. Like the report, the template names ledger entries only
(``n``/``v``/``has`` for the audit ledger, ``an``/``av``/``ahas`` for the arms ledger) and holds no
digit of its own; the papers' figures are the ledger's ``paper.*`` entries (typed once, in
``creditaudit/papers.yaml``, with the paper and the quantity each one is: ``src(name)``).

Where the page says that a figure agrees with a paper's, it says so from the numbers:
:func:`relation` compares this toolkit's interval with the paper's value, interval or range. The
page records each ledger's sha256, so a test can regenerate the page from the committed ledgers and
compare its bytes, and check that the ledgers are the ones the page names.

Example:
    >>> relation(0.1, 0.2, [0.05, 0.15])
    'overlaps'
    >>> relation(0.3, 0.4, 0.25)
    'above'
    >>> relation(-0.1, 0.0, [0.0193, 0.027, 0.168])  # a paper's [estimate, low, high]
    'below'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditaudit.errors import CheckFailed, InputError
from creditaudit.ledger.model import Ledger, read_ledger
from creditaudit.protocol.canonical import sha256_file

__all__ = ["LedgerSource", "relation", "render_results", "results_command", "shown_path", "write_results"]


def shown_path(path: str | Path) -> str:
    """How the page names a file: relative paths as given; an absolute one relative to the working
    directory when it lies under it, else by its name only (a page holds no machine path)."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.name


def results_command(audit_ledger: str | Path, out: str | Path, arms_ledger: str | Path | None = None) -> str:
    """The command line that regenerates a page (printed at its top)."""
    parts = ["creditaudit results", shown_path(audit_ledger)]
    if arms_ledger is not None:
        parts += ["--arms", shown_path(arms_ledger)]
    return " ".join(parts + ["--out", shown_path(out)])


@dataclass(frozen=True)
class LedgerSource:
    """A ledger and how the page names it: the path as given (relative paths stay relative, so the
    page holds no machine path) and the file's sha256 (``digest``)."""

    ledger: Ledger
    label: str
    digest: str

    @classmethod
    def read(cls, path: str | Path) -> "LedgerSource":
        return cls(read_ledger(path), shown_path(path), sha256_file(path))


def _interval(value: Any) -> tuple[float, float]:
    """A paper's figure as an interval: a number, ``[low, high]`` (a range over settings) or
    ``[estimate, low, high]``."""
    if isinstance(value, (int, float)):
        return float(value), float(value)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return float(min(value)), float(max(value))
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return float(value[1]), float(value[2])
    raise ValueError(f"not a paper figure: {value!r}")


def relation(low: float | None, high: float | None, paper: Any) -> str:
    """``overlaps``, ``above`` or ``below``: this toolkit's interval ``[low, high]`` (a point when
    they are equal) beside a paper's figure; ``undefined`` when ours is missing."""
    if low is None or high is None:
        return "undefined"
    p_low, p_high = _interval(paper)
    if low > p_high:
        return "above"
    if high < p_low:
        return "below"
    return "overlaps"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_results(audit: LedgerSource, arms: LedgerSource | None = None, *, command: str) -> str:
    """The results page (Markdown). Raises ``CheckFailed`` naming an entry the template needs and a
    ledger lacks (a ledger of an older version: regenerate it)."""
    import jinja2

    from creditaudit.papers import PAPERS, paper_value

    def getter(source: LedgerSource | None, what: str):
        entries = source.ledger.entry_map() if source is not None else {}

        def get(name: str):
            try:
                return entries[name]
            except KeyError:
                raise CheckFailed(f"the results page refers to {what} ledger entry {name!r}, which "
                                  f"{source.label if source else 'no ledger'} lacks; regenerate that ledger with "
                                  "this version of creditaudit") from None
        return get, (lambda name: name in entries)

    get, has = getter(audit, "audit")
    aget, ahas = getter(arms, "arms")

    def src(name: str) -> str:
        figure = paper_value(name)
        paper = PAPERS[figure.paper]
        return f"{figure.paper} paper (arXiv {paper.arxiv}): {figure.where}"

    def rel(low: str | None, high: str | None, paper: str) -> str:
        lo = get(low).value if low else None
        hi = get(high).value if high else lo
        return relation(lo, hi, get(paper).value)

    from creditaudit.ledger.report import template_environment

    template = template_environment().get_template("results.md.jinja")
    try:
        text = template.render(
            n=lambda name: _cell(get(name).text), v=lambda name: get(name).value, has=has,
            an=lambda name: _cell(aget(name).text), av=lambda name: aget(name).value, ahas=ahas,
            src=src, rel=rel, negative=lambda name: get(name).value is not None and get(name).value < 0, papers=PAPERS,
            audit=audit, arms=arms, command=command,
        )
    except jinja2.TemplateError as exc:  # pragma: no cover - a template bug, not a user error
        raise RuntimeError(f"results template error: {exc}") from exc
    return re.sub(r"\n{3,}", "\n\n", text)


def write_results(audit_ledger: str | Path, out: str | Path, *, arms_ledger: str | Path | None = None) -> Path:
    """Render the page from the ledger files and write it atomically to ``out``.

    Raises ``InputError`` when a ledger is missing or not a ledger, or when ``--arms`` names a
    ledger without arms entries.
    """
    from creditaudit.artifacts import write_bytes_atomic

    audit = LedgerSource.read(audit_ledger)
    arms = LedgerSource.read(arms_ledger) if arms_ledger is not None else None
    if arms is not None and "arms.arms" not in arms.ledger.entry_map():
        raise InputError(f"{arms_ledger}: this ledger has no training-arms entries (its run has no arms/ "
                         "directory); pass the ledger of a run where `creditaudit arms` ran")
    if "audit.fluency.echo" not in audit.ledger.entry_map():
        raise InputError(f"{audit_ledger}: this ledger has no audit entries; pass the ledger of an audited run")
    out = Path(out)
    write_bytes_atomic(out, render_results(audit, arms, command=results_command(audit_ledger, out, arms_ledger)).encode("utf-8"))
    return out
