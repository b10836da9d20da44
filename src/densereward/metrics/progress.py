"""Progress-estimate quality: Value-Order Correlation (VOC).

VOC is the Spearman rank correlation between the chronological order of a trajectory's steps
and the progress the verifier predicts after each step (Ma et al. 2024, "Vision Language
Models are In-Context Value Learners", GVL, sec. 3). A monotone progress estimate on a
successful trajectory has VOC = 1.

An undefined VOC (fewer than two predictions, or constant predictions) is ``None``: the
project's abstention convention for a per-item score (a verifier that could not score returns
``None``), never 0, which would read as "no order". Aggregates over trajectories skip the
undefined ones and count them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import DataError

__all__ = ["value_order_correlation", "mean_value_order_correlation"]

NAN = float("nan")


def value_order_correlation(
    progress: Sequence[float | None] | np.ndarray,
    steps: Sequence[float] | np.ndarray | None = None,
) -> float | None:
    """Spearman correlation between step order and predicted progress (GVL's VOC).

    ``rho = corr(rank(steps), rank(progress))`` (Pearson correlation of the ranks, ties
    averaged, as ``scipy.stats.spearmanr``).

    Args:
        progress: predicted progress after each step, shape ``(T,)``. ``None``/``NaN`` entries
            (abstained steps) are dropped together with their steps, keeping the order of the
            rest.
        steps: the step (e.g. environment step) of each prediction, shape ``(T,)``; ``None``
            means ``0, 1, ..., T-1`` (``progress`` is in step order).

    Returns:
        VOC in ``[-1, 1]``; ``None`` when undefined: fewer than 2 predictions remain, or the
        predictions (or the steps) are constant.

    Raises:
        DataError: if ``steps`` and ``progress`` differ in length.

    >>> round(value_order_correlation([0.1, 0.2, 0.4, 0.3]), 6)
    0.8
    >>> round(value_order_correlation([0.1, 0.3, 0.2, 0.9], steps=[0, 10, 20, 30]), 6)
    0.8
    >>> value_order_correlation([0.5, 0.5, 0.5]) is None
    True
    """
    from scipy.stats import rankdata

    vals = np.asarray([NAN if p is None else float(p) for p in progress], dtype=np.float64)
    if steps is None:
        order = np.arange(vals.size, dtype=np.float64)
    else:
        order = np.asarray(steps, dtype=np.float64).reshape(-1)
        if order.size != vals.size:
            raise DataError(f"steps ({order.size}) and progress ({vals.size}) differ in length")
    keep = np.isfinite(vals)
    vals, order = vals[keep], order[keep]
    if vals.size < 2:
        return None
    x, y = rankdata(order), rankdata(vals)
    if np.std(x) == 0 or np.std(y) == 0:
        return None
    rho = float(np.corrcoef(x, y)[0, 1])
    return rho if math.isfinite(rho) else None


def mean_value_order_correlation(
    trajectories: Sequence[Sequence[float | None]],
) -> dict[str, float]:
    """Mean VOC over trajectories, skipping undefined ones (and counting them).

    Args:
        trajectories: per trajectory its predicted progress in step order, each ``(T_i,)``.

    Returns:
        ``{"voc": mean over defined trajectories (NaN if none), "n": count, "n_undefined": count}``.

    >>> mean_value_order_correlation([[0.1, 0.2], [0.3, 0.3], [0.2, 0.1]])
    {'voc': 0.0, 'n': 3.0, 'n_undefined': 1.0}
    """
    vocs = [value_order_correlation(t) for t in trajectories]
    defined = [v for v in vocs if v is not None]
    return {
        "voc": float(np.mean(defined)) if defined else NAN,
        "n": float(len(vocs)),
        "n_undefined": float(len(vocs) - len(defined)),
    }
