"""The papers' published figures, read from ``papers.yaml`` (the one place they are typed).

These are literature values for comparison, never computed here. Each has the paper it comes from
(:data:`PAPERS`) and a sentence saying what it measures.

Example:
    >>> paper_value("paper.measurability.share_pivotal").value
    0.305
    >>> paper_text("paper.sign_agreement.judge")
    '84/139 = 60.4% [52.1, 68.2]'
    >>> PAPERS[paper_value("paper.vict.nonzero_actions").paper].arxiv
    '2608.28128'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["PAPERS", "Paper", "PaperValue", "measurability_text", "paper_text", "paper_value", "paper_values"]


@dataclass(frozen=True)
class Paper:
    """A source paper: its title, arXiv id and the setting its figures were measured in."""

    key: str
    title: str
    arxiv: str
    setting: str


@dataclass(frozen=True)
class PaperValue:
    """One published figure: ``value`` (number, range or list), the paper's ``text``, the key of the
    ``paper`` it comes from and ``where`` (what it measures)."""

    name: str
    value: Any
    text: str
    paper: str
    where: str


@cache
def _load() -> tuple[dict[str, Paper], dict[str, PaperValue]]:
    raw = yaml.safe_load(resources.files("creditaudit").joinpath("papers.yaml").read_text(encoding="utf-8"))
    papers = {key: Paper(key=key, **fields) for key, fields in raw["papers"].items()}
    values = {}
    for name, fields in raw["values"].items():
        if fields["paper"] not in papers:
            raise ValueError(f"papers.yaml: {name} cites unknown paper {fields['paper']!r}")
        values[name] = PaperValue(name=name, **fields)
    return papers, values


PAPERS: dict[str, Paper] = _load()[0]


def paper_values() -> dict[str, PaperValue]:
    """Every published figure, by name."""
    return dict(_load()[1])


def paper_value(name: str) -> PaperValue:
    """One published figure; a ``KeyError`` names what is known when ``name`` is not."""
    values = _load()[1]
    if name not in values:
        raise KeyError(f"no published figure {name!r} in creditaudit/papers.yaml")
    return values[name]


def paper_text(name: str) -> str:
    """How the paper writes the figure ``name``."""
    return paper_value(name).text


def measurability_text() -> str:
    """The audit paper's measurability map as reports print it (pivotal / sigma_floor = 0 / no
    counterfactual).

    Example:
        >>> measurability_text()
        '0.305 / 0.860 / 0.131'
    """
    return " / ".join(paper_text(f"paper.measurability.{k}")
                      for k in ("share_pivotal", "share_sigma_floor_zero", "share_no_counterfactual"))
