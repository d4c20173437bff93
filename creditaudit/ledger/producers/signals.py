"""Ledger entries of the credit signals: abstentions, control strength, judge agreement, router.

Recomputed from ``signals/credit.parquet`` (and ``replay/turns.parquet`` for the router's pivotal
recall) with the signal stage's own functions, never read from ``signals/summary.json``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from creditaudit.ledger.producer import ProducerContext, Value, producer, stage_ran

__all__ = ["signals_entries", "router_entries", "credit_frames"]


def credit_frames(credit: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each subject's credit frame in stored order (credit NaN where it abstained)."""
    out = {}
    for name, frame in credit.groupby("subject", sort=False):
        frame = frame[["trajectory_id", "turn", "credit", "abstained", "abstain_reason"]].reset_index(drop=True)
        values = frame.credit.astype(float).to_numpy(copy=True)
        values[frame.abstained.to_numpy(bool)] = np.nan
        out[str(name)] = frame.assign(credit=values)
    return out


def _reasons_text(reasons: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in sorted(reasons.items())) or "none"


@producer("signals", inputs=("signals.credit",), version=1,
          description="Abstention shares and reasons, shuffle-control strength, judge-vs-judge agreement.")
def signals_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.signals.controls import changed_share
    from creditaudit.signals.families.judge import judge_agreement

    protocol = ctx.protocol
    frames = credit_frames(ctx.table("signals.credit").to_pandas())
    out: list[Value] = []
    for name in [s.name for s in protocol.signals] + [c.name for c in protocol.controls]:
        frame = frames.get(name)
        if frame is None:
            continue  # the audit producer names the missing subject
        n = len(frame)
        reasons = frame.loc[frame.abstained, "abstain_reason"].fillna("(no reason)").value_counts()
        reasons = {str(k): int(v) for k, v in reasons.items()}
        n_abstained = int(frame.abstained.sum())
        out += [
            Value(f"signals.{name}.n_turns", n, "d"),
            Value(f"signals.{name}.n_abstained", n_abstained, "d"),
            Value(f"signals.{name}.abstention_share", n_abstained / n if n else None, ".3f"),
            Value(f"signals.{name}.abstention_reasons", dict(sorted(reasons.items())), text=_reasons_text(reasons)),
        ]
    for control in protocol.controls:
        if control.kind != "shuffle" or control.name not in frames or control.of not in frames:
            continue
        share = changed_share(frames[control.of], frames[control.name])
        out += [
            Value(f"signals.{control.name}.changed_share", share["changed_share"], ".3f"),
            Value(f"signals.{control.name}.n_changed", share["n_changed"], "d"),
            Value(f"signals.{control.name}.n_positions", share["n_positions"], "d"),
        ]
    from creditaudit.signals.base import agreement_groups, make_family

    pairs = [entry for group in agreement_groups([make_family(s) for s in protocol.signals])
             for entry in judge_agreement({n: frames[n] for n in group if n in frames},
                                          confidence_level=protocol.statistics.ci_level)]
    out.append(Value("signals.agreement.pairs", [f"{p['judges'][0]}~{p['judges'][1]}" for p in pairs],
                     text=", ".join(f"{p['judges'][0]} vs {p['judges'][1]}" for p in pairs) or "none"))
    for pair in pairs:
        key = f"signals.agreement.{pair['judges'][0]}~{pair['judges'][1]}"
        ci = pair.get("kappa_ci") or (None, None)
        out += [
            Value(f"{key}.judges", list(pair["judges"]), text=" vs ".join(pair["judges"])),
            Value(f"{key}.n", pair["n"], "d"),
            Value(f"{key}.agreement", pair["agreement"], ".3f"),
            Value(f"{key}.kappa", pair["kappa"], "+.3f"),
            Value(f"{key}.kappa_ci_low", ci[0], "+.3f"),
            Value(f"{key}.kappa_ci_high", ci[1], "+.3f"),
            Value(f"{key}.note", pair.get("note", ""), text=pair.get("note", "") or "—"),
        ]
    return out


def _reading(recall: dict[str, Any] | None) -> tuple[str, str]:
    if not recall or recall.get("recall") is None or recall.get("chance_ci") is None:
        return "unavailable", "unavailable: no pivotal complete turn to recall (replay results lack them)"
    lo, hi = recall["recall_ci"]
    c_lo, c_hi = recall["chance_ci"]
    if hi < c_lo:
        return "below_chance", "below chance: the recall interval lies entirely below the chance interval"
    if lo > c_hi:
        return "above_chance", "above chance: the recall interval lies entirely above the chance interval"
    return ("at_chance", "at chance: the recall interval overlaps the chance interval — the router is a cost "
            "mechanism, not a detector of pivotal turns")


@producer("router", inputs=("signals.credit", "replay.turns"), version=1,
          when=stage_ran("replay", "replay.turns"),
          description="The confidence router: routed share, judge calls saved, pivotal recall beside chance.")
def router_entries(ctx: ProducerContext) -> list[Value]:
    from creditaudit.signals.router import router_report

    router = ctx.protocol.router
    if router is None:
        return [Value("router.reading", "absent", text="no router: the protocol names none")]
    frames = credit_frames(ctx.table("signals.credit").to_pandas())
    if router.confidence_family not in frames:
        from creditaudit.errors import InputError

        raise InputError(f"signals/credit.parquet: no credit of the router's confidence family "
                         f"{router.confidence_family!r}; rerun `creditaudit signals`")
    turns = ctx.table("replay.turns").select(["trajectory_id", "turn", "status", "pivotal"]).to_pandas()
    report = router_report(
        frames[router.confidence_family][["trajectory_id", "turn", "credit"]], routed_share=router.routed_share,
        confidence_family=router.confidence_family, judge_family=router.judge_family, replay_turns=turns,
        confidence_level=ctx.protocol.statistics.ci_level,
    )
    recall = report.get("pivotal_recall") or {}
    reading, text = _reading(recall)
    r_ci = recall.get("recall_ci") or (None, None)
    c_ci = recall.get("chance_ci") or (None, None)
    return [
        Value("router.target_routed_share", report["target_routed_share"], ".3f"),
        Value("router.threshold", report["threshold"], ".4f"),
        Value("router.n_turns", report["n_turns"], "d"),
        Value("router.n_turns_without_confidence", report["n_turns_without_confidence"], "d"),
        Value("router.n_routed", report["n_routed"], "d"),
        Value("router.routed_share", report["routed_share"], ".3f"),
        Value("router.judge_calls_saved_per_turn", report["judge_calls_saved_per_turn"], ".3f"),
        Value("router.judge_calls_saved_per_trajectory", report["judge_calls_saved_per_trajectory"], ".3f"),
        Value("router.share_trajectories_without_judge_call", report["share_trajectories_without_judge_call"], ".3f"),
        Value("router.n_complete_turns", recall.get("n_complete_turns"), "d"),
        Value("router.n_pivotal", recall.get("n_pivotal"), "d"),
        Value("router.n_pivotal_routed", recall.get("n_pivotal_routed"), "d"),
        Value("router.pivotal_recall", recall.get("recall"), ".3f"),
        Value("router.pivotal_recall_ci_low", r_ci[0], ".3f"),
        Value("router.pivotal_recall_ci_high", r_ci[1], ".3f"),
        Value("router.chance", recall.get("chance"), ".3f"),
        Value("router.chance_ci_low", c_ci[0], ".3f"),
        Value("router.chance_ci_high", c_ci[1], ".3f"),
        Value("router.recall_minus_chance", recall.get("recall_minus_chance"), "+.3f"),
        Value("router.reading", reading, text=text),
    ]
