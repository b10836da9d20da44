"""Array and grouping helpers shared by the metrics modules (a leaf: imports no other metric).

Every metric module validates its ``(scores, labels)`` with :func:`as_arrays`, turns scores
into accept decisions with :func:`accept` and groups responses by problem with
:func:`group_indices` / :func:`group_codes`; keeping them here lets the metric modules import
each other in one direction only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ..errors import DataError

__all__ = [
    "NAN",
    "as_arrays",
    "accept",
    "accept_or_reject",
    "mean_or_nan",
    "group_indices",
    "group_codes",
    "check_group_ids",
]

NAN = float("nan")


def as_arrays(
    scores: Sequence[float] | np.ndarray, labels: Sequence[Any] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert ``(scores, labels)`` to float arrays of shape ``(n,)``.

    Args:
        scores: verifier scores, shape ``(n,)``, finite (abstentions must be removed first).
        labels: ground truth, shape ``(n,)``, each ``0``/``1`` or ``False``/``True``.

    Returns:
        ``(scores, labels)`` as float64 arrays; ``labels`` holds only ``0.0`` and ``1.0``.

    Raises:
        DataError: on shape mismatch, non-finite or ``None`` scores, or labels outside {0, 1}.

    >>> as_arrays([0.2, 0.9], [False, True])
    (array([0.2, 0.9]), array([0., 1.]))
    """
    try:
        s = np.asarray(scores, dtype=np.float64).reshape(-1) if len(scores) else np.zeros(0)
        y = np.asarray(labels, dtype=np.float64).reshape(-1) if len(labels) else np.zeros(0)
    except (TypeError, ValueError) as e:
        raise DataError(
            f"scores and labels must be numbers (drop abstained responses first): {e}"
        ) from None
    if s.shape != y.shape:
        raise DataError(
            f"scores and labels must have the same length, got {s.shape[0]} and {y.shape[0]}"
        )
    if not np.all(np.isfinite(s)):
        raise DataError(
            "scores contain NaN/inf/None; drop abstained responses before computing metrics"
        )
    if not np.all((y == 0.0) | (y == 1.0)):
        raise DataError("labels must be 0/1 (or False/True)")
    return s, y


def accept(
    scores: Sequence[float] | np.ndarray,
    threshold: float | np.ndarray = 0.5,
    soft: bool = False,
) -> np.ndarray:
    """The verifier's accept decision ``V``, shape ``(n,)``.

    Every threshold metric (TPR, TNR, precision, ...) decides through this function, so a
    ``threshold`` array reaches them too.

    Args:
        scores: shape ``(n,)``.
        threshold: hard decision ``V = 1[score >= threshold]``: one number, or shape ``(n,)``,
            one threshold per response (e.g. the one in force when it was scored).
        soft: if True, ``V = score`` (must then lie in ``[0, 1]``); ``threshold`` is ignored.

    Raises:
        DataError: if ``soft`` and a score lies outside ``[0, 1]``; if ``threshold`` is
            ``None`` or an array of another shape.

    >>> accept([0.2, 0.5, 0.9]).tolist()
    [0.0, 1.0, 1.0]
    >>> accept([0.2, 0.5, 0.9], threshold=[0.1, 0.6, 0.9]).tolist()
    [1.0, 0.0, 1.0]
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if soft:
        if s.size and (s.min() < 0.0 or s.max() > 1.0):
            raise DataError("soft metrics need scores in [0, 1]")
        return s
    if threshold is None:
        raise DataError("threshold is None; pass a number (or one per response)")
    t = np.asarray(threshold, dtype=np.float64)
    if t.ndim and t.shape != s.shape:
        raise DataError(f"threshold has shape {t.shape}, expected a number or {s.shape}")
    return (s >= t).astype(np.float64)


def accept_or_reject(
    scores: Sequence[float | None] | np.ndarray,
    labels: Sequence[Any] | np.ndarray,
    threshold: float = 0.5,
    soft: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Labels and accept decisions where an abstained response is a reject, as in deployment.

    The test-time-scaling metrics select among every response a solver produced: a response
    the verifier could not score (``None`` or ``NaN``) is not accepted, but it stays a response
    of its problem (in the base pass rate and among the draws of rejection sampling).

    Args:
        scores: shape ``(n,)``; ``None`` / ``NaN`` = abstained.
        labels: shape ``(n,)``, 0/1.
        threshold: a number (``V = 1[score >= threshold]``).
        soft: ``V = score`` for the scored responses.

    Returns:
        ``(labels, decisions)``, float arrays of shape ``(n,)``; decision 0 where abstained.

    Raises:
        DataError: on a length mismatch, an infinite score or labels outside {0, 1}.

    >>> accept_or_reject([0.9, None, 0.2, float("nan")], [1, 1, 0, 0])[1].tolist()
    [1.0, 0.0, 0.0, 0.0]
    """
    raw = [np.nan if v is None else v for v in np.asarray(scores, dtype=object).reshape(-1)]
    s = np.asarray(raw, dtype=np.float64) if raw else np.zeros(0)
    scored = ~np.isnan(s)
    _, y = as_arrays(np.where(scored, s, 0.0), labels)
    v = np.zeros_like(y)
    v[scored] = accept(s[scored], threshold, soft)
    return y, v


def mean_or_nan(x: np.ndarray) -> float:
    """``x.mean()`` as a float, ``NaN`` for an empty array (an undefined rate, never 0)."""
    return float(x.mean()) if x.size else NAN


def group_indices(groups: Sequence[Hashable]) -> dict[Hashable, np.ndarray]:
    """Map each distinct group id (in first-seen order) to the indices of its rows.

    >>> {g: ix.tolist() for g, ix in group_indices(["a", "b", "a"]).items()}
    {'a': [0, 2], 'b': [1]}
    """
    out: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return {g: np.asarray(ix, dtype=np.int64) for g, ix in out.items()}


def group_codes(groups: Sequence[Hashable]) -> np.ndarray:
    """Integer code of each row's group, ``0..n_groups-1`` in first-seen order, shape ``(n,)``.

    >>> group_codes(["a", "b", "a"]).tolist()
    [0, 1, 0]
    """
    table: dict[Hashable, int] = {}
    return np.fromiter(
        (table.setdefault(g, len(table)) for g in groups), dtype=np.int64, count=len(groups)
    )


def check_group_ids(problem_ids: Sequence[Hashable], n: int) -> None:
    """Raise :class:`~densereward.errors.DataError` unless there is one problem id per row.

    Raises:
        DataError: if ``len(problem_ids) != n``.
    """
    if len(problem_ids) != n:
        raise DataError(f"problem_ids has {len(problem_ids)} entries, expected {n}")
