"""Running the engine's plans against a backend: batching, the score cache, failures.

A *plan* is a generator that yields requests ``(kind, prompts, seeds)`` and is sent back one
answer per prompt: ``kind`` is ``"logprobs"`` (next-token log-probabilities of the score
tokens, a :class:`~densereward.backends.base.TokenLogprobs`) or ``"generate"`` (a sampled
analysis, a string); a prompt whose backend call failed gets the
:class:`~densereward.errors.BackendError` instead (or it is raised, per
``VerifierConfig.on_error``). The same plan runs with the backend's sync methods
(:meth:`PlanDriver.run`) or its async ones (:meth:`PlanDriver.arun`), so both compute
identical numbers. :meth:`PlanDriver.cached` is the sub-plan that answers from the
:class:`~densereward.cache.ScoreCache` first and deduplicates the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Sequence
from typing import Any

from .. import prompts as P
from ..backends.base import ChatPrompt, TokenLogprobs, VerifierBackend, capabilities
from ..cache import ScoreCache, cache_key
from ..config import VerifierConfig
from ..errors import BackendClosedError, BackendError, BackendRefusedError, ConfigError
from .boundary import ReadPlan
from .reads import VerifierStats

__all__ = ["PlanDriver", "refusal_error"]

logger = logging.getLogger("densereward.verifier")


def refusal_error(err: BackendRefusedError, what: str) -> ConfigError:
    """The configuration error of a verifier server that refused ``what`` (a 4xx): it would
    refuse every read alike, so a verifier that abstained on each would read nothing."""
    fix = f"change {err.setting}" if err.setting else "check the verifier settings against it"
    return ConfigError(
        f"the verifier server refused the {what} (HTTP {err.status}): {err.detail!r}; every read "
        f"would be refused alike: {fix} ({err})"
    )


class PlanDriver:
    """Answers a plan's requests with one backend, in chunks of ``config.batch_size`` prompts.

    Args:
        backend: the model.
        config: reads ``batch_size``, ``on_error``, ``max_reasoning_tokens`` and
            ``reasoning_temperature``.
        stats: the verifier's counters (backend calls, failures, cache hits, seconds).
        cache: answers by :func:`~densereward.cache.cache_key`, or ``None``.
        plan: where the score is read and how each level's probability is composed
            (:class:`~.boundary.ReadPlan`); a ``logprobs`` answer maps every spelling the plan
            reads to its log-probability.
        thinking: whether analyses stop at ``</think>`` (native thinking) or at
            ``</analysis>`` / the score prefill.
    """

    def __init__(
        self,
        backend: VerifierBackend,
        config: VerifierConfig,
        stats: VerifierStats,
        cache: ScoreCache | None,
        plan: ReadPlan,
        thinking: bool,
    ) -> None:
        self.backend = backend
        self.can = capabilities(backend)
        self.config = config
        self.stats = stats
        self.cache = cache
        self.plan = plan
        self.candidates = [s for forms in plan.spellings for s in forms]
        self.thinking = thinking
        self.answered = False
        """Whether the backend has answered a read: a refusal (4xx) before that is a
        configuration error (:func:`refusal_error`), after it the item's abstention."""
        self.abandoned = False
        """Whether the reads still running were abandoned when the backend was closed
        (``Verifier.close(abandon=True)``, the end of ``densereward serve``): their reads on the
        closed backend are not backend failures, and are not logged as such."""

    # -------------------------------------------------------------- the reads
    def read(self, prompts: list[ChatPrompt]) -> list[TokenLogprobs]:
        """Per-spelling log-probabilities of ``prompts`` where the plan reads them.

        A plan that does not step back is one ``next_token_logprobs`` call, as it always
        was. One that steps back over the prefill's last token reads both positions of one
        forward pass where the backend can (``boundary_logprobs``), else the boundary prompt
        and the whole prompt (two requests sharing the prefix) and composes them.
        """
        plan = self.plan
        if not plan.steps_back:
            return self.backend.next_token_logprobs(prompts, plan.boundary_candidates)
        cut = [plan.boundary_prompt(p) for p in prompts]
        if plan.text_level or not plan.chain_candidates:
            at = self.backend.next_token_logprobs(cut, plan.boundary_candidates)
            return [plan.compose(a) for a in at]
        fused = self.can.boundary_logprobs
        if fused is not None:
            pairs = fused(prompts, plan.boundary_candidates, plan.chain_candidates, back=plan.back)
            return [plan.compose(a, b) for a, b in pairs]
        self.stats.n_backend_calls += 1
        at = self.backend.next_token_logprobs(cut, plan.boundary_candidates)
        after = self.backend.next_token_logprobs(prompts, plan.chain_candidates)
        return [plan.compose(a, b) for a, b in zip(at, after, strict=True)]

    async def aread(self, prompts: list[ChatPrompt]) -> list[TokenLogprobs]:
        """Async :meth:`read` (the two requests of a stepped-back read run concurrently)."""
        import asyncio

        plan = self.plan
        if not plan.steps_back:
            return await self.backend.anext_token_logprobs(prompts, plan.boundary_candidates)
        cut = [plan.boundary_prompt(p) for p in prompts]
        if plan.text_level or not plan.chain_candidates:
            at = await self.backend.anext_token_logprobs(cut, plan.boundary_candidates)
            return [plan.compose(a) for a in at]
        fused = self.can.boundary_logprobs
        if fused is not None:  # in-process: the one pass runs in a worker thread
            pairs = await asyncio.to_thread(
                fused, prompts, plan.boundary_candidates, plan.chain_candidates, back=plan.back
            )
            return [plan.compose(a, b) for a, b in pairs]
        self.stats.n_backend_calls += 1
        at, after = await asyncio.gather(
            self.backend.anext_token_logprobs(cut, plan.boundary_candidates),
            self.backend.anext_token_logprobs(prompts, plan.chain_candidates),
        )
        return [plan.compose(a, b) for a, b in zip(at, after, strict=True)]

    def run(self, plan: Generator) -> Any:
        """Drive ``plan`` with the backend's sync methods; returns the plan's return value."""
        try:
            req = next(plan)
            while True:
                req = plan.send(self._io_sync(req))
        except StopIteration as stop:
            return stop.value

    async def arun(self, plan: Generator) -> Any:
        """Drive ``plan`` with the backend's async methods (chunks run concurrently)."""
        try:
            req = next(plan)
            while True:
                req = plan.send(await self._io_async(req))
        except StopIteration as stop:
            return stop.value

    def _chunks(self, items: Sequence[Any]) -> list[Sequence[Any]]:
        bs = max(1, self.config.batch_size)
        return [items[i : i + bs] for i in range(0, len(items), bs)]

    def _read_order(self, kind: str, prompts: Sequence[ChatPrompt]) -> list[int] | None:
        """The order to chunk a request in: by length for log-prob reads that span chunks."""
        if kind != "logprobs" or len(prompts) <= max(1, self.config.batch_size):
            return None  # one chunk: the backend sees the request as it came
        return _by_length(prompts)

    def _on_failure(self, err: Exception, n: int) -> list[Exception]:
        if isinstance(err, BackendRefusedError) and not (err.item_dependent or self.answered):
            raise refusal_error(err, "first read") from None
        self.stats.n_failures += n
        if self.config.on_error == "raise":
            raise err
        if isinstance(err, BackendClosedError) and self.abandoned:
            # its owner closed the backend under reads it had stopped waiting for, and said so
            logger.debug("abandoned verifier read of %d prompt(s) ended: %s", n, err)
        else:
            logger.warning("verifier backend failed on %d prompt(s): %s", n, err)
        return [err] * n

    def _io_sync(self, req: tuple) -> list[Any]:
        kind, prompts, extra = req
        order = self._read_order(kind, prompts)
        if order is not None:
            prompts = [prompts[i] for i in order]
        out: list[Any] = []
        t0 = time.perf_counter()
        for chunk in self._chunks(prompts):
            self.stats.n_backend_calls += 1
            try:
                if kind == "logprobs":
                    out.extend(self.read(list(chunk)))
                else:
                    out.extend(
                        self._generate_sync(list(chunk), extra[len(out) : len(out) + len(chunk)])
                    )
                self.answered = True
            except BackendError as err:
                out.extend(self._on_failure(err, len(chunk)))
        self.stats.seconds += time.perf_counter() - t0
        return _in_order(out, order)

    async def _io_async(self, req: tuple) -> list[Any]:
        import asyncio

        kind, prompts, extra = req
        order = self._read_order(kind, prompts)
        if order is not None:
            prompts = [prompts[i] for i in order]
        t0 = time.perf_counter()

        async def one(start: int, chunk: Sequence[ChatPrompt]) -> list[Any]:
            self.stats.n_backend_calls += 1
            try:
                if kind == "logprobs":
                    got = list(await self.aread(list(chunk)))
                else:
                    seeds = extra[start : start + len(chunk)]
                    got = [
                        (await self.backend.agenerate([p], **self.gen_kwargs(s)))[0]
                        for p, s in zip(chunk, seeds, strict=False)
                    ]
                self.answered = True
                return got
            except BackendError as err:
                return self._on_failure(err, len(chunk))

        bs = max(1, self.config.batch_size)
        parts = await asyncio.gather(
            *(one(i, prompts[i : i + bs]) for i in range(0, len(prompts), bs))
        )
        self.stats.seconds += time.perf_counter() - t0
        return _in_order([x for part in parts for x in part], order)

    def gen_kwargs(self, seed: int) -> dict[str, Any]:
        """Sampling arguments of one reasoning-style analysis with ``seed``."""
        return {
            "max_new_tokens": self.config.max_reasoning_tokens,
            "temperature": self.config.reasoning_temperature,
            "seed": seed,
            "stop": (P.THINK_CLOSE,) if self.thinking else ("</analysis>", P.SCORE_PREFILL),
        }

    def _generate_sync(self, prompts: list[ChatPrompt], seeds: Sequence[int]) -> list[str]:
        # one call per prompt: each analysis has its own seed, so cached and uncached runs agree
        return [
            self.backend.generate([p], **self.gen_kwargs(s))[0]
            for p, s in zip(prompts, seeds, strict=False)
        ]

    def key(self, kind: str, prompt: ChatPrompt, seed: int | None = None) -> str:
        """The cache key of one request (backend, model, prompt, candidates, seed, sampling,
        and what else changes the answer: ``backend_options`` such as ``top_logprobs`` or
        ``restrict_to_candidates`` when set, and the dtype of an in-process model)."""
        extra: dict[str, Any] = {}
        answer_options = self.config.answer_options()  # as given; no URLs, timeouts, dtype
        if answer_options:
            extra["options"] = answer_options
        dtype = self.can.dtype  # in-process models declare what they run in
        if dtype is not None:
            extra["dtype"] = str(dtype)
        if self.plan.steps_back:  # reads before the fix (after a lone '>') never answer these
            extra["read_at"] = self.plan.describe()
        return cache_key(
            kind=kind,
            backend=self.backend.name,
            model=self.backend.model_id,
            prompt=prompt.key(),
            candidates=self.candidates,
            seed=seed,
            gen=self.gen_kwargs(0) if kind == "generate" else None,
            **extra,
        )

    def cached(
        self, kind: str, prompts: Sequence[ChatPrompt], seeds: Sequence[int | None]
    ) -> Generator:
        """Plan: answers for ``prompts`` from the cache, deduplicated, the rest from the backend."""
        keys = [self.key(kind, p, s) for p, s in zip(prompts, seeds, strict=False)]
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


def _by_length(prompts: Sequence[ChatPrompt]) -> list[int]:
    """Indices of ``prompts`` by text length (characters of the turns and the prefill), stable.

    Log-prob reads are chunked in this order so that a chunk holds prompts of similar length
    and a batching backend pads little (with 20 GSM8K prompts in chunks of 8, chunks in input
    order ran 26 % more suffix tokens than length-sorted ones; benchmarks/verifier_throughput.py).
    A read does not depend on its chunk (up to float rounding), and the answers are returned
    in the request's order (:func:`_in_order`).
    """
    sizes = [sum(len(m["content"]) for m in p.messages) + len(p.prefill) for p in prompts]
    return sorted(range(len(prompts)), key=sizes.__getitem__)


def _in_order(answers: list[Any], order: list[int] | None) -> list[Any]:
    """``answers`` given in ``order`` (indices into the request), back in request order."""
    if order is None:
        return answers
    out: list[Any] = [None] * len(answers)
    for j, i in enumerate(order):
        out[i] = answers[j]
    return out
