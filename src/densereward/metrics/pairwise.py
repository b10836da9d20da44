"""Pairwise discrimination: does a correct response outscore an incorrect one of the same problem?

Pairs are all (correct, incorrect) response pairs of the same problem (or of the whole set
when ``problem_ids`` is ``None``). The score gap of a pair is ``s_correct - s_incorrect``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ._arrays import as_arrays, check_group_ids, group_indices

__all__ = ["pair_gaps", "pairwise_accuracy", "tie_rate", "score_gap_snr", "mean_score_gap"]

NAN = float("nan")


def pair_gaps(scores, labels, problem_ids: Sequence[Hashable] | None = None) -> np.ndarray:
    """Score gaps ``s_correct - s_incorrect`` of every (correct, incorrect) pair.

    Args:
        scores: shape ``(n,)``.
        labels: 0/1 correctness, shape ``(n,)``.
        problem_ids: pair only within a problem, shape ``(n,)``; ``None`` = all pairs.

    Returns:
        Gaps, shape ``(n_pairs,)`` (empty when no problem has both classes).

    Raises:
        DataError: on malformed input or length mismatch.

    >>> pair_gaps([0.9, 0.4, 0.5], [1, 0, 0]).tolist()
    [0.5, 0.4]
    """
    s, y = as_arrays(scores, labels)
    if problem_ids is None:
        groups = [np.arange(y.size)]
    else:
        check_group_ids(problem_ids, y.size)
        groups = list(group_indices(problem_ids).values())
    gaps = [(s[ix][y[ix] == 1][:, None] - s[ix][y[ix] == 0][None, :]).reshape(-1) for ix in groups]
    return np.concatenate(gaps) if gaps else np.zeros(0)


def mean_score_gap(scores, labels) -> float:
    """Mean score of correct responses minus mean score of incorrect ones (threshold-free).

    A difference of class means, not of pairs: every response counts once whatever its
    problem. Positive when the verifier scores correct responses higher on average, even if
    every score lies below the accept threshold.

    >>> round(mean_score_gap([0.3, 0.2, 0.1, 0.15], [1, 1, 0, 0]), 3)
    0.125

    Returns:
        A value in ``[-1, 1]`` for scores in ``[0, 1]``; ``NaN`` unless both classes are present.

    Raises:
        DataError: on malformed input.
    """
    s, y = as_arrays(scores, labels)
    if y.size == 0 or y.min() == y.max():
        return NAN
    return float(s[y == 1].mean() - s[y == 0].mean())


def pairwise_accuracy(
    scores, labels, problem_ids: Sequence[Hashable] | None = None, *, tie_credit: float = 0.0
) -> float:
    """Fraction of (correct, incorrect) pairs ordered correctly, ``P(s_c > s_i) + tie_credit P(s_c = s_i)``.

    Ties count as failures by default (``tie_credit=0``): a verifier that gives everything the
    same score has pairwise accuracy 0 and tie rate 1. With ``tie_credit=0.5`` and no
    ``problem_ids`` this equals AUROC.

    >>> pairwise_accuracy([0.9, 0.4, 0.9], [1, 0, 0])
    0.5

    Returns:
        A value in ``[0, 1]``; ``NaN`` when there is no pair.

    Raises:
        DataError: on malformed input.
    """
    g = pair_gaps(scores, labels, problem_ids)
    if g.size == 0:
        return NAN
    return float(np.mean(g > 0) + tie_credit * np.mean(g == 0))


def tie_rate(
    scores, labels, problem_ids: Sequence[Hashable] | None = None, *, atol: float = 0.0
) -> float:
    """Fraction of (correct, incorrect) pairs whose scores tie, ``|s_c - s_i| <= atol``.

    Coarse verifiers (few score tokens, argmax decoding) tie often; dense expected scores rarely.

    >>> tie_rate([0.9, 0.4, 0.9], [1, 0, 0])
    0.5

    Returns:
        A value in ``[0, 1]``; ``NaN`` when there is no pair.

    Raises:
        DataError: on malformed input.
    """
    g = pair_gaps(scores, labels, problem_ids)
    return float(np.mean(np.abs(g) <= atol)) if g.size else NAN


def score_gap_snr(scores, labels, problem_ids: Sequence[Hashable] | None = None) -> float:
    """Signal-to-noise ratio of the pair score gap, ``mean(gap) / std(gap)`` (sample std, ddof=1).

    >>> round(score_gap_snr([0.9, 0.5, 0.3], [1, 0, 0]), 4)
    3.5355

    Returns:
        The SNR (unitless); ``NaN`` with fewer than 2 pairs or zero spread.

    Raises:
        DataError: on malformed input.
    """
    g = pair_gaps(scores, labels, problem_ids)
    if g.size < 2:
        return NAN
    sd = float(np.std(g, ddof=1))
    return float(np.mean(g)) / sd if sd > 0 else NAN
