"""Verifier-as-classifier metrics: TPR, TNR, precision, AUROC, calibration.

A verifier gives every response a score ``s`` in ``[0, 1]``; the ground truth says whether
the response is correct (label ``1``) or not (``0``). Threshold metrics use the accept
decision ``V = 1[s >= threshold]`` (hard, the default) or ``V = s`` itself (``soft=True``),
so with continuous scores ``TPR = E[V | correct]`` is the expected acceptance of correct
responses (Zhou et al. 2025, "Variation in Verification", arXiv 2509.17995, sec. 3).

Undefined values are ``NaN``, never ``0`` or ``0.5``: TPR/FNR/recall need at least one
correct response, TNR/FPR at least one incorrect one, precision at least one accepted
response, AUROC both classes.

Example:
    >>> scores = [0.9, 0.8, 0.3, 0.6, 0.1]
    >>> labels = [1, 1, 1, 0, 0]
    >>> round(tpr(scores, labels), 4), round(tnr(scores, labels), 4)
    (0.6667, 0.5)
    >>> round(precision(scores, labels), 4)
    0.6667
    >>> round(auroc(scores, labels), 4)
    0.8333
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..errors import DataError
from ._arrays import NAN, accept, as_arrays, mean_or_nan

__all__ = [
    "accept",
    "tpr",
    "tnr",
    "fpr",
    "fnr",
    "accuracy",
    "balanced_accuracy",
    "precision",
    "recall",
    "f1",
    "auroc",
    "auprc",
    "expected_calibration_error",
    "brier_score",
    "reliability_curve",
    "best_threshold",
    "calibrate_threshold",
]


def tpr(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """True-positive rate ``TPR = E[V | correct]`` (Zhou et al. 2025, sec. 3).

    Args:
        scores: verifier scores, shape ``(n,)``.
        labels: 1 = correct response, 0 = incorrect, shape ``(n,)``.
        threshold: accept iff ``score >= threshold``.
        soft: use ``V = score`` instead of the hard decision.

    Returns:
        TPR in ``[0, 1]``; ``NaN`` when there is no correct response.

    Raises:
        DataError: on malformed input (see :func:`as_arrays`).
    """
    s, y = as_arrays(scores, labels)
    return mean_or_nan(accept(s, threshold, soft)[y == 1])


def tnr(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """True-negative rate ``TNR = E[1 - V | incorrect]`` (Zhou et al. 2025, sec. 3).

    Returns:
        TNR in ``[0, 1]``; ``NaN`` when there is no incorrect response.

    Raises:
        DataError: on malformed input.
    """
    s, y = as_arrays(scores, labels)
    return mean_or_nan(1.0 - accept(s, threshold, soft)[y == 0])


def fpr(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """False-positive rate ``FPR = E[V | incorrect] = 1 - TNR``; ``NaN`` without incorrect responses.

    Raises:
        DataError: on malformed input.
    """
    return 1.0 - tnr(scores, labels, threshold, soft=soft)


def fnr(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """False-negative rate ``FNR = E[1 - V | correct] = 1 - TPR``; ``NaN`` without correct responses.

    Raises:
        DataError: on malformed input.
    """
    return 1.0 - tpr(scores, labels, threshold, soft=soft)


def accuracy(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """Verifier accuracy ``E[V * y + (1 - V) * (1 - y)]``; ``NaN`` for empty input.

    Raises:
        DataError: on malformed input.
    """
    s, y = as_arrays(scores, labels)
    v = accept(s, threshold, soft)
    return mean_or_nan(v * y + (1.0 - v) * (1.0 - y))


def balanced_accuracy(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """Balanced accuracy ``(TPR + TNR) / 2`` (Zhou et al. 2025, sec. 3).

    Returns:
        A value in ``[0, 1]``; ``NaN`` unless both classes are present.

    Raises:
        DataError: on malformed input.
    """
    return 0.5 * (
        tpr(scores, labels, threshold, soft=soft) + tnr(scores, labels, threshold, soft=soft)
    )


def precision(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """Precision ``E[correct | V = 1] = sum(V * y) / sum(V)`` (Lu et al. 2025, arXiv 2512.02304, sec. 3).

    Returns:
        Precision in ``[0, 1]``; ``NaN`` when the verifier accepts nothing.

    Raises:
        DataError: on malformed input.
    """
    s, y = as_arrays(scores, labels)
    v = accept(s, threshold, soft)
    total = v.sum()
    return float((v * y).sum() / total) if total > 0 else NAN


def recall(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """Recall, identical to :func:`tpr`; ``NaN`` without correct responses.

    Raises:
        DataError: on malformed input.
    """
    return tpr(scores, labels, threshold, soft=soft)


def f1(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """F1 ``= 2 P R / (P + R)``; ``NaN`` if precision or recall is undefined, ``0`` if both are 0.

    Raises:
        DataError: on malformed input.
    """
    p = precision(scores, labels, threshold, soft=soft)
    r = recall(scores, labels, threshold, soft=soft)
    if math.isnan(p) or math.isnan(r):
        return NAN
    return 0.0 if p + r == 0 else 2.0 * p * r / (p + r)


def auroc(scores, labels) -> float:
    """Area under the ROC curve (threshold-free; ties count one half), via scikit-learn.

    It equals the probability that a random correct response outscores a random incorrect
    one (Hanley & McNeil 1982).

    Returns:
        AUROC in ``[0, 1]``; ``NaN`` unless both classes are present.

    Raises:
        DataError: on malformed input.
    """
    import sklearn
    from sklearn.metrics import roc_auc_score

    s, y = as_arrays(scores, labels)
    if y.size == 0 or y.min() == y.max():
        return NAN
    with sklearn.config_context(
        skip_parameter_validation=True, assume_finite=True
    ):  # checked above
        return float(roc_auc_score(y, s))


def auprc(scores, labels) -> float:
    """Area under the precision-recall curve (average precision, scikit-learn).

    ``AP = sum_k (R_k - R_{k-1}) P_k`` over decreasing thresholds (no interpolation).
    Its chance level is the pass rate ``mean(labels)``, not 0.5.

    Returns:
        AUPRC in ``[0, 1]``; ``NaN`` with one class only (without incorrect responses it would
        be 1 whatever the scores: it measures nothing).

    Raises:
        DataError: on malformed input.
    """
    import sklearn
    from sklearn.metrics import average_precision_score

    s, y = as_arrays(scores, labels)
    if y.sum() == 0 or y.sum() == y.size:
        return NAN
    with (
        warnings.catch_warnings(),
        sklearn.config_context(skip_parameter_validation=True, assume_finite=True),
    ):
        warnings.simplefilter("ignore")
        return float(average_precision_score(y, s))


def _bin_index(s: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bins on ``[0, 1]``: ``[0, 1/B), ..., [(B-1)/B, 1]``."""
    return np.minimum((s * n_bins).astype(np.int64), n_bins - 1)


def _check_unit(s: np.ndarray, what: str) -> None:
    if s.size and (s.min() < 0.0 or s.max() > 1.0):
        raise DataError(
            f"{what} needs scores in [0, 1] (they are read as probabilities of correctness)"
        )


def reliability_curve(scores, labels, n_bins: int = 10) -> dict[str, np.ndarray]:
    """Per-bin mean score (confidence) and empirical accuracy for a reliability diagram.

    Args:
        scores: probabilities of correctness in ``[0, 1]``, shape ``(n,)``.
        labels: shape ``(n,)``.
        n_bins: B equal-width bins on ``[0, 1]``.

    Returns:
        ``{"edges": (B+1,), "confidence": (B,), "accuracy": (B,), "count": (B,)}``; empty bins
        hold ``NaN`` confidence/accuracy and count 0.

    Raises:
        DataError: on malformed input or scores outside ``[0, 1]``.
    """
    s, y = as_arrays(scores, labels)
    _check_unit(s, "reliability_curve")
    if n_bins < 1:
        raise DataError(f"n_bins must be >= 1, got {n_bins}")
    idx = _bin_index(s, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(idx, weights=s, minlength=n_bins) / count
        acc = np.bincount(idx, weights=y, minlength=n_bins) / count
    return {
        "edges": np.linspace(0.0, 1.0, n_bins + 1),
        "confidence": conf,
        "accuracy": acc,
        "count": count,
    }


def expected_calibration_error(scores, labels, n_bins: int = 10) -> float:
    """Expected calibration error ``ECE = sum_b (n_b / n) |acc_b - conf_b|``.

    Equal-width bins on ``[0, 1]`` (Naeini et al. 2015; Guo et al. 2017, eq. 3), reading the
    score as the verifier's probability that the response is correct.

    >>> round(expected_calibration_error([0.9, 0.9, 0.1, 0.1], [1, 0, 0, 0], n_bins=10), 6)
    0.25

    Returns:
        ECE in ``[0, 1]``; ``NaN`` for empty input.

    Raises:
        DataError: on malformed input or scores outside ``[0, 1]``.
    """
    curve = reliability_curve(scores, labels, n_bins)
    n = curve["count"].sum()
    if n == 0:
        return NAN
    filled = curve["count"] > 0
    gaps = np.abs(curve["accuracy"][filled] - curve["confidence"][filled])
    return float((curve["count"][filled] / n * gaps).sum())


def brier_score(scores, labels) -> float:
    """Brier score ``mean((score - label)^2)`` (Brier 1950); lower is better.

    Returns:
        A value in ``[0, 1]``; ``NaN`` for empty input.

    Raises:
        DataError: on malformed input or scores outside ``[0, 1]``.
    """
    s, y = as_arrays(scores, labels)
    _check_unit(s, "brier_score")
    return mean_or_nan((s - y) ** 2)


def best_threshold(scores, labels) -> dict[str, float]:
    """The accept threshold that maximises balanced accuracy on ``(scores, labels)``.

    Maximises Youden's J = TPR - FPR (Youden 1950), i.e. balanced accuracy
    ``(TPR + TNR) / 2 = (1 + J) / 2``, over the thresholds of ``sklearn.metrics.roc_curve``
    (every distinct score). ``V = 1[s >= threshold]`` as everywhere in this module; among equal
    J the highest threshold wins (fewest false accepts).

    A verifier's scores are often not centred on 0.5 (a small model may score every response
    below 0.5 and accept nothing at the default threshold while ranking them well, AUROC >
    0.5); this finds where its own decision boundary lies.

    Args:
        scores: ``(n,)`` verifier scores.
        labels: ``(n,)`` ground truth (1 = correct).

    Returns:
        ``{"threshold", "tpr", "tnr", "balanced_accuracy"}`` (in-sample); all ``NaN`` unless
        both classes are present.

    Raises:
        DataError: on malformed input.

    >>> best_threshold([0.30, 0.35, 0.10, 0.20], [1, 1, 0, 0])
    {'threshold': 0.3, 'tpr': 1.0, 'tnr': 1.0, 'balanced_accuracy': 1.0}
    """
    from sklearn.metrics import roc_curve

    s, y = as_arrays(scores, labels)
    if y.size == 0 or y.min() == y.max():
        return {"threshold": NAN, "tpr": NAN, "tnr": NAN, "balanced_accuracy": NAN}
    fpr_, tpr_, thr = roc_curve(y, s, drop_intermediate=False)
    ok = np.isfinite(thr)  # the first threshold is +inf (accept nothing)
    j = np.where(ok, tpr_ - fpr_, -np.inf)
    i = int(np.argmax(j))  # thresholds decrease, so the first maximum is the highest threshold
    return {
        "threshold": float(thr[i]),
        "tpr": float(tpr_[i]),
        "tnr": float(1.0 - fpr_[i]),
        "balanced_accuracy": float((1.0 + tpr_[i] - fpr_[i]) / 2.0),
    }


def calibrate_threshold(scores, labels, groups, *, n_splits: int = 5) -> dict[str, Any]:
    """Best accept threshold (:func:`best_threshold`) with an honest, cross-validated estimate.

    The in-sample optimum is optimistic (the threshold was chosen on the same data). The
    cross-validated estimate picks the threshold on ``n_splits - 1`` folds and applies it to
    the held-out fold, with folds split by ``groups`` (``sklearn.model_selection.GroupKFold``;
    use problem ids so that responses to one problem never sit on both sides); TPR, TNR and
    balanced accuracy are then computed over all out-of-fold decisions.

    Args:
        scores: ``(n,)`` verifier scores.
        labels: ``(n,)`` ground truth (1 = correct).
        groups: ``(n,)`` group ids (e.g. problem ids).
        n_splits: folds (reduced to the number of groups when there are fewer).

    Returns:
        ``{"threshold", "in_sample": {tpr, tnr, balanced_accuracy}, "cross_validated":
        {tpr, tnr, balanced_accuracy, n_splits, thresholds}}``; ``NaN`` entries when a class is
        missing or there are fewer than 2 groups (``cross_validated`` then has ``n_splits`` 0).

    Raises:
        DataError: on malformed input, mismatched lengths or ``n_splits < 2``.
    """
    from sklearn.model_selection import GroupKFold

    s, y = as_arrays(scores, labels)
    g = np.asarray([str(x) for x in groups])
    if g.shape != s.shape:
        raise DataError(f"groups has {g.size} entries for {s.size} scores")
    if n_splits < 2:
        raise DataError(f"n_splits must be >= 2, got {n_splits}")
    best = best_threshold(s, y)
    out: dict[str, Any] = {
        "threshold": best["threshold"],
        "in_sample": {k: best[k] for k in ("tpr", "tnr", "balanced_accuracy")},
        "cross_validated": {
            "tpr": NAN,
            "tnr": NAN,
            "balanced_accuracy": NAN,
            "n_splits": 0,
            "thresholds": [],
        },
    }
    k = min(n_splits, len(set(g.tolist())))
    if k < 2 or not math.isfinite(best["threshold"]):
        return out
    decisions = np.zeros_like(s)
    thresholds = []
    for train, test in GroupKFold(n_splits=k).split(s, y, g):
        t = best_threshold(s[train], y[train])["threshold"]
        if not math.isfinite(t):  # a training fold with one class only: keep the global one
            t = best["threshold"]
        thresholds.append(float(t))
        decisions[test] = (s[test] >= t).astype(float)
    out["cross_validated"] = {
        "tpr": tpr(decisions, y),
        "tnr": tnr(decisions, y),
        "balanced_accuracy": balanced_accuracy(decisions, y),
        "n_splits": k,
        "thresholds": thresholds,
    }
    return out
