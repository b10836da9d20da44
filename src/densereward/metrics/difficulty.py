"""Problem difficulty, difficulty bins, per-group metrics and the balanced evaluation protocol.

Difficulty follows Zhou et al. 2025 ("Variation in Verification", arXiv 2509.17995, eq. 3):
``d(x) = (1/|G|) sum_g pass_g(x)``, the pass rate of problem x averaged over a set of
generators G. It is a pass rate, so **higher means easier**; bin 0 holds the hardest problems.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..errors import DataError
from ._arrays import as_arrays, group_indices
from .classification import tnr, tpr
from .report import classification_report

__all__ = [
    "problem_difficulty",
    "difficulty_quartiles",
    "difficulty_bins",
    "bin_labels",
    "per_group",
    "balanced_subsample",
    "per_generator_balanced",
]

NAN = float("nan")


def problem_difficulty(
    labels, problem_ids: Sequence[Hashable], generators: Sequence[Hashable] | None = None
) -> dict[Hashable, float]:
    """Difficulty ``d(x)`` = mean over generators of each generator's pass rate on x (Zhou et al. 2025, eq. 3).

    Args:
        labels: 0/1 correctness, shape ``(n,)``.
        problem_ids: problem of each response, shape ``(n,)``.
        generators: generator of each response, shape ``(n,)``; ``None`` treats all
            responses as one generator (``d(x)`` = plain pass rate of x).

    Returns:
        ``{problem_id: d(x)}`` with ``d`` in ``[0, 1]`` (1 = every generator always right).

    Raises:
        DataError: on malformed input or length mismatch.

    >>> problem_difficulty([1, 1, 1, 0, 0, 0], ["a", "a", "a", "b", "b", "b"], ["g", "g", "h", "g", "h", "h"])
    {'a': 1.0, 'b': 0.0}
    >>> problem_difficulty([1, 0, 0], ["a", "a", "a"], ["g", "h", "h"])
    {'a': 0.5}
    """
    _, y = as_arrays(np.zeros(len(labels)), labels)
    gens = list(generators) if generators is not None else [None] * y.size
    if len(problem_ids) != y.size or len(gens) != y.size:
        raise DataError("labels, problem_ids and generators must have the same length")
    out: dict[Hashable, float] = {}
    for pid, ix in group_indices(problem_ids).items():
        by_gen = group_indices([gens[i] for i in ix])
        out[pid] = float(np.mean([y[ix[j]].mean() for j in by_gen.values()]))
    return out


def difficulty_quartiles(
    difficulty: Sequence[float] | np.ndarray, n_bins: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """Assign each value to a quantile bin (quartiles by default); bin 0 = lowest pass rate (hardest).

    Edges are the empirical quantiles ``q_0 .. q_B``; value ``d`` goes to the first bin whose
    upper edge is ``>= d``. With many ties (e.g. d in {0, 0.25, ..., 1} for 4 generators with
    one response each) some bins can be empty: ties are never split across bins.

    >>> b, e = difficulty_quartiles([0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.8, 1.0])
    >>> b.tolist()
    [0, 0, 1, 1, 2, 2, 3, 3]

    Returns:
        ``(bins (n,) int, edges (B+1,))``.

    Raises:
        DataError: for empty input, NaN values or ``n_bins < 1``.
    """
    d = np.asarray(difficulty, dtype=np.float64).reshape(-1)
    if d.size == 0 or not np.all(np.isfinite(d)) or n_bins < 1:
        raise DataError("difficulty_quartiles needs a non-empty finite array and n_bins >= 1")
    edges = np.quantile(d, np.linspace(0.0, 1.0, n_bins + 1))
    bins = np.searchsorted(edges[1:], d, side="left")
    return np.minimum(bins, n_bins - 1).astype(np.int64), edges


def difficulty_bins(
    difficulty: Sequence[float] | np.ndarray, n_bins: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """Equal-width bins on ``[0, 1]``: ``[0, 1/B), ..., [(B-1)/B, 1]``; bin 0 = hardest.

    >>> difficulty_bins([0.0, 0.25, 0.5, 0.99, 1.0])[0].tolist()
    [0, 1, 2, 3, 3]

    Returns:
        ``(bins (n,) int, edges (B+1,))``.

    Raises:
        DataError: for values outside ``[0, 1]`` or ``n_bins < 1``.
    """
    d = np.asarray(difficulty, dtype=np.float64).reshape(-1)
    if n_bins < 1 or not np.all(np.isfinite(d)) or (d.size and (d.min() < 0 or d.max() > 1)):
        raise DataError("difficulty_bins needs values in [0, 1] and n_bins >= 1")
    return np.minimum((d * n_bins).astype(np.int64), n_bins - 1), np.linspace(0.0, 1.0, n_bins + 1)


def bin_labels(edges: np.ndarray, prefix: str = "Q") -> list[str]:
    """Human-readable bin names, e.g. ``Q1 [0.00, 0.25]`` (bin 0 = hardest)."""
    return [f"{prefix}{i + 1} [{edges[i]:.2f}, {edges[i + 1]:.2f}]" for i in range(len(edges) - 1)]


def per_group(
    scores,
    labels,
    groups: Sequence[Hashable],
    fn: Callable[..., Any] = classification_report,
    **kwargs: Any,
) -> dict[Hashable, Any]:
    """Apply a metric function to each group (generator, difficulty bin, ...) separately.

    Args:
        scores: shape ``(n,)``.
        labels: shape ``(n,)``.
        groups: group of each response, shape ``(n,)``.
        fn: ``fn(scores, labels, **kwargs)``; default :func:`classification_report`.
        **kwargs: passed to ``fn``.

    Returns:
        ``{group: fn(...)}`` in first-seen group order.

    Raises:
        DataError: on malformed input or length mismatch.
    """
    s, y = as_arrays(scores, labels)
    if len(groups) != y.size:
        raise DataError(f"groups has {len(groups)} entries, expected {y.size}")
    return {g: fn(s[ix], y[ix], **kwargs) for g, ix in group_indices(groups).items()}


def balanced_subsample(
    labels, problem_ids: Sequence[Hashable], *, max_per_problem: int = 8, seed: int = 0
) -> np.ndarray:
    """Indices of the balanced evaluation set of Zhou et al. 2025 (sec. 4).

    Per problem up to ``max_per_problem`` (8) responses: ``max_per_problem // 2`` correct and
    as many incorrect when possible; when one class is short the other fills the free slots.

    >>> idx = balanced_subsample([1] * 6 + [0] * 2, ["p"] * 8, max_per_problem=4)
    >>> len(idx), sorted(idx.tolist())[-2:]  # 2 of the 6 correct + both incorrect
    (4, [6, 7])

    Returns:
        Sorted indices into the inputs, shape ``(m,)``.

    Raises:
        DataError: on malformed input.
    """
    _, y = as_arrays(np.zeros(len(labels)), labels)
    if len(problem_ids) != y.size:
        raise DataError("labels and problem_ids must have the same length")
    if max_per_problem < 1:
        raise DataError("max_per_problem must be >= 1")
    rng = np.random.default_rng(seed)
    half = max_per_problem // 2
    keep: list[int] = []
    for ix in group_indices(problem_ids).values():
        pos = rng.permutation(ix[y[ix] == 1])
        neg = rng.permutation(ix[y[ix] == 0])
        n_pos = min(pos.size, max(half, max_per_problem - neg.size))
        n_neg = min(neg.size, max_per_problem - n_pos)
        keep.extend(pos[:n_pos].tolist() + neg[:n_neg].tolist())
    return np.asarray(sorted(keep), dtype=np.int64)


def per_generator_balanced(
    scores,
    labels,
    problem_ids: Sequence[Hashable],
    generators: Sequence[Hashable],
    *,
    threshold: float = 0.5,
    n_repeats: int = 8,
    seed: int = 0,
) -> dict[Hashable, dict[str, float]]:
    """Per-generator TPR/TNR on a shared problem set (Zhou et al. 2025, sec. 4 protocol).

    TPR uses the problems where *every* generator has at least one correct response, TNR the
    problems where every generator has at least one incorrect one, so generators are compared
    on the same problems. For each repeat, one response of the needed class is sampled per
    problem and generator; the rates are averaged over ``n_repeats`` (8) repeats.

    Returns:
        ``{generator: {"tpr", "tpr_std", "tnr", "tnr_std", "balanced_accuracy",
        "n_problems_tpr", "n_problems_tnr"}}``; rates are ``NaN`` when no problem qualifies.

    Raises:
        DataError: on malformed input or length mismatch.
    """
    s, y = as_arrays(scores, labels)
    if len(problem_ids) != y.size or len(generators) != y.size:
        raise DataError("scores, labels, problem_ids and generators must have the same length")
    gen_names = list(group_indices(generators))
    rng = np.random.default_rng(seed)
    # (problem, generator) -> indices of correct / incorrect responses
    cells: dict[tuple[Hashable, Hashable], list[int]] = {}
    for i, (p, g) in enumerate(zip(problem_ids, generators, strict=True)):
        cells.setdefault((p, g), []).append(i)
    problems = list(group_indices(problem_ids))
    out: dict[Hashable, dict[str, float]] = {g: {} for g in gen_names}
    for key, cls, metric in (("tpr", 1.0, tpr), ("tnr", 0.0, tnr)):
        pools = {}
        for p in problems:
            per_gen = {g: [i for i in cells.get((p, g), []) if y[i] == cls] for g in gen_names}
            if all(per_gen.values()):
                pools[p] = per_gen
        for g in gen_names:
            vals = []
            if pools:
                for _ in range(n_repeats):
                    picked = [pool[g][rng.integers(len(pool[g]))] for pool in pools.values()]
                    vals.append(metric(s[picked], y[picked], threshold))
            out[g][key] = float(np.mean(vals)) if vals else NAN
            out[g][f"{key}_std"] = float(np.std(vals)) if vals else NAN
            out[g][f"n_problems_{key}"] = float(len(pools))
    for g in gen_names:
        a, b = out[g]["tpr"], out[g]["tnr"]
        out[g]["balanced_accuracy"] = NAN if math.isnan(a) or math.isnan(b) else 0.5 * (a + b)
    return out
