"""Every verifier metric of one set of responses at once, under stable keys.

:func:`classification_report` gathers the classifier metrics of
:mod:`~densereward.metrics.classification` and the verifier gain of
:mod:`~densereward.metrics.tts`; it sits above both so that neither imports the other's
consumers (no import cycle).
"""

from __future__ import annotations

from ._arrays import NAN, as_arrays, mean_or_nan
from .classification import (
    accuracy,
    auprc,
    auroc,
    balanced_accuracy,
    brier_score,
    expected_calibration_error,
    f1,
    fnr,
    fpr,
    precision,
    recall,
    tnr,
    tpr,
)
from .tts import verifier_gain

__all__ = ["REPORT_KEYS", "classification_report"]

REPORT_KEYS = (
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
    "ece",
    "brier",
    "verifier_gain",
    "pass_rate",
    "n",
    "n_pos",
    "n_neg",
)
"""The stable keys of :func:`classification_report`, in order."""


def classification_report(
    scores, labels, threshold: float = 0.5, *, soft: bool = False, n_bins: int = 10
) -> dict[str, float]:
    """All threshold and threshold-free metrics at once, under the stable keys :data:`REPORT_KEYS`.

    Keys: ``tpr, tnr, fpr, fnr, accuracy, balanced_accuracy, precision, recall, f1`` (at
    ``threshold``, or soft), ``auroc, auprc, ece, brier`` (threshold-free), ``verifier_gain``
    (precision - pass rate, Lu et al. 2025 eq. 1), ``pass_rate`` (the pooled pass rate: mean
    label over all responses, the solver accuracy), ``n, n_pos, n_neg`` (counts, as floats).
    Undefined entries are ``NaN``.

    >>> r = classification_report([0.9, 0.2], [1, 0])
    >>> r["balanced_accuracy"], r["verifier_gain"], r["n"]
    (1.0, 0.5, 2.0)

    Args:
        scores: ``(n,)`` verifier scores (in ``[0, 1]`` for ``ece``, ``brier`` and ``soft``).
        labels: ``(n,)`` ground truth in ``{0, 1}``.
        threshold: accept iff ``score >= threshold``.
        soft: use ``V = score`` instead of the hard decision.
        n_bins: equal-width bins of the ECE.

    Raises:
        DataError: on malformed input, or ``soft`` with scores outside ``[0, 1]``.
    """
    s, y = as_arrays(scores, labels)
    unit = not s.size or (s.min() >= 0.0 and s.max() <= 1.0)
    kw = {"threshold": threshold, "soft": soft}
    return {
        "tpr": tpr(s, y, **kw),
        "tnr": tnr(s, y, **kw),
        "fpr": fpr(s, y, **kw),
        "fnr": fnr(s, y, **kw),
        "accuracy": accuracy(s, y, **kw),
        "balanced_accuracy": balanced_accuracy(s, y, **kw),
        "precision": precision(s, y, **kw),
        "recall": recall(s, y, **kw),
        "f1": f1(s, y, **kw),
        "auroc": auroc(s, y),
        "auprc": auprc(s, y),
        "ece": expected_calibration_error(s, y, n_bins) if unit else NAN,
        "brier": brier_score(s, y) if unit else NAN,
        "verifier_gain": verifier_gain(s, y, **kw),
        "pass_rate": mean_or_nan(y),
        "n": float(y.size),
        "n_pos": float(y.sum()),
        "n_neg": float(y.size - y.sum()),
    }
