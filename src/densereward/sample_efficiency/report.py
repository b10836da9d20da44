"""Analysis of a comparison's runs, its Markdown report and its learning-curve plot.

The statistics themselves are :mod:`densereward.metrics.curves` (IQM, AUC, probability of
improvement, steps to threshold, the mean curve with its band); this module applies them per
condition and per pair of conditions and writes the results down.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics.curves import (
    curve_arrays,
    final_performance,
    iqm_ci,
    mean_curve_ci,
    normalized_auc,
    probability_of_improvement_ci,
    resample_curve,
    steps_to_threshold,
)
from ..metrics.format import format_number, markdown_table

__all__ = [
    "analyze",
    "final_rests_on",
    "plot_curves",
    "reach_min_episodes",
    "reach_note",
    "render_report",
    "run_final",
    "title_of",
    "verdict",
]

NAN = float("nan")

MIN_RUNS_FOR_A_VERDICT = 4
"""Finished runs each side of a pair needs for a verdict: the one rule of the console, the
report and ``results.json`` (``enough_runs``). Why 4: the probability of improvement is the
Mann-Whitney statistic, and with n runs a side the smallest two-sided p-value its exact test
can give is 2 / C(2n, n): 0.33 at 2, 0.10 at 3, 0.029 at 4. Below 4 a side no ordering of the
runs, however clean, is significant at 5 %, while the percentile bootstrap still prints
``1.00 [1.00, 1.00]`` for two runs that beat two others. Below it a pair gets "too few runs
for a verdict" and at most a descriptive P with its run counts."""


MAX_POINTS_MARKED = 10
"""Curves with at most this many points per run are drawn with markers at the measured steps:
a line between two evaluations otherwise reads as a measured curve."""


def step_cost(summary: Mapping[str, Any]) -> dict[str, float | None]:
    """A SAC run's training cost per environment step and the reward's share of it, from its
    ``summary.json``: ``ms_per_step`` = 1000 / ``steps_per_second`` (training only, evaluation
    excluded) and ``reward_share`` = the seconds inside the verifier (``verifier_stats.seconds``)
    or the distilled reward model (``verifier_stats.reward_model_seconds``) over the training
    seconds (evaluation excluded) of the start that counted them, the last one of a resumed
    run (``seconds_this_start``; 0 for rewards with neither). ``None`` where the summary has
    no such numbers (GRPO runs)."""
    sps = summary.get("steps_per_second")
    seconds = summary.get("seconds_this_start", summary.get("seconds"))
    eval_s = summary.get("eval_seconds_this_start", summary.get("eval_seconds")) or 0.0
    if not isinstance(sps, (int, float)) or not sps > 0 or not seconds:
        return {"ms_per_step": None, "reward_share": None}
    train_s = float(seconds) - float(eval_s)
    stats = summary.get("verifier_stats") or {}
    spent = stats.get("seconds", stats.get("reward_model_seconds", 0.0)) or 0.0
    share = float(spent) / train_s if train_s > 0 else None
    return {"ms_per_step": 1000.0 / float(sps), "reward_share": share}


def final_points(
    curve: Sequence[Mapping[str, Any]], final_window: int
) -> tuple[list[Mapping[str, Any]], bool]:
    """The points a run's final performance rests on, and whether a step-0 point (the untrained
    policy's evaluation) was left out of them.

    The curve's finite points sorted by step; a point at step 0 measures the policy before any
    training, so it is left out whenever a later point exists; of the rest, the last
    ``final_window``. A curve with only step-0 points keeps them (its final is the untrained
    policy's, which :func:`final_rests_on` says).

    >>> pts, dropped = final_points([{"step": 0, "value": 0.9}, {"step": 50, "value": 0.2}], 3)
    >>> [p["step"] for p in pts], dropped
    ([50], True)
    """
    pts = [
        p
        for p in sorted(curve or [], key=lambda p: float(p["step"]))
        if p.get("value") is not None and math.isfinite(float(p["value"]))
    ]
    trained = [p for p in pts if float(p["step"]) > 0]
    window = (trained or pts)[-final_window:]
    return window, bool(trained) and len(trained) < final_window and len(trained) < len(pts)


def run_final(curve: Sequence[Mapping[str, Any]], final_window: int) -> float:
    """A run's final performance: the mean of the last ``final_window`` points of its curve,
    leaving out a step-0 point (the untrained policy) when later points exist
    (:func:`final_points`; ``NaN`` for an empty curve). The one computation behind the report's
    table, each run's ``result.json`` and the line printed when a run finishes. Rounded to 12
    decimals, so that a mean's float noise (``0.15000000000000002`` for 0.1 and 0.2) stays out
    of ``result.json``.

    >>> run_final([{"step": 1, "value": 0.1}, {"step": 2, "value": 0.2}], 2)
    0.15
    >>> run_final([{"step": 0, "value": 0.0}, {"step": 1, "value": 0.5}, {"step": 2, "value": 1.0}], 2)
    0.75
    >>> run_final([{"step": 0, "value": 0.9}, {"step": 1, "value": 0.5}, {"step": 2, "value": 1.0}], 3)
    0.75
    """
    pts, _ = final_points(curve, final_window)
    if not pts:
        return NAN
    value = final_performance([float(p["value"]) for p in pts], final_window)
    return round(value, 12) if math.isfinite(value) else value


COUNT_KEYS = {
    "n_completions": "completions",
    "n_episodes": "evaluation episodes",
    "n_problems": "held-out problem reads",
}
"""Keys of a curve point that count what its value is computed from (GRPO's pass rate: the
step's completions; SAC's evaluation: its episodes; GRPO's held-out curve: the problems read).
A point whose ``metric`` is a ``rollout/`` one (SAC with evaluation off) counts training
episodes in a rolling window instead: :data:`TRAINING_EPISODES`."""

TRAINING_EPISODES = "training episodes"
"""The unit of a rolling-window curve (``metric`` ``rollout/...``: SAC's training curve, the
last ``training.metrics_window`` training episodes at each point). Successive windows overlap,
so their ``n_episodes`` are not summed: each distinct episode is counted once."""


MIN_REACH_EPISODES = 10
"""Training episodes a training-curve point's rolling window must hold before the point counts
as reaching the threshold (steps to threshold), or the whole window where
``training.metrics_window`` is smaller: with evaluation off a curve's first points rest on the
first few episodes, and 1 success of 2 is a success rate of 0.5. The same minimum as
``densereward.callbacks.MIN_EPISODES``, below which the verifier's episode rates are null."""


def _is_rolling(pts: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``pts`` are training-curve points with their windows' counts (``metric``
    ``rollout/...`` and ``n_episodes``: :data:`TRAINING_EPISODES`)."""
    return bool(pts) and all(
        str(p.get("metric", "")).startswith("rollout/")
        and isinstance(p.get("n_episodes"), (int, float))
        for p in pts
    )


def reach_min_episodes(curve: Sequence[Mapping[str, Any]]) -> int | None:
    """The training episodes a point of ``curve`` must hold to count as a reach of the
    threshold: :data:`MIN_REACH_EPISODES`, or the window's size where that is smaller (a full
    window: ``n_episodes < n_episodes_total``, it has dropped older episodes); ``None`` for a
    curve of evaluations or completions (each point's count is set by the config, not by how
    far training has got), to which the rule does not apply.

    >>> reach_min_episodes([{"step": 100, "value": 0.5, "metric": "rollout/success_rate",
    ...                      "n_episodes": 4, "n_episodes_total": 6}])
    4
    """
    pts = [p for p in curve or [] if p.get("value") is not None]
    if not _is_rolling(pts):
        return None
    full = [
        int(p["n_episodes"])
        for p in pts
        if isinstance(p.get("n_episodes_total"), (int, float))
        and int(p["n_episodes"]) < int(p["n_episodes_total"])
    ]
    return min(MIN_REACH_EPISODES, max(full)) if full else MIN_REACH_EPISODES


def _steps_to_threshold(
    curve: Sequence[Mapping[str, Any]], threshold: float
) -> tuple[float, int | None, dict[str, Any] | None]:
    """``(steps, n_episodes, set_aside)``: the first step at which ``curve`` reaches
    ``threshold`` (``NaN``: never) among the points that count (:func:`reach_min_episodes`),
    the training episodes that point's window holds (``None`` for other curves), and the first
    reach set aside because its window held fewer (``{"step", "value", "n_episodes"}``), when
    it came before the counted one."""
    need = reach_min_episodes(curve)
    s, v = curve_arrays(curve)
    if need is None or not s.size:
        return (steps_to_threshold(s, v, threshold) if s.size else NAN), None, None
    pts = sorted(
        (p for p in curve if p.get("value") is not None and math.isfinite(float(p["value"]))),
        key=lambda p: float(p["step"]),
    )
    counted = [p for p in pts if int(p["n_episodes"]) >= need]
    reach = next((p for p in counted if float(p["value"]) >= threshold), None)
    early = next((p for p in pts if float(p["value"]) >= threshold), None)
    set_aside = None
    if early is not None and early is not reach and int(early["n_episodes"]) < need:
        set_aside = {
            "step": early["step"],
            "value": float(early["value"]),
            "n_episodes": int(early["n_episodes"]),
        }
    if reach is None:
        return NAN, None, set_aside
    return float(reach["step"]), int(reach["n_episodes"]), set_aside


def _rolling_episodes(pts: Sequence[Mapping[str, Any]]) -> tuple[int, bool]:
    """The distinct training episodes in the rolling windows of ``pts`` (sorted by step), and
    whether that is only a lower bound.

    Point ``i``'s window is the last ``n_episodes`` of the ``n_episodes_total`` episodes finished
    so far, so it adds ``min(n_i, total_i - total_{i-1})`` episodes to those of the earlier
    windows (the rest of it lies inside them). Without ``n_episodes_total`` (runs of earlier
    versions), or where it falls (a resumed run restarts it), the largest window: at least
    that many.
    """
    if all(isinstance(p.get("n_episodes_total"), (int, float)) for p in pts):
        totals = [int(p["n_episodes_total"]) for p in pts]
        if all(b >= a for a, b in itertools.pairwise(totals)):
            n = int(pts[0]["n_episodes"]) + sum(
                min(int(p["n_episodes"]), b - a)
                for p, (a, b) in zip(pts[1:], itertools.pairwise(totals), strict=True)
            )
            return n, False
    return max(int(p["n_episodes"]) for p in pts), True


def final_rests_on(curve: Sequence[Mapping[str, Any]], final_window: int) -> dict[str, Any]:
    """What :func:`run_final` rests on: the last ``final_window`` points of the curve and, where
    the points count them (:data:`COUNT_KEYS`), the completions or episodes behind them: summed
    over the points, except for rolling windows of training episodes (:data:`TRAINING_EPISODES`),
    which overlap and count each distinct episode once.

    Returns:
        ``{"n": count or None, "unit": what n counts or None, "at_least": n is a lower bound,
        "n_points", "text", "steps": the points' steps, "untrained": True when they are step 0
        alone (the untrained policy's evaluation)}``; a step-0 point left out of the window
        (:func:`final_points`) is said in ``text``.

    >>> final_rests_on([{"step": 1, "value": 0.0, "n_completions": 8},
    ...                 {"step": 2, "value": 0.125, "n_completions": 8}], 2)["text"]
    '16 completions of steps 1, 2'
    >>> final_rests_on([{"step": 150, "value": 0.5, "metric": "rollout/success_rate",
    ...                  "n_episodes": 6, "n_episodes_total": 6},
    ...                 {"step": 200, "value": 0.5, "metric": "rollout/success_rate",
    ...                  "n_episodes": 10, "n_episodes_total": 10}], 2)["text"]
    '10 training episodes in the rolling windows (the last 6, 10 episodes) of steps 150, 200'
    >>> final_rests_on([{"step": 100, "value": 0.5}], 3)["text"]
    '1 curve point (step 100)'
    """
    pts, dropped = final_points(curve, final_window)
    steps = [p["step"] for p in pts]
    untrained = bool(pts) and all(float(s) <= 0 for s in steps)
    where = f"step {steps[0]}" if len(steps) == 1 else f"steps {', '.join(map(str, steps))}"
    if untrained:
        where += ": the untrained policy (no later point)"
    elif dropped:
        where += " (step 0, the untrained policy, left out)"
    found = {"steps": steps, "untrained": untrained}
    if _is_rolling(pts):
        n, at_least = _rolling_episodes(pts)
        windows = ", ".join(str(int(p["n_episodes"])) for p in pts)
        text = (
            f"{'at least ' if at_least else ''}{n} {TRAINING_EPISODES} in the rolling "
            f"window{'s' if len(pts) != 1 else ''} (the last {windows} episodes) of {where}"
        )
        return {
            "n": n,
            "unit": TRAINING_EPISODES,
            "at_least": at_least,
            "n_points": len(pts),
            "text": text,
            **found,
        }
    for key, unit in COUNT_KEYS.items():
        if pts and all(isinstance(p.get(key), (int, float)) for p in pts):
            n = int(sum(p[key] for p in pts))
            return {
                "n": n,
                "unit": unit,
                "at_least": False,
                "n_points": len(pts),
                "text": f"{n} {unit} of {where}",
                **found,
            }
    text = f"{len(pts)} curve point{'s' if len(pts) != 1 else ''} ({where})" if pts else "no point"
    return {
        "n": None,
        "unit": None,
        "at_least": False,
        "n_points": len(pts),
        "text": text,
        **found,
    }


def _condition_rests_on(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A condition's final values rest on: the counts of its runs summed (different runs'
    episodes are distinct), the steps (those of every run, or their range where the runs
    differ; "(the untrained policy)" when they are step 0 alone), with the run count; "at
    least" if a run's count is a lower bound.

    >>> _condition_rests_on([final_rests_on([{"step": 0, "value": 0.5}], 3)])["text"]
    '1 curve point of step 0 (the untrained policy) over 1 run'
    """
    k = len(items)
    runs = f"{k} run{'s' if k != 1 else ''}"
    steps: list[Any] = []
    for x in items:  # the runs' own numbers (int steps stay int)
        steps += [s for s in x.get("steps") or [] if s not in steps]
    steps.sort(key=float)
    same = len({tuple(x.get("steps") or []) for x in items}) == 1
    if not steps:
        where = ""
    elif same:
        where = (
            f" of step {steps[0]}" if len(steps) == 1 else f" of steps {', '.join(map(str, steps))}"
        )
    else:
        where = f" of steps {steps[0]} to {steps[-1]}"
    untrained = bool(items) and all(x.get("untrained") for x in items)
    if untrained:
        where += " (the untrained policy)"
    elif any(x.get("untrained") for x in items):
        n_u = sum(bool(x.get("untrained")) for x in items)
        where += f" ({n_u} of the runs: step 0 alone, the untrained policy)"
    found = {"steps": steps, "untrained": untrained, "n_runs": k}
    units = {x["unit"] for x in items}
    if items and len(units) == 1 and None not in units:
        n, unit = sum(int(x["n"]) for x in items), units.pop()
        at_least = any(x.get("at_least") for x in items)
        return {
            "n": n,
            "unit": unit,
            "at_least": at_least,
            **found,
            "text": f"{'at least ' if at_least else ''}{n} {unit}{where} over {runs}",
        }
    pts = sum(int(x["n_points"]) for x in items)
    return {
        "n": None,
        "unit": None,
        "at_least": False,
        **found,
        "text": f"{pts} curve point{'s' if pts != 1 else ''}{where} over {runs}",
    }


def title_of(conditions: Mapping[str, Mapping[str, Any]]) -> str:
    """The conditions that have a finished run, as a title (``"sparse vs dense"``); never one
    that did not run.

    >>> title_of({"sparse": {"n_runs": 1}, "dense": {"n_runs": 1}, "group": {"n_runs": 0}})
    'sparse vs dense'
    """
    return (
        " vs ".join(name for name, c in conditions.items() if c.get("n_runs")) or "no finished run"
    )


ONE_POINT = (
    "; every curve of both has one point, so each run's AUC is its final value: this says "
    "nothing of sample efficiency (more points: a smaller curve interval than the budget)"
)
"""Appended to an AUC verdict whose runs' curves each have one point (``one_point_curves``)."""


def verdict(
    a: str, b: str, poi: Mapping[str, float], *, score: str = "AUC", n_a: int = 2, n_b: int = 2
) -> str:
    """One-line verdict for a pair from P(a > b) and its interval.

    ``a`` beats ``b`` when the interval's lower bound is above 0.5, ``b`` beats ``a`` when
    its upper bound is below 0.5, otherwise there is no significant difference. With fewer
    than :data:`MIN_RUNS_FOR_A_VERDICT` runs (``n_a``, ``n_b``) on a side the bootstrap
    interval is degenerate (two runs that beat two others give ``1.00 [1.00, 1.00]``): no
    verdict; from 2 runs a side the point estimate is given as descriptive, with its run
    counts and no interval, so that none is read as a result.

    >>> verdict("dense", "sparse", {"value": 0.89, "low": 0.67, "high": 1.0}, n_a=5, n_b=5)
    'dense beats sparse (AUC): P(dense > sparse) = 0.89 [0.67, 1.00]'
    >>> verdict("dense", "sparse", {"value": 0.5, "low": 0.2, "high": 0.8}, n_a=4, n_b=4)
    'no significant difference between dense and sparse (AUC): P(dense > sparse) = 0.50 [0.20, 0.80]'
    >>> verdict("sparse", "dense", {"value": 1.0, "low": 1.0, "high": 1.0}, n_a=1, n_b=1)
    'too few runs for a verdict between sparse and dense (AUC): 1 and 1 finished, >= 4 each needed'
    >>> verdict("sparse", "dense", {"value": 0.75, "low": 0.5, "high": 1.0}, n_a=2, n_b=2)
    'too few runs for a verdict between sparse and dense (AUC): 2 and 2 finished, >= 4 each needed; descriptive only: P(sparse > dense) = 0.75 over 2 vs 2 runs'
    """
    p, lo, hi = poi.get("value", NAN), poi.get("low", NAN), poi.get("high", NAN)
    if min(n_a, n_b) < MIN_RUNS_FOR_A_VERDICT:
        few = (
            f"too few runs for a verdict between {a} and {b} ({score}): {n_a} and {n_b} "
            f"finished, >= {MIN_RUNS_FOR_A_VERDICT} each needed"
        )
        if min(n_a, n_b) >= 2 and math.isfinite(p):  # one run each: P is one comparison
            few += (
                f"; descriptive only: P({a} > {b}) = {format_number(p, 2)} over {n_a} vs {n_b} runs"
            )
        return few
    stat = f"P({a} > {b}) = {format_number(p, 2)} [{format_number(lo, 2)}, {format_number(hi, 2)}]"
    if not all(map(math.isfinite, (p, lo, hi))):
        return f"not comparable ({score}: a condition has no finished run with a curve): {stat}"
    if lo > 0.5:
        return f"{a} beats {b} ({score}): {stat}"
    if hi < 0.5:
        return f"{b} beats {a} ({score}): {stat}"
    return f"no significant difference between {a} and {b} ({score}): {stat}"


def console_verdict(pair: Mapping[str, Any]) -> str:
    """The verdict of a pair as the console prints it: with the runs it rests on. Below
    :data:`MIN_RUNS_FOR_A_VERDICT` a side the line is the "too few runs" one, which has its
    counts already (the report and ``results.json`` say the same).

    The final-performance P follows an AUC verdict, as in the report (:func:`final_also`).

    >>> console_verdict({"verdict": "a beats b (AUC): P(a > b) = 0.95 [0.80, 1.00]",
    ...                  "n_runs": [5, 5], "enough_runs": True})
    'a beats b (AUC): P(a > b) = 0.95 [0.80, 1.00] (5 vs 5 runs)'
    """
    n = pair.get("n_runs")
    if not n or not pair.get("enough_runs", True):  # the line already says too few, with counts
        return f"{pair['verdict']}{final_also(pair)}"
    return f"{pair['verdict']} ({n[0]} vs {n[1]} runs){final_also(pair)}"


def _descriptive_final(pair: Mapping[str, Any]) -> str:
    """What follows a "too few runs" verdict that gives its P as descriptive (2 runs a side or
    more) when its score is not final performance: the final P likewise, without an interval
    (``""`` otherwise). Part of the verdict itself (``results.json`` too).

    >>> _descriptive_final({"a": "x", "b": "y", "score": "auc", "n_runs": [2, 3],
    ...                     "p_improvement": {"final": {"value": 0.75, "low": 0.5, "high": 1.0}}})
    '; final performance (descriptive only): P(x > y) = 0.75'
    """
    final = (pair.get("p_improvement") or {}).get("final")
    if pair.get("score") == "final" or not final or min(pair.get("n_runs") or [0]) < 2:
        return ""
    if not math.isfinite(final.get("value", NAN)):
        return ""
    return (
        f"; final performance (descriptive only): P({pair['a']} > {pair['b']}) = "
        f"{format_number(final['value'], 2)}"
    )


def final_also(pair: Mapping[str, Any]) -> str:
    """What follows a pair's verdict when its score is not final performance: the
    final-performance P, shown beside it without a verdict (``""`` for a verdict on final
    performance, one without enough runs, whose verdict carries its descriptive final P
    itself (:func:`_descriptive_final`), curves that are not comparable, or a pair without
    that P)."""
    final = (pair.get("p_improvement") or {}).get("final")
    if pair.get("score") == "final" or not final or pair.get("not_comparable"):
        return ""  # not comparable: no P of either score is shown
    if not pair.get("enough_runs", True):
        return ""
    return (
        f"; final performance (shown, not the verdict's score: primary={pair['score']}): "
        f"P({pair['a']} > {pair['b']}) = {_ci_text(final, 2)}"
    )


def analyze(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    budget: float,
    threshold: float | None = None,
    final_window: int = 3,
    grid_points: int = 51,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    primary: str = "auc",
    not_comparable: str | None = None,
) -> dict[str, Any]:
    """Statistics of a comparison from its per-run results.

    Args:
        runs: condition -> list of run results, each with ``seed`` and ``curve``
            (``[{"step", "value"}]``, steps in the budget's unit).
        budget: training budget (environment steps or GRPO steps) = the grid's right end.
        threshold: level for steps-to-threshold; ``None`` skips it.
        final_window: evaluations averaged into final performance.
        grid_points: points of the common grid on ``[0, budget]``.
        n_bootstrap: bootstrap replicates.
        confidence: coverage of every CI, in ``(0, 1)``.
        seed: RNG seed (every CI uses it).
        primary: ``auc`` or ``final``, the score of the pairwise verdicts.
        not_comparable: why the conditions' curves are not on one scale (e.g. each run's
            training reward, shaped under the verifier); every pair then gets "not comparable:
            <why>" and ``enough_runs`` False instead of a verdict.

    Returns:
        ``{"grid": (G,), "conditions": {name: {"runs": [...], "final": ci, "auc": ci,
        "steps_to_threshold": {...}, "curve": {"mean", "low", "high"}, "measured_steps":
        [steps at which any run has a point]}}, "pairs": [...]}``;
        each pair ``{"a", "b", "score", "p_improvement", "enough_runs", "verdict"}``, where
        ``enough_runs`` is False when a side has fewer than :data:`MIN_RUNS_FOR_A_VERDICT`
        finished runs (its ``p_improvement`` is then no result: the report leaves it out);
        ``"coinciding"``: groups of conditions with identical mean curves, each
        ``{"conditions": [...], "same_runs": every seed's curve the same}`` (the report and the
        plot say so: one line would lie under the other).
    """
    grid = np.linspace(0.0, float(budget), grid_points)
    kw = {"n_bootstrap": n_bootstrap, "confidence": confidence, "seed": seed}
    conditions: dict[str, Any] = {}
    for name, results in runs.items():
        per_run = []
        rows = []
        for r in results:
            s, v = curve_arrays(r.get("curve") or [])
            reach = (
                _steps_to_threshold(r.get("curve") or [], threshold)
                if threshold is not None
                else (NAN, None, None)
            )
            item = {
                "seed": r.get("seed"),
                "final": run_final(r.get("curve") or [], final_window),
                "final_rests_on": final_rests_on(r.get("curve") or [], final_window),
                "first_step": float(s[0]) if s.size else None,
                "auc": normalized_auc(s, v, budget, grid_points=grid_points) if s.size else NAN,
                "steps_to_threshold": reach[0],
                # the training episodes the counted reach rests on (training curves only)
                "steps_to_threshold_n_episodes": reach[1],
                "min_reach_episodes": reach_min_episodes(r.get("curve") or []),
                "reach_set_aside": reach[2],
                "n_points": int(s.size),
                "wall_s": r.get("wall_s"),
                **step_cost(r.get("summary") or {}),
                "run_dir": r.get("run_dir"),
            }
            per_run.append(item)
            if s.size:
                rows.append(resample_curve(s, v, grid))
        finals = [x["final"] for x in per_run]
        measured = sorted({float(p["step"]) for r in results for p in r.get("curve") or []})
        aucs = [x["auc"] for x in per_run]
        entry: dict[str, Any] = {
            "n_runs": len(per_run),
            "runs": per_run,
            "final": iqm_ci(finals, **kw),
            "final_rests_on": _condition_rests_on([x["final_rests_on"] for x in per_run]),
            "auc": iqm_ci(aucs, **kw),
            "measured_steps": measured,  # where any of its runs has a point
        }
        if threshold is not None:
            sts = np.array([x["steps_to_threshold"] for x in per_run], dtype=float)
            reached = np.isfinite(sts)
            median = float(np.median(np.where(reached, sts, np.inf))) if sts.size else NAN
            entry["steps_to_threshold"] = {
                "threshold": threshold,
                "median": median if math.isfinite(median) else None,
                "n_reached": int(reached.sum()),
                "n_runs": int(sts.size),
                "per_seed": {
                    str(x["seed"]): (
                        None
                        if not math.isfinite(x["steps_to_threshold"])
                        else x["steps_to_threshold"]
                    )
                    for x in per_run
                },
                # training curves: the episodes a point's window needs to count as a reach
                "min_episodes": max(needs) if (needs := _needs(per_run)) else None,
                "set_aside": [
                    {"seed": x["seed"], **x["reach_set_aside"]}
                    for x in per_run
                    if x["reach_set_aside"] is not None
                ],
            }
        if rows:
            mean, low, high = mean_curve_ci(np.stack(rows), **kw)
            entry["curve"] = {"mean": mean, "low": low, "high": high}
        else:
            entry["curve"] = None
        conditions[name] = entry
    coinciding = _coinciding(runs, conditions)
    pairs = []
    for a, b in itertools.combinations(list(conditions), 2):
        pa = {k: [x[k] for x in conditions[a]["runs"]] for k in ("auc", "final")}
        pb = {k: [x[k] for x in conditions[b]["runs"]] for k in ("auc", "final")}
        poi = {k: probability_of_improvement_ci(pa[k], pb[k], **kw) for k in ("auc", "final")}
        # orient each pair so the condition with the larger primary score comes first
        if math.isfinite(poi[primary]["value"]) and poi[primary]["value"] < 0.5:
            a, b = b, a
            poi = {
                k: {
                    "value": 1 - v["value"],
                    "low": 1 - v["high"],
                    "high": 1 - v["low"],
                    "n_runs": len(pb[k]),
                }
                for k, v in poi.items()
            }
        n_a = int(np.isfinite([x[primary] for x in conditions[a]["runs"]]).sum())
        n_b = int(np.isfinite([x[primary] for x in conditions[b]["runs"]]).sum())
        score = "AUC" if primary == "auc" else "final performance"
        if not_comparable:
            pairs.append(
                {
                    "a": a,
                    "b": b,
                    "score": primary,
                    "p_improvement": poi,
                    "enough_runs": False,
                    "n_runs": [n_a, n_b],
                    "not_comparable": not_comparable,
                    "verdict": f"no verdict between {a} and {b} ({score}): {not_comparable}",
                }
            )
            continue
        # one point a curve: its AUC (held over the budget) is its final value, so a verdict
        # on AUC says nothing of sample efficiency (rerun 15 F2)
        one_point = primary == "auc" and all(
            int(x["n_points"]) <= 1 for c in (a, b) for x in conditions[c]["runs"]
        )
        pairs.append(
            {
                "a": a,
                "b": b,
                "score": primary,
                "p_improvement": poi,
                # below it P is a count of one comparison, not an estimate (kept for the record)
                "enough_runs": min(n_a, n_b) >= MIN_RUNS_FOR_A_VERDICT,
                "n_runs": [n_a, n_b],  # the finished runs a side the verdict rests on
                "verdict": verdict(
                    a,
                    b,
                    poi[primary],
                    score="AUC" if primary == "auc" else "final performance",
                    n_a=n_a,
                    n_b=n_b,
                )
                + (ONE_POINT if one_point else ""),
                **({"one_point_curves": True} if one_point else {}),
            }
        )
        if not pairs[-1]["enough_runs"]:  # its descriptive final P is part of the line itself
            pairs[-1]["verdict"] += _descriptive_final(pairs[-1])
    return {"grid": grid, "conditions": conditions, "pairs": pairs, "coinciding": coinciding}


def _needs(per_run: Sequence[Mapping[str, Any]]) -> list[int]:
    """The runs' :func:`reach_min_episodes` (training curves only)."""
    return [int(x["min_reach_episodes"]) for x in per_run if x.get("min_reach_episodes")]


def reach_note(conditions: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The one sentence on the reaches of the threshold that :func:`analyze` set aside because
    their training-curve window held fewer than :data:`MIN_REACH_EPISODES` episodes (``None``
    when none was): said in the console, ``report.md`` and ``results.json``
    (``steps_to_threshold_note``)."""
    found = [
        (name, x)
        for name, c in conditions.items()
        for x in (c.get("steps_to_threshold") or {}).get("set_aside") or []
    ]
    if not found:
        return None
    needs = sorted(
        {
            int(c["steps_to_threshold"]["min_episodes"])
            for c in conditions.values()
            if (c.get("steps_to_threshold") or {}).get("min_episodes")
        }
    )
    k = len(found)
    where = "; ".join(
        f"{name} seed {x['seed']} at step {x['step']} ({x['value']:.3g} on "
        f"{x['n_episodes']} episode{'s' if x['n_episodes'] != 1 else ''})"
        for name, x in found
    )
    return (
        f"Steps to threshold: {k} reach{'es' if k != 1 else ''} on a rolling window of fewer "
        f"than {'/'.join(map(str, needs))} training episodes not counted: {where}. With "
        "evaluation off the curve's first points rest on the first few training episodes "
        f"(MIN_REACH_EPISODES = {MIN_REACH_EPISODES}, or the whole window where "
        "training.metrics_window is smaller); turn evaluation on (training.eval_every) for "
        "points that each rest on training.eval_episodes episodes."
    )


def _coinciding(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], conditions: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Groups of conditions whose mean curves are identical on the grid (one line would hide
    the other in the plot), each ``{"conditions": [names in order], "same_runs": every seed's
    curve is the same in each of them}``."""

    def curve_of(r: Mapping[str, Any]) -> list[tuple[float, float]]:
        return [(float(p["step"]), float(p["value"])) for p in r.get("curve") or []]

    groups: list[list[str]] = []
    for name, c in conditions.items():
        if c.get("curve") is None:
            continue
        mean = np.asarray(c["curve"]["mean"], dtype=float)
        for g in groups:
            if np.allclose(mean, conditions[g[0]]["curve"]["mean"], rtol=0.0, atol=1e-12):
                g.append(name)
                break
        else:
            groups.append([name])
    found = []
    for g in (g for g in groups if len(g) > 1):
        by_seed = [{r.get("seed"): curve_of(r) for r in runs[name]} for name in g]
        found.append({"conditions": g, "same_runs": all(x == by_seed[0] for x in by_seed[1:])})
    return found


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _ci_text(ci: Mapping[str, float], digits: int = 3, n: int | None = None) -> str:
    """``value [low, high]``; with ``n`` (the runs it rests on) below 2, ``value (n=1: no
    interval)``: a bootstrap of one run is that run, ``[v, v]`` read as certainty.

    >>> _ci_text({"value": 0.0, "low": 0.0, "high": 0.0}, n=1)
    '0.000 (n=1: no interval)'
    """
    if n is not None and n < 2:
        return f"{format_number(ci['value'], digits)} (n={n}: no interval)"
    lo, hi = format_number(ci["low"], digits), format_number(ci["high"], digits)
    return f"{format_number(ci['value'], digits)} [{lo}, {hi}]"


def curve_points_are(run_metrics: Iterable[str]) -> str:
    """What the points of curves of ``run_metrics`` are, as the report names them:
    ``"evaluations"`` (``eval/``, ``heldout/``: measured apart from training),
    ``"training-curve points"`` (``rollout/``: rolling windows of training episodes;
    ``verifier/``: GRPO's training batches), else ``"curve points"``.

    >>> curve_points_are({"rollout/success_rate"}), curve_points_are({"eval/success_rate"})
    ('training-curve points', 'evaluations')
    """
    kinds = {
        "evaluations"
        if m.startswith(("eval/", "heldout/"))
        else "training-curve points"
        if m.startswith(("rollout/", "verifier/"))
        else "curve points"
        for m in run_metrics
    }
    return kinds.pop() if len(kinds) == 1 else "curve points"


def _primary_words(analysis: Mapping[str, Any]) -> str:
    """The verdicts' score in words, from the analysis' pairs (``"auc: the area under the
    learning curve"``)."""
    score = next((p["score"] for p in analysis.get("pairs", [])), "auc")
    return {
        "auc": "auc: the area under the learning curve",
        "final": "final: final performance",
    }.get(score, score)


def render_report(
    analysis: Mapping[str, Any],
    *,
    name: str,
    trainer: str,
    metric: str,
    budget: float,
    seeds: Sequence[int],
    x_label: str,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    final_window: int = 3,
    wall_s: float | None = None,
    missing: Sequence[str] = (),
    curve_sources: Sequence[str] = (),
    notes: Sequence[str] = (),
    run_metrics: Iterable[str] = (),
) -> str:
    """Markdown report: one table row per condition and one verdict line per pair.

    ``curve_sources``: what the runs' learning curves measure, as the trainers state it
    (``summary["curve_source"]``, e.g. SAC's deterministic evaluation episodes); each distinct
    one is named in the report's header and Method section. ``run_metrics``: the runs' curve
    metrics (``result["metric"]``); they name the curves' points in the Method section
    (:func:`curve_points_are`: an evaluation-off SAC run's are training-curve points).
    """
    points = curve_points_are(run_metrics)
    point = {"evaluations": "evaluation"}.get(points, points[:-1])
    pct = f"{round(confidence * 100)}%"
    headers = [
        "condition",
        "runs",
        f"final {metric} IQM [{pct} CI]",
        "final rests on",
        f"AUC IQM [{pct} CI]",
        "steps to threshold (median; reached)",
        "wall s / run",
    ]
    rows = []
    for cname, c in analysis["conditions"].items():
        st = c.get("steps_to_threshold")
        if st is None:
            st_txt = "n/a"
        else:
            med = "not reached" if st["median"] is None else f"{st['median']:.0f}"
            on = (
                f" on windows of >= {st['min_episodes']} {TRAINING_EPISODES}"
                if st.get("min_episodes")
                else ""
            )
            st_txt = f"{med} ({st['n_reached']}/{st['n_runs']} reached >= {st['threshold']:g}{on})"
        walls = [r["wall_s"] for r in c["runs"] if r.get("wall_s") is not None]
        wall = f"{np.mean(walls):.0f}" if walls else "n/a"
        rows.append(
            [
                cname,
                str(c["n_runs"]),
                _ci_text(c["final"], n=c["n_runs"]),
                (c.get("final_rests_on") or {}).get("text", "n/a"),
                _ci_text(c["auc"], n=c["n_runs"]),
                st_txt,
                wall,
            ]
        )
        costs = [r for r in c["runs"] if r.get("ms_per_step") is not None]
        if costs:
            rows[-1].append(
                f"{np.mean([r['ms_per_step'] for r in costs]):.1f} "
                f"({100 * np.mean([r['reward_share'] for r in costs]):.1f} %)"
            )
    if any(len(r) == len(headers) + 1 for r in rows):
        headers.append("ms / env step (reward's share)")
        rows = [r if len(r) == len(headers) else [*r, "n/a"] for r in rows]
    not_run = [c for c, v in analysis["conditions"].items() if not v.get("n_runs")]
    lines = [
        f"# Comparison: {title_of(analysis['conditions'])}",
        "",
        f"Comparison `{name}`"
        + (f"; no finished run of {', '.join(not_run)}" if not_run else "")
        + f". Trainer `{trainer}`, metric `{metric}`, budget {int(budget)} {x_label} per run, "
        f"seeds {list(seeds)}."
        + (f" Total wall time {wall_s / 60:.1f} min." if wall_s is not None else ""),
        *[f"Learning curves: {src}." for src in curve_sources],
        *[f"\n{note}" for note in notes],
        "",
        markdown_table(headers, rows),
    ]
    lines += ["", "## Verdicts", ""]
    for p in analysis["pairs"]:
        lines.append(f"- {p['verdict']}{final_also(p)}")
    if missing:
        lines += ["", f"**Incomplete:** {len(missing)} run(s) not finished: {', '.join(missing)}."]
    n_min = min((c["n_runs"] for c in analysis["conditions"].values()), default=0)
    if 0 < n_min < MIN_RUNS_FOR_A_VERDICT:
        lines += [
            "",
            f"**Too few runs for a verdict:** {n_min} per condition, and a verdict needs "
            f">= {MIN_RUNS_FOR_A_VERDICT} a side (below that no ordering of the runs is "
            "significant at 5 %, and two runs that beat two others give P = 1.00 [1.00, 1.00]); "
            "add seeds (`--seeds`). The numbers above describe these runs only.",
        ]
    for group in analysis.get("coinciding") or []:
        names = group["conditions"]
        lines += [
            "",
            f"**Coinciding curves:** {_names(names)} coincide (identical mean curves"
            + (
                "; every seed's curve the same: the difference between their rewards changed "
                "no measured value"
                if group["same_runs"]
                else ""
            )
            + f"). In the plot {_names(names[1:])} {'is' if len(names) == 2 else 'are'} drawn "
            f"dashed over {names[0]}.",
        ]
    short = sorted(
        {
            cname
            for cname, c in analysis["conditions"].items()
            for r in c["runs"]
            if 0 < int(r.get("n_points") or 0) < 3
        }
    )
    if short:
        lines += [
            "",
            f"**Short curves:** some runs of {', '.join(short)} have fewer than 3 {points}; "
            "the budget may be too small to learn anything (e.g. below SAC's "
            "`learning_starts`), or the curve interval too large.",
        ]
    lines += [
        "",
        "![learning curves](learning_curves.png)",
        "",
        "## Method",
        "",
        *[f"- Curve (`{metric}`): {src}." for src in curve_sources],
        f"- Final performance: mean of the last {final_window} points (`final_window`) of each "
        f"run's `{metric}` curve, fewer where a curve has fewer: a step-0 point (the untrained "
        "policy) is left out when a later point exists, and a run "
        "with only a step-0 point rests on the untrained policy, which the table says "
        '("final rests on": the steps of those points and the completions or episodes behind '
        "them, where the curve counts them, summed over the condition's runs"
        + (
            "; a training curve's points are rolling windows over the last training episodes, "
            "which overlap: each distinct episode counted once). "
            if any(
                (r.get("final_rests_on") or {}).get("unit") == TRAINING_EPISODES
                for c in analysis["conditions"].values()
                for r in c["runs"]
            )
            else "). "
        )
        + f"AUC: area under the curve on [0, {int(budget)}] {x_label} (trapezoid on a common grid, "
        f"the first value held before the first {point}) divided by the budget, i.e. the mean "
        "performance over training; higher = learns faster.",
        "- IQM: interquartile mean over runs (25%-trimmed mean, `rliable.metrics.aggregate_iqm`); "
        "with fewer than 4 runs it equals the mean. "
        f"CIs: {pct} percentile stratified bootstrap over runs, {n_bootstrap} replicates "
        "(`rliable.library.get_interval_estimates`; Agarwal et al. 2021). With few seeds the intervals are wide, and with fewer than about 5 runs per condition still too narrow: a percentile bootstrap cannot show more spread than the runs have.",
        "- P(X > Y): probability of improvement (Mann-Whitney U / (n_x n_y), ties count 1/2, "
        "`rliable.metrics.probability_of_improvement`) with rliable's independent stratified "
        "bootstrap (`StratifiedIndependentBootstrap`); "
        f"X beats Y when the CI's lower bound is above 0.5, given at least {MIN_RUNS_FOR_A_VERDICT} "
        "runs a side (with fewer no ordering of the runs is significant at 5 %: no verdict). "
        f"The verdict is on one score, the comparison's `primary` ({_primary_words(analysis)}); "
        "the other score's P is shown beside it, without a verdict.",
        f"- Steps to threshold: the first {point} at or above the threshold; the median counts "
        "runs that never reached it as infinite."
        + (
            " On a training curve (rolling windows of training episodes, evaluation off) a "
            "training-curve point counts only when its rolling window holds at least "
            f"MIN_REACH_EPISODES = {MIN_REACH_EPISODES} training episodes, or the whole window "
            "where `training.metrics_window` is smaller: the first points rest on the first "
            "few episodes (1 success of 2 is 0.5)."
            if any(
                (c.get("steps_to_threshold") or {}).get("min_episodes")
                for c in analysis["conditions"].values()
            )
            else ""
        ),
        "- ms / env step (SAC): training wall time per environment step (evaluation excluded), "
        "mean over runs; the reward's share is the time inside the verifier or the distilled "
        "reward model. Runs on a shared machine: compare the arms of one comparison, not machines.",
        "",
    ]
    return "\n".join(lines)


def plot_curves(
    analysis: Mapping[str, Any],
    path: Path,
    *,
    metric: str,
    x_label: str,
    threshold: float | None,
    title: str,
    confidence: float = 0.95,
) -> Path:
    """Mean learning curve with its bootstrap band per condition (PNG, written atomically).

    A condition whose runs have at most :data:`MAX_POINTS_MARKED` points each is marked at its
    measured steps; conditions with identical mean curves (``analysis["coinciding"]``) are said
    to coincide in the title and the later ones drawn dashed (markers ``x``) over the first, so
    none hides under another; each later solid line is drawn thinner than the ones before it,
    so a stretch where two curves meet shows both colours (a later line leaves the earlier
    one's edges visible); a plot with a condition of fewer than :data:`MIN_RUNS_FOR_A_VERDICT` runs
    carries a red "too few runs for a verdict" banner (the console and the report say the same).
    Needs matplotlib (``pip install densereward[plots]``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.asarray(analysis["grid"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    banded, single, held, marked, few = [], [], [], [], []
    under = {  # a condition whose curve equals an earlier one's: drawn dashed over it
        name: g["conditions"][0]
        for g in analysis.get("coinciding") or []
        for name in g["conditions"][1:]
    }
    n_solid = 0  # solid lines drawn so far: each later one thinner (rerun 13 F3)
    for cname, c in analysis["conditions"].items():
        if c.get("curve") is None:
            continue
        mean = np.asarray(c["curve"]["mean"])
        rests = (c.get("final_rests_on") or {}).get("text")
        label = f"{cname} (n={c['n_runs']}" + (f"; final: {rests})" if rests else ")")
        firsts = [r["first_step"] for r in c["runs"] if r.get("first_step") is not None]
        first = max(firsts, default=0.0)  # before it some run's value is held, not measured
        measured = grid >= first
        (line,) = ax.plot(
            grid[measured],
            mean[measured],
            label=label,
            linestyle="--" if cname in under else "-",
            linewidth=1.5 if cname in under else max(1.2, 4.0 - 1.3 * n_solid),
        )
        n_solid += cname not in under
        if (
            0
            < max((int(r.get("n_points") or 0) for r in c["runs"]), default=0)
            <= (MAX_POINTS_MARKED)
        ):
            at = np.array(
                [x for x in c.get("measured_steps") or [] if grid[0] <= x <= grid[-1]], dtype=float
            )
            marked.append(cname)
            ax.plot(
                at,
                np.interp(at, grid, mean),
                "x" if cname in under else "o",
                color=line.get_color(),
                markersize=6 if cname in under else line.get_linewidth() + 3,
            )
        if 0 < c["n_runs"] < MIN_RUNS_FOR_A_VERDICT:
            few.append(f"{cname} n={c['n_runs']}")
        if first > grid[0]:
            held.append(cname)
            upto = grid <= first
            ax.plot(grid[upto], mean[upto], color=line.get_color(), linestyle=":")
        if c["n_runs"] < 2:  # a bootstrap band of one run is the run itself: no interval
            single.append(cname)
            continue
        banded.append(cname)
        ax.fill_between(
            grid,
            c["curve"]["low"],
            c["curve"]["high"],
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
    if threshold is not None:
        ax.axhline(
            threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold:g}"
        )
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric)
    band = f"band: {round(confidence * 100)}% bootstrap CI of the mean"
    if single:
        band = (f"{band} (runs >= 2); " if banded else "") + (
            f"no band for {', '.join(single)} (n=1: no interval)"
        )
    note = "\ndotted: before the first measurement (the first value held)" if held else ""
    if marked:
        note += "\nmarkers: the steps at which runs were measured (the line joins them)"
    for g in analysis.get("coinciding") or []:  # fresh-user trial F7: one line hid another
        names = g["conditions"]
        note += (
            f"\n{_names(names)} coincide (identical curves): {_names(names[1:])} dashed over "
            f"{names[0]}"
        )
    ax.set_title(f"{title}\nline: mean over seeds; {band}{note}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    if few:  # the verdict rule's banner, in the eval-verifier plots' style
        import textwrap

        fig.suptitle(
            textwrap.fill(
                f"too few runs for a verdict (n < MIN_RUNS_FOR_A_VERDICT = "
                f"{MIN_RUNS_FOR_A_VERDICT} a side): {', '.join(few)}; the lines and bands "
                "describe these runs only",
                90,
            ),
            y=1.0,
            va="bottom",
            color="tab:red",
            fontweight="bold",
            fontsize=9,
        )
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
    return path
