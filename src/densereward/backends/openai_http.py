"""OpenAI-compatible HTTP backend (vLLM serve, SGLang, OpenAI) with log-probabilities.

The score is read at the token right after an assistant *prefill* (e.g. ``"<score>"``):
the request carries the conversation plus a final assistant message holding the prefill,
with vLLM's / SGLang's chat-template switches ``continue_final_message=true,
add_generation_prompt=false`` so the model continues that message instead of opening a
new turn (and the prompt's template variables as ``chat_template_kwargs``, e.g. Qwen3's
``enable_thinking``), ``max_tokens=1``, ``logprobs=true, top_logprobs=k`` and temperature 0
(LLM-as-a-Verifier, Kwok et al. 2026, sec. 3: the score is the expectation over the
score-token distribution, eq. 1). Servers report at most ``top_logprobs`` alternatives
(20 for OpenAI and vLLM's default ``--max-logprobs``), so candidates outside the top-k are
absent and the result has ``exact=False``; the engine reports the mass it saw.

Optionally (``restrict_to_candidates=True``) the request also carries vLLM's
``allowed_token_ids`` (ids from the server's ``/tokenize`` endpoint), so the reported
distribution is over the score tokens only; the result then has ``restricted=True``.
That needs a server whose log-probabilities are taken after the logits processors
(vLLM: ``--logprobs-mode processed_logprobs``); with raw log-probabilities the
restriction changes nothing but the sampled token.

Transport: one private asyncio event loop in a daemon thread owns a
:class:`~densereward.backends.replicas.Router`: an ``httpx.AsyncClient``, ``max_concurrency``
requests in flight per server and a requests-per-minute limiter. ``base_url`` may list several
replicas of one model: reads of a group stick to one replica, the least-loaded healthy one
takes the rest, a replica that dies is taken out and its reads fail over (see
:mod:`~densereward.backends.replicas`).
Sync methods and async methods (from any event loop) submit coroutines to that loop, so
both work inside and outside a running event loop. Each request has a timeout and is
retried with exponential backoff on 429/408/5xx, connection errors,
timeouts and malformed JSON, honouring ``Retry-After``; after ``max_retries`` retries it
raises :class:`~densereward.errors.BackendError` (the engine turns that into an
abstention or an error per ``on_error``). The API key (``get_api_key(api_key_env)``) is
sent only in the ``Authorization`` header and never appears in messages, logs or reprs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..backend_options import OpenAIOptions
from ..config import VerifierConfig
from ..errors import (
    BackendClosedError,
    BackendError,
    BackendRefusedError,
    BackendUnavailableError,
    ConfigError,
)
from ..io import get_api_key, redact
from .base import BackendBase, BackendUsage, ChatPrompt, TokenLogprobs
from .images import chat_messages, frames_of, image_url_part
from .replicas import Router, affinity_key, replica_urls
from .transport import LoopThread, Secret

__all__ = ["OpenAIBackend", "refusal_setting"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_EXTENSION_OWNERS = frozenset({"vllm", "sglang", "sglang-team", "lmsys"})


def refusal_setting(
    status: int, detail: str, payload: Mapping[str, Any], options: Any
) -> tuple[str | None, bool]:
    """``(setting, item_dependent)``: what to change for a server's 4xx, from its message.

    ``item_dependent`` is True for a prompt longer than the model's context: that item's read
    abstains; the others' go on.

    >>> refusal_setting(400, "Requested top logprobs of 40 exceeds maximum of 20",
    ...                 {"top_logprobs": 40}, None)[0]
    "verifier.backend_options.top_logprobs (sent 40; at most what the server allows, vLLM's --max-logprobs)"
    """
    text = detail.lower()
    if status in (401, 403):
        env = getattr(options, "api_key_env", None)
        return f"the API key in ${env} (verifier.backend_options.api_key_env)", False
    if "context length" in text or "maximum context" in text or "too long" in text:
        return "verifier.max_response_chars (or the server's --max-model-len)", True
    if "logprob" in text:
        sent = payload.get("top_logprobs")
        return (
            f"verifier.backend_options.top_logprobs (sent {sent}; at most what the server "
            "allows, vLLM's --max-logprobs)"
        ), False
    if "allowed_token_ids" in text:
        return "verifier.backend_options.restrict_to_candidates=false", False
    if any(k in text for k in ("continue_final_message", "add_generation_prompt", "chat_template")):
        return "verifier.backend_options.server_extensions=false (or a vLLM / SGLang server)", False
    if "model" in text and any(k in text for k in ("not found", "does not exist", "unknown")):
        return (
            f"verifier.model (sent {payload.get('model')!r}; the server's /v1/models lists its names)",
            False,
        )
    if status in (404, 405):
        return (
            "verifier.backend_options.base_url (it must end in /v1 of an OpenAI-compatible server)",
            False,
        )
    return None, False


class OpenAIBackend(BackendBase):
    """Verifier backend over an OpenAI-compatible chat-completions endpoint.

    Args:
        config: the verifier configuration; uses ``model`` (``None`` = the first model the
            server lists), ``seed`` and ``options``
            (:class:`~densereward.backend_options.OpenAIOptions`: ``base_url``, e.g.
            ``http://127.0.0.1:8000/v1`` or a list of replicas, ``api_key_env``,
            ``max_concurrency``, ``requests_per_minute``, ``timeout_s`` (seconds per
            request), ``max_retries``, the backoff and health-check settings,
            ``restrict_to_candidates`` (send vLLM's ``allowed_token_ids``, see the module
            docstring), ``top_logprobs`` and ``server_extensions``).
        **overrides: options of the backend's options class that replace the config's
            (``OpenAIBackend(config, top_logprobs=5, retry_base_s=0.01)``).

    Raises:
        ConfigError: if ``base_url`` is missing or an argument is out of range.
        BackendUnavailableError: if no server answers the health check (the message names
            the URL); replicas that do not answer start taken out and rejoin when healthy.
    """

    name = "openai"
    thread_safe = True  # reads from any thread go to one private event loop
    supports_images = True  # the served model must take images (vLLM answers 400 otherwise)
    options_class: type[OpenAIOptions] = OpenAIOptions
    calibration_hint = (
        "Over HTTP the score is read where the model continues the assistant's prefill: a "
        "server that does not continue it (continue_final_message dropped by SGLang, a proxy or "
        "a router; a plain OpenAI endpoint) opens a new turn there instead. "
    )
    """Added to the start-up calibration's refusal (:func:`~densereward.verifier.boundary.check_calibration`)."""

    def __init__(self, config: VerifierConfig, **overrides: Any):
        self.options = opts = config.options_as(self.options_class, **overrides)
        if not replica_urls(opts.base_url):
            raise ConfigError(
                f"the {self.name!r} backend needs verifier.backend_options.base_url "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        restrict_to_candidates, top_logprobs = opts.restrict_to_candidates, opts.top_logprobs
        retry_base_s, retry_max_s = opts.retry_base_s, opts.retry_max_s
        health_timeout_s, server_extensions = opts.health_timeout_s, opts.server_extensions
        self.config = config
        self.base_urls = replica_urls(opts.base_url)
        self.base_url = ", ".join(self.base_urls)
        self.restrict_to_candidates = restrict_to_candidates
        self.top_logprobs = int(top_logprobs)
        self.retry_base_s = float(retry_base_s)
        self.retry_max_s = float(retry_max_s)
        self.usage = BackendUsage()
        key = get_api_key(opts.api_key_env)
        self._api_key = Secret(key) if key else None
        self._secrets = [self._api_key] if self._api_key else []
        self._token_ids: dict[str, int] = {}
        self._closed = False
        self._loop = LoopThread(name=f"densereward-{self.name}-http")
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        router_options = dict(
            headers=headers,
            redact=self._redact,
            wait_s=self._wait_s,
            name=self.name,
            max_imbalance=opts.max_imbalance,
            health_interval_s=opts.health_interval_s,
            health_timeout_s=health_timeout_s,
        )
        try:
            self._router = self._loop.submit(self._open(router_options)).result()
            models = self._loop.submit(self._router.start(health_timeout_s, config.model)).result()
        except BaseException:
            self.close()
            raise
        listed = [m.get("id") for m in models if isinstance(m, Mapping) and m.get("id")]
        self.model_id = config.model or (listed[0] if listed else "")
        if not self.model_id:
            self.close()
            raise BackendUnavailableError(
                f"the server at {self.base_url} lists no models; set verifier.model"
            )
        if server_extensions is None:
            owners = {str(m.get("owned_by", "")).lower() for m in models if isinstance(m, Mapping)}
            server_extensions = bool(owners & _EXTENSION_OWNERS)
        self.server_extensions = server_extensions
        if config.chat_template_kwargs and not server_extensions:
            self.close()
            raise ConfigError(
                f"verifier.chat_template_kwargs needs a server that renders the chat template "
                f"(vLLM, SGLang); {self.base_url} does not list itself as one"
            )
        # The server's template is not visible from here: the reasoning style uses native
        # thinking over HTTP only when verifier.chat_template_kwargs sets enable_thinking.
        self.thinking_template: bool | None = None

    # ------------------------------------------------------------------ plumbing

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model_id={getattr(self, 'model_id', None)!r}, "
            f"restrict_to_candidates={self.restrict_to_candidates})"
        )

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    async def _open(self, options: Mapping[str, Any]) -> Router:
        return Router(self.options, self.usage, **options)

    @property
    def replicas(self) -> list[dict[str, Any]]:
        """Each server's URL, health and counters (``n_requests``, ``n_failures``, ``n_taken_out``)."""
        return [r.as_dict() for r in self._router.replicas]

    def _run(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the private loop and wait (works inside a running event loop too)."""
        self._check_open(coro)
        return self._loop.submit(coro).result()

    async def _arun(self, coro: Awaitable[T]) -> T:
        self._check_open(coro)
        return await asyncio.wrap_future(self._loop.submit(coro))

    def _check_open(self, coro: Awaitable[Any]) -> None:
        if self._closed:
            if asyncio.iscoroutine(coro):
                coro.close()  # never scheduled: close it so it is not reported as un-awaited
            raise BackendClosedError(f"{type(self).__name__} for {self.base_url} is closed")

    def _wait_s(self, attempt: int, error: BaseException | None) -> float:
        """Backoff before retry ``attempt`` (1-based): ``Retry-After`` or ``base * 2**(attempt-1)`` + jitter."""
        import random

        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), self.retry_max_s)
        base = self.retry_base_s * 2 ** (attempt - 1)
        return min(base * (1.0 + 0.25 * random.random()), self.retry_max_s)

    async def _post(
        self, path: str, payload: Mapping[str, Any], key: str | None = None
    ) -> dict[str, Any]:
        """POST JSON to a replica with bounded concurrency, rate limit, timeout, retries and
        failover (:meth:`Router.post`); ``key`` is the read's affinity key.

        Raises:
            BackendRefusedError: on a 4xx the server will answer again (the message names the
                setting to change, :func:`refusal_setting`).
            BackendError: when retries are exhausted.
        """
        try:
            return await self._router.post(path, payload, key)
        except BackendRefusedError as e:
            setting, item_dependent = refusal_setting(e.status, e.detail, payload, self.options)
            fix = f"; change {setting}" if setting else ""
            raise BackendRefusedError(
                f"{e}{fix}",
                status=e.status,
                detail=e.detail,
                setting=setting,
                item_dependent=item_dependent,
            ) from None

    def _messages(self, prompt: ChatPrompt) -> list[dict[str, Any]]:
        """The request's turns; frames become ``image_url`` parts (base64 PNG data URLs) before
        the last user turn's text, as vLLM and OpenAI accept them."""
        msgs = chat_messages(prompt.messages, frames_of(prompt), image_url_part)
        if prompt.prefill:
            msgs.append({"role": "assistant", "content": prompt.prefill})
        return msgs

    def _chat_payload(self, prompt: ChatPrompt, **params: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_id,
            "messages": self._messages(prompt),
            **params,
        }
        if self.server_extensions:
            payload["continue_final_message"] = bool(prompt.prefill)
            payload["add_generation_prompt"] = not prompt.prefill
            if prompt.chat_template_kwargs:
                payload["chat_template_kwargs"] = dict(prompt.chat_template_kwargs)
        return payload

    async def _gather(self, factories: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        t0 = time.monotonic()
        try:
            return list(await asyncio.gather(*(f() for f in factories)))
        finally:
            self.usage.seconds += time.monotonic() - t0

    # ------------------------------------------------------------------ tokens

    async def _atokenize(self, text: str) -> list[int] | None:
        import httpx

        replica = self._router.set.pick(None)
        url = replica.url
        root = url[: -len("/v1")] if url.endswith("/v1") else url
        payload = {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        try:
            assert replica.slots is not None
            async with replica.slots:
                resp = await self._router.client.post(f"{root}/tokenize", json=payload)
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        try:
            tokens = resp.json().get("tokens")
        except (ValueError, AttributeError):
            return None
        return [int(t) for t in tokens] if isinstance(tokens, list) else None

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` from the server's ``/tokenize`` endpoint (vLLM, SGLang).

        Returns:
            The ids (no special tokens added), or ``None`` when the server has no
            tokenizer endpoint (OpenAI) or it failed.
        """
        return self._run(self._atokenize(text))

    async def _candidate_ids(self, candidates: Sequence[str]) -> list[int]:
        missing = [c for c in candidates if c not in self._token_ids]
        results = await asyncio.gather(*(self._atokenize(c) for c in missing))
        for c, ids in zip(missing, results, strict=True):
            if ids is None:
                raise BackendError(
                    f"restrict_to_candidates needs the server's /tokenize endpoint; {self.base_url} did not tokenize {c!r}"
                )
            if len(ids) != 1:
                raise BackendError(
                    f"score token {c!r} is {len(ids)} tokens on the server, not one: {ids}"
                )
            self._token_ids[c] = ids[0]
        return sorted({self._token_ids[c] for c in candidates})

    # ------------------------------------------------------------------ log-probs

    @staticmethod
    def _parse_logprobs(data: Mapping[str, Any], candidates: Sequence[str]) -> dict[str, float]:
        """Candidate -> log-prob from the first generated token's alternatives.

        A candidate listed more than once (two token ids that decode to the same string)
        gets ``logsumexp`` of its entries: the probability that the next text is that
        string. ``null`` values become ``NaN``; NaN and ``-inf`` are kept as they are for
        the engine to count.

        Raises:
            BackendError: when the answer has no log-probabilities at all (the server does
                not support ``logprobs``: use the ``sampled`` backend).
        """
        choice = data["choices"][0]
        content = (
            (choice.get("logprobs") or {}).get("content") if isinstance(choice, Mapping) else None
        )
        if not content:
            raise BackendError(
                "the answer has no logprobs; for endpoints without logprobs use backend 'sampled'"
            )
        first = content[0]
        entries = list(first.get("top_logprobs") or [])
        if not entries and first.get("token") is not None:
            entries = [first]
        wanted = set(candidates)
        found: dict[str, list[float]] = {}
        for e in entries:
            tok = e.get("token")
            if tok not in wanted:
                continue
            lp = e.get("logprob")
            found.setdefault(tok, []).append(float("nan") if lp is None else float(lp))
        out: dict[str, float] = {}
        for tok, lps in found.items():
            if len(lps) == 1 or any(math.isnan(x) for x in lps):
                out[tok] = lps[0] if len(lps) == 1 else float("nan")
            else:
                m = max(lps)
                out[tok] = m if m == -math.inf else m + math.log(sum(math.exp(x - m) for x in lps))
        return out

    async def _one_logprobs(
        self, prompt: ChatPrompt, candidates: Sequence[str], allowed: list[int] | None
    ) -> TokenLogprobs:
        k = (
            min(self.top_logprobs, len(set(candidates)))
            if allowed is not None
            else self.top_logprobs
        )
        payload = self._chat_payload(
            prompt,
            max_tokens=1,
            temperature=0.0,
            logprobs=True,
            top_logprobs=k,
            seed=self.config.seed,
        )
        if allowed is not None:
            payload["allowed_token_ids"] = allowed
        data = await self._post("/chat/completions", payload, affinity_key(prompt))
        try:
            logprobs = self._parse_logprobs(data, candidates)
        except BackendError as e:
            self.usage.n_failures += 1
            raise BackendError(f"{self.name} backend ({self.base_url}): {e}") from None
        exact = len(logprobs) == len(set(candidates))
        return TokenLogprobs(logprobs=logprobs, exact=exact, restricted=allowed is not None)

    async def _anext_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        allowed = await self._candidate_ids(candidates) if self.restrict_to_candidates else None
        self.usage.n_prompts += len(prompts)
        return await self._gather(
            [lambda p=p: self._one_logprobs(p, candidates, allowed) for p in prompts]
        )

    def next_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Log-probabilities of each candidate as the next token after each prompt's prefill.

        One chat-completions request per prompt (``max_tokens=1``, temperature 0,
        ``logprobs=true, top_logprobs=k``), up to ``max_concurrency`` in flight.

        Args:
            prompts: ``(B,)`` prompts.
            candidates: the score-token spellings to report.

        Returns:
            ``(B,)`` :class:`TokenLogprobs`; candidates outside the server's top-k are
            absent and ``exact`` is False unless every candidate was seen. ``restricted``
            is True when ``restrict_to_candidates`` is on.

        Raises:
            BackendError: when a request failed after the retries (counted in
                ``usage.n_failures``), or returned no log-probabilities.
        """
        return self._run(self._anext_token_logprobs(prompts, candidates))

    async def anext_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Async variant of :meth:`next_token_logprobs` (callable from any event loop)."""
        return await self._arun(self._anext_token_logprobs(prompts, candidates))

    # ------------------------------------------------------------------ generation

    @staticmethod
    def _choice_text(choice: Mapping[str, Any]) -> str:
        """The generated text; falls back to ``reasoning_content`` (SGLang, vLLM < 0.11) or
        ``reasoning`` (newer vLLM) when a reasoning parser left ``content`` empty."""
        msg = choice.get("message") or {}
        return msg.get("content") or msg.get("reasoning_content") or msg.get("reasoning") or ""

    async def _agenerate(
        self,
        prompts: Sequence[ChatPrompt],
        max_new_tokens: int,
        temperature: float,
        seed: int | None,
        stop: Sequence[str],
    ) -> list[str]:
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.usage.n_prompts += len(prompts)

        async def one(i: int, prompt: ChatPrompt) -> str:
            params: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": temperature}
            if seed is not None:
                params["seed"] = seed + i
            if stop:
                params["stop"] = list(stop)
            payload = self._chat_payload(prompt, **params)
            data = await self._post("/chat/completions", payload, affinity_key(prompt))
            return self._choice_text(data["choices"][0])

        return await self._gather([lambda i=i, p=p: one(i, p) for i, p in enumerate(prompts)])

    def generate(
        self,
        prompts: Sequence[ChatPrompt],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[str]:
        """Sample one continuation of each prompt's prefill (the reasoning style's analysis).

        Args:
            prompts: ``(B,)`` prompts.
            max_new_tokens: length bound in tokens, >= 1.
            temperature: sampling temperature (0 = greedy).
            seed: per-request seed ``seed + i`` for prompt ``i`` (servers that honour it
                are reproducible); ``None`` = unseeded.
            stop: stop strings.

        Returns:
            ``(B,)`` texts (``content``, or ``reasoning_content`` / ``reasoning`` when a reasoning parser
            left ``content`` empty).

        Raises:
            BackendError: when a request failed after the retries.
        """
        return self._run(self._agenerate(prompts, max_new_tokens, temperature, seed, stop))

    async def agenerate(
        self,
        prompts: Sequence[ChatPrompt],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[str]:
        """Async variant of :meth:`generate`."""
        return await self._arun(self._agenerate(prompts, max_new_tokens, temperature, seed, stop))

    def close(self) -> None:
        """Close the HTTP client and stop the private event loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        router = getattr(self, "_router", None)
        if (
            router is not None
            and not self._loop.loop.is_closed()
            and not self._loop.in_loop_thread()
        ):
            try:
                self._loop.submit(router.aclose()).result(timeout=10)
            except Exception:  # noqa: BLE001 - best effort on shutdown
                logger.debug("closing the HTTP client failed", exc_info=True)
        self._loop.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
