"""``densereward eval-progress``: options, configuration, outputs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..config import VerifierConfig
from ..config_files import (
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
)
from ..errors import ConfigError
from ..io import atomic_write_json, atomic_write_text, to_jsonable
from ..metrics.format import format_number
from .core import (
    EvalProgressConfig,
    progress_metrics,
    read_progress,
    read_reward_model,
    rollouts,
)

__all__ = ["EXIT_MOST_ABSTAINED", "add_arguments", "build_configs", "main", "write_outputs"]

EXIT_MOST_ABSTAINED = 3
"""Most reads abstained: the outputs are written, but they measure too few reads."""

NEARLY_CONSTANT_RANGE = 0.05
"""Reads whose range (max - min) is below this are called nearly constant (report and stderr)."""


def _nearly_constant(metrics: dict[str, Any]) -> bool:
    lo_hi = metrics.get("progress_range")
    return lo_hi is not None and lo_hi[1] - lo_hi[0] < NEARLY_CONSTANT_RANGE


_FLAGS = {"env_id": "env", "episodes": "episodes", "seed": "seed", "stride": "stride"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``eval-progress`` options."""
    parser.add_argument(
        "--config",
        default=None,
        help="YAML: env_id, policies, episodes, seed, max_steps, stride, read_mode, form, "
        "stop_fraction, and a verifier: section (configs/eval_progress_fetchreach.yaml)",
    )
    parser.add_argument("--env", default=None, help="environment id (FetchReach-v4, FetchPush-v4)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per policy kind")
    parser.add_argument("--seed", type=int, default=None, help="first environment seed")
    parser.add_argument("--stride", type=int, default=None, help="read every N-th state")
    parser.add_argument(
        "--out", default="outputs/eval-progress", help="output directory (default: %(default)s)"
    )
    parser.add_argument(
        "--reward-model",
        default=None,
        metavar="DIR",
        help="read progress with a distilled reward model (densereward distill) instead of the "
        "verifier (the verifier: section is then unused)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip progress.png")
    add_override_arguments(parser, "read_mode=pairwise verifier.model=qwen2.5-coder-0.5b")


def build_configs(
    config_path: str | None, overrides: list[str], flags: dict[str, Any]
) -> tuple[EvalProgressConfig, VerifierConfig]:
    """The run's settings: YAML, then ``key=value`` overrides, then the flags.

    Raises:
        ConfigError: on unknown keys (naming them) or bad values.
    """
    data = load_yaml(config_path) if config_path else {}
    apply_overrides(data, list(overrides))
    verifier = data.pop("verifier", None) or {}
    for key, flag in _FLAGS.items():
        if flags.get(flag) is not None:
            data[key] = flags[flag]
    cfg = from_dict(EvalProgressConfig, data)
    vcfg = from_dict(VerifierConfig, verifier, prefix="verifier.")
    if cfg.read_mode == "complete" and vcfg.granularity != 2:
        vcfg = dataclasses.replace(vcfg, granularity=2)  # the expected score is P(complete)
    return cfg, vcfg


def _plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "success": "tab:green",
        "short": "tab:orange",
        "wrong": "tab:red",
        "random": "tab:gray",
    }
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    seen: set[str] = set()
    for e in sorted({r["episode"] for r in rows}):
        rs = sorted((r for r in rows if r["episode"] == e), key=lambda r: r["t"])
        pts = [(r["t"], r["progress"]) for r in rs if r["progress"] is not None]
        if not pts:
            continue
        pol = rs[0]["policy"]
        label = pol if pol not in seen else None  # colour = policy; line style = outcome
        seen.add(pol)
        style = "-" if rs[0]["success"] else "--"
        for ax in axes:
            ax.plot(
                *zip(*pts, strict=True),
                marker="o",
                ms=3,
                alpha=0.8,
                linestyle=style,
                color=colors.get(pol, "tab:blue"),
                label=label,
            )
    for ax in axes:
        ax.set_xlabel("environment step t")
        ax.set_ylabel("progress read")
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].set_title("on [0, 1]", fontsize=9)
    axes[1].set_title("zoomed to the reads' range", fontsize=9)
    from matplotlib.lines import Line2D

    handles, _ = axes[0].get_legend_handles_labels()
    handles += [
        Line2D([], [], color="k", linestyle="-", label="successful episode"),
        Line2D([], [], color="k", linestyle="--", label="failed episode"),
    ]
    axes[0].legend(handles=handles, fontsize=8, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def _report(metrics: dict[str, Any], meta: dict[str, Any]) -> str:
    f = format_number
    lines = ["# Progress reads (eval-progress)", ""]
    for k in ("env", "verifier", "read", "episodes", "machine"):
        lines.append(f"- {k}: {meta[k]}")
    lines.append("")
    if metrics["n_abstained"] * 2 > metrics["n_reads"]:
        reasons = meta.get("abstention_reasons") or {}
        lines += [
            f"**Most reads abstained: {metrics['n_abstained']} of {metrics['n_reads']}** "
            f"(reasons: {reasons}); the numbers below rest on the rest. Fix: a model that puts "
            "mass on the score letters (verifier.min_mass, a larger model), or another read mode.",
            "",
        ]
    lo_hi = metrics.get("progress_range")
    if _nearly_constant(metrics):
        lines += [
            f"**The reads are nearly constant** (every read in [{f(lo_hi[0], 3)}, "
            f"{f(lo_hi[1], 3)}]): this verifier does not read progress from this text, and the "
            "correlations below rank differences of a few thousandths. Fix: another read mode "
            "or state text (configs: read_mode, form), or a larger model.",
            "",
        ]
    lines += [
        "| metric | value |",
        "|---|---|",
        f"| mean VOC, successful episodes ({metrics['n_successful']}) | {f(metrics['voc_mean'])} "
        f"({metrics['n_voc_undefined']} undefined: constant reads) |",
        f"| final-progress AUROC, successful vs failed | {f(metrics['final_auroc'])} |",
        f"| Spearman of progress with closeness (all reads) | {f(metrics['closeness_spearman'])} |",
        f"| reads (abstained) | {metrics['n_reads']} ({metrics['n_abstained']}) |",
        f"| reads per second | {f(metrics['reads_per_second'])} |",
        "",
        "Mean final progress by policy: "
        + ", ".join(f"{p} {f(v)}" for p, v in metrics["mean_final_progress"].items()),
        "",
        "VOC: Spearman of progress vs time on a successful episode (GVL, Ma et al. 2024). "
        "Closeness: minus the path left in cm (reach: gripper-target; push: gripper-block + "
        "block-target). `scores.jsonl` holds every read; `metrics.json` these numbers.",
    ]
    if metrics["final_auroc"] is None:
        lines.append(
            "\nFinal-progress AUROC is undefined: the episodes are all successful or all failed "
            "(add policies: success and short/wrong/random)."
        )
    return "\n".join(lines) + "\n"


def write_outputs(
    out_dir: str | Path,
    rows: list[dict[str, Any]],
    metrics: dict[str, Any],
    meta: dict[str, Any],
    *,
    plots: bool = True,
) -> dict[str, Path]:
    """``scores.jsonl``, ``metrics.json``, ``report.md`` and ``progress.png``, each atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "scores": atomic_write_text(
            out / "scores.jsonl", "".join(json.dumps(to_jsonable(r)) + "\n" for r in rows)
        ),
        "metrics": atomic_write_json(out / "metrics.json", {**metrics, "meta": to_jsonable(meta)}),
        "report": atomic_write_text(out / "report.md", _report(metrics, meta)),
    }
    if plots:
        _plot(rows, out / "progress.png", f"{meta['env']} | {meta['read']} | {meta['verifier']}")
        paths["plot"] = out / "progress.png"
    return paths


def main(args: argparse.Namespace) -> int:
    """Run ``densereward eval-progress``; the exit status (0, or 3 when most reads abstained).

    Raises:
        ConfigError: on bad settings (the CLI prints it).
    """
    from .. import Verifier

    flags = {"env": args.env, "episodes": args.episodes, "seed": args.seed, "stride": args.stride}
    cfg, vcfg = build_configs(args.config, overrides_from(args), flags)
    episodes = rollouts(cfg)
    n_ok = sum(e.success for e in episodes)
    if cfg.policies == ("success",) and n_ok == 0:
        raise ConfigError("no scripted episode succeeded: nothing to measure VOC on")
    if args.reward_model:
        from ..reward_model import load_reward_model

        model = load_reward_model(args.reward_model)
        rows, seconds = read_reward_model(model, episodes, cfg)
        lab = model.meta.get("verifier", "unknown labeller")
        who = f"reward model {args.reward_model} (distilled from {lab})"
        read = f"reward model potential, every {cfg.stride} steps"
    else:
        verifier = Verifier(vcfg)
        try:
            rows, seconds = read_progress(verifier, episodes, cfg)
        finally:
            verifier.close()
        who = f"{vcfg.backend} {vcfg.model or 'default (SmolLM2-135M-Instruct)'}, G={vcfg.granularity}"
        read = f"{cfg.read_mode}, {cfg.form} text, every {cfg.stride} steps"
    metrics = progress_metrics(rows, seconds)
    reasons = dict(Counter(r.get("reason") or "abstained" for r in rows if r["progress"] is None))
    meta = {
        "env": cfg.env_id,
        "verifier": who,
        "read": read,
        "episodes": f"{cfg.episodes} per policy ({', '.join(cfg.policies)}), seeds {cfg.seed}.."
        f"{cfg.seed + cfg.episodes - 1}; {n_ok} of {len(episodes)} successful",
        "machine": f"{platform.machine()}, {time.strftime('%Y-%m-%d')}",
        "config": to_jsonable(cfg),
        "verifier_config": None if args.reward_model else to_jsonable(vcfg),
        "reward_model": args.reward_model,
        "abstention_reasons": reasons,
    }
    paths = write_outputs(args.out, rows, metrics, meta, plots=not args.no_plots)
    print(
        f"VOC {format_number(metrics['voc_mean'])} (successful episodes)  final-progress AUROC "
        f"{format_number(metrics['final_auroc'])}  closeness Spearman "
        f"{format_number(metrics['closeness_spearman'])}  ({metrics['n_reads']} reads, "
        f"{metrics['n_abstained']} abstained)"
    )
    print(f"wrote {paths['report']}")
    if _nearly_constant(metrics):
        lo_hi = metrics["progress_range"]
        print(
            f"densereward eval-progress: every read is in [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]: this "
            "verifier does not read progress from this text (try read_mode=..., form=..., or a "
            "larger verifier.model)",
            file=sys.stderr,
        )
    if metrics["n_abstained"] * 2 > metrics["n_reads"]:
        print(
            f"densereward eval-progress: {metrics['n_abstained']} of {metrics['n_reads']} reads "
            f"abstained ({reasons}); report.md leads with it; exit status {EXIT_MOST_ABSTAINED}",
            file=sys.stderr,
        )
        return EXIT_MOST_ABSTAINED
    return 0
