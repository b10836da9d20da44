"""From a backend's log-probabilities to a score: one read, then eq. 1 over the reads.

A *read* is the verifier's next-token distribution at one score position, summed over every
spelling of each of the G score levels and renormalised (:func:`distribution_from_logprobs`,
:func:`read_distribution`). A score is the mean over C criteria x K repeats of the expected
value of those distributions (Kwok et al. 2026, eq. 1; :func:`aggregate_reads`):

    R(x, tau) = 1/(C K) * sum_c sum_k sum_g p(v_g | x, c, tau) * phi(v_g)

normalised to ``[0, 1]``. A read with no probability mass on the score tokens, or less than
``VerifierConfig.min_mass``, abstains; a score with no usable read abstains (``value=None``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import prompts as P
from ..backends.base import TokenLogprobs
from ..errors import AbstentionError
from ..results import EMPTY_RESPONSE, PairwiseResult, ScoreResult
from ..scale import ScoreScale

__all__ = [
    "VerifierStats",
    "Read",
    "distribution_from_logprobs",
    "read_distribution",
    "aggregate_reads",
    "short_circuit_pair",
    "prepare_candidate",
]


@dataclass
class VerifierStats:
    """Call and quality accounting of one :class:`Verifier` (no module-level state).

    ``mean_mass`` is the mean probability on score tokens over reads that reported one.
    ``n_low_mass`` counts reads that abstained because their score-token mass was below
    ``VerifierConfig.min_mass``; ``n_unread_no_answer`` counts reference-guided
    (``answer_match``) candidates with no extractable final answer, scored 0 without a model
    call (also counted in ``n_scored``, as ``n_empty``'s empty candidates are); under any other
    prompt it stays 0, however many candidates lack a final answer.
    """

    n_scored: int = 0
    n_abstained: int = 0
    n_empty: int = 0
    n_invalid_input: int = 0
    n_truncated: int = 0
    n_reads: int = 0
    n_cache_hits: int = 0
    n_backend_calls: int = 0
    n_failures: int = 0
    n_nan_logprobs: int = 0
    n_partial_reads: int = 0
    n_low_mass: int = 0
    n_unread_no_answer: int = 0
    seconds: float = 0.0
    mass_sum: float = 0.0
    n_mass: int = 0

    @property
    def mean_mass(self) -> float:
        return self.mass_sum / self.n_mass if self.n_mass else float("nan")

    def as_dict(self) -> dict[str, float]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("mass_sum", "n_mass")}
        d["mean_mass"] = self.mean_mass
        return d


@dataclass
class Read:
    """The distribution read at one score position (or why there is none).

    Attributes:
        dist: ``(G,)`` renormalised distribution over the score levels, or ``None``.
        mass: probability on the score tokens before renormalising, in ``[0, 1]``; ``None``
            when unknown (restricted reads, failures).
        exact, sampled: as :class:`~densereward.backends.base.TokenLogprobs`.
        reason: why ``dist`` is ``None``.
        n_nan: NaN log-probabilities ignored.
    """

    dist: np.ndarray | None
    mass: float | None
    exact: bool = True
    sampled: bool = False
    reason: str | None = None
    n_nan: int = 0


def distribution_from_logprobs(
    tl: TokenLogprobs, scale: ScoreScale, spellings: Sequence[Sequence[str]] | None = None
) -> tuple[np.ndarray | None, float, int]:
    """Sum the probabilities of every spelling of each level and renormalise.

    Args:
        tl: the backend's answer for one prompt.
        scale: the score scale (G levels).
        spellings: per level, the spellings to sum (default ``scale.spellings``).

    Returns:
        ``(dist, mass, n_nan)``: ``dist`` the ``(G,)`` renormalised distribution or ``None``
        when no score token has positive finite mass; ``mass`` the summed probability before
        renormalising (in ``[0, 1]``); ``n_nan`` how many NaN log-probabilities were ignored.

    >>> s = ScoreScale.letters(2)
    >>> d, m, _ = distribution_from_logprobs(TokenLogprobs({"A": math.log(0.1), " A": math.log(0.1), "B": math.log(0.2)}), s)
    >>> [float(round(x, 3)) for x in d], round(m, 3)
    ([0.5, 0.5], 0.4)
    """
    spellings = spellings or scale.spellings
    p = np.zeros(scale.granularity)
    n_nan = 0
    for g, forms in enumerate(spellings):
        for s in forms:
            lp = tl.logprobs.get(s)
            if lp is None:
                continue
            if isinstance(lp, float) and math.isnan(lp):
                n_nan += 1
                continue
            if lp > 0:  # a log-probability above 0 is malformed; clip to probability 1
                lp = 0.0
            p[g] += math.exp(lp) if lp != -math.inf else 0.0
    mass = float(p.sum())
    if not (mass > 0 and math.isfinite(mass)):
        return None, 0.0, n_nan
    return p / mass, min(mass, 1.0), n_nan


def read_distribution(
    answer: TokenLogprobs | Exception,
    scale: ScoreScale,
    spellings: Sequence[Sequence[str]],
    *,
    min_mass: float,
    stats: VerifierStats,
) -> Read:
    """One :class:`Read` from a backend's answer (or the error its call raised).

    Counts NaN log-probabilities, partial (top-k) reads, reported masses and low-mass
    abstentions in ``stats``. A read whose reported mass is below ``min_mass`` abstains
    (restricted reads report no mass and are not floored).
    """
    if isinstance(answer, Exception):
        return Read(None, None, reason=f"backend error: {type(answer).__name__}")
    dist, mass, n_nan = distribution_from_logprobs(answer, scale, spellings)
    stats.n_nan_logprobs += n_nan
    if not answer.exact:
        stats.n_partial_reads += 1
    if dist is None:
        return Read(
            None,
            None,
            exact=answer.exact,
            sampled=answer.sampled,
            reason="no probability mass on score tokens",
            n_nan=n_nan,
        )
    reported = None if answer.restricted else mass
    if reported is not None:
        stats.mass_sum += reported
        stats.n_mass += 1
        if reported < min_mass:
            # A model answering in prose at the score position leaves a few ppm on the
            # score tokens; renormalising them would be a confident score from noise.
            stats.n_low_mass += 1
            return Read(
                None,
                reported,
                exact=answer.exact,
                sampled=answer.sampled,
                reason=(
                    f"low score-token mass: {reported:.3g} < min_mass {min_mass:g}"
                    + ("" if answer.exact else " (top-k lower bound)")
                ),
                n_nan=n_nan,
            )
    return Read(dist, reported, exact=answer.exact, sampled=answer.sampled, n_nan=n_nan)


def aggregate_reads(
    reads: Sequence[Read],
    names: Sequence[str],
    n_repeats: int,
    scale: ScoreScale,
    stats: VerifierStats,
    *,
    truncated: bool,
) -> ScoreResult:
    """Eq. 1 over C criteria x K repeats (``reads`` criterion-major); abstained reads are skipped.

    Args:
        reads: ``(C * K,)`` reads, the K repeats of criterion 0 first.
        names: ``(C,)`` criterion names (keys of ``per_criterion``).
        n_repeats: K.
        scale: the score scale (``phi`` and the ``[0, 1]`` normalisation).
        stats: counts the result as scored or abstained.
        truncated: whether the candidate was truncated (copied to the result).

    Returns:
        :class:`ScoreResult`: ``value`` in ``[0, 1]``, the mean over criteria of each criterion's
        normalised expected score over its usable repeats (eq. 1 when every read is usable; an
        abstained read never reweights the criteria), or ``None`` when no read is usable
        (``reason`` lists why). A criterion with no usable read is left out of the mean and
        named in ``reason``; ``distribution`` is averaged the same way.
    """
    phi = scale.phi
    per_repeat: list[float | None] = []
    for r in reads:
        per_repeat.append(None if r.dist is None else scale.normalize(float(r.dist @ phi)))
    per_criterion: dict[str, float | None] = {}
    dists: list[np.ndarray] = []
    for c, name in enumerate(names):
        usable = [r.dist for r in reads[c * n_repeats : (c + 1) * n_repeats] if r.dist is not None]
        per_criterion[name] = (
            scale.normalize(float(np.mean(usable, axis=0) @ phi)) if usable else None
        )
        if usable:
            dists.append(np.mean(usable, axis=0))
    ok = [r for r in reads if r.dist is not None]
    common = dict(
        per_criterion=per_criterion,
        per_repeat=per_repeat,
        sampled=any(r.sampled for r in reads),
        exact=all(r.exact for r in reads),
        truncated=truncated,
    )
    if not ok:
        stats.n_abstained += 1
        reasons = sorted({r.reason or "abstained" for r in reads})
        low = [r.mass for r in reads if r.mass is not None]
        return ScoreResult(
            value=None,
            mass=float(np.mean(low)) if low else None,
            reason="; ".join(reasons),
            **common,
        )
    # Within a criterion over its usable repeats, then across criteria: an abstained read does
    # not shift weight between criteria. A criterion whose every read abstained is left out
    # (named in ``reason``); the score is the mean of the others.
    dist = np.mean(dists, axis=0)
    masses = [r.mass for r in ok if r.mass is not None]
    value = float(np.mean([v for v in per_criterion.values() if v is not None]))
    missing = [name for name, v in per_criterion.items() if v is None]
    reason = None
    if len(ok) < len(reads):
        reason = f"{len(reads) - len(ok)} of {len(reads)} reads abstained"
        if missing:
            reason += f"; criteria with no usable read, left out of the mean: {missing}"
    arg = int(np.argmax(dist))
    stats.n_scored += 1
    return ScoreResult(
        value=value,
        distribution=dist,
        mass=float(np.mean(masses)) if masses else None,
        argmax=arg,
        argmax_value=scale.normalize(scale.values[arg]),
        reason=reason,
        **common,
    )


def short_circuit_pair(
    sa: ScoreResult | None, sb: ScoreResult | None, *, raise_on_invalid: bool
) -> PairwiseResult:
    """A comparison decided without the model (``sa``/``sb``: short-circuit results or None).

    A non-string side abstains the comparison. An empty response loses to any non-empty one
    (preference 1.0 for the non-empty side, whose own value is not computed: ``None``); two
    empty responses tie at 0.5 (both are the worst possible answer).
    """
    invalid = [r for r in (sa, sb) if r is not None and r.value is None]
    if invalid:
        if raise_on_invalid:
            raise AbstentionError(f"verifier abstained on a comparison: {invalid[0].reason}")
        return PairwiseResult(
            value_a=None if sa is None else sa.value,
            value_b=None if sb is None else sb.value,
            preference=None,
            result_a=sa,
            result_b=sb,
        )
    if sa is not None and sb is not None:
        return PairwiseResult(value_a=0.0, value_b=0.0, preference=0.5, result_a=sa, result_b=sb)
    return PairwiseResult(
        value_a=None if sa is None else 0.0,
        value_b=None if sb is None else 0.0,
        preference=1.0 if sa is None else 0.0,
        result_a=sa,
        result_b=sb,
    )


def prepare_candidate(
    text: Any, stats: VerifierStats, max_chars: int
) -> tuple[str | None, ScoreResult | None, bool]:
    """Sanitise and truncate a candidate; short-circuit invalid or empty ones.

    Returns:
        ``(clean, short, truncated)``: ``short`` is the result decided without the model (a
        non-string abstains, counted in ``n_invalid_input``; an empty text is wrong, not
        unknown: ``0.0`` with reason ``empty response``), else ``None`` and ``clean`` the
        sanitised text, cut in the middle to about ``max_chars`` characters.
    """
    if not isinstance(text, str):
        stats.n_invalid_input += 1
        stats.n_abstained += 1
        reason = f"non-string response ({type(text).__name__})"
        return None, ScoreResult(value=None, reason=reason), False
    if not text.strip():
        stats.n_empty += 1
        stats.n_scored += 1
        return None, ScoreResult(value=0.0, mass=None, reason=EMPTY_RESPONSE), False
    clean, cut = P.truncate_middle(P.sanitize_candidate(text), max_chars)
    stats.n_truncated += int(cut)
    return clean, None, cut
