"""The verifier engine: :class:`Verifier` builds the prompts and plans; reads and I/O live beside it.

Every method exists as a sync and an ``a``-prefixed async variant built from the same plan
(:mod:`.driver`), so both compute identical numbers; the arithmetic of a read and of eq. 1
is in :mod:`.reads`, the tournaments in :mod:`densereward.tournament`.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from .. import prompts as P
from ..backends.base import ChatPrompt, VerifierBackend, capabilities
from ..backends.images import FramePrep
from ..cache import ScoreCache
from ..config import VerifierConfig
from ..errors import AbstentionError, BackendError, BackendRefusedError, ConfigError, DataError
from ..results import NO_FINAL_ANSWER, PairwiseResult, RankResult, ScoreResult
from ..scale import ScoreScale
from ..tournament import bradley_terry_preference, ppt_schedule, round_robin_schedule
from .boundary import ReadPlan, build_read_plan, check_calibration
from .driver import PlanDriver, refusal_error
from .reads import (
    Read,
    VerifierStats,
    aggregate_reads,
    distribution_from_logprobs,
    prepare_candidate,
    read_distribution,
    short_circuit_pair,
)
from .verbs import OneItemVerbs

__all__ = ["Verifier"]

logger = logging.getLogger("densereward.verifier")

Criteria = Sequence[str] | Mapping[str, str] | None
Images = Sequence[Sequence[Any] | None] | None


def _seed_for(base: int, *parts: Any) -> int:
    return (base * 1_000_003 + zlib.crc32(repr(parts).encode())) % (2**31 - 1)


def _rebuild(config: VerifierConfig, backend: Any, scale: ScoreScale, cache: Any) -> Verifier:
    """Unpickle a :class:`Verifier` (the target of ``Verifier.__reduce__``)."""
    return Verifier(config, backend=backend, scale=scale, cache=cache)


class Verifier(OneItemVerbs):
    """Dense verifier rewards: ``score``, ``compare``, ``rank``, ``progress_batch``, ``progress_curve``.

    Every verb (and its ``*_batch`` form) has an ``a``-prefixed async form that runs the same
    plan and returns the same numbers. A verifier pickles as its recipe (config, scale, and
    a backend or cache it was given): the unpickled copy builds its own backend.

    Args:
        config: how the reward is computed; default :class:`VerifierConfig` (embedded
            SmolLM2-135M-Instruct, transformers backend, G = 20 letters, direct style).
        backend: an already built backend (e.g. shared between verifiers); default builds the
            one named by ``config.backend``.
        scale: the score scale; default ``ScoreScale.letters(config.granularity)``.
        cache: a :class:`ScoreCache`; default one at ``config.cache_dir`` if set, else none.

    Attributes:
        read_plan: where the score is read under the backend's own tokenizer
            (:class:`~.boundary.ReadPlan`; docs/where_the_score_is_read.md).
        calibration_mass: the score-token mass of the start-up calibration read (``None``
            when it did not run).

    Raises:
        ScoreTokenError: when a score level cannot be read in one step where the verifier's
            tokenizer puts it (names the level and the tokenization), or when the calibration
            read on the prompt's own demonstration puts less than ``config.min_mass`` on the
            score letters (names the model, the mass and the tokenization).
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
        self._owns_backend = backend is None
        if backend is None:
            from ..backends import create_backend

            backend = create_backend(self.config)
        self.backend = backend
        self.capabilities = capabilities(backend)  # what it can do (BackendBase's defaults)
        self._owns_cache = cache is None and self.config.cache_dir is not None
        self.cache = (
            cache
            if cache is not None
            else (ScoreCache(self.config.cache_dir) if self.config.cache_dir else None)
        )
        self.stats = VerifierStats()
        self.frames = FramePrep(self.config.frames)
        self.read_plan: ReadPlan = build_read_plan(
            self.backend.tokenize,
            self.scale,
            prefill=P.SCORE_PREFILL,
            model=str(self.backend.model_id),
            text_level=bool(self.capabilities.text_reads),
        )
        self.spellings = self.read_plan.spellings
        self.candidates = [s for forms in self.spellings for s in forms]
        self.thinking = self._native_thinking()
        self.chat_template_kwargs = {
            "enable_thinking": self.thinking,
            **(self.config.chat_template_kwargs or {}),
        }
        self._driver = PlanDriver(
            self.backend, self.config, self.stats, self.cache, self.read_plan, self.thinking
        )
        self.calibration_mass: float | None = None
        if self.config.calibrate:
            self._calibrate()

    def _calibrate(self) -> None:
        """One read on the prompt's own demonstration (:func:`~.boundary.check_calibration`).

        Runs whenever the mass can be measured: ``min_mass`` > 0 and an unrestricted read, on
        a backend that cannot tokenize too. A refusal (4xx) is a ``ConfigError`` naming the
        server's message and the setting to change; a transient failure is logged.
        """
        if self.config.min_mass <= 0:
            return
        prompt = dataclasses.replace(
            P.calibration_prompt(self.scale), chat_template_kwargs=self.chat_template_kwargs
        )
        try:
            answer = self._driver.read([prompt])[0]
        except BackendRefusedError as e:
            raise refusal_error(e, "start-up calibration read") from None
        except BackendError as e:
            logger.warning("calibration read skipped: the backend failed (%s)", e)
            return
        self._driver.answered = True
        if answer.restricted:
            return  # a restricted read reports no mass to check
        mass = distribution_from_logprobs(answer, self.scale, self.spellings)[1]
        self.calibration_mass = check_calibration(
            mass,
            self.read_plan,
            model=str(self.backend.model_id),
            min_mass=self.config.min_mass,
            hint=self.capabilities.calibration_hint,
        )

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
        return bool(self.capabilities.thinking_template)

    # ------------------------------------------------------------- read plans
    def _read_plan(self, prompts: Sequence[ChatPrompt], seeds: Sequence[int]) -> Generator:
        """Plan: one :class:`~.reads.Read` per prompt, in the configured style.

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
            analyses = yield from self._driver.cached("generate", stage1, seeds)
            prompts = [
                p if isinstance(a, Exception) else then(s1, a)
                for p, s1, a in zip(prompts, stage1, analyses, strict=False)
            ]
            failed = [isinstance(a, Exception) for a in analyses]
        else:
            failed = [False] * len(prompts)
        todo = [i for i, f in enumerate(failed) if not f]
        answers = yield from self._driver.cached(
            "logprobs", [prompts[i] for i in todo], [None] * len(todo)
        )
        reads: list[Read] = [Read(None, None, reason="backend error")] * len(prompts)
        for i, a in zip(todo, answers, strict=False):
            reads[i] = read_distribution(
                a, self.scale, self.spellings, min_mass=self.config.min_mass, stats=self.stats
            )
        self.stats.n_reads += len(prompts)
        return reads

    def _aggregate(self, reads: Sequence[Read], crit: Mapping[str, str], cut: bool) -> ScoreResult:
        return aggregate_reads(
            reads, list(crit), self.config.n_repeats, self.scale, self.stats, truncated=cut
        )

    def _prepare(
        self, text: Any, frames: Sequence[Any] = ()
    ) -> tuple[str | None, ScoreResult | None, bool]:
        if frames and isinstance(text, str) and not text.strip():  # the frames carry the state
            return P.FRAMES_ONLY_TEXT, None, False
        return prepare_candidate(text, self.stats, self.config.max_response_chars)

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
        kind: str = "auto",
        images: Images = None,
    ) -> Generator:
        if len(problems) != len(responses):
            raise DataError(f"{len(problems)} problems but {len(responses)} responses")
        frames = self.frames.batch(images, len(problems), self.backend)
        if references is not None and len(references) != len(problems):
            raise DataError(f"{len(problems)} problems but {len(references)} references")
        chosen = criteria if criteria is not None else self.config.criteria
        kind = P.resolve_prompt_kind(kind, chosen, references is not None)
        progress, answer_match = kind == "progress", kind == "answer_match"
        crit = P.normalize_criteria(chosen, P.KIND_CRITERIA[kind])
        k_rep = self.config.n_repeats
        results: list[ScoreResult | None] = [None] * len(problems)
        prompts: list[ChatPrompt] = []
        seeds: list[int] = []
        owners: list[tuple[int, bool]] = []
        for i, (prob, resp) in enumerate(zip(problems, responses, strict=False)):
            clean, short, cut = self._prepare(resp, frames[i])
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
                    self.stats.n_unread_no_answer += 1
                    self.stats.n_scored += 1
                    results[i] = ScoreResult(value=0.0, mass=None, reason=NO_FINAL_ANSWER)
                    continue
            prob = P.sanitize_candidate(str(prob))
            for desc in crit.values():
                if progress:
                    p = P.progress_prompt(self.scale, prob, clean, desc)
                elif final is not None:
                    p = P.answer_match_prompt(self.scale, str(ref), P.sanitize_candidate(final))
                else:
                    p = P.pointwise_prompt(self.scale, prob, clean, desc, reference=ref)
                p = P.with_frames(p, frames[i])
                for k in range(k_rep):
                    prompts.append(p)
                    seeds.append(_seed_for(self.config.seed, p.key(), k))
            owners.append((i, cut))
        reads = yield from self._read_plan(prompts, seeds)
        per_item = len(crit) * k_rep
        for j, (i, cut) in enumerate(owners):
            results[i] = self._aggregate(reads[j * per_item : (j + 1) * per_item], crit, cut)
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
            raise DataError(f"compare needs equal lengths, got {len(problems)}, {len(a)}, {len(b)}")
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
            ra, rb = self._aggregate(reads_a, crit, cut), self._aggregate(reads_b, crit, cut)
            out[i] = self._pair(ra, rb)
        return out

    def _short_pair(self, sa: ScoreResult | None, sb: ScoreResult | None) -> PairwiseResult:
        return short_circuit_pair(sa, sb, raise_on_invalid=self.config.on_error == "raise")

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
            raise ConfigError(f"method must be 'ppt' or 'round_robin', got {method!r}")
        n = len(candidates)
        schedule = (
            ppt_schedule(n, pivots, seed=self.config.seed if seed is None else seed)
            if method == "ppt"
            else round_robin_schedule(n)
        )
        # The tournament yields each batch of pairs; the batch runs as one compare plan and
        # the preferences go back in.
        try:
            pairs = next(schedule)
        except StopIteration as done:
            return done.value
        while True:
            res = yield from self._compare_plan(
                [problem] * len(pairs),
                [candidates[x] for x, _ in pairs],
                [candidates[y] for _, y in pairs],
                criteria,
                [reference] * len(pairs) if reference is not None else None,
            )
            try:
                pairs = schedule.send([r.preference for r in res])
            except StopIteration as done:
                return done.value

    # ------------------------------------------------------------- public API
    def score_batch(
        self,
        *,
        problems: Sequence[str],
        responses: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
        prompt: str = "auto",
        images: Images = None,
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
            prompt: the prompt kind (:func:`densereward.prompts.resolve_prompt_kind`):
                ``pointwise`` (anchored when references are given), ``answer_match`` (the
                extracted final answer against the reference; needs references, no criteria)
                or ``auto`` (``answer_match`` with references and no criteria, else pointwise).
            images: optional ``(B,)`` lists of camera frames (``uint8`` ``(H, W, 3)`` or PIL),
                oldest first, shown before the response (``[]`` = none); bounded by
                ``config.frames``. Needs a backend with ``supports_images``.

        Returns:
            ``(B,)`` :class:`ScoreResult`, ``value`` in ``[0, 1]`` or ``None`` (abstained).

        Raises:
            DataError: on length mismatches, or ``answer_match`` without references.
            ConfigError: for ``answer_match`` with criteria (its own criterion would be replaced),
                or frames for a backend that cannot take images.
            AbstentionError: on abstention when ``config.on_error == 'raise'``.
        """
        plan = self._score_plan(
            problems, responses, criteria, references, kind=prompt, images=images
        )
        return self._driver.run(plan)

    async def ascore_batch(
        self,
        *,
        problems: Sequence[str],
        responses: Sequence[Any],
        criteria: Criteria = None,
        references: Sequence[str | None] | None = None,
        prompt: str = "auto",
        images: Images = None,
    ) -> list[ScoreResult]:
        """Async :meth:`score_batch`."""
        plan = self._score_plan(
            problems, responses, criteria, references, kind=prompt, images=images
        )
        return await self._driver.arun(plan)

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
        return self._driver.run(self._compare_plan(problems, a, b, criteria, references))

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
        return await self._driver.arun(self._compare_plan(problems, a, b, criteria, references))

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

        Raises:
            ConfigError: for another ``method``.
            DataError: with no candidates, or ``pivots`` outside ``[0, N]``.
        """
        return self._driver.run(
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
        return await self._driver.arun(
            self._rank_plan(problem, candidates, pivots, method, seed, criteria, reference)
        )

    def progress_batch(
        self,
        *,
        tasks: Sequence[str],
        trajectories: Sequence[Any],
        criteria: Criteria = None,
        images: Images = None,
    ) -> list[ScoreResult]:
        """Task progress of each trajectory so far, ``(B,)``; ``value`` in ``[0, 1]``, 1 = done.

        Args:
            tasks: ``(B,)`` task descriptions.
            trajectories: ``(B,)`` texts of the trajectories (or states); may be ``""`` when
                frames carry the state.
            criteria: as :meth:`score_batch` (default: one progress criterion).
            images: optional ``(B,)`` lists of camera frames, one list per trajectory, oldest
                first, the current state last (``[]`` = text only). Every ``stride``-th frame
                counting back from the last is kept, at most ``config.frames.max_frames`` of
                them (a longer list is cut, warned once), shrunk to ``max_side``; the prompt says
                how many there are and in which order. The cache keys on their bytes.

        Raises:
            ConfigError: frames for a backend that cannot take images (names the backend).
            DataError: ``images`` not one list per trajectory, or a malformed frame.
        """
        plan = self._score_plan(tasks, trajectories, criteria, None, kind="progress", images=images)
        return self._driver.run(plan)

    async def aprogress_batch(
        self,
        *,
        tasks: Sequence[str],
        trajectories: Sequence[Any],
        criteria: Criteria = None,
        images: Images = None,
    ) -> list[ScoreResult]:
        """Async :meth:`progress_batch`."""
        plan = self._score_plan(tasks, trajectories, criteria, None, kind="progress", images=images)
        return await self._driver.arun(plan)

    def close(self, *, abandon: bool = False) -> None:
        """Release the backend and the cache. Idempotent.

        Args:
            abandon: the reads still running (in other threads) are abandoned: their caller
                stopped waiting for them and has said so (``densereward serve``'s shutdown, after
                its drain cut their requests off). Their reads on the closed backend then end
                as failures (``stats.n_failures``) without the "verifier backend failed"
                warning each. Without it, a read after the close warns as a backend failure.
        """
        if abandon:
            self._driver.abandoned = True
        self.backend.close()
        if self._owns_cache and self.cache is not None:
            self.cache.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the recipe: config, scale, and the backend and cache it was given (the ones
        it built itself are built again by the copy; :class:`~.lazy.VerifierFactory`)."""
        backend = None if self._owns_backend else self.backend
        return _rebuild, (
            self.config,
            backend,
            self.scale,
            None if self._owns_cache else self.cache,
        )

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Verifier(backend={self.backend.name!r}, model={self.backend.model_id!r}, G={self.scale.granularity}, style={self.config.style!r})"
