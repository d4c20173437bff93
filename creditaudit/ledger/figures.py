"""The report's figures, drawn from ledger entries only (no artifact is read here).

Each function takes the ledger's ``{name: entry}`` map and a directory, writes one PNG (with no
software or time metadata, so the bytes depend on the numbers alone) and returns its path, or
``None`` when the ledger lacks what the figure shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["draw_figures"]

_META = {"Software": None}


def _v(entries: dict[str, Any], name: str) -> Any:
    entry = entries.get(name)
    return None if entry is None else entry.value


def _forest(entries: dict[str, Any], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    families = _v(entries, "protocol.families") or []
    controls = _v(entries, "protocol.controls") or []
    rows: list[tuple[str, str]] = []
    for family in families:
        rows.append((family, family))
        rows += [(f"  {c}", c) for c in controls if _v(entries, f"audit.{c}.of") == family]
    rows += [(c, c) for c in controls if _v(entries, f"audit.{c}.of") is None]
    if not rows or all(f"audit.{s}.estimate" not in entries for _, s in rows):
        return None
    level = entries["protocol.statistics.ci_level"].text if "protocol.statistics.ci_level" in entries else ""
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.3))
    for y, (label, subject) in enumerate(reversed(rows)):
        est, lo, hi = (_v(entries, f"audit.{subject}.{k}") for k in ("estimate", "ci_low", "ci_high"))
        if est is None:
            ax.text(0, y, "undefined", va="center", ha="center", fontsize=7, color="grey")
            continue
        colour = "black" if subject in families else "tab:grey"
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=colour, lw=2)
        ax.plot([est], [y], "o", color=colour)
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)], fontsize=8)
    ax.axvline(0, color="tab:red", lw=0.8, ls="--")
    rho_min = _v(entries, "protocol.rho_min")
    if rho_min is not None:
        ax.axvline(rho_min, color="tab:green", lw=0.8, ls=":", label="rho_min")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel(f"median within-trajectory Spearman(credit, A_replay), {level} CI")
    ax.set_title("Fidelity of each family against its controls")
    fig.tight_layout()
    path = out / "forest.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    return path


def _measurability(entries: dict[str, Any], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    keys = ["share_pivotal", "share_sigma_floor_zero", "share_no_counterfactual"]
    if not all(f"measurability.{k}" in entries for k in keys):
        return None
    labels = ["pivotal\n(of complete)", "sigma_floor = 0\n(of complete)", "no counterfactual\n(of turns)"]
    values = [_v(entries, f"measurability.{k}") for k in keys]
    paper = [_v(entries, f"paper.measurability.{k}") for k in keys]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(labels, [v if v is not None else 0 for v in values], color=["tab:blue", "tab:orange", "tab:grey"],
           label="this run")
    if all(p is not None for p in paper):
        ax.scatter(labels, paper, color="black", marker="_", s=400, zorder=3, label="paper (Qwen)")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share")
    ax.legend(fontsize=8)
    ax.set_title("Measurability map")
    fig.tight_layout()
    path = out / "measurability.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    return path


def _router(entries: dict[str, Any], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    recall, chance = _v(entries, "router.pivotal_recall"), _v(entries, "router.chance")
    if recall is None or chance is None:
        return None
    rows = [("pivotal recall", recall, _v(entries, "router.pivotal_recall_ci_low"),
             _v(entries, "router.pivotal_recall_ci_high")),
            ("chance (routed share\nof complete turns)", chance, _v(entries, "router.chance_ci_low"),
             _v(entries, "router.chance_ci_high"))]
    fig, ax = plt.subplots(figsize=(6, 2.4))
    for y, (label, value, lo, hi) in enumerate(reversed(rows)):
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color="black", lw=2)
        ax.plot([value], [y], "o", color="tab:blue" if label.startswith("pivotal") else "tab:grey")
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlim(0, 1)
    saved = entries.get("router.judge_calls_saved_per_turn")
    ax.set_xlabel("share" + (f"   (judge calls saved per turn: {saved.text})" if saved is not None else ""))
    ax.set_title("Confidence router: recall of pivotal turns beside chance")
    fig.tight_layout()
    path = out / "router.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    return path


def _arms(entries: dict[str, Any], out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    arms = _v(entries, "arms.arms") or []
    rates = [(a, _v(entries, f"arms.{a}.eval_success"), _v(entries, f"arms.{a}.eval_success_ci_low"),
              _v(entries, f"arms.{a}.eval_success_ci_high")) for a in arms]
    rates = [r for r in rates if r[1] is not None]
    if not rates:
        return None
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(rates) + 1.4))
    for y, (arm, value, lo, hi) in enumerate(reversed(rates)):
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color="black", lw=2)
        ax.plot([value], [y], "o", color="tab:blue")
    ax.set_yticks(range(len(rates)), [r[0] for r in reversed(rates)], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("held-out success")
    ax.set_title("Training arms: held-out success per arm")
    fig.tight_layout()
    path = out / "arms.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    return path


def draw_figures(entries: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw every figure the ledger supports into ``out_dir``; returns ``{name: path}``."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for name, draw in (("forest", _forest), ("measurability", _measurability), ("router", _router), ("arms", _arms)):
        path = draw(entries, out_dir)
        if path is not None:
            drawn[name] = path
    return drawn
