"""Pairwise preferences and tournaments over N candidates.

- Bradley-Terry preference from two scalar rewards (Bradley & Terry 1952; as used for
  pairwise verifier scores in Kwok et al. 2026): ``p(a > b) = sigmoid(beta * (R_a - R_b))``.
- Probabilistic Pivot Tournament (PPT, Kwok et al. 2026): a ring pass over a random
  Hamiltonian cycle, the top-k by mean preference become pivots, then every
  non-pivot-vs-pivot and pivot-vs-pivot pair. Exactly ``N + k(N-k) + k(k-1)/2``
  comparisons instead of the ``N(N-1)/2`` of a full round robin.

Everything here is pure (no model calls). A tournament is a generator (:data:`Schedule`): it
yields the pairs of a batch and receives their preferences, so
:class:`~densereward.verifier.Verifier` runs each batch as one batched model call (sync or
async) and sends the preferences back; :func:`run_tournament` drives one with a plain function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence

import numpy as np

from .errors import DataError
from .results import RankResult

__all__ = [
    "bradley_terry_preference",
    "ppt_comparison_count",
    "ring_pairs",
    "pivot_pairs",
    "round_robin_pairs",
    "select_pivots",
    "aggregate",
    "ppt_schedule",
    "round_robin_schedule",
    "run_tournament",
    "run_ppt",
    "run_round_robin",
]

Pair = tuple[int, int]
CompareFn = Callable[[Sequence[Pair]], Sequence["float | None"]]


def bradley_terry_preference(r_a: float, r_b: float, beta: float = 10.0) -> float:
    """``p(a > b) = sigmoid(beta * (R_a - R_b))`` for rewards in ``[0, 1]``.

    With ``beta = 1`` on ``[0, 1]`` rewards the preference can never exceed
    ``sigmoid(1) = 0.73``; the default ``beta = 10`` maps one level of a 20-level scale
    (a gap of 1/19) to ~0.63 and a gap of 0.3 to ~0.95.

    >>> round(bradley_terry_preference(0.7, 0.7), 3)
    0.5
    >>> round(bradley_terry_preference(1.0, 0.0, beta=1.0), 3)
    0.731
    """
    x = beta * (r_a - r_b)
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def ppt_comparison_count(n: int, k: int) -> int:
    """Comparisons PPT makes for ``n`` candidates and ``k`` pivots: ``N + k(N-k) + k(k-1)/2``.

    For ``n == 2`` the ring pass already compares the pair in both slots.

    >>> ppt_comparison_count(8, 2), ppt_comparison_count(8, 0), ppt_comparison_count(16, 3)
    (21, 8, 58)
    """
    if n < 2:
        return 0
    return n + k * (n - k) + k * (k - 1) // 2


def ring_pairs(n: int, rng: np.random.Generator) -> list[Pair]:
    """A random Hamiltonian cycle: ``(pi[i], pi[i+1 mod n])`` for ``i < n``, ``n`` pairs.

    Every candidate appears exactly once in slot A and once in slot B.
    """
    perm = rng.permutation(n).tolist()
    return [(perm[i], perm[(i + 1) % n]) for i in range(n)]


def select_pivots(
    n: int, k: int, pairs: Sequence[Pair], prefs: Sequence[float | None]
) -> list[int]:
    """Top-``k`` candidates by mean preference in ``pairs`` (ties broken by lower index)."""
    wins, counts = _accumulate(n, pairs, prefs)
    mean = np.divide(wins, counts, out=np.full(n, -1.0), where=counts > 0)
    order = sorted(range(n), key=lambda i: (-mean[i], i))
    return order[:k]


def pivot_pairs(n: int, pivots: Sequence[int]) -> list[Pair]:
    """Every non-pivot vs pivot pair (non-pivot in slot A), then every pivot vs pivot pair."""
    pset = set(pivots)
    pairs = [(i, p) for i in range(n) if i not in pset for p in pivots]
    pairs += [(pivots[a], pivots[b]) for a in range(len(pivots)) for b in range(a + 1, len(pivots))]
    return pairs


def round_robin_pairs(n: int) -> list[Pair]:
    """All ``n(n-1)/2`` unordered pairs ``(i, j)``, ``i < j``."""
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def _accumulate(
    n: int, pairs: Sequence[Pair], prefs: Sequence[float | None]
) -> tuple[np.ndarray, np.ndarray]:
    wins = np.zeros(n)
    counts = np.zeros(n)
    for (a, b), p in zip(pairs, prefs, strict=True):
        if p is None:
            continue
        wins[a] += p
        wins[b] += 1.0 - p
        counts[a] += 1
        counts[b] += 1
    return wins, counts


def aggregate(
    n: int, pairs: Sequence[Pair], prefs: Sequence[float | None], pivots: Sequence[int] = ()
) -> RankResult:
    """Soft wins ``w_i``, counts ``c_i`` and win rates ``w_i / c_i`` over decided comparisons.

    The winner is ``argmax w_i / c_i`` (lowest index on ties; candidates with no decided
    comparison have NaN win rate and rank last).
    """
    wins, counts = _accumulate(n, pairs, prefs)
    rate = np.divide(wins, counts, out=np.full(n, np.nan), where=counts > 0)
    key = np.where(np.isnan(rate), -np.inf, rate)
    order = tuple(sorted(range(n), key=lambda i: (-key[i], i)))
    return RankResult(
        winner=order[0],
        win_rate=rate,
        wins=wins,
        counts=counts,
        n_comparisons=len(pairs),
        n_abstained=sum(p is None for p in prefs),
        pivots=tuple(pivots),
        order=order,
    )


Schedule = Generator[list[Pair], Sequence["float | None"], RankResult]
"""A tournament as a generator: it yields a batch of ``(a, b)`` index pairs, is sent back
``p(a > b)`` for each (``None`` = abstained), and returns the :class:`RankResult`."""


def ppt_schedule(n: int, k: int, *, seed: int = 0) -> Schedule:
    """Probabilistic Pivot Tournament over ``n`` candidates with ``k`` pivots, as a generator.

    Yields two batches: the ring pass (``n`` pairs of a random Hamiltonian cycle), then every
    non-pivot-vs-pivot and pivot-vs-pivot pair among the top-``k`` of the ring (none when
    there is nothing left to compare). Drive it with :func:`run_tournament`, or send the
    preferences yourself (the verifier engine runs each batch as one batched model call).

    Args:
        n: number of candidates, ``>= 1``.
        k: number of pivots, ``0 <= k <= n``.
        seed: seed of the random Hamiltonian cycle.

    Returns:
        (as the generator's return value) :class:`RankResult` with
        ``n_comparisons == ppt_comparison_count(n, k)``.

    Raises:
        DataError: on the first ``next()``, if ``n < 1`` or ``k`` is outside ``[0, n]``.

    >>> sched = ppt_schedule(3, 1, seed=0)
    >>> ring = next(sched); len(ring)
    3
    >>> rest = sched.send([1.0, 0.0, 0.5]); len(rest)
    2
    """
    if n < 1:
        raise DataError(f"rank needs at least one candidate, got {n}")
    if not 0 <= k <= n:
        raise DataError(f"pivots must be in [0, {n}] for {n} candidates, got {k}")
    if n == 1:
        return aggregate(1, [], [])
    rng = np.random.default_rng(seed)
    ring = ring_pairs(n, rng)
    ring_prefs = list((yield ring))
    pivots = select_pivots(n, k, ring, ring_prefs)
    rest = pivot_pairs(n, pivots)
    rest_prefs = list((yield rest)) if rest else []
    return aggregate(n, ring + rest, ring_prefs + rest_prefs, pivots)


def round_robin_schedule(n: int) -> Schedule:
    """Full round robin as a generator: one batch of every unordered pair (``n(n-1)/2``).

    Raises:
        DataError: on the first ``next()``, if ``n < 1``.
    """
    if n < 1:
        raise DataError(f"rank needs at least one candidate, got {n}")
    pairs = round_robin_pairs(n)
    prefs = list((yield pairs)) if pairs else []
    return aggregate(n, pairs, prefs)


def run_tournament(schedule: Schedule, compare: CompareFn) -> RankResult:
    """Drive a tournament ``schedule`` with a synchronous ``compare`` (pairs -> preferences).

    >>> res = run_tournament(round_robin_schedule(3), lambda pairs: [1.0 if a < b else 0.0 for a, b in pairs])
    >>> res.winner, res.order
    (0, (0, 1, 2))
    """
    try:
        pairs = next(schedule)
        while True:
            pairs = schedule.send(list(compare(pairs)))
    except StopIteration as stop:
        return stop.value


def run_ppt(n: int, k: int, compare: CompareFn, *, seed: int = 0) -> RankResult:
    """PPT (:func:`ppt_schedule`) with a synchronous ``compare``, called once per batch."""
    return run_tournament(ppt_schedule(n, k, seed=seed), compare)


def run_round_robin(n: int, compare: CompareFn) -> RankResult:
    """Full round robin (:func:`round_robin_schedule`) with a synchronous ``compare``."""
    return run_tournament(round_robin_schedule(n), compare)
