"""The SAC run's plot, ``training_curves.png``: evaluation, returns and the verifier's quality.

What ``reward_quality.png`` is to a GRPO run
(:func:`densereward.rewards.tracking.plot_reward_quality`): one PNG beside the run's JSONL curves, every metric against the training step, the accept
threshold dashed with how it was chosen in the title, and a note under the panels of the
metrics that are undefined at some points and why (no point is drawn there, never a 0).

Panels (those with no defined point are left out, and the note says so):

* success rate: deterministic evaluation episodes (``eval_curve.jsonl``) and the training
  episodes (``train_curve.jsonl``);
* evaluation return: the evaluation environment's reward summed over an episode (its label
  says which; never the verifier's);
* training return: the environment's own reward and, with the verifier reward, the
  shaped reward the agent trained on (``verifier_dynamics.jsonl``); two rewards, two scales;
* verifier runs: TPR, TNR and balanced accuracy of the final progress against success, with
  the threshold in force; and the progress itself (VOC, mean final progress of successful and
  failed episodes, the abstention rate).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from densereward.callbacks import UNDEFINED_REASONS
from densereward.io import read_jsonl

__all__ = ["PLOT_NAME", "plot_sac_run"]

PLOT_NAME = "training_curves.png"

_NAN = float("nan")


def _read(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file, one per step (the last record of a step wins)."""
    if not path.is_file():
        return []
    by_step = {int(r["step"]): r for r in read_jsonl(path)}
    for r in by_step.values():  # a run written before the name said which reward it sums
        if "rollout/ep_true_rew_mean" in r:
            r.setdefault("rollout/ep_env_rew_mean", r.pop("rollout/ep_true_rew_mean"))
        if "rollout/ep_verifier_rew_mean" in r:  # before it was named for the training reward
            r.setdefault("rollout/ep_training_rew_mean", r.pop("rollout/ep_verifier_rew_mean"))
    return [by_step[s] for s in sorted(by_step)]


def _value(r: dict[str, Any], key: str) -> float:
    v = r.get(key)
    return _NAN if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def plot_sac_run(
    run_dir: str | Path,
    *,
    eval_reward: str,
    training_reward: str | None,
    threshold_source: str | None,
    title: str,
    success: bool = True,
) -> Path | None:
    """Draw ``<run_dir>/training_curves.png`` from the run's JSONL curves (Agg backend).

    Args:
        run_dir: the SAC run directory (``eval_curve.jsonl``, ``train_curve.jsonl``,
            ``verifier_dynamics.jsonl``).
        eval_reward: what the evaluation environment's reward is, in words.
        training_reward: the verifier reward the agent trains on, in words (``None`` without
            the verifier reward: not drawn).
        threshold_source: how the accept threshold was chosen (``None`` without a verifier).
        title: the figure's first title line (environment and reward).
        success: the environment reports ``info["is_success"]``; without it the panels of
            success rates and of the progress as a success prediction are left out (a note
            says why; the evaluation curve's ``value`` is then its mean reward, drawn in the
            evaluation return panel).

    Returns:
        The PNG's path, or ``None`` when no curve has a defined point (nothing is written).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    evals = _read(run_dir / "eval_curve.jsonl")
    train = _read(run_dir / "train_curve.jsonl")
    dyn = _read(run_dir / "verifier_dynamics.jsonl")
    per_point = _episodes_per_point(evals, "deterministic")
    panels: list[tuple[str, tuple[float, float] | None, list[tuple[Any, ...]]]] = [
        *(
            [
                (
                    "success rate",
                    (-0.05, 1.05),
                    [
                        (evals, "value", f"evaluation ({per_point})", "o-"),
                        (train, "value", "training episodes (last window)", ".-"),
                    ],
                )
            ]
            if success
            else []
        ),
        (
            f"evaluation episodes: mean return of {_episodes_per_point(evals)}",
            None,
            [(evals, "mean_reward", eval_reward, "o-")],
        ),
        (
            "training episodes: return",
            None,
            [
                (dyn, "rollout/ep_env_rew_mean", "the environment's own reward", ".-"),
                *(
                    [
                        (
                            dyn,
                            "rollout/ep_training_rew_mean",
                            f"training reward: {training_reward}",
                            ".-",
                        )
                    ]
                    if training_reward
                    else []
                ),
            ],
        ),
    ]
    if threshold_source is not None:
        panels += [
            *(
                [
                    (
                        "verifier: final progress as success prediction",
                        (-0.05, 1.05),
                        [
                            (dyn, "verifier/tpr", "TPR", ".-"),
                            (dyn, "verifier/tnr", "TNR", ".-"),
                            (dyn, "verifier/balanced_accuracy", "balanced accuracy", ".-"),
                            (dyn, "verifier/threshold", "threshold", "--"),
                        ],
                    )
                ]
                if success
                else []
            ),
            (
                "verifier: progress",
                (-1.05, 1.05),
                [
                    (dyn, "verifier/voc", "VOC (progress vs step)", ".-"),
                    *(
                        [
                            (
                                dyn,
                                "verifier/progress_success_mean",
                                "final progress, successes",
                                ".-",
                            ),
                            (
                                dyn,
                                "verifier/progress_failure_mean",
                                "final progress, failures",
                                ".-",
                            ),
                        ]
                        if success
                        else [(dyn, "verifier/final_progress_mean", "final progress", ".-")]
                    ),
                    (dyn, "verifier/abstain_rate", "abstention rate", ".-"),
                ],
            ),
        ]
    notes: list[str] = (
        []
        if success
        else ["no success-rate panels: the environment's step info has no 'is_success'"]
    )
    drawn = []
    for name, ylim, series in panels:
        lines = []
        for records, key, label, style in series:
            xs = [int(r["step"]) for r in records]
            ys = [_value(r, key) for r in records]
            n_undef = sum(math.isnan(y) for y in ys)
            if records and n_undef:
                why = UNDEFINED_REASONS.get(key, "not measured yet")
                notes.append(f"{label}: undefined at {n_undef} of {len(ys)} points ({why})")
            if n_undef < len(ys):
                lines.append((xs, ys, label, style))
        if lines:
            drawn.append((name, ylim, lines))
        else:
            notes.append(f"panel '{name}' left out: no defined point yet")
    if not drawn:
        return None
    steps = [x for _, _, lines in drawn for xs, _, _, _ in lines for x in xs]
    pad = max(1.0, 0.03 * (max(steps) - min(steps)))
    ncols = min(3, len(drawn))
    nrows = -(-len(drawn) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    for ax in axes.flat[len(drawn) :]:
        fig.delaxes(ax)  # no empty axes
    for ax, (name, ylim, lines) in zip(axes.flat, drawn, strict=False):
        for xs, ys, label, style in lines:
            kw = {"color": "0.4", "lw": 1} if style == "--" else {"ms": 4}
            ax.plot(xs, ys, style, label=label, **kw)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("environment steps")
        ax.set_xlim(min(steps) - pad, max(steps) + pad)  # one step axis for every panel
        ylim = ylim or _constant_ylim(lines)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, framealpha=0.7)
    if threshold_source is not None and success:
        title += f"\naccept threshold: {threshold_source}"
        fallback = [r for r in dyn if r.get("verifier/threshold_fallback") == 1.0]
        if fallback:
            title += (
                f"; 0.5 at {len(fallback)} of {len(dyn)} points (auto waits for a successful "
                "and a failed episode)"
            )
    fig.suptitle(title, fontsize=10)
    note = "\n".join(notes)
    if note:
        fig.text(0.005, 0.005, note, fontsize=7, va="bottom", ha="left", color="0.3")
    height = fig.get_size_inches()[1]  # the note's lines are ~0.12 inch each
    fig.tight_layout(rect=(0, (0.1 + 0.12 * (note.count("\n") + 1)) / height if note else 0, 1, 1))
    return _save(fig, plt, run_dir / PLOT_NAME)


def _episodes_per_point(evals: list[dict[str, Any]], kind: str = "") -> str:
    """How many evaluation episodes each point of ``eval_curve.jsonl`` averages, in words
    (``"10 deterministic episodes"``, ``"1 episode"``, ``"5-10 episodes"``; ``"the episodes"``
    for a curve without counts): a reader of a curve of means needs n."""
    counts = sorted({int(r["n_episodes"]) for r in evals if r.get("n_episodes") is not None})
    noun = f"{kind} episode".strip()
    if not counts:
        return f"the {noun}s"
    if len(counts) == 1:
        return episodes(counts[0], kind)
    return f"{counts[0]}-{counts[-1]} {noun}s"


def episodes(n: int, kind: str = "") -> str:
    """``n`` episodes in words, in the singular for one: ``episodes(1, "deterministic")`` is
    ``"1 deterministic episode"``."""
    return f"{n} {f'{kind} episode'.strip()}{'' if n == 1 else 's'}"


def _constant_ylim(lines: list[tuple[Any, ...]]) -> tuple[float, float] | None:
    """A y range for a panel whose every defined value is the same (a return of 0 throughout):
    the value +- max(1, 10% of it). Matplotlib's default drew +-0.04 around it, an axis whose
    ticks read as a measured spread. ``None`` for a panel whose values vary.

    >>> _constant_ylim([([0, 1], [0.0, 0.0], "x", "o-")])
    (-1.0, 1.0)
    >>> _constant_ylim([([0, 1], [0.0, 2.0], "x", "o-")]) is None
    True
    """
    ys = [y for _, values, _, _ in lines for y in values if math.isfinite(y)]
    if not ys or max(ys) - min(ys) > 1e-9 * max(1.0, abs(max(ys))):
        return None
    half = max(1.0, 0.1 * abs(ys[0]))
    return ys[0] - half, ys[0] + half


def _save(fig: Any, plt: Any, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
