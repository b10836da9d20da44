"""The reward-quality plot of :class:`~densereward.rewards.tracking.RewardQualityTracker`:
every ``verifier/*`` metric of ``reward_quality.jsonl`` against the training step, one panel
per group of :data:`PLOT_KEYS` (and :data:`AUDIT_PANEL` when the records hold the advantage
audit); undefined points are left out and explained under the panels, and a panel with no
point says "no data" and why. Kept apart from the tracker so that the tracker module holds the
bookkeeping only; matplotlib is imported on first use.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .quality import WINDOW_KEYS, group_by_reason, undefined_reasons

__all__ = ["PLOT_KEYS", "AUDIT_PANEL", "plot_reward_quality"]

_NAN = float("nan")

PLOT_KEYS = (
    ("auroc", "pairwise_accuracy", "score_gap"),
    ("tpr", "tnr", "balanced_accuracy", "precision"),
    ("pass_rate", "verifier_gain"),
    ("tie_rate", "frac_zero_spread_sparse", "frac_zero_spread_dense", "mean_mass"),
)
"""Panels of the dynamics plot (metric names without the ``verifier/`` prefix): threshold-free
discrimination, rates at the accept threshold, the policy's pass rate and the verifier gain,
GRPO-signal health."""

AUDIT_PANEL = (
    "advantage/wrong_up_share",
    "advantage/constant_group_share",
    "advantage/judge_only_step",
)
"""The advantage audit's panel (:mod:`densereward.rewards.advantage`), drawn when the records
hold it: the share of each step's update that pushes wrong completions up, the share in groups
with no sparse spread, and the steps the judge alone decided."""


_READ_KEYS = frozenset(WINDOW_KEYS) - {"read_pass_rate"} | {"tie_rate", "mean_mass"}
"""Metrics whose per-batch values rest on the verifier's reads: a batch it read none of has none
(records written before ``tie_rate`` was left undefined there hold 1.0: not drawn either).
``pass_rate`` and ``frac_zero_spread_sparse`` rest on Math-Verify's labels, and
``frac_zero_spread_dense`` on the rewards the policy got, read or not: those are drawn."""

_NO_READ = "no completion read by the verifier"


def _no_read_steps(by_step: dict[int, list[dict[str, Any]]], prefix: str) -> list[int]:
    """The steps whose batches the verifier read none of (``n_read`` 0, ``n_unread`` > 0).

    >>> _no_read_steps({1: [{"verifier/n_read": 0.0, "verifier/n_unread": 4.0}],
    ...                 2: [{"verifier/n_read": 3.0, "verifier/n_unread": 1.0}]}, "verifier/")
    [1]
    """
    return [
        st
        for st, rs in sorted(by_step.items())
        if all(r.get(prefix + "n_read") == 0 and (r.get(prefix + "n_unread") or 0) > 0 for r in rs)
    ]


def _undefined_note(records: Sequence[dict[str, Any]], prefix: str) -> str:
    """Why points are missing: for the metrics that are undefined at some steps, how often, and
    why at the last of them (the reason changes as the window fills: no threshold yet, then too
    few of a class); one line per reason, naming every metric it covers at as many steps.

    >>> print(_undefined_note([{"step": 1, "verifier/n_valid": 4.0, "verifier/auroc": None},
    ...                        {"step": 2, "verifier/n_valid": 4.0, "verifier/auroc": 0.5}], "verifier/"))
    auroc undefined at 1 of 2 steps (no point drawn); at step 1: it needs both correct and incorrect completions in the batch
    """
    last: dict[str, tuple[int, str]] = {}
    steps: dict[str, set[int]] = {}
    for r in sorted(records, key=lambda r: int(r["step"])):
        for key, why in undefined_reasons(r, prefix).items():
            last[key] = (int(r["step"]), why)
            steps.setdefault(key, set()).add(int(r["step"]))
    n_steps = len({int(r["step"]) for r in records})
    return "\n".join(
        f"{', '.join(keys)} undefined at {n} of {n_steps} steps (no point drawn); "
        f"at step {step}: {why}"
        for keys, (n, step, why) in group_by_reason(
            (key, (len(steps[key]), step, why)) for key, (step, why) in last.items()
        )
    )


def _empty_panel_reason(records: Sequence[dict[str, Any]], keys: Sequence[str], prefix: str) -> str:
    """Why a panel has no point at all: the reason its metrics are undefined at the last step
    (:func:`~densereward.rewards.quality.undefined_reasons`), or that no record holds them.

    >>> _empty_panel_reason([{"step": 1, "verifier/n_valid": 4.0}], ("auroc",), "verifier/")
    'no record holds these metrics'
    >>> _empty_panel_reason([{"step": 1, "verifier/n_valid": 4.0, "verifier/auroc": None}], ("auroc",), "verifier/")
    'it needs both correct and incorrect completions in the batch'
    """
    why = None  # the last step's reason: a window's, else the batch's
    for r in sorted(records, key=lambda r: int(r["step"])):
        reasons = undefined_reasons(r, prefix).items()
        window = [v for k, v in reasons if k.startswith("window/") and k[7:] in keys]
        batch = [v for k, v in reasons if k in keys]
        if window or batch:
            why = (window or batch)[0]
    if why:
        return why
    held = [k for k in keys if any(prefix + k in r or prefix + "window/" + k in r for r in records)]
    if held:
        return f"{', '.join(held)} undefined at every step"
    return "no record holds these metrics"


def _window_n(record: dict[str, Any], prefix: str) -> float | None:
    """The window's count of reads: ``window/n_read``, or ``window/n`` in records written before
    unread completions were left out of the window (the committed figures' JSONL files)."""
    return record.get(prefix + "window/n_read", record.get(prefix + "window/n"))


def _window_classes(record: dict[str, Any], prefix: str = "verifier/") -> tuple[int, int] | None:
    """``(correct, incorrect)`` read completions of one record's window, or ``None`` without
    counts: ``window/n_read_correct`` and ``window/n_read_incorrect``, or in records written
    before those were logged, the window's count times its pass rate (``window/pass_rate``, the
    name ``window/read_pass_rate`` had then).

    >>> _window_classes({"verifier/window/n_read_correct": 3.0, "verifier/window/n_read_incorrect": 20.0})
    (3, 20)
    """
    pos, neg = (record.get(prefix + f"window/n_read_{c}") for c in ("correct", "incorrect"))
    if pos is not None and neg is not None:
        return round(pos), round(neg)
    n = _window_n(record, prefix)
    rate = record.get(prefix + "window/read_pass_rate", record.get(prefix + "window/pass_rate"))
    if not n or rate is None or (isinstance(rate, float) and math.isnan(rate)):
        return None
    return round(n * rate), round(n) - round(n * rate)


def _window_counts(record: dict[str, Any], prefix: str = "verifier/") -> str | None:
    """The labelled, read completions one record's window metrics rest on, by class, and how far
    one completion moves TPR / TNR (``None`` without window counts).

    >>> _window_counts({"verifier/window/n_read": 40.0, "verifier/window/pass_rate": 0.1})
    '40 read completions, 4 correct / 36 incorrect (one moves TPR by 0.25, TNR by 0.03)'
    >>> _window_counts({"verifier/window/n": 40.0, "verifier/window/pass_rate": 0.1})[:27]
    '40 completions, 4 correct /'
    """
    classes = _window_classes(record, prefix)
    if classes is None:
        return None
    pos, neg = classes
    # records before unread completions were left out of the window count them all (window/n)
    what = "read completions" if prefix + "window/n_read" in record else "completions"
    text = f"{pos + neg} {what}, {pos} correct / {neg} incorrect"
    if pos and neg:
        text += f" (one moves TPR by {1 / pos:.2f}, TNR by {1 / neg:.2f})"
    return text


def _in_sample_steps(records: Sequence[dict[str, Any]], prefix: str = "verifier/") -> list[int]:
    """The steps whose accept threshold was chosen on the batch it then scored
    (``<prefix>threshold_in_sample`` = 1): their TPR / TNR are in-sample, so optimistic.

    >>> _in_sample_steps([{"step": 1, "verifier/threshold_in_sample": 0.0},
    ...                   {"step": 2, "verifier/threshold_in_sample": 1.0}])
    [2]
    """
    return sorted({int(r["step"]) for r in records if r.get(prefix + "threshold_in_sample") == 1})


def _steps_text(steps: Sequence[int]) -> str:
    """``"step 2"`` / ``"steps 1, 2"``."""
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(map(str, steps))


def _reward_quality_figure(records: Sequence[dict[str, Any]], prefix: str) -> Any:
    """The matplotlib figure of :func:`plot_reward_quality` (not saved, not closed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_step.setdefault(int(r["step"]), []).append(r)
    steps = sorted(by_step)

    def series(key: str) -> list[float]:
        vals = []
        for st in steps:
            xs = [r.get(prefix + key) for r in by_step[st]]
            xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
            vals.append(float(np.mean(xs)) if xs else _NAN)
        return vals

    no_read = _no_read_steps(by_step, prefix)

    def batch_series(key: str) -> list[float]:
        """A per-batch series as drawn: a value resting on no read is left out."""
        vals = series(key)
        if key not in _READ_KEYS:
            return vals
        return [_NAN if st in no_read else v for st, v in zip(steps, vals, strict=True)]

    windowed = any(_window_n(r, prefix) is not None for r in records)
    panels = PLOT_KEYS + (
        (AUDIT_PANEL,) if any(prefix + AUDIT_PANEL[0] in r for r in records) else ()
    )
    # at most 3 panels a row: five in one row (2750 px wide) were unreadable at page width
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(5 * ncols, 4.6 * nrows + 0.6), squeeze=False)
    for spare in grid.flat[len(panels) :]:
        fig.delaxes(spare)
    axes = [list(grid.flat[: len(panels)])]
    # Series of one panel often coincide (AUROC and pairwise accuracy at 1.0): each gets its own
    # dash pattern and marker, drawn thinner in turn, so a line under another still shows.
    styles = [("-", "o", 2.4), ("--", "s", 1.9), (":", "^", 1.6), ("-.", "D", 1.3)]
    pad = max(0.5, 0.04 * (steps[-1] - steps[0])) if steps else 0.5
    for ax, keys in zip(axes[0], panels, strict=True):
        scope = {k: ("window/" + k if windowed and k in WINDOW_KEYS else k) for k in keys}
        drawn = [
            k
            for k in keys
            if (scope[k] != k and np.isfinite(series(scope[k])).any())
            or np.isfinite(batch_series(k)).any()
        ]
        # a per-batch line that rests on the verifier's reads has no point where it read none:
        # its legend says so, as an empty panel says "no data"
        gap = {
            k: f"no data at {_steps_text(no_read)}: {_NO_READ}"
            for k in keys
            if no_read
            and k in _READ_KEYS
            and scope[k] == k
            and any(prefix + k in r for st in no_read for r in by_step[st])
        }
        for j, key in enumerate(keys):
            if key not in drawn:
                if drawn and key in gap:  # no line to label: an entry that says why
                    ax.plot([], [], ls="none", label=f"{key}: {gap[key]}")
                continue  # a legend entry for a line that is not there would read as data
            ls, mk, lw = styles[j % len(styles)]
            if scope[key] != key:
                (line,) = ax.plot(
                    steps,
                    series(scope[key]),
                    ls=ls,
                    marker=mk,
                    lw=lw,
                    ms=4,
                    mfc="none",
                    label=key,
                )
                ax.plot(
                    steps,
                    batch_series(key),
                    ls="none",
                    marker=".",
                    ms=5,
                    alpha=0.35,
                    color=line.get_color(),
                )
            else:  # in a windowed plot, a metric with no window value is the batch's own
                label = f"{key} (each batch)" if windowed else key
                if key in gap:
                    label += f"; {gap[key]}"
                ax.plot(
                    steps, batch_series(key), ls=ls, marker=mk, lw=lw, ms=4, mfc="none", label=label
                )
        # the threshold only beside rates it applies to: alone, it ran through "no data"
        if drawn and "tpr" in keys and any(prefix + "threshold" in r for r in records):
            ax.plot(steps, series("threshold"), ls="--", color="0.4", lw=1, label="threshold")
        if "tpr" in keys:  # what the rates rest on, on their own panel
            _annotate_rates(ax, records, by_step, steps, prefix, windowed, empty=not drawn)
        if not drawn:  # no axis made up around nothing: say that there is no data, and why
            reason = textwrap.fill(_empty_panel_reason(records, keys, prefix), 48)
            ax.text(
                0.5,
                0.5,
                f"no data: {', '.join(keys)}\n{reason}",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=7,
                color="0.3",
                wrap=True,
            )
        if steps:  # the steps of the run, also where a panel has no point (not -0.04..0.04)
            ax.set_xlim(steps[0] - pad, steps[-1] + pad)
        ax.set_xlabel("GRPO step")
        # rates and probabilities lie in [0, 1]; the verifier gain and the score gap in [-1, 1],
        # so a panel goes below 0 only when it draws one of them (not for an empty gain)
        ax.set_ylim(-1.05 if {"verifier_gain", "score_gap"} & set(drawn) else -0.05, 1.05)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        labels = ax.get_legend_handles_labels()[1]
        if labels:  # below the panel, where it never covers a point; long labels one a row
            ax.legend(
                fontsize=7,
                loc="upper center",
                bbox_to_anchor=(0.5, -0.17),
                ncol=1 if max(map(len, labels)) > 24 else 2,
                frameon=False,
                handlelength=2.5,
            )
    sources = list(
        dict.fromkeys(str(r["threshold_source"]) for r in records if r.get("threshold_source"))
    )
    sizes = [int(r["window"]) for r in records if r.get("window")]
    title = "Verifier reward quality as the policy trains"
    if windowed:
        size = f"W = {max(sizes)}" if sizes else "W"
        title += (
            f" (lines: the last {size} labelled completions, faint dots: each batch; "
            'lines marked "(each batch)": the batch\'s own value)'
        )
    in_sample = _in_sample_steps(records, prefix)
    if sources:
        title += f"\naccept threshold: {', '.join(sources)}"
    if in_sample:
        title += (
            f"{'; ' if sources else chr(10)}in-sample at {_steps_text(in_sample)} (chosen on "
            "the batch it then scored: the rates that include it are optimistic)"
        )
    counts = _window_counts(by_step[steps[-1]][-1], prefix) if windowed and steps else None
    if counts is not None:  # what the last window's rates rest on
        title += f"\nwindow at step {steps[-1]}: {counts}"
    fig.suptitle(title, fontsize=10)
    for row in grid:
        row[0].set_ylabel("value")
    # beside the lines: why some points are missing; a reason naming many metrics is wrapped
    # to the figure's width (~17 characters an inch at 7 pt)
    width = int(17 * fig.get_figwidth())
    note = "\n".join(
        textwrap.fill(line, width, subsequent_indent="    ")
        for line in _undefined_note(records, prefix).splitlines()
    )
    if note:
        fig.text(0.005, 0.005, note, fontsize=7, va="bottom", ha="left", color="0.3")
    # the note's lines take ~0.13 in each at 7 pt: keep the panels above them, whatever the height
    below = (0.12 + 0.13 * (note.count("\n") + 1)) / fig.get_figheight() if note else 0
    fig.tight_layout(rect=(0, below, 1, 1))
    return fig


def _annotate_rates(
    ax: Any,
    records: Sequence[dict[str, Any]],
    by_step: dict[int, list[dict[str, Any]]],
    steps: list[int],
    prefix: str,
    windowed: bool,
    empty: bool = False,
) -> None:
    """On the TPR / TNR panel: a dotted line and "in-sample threshold" at each step whose
    threshold was chosen on its own batch, and the counts the last window's rates rest on (a
    legend entry, below the panel; at the lower right when the panel is ``empty``, clear of its
    centred "no data" text)."""
    for st in _in_sample_steps(records, prefix):
        ax.axvline(st, color="tab:red", ls=":", lw=1)
        ax.text(
            st,
            1.01,
            "in-sample threshold",
            color="tab:red",
            fontsize=6.5,
            ha="center",
            va="bottom",
            transform=ax.get_xaxis_transform(),
            clip_on=False,
        )
    classes = _window_classes(by_step[steps[-1]][-1], prefix) if windowed and steps else None
    if classes is None:
        return
    counts = f"step {steps[-1]} window: {classes[0]} correct / {classes[1]} incorrect"
    if not empty:  # a legend entry without a line: the legend sits below the panel
        ax.plot([], [], ls="none", label=counts)
        return
    ax.text(
        0.98,
        0.04,
        counts.replace(": ", ":\n").replace(" / ", " /\n"),
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize=7,
        bbox={"boxstyle": "round", "fc": "white", "ec": "0.6", "alpha": 0.85},
    )


def plot_reward_quality(
    records: Sequence[dict[str, Any]], path: str | Path, *, prefix: str = "verifier/"
) -> Path:
    """Plot reward-quality metrics against the GRPO step (one PNG, one panel per :data:`PLOT_KEYS` row).

    Records of the same step (several generation batches per logging step) are averaged.
    Where the records hold window metrics (``<prefix>window/<metric>``) those are the lines
    and the per-batch values faint dots; a metric with no window value (``pass_rate``,
    ``tie_rate``, ...) is then drawn as its per-batch line, labelled "(each batch)". A
    per-batch value that rests on the verifier's reads (``tie_rate``, ``mean_mass``, the
    labelled metrics) has no point at a step whose batch it read none of (``n_read`` 0,
    ``n_unread`` > 0), and its legend entry says "no data at steps ...: no completion read by
    the verifier" (an entry of its own when the line has no point at all); the accept threshold (``<prefix>threshold``) is drawn
    dashed in the rates panel when it has a rate to draw, and the title says how it was chosen (``threshold_source``)
    and what the last window rests on (its correct / incorrect completions, also on the rates
    panel); steps whose threshold was chosen on the batch it scored
    (``<prefix>threshold_in_sample`` = 1) are marked "in-sample threshold" there and named in
    the title. A panel none of whose metrics has a point at any step draws no axis around nothing: it
    says "no data" and why (the most frequent reason its metrics are undefined). Every panel's
    x axis spans the records' steps; its y axis is [0, 1] unless it draws the verifier gain or
    the score gap ([-1, 1]).

    Args:
        records: Rows of ``reward_quality.jsonl`` (``step`` plus ``<prefix><metric>`` keys).
        path: Output PNG path.
        prefix: Key prefix of the metrics.

    Returns:
        ``path``.
    """
    import matplotlib.pyplot as plt

    fig = _reward_quality_figure(records, prefix)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
