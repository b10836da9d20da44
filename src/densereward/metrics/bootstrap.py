"""Bootstrap confidence intervals, resampling whole problems (cluster bootstrap).

Responses to the same problem are correlated, so the default resamples problems with
replacement and keeps all of a resampled problem's responses (percentile interval, Efron &
Tibshirani 1993; cluster resampling, Field & Welsh 2007).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from ..errors import DataError
from .tts import group_codes

__all__ = ["bootstrap_ci", "bootstrap_many"]

NAN = float("nan")


def bootstrap_many(
    fns: Mapping[str, Callable[..., float]],
    *arrays: Sequence | np.ndarray,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    pass_groups: Sequence[str] = (),
) -> dict[str, dict[str, float]]:
    """Percentile bootstrap intervals of several statistics on the same resamples.

    Args:
        fns: name -> statistic, called as ``fn(*resampled_arrays)``; the names listed in
            ``pass_groups`` also get the resampled group ids (int array, ``(m,)``) as the last
            positional argument (for per-problem metrics such as ``tts_pass_rate``).
        *arrays: aligned arrays, each of shape ``(n,)``.
        groups: cluster id of each row, ``(n,)``; ``None`` resamples rows independently.
            Resampled clusters get fresh ids, so a problem drawn twice counts twice.
        n_resamples: bootstrap replicates B >= 1.
        confidence: interval mass in ``(0, 1)``.
        seed: RNG seed.
        pass_groups: names of the statistics that take the group ids.

    Returns:
        name -> ``{"value": statistic on the full data, "low", "high", "n_resamples": defined
        replicates}``; ``low``/``high`` are ``NaN`` when fewer than half the replicates are
        defined (e.g. TNR on resamples without incorrect responses).

    Raises:
        DataError: on length mismatch or bad parameters.
    """
    if not arrays:
        raise DataError("bootstrap needs at least one array")
    arrs = [np.asarray(a) for a in arrays]
    n = len(arrs[0])
    if any(len(a) != n for a in arrs) or (groups is not None and len(groups) != n):
        raise DataError("bootstrap: all arrays (and groups) must have the same length")
    if not 0 < confidence < 1 or n_resamples < 1:
        raise DataError("bootstrap: confidence must be in (0, 1) and n_resamples >= 1")
    codes = group_codes(groups) if groups is not None else np.arange(n)

    def call(name: str, sample: list[np.ndarray], ids: np.ndarray) -> float:
        v = fns[name](*sample, ids) if name in pass_groups else fns[name](*sample)
        return NAN if v is None else float(v)

    values = {k: call(k, arrs, codes) for k in fns}
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_clusters = sizes.size
    rng = np.random.default_rng(seed)
    stats: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(n_resamples if n else 0):
        picks = rng.integers(0, n_clusters, size=n_clusters)
        sz = sizes[picks]
        total = int(sz.sum())
        offsets = np.repeat(starts[picks] - (np.cumsum(sz) - sz), sz) + np.arange(total)
        idx = order[offsets]
        ids = np.repeat(np.arange(n_clusters), sz)
        sample = [a[idx] for a in arrs]
        for k in fns:
            v = call(k, sample, ids)
            if not math.isnan(v):
                stats[k].append(v)
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for k in fns:
        if len(stats[k]) < max(1, n_resamples // 2):
            low = high = NAN
        else:
            low, high = (float(q) for q in np.quantile(stats[k], [alpha, 1.0 - alpha]))
        out[k] = {"value": values[k], "low": low, "high": high, "n_resamples": float(len(stats[k]))}
    return out


def bootstrap_ci(
    fn: Callable[..., float],
    *arrays: Sequence | np.ndarray,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    pass_groups: bool = False,
) -> dict[str, float]:
    """Percentile bootstrap interval of ``fn(*arrays)`` (see :func:`bootstrap_many`).

    Returns:
        ``{"value", "low", "high", "n_resamples"}``.

    Raises:
        DataError: on length mismatch or bad parameters.

    >>> ci = bootstrap_ci(lambda x: float(np.mean(x)), np.r_[np.zeros(50), np.ones(50)], n_resamples=200)
    >>> ci["value"], ci["low"] < 0.5 < ci["high"]
    (0.5, True)
    """
    return bootstrap_many(
        {"stat": fn},
        *arrays,
        groups=groups,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        pass_groups=("stat",) if pass_groups else (),
    )["stat"]
