"""When verification pays off: verifier gain, verified test-time scaling, rejection sampling.

* Verifier gain (Lu et al. 2025, "When Does Verification Pay Off?", arXiv 2512.02304,
  eq. 1): ``gain = precision - solver accuracy``, the accuracy a solver gains by resampling
  until the verifier accepts. In closed form (their Appendix A, Bayes' rule):
  ``precision = a TPR / (a TPR + (1 - a) FPR)`` with ``a`` the solver accuracy.
* Verification-augmented test-time scaling (Zhou et al. 2025, "Variation in Verification",
  arXiv 2509.17995, eqs. 5 and 6): per problem, the fraction of correct responses among the
  K responses the verifier accepts (the plain pass rate when it rejects all K), averaged over
  problems; the verification gain is that minus the mean problem pass rate
  (:func:`mean_problem_pass_rate`, also a mean over problems, not the pooled fraction correct).

The test-time-scaling functions (:func:`tts_pass_rate`, :func:`tts_verification_gain`,
:func:`simulate_rejection_sampling`) take every response a solver produced: a score of
``None`` / ``NaN`` is an abstention, which counts as a reject (a deployed solver would not
accept a response its verifier could not score), and the response stays in its problem's
base pass rate and among the draws.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from ..errors import DataError
from ._arrays import (
    NAN,
    accept_or_reject,
    as_arrays,
    check_group_ids,
    group_codes,
    group_indices,
)
from .classification import precision

__all__ = [
    "verifier_gain",
    "precision_from_rates",
    "verifier_gain_from_rates",
    "mean_problem_pass_rate",
    "tts_pass_rate",
    "tts_verification_gain",
    "gap_closed",
    "simulate_rejection_sampling",
]


def verifier_gain(scores, labels, threshold: float = 0.5, *, soft: bool = False) -> float:
    """Verifier gain ``precision - solver accuracy`` (Lu et al. 2025, arXiv 2512.02304, eq. 1).

    The solver accuracy is ``mean(labels)`` over the same responses.

    >>> verifier_gain([0.9, 0.8, 0.2, 0.7], [1, 1, 0, 0])
    0.16666666666666663

    Returns:
        A value in ``[-1, 1]``; ``NaN`` when the verifier accepts nothing.

    Raises:
        DataError: on malformed input.
    """
    s, y = as_arrays(scores, labels)
    if y.size == 0:
        return NAN
    return precision(s, y, threshold, soft=soft) - float(y.mean())


def precision_from_rates(solver_accuracy: float, tpr: float, fpr: float) -> float:
    """Precision from accuracy and error rates, ``a TPR / (a TPR + (1 - a) FPR)``.

    Bayes' rule, Lu et al. 2025 (arXiv 2512.02304), Appendix A.

    >>> precision_from_rates(0.5, 0.8, 0.2)
    0.8

    Args:
        solver_accuracy: ``a = P(correct)`` in ``[0, 1]``.
        tpr: ``P(V = 1 | correct)`` in ``[0, 1]``.
        fpr: ``P(V = 1 | incorrect)`` in ``[0, 1]``.

    Returns:
        Precision in ``[0, 1]``; ``NaN`` when nothing is accepted (denominator 0) or an input is NaN.

    Raises:
        DataError: if an input lies outside ``[0, 1]``.
    """
    for name, v in (("solver_accuracy", solver_accuracy), ("tpr", tpr), ("fpr", fpr)):
        if not math.isnan(v) and not 0.0 <= v <= 1.0:
            raise DataError(f"{name} must be in [0, 1], got {v}")
    den = solver_accuracy * tpr + (1.0 - solver_accuracy) * fpr
    if math.isnan(den) or den == 0:
        return NAN
    return solver_accuracy * tpr / den


def verifier_gain_from_rates(solver_accuracy: float, tpr: float, fpr: float) -> float:
    """Closed-form verifier gain ``precision_from_rates(a, TPR, FPR) - a`` (Lu et al. 2025, eq. 1 + App. A).

    >>> round(verifier_gain_from_rates(0.5, 0.8, 0.2), 6)
    0.3

    Raises:
        DataError: if an input lies outside ``[0, 1]``.
    """
    return precision_from_rates(solver_accuracy, tpr, fpr) - solver_accuracy


def mean_problem_pass_rate(labels, problem_ids: Sequence[Hashable]) -> float:
    """Mean problem pass rate: per problem the fraction of correct responses, averaged over problems.

    The base of the verified pass rate (:func:`tts_pass_rate`, Zhou et al. 2025 eq. 5), which
    is also a mean over problems. Not the *pooled* pass rate (the fraction of all responses
    that are correct, ``classification_report(...)["pass_rate"]``): the two differ when
    problems have different numbers of responses.

    >>> mean_problem_pass_rate([1, 1, 0, 0], ["a", "a", "a", "b"])
    0.3333333333333333

    Args:
        labels: 0/1 correctness, shape ``(n,)``.
        problem_ids: problem of each response, shape ``(n,)``.

    Returns:
        A value in ``[0, 1]``; ``NaN`` for empty input.

    Raises:
        DataError: on malformed input.
    """
    _, y = as_arrays(np.zeros(len(labels)), labels)
    codes = _codes(problem_ids, y.size)
    if y.size == 0:
        return NAN
    return float(np.mean(np.bincount(codes, weights=y) / np.bincount(codes)))


def _codes(problem_ids: Sequence[Hashable], n: int) -> np.ndarray:
    check_group_ids(problem_ids, n)
    return group_codes(problem_ids)


def _groups(problem_ids: Sequence[Hashable], n: int) -> dict[Hashable, np.ndarray]:
    check_group_ids(problem_ids, n)
    return group_indices(problem_ids)


def tts_pass_rate(
    scores, labels, problem_ids: Sequence[Hashable], threshold: float = 0.5, *, soft: bool = False
) -> float:
    """Verification-augmented pass rate (Zhou et al. 2025, arXiv 2509.17995, eq. 5).

    For each problem x with K responses and accept decisions ``V_k``:
    ``pass_V(x) = sum_k V_k y_k / sum_k V_k`` if ``sum_k V_k > 0``, else the plain pass rate
    ``mean_k y_k`` (the verifier rejected all K, so the solver falls back to sampling).
    The result is the mean of ``pass_V(x)`` over problems.

    >>> tts_pass_rate([0.9, 0.1, 0.2, 0.3], [1, 0, 1, 0], ["a", "a", "b", "b"])
    0.75

    (Problem ``a``: only the correct response is accepted -> 1; problem ``b``: all rejected ->
    fallback 1/2.) An abstained response (``None``) is rejected and stays in the fallback:

    >>> tts_pass_rate([0.9, None, None, 0.3], [1, 0, 1, 0], ["a", "a", "b", "b"])
    0.75

    Returns:
        A value in ``[0, 1]``; ``NaN`` for empty input.

    Raises:
        DataError: on malformed input.
    """
    y, v = accept_or_reject(scores, labels, threshold, soft)
    codes = _codes(problem_ids, y.size)
    if y.size == 0:
        return NAN
    n_acc = np.bincount(codes, weights=v)
    verified = np.bincount(codes, weights=v * y) / np.where(n_acc > 0, n_acc, 1.0)
    plain = np.bincount(codes, weights=y) / np.bincount(codes)
    return float(np.mean(np.where(n_acc > 0, verified, plain)))


def tts_verification_gain(
    scores, labels, problem_ids: Sequence[Hashable], threshold: float = 0.5, *, soft: bool = False
) -> float:
    """Verification gain of test-time scaling, ``pass_V - pass`` (Zhou et al. 2025, eq. 6).

    ``pass`` is :func:`mean_problem_pass_rate`, ``pass_V`` :func:`tts_pass_rate`, both over
    every response (an abstained one, score ``None``, is a reject).

    Raises:
        DataError: on malformed input.
    """
    return tts_pass_rate(scores, labels, problem_ids, threshold, soft=soft) - (
        mean_problem_pass_rate(labels, problem_ids)
    )


def gap_closed(
    weak_pass_rate: float, weak_verified_pass_rate: float, strong_pass_rate: float
) -> float:
    """Share of the weak-to-strong generator gap that verification closes.

    ``(pass_V(weak) - pass(weak)) / (pass(strong) - pass(weak))``: 1 means the verified
    weak generator matches the unverified strong one (Zhou et al. 2025, sec. 5).

    >>> round(gap_closed(0.2, 0.35, 0.5), 6)
    0.5

    Returns:
        The share (can be negative or exceed 1); ``NaN`` when the two pass rates are equal.
    """
    gap = strong_pass_rate - weak_pass_rate
    if math.isnan(gap) or gap == 0:
        return NAN
    return (weak_verified_pass_rate - weak_pass_rate) / gap


def simulate_rejection_sampling(
    scores,
    labels,
    problem_ids: Sequence[Hashable],
    *,
    max_attempts: int = 8,
    threshold: float = 0.5,
    n_trials: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """Simulate "resample until the verifier accepts" and compare with the verifier gain.

    For each problem and trial, responses are drawn uniformly with replacement from that
    problem's pool until one is accepted (``score >= threshold``) or ``max_attempts`` (M)
    draws are spent; then the last draw is kept. An abstained response (score ``None`` /
    ``NaN``) is in the pool and is rejected when drawn. As M grows the empirical accuracy tends to
    the per-problem precision, so ``empirical_gain`` approaches the verifier gain of
    Lu et al. 2025 (eq. 1) computed per problem (``expected_gain_infinite_m``).

    Args:
        scores: shape ``(n,)``; ``None`` / ``NaN`` = abstained (a reject).
        labels: shape ``(n,)``.
        problem_ids: shape ``(n,)``.
        max_attempts: M >= 1.
        threshold: accept threshold.
        n_trials: simulated runs per problem.
        seed: RNG seed.

    Returns:
        ``{"accuracy", "base_accuracy", "empirical_gain", "expected_gain_infinite_m",
        "verifier_gain", "acceptance_rate", "mean_attempts", "max_attempts", "n_problems"}``,
        where ``base_accuracy`` is the mean problem pass rate, ``acceptance_rate`` the fraction of
        runs ending on an accepted draw, ``verifier_gain`` the pooled eq. 1 value (precision
        of the accepted responses minus the pass rate of all of them).

    Raises:
        DataError: on malformed input or ``max_attempts < 1``.
    """
    if max_attempts < 1 or n_trials < 1:
        raise DataError("max_attempts and n_trials must be >= 1")
    y, v = accept_or_reject(scores, labels, threshold)
    groups = _groups(problem_ids, y.size)
    if not groups:
        return {
            k: NAN
            for k in (
                "accuracy",
                "base_accuracy",
                "empirical_gain",
                "expected_gain_infinite_m",
                "verifier_gain",
                "acceptance_rate",
                "mean_attempts",
            )
        } | {"max_attempts": float(max_attempts), "n_problems": 0.0}
    rng = np.random.default_rng(seed)
    acc, accepted_runs, attempts, expected = [], [], [], []
    for ix in groups.values():
        draws = rng.integers(0, ix.size, size=(n_trials, max_attempts))
        vd = v[ix][draws]  # (trials, M)
        any_acc = vd.max(axis=1) > 0
        first = np.where(any_acc, vd.argmax(axis=1), max_attempts - 1)
        chosen = draws[np.arange(n_trials), first]
        acc.append(y[ix][chosen].mean())
        accepted_runs.append(any_acc.mean())
        attempts.append((first + 1).mean())
        n_acc = v[ix].sum()
        expected.append((v[ix] * y[ix]).sum() / n_acc if n_acc > 0 else y[ix].mean())
    base = mean_problem_pass_rate(y, problem_ids)
    accuracy = float(np.mean(acc))
    return {
        "accuracy": accuracy,
        "base_accuracy": base,
        "empirical_gain": accuracy - base,
        "expected_gain_infinite_m": float(np.mean(expected)) - base,
        "verifier_gain": (float((v * y).sum() / v.sum()) - float(y.mean())) if v.sum() else NAN,
        "acceptance_rate": float(np.mean(accepted_runs)),
        "mean_attempts": float(np.mean(attempts)),
        "max_attempts": float(max_attempts),
        "n_problems": float(len(groups)),
    }
