"""The verifier engine: fine-grained scores from score-token distributions.

Implements the continuous verifier reward of LLM-as-a-Verifier (Kwok et al. 2026). With G
ordered score tokens ``v_1..v_G`` with values ``phi(v_g)``, C criteria and K repeats:

    R(x, tau) = 1/(C K) * sum_c sum_k sum_g p(v_g | x, c, tau) * phi(v_g)        (eq. 1)

normalised to ``[0, 1]`` by ``(R - phi_min) / (phi_max - phi_min)``, where ``p`` is the
verifier's next-token distribution at the score position restricted to the score tokens
and renormalised. Every spelling of a score token (``"A"`` and ``" A"``) is summed into its
level. Where no score token has mass the engine abstains (``value=None``, counted).

All model I/O goes through one backend (:mod:`densereward.backends`); every method exists
as a sync and an ``a``-prefixed async variant built from the same plan, so both compute
identical numbers.

Example:
    >>> from densereward import Verifier                       # doctest: +SKIP
    >>> v = Verifier()                                          # embedded SmolLM2-135M  # doctest: +SKIP
    >>> r = v.score(problem="What is 7+5?", response="12")      # doctest: +SKIP
    >>> r.value, r.mass, r.argmax_value                          # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import prompts as P
from .backends.base import ChatPrompt, TokenLogprobs, VerifierBackend
from .cache import ScoreCache, cache_key
from .config import VerifierConfig
from .errors import AbstentionError, BackendError, ScoreTokenError
from .results import PairwiseResult, RankResult, ScoreResult
from .scale import ScoreScale
from .tournament import bradley_terry_preference, run_ppt, run_round_robin

__all__ = ["Verifier", "VerifierStats", "distribution_from_logprobs"]

logger = logging.getLogger(__name__)

Criteria = Sequence[str] | Mapping[str, str] | None


@dataclass
class VerifierStats:
    """Call and quality accounting of one :class:`Verifier` (no module-level state).

    ``mean_mass`` is the mean probability on score tokens over reads that reported one.
    ``n_low_mass`` counts reads that abstained because their score-token mass was below
    ``VerifierConfig.min_mass``; ``n_no_answer`` counts reference-guided (``answer_match``)
    candidates with no extractable final answer (scored 0 without a model call).
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
    n_no_answer: int = 0
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
class _Read:
    """The distribution read at one score position (or why there is none)."""

    dist: np.ndarray | None  # (G,) renormalised
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


def _seed_for(base: int, *parts: Any) -> int:
    return (base * 1_000_003 + zlib.crc32(repr(parts).encode())) % (2**31 - 1)


class Verifier:
    """Dense verifier rewards: ``score``, ``compare``, ``rank``, ``progress_batch``, ``track``.

    Args:
        config: how the reward is computed; default :class:`VerifierConfig` (embedded
            SmolLM2-135M-Instruct, transformers backend, G = 20 letters, direct style).
        backend: an already built backend (e.g. shared between verifiers); default builds the
            one named by ``config.backend``.
        scale: the score scale; default ``ScoreScale.letters(config.granularity)``.
        cache: a :class:`ScoreCache`; default one at ``config.cache_dir`` if set, else none.

    Raises:
        ScoreTokenError: when a score token is not exactly one token id of the verifier's
            tokenizer at the score position (names the token).
        BackendUnavailableError: when the backend cannot be loaded / reached.
    """

    def __init__(
        self,
        config: VerifierConfig | None = None,
        *,
        backend: VerifierBackend | None = None,
        scale: ScoreScale | None = None,
        cache: ScoreCache | None = None,
    ) -> None:
        self.config = config or VerifierConfig()
        self.scale = scale or ScoreScale.letters(self.config.granularity)
        if backend is None:
            from .backends import create_backend

            backend = create_backend(self.config)
        self.backend = backend
        self._owns_cache = cache is None and self.config.cache_dir is not None
        self.cache = (
            cache
            if cache is not None
            else (ScoreCache(self.config.cache_dir) if self.config.cache_dir else None)
        )
        self.stats = VerifierStats()
        self.spellings = self._check_score_tokens()
        self.candidates = [s for forms in self.spellings for s in forms]
        self.thinking = self._native_thinking()
        self.chat_template_kwargs = {
            "enable_thinking": self.thinking,
            **(self.config.chat_template_kwargs or {}),
        }

    def _native_thinking(self) -> bool:
        """Whether the reasoning style lets the model think in its own ``<think>`` block.

        Only in the reasoning style: ``verifier.chat_template_kwargs.enable_thinking`` if set,
        else whether the backend's chat template has Qwen3's thinking switch (in-process
        backends read it; HTTP backends cannot see the server's template and say ``None``).
        """
        if self.config.style != "reasoning":
            return False
        explicit = (self.config.chat_template_kwargs or {}).get("enable_thinking")
        if explicit is not None:
            return bool(explicit)
        return bool(getattr(self.backend, "thinking_template", False))

    # ------------------------------------------------------------------ set-up
    def _check_score_tokens(self) -> tuple[tuple[str, ...], ...]:
        """Keep, per level, the spellings that are single tokens; the canonical one must be."""
        kept: list[tuple[str, ...]] = []
        seen: dict[int, str] = {}
        for forms in self.scale.spellings:
            level: list[str] = []
            for i, s in enumerate(forms):
                ids = self.backend.tokenize(s)
                if ids is None:  # backend cannot tokenize (e.g. plain OpenAI): trust the strings
                    if i == 0 and not kept:
                        warnings.warn(
                            f"backend {self.backend.name!r} cannot tokenize; score tokens are not checked",
                            stacklevel=3,
                        )
                    level.append(s)
                    continue
                if len(ids) != 1:
                    if i == 0:
                        raise ScoreTokenError(
                            f"score token {s!r} maps to {len(ids)} token ids {ids} in the tokenizer of "
                            f"{self.backend.model_id!r}; pick single-token score tokens (e.g. a smaller granularity or another scale)"
                        )
                    continue  # an alternative spelling the tokenizer cannot produce as one token
                if ids[0] in seen:
                    if i == 0:
                        raise ScoreTokenError(
                            f"score token {s!r} has the same token id {ids[0]} as {seen[ids[0]]!r}"
                        )
                    continue
                seen[ids[0]] = s
                level.append(s)
            kept.append(tuple(level))
        return tuple(kept)

    # ------------------------------------------------------------ I/O drivers
    def _run(self, plan: Generator) -> Any:
        """Drive a plan with the backend's sync methods."""
        try:
            req = next(plan)
            while True:
                req = plan.send(self._io_sync(req))
        except StopIteration as stop:
            return stop.value

    async def _arun(self, plan: Generator) -> Any:
        """Drive a plan with the backend's async methods."""
        try:
            req = next(plan)
            while True:
                req = plan.send(await self._io_async(req))
        except StopIteration as stop:
            return stop.value

    def _chunks(self, items: Sequence[Any]) -> list[Sequence[Any]]:
        bs = max(1, self.config.batch_size)
        return [items[i : i + bs] for i in range(0, len(items), bs)]

    def _on_failure(self, err: Exception, n: int) -> list[Exception]:
        self.stats.n_failures += n
        if self.config.on_error == "raise":
            raise err
        logger.warning("verifier backend failed on %d prompt(s): %s", n, err)
        return [err] * n

    def _io_sync(self, req: tuple) -> list[Any]:
        kind, prompts, extra = req
        out: list[Any] = []
        t0 = time.perf_counter()
        for chunk in self._chunks(prompts):
            self.stats.n_backend_calls += 1
            try:
                if kind == "logprobs":
                    out.extend(self.backend.next_token_logprobs(list(chunk), self.candidates))
                else:
                    out.extend(
                        self._generate_sync(list(chunk), extra[len(out) : len(out) + len(chunk)])
                    )
            except BackendError as err:
                out.extend(self._on_failure(err, len(chunk)))
        self.stats.seconds += time.perf_counter() - t0
        return out

    async def _io_async(self, req: tuple) -> list[Any]:
        import asyncio

        kind, prompts, extra = req
        t0 = time.perf_counter()

        async def one(start: int, chunk: Sequence[ChatPrompt]) -> list[Any]:
            self.stats.n_backend_calls += 1
            try:
                if kind == "logprobs":
                    return list(
                        await self.backend.anext_token_logprobs(list(chunk), self.candidates)
                    )
                seeds = extra[start : start + len(chunk)]
                return [
                    (await self.backend.agenerate([p], **self._gen_kwargs(s)))[0]
                    for p, s in zip(chunk, seeds, strict=False)
                ]
            except BackendError as err:
                return self._on_failure(err, len(chunk))

        bs = max(1, self.config.batch_size)
        parts = await asyncio.gather(
            *(one(i, prompts[i : i + bs]) for i in range(0, len(prompts), bs))
        )
        self.stats.seconds += time.perf_counter() - t0
        return [x for part in parts for x in part]

    def _gen_kwargs(self, seed: int) -> dict[str, Any]:
        return {
            "max_new_tokens": self.config.max_reasoning_tokens,
            "temperature": self.config.reasoning_temperature,
            "seed": seed,
            "stop": (P.THINK_CLOSE,) if self.thinking else ("</analysis>", P.SCORE_PREFILL),
        }

    def _generate_sync(self, prompts: list[ChatPrompt], seeds: Sequence[int]) -> list[str]:
        # one call per prompt: each analysis has its own seed, so cached and uncached runs agree
        return [
            self.backend.generate([p], **self._gen_kwargs(s))[0]
            for p, s in zip(prompts, seeds, strict=False)
        ]

    # ------------------------------------------------------------- read plans
    def _key(self, kind: str, prompt: ChatPrompt, seed: int | None = None) -> str:
        return cache_key(
            kind=kind,
            backend=self.backend.name,
            model=self.backend.model_id,
            prompt=prompt.key(),
            candidates=self.candidates,
            seed=seed,
            gen=self._gen_kwargs(0) if kind == "generate" else None,
        )

    def _cached_io(
        self, kind: str, prompts: Sequence[ChatPrompt], seeds: Sequence[int | None]
    ) -> Generator:
        """Plan: answers for ``prompts`` from the cache, deduplicated, the rest from the backend."""
        keys = [self._key(kind, p, s) for p, s in zip(prompts, seeds, strict=False)]
        answers: dict[str, Any] = {}
        if self.cache is not None:
            for k in set(keys):
                hit = self.cache.get(k)
                if hit is not None:
                    answers[k] = hit
                    self.stats.n_cache_hits += 1
        todo: dict[str, tuple[ChatPrompt, int | None]] = {}
        for k, p, s in zip(keys, prompts, seeds, strict=False):
            if k not in answers and k not in todo:
                todo[k] = (p, s)
        if todo:
            got = yield (kind, [p for p, _ in todo.values()], [s for _, s in todo.values()])
            for k, a in zip(todo, got, strict=True):
                answers[k] = a
                if self.cache is not None and not isinstance(a, Exception):
                    self.cache.set(k, _to_cacheable(a))
        return [_from_cacheable(answers[k]) for k in keys]

    def _read_plan(self, prompts: Sequence[ChatPrompt], seeds: Sequence[int]) -> Generator:
        """Plan: one :class:`_Read` per prompt, in the configured style.

        Every prompt carries ``self.chat_template_kwargs``. Reasoning style: a thinking model
        (:attr:`thinking`) thinks in its own ``<think>`` block, bounded by
        ``max_reasoning_tokens``, and is read after ``</think>`` and the prefill; other models
        write an ``<analysis>`` first.
        """
        prompts = [
            dataclasses.replace(p, chat_template_kwargs=self.chat_template_kwargs) for p in prompts
        ]
        if self.config.style == "reasoning":
            first, then = (
                (P.thinking_prompt, P.with_thinking)
                if self.thinking
                else (P.reasoning_prompt, P.with_analysis)
            )
            stage1 = [first(p) for p in prompts]
            analyses = yield from self._cached_io("generate", stage1, seeds)
            prompts = [
                p if isinstance(a, Exception) else then(s1, a)
                for p, s1, a in zip(prompts, stage1, analyses, strict=False)
            ]
            failed = [isinstance(a, Exception) for a in analyses]
        else:
            failed = [False] * len(prompts)
        todo = [i for i, f in enumerate(failed) if not f]
        answers = yield from self._cached_io(
            "logprobs", [prompts[i] for i in todo], [None] * len(todo)
        )
        reads: list[_Read] = [_Read(None, None, reason="backend error")] * len(prompts)
        for i, a in zip(todo, answers, strict=False):
            reads[i] = self._to_read(a)
        self.stats.n_reads += len(prompts)
        return reads

    def _to_read(self, a: TokenLogprobs | Exception) -> _Read:
        if isinstance(a, Exception):
            return _Read(None, None, reason=f"backend error: {type(a).__name__}")
        dist, mass, n_nan = distribution_from_logprobs(a, self.scale, self.spellings)
        self.stats.n_nan_logprobs += n_nan
        if not a.exact:
            self.stats.n_partial_reads += 1
        if dist is None:
            return _Read(
                None,
                None,
                exact=a.exact,
                sampled=a.sampled,
                reason="no probability mass on score tokens",
                n_nan=n_nan,
            )
        reported = None if a.restricted else mass
        if reported is not None:
            self.stats.mass_sum += reported
            self.stats.n_mass += 1
            if reported < self.config.min_mass:
                # A model answering in prose at the score position leaves a few ppm on the
                # score tokens; renormalising them would be a confident score from noise.
                self.stats.n_low_mass += 1
                return _Read(
                    None,
                    reported,
                    exact=a.exact,
                    sampled=a.sampled,
                    reason=(
                        f"low score-token mass: {reported:.3g} < min_mass {self.config.min_mass:g}"
                        + ("" if a.exact else " (top-k lower bound)")
                    ),
                    n_nan=n_nan,
                )
        return _Read(dist, reported, exact=a.exact, sampled=a.sampled, n_nan=n_nan)

    # ------------------------------------------------------------- aggregation
    def _aggregate(
        self, reads: Sequence[_Read], names: Sequence[str], n_repeats: int, *, truncated: bool
    ) -> ScoreResult:
        """Eq. 1 over C criteria x K repeats (criterion-major); abstained reads are skipped."""
        phi = self.scale.phi
        per_repeat: list[float | None] = []
        for r in reads:
            per_repeat.append(None if r.dist is None else self.scale.normalize(float(r.dist @ phi)))
        per_criterion: dict[str, float | None] = {}
        for c, name in enumerate(names):
            vals = [v for v in per_repeat[c * n_repeats : (c + 1) * n_repeats] if v is not None]
            per_criterion[name] = float(np.mean(vals)) if vals else None
        ok = [r for r in reads if r.dist is not None]
        common = dict(
            per_criterion=per_criterion,
            per_repeat=per_repeat,
            sampled=any(r.sampled for r in reads),
            exact=all(r.exact for r in reads),
            truncated=truncated,
        )
        if not ok:
            self.stats.n_abstained += 1
            reasons = sorted({r.reason or "abstained" for r in reads})
            low = [r.mass for r in reads if r.mass is not None]
            return ScoreResult(
                value=None,
                mass=float(np.mean(low)) if low else None,
                reason="; ".join(reasons),
                **common,
            )
        dist = np.mean([r.dist for r in ok], axis=0)
        masses = [r.mass for r in ok if r.mass is not None]
        value = float(np.mean([v for v in per_repeat if v is not None]))
        arg = int(np.argmax(dist))
        self.stats.n_scored += 1
        return ScoreResult(
            value=value,
            distribution=dist,
            mass=float(np.mean(masses)) if masses else None,
            argmax=arg,
            argmax_value=self.scale.normalize(self.scale.values[arg]),
            reason=None
            if len(ok) == len(reads)
            else f"{len(reads) - len(ok)} of {len(reads)} reads abstained",
            **common,
        )

    def _prepare(self, text: Any) -> tuple[str | None, ScoreResult | None, bool]:
        """Sanitise and truncate a candidate; short-circuit invalid or empty ones (documented)."""
        if not isinstance(text, str):
            self.stats.n_invalid_input += 1
            self.stats.n_abstained += 1
            return (
                None,
                ScoreResult(value=None, reason=f"non-string response ({type(text).__name__})"),
                False,
            )
        if not text.strip():
            # An empty answer is wrong, not unknown: it gets the lowest score without a model call.
            self.stats.n_empty += 1
            self.stats.n_scored += 1
            return None, ScoreResult(value=0.0, mass=None, reason="empty response"), False
        clean = P.sanitize_candidate(text)
        clean, cut = P.truncate_middle(clean, self.config.max_response_chars)
        self.stats.n_truncated += int(cut)
        return clean, None, cut

    def _finalize(self, res: ScoreResult) -> ScoreResult:
        if res.value is None and self.config.on_error == "raise":
            raise AbstentionError(f"verifier abstained: {res.reason}")
        return res

    # ------------------------------------------------------------ score plans
    def _score_plan(
        self,
        problems: Sequence[str],
        responses: Sequence[Any],
        criteria: Criteria,
        references: Sequence[str | None] | None,
        *,
        progress: bool = False,
    ) -> Generator:
        if len(problems) != len(responses):
            raise ValueError(f"{len(problems)} problems but {len(responses)} responses")
        if references is not None and len(references) != len(problems):
            raise ValueError(f"{len(problems)} problems but {len(references)} references")
        chosen = criteria if criteria is not None else self.config.criteria
        # Reference-guided default: with reference answers and no configured criteria, the
        # built-in `answer_match` criterion compares the extracted final answer with the reference.
        answer_match = references is not None and chosen is None and not progress
        crit = P.normalize_criteria(
            chosen,
            P.DEFAULT_PROGRESS_CRITERIA
            if progress
            else (P.ANSWER_MATCH_CRITERIA if answer_match else P.DEFAULT_CRITERIA),
        )
        k_rep = self.config.n_repeats
        results: list[ScoreResult | None] = [None] * len(problems)
        prompts: list[ChatPrompt] = []
        seeds: list[int] = []
        owners: list[tuple[int, bool]] = []
        for i, (prob, resp) in enumerate(zip(problems, responses, strict=False)):
            clean, short, cut = self._prepare(resp)
            if short is not None:
                results[i] = short
                continue
            ref = references[i] if references is not None else None
            final = None
            if answer_match and ref is not None:
                final = P.extract_final_answer(resp)
                if final is None:
                    # No final answer (none stated, an unfinished last box, or unclosed
                    # thinking): it cannot match the reference -- the lowest score, no call.
                    self.stats.n_no_answer += 1
                    self.stats.n_scored += 1
                    results[i] = ScoreResult(value=0.0, mass=None, reason="no final answer")
                    continue
            prob = P.sanitize_candidate(str(prob))
            for desc in crit.values():
                if progress:
                    p = P.progress_prompt(self.scale, prob, clean, desc)
                elif final is not None:
                    p = P.answer_match_prompt(self.scale, str(ref), P.sanitize_candidate(final))
                else:
                    p = P.pointwise_prompt(self.scale, prob, clean, desc, reference=ref)
                for k in range(k_rep):
                    prompts.append(p)
                    seeds.append(_seed_for(self.config.seed, p.key(), k))
            owners.append((i, cut))
        reads = yield from self._read_plan(prompts, seeds)
        per_item = len(crit) * k_rep
        for j, (i, cut) in enumerate(owners):
            results[i] = self._aggregate(
                reads[j * per_item : (j + 1) * per_item], list(crit), k_rep, truncated=cut
            )
        return [self._finalize(r) for r in results]

    def _compare_plan(
        self,
        problems: Sequence[str],
        a: Sequence[Any],
        b: Sequence[Any],
        criteria: Criteria,
        references: Sequence[str | None] | None,
    ) -> Generator:
        if not len(problems) == len(a) == len(b):
            raise ValueError(
                f"compare needs equal lengths, got {len(problems)}, {len(a)}, {len(b)}"
            )
        crit = P.normalize_criteria(
            criteria if criteria is not None else self.config.criteria, P.DEFAULT_CRITERIA
        )
        k_rep = self.config.n_repeats
        out: list[PairwiseResult | None] = [None] * len(problems)
        prompts: list[ChatPrompt] = []
        seeds: list[int] = []
        owners: list[tuple[int, bool]] = []
        for i in range(len(problems)):
            ca, sa, cut_a = self._prepare(a[i])
            cb, sb, cut_b = self._prepare(b[i])
            if sa is not None or sb is not None:
                out[i] = self._short_pair(sa, sb)
                continue
            ref = references[i] if references is not None else None
            prob = P.sanitize_candidate(str(problems[i]))
            for desc in crit.values():
                for k in range(k_rep):
                    first, second = (ca, cb) if k % 2 == 0 else (cb, ca)  # repeats alternate slots
                    for target in ("A", "B"):
                        p = P.pairwise_prompt(
                            self.scale, prob, first, second, desc, target=target, reference=ref
                        )
                        prompts.append(p)
                        seeds.append(_seed_for(self.config.seed, p.key(), k))
            owners.append((i, cut_a or cut_b))
        reads = yield from self._read_plan(prompts, seeds)
        per_item = len(crit) * k_rep * 2
        for j, (i, cut) in enumerate(owners):
            chunk = reads[j * per_item : (j + 1) * per_item]
            reads_a, reads_b = [], []
            for r_idx in range(0, per_item, 2):
                k = (r_idx // 2) % k_rep
                slot_a, slot_b = chunk[r_idx], chunk[r_idx + 1]
                if k % 2 == 0:
                    reads_a.append(slot_a)
                    reads_b.append(slot_b)
                else:
                    reads_a.append(slot_b)
                    reads_b.append(slot_a)
            ra = self._aggregate(reads_a, list(crit), k_rep, truncated=cut)
            rb = self._aggregate(reads_b, list(crit), k_rep, truncated=cut)
            out[i] = self._pair(ra, rb)
        return out

    def _short_pair(self, sa: ScoreResult | None, sb: ScoreResult | None) -> PairwiseResult:
        """A comparison decided without the model (``sa``/``sb``: short-circuit results or None).

        A non-string side abstains the comparison. An empty response loses to any non-empty one
        (preference 1.0 for the non-empty side, whose own value is not computed: ``None``); two
        empty responses tie at 0.5 (both are the worst possible answer).
        """
        invalid = [r for r in (sa, sb) if r is not None and r.value is None]
        if invalid:
            if self.config.on_error == "raise":
                raise AbstentionError(f"verifier abstained on a comparison: {invalid[0].reason}")
            return PairwiseResult(
                value_a=None if sa is None else sa.value,
                value_b=None if sb is None else sb.value,
                preference=None,
                result_a=sa,
                result_b=sb,
            )
        if sa is not None and sb is not None:
            return PairwiseResult(
                value_a=0.0, value_b=0.0, preference=0.5, result_a=sa, result_b=sb
            )
        return PairwiseResult(
            value_a=None if sa is None else 0.0,
            value_b=None if sb is None else 0.0,
            preference=1.0 if sa is None else 0.0,
            result_a=sa,
            result_b=sb,
        )

    def _pair(self, ra: ScoreResult, rb: ScoreResult) -> PairwiseResult:
        pref = None
        if ra.value is not None and rb.value is not None:
            pref = bradley_terry_preference(ra.value, rb.value, self.config.beta)
        elif self.config.on_error == "raise":
            raise AbstentionError(f"verifier abstained on a comparison: {ra.reason or rb.reason}")
        return PairwiseResult(
            value_a=ra.value, value_b=rb.value, preference=pref, result_a=ra, result_b=rb
        )

    def _rank_plan(
        self,
        problem: str,
        candidates: Sequence[Any],
        pivots: int,
        method: str,
        seed: int | None,
        criteria: Criteria,
        reference: str | None,
    ) -> Generator:
        if method not in ("ppt", "round_robin"):
            raise ValueError(f"method must be 'ppt' or 'round_robin', got {method!r}")
        n = len(candidates)
        batches: list[list[tuple[int, int]]] = []
        # The tournaments are written against a synchronous compare(); record the pair batches
        # they ask for, run each batch through the plan, and replay.
        prefs_by_batch: list[list[float | None]] = []

        def compare(pairs: Sequence[tuple[int, int]]) -> list[float | None]:
            idx = len(batches)
            batches.append(list(pairs))
            if idx < len(prefs_by_batch):
                return prefs_by_batch[idx]
            raise _NeedBatch(pairs)

        while True:
            batches.clear()
            try:
                if method == "ppt":
                    return run_ppt(
                        n, pivots, compare, seed=self.config.seed if seed is None else seed
                    )
                return run_round_robin(n, compare)
            except _NeedBatch as need:
                pairs = need.pairs
                res = yield from self._compare_plan(
                    [problem] * len(pairs),
                    [candidates[x] for x, _ in pairs],
                    [candidates[y] for _, y in pairs],
                    criteria,
                    [reference] * len(pairs) if reference is not None else None,
                )
                prefs_by_batch.append([r.preference for r in res])

    # ------------------------------------------------------------- public API
    def score_batch(
        self,
        *,
        problems: Sequence[str],
        responses: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
    ) -> list[ScoreResult]:
        """Pointwise scores of ``responses[i]`` for ``problems[i]``.

        Args:
            problems: ``(B,)`` problem statements.
            responses: ``(B,)`` candidate texts. Non-strings abstain (``value=None``, counted in
                ``stats.n_invalid_input``); empty/whitespace-only texts get ``value=0.0`` with
                ``reason='empty response'`` and no model call; over-long texts are truncated
                (head and tail kept, visible marker; counted in ``stats.n_truncated``).
            criteria: names or name -> description; default ``config.criteria`` or one
                correctness criterion.
            references: optional ``(B,)`` reference answers shown to the verifier.

        Returns:
            ``(B,)`` :class:`ScoreResult`, ``value`` in ``[0, 1]`` or ``None`` (abstained).

        Raises:
            ValueError: on length mismatches.
            AbstentionError: on abstention when ``config.on_error == 'raise'``.
        """
        return self._run(self._score_plan(problems, responses, criteria, references))

    async def ascore_batch(
        self,
        *,
        problems: Sequence[str],
        responses: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
    ) -> list[ScoreResult]:
        """Async :meth:`score_batch`."""
        return await self._arun(self._score_plan(problems, responses, criteria, references))

    def score(
        self,
        *,
        problem: str,
        response: Any,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> ScoreResult:
        """Pointwise score of one response (see :meth:`score_batch`)."""
        return self.score_batch(
            problems=[problem],
            responses=[response],
            criteria=criteria,
            references=None if reference is None else [reference],
        )[0]

    async def ascore(
        self,
        *,
        problem: str,
        response: Any,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> ScoreResult:
        """Async :meth:`score`."""
        return (
            await self.ascore_batch(
                problems=[problem],
                responses=[response],
                criteria=criteria,
                references=None if reference is None else [reference],
            )
        )[0]

    def compare_batch(
        self,
        *,
        problems: Sequence[str],
        a: Sequence[Any],
        b: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
    ) -> list[PairwiseResult]:
        """Pairwise scores ``(R_a, R_b)`` and Bradley-Terry preferences ``p(a > b)``, ``(B,)``.

        Each pair is shown in one prompt; ``R_a`` and ``R_b`` are read at two prompts sharing
        that prefix. With ``config.n_repeats = K`` the repeats alternate the A/B slots (odd
        repeats show ``b`` first) to cancel position bias.
        """
        return self._run(self._compare_plan(problems, a, b, criteria, references))

    async def acompare_batch(
        self,
        *,
        problems: Sequence[str],
        a: Sequence[Any],
        b: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
    ) -> list[PairwiseResult]:
        """Async :meth:`compare_batch`."""
        return await self._arun(self._compare_plan(problems, a, b, criteria, references))

    def compare(
        self,
        *,
        problem: str,
        a: Any,
        b: Any,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> PairwiseResult:
        """One pairwise comparison (see :meth:`compare_batch`)."""
        return self.compare_batch(
            problems=[problem],
            a=[a],
            b=[b],
            criteria=criteria,
            references=None if reference is None else [reference],
        )[0]

    def rank(
        self,
        *,
        problem: str,
        candidates: Sequence[Any],
        pivots: int = 2,
        method: str = "ppt",
        seed: int | None = None,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> RankResult:
        """Rank N candidates with the Probabilistic Pivot Tournament or a full round robin.

        Args:
            problem: the problem all candidates answer.
            candidates: ``(N,)`` texts.
            pivots: k, in ``[0, N]`` (PPT only).
            method: ``'ppt'`` (``N + k(N-k) + k(k-1)/2`` comparisons) or ``'round_robin'``.
            seed: seed of the PPT ring (default ``config.seed``); same seed -> same result,
                with or without a cache.

        Returns:
            :class:`RankResult` (``win_rate`` ``(N,)`` = soft wins / comparisons).
        """
        return self._run(
            self._rank_plan(problem, candidates, pivots, method, seed, criteria, reference)
        )

    async def arank(
        self,
        *,
        problem: str,
        candidates: Sequence[Any],
        pivots: int = 2,
        method: str = "ppt",
        seed: int | None = None,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> RankResult:
        """Async :meth:`rank`."""
        return await self._arun(
            self._rank_plan(problem, candidates, pivots, method, seed, criteria, reference)
        )

    def progress_batch(
        self, *, tasks: Sequence[str], trajectories: Sequence[Any], criteria: Criteria = None
    ) -> list[ScoreResult]:
        """Task progress of each trajectory so far, ``(B,)``; ``value`` in ``[0, 1]``, 1 = done."""
        return self._run(self._score_plan(tasks, trajectories, criteria, None, progress=True))

    async def aprogress_batch(
        self, *, tasks: Sequence[str], trajectories: Sequence[Any], criteria: Criteria = None
    ) -> list[ScoreResult]:
        """Async :meth:`progress_batch`."""
        return await self._arun(
            self._score_plan(tasks, trajectories, criteria, None, progress=True)
        )

    def track(
        self, *, problem: str, steps: Sequence[str], checkpoints: Sequence[int] | None = None
    ) -> list[float | None]:
        """Progress after each step of a trajectory (higher = closer to done).

        Args:
            problem: the task.
            steps: ``(T,)`` step descriptions.
            checkpoints: 0-based step indices to evaluate after (default all ``T``).

        Returns:
            One progress value in ``[0, 1]`` (or ``None``) per checkpoint.

        Raises:
            ValueError: if a checkpoint is outside ``[0, T)``.
        """
        idx = list(range(len(steps))) if checkpoints is None else list(checkpoints)
        if any(not 0 <= i < len(steps) for i in idx):
            raise ValueError(f"checkpoints must lie in [0, {len(steps)}), got {idx}")
        trajs = ["\n".join(f"step {j + 1}: {s}" for j, s in enumerate(steps[: i + 1])) for i in idx]
        return [
            r.value for r in self.progress_batch(tasks=[problem] * len(trajs), trajectories=trajs)
        ]

    def close(self) -> None:
        """Release the backend and the cache. Idempotent."""
        self.backend.close()
        if self._owns_cache and self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Verifier(backend={self.backend.name!r}, model={self.backend.model_id!r}, G={self.scale.granularity}, style={self.config.style!r})"


class _NeedBatch(Exception):
    def __init__(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.pairs = list(pairs)


def _to_cacheable(a: Any) -> Any:
    if isinstance(a, TokenLogprobs):
        return {
            "t": "lp",
            "logprobs": dict(a.logprobs),
            "exact": a.exact,
            "sampled": a.sampled,
            "n_samples": a.n_samples,
            "restricted": a.restricted,
        }
    return {"t": "text", "text": a}


def _from_cacheable(a: Any) -> Any:
    if isinstance(a, dict) and a.get("t") == "lp":
        return TokenLogprobs(
            a["logprobs"],
            exact=a["exact"],
            sampled=a["sampled"],
            n_samples=a["n_samples"],
            restricted=a["restricted"],
        )
    if isinstance(a, dict) and a.get("t") == "text":
        return a["text"]
    return a
