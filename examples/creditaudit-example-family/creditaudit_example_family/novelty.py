"""Novelty credit: an action that leads somewhere new earns +1, one that leads back costs a penalty.

A count-based exploration credit, the simplest a text agent can be given without a model. For each
collected trajectory, walk its turns in order, keeping the set of observation texts already seen
(starting with the opening observation). A turn's credit is

* ``+1`` when its action's feedback (what the environment answered) is a text not seen before in
  the trajectory: the action made progress to a new place or state;
* ``-revisit_penalty`` when the feedback is a text already seen: the action went back to a place the
  agent had been (an ALFWorld ``go to`` loop) or repeated a step that changed nothing.

Texts are compared after collapsing whitespace. On ALFWorld, loops are the failure this credit
targets (an agent that returns to a receptacle it has just searched sees the same text again). Its
blind spot is by design visible in the audit: the first "Nothing happens." counts as new, and an
action that reaches a new but useless place gets the same +1 as a decisive one.

The family reads only the collected trajectories (``needs`` is empty) and never abstains: every
collected turn has feedback. Its neutral credit is 0 (``+1`` and ``-revisit_penalty`` lie on
either side of it). Written for version 1 of the family contract
(``creditaudit.signals.base.FAMILY_CONTRACT_VERSION``).

Examples
--------
>>> novelty_credit("room A", ["room B", "room A", "room C", "room C"], revisit_penalty=0.5)
[1.0, -0.5, 1.0, -0.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import pyarrow as pa
from pydantic import Field

from creditaudit.signals.base import FamilyBase, FamilyOutput, SignalContext, credit_frame

__all__ = ["novelty_credit", "NoveltyFamily", "novelty_family"]


def _key(text: str) -> str:
    return " ".join(text.split())


def novelty_credit(opening: str, feedback: Sequence[str], *, revisit_penalty: float) -> list[float]:
    """Per-turn novelty credit of one trajectory: ``+1`` for feedback not seen before (the opening
    observation counts as seen), ``-revisit_penalty`` for feedback already seen."""
    seen = {_key(opening)}
    credit = []
    for text in feedback:
        key = _key(text)
        credit.append(-revisit_penalty if key in seen else 1.0)
        seen.add(key)
    return credit


class NoveltyFamily(FamilyBase):
    """The ``novelty`` family (see the module docstring)."""

    contract_version = 1          # the family contract this was written for (checked by creditaudit)
    neutral = 0.0                 # sign agreement: credit above 0 says "this action helped"
    needs: frozenset[str] = frozenset()  # the collected trajectories are enough

    def __init__(self, *, name: str, revisit_penalty: float) -> None:
        self.name = name
        self.revisit_penalty = revisit_penalty

    def compute(self, context: SignalContext) -> FamilyOutput:
        values: dict[tuple[str, int], float] = {}
        ids, n_turns, n_revisits = [], [], []
        for traj in context.trajectories:
            if not traj.turns:
                continue
            credit = novelty_credit(traj.turns[0].observation, [r.feedback for r in traj.turns],
                                    revisit_penalty=self.revisit_penalty)
            for rec, value in zip(traj.turns, credit):
                values[(traj.trajectory_id, rec.turn)] = value
            ids.append(traj.trajectory_id)
            n_turns.append(len(credit))
            n_revisits.append(sum(1 for v in credit if v != 1.0))
        diagnostics = pa.table({"trajectory_id": pa.array(ids, pa.string()),
                                "n_turns": pa.array(n_turns, pa.int32()),
                                "n_revisits": pa.array(n_revisits, pa.int32())})
        total = sum(n_turns)
        report = {"revisit_penalty": self.revisit_penalty, "n_revisits": sum(n_revisits),
                  "revisit_share": sum(n_revisits) / total if total else None}
        return FamilyOutput(credit_frame(context.trajectories, values), diagnostics, report)


def novelty_family(*, name: str, revisit_penalty: Annotated[float, Field(ge=0)] = 1.0) -> NoveltyFamily:
    """The factory creditaudit calls (entry point ``novelty`` in group ``creditaudit.families``).

    Parameters
    ----------
    name : str
        The protocol's name for the signal (passed by creditaudit, never written in ``args``).
    revisit_penalty : float, default 1.0
        The credit of a turn whose feedback was already seen is ``-revisit_penalty`` (``>= 0``; 0
        makes a revisit neutral). The protocol's ``args`` set it and the frozen protocol records it.
    """
    return NoveltyFamily(name=name, revisit_penalty=revisit_penalty)
