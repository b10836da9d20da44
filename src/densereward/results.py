"""Result types of the verifier engine.

All values are normalised to ``[0, 1]`` (higher = better / more complete). ``None``
means the verifier abstained; it is never replaced by a neutral 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ScoreResult", "PairwiseResult", "RankResult", "UNREAD_REASONS"]

EMPTY_RESPONSE = "empty response"
NO_FINAL_ANSWER = "no final answer"
UNREAD_REASONS = (EMPTY_RESPONSE, NO_FINAL_ANSWER)
"""``ScoreResult.reason`` of a score given without a model read: ``value`` 0.0, the lowest
score (an empty candidate; a reference-guided ``answer_match`` candidate with no final answer
to match). Such a score is not an abstention; :attr:`ScoreResult.unread` tells it apart."""


@dataclass
class ScoreResult:
    """One pointwise (or progress) score, aggregated over C criteria and K repeats.

    Attributes:
        value: normalised expected score ``R`` in ``[0, 1]`` (Kwok et al. 2026, eq. 1), or
            ``None`` when the verifier abstained.
        distribution: ``(G,)`` renormalised probabilities of the score levels, averaged over
            the (criterion, repeat) reads that did not abstain; ``None`` on abstention.
        mass: mean probability the verifier put on the score tokens *before* renormalising
            (health signal: near 1 means the score position is unambiguous); ``None`` when
            the backend restricted its distribution to the score tokens (mass 1 by construction).
        argmax: the most probable level of ``distribution`` (what a discrete judge would say).
        argmax_value: ``argmax`` normalised to ``[0, 1]``.
        per_criterion: criterion name -> mean value over its repeats (``None`` if all abstained).
        per_repeat: values of each (criterion-major, repeat-minor) read, ``C*K`` entries.
        sampled: True when the distribution is an empirical one from sampled scores.
        exact: False when the backend saw only part of the score tokens (top-k capped).
        truncated: True when the candidate text was truncated to fit the verifier's context.
        reason: why the verifier abstained or short-circuited (e.g. ``"empty response"``).
    """

    value: float | None
    distribution: np.ndarray | None = None
    mass: float | None = None
    argmax: int | None = None
    argmax_value: float | None = None
    per_criterion: dict[str, float | None] = field(default_factory=dict)
    per_repeat: list[float | None] = field(default_factory=list)
    sampled: bool = False
    exact: bool = True
    truncated: bool = False
    reason: str | None = None

    @property
    def abstained(self) -> bool:
        """True when ``value`` is ``None``."""
        return self.value is None

    @property
    def unread(self) -> bool:
        """True when ``value`` was given without a model read (``reason`` in :data:`UNREAD_REASONS`).

        >>> ScoreResult(value=0.0, reason="no final answer").unread, ScoreResult(value=0.3).unread
        (True, False)
        """
        return self.value is not None and self.reason in UNREAD_REASONS


@dataclass
class PairwiseResult:
    """A pairwise comparison of candidates ``a`` and ``b`` for one problem.

    Attributes:
        value_a: ``R_a`` in ``[0, 1]`` (or ``None``), averaged over repeats with alternating slots.
        value_b: ``R_b`` in ``[0, 1]`` (or ``None``).
        preference: Bradley-Terry ``p(a > b) = sigmoid(beta * (R_a - R_b))``; ``None`` if either
            side abstained.
        result_a: the full :class:`ScoreResult` of ``a``.
        result_b: the full :class:`ScoreResult` of ``b``.
    """

    value_a: float | None
    value_b: float | None
    preference: float | None
    result_a: ScoreResult | None = None
    result_b: ScoreResult | None = None


@dataclass
class RankResult:
    """The outcome of a tournament over N candidates.

    Attributes:
        winner: index of the candidate with the highest soft win rate ``w_i / c_i``.
        win_rate: ``(N,)`` soft win rates in ``[0, 1]`` (NaN for a candidate with no decided
            comparison).
        wins: ``(N,)`` summed soft wins ``w_i``.
        counts: ``(N,)`` number of decided comparisons ``c_i`` each candidate took part in.
        n_comparisons: comparisons made (PPT: ``N + k(N-k) + k(k-1)/2``).
        n_abstained: comparisons where the verifier abstained (not counted in ``wins``/``counts``).
        pivots: indices of the pivots (PPT) or empty (round robin).
        order: indices sorted by win rate, best first (NaN last).
    """

    winner: int
    win_rate: np.ndarray
    wins: np.ndarray
    counts: np.ndarray
    n_comparisons: int
    n_abstained: int = 0
    pivots: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
