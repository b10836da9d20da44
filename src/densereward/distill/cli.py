"""``densereward distill``: pairwise verifier labels on robot states -> a reward model directory."""

from __future__ import annotations

import argparse
import platform
import sys
import time
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
from ..reward_model import FitConfig, fit_reward_model
from .core import (
    LABELS_FILE,
    READS_FILE,
    DistillConfig,
    States,
    closeness_by_text,
    collect_states,
    label_pairs,
    label_summary,
    pointwise_pairs,
    read_labels,
    read_texts,
    select_pairs,
    select_texts,
    training_pairs,
)

__all__ = ["EXIT_MOST_ABSTAINED", "add_arguments", "build_configs", "main"]

EXIT_MOST_ABSTAINED = 3
"""Most pairwise reads abstained: nothing is fitted."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``distill`` options."""
    parser.add_argument(
        "--config",
        default=None,
        help="YAML: env_id, policies, episodes, seed, max_steps, state_stride, pairs, "
        "within_episode, expand, batch_size, and verifier: / fit: sections "
        "(configs/distill_fetchpush.yaml)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="the reward model directory; its labels.jsonl is reused, so a rerun resumes",
    )
    add_override_arguments(parser, "pairs=100 fit.members=3")


def build_configs(
    config_path: str | None, overrides: list[str]
) -> tuple[DistillConfig, VerifierConfig, FitConfig]:
    """The run's settings: YAML, then ``key=value`` overrides.

    Raises:
        ConfigError: on unknown keys (naming them) or bad values.
    """
    data = load_yaml(config_path) if config_path else {}
    apply_overrides(data, list(overrides))
    verifier = data.pop("verifier", None) or {}
    fit = data.pop("fit", None) or {}
    return (
        from_dict(DistillConfig, data),
        from_dict(VerifierConfig, verifier, prefix="verifier."),
        from_dict(FitConfig, fit, prefix="fit."),
    )


def _report(summary: dict[str, Any]) -> str:
    f = format_number
    lab, fit = summary["labels"], summary["fit"]
    return (
        "\n".join(
            [
                "# Distilled progress reward (densereward distill)",
                "",
                f"- env: {summary['env']}; states: {summary['n_states']} from "
                f"{summary['n_episodes']} episodes ({summary['policies']}), seeds {summary['seeds']}",
                f"- labeller: {summary['verifier']}",
                f"- machine: {summary['machine']}",
                "",
                "| | |",
                "|---|---|",
                *(
                    [
                        f"| text pairs labelled (reads, both orders) | {lab['n_pairs']} "
                        f"({lab['n_reads']}) |",
                        f"| abstained pairs | {lab['n_abstained']} |",
                        f"| position bias, P(first shown) - 0.5 | {f(lab['position_bias'])} |",
                        f"| seconds per pair (both reads) | {f(lab['seconds_per_pair'])} |",
                    ]
                    if "read_range" not in lab
                    else [
                        f"| state texts read (abstained) | {lab['n_reads']} "
                        f"({lab['n_read_abstained']}) |",
                        f"| range of the reads | {f(lab['read_range'] and lab['read_range'][0])} - "
                        f"{f(lab['read_range'] and lab['read_range'][1])} |",
                        f"| Spearman of the reads with true closeness | "
                        f"{f(lab['read_spearman_closeness'])} |",
                        f"| seconds per read | {f(lab['seconds_per_read'])} |",
                        f"| text pairs derived, sigmoid((v_a - v_b) / tau) | {lab['n_pairs']} |",
                    ]
                ),
                f"| mean margin abs(p - 0.5) | {f(lab['mean_abs_margin'])} |",
                f"| clear labels (abs(p - 0.5) >= 0.1) agreeing with true closeness | "
                f"{f(lab['clear_agree_with_closeness'])} of {lab['n_clear']} |",
                f"| state pairs fitted (held out) | {fit['n_pairs']} ({fit['n_val']}) |",
                f"| agreement with clear held-out label pairs (texts seen in the fit: a fit check, "
                f"not generalisation; eval-progress --reward-model is) | {f(fit['val_agreement'])} |",
                f"| train / held-out loss | {f(fit['train_loss'])} / {f(fit['val_loss'])} |",
                "",
                "Check the model on episodes it never saw: `densereward eval-progress --config "
                "configs/eval_progress_fetchpush.yaml --reward-model DIR --seed S` (VOC, AUROC).",
            ]
        )
        + "\n"
    )


def _read_summary(reads: list[dict[str, Any]], states: States) -> dict[str, Any]:
    """Pointwise labels: reads, their range, and their Spearman with the true closeness."""
    import numpy as np
    from scipy.stats import spearmanr

    close = closeness_by_text(states)
    ok = [r for r in reads if r.get("progress") is not None]
    v = [float(r["progress"]) for r in ok]
    c = [close[r["text"]] for r in ok]
    rho = float(spearmanr(v, c).statistic) if len(v) > 2 and np.std(v) > 0 else None
    return {
        "n_reads": len(reads),
        "n_read_abstained": len(reads) - len(ok),
        "read_range": [min(v), max(v)] if v else None,
        "read_spearman_closeness": rho,
        "seconds_per_read": float(np.mean([r["seconds"] for r in reads])) if reads else None,
    }


def main(args: argparse.Namespace) -> int:
    """Run ``densereward distill``; the exit status (0, or 3 when most reads abstained).

    Raises:
        ConfigError: on bad settings (the CLI prints it).
    """
    import numpy as np

    cfg, vcfg, fcfg = build_configs(args.config, overrides_from(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    states = collect_states(cfg)
    if cfg.labels == "pairwise":
        asked: list[Any] = select_pairs(states, cfg.pairs, cfg.within_episode, cfg.seed)
        path = out / LABELS_FILE
        have = {(r["a"], r["b"]) for r in read_labels(path)}
        what = "pairs (2 reads each)"
    else:
        asked = select_texts(states, cfg.texts, cfg.seed)
        path = out / READS_FILE
        have = {r["text"] for r in read_labels(path)}
        what = "state texts (1 read each)"
    if cfg.labels == "pairwise" and len(asked) < cfg.pairs:
        print(
            f"densereward distill: only {len(asked)} distinct text pairs among "
            f"{len(set(states.texts))} texts (asked {cfg.pairs})",
            file=sys.stderr,
        )
    missing = sum(1 for x in asked if x not in have)
    verifier = None
    if missing:
        from .. import Verifier

        print(
            f"densereward distill: {missing} of {len(asked)} {what} to read with "
            f"{vcfg.model or 'the default model'}",
            file=sys.stderr,
        )
        verifier = Verifier(vcfg)

    def progress(done: int, total: int) -> None:
        print(f"  read {done}/{total} {what.split(' (')[0]}", file=sys.stderr, flush=True)

    try:
        if cfg.labels == "pairwise":
            rows = label_pairs(
                verifier, states.task, asked, path, batch_size=cfg.batch_size, progress=progress
            )
        else:
            reads = read_texts(
                verifier, states.task, asked, path, batch_size=cfg.batch_size, progress=progress
            )
    finally:
        if verifier is not None:
            verifier.close()
    if cfg.labels == "pairwise":
        lab = label_summary(rows, states)
        n_abst, n_asked = lab["n_abstained"], lab["n_pairs"]
        tpairs, groups = training_pairs(rows, states, cfg.expand, cfg.seed)
    else:
        n_abst, n_asked = sum(1 for r in reads if r.get("progress") is None), len(reads)
        tpairs, groups, rows = pointwise_pairs(
            reads, states, cfg.pairs * cfg.expand, cfg.tau, cfg.seed
        )
        lab = {**label_summary(rows, states), **_read_summary(reads, states)}
    if n_abst * 2 > n_asked:
        reasons = sorted(
            {
                r.get("reason", "")
                for r in (rows if cfg.labels == "pairwise" else reads)
                if r.get("reason")
            }
        )
        print(
            f"densereward distill: {n_abst} of {n_asked} reads abstained ({reasons[:3]}); "
            "nothing fitted. Fix: a larger verifier.model",
            file=sys.stderr,
        )
        return EXIT_MOST_ABSTAINED
    if not lab["n_clear"]:
        print(
            f"densereward distill: the labeller preferred neither state in any pair (mean margin "
            f"{format_number(lab['mean_abs_margin'])}, none >= 0.1): a reward model fitted to it "
            "would be constant; nothing fitted. Fix: a larger verifier.model"
            + (", or labels=pointwise" if cfg.labels == "pairwise" else ""),
            file=sys.stderr,
        )
        return EXIT_MOST_ABSTAINED
    if not tpairs:
        raise ConfigError("no labelled pair left to fit")
    summary: dict[str, Any] = {
        "env": cfg.env_id,
        "n_states": len(states.texts),
        "n_texts": len(set(states.texts)),
        "n_episodes": int(states.episode.max()) + 1,
        "policies": ", ".join(cfg.policies),
        "seeds": f"{cfg.seed}..{cfg.seed + cfg.episodes - 1}",
        "verifier": f"{vcfg.backend} {vcfg.model or 'default (SmolLM2-135M-Instruct)'}, "
        f"G={vcfg.granularity}, "
        + ("pairwise both orders" if cfg.labels == "pairwise" else f"pointwise, tau {cfg.tau}"),
        "machine": f"{platform.machine()}, {time.strftime('%Y-%m-%d')}",
        "labels": lab,
        "config": to_jsonable(cfg),
        "verifier_config": to_jsonable(vcfg),
    }
    model, result = fit_reward_model(
        states.x, tpairs, groups=groups, keys=states.keys, config=fcfg, meta=summary
    )
    summary["fit"] = result.as_dict()
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    model.meta = {**model.meta, **{k: summary[k] for k in ("fit", "seconds")}}
    model.save(out)
    np.savez_compressed(
        out / "states.npz",
        x=states.x,
        episode=states.episode,
        t=states.t,
        closeness=states.closeness,
        success=states.success,
    )
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "report.md", _report(summary))
    print(
        f"reward model: {out}  ({cfg.labels} labels: {lab['n_reads']} reads, {lab['n_pairs']} "
        f"text pairs; position bias {format_number(lab['position_bias'])}; clear labels agree "
        "with closeness "
        f"{format_number(lab['clear_agree_with_closeness'])}; held-out agreement "
        f"{format_number(result.val_agreement)})"
    )
    return 0
