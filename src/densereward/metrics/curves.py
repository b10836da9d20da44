"""Learning-curve statistics: sample efficiency over seeds (Agarwal et al. 2021).

Pure functions on learning curves -- evaluation steps ``(T,)`` and metric values ``(T,)`` per
run -- and on per-run scores: steps to a threshold, the normalised area under the curve,
final performance, the interquartile mean (IQM) and the probability of improvement with
stratified-bootstrap intervals (rliable; "Deep RL at the Edge of the Statistical Precipice",
NeurIPS 2021), and the mean curve over seeds with a bootstrap band.

Every interval comes from :mod:`densereward.metrics.bootstrap`: IQM and probability of
improvement from rliable's stratified bootstrap over runs (:func:`stratified_bootstrap_ci`),
the curve band from the cluster bootstrap with one run per cluster (:func:`cluster_resamples`).
The IQM and probability-of-improvement functions need ``rliable``
(``pip install densereward[compare]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DataError
from .bootstrap import cluster_resamples, rliable_modules, stratified_bootstrap_ci

__all__ = [
    "curve_arrays",
    "final_performance",
    "iqm_ci",
    "mean_curve_ci",
    "normalized_auc",
    "probability_of_improvement_ci",
    "resample_curve",
    "steps_to_threshold",
]

NAN = float("nan")


def curve_arrays(curve: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """A learning curve ``[{"step", "value"}, ...]`` as sorted ``(steps, values)`` arrays.

    Points whose value is ``None`` or not finite are dropped (an evaluation that produced no
    number is not a point of the curve).

    Returns:
        ``(steps, values)``, each of shape ``(T,)``, sorted by step; ``T = 0`` when no point
        is left.

    >>> curve_arrays([{"step": 20, "value": 1.0}, {"step": 10, "value": None},
    ...               {"step": 0, "value": 0.5}])
    (array([ 0., 20.]), array([0.5, 1. ]))
    """
    pts = sorted(
        (float(p["step"]), float(p["value"]))
        for p in curve
        if p.get("value") is not None and math.isfinite(float(p["value"]))
    )
    if not pts:
        return np.zeros(0), np.zeros(0)
    steps, values = (np.asarray(x, dtype=float) for x in zip(*pts, strict=True))
    return steps, values


def steps_to_threshold(steps: Sequence[float], values: Sequence[float], threshold: float) -> float:
    """First step at which the learning curve reaches ``threshold``.

    Args:
        steps: evaluation steps, shape ``(T,)`` (environment steps or GRPO steps), increasing.
        values: the metric at each step, shape ``(T,)``.
        threshold: the level to reach (``value >= threshold``).

    Returns:
        The step (same unit as ``steps``), or ``NaN`` when the curve never reaches it.

    Raises:
        DataError: if the shapes differ.

    >>> steps_to_threshold([100, 200, 300], [0.1, 0.85, 0.9], 0.8)
    200.0
    >>> steps_to_threshold([100, 200], [0.1, 0.2], 0.8)
    nan
    """
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if s.shape != v.shape or s.ndim != 1:
        raise DataError(
            f"steps and values must be 1-D of equal length, got {s.shape} and {v.shape}"
        )
    hit = np.flatnonzero(v >= threshold)
    return float(s[hit[0]]) if hit.size else NAN


def resample_curve(
    steps: Sequence[float], values: Sequence[float], grid: Sequence[float]
) -> np.ndarray:
    """Linear interpolation of a learning curve onto a common step grid.

    Before the first evaluation the first value is held, after the last the last value is
    held (``np.interp``): no run is extrapolated beyond what it measured.

    Args:
        steps: evaluation steps, shape ``(T,)``, T >= 1, increasing.
        values: metric values, shape ``(T,)``.
        grid: target steps, shape ``(G,)``.

    Returns:
        Values on the grid, shape ``(G,)``.

    Raises:
        DataError: for an empty curve or mismatched shapes.

    >>> resample_curve([0, 10], [0.0, 1.0], [0, 5, 10, 20]).tolist()
    [0.0, 0.5, 1.0, 1.0]
    """
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if s.size == 0 or s.shape != v.shape:
        raise DataError(
            f"a learning curve needs >= 1 point and equal shapes, got {s.shape} and {v.shape}"
        )
    return np.interp(np.asarray(grid, dtype=float), s, v)


def normalized_auc(
    steps: Sequence[float], values: Sequence[float], budget: float, *, grid_points: int = 51
) -> float:
    """Area under the learning curve on ``[0, budget]``, divided by ``budget``.

    ``AUC = (1 / budget) * integral_0^budget f(t) dt`` by the trapezoid rule on ``grid_points``
    equally spaced steps (the curve resampled with :func:`resample_curve`). It is the mean
    performance over training, in the metric's unit (``[0, 1]`` for success and pass rates):
    a curve that rises earlier has a larger AUC, the usual sample-efficiency summary.

    Args:
        steps: evaluation steps, shape ``(T,)``.
        values: metric values, shape ``(T,)``.
        budget: the training budget (same unit as ``steps``), > 0.
        grid_points: resolution of the grid, >= 2.

    Returns:
        The normalised area; ``NaN`` for an empty curve.

    Raises:
        DataError: if ``budget <= 0`` or ``grid_points < 2``.

    >>> round(normalized_auc([0, 100], [0.0, 1.0], 100), 6)
    0.5
    """
    if budget <= 0 or grid_points < 2:
        raise DataError(f"budget must be > 0 and grid_points >= 2, got {budget} and {grid_points}")
    if len(steps) == 0:
        return NAN
    grid = np.linspace(0.0, float(budget), grid_points)
    y = resample_curve(steps, values, grid)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(grid)) / 2.0 / float(budget))


def final_performance(values: Sequence[float], window: int = 3) -> float:
    """Mean of the last ``window`` evaluations of a learning curve (``NaN`` if empty).

    Args:
        values: metric values in step order, shape ``(T,)``.
        window: evaluations averaged, >= 1 (all of them when ``T < window``).

    Raises:
        DataError: if ``window < 1``.

    >>> final_performance([0.0, 0.5, 0.7, 0.9], window=2)
    0.8
    """
    v = np.asarray(values, dtype=float)
    if window < 1:
        raise DataError(f"window must be >= 1, got {window}")
    return float(np.mean(v[-window:])) if v.size else NAN


def iqm_ci(
    scores: Sequence[float], *, n_bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Interquartile mean of per-run scores with a stratified-bootstrap interval.

    IQM = mean of the middle 50% of runs (``rliable.metrics.aggregate_iqm``, a 25%-trimmed
    mean; Agarwal et al. 2021, Sec. 4.1). With fewer than 4 runs nothing is trimmed and the
    IQM equals the mean. Non-finite scores (e.g. a run without a curve) are dropped. The
    interval: :func:`~densereward.metrics.bootstrap.stratified_bootstrap_ci`.

    Args:
        scores: one score per run, shape ``(n_runs,)``.
        n_bootstrap: bootstrap replicates.
        confidence: coverage in ``(0, 1)``.
        seed: RNG seed.

    Returns:
        ``{"value", "low", "high", "n_runs"}``; all ``NaN`` (``n_runs`` 0) when no score is finite.

    Raises:
        DataError: for bad bootstrap parameters.
        ImportError: without rliable (``pip install densereward[compare]``).

    >>> r = iqm_ci([0.2, 0.4, 0.6, 0.8], n_bootstrap=200)
    >>> round(r["value"], 3), r["low"] <= r["value"] <= r["high"]
    (0.5, True)
    """
    _, rl_metrics = rliable_modules()

    x = np.asarray(scores, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"value": NAN, "low": NAN, "high": NAN, "n_runs": 0}
    return stratified_bootstrap_ci(
        rl_metrics.aggregate_iqm,
        x[:, None],
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        seed=seed,
    )


def probability_of_improvement_ci(
    x: Sequence[float],
    y: Sequence[float],
    *,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """P(X > Y): probability that a run of X scores higher than a run of Y, with a CI.

    The Mann-Whitney U statistic divided by ``n_x * n_y``, ties counting one half
    (``rliable.metrics.probability_of_improvement``; Agarwal et al. 2021, Sec. 4.3), with a
    stratified bootstrap that resamples the runs of X and of Y independently.

    Args:
        x: scores of condition X, shape ``(n_x,)``; non-finite values are dropped.
        y: scores of condition Y, shape ``(n_y,)``.
        n_bootstrap: bootstrap replicates.
        confidence: coverage in ``(0, 1)``.
        seed: RNG seed.

    Returns:
        ``{"value", "low", "high", "n_runs"}`` (``n_runs`` = n_x), value in ``[0, 1]``;
        ``NaN`` when a side is empty.

    Raises:
        DataError: for bad bootstrap parameters.
        ImportError: without rliable (``pip install densereward[compare]``).

    >>> probability_of_improvement_ci([3, 4, 5], [0, 1, 2], n_bootstrap=200)["value"]
    1.0
    """
    _, rl_metrics = rliable_modules()

    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return {"value": NAN, "low": NAN, "high": NAN, "n_runs": int(a.size)}
    return stratified_bootstrap_ci(
        rl_metrics.probability_of_improvement,
        a[:, None],
        b[:, None],
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        seed=seed,
    )


def mean_curve_ci(
    curves: np.ndarray, *, n_bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean learning curve over seeds with a pointwise percentile-bootstrap band.

    Whole runs (rows) are resampled with replacement, so the points of one run stay
    together (:func:`~densereward.metrics.bootstrap.cluster_resamples`, one run per cluster);
    the band at each grid point is the percentile interval of the resampled means.

    Args:
        curves: resampled curves, shape ``(n_runs, G)`` (one row per seed, a common grid).
        n_bootstrap: bootstrap replicates.
        confidence: coverage in ``(0, 1)``.
        seed: RNG seed.

    Returns:
        ``(mean, low, high)``, each of shape ``(G,)``.

    Raises:
        DataError: for an empty or non-2-D array, or bad bootstrap parameters.

    >>> mean, low, high = mean_curve_ci(np.array([[0.0, 1.0], [0.0, 0.5]]), n_bootstrap=100)
    >>> mean.tolist(), bool(np.all(low <= mean) and np.all(mean <= high))
    ([0.0, 0.75], True)
    """
    c = np.asarray(curves, dtype=float)
    if c.ndim != 2 or c.shape[0] == 0:
        raise DataError(f"curves must have shape (n_runs, G) with n_runs >= 1, got {c.shape}")
    if not 0.0 < confidence < 1.0 or n_bootstrap < 1:
        raise DataError("confidence must be in (0, 1) and n_bootstrap >= 1")
    means = np.stack(
        [
            c[idx].mean(axis=0)
            for idx, _ in cluster_resamples(
                np.arange(c.shape[0]), n_resamples=n_bootstrap, seed=seed
            )
        ]
    )  # (B, G)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return c.mean(axis=0), low, high
