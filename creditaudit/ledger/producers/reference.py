"""The papers' published figures, as ledger entries the report sets beside this run's.

The values and their sources (the audit paper, arXiv 2608.19760, Qwen2.5-7B-Instruct on ALFWorld;
ProVer, arXiv 2609.36178; VICT, arXiv 2608.28128) are data in ``creditaudit/papers.yaml``, read
through :mod:`creditaudit.papers`. They are literature values, not computed here; one registered
producer turns them into entries so that no template types a number.
"""

from __future__ import annotations

from creditaudit.ledger.producer import ProducerContext, Value, producer
from creditaudit.papers import paper_values

__all__ = ["PAPER", "reference_entries"]

#: name -> (value, text), from the one place the papers' figures are typed (creditaudit/papers.yaml).
PAPER: dict[str, tuple[object, str]] = {name: (v.value, v.text) for name, v in sorted(paper_values().items())}


@producer("reference", inputs=(), version=1,
          description="The audit paper's published figures (literature values, for comparison only).")
def reference_entries(ctx: ProducerContext) -> list[Value]:
    return [Value(name, value, text=text) for name, (value, text) in sorted(PAPER.items())]
