"""Progress-estimate quality: Value-Order Correlation (VOC).

VOC is the Spearman rank correlation between the order of the steps of a trajectory
(0, 1, ..., T-1) and the progress the verifier predicts after each step (Ma et al. 2024,
"Vision Language Models are In-Context Value Learners", GVL, sec. 3). A monotone
progress estimate on a successful trajectory has VOC = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["value_order_correlation", "mean_value_order_correlation"]

NAN = float("nan")


def value_order_correlation(progress: Sequence[float | None] | np.ndarray) -> float:
    """Spearman correlation between step order and predicted progress.

    Args:
        progress: predicted progress after each step, shape ``(T,)``, in step order.
            ``None``/``NaN`` entries (abstained steps) are dropped, keeping the order of the rest.

    Returns:
        VOC in ``[-1, 1]``; ``NaN`` when fewer than 2 steps remain or the predictions are
        constant (the rank correlation is undefined: report it as NaN, not 0).

    >>> round(value_order_correlation([0.1, 0.2, 0.4, 0.3]), 6)
    0.8
    >>> value_order_correlation([0.5, 0.5, 0.5])
    nan
    """
    from scipy.stats import spearmanr

    vals = np.asarray([NAN if p is None else float(p) for p in progress], dtype=np.float64)
    order = np.arange(vals.size, dtype=np.float64)
    keep = np.isfinite(vals)
    vals, order = vals[keep], order[keep]
    if vals.size < 2 or np.all(vals == vals[0]):
        return NAN
    rho = spearmanr(order, vals).statistic
    return float(rho) if math.isfinite(rho) else NAN


def mean_value_order_correlation(
    trajectories: Sequence[Sequence[float | None]],
) -> dict[str, float]:
    """Mean VOC over trajectories, skipping undefined ones (and counting them).

    Returns:
        ``{"voc": mean over defined trajectories (NaN if none), "n": count, "n_undefined": count}``.
    """
    vocs = [value_order_correlation(t) for t in trajectories]
    defined = [v for v in vocs if not math.isnan(v)]
    return {
        "voc": float(np.mean(defined)) if defined else NAN,
        "n": float(len(vocs)),
        "n_undefined": float(len(vocs) - len(defined)),
    }
