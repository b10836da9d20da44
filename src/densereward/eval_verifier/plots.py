"""PNG plots of :func:`~densereward.eval_verifier.evaluation.evaluate`'s metrics (matplotlib, Agg)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics.format import format_number
from .evaluation import abstention_headline, evidence_notes

__all__ = ["write_plots"]


def _bars(
    ax,
    labels: Sequence[str],
    series: Mapping[str, Sequence[Any]],
    ylabel: str,
    counts: Mapping[str, Sequence[Any]] | None = None,
    empty: str | None = None,
) -> None:
    """Grouped bars; a bar with no value is a "no data" mark, never an empty slot read as 0.

    Args:
        counts: per series, the count each bar rests on (drawn above it as ``n=...``).
        empty: the panel's message when no bar has a value (why, in words).
    """
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(series))
    no_bar = all(a is None or a != a for vals in series.values() for a in vals)
    for j, (name, vals) in enumerate(series.items()):
        v = np.asarray([np.nan if a is None else a for a in vals], dtype=float)
        pos = x + (j - (len(series) - 1) / 2) * width
        bars = ax.bar(pos, v, width, label=name)
        ns = (counts or {}).get(name)
        for k, (px, value) in enumerate(zip(pos, v, strict=True)):
            if np.isnan(value) and not no_bar:  # (an empty panel says why once, below)
                ax.text(
                    px,
                    0.02,
                    "no data",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    color=bars.patches[k].get_facecolor(),
                    alpha=0.9,
                )
            elif ns is not None and ns[k] is not None:
                ax.text(
                    px,
                    value + 0.01,
                    f"n={int(ns[k])}",
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                )
    ax.set_xticks(x, labels, rotation=15, fontsize=8)
    ax.set_xlim(-0.5, len(labels) - 0.5)  # every slot, also those of bars with no value
    ax.set_ylim(0, 1.3)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.grid(axis="y", alpha=0.3)
    if empty and no_bar:
        import textwrap

        ax.text(
            0.5,
            0.55,
            textwrap.fill(f"no data: {empty}", 45),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=9,
            color="tab:red",
            bbox={"facecolor": "white", "edgecolor": "tab:red"},
        )


def _abstentions_plot(summary: Mapping[str, Any], path: Path, plt) -> Path:
    """``abstentions.png``: the reasons counted and the abstained share per generator."""
    reasons = summary.get("reasons") or {"reason not recorded": summary["n_abstained"]}
    per_gen = summary["per_generator"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].barh(list(reasons)[::-1], list(reasons.values())[::-1], color="tab:red")
    axes[0].set_xlabel("abstained reads")
    axes[0].set_title("why the verifier abstained")
    gens = list(per_gen)
    n_abst = [per_gen[g]["n_abstained"] for g in gens]
    n_scored = [per_gen[g]["n"] - per_gen[g]["n_abstained"] for g in gens]
    axes[1].bar(gens, n_abst, color="tab:red", label="abstained")
    axes[1].bar(gens, n_scored, bottom=n_abst, color="tab:gray", label="scored")
    axes[1].set_ylabel("responses")
    axes[1].tick_params(axis="x", rotation=15, labelsize=8)
    axes[1].legend(fontsize=8)
    axes[1].set_title("per generator")
    fig.suptitle(abstention_headline(summary), color="tab:red", fontweight="bold")
    return _save(fig, path, plt)


def write_plots(metrics: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``tpr_tnr_by_difficulty.png``, ``tpr_tnr_by_generator.png``, ``reliability.png`` (Agg backend).

    When most reads abstained, ``abstentions.png`` comes first and every other plot is titled
    with the abstention count; when nothing was scored (no ``overall`` in ``metrics``) it is
    the only plot.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    paths = []
    abst = metrics.get("abstentions") or {}
    if abst.get("most"):
        paths.append(_abstentions_plot(abst, out_dir / "abstentions.png", plt))
    if "overall" not in metrics:
        return paths
    banner = None
    if abst.get("most"):
        scored = abst["n_responses"] - abst["n_abstained"]
        banner = f"{abstention_headline(abst)}: these rates rest on {scored} scored response(s)"
    gens = metrics["generators"]
    # only the bins with a problem in them (tied d(x) values leave quartiles empty: named below)
    all_bins = metrics["difficulty"]["quartiles"]["bins"]
    bins = [b for b in all_bins if b.get("n_problems")]
    left_out = [b["label"].split(" ")[0] for b in all_bins if not b.get("n_problems")]
    notes = evidence_notes(metrics)
    why = {"tpr": _panel_reason(metrics, "tpr"), "tnr": _panel_reason(metrics, "tnr")}
    count_key = {"tpr": "n_pos", "tnr": "n_neg"}

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key in zip(axes, ("tpr", "tnr"), strict=True):
        series = {"all": [b[key] for b in bins]}
        series.update({g: [b["per_generator"][g][key] for b in bins] for g in gens})
        counts = {"all": [b.get(count_key[key]) for b in bins]}
        counts.update({g: [b["per_generator"][g].get(count_key[key]) for b in bins] for g in gens})
        _bars(ax, [b["label"] for b in bins], series, key.upper(), counts, why[key])
        ax.set_title(f"{key.upper()} by difficulty quartile (Q1 = hardest)")
    if left_out:
        fig.text(
            0.5,
            -0.04,
            f"no problem in {', '.join(left_out)} (tied d(x) values share one quartile): not drawn",
            ha="center",
            fontsize=8,
        )
    paths.append(_save(fig, out_dir / "tpr_tnr_by_difficulty.png", plt, banner or _join(notes)))

    fig, ax = plt.subplots(figsize=(7, 4))
    pg = metrics["per_generator"]
    _bars(
        ax,
        gens,
        {
            "TPR": [pg[g]["tpr"] for g in gens],
            "TNR": [pg[g]["tnr"] for g in gens],
            "balanced acc.": [pg[g]["balanced_accuracy"] for g in gens],
        },
        "rate",
        {
            "TPR": [pg[g].get("n_pos") for g in gens],
            "TNR": [pg[g].get("n_neg") for g in gens],
            "balanced acc.": [pg[g].get("n") for g in gens],
        },
        _panel_reason(metrics, "balanced_accuracy"),
    )
    ax.set_title(
        "TPR / TNR per generator\n(n = the correct / incorrect / all scored responses of each bar)"
    )
    paths.append(_save(fig, out_dir / "tpr_tnr_by_generator.png", plt, banner or _join(notes)))

    rel = metrics["reliability"]
    fig, ax = plt.subplots(figsize=(5, 5))
    edges = np.asarray(rel["edges"], dtype=float)
    centers = (edges[:-1] + edges[1:]) / 2
    acc = np.asarray([np.nan if a is None else a for a in rel["accuracy"]], dtype=float)
    ax.bar(
        centers,
        acc,
        width=edges[1] - edges[0],
        edgecolor="k",
        alpha=0.7,
        label="empirical accuracy",
    )
    ax.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    for cx, n in zip(centers, rel["count"], strict=True):
        if n:
            ax.text(cx, 0.02, str(int(n)), ha="center", fontsize=7, rotation=90)
    ax.set_xlabel("verifier score")
    ax.set_ylabel("fraction correct")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    n_scored = int(metrics["overall"]["n"])
    ax.set_title(
        f"Reliability (ECE {format_number(metrics['overall']['ece'])}, n={n_scored} scored; "
        "bar labels: n per bin)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper left")
    # the other plots' rule: the abstention banner, else the evidence notes (too few, one class)
    paths.append(_save(fig, out_dir / "reliability.png", plt, banner or _join(notes)))
    return paths


def _panel_reason(metrics: Mapping[str, Any], key: str) -> str | None:
    """Why a panel of ``key`` has no bar at all, when the data hold one class (else ``None``)."""
    one = (metrics.get("evidence") or {}).get("one_class")
    if one is None or (key == "tpr" and one == "correct") or (key == "tnr" and one == "incorrect"):
        return None
    return evidence_notes(metrics)[0]


def _join(notes: Sequence[str]) -> str | None:
    return "; ".join(notes) if notes else None


def _save(fig, path: Path, plt, banner: str | None = None) -> Path:
    """Save a figure atomically (temp file + rename), under ``banner`` in red if given."""
    if banner:
        import textwrap

        fig.suptitle(
            textwrap.fill(banner, 90),
            y=1.0,
            va="bottom",
            color="tab:red",
            fontweight="bold",
            fontsize=9,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path
