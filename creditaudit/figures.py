"""Every figure the toolkit draws, in one module: the report's figures from ledger entries
(:func:`draw_figures`), the audit stage's (:func:`audit_figures`) and the training-arms stage's
(:func:`arms_figures`). The papers' reference values come from :mod:`creditaudit.papers`.

Every PNG is written by matplotlib's Agg backend with no software or time metadata, so its bytes
depend on the numbers alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from creditaudit.papers import paper_value

__all__ = ["arms_figures", "audit_figures", "draw_figures"]

_META = {"Software": None}
_MEASURABILITY = ("share_pivotal", "share_sigma_floor_zero", "share_no_counterfactual")
_MEASURABILITY_LABELS = ["pivotal\n(of complete)", "sigma_floor = 0\n(of complete)", "no counterfactual\n(of turns)"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    _pyplot().close(fig)
    return path


def _measurability_bars(values: list[float | None], paper: list[float | None], path: Path, *,
                        legend_this_run: bool) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(_MEASURABILITY_LABELS, [v if v is not None else 0 for v in values],
           color=["tab:blue", "tab:orange", "tab:grey"], **({"label": "this run"} if legend_this_run else {}))
    if all(p is not None for p in paper):
        ax.scatter(_MEASURABILITY_LABELS, paper, color="black", marker="_", s=400, zorder=3, label="paper (Qwen)")
    ax.set_ylim(0, 1)
    ax.set_ylabel("share")
    ax.legend(fontsize=8)
    ax.set_title("Measurability map")
    return _save(fig, path)


def _forest_plot(rows: list[tuple[str, float | None, float | None, float | None, str]], rho_min: float | None,
                 xlabel: str, path: Path) -> Path:
    """One row per subject (label, estimate, CI low, CI high, colour), top to bottom."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.3))
    for y, (_, est, lo, hi, colour) in enumerate(reversed(rows)):
        if est is None:
            ax.text(0, y, "undefined", va="center", ha="center", fontsize=7, color="grey")
            continue
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=colour, lw=2)
        ax.plot([est], [y], "o", color=colour)
    ax.set_yticks(range(len(rows)), [row[0] for row in reversed(rows)], fontsize=8)
    ax.axvline(0, color="tab:red", lw=0.8, ls="--")
    if rho_min is not None:
        ax.axvline(rho_min, color="tab:green", lw=0.8, ls=":", label="rho_min")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel(xlabel)
    ax.set_title("Fidelity of each family against its controls")
    return _save(fig, path)


# --------------------------------------------------------------------------- report (ledger entries)


def _v(entries: dict[str, Any], name: str) -> Any:
    entry = entries.get(name)
    return None if entry is None else entry.value


def _forest(entries: dict[str, Any], out: Path) -> Path | None:
    families = _v(entries, "protocol.families") or []
    controls = _v(entries, "protocol.controls") or []
    subjects: list[tuple[str, str]] = []
    for family in families:
        subjects.append((family, family))
        subjects += [(f"  {c}", c) for c in controls if _v(entries, f"audit.{c}.of") == family]
    subjects += [(c, c) for c in controls if _v(entries, f"audit.{c}.of") is None]
    if not subjects or all(f"audit.{s}.estimate" not in entries for _, s in subjects):
        return None
    level = entries["protocol.statistics.ci_level"].text if "protocol.statistics.ci_level" in entries else ""
    rows = [(label, *(_v(entries, f"audit.{subject}.{k}") for k in ("estimate", "ci_low", "ci_high")),
             "black" if subject in families else "tab:grey") for label, subject in subjects]
    return _forest_plot(rows, _v(entries, "protocol.rho_min"),
                        f"median within-trajectory Spearman(credit, A_replay), {level} CI", out / "forest.png")


def _measurability(entries: dict[str, Any], out: Path) -> Path | None:
    if not all(f"measurability.{k}" in entries for k in _MEASURABILITY):
        return None
    return _measurability_bars([_v(entries, f"measurability.{k}") for k in _MEASURABILITY],
                               [_v(entries, f"paper.measurability.{k}") for k in _MEASURABILITY],
                               out / "measurability.png", legend_this_run=True)


def _router(entries: dict[str, Any], out: Path) -> Path | None:
    plt = _pyplot()

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
    return _save(fig, out / "router.png")


def _arms(entries: dict[str, Any], out: Path) -> Path | None:
    plt = _pyplot()

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
    return _save(fig, out / "arms.png")


def draw_figures(entries: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Draw every figure the ledger supports into ``out_dir``; returns ``{name: path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for name, draw in (("forest", _forest), ("measurability", _measurability), ("router", _router), ("arms", _arms)):
        path = draw(entries, out_dir)
        if path is not None:
            drawn[name] = path
    return drawn


# --------------------------------------------------------------------------- audit stage


def audit_figures(result: Any, measurability: dict[str, Any], protocol: Any, out_dir: Path,
                  fluency_frame: Any | None) -> list[Path]:
    """The audit stage's ``forest.png``, ``measurability.png`` and (with fluency) ``fluency_echo.png``."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    # forest plot: each family with its controls, null controls at the bottom
    subjects: list[tuple[str, Any]] = []
    for signal in protocol.signals:
        subjects.append((signal.name, result.subjects[signal.name]))
        subjects += [(f"  {c.name}", result.subjects[c.name]) for c in protocol.controls if c.of == signal.name]
    subjects += [(c.name, result.subjects[c.name]) for c in protocol.controls if c.of is None]
    rows = [(label, s.estimate, s.ci_low, s.ci_high,
             "black" if not label.startswith(" ") and s.kind == "family" else "tab:grey") for label, s in subjects]
    rho_min = next((g.when.value for g in protocol.hypotheses.gates if g.id == "H1" and hasattr(g.when, "value")), None)
    paths.append(_forest_plot(rows, rho_min, "median within-trajectory Spearman(credit, A_replay), "
                              "95% cluster bootstrap CI", out_dir / "forest.png"))

    # measurability map
    paths.append(_measurability_bars([measurability.get(k) for k in _MEASURABILITY],
                                     [paper_value(f"paper.measurability.{k}").value for k in _MEASURABILITY],
                                     out_dir / "measurability.png", legend_this_run=False))

    # fluency echo
    if fluency_frame is not None and len(fluency_frame):
        fig, ax = plt.subplots(figsize=(5, 4))
        pivotal = fluency_frame.pivotal.astype(bool)
        ax.scatter(fluency_frame.fluency[~pivotal], fluency_frame.credit[~pivotal], s=8, alpha=0.6, label="not pivotal")
        ax.scatter(fluency_frame.fluency[pivotal], fluency_frame.credit[pivotal], s=8, alpha=0.8, label="pivotal")
        ax.set_xlabel("action fluency (mean policy log-prob)")
        ax.set_ylabel("implicit credit (rho_t)")
        ax.legend(fontsize=8)
        ax.set_title("Fluency echo")
        paths.append(_save(fig, out_dir / "fluency_echo.png"))
    return paths


# --------------------------------------------------------------------------- training arms


def arms_figures(document: Any, out_dir: Path) -> list[Path]:
    """``success.png`` (per-arm success and C1-C6 with their intervals against the equivalence
    band), ``js_heatmap.png`` (last stage) and ``dose.png`` (optimizer steps per arm and round)."""
    plt = _pyplot()
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
    paths.append(_save(fig, out_dir / "success.png"))

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
    paths.append(_save(fig, out_dir / "js_heatmap.png"))

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
    paths.append(_save(fig, out_dir / "dose.png"))
    return paths
