"""Figures of the training-arms analysis (matplotlib, Agg backend, no timestamps in the files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_figures"]

_META = {"Software": None}


def write_figures(document: Any, out_dir: Path) -> list[Path]:
    """``success.png`` (per-arm success and C1-C6 with their intervals against the equivalence
    band), ``js_heatmap.png`` (last stage) and ``dose.png`` (optimizer steps per arm and round)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = document.analysis
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    band = document.settings["statistics"]["equivalence_band"]

    # success and comparisons
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    held = a["success"]["held_out"]
    arms = list(held["arms"])
    for x, arm in enumerate(arms):
        per_seed = list(held["arms"][arm]["per_seed"].values())
        left.scatter([x] * len(per_seed), per_seed, color="tab:grey", s=14, zorder=3)
        mean = held["arms"][arm]["mean_included"]
        if mean is not None:
            left.bar(x, mean, color="tab:blue", alpha=0.6)
    if held["base"] is not None:
        left.axhline(held["base"], color="black", ls="--", lw=0.8, label="base (untrained)")
        left.legend(fontsize=8)
    left.set_xticks(range(len(arms)), arms, rotation=35, ha="right", fontsize=8)
    left.set_ylabel("held-out success")
    left.set_ylim(0, 1)
    left.set_title("Success per arm (dots: seeds)")
    comps = a["comparisons"]
    for y, c in enumerate(reversed(comps)):
        est, ci = c.get("estimate"), c.get("ci")
        if est is None:
            right.text(0, y, "not computed", ha="center", va="center", fontsize=7, color="grey")
            continue
        if ci:
            high = ci[1] if ci[1] is not None else max(est + 0.5, band * 2)
            right.plot([ci[0], high], [y, y], color="black", lw=2)
        right.plot([est], [y], "o", color={"equivalent": "tab:green", "different": "tab:red"}.get(c["reading"], "tab:grey"))
    right.axvspan(-band, band, color="tab:green", alpha=0.15, label=f"±{band} band")
    right.axvline(0, color="black", lw=0.6)
    right.set_yticks(range(len(comps)), [f"{c['id']} {c['arm']} {'>' if c['kind'] == 'superiority' else 'vs'} {c['versus']}"
                                         for c in reversed(comps)], fontsize=8)
    right.set_xlabel("success difference (TOST: 1-2α interval; superiority: one-sided bound)")
    right.legend(fontsize=8)
    right.set_title("Confirmatory comparisons")
    fig.tight_layout()
    path = out_dir / "success.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    paths.append(path)

    # JS heatmap of the last stage with a matrix
    stage = next((s for s in reversed(a["stages"]) if "js_matrix" in s), None)
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    if stage is not None:
        m = np.asarray(stage["js_matrix"])
        im = ax.imshow(m, cmap="viridis")
        ax.set_xticks(range(len(stage["checkpoints"])), stage["checkpoints"], rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(stage["checkpoints"])), stage["checkpoints"], fontsize=7)
        fig.colorbar(im, ax=ax, label=f"JS divergence (log base {stage['js_log_base']:g})")
        ax.set_title(f"Action-distribution divergence, stage {stage['stage']}")
    else:
        ax.text(0.5, 0.5, "no divergence matrix (too few checkpoints)", ha="center", va="center")
        ax.set_axis_off()
    fig.tight_layout()
    path = out_dir / "js_heatmap.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    paths.append(path)

    # dose
    dose = a["dose"]
    rounds = max((len(d["per_round"]) for d in dose.values()), default=0)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.8 / max(rounds, 1)
    for r in range(rounds):
        values = [dose[arm]["per_round"][r]["mean_steps"] or 0.0 for arm in dose]
        ax.bar(np.arange(len(dose)) + r * width, values, width=width, label=f"round {r + 1}")
    ax.set_xticks(np.arange(len(dose)) + 0.4 - width / 2, list(dose), rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("optimizer steps (mean over seeds)")
    ax.set_title("Dose per arm" + (" (dose-matched)" if document.settings["arms"]["dose_matched"] else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "dose.png"
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    paths.append(path)
    return paths
