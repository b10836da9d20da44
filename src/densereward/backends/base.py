"""The one small protocol every verifier backend implements (the name registry: :mod:`.registry`).

A backend turns chat prompts into (a) next-token log-probabilities over a given set of
candidate token strings at the position right after an assistant *prefill*, and
(b) sampled text (for the reasoning style and the sampled fallback).

The engine (:mod:`densereward.verifier`) never touches tokenizers or HTTP: it asks a
backend for log-probabilities of the score-token spellings and does the arithmetic.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .capability import BackendBase, Capabilities, capabilities

__all__ = [
    "BackendBase",
    "Capabilities",
    "capabilities",
    "LocalAsyncMixin",
    "ChatPrompt",
    "TokenLogprobs",
    "BackendUsage",
    "VerifierBackend",
]


@dataclass(frozen=True, eq=False)
class ChatPrompt:
    """A chat conversation whose last assistant turn starts with ``prefill``.

    Attributes:
        messages: the turns, each a mapping with ``role`` and ``content`` (system, user,
            and assistant turns for few-shot demonstrations), as a tuple.
        prefill: the text the final assistant turn begins with. The score is read at the
            next token after it (e.g. ``"<score>"``). May be empty.
        chat_template_kwargs: extra variables for the chat template, e.g.
            ``{"enable_thinking": False}`` (Qwen3's thinking switch). Every backend passes them
            on: ``apply_chat_template(..., **kwargs)`` in process, the request's
            ``chat_template_kwargs`` over HTTP. Templates ignore variables they do not use.
        images: camera frames (``uint8`` arrays ``(H, W, 3)`` or ``PIL.Image``) attached, in
            order, to the last user turn, before its text (:mod:`.images`); ``()`` = text only.
            A backend without ``supports_images`` refuses a prompt that has them.

    Two prompts are equal when their :meth:`key` is (frames compare by content).
    """

    messages: tuple[Mapping[str, str], ...]
    prefill: str = ""
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    images: tuple[Any, ...] = ()

    @functools.cached_property
    def frame_digests(self) -> tuple[str, ...]:
        """SHA-256 of each frame's shape and bytes, in order (:func:`.images.frame_digest`)."""
        from .images import as_frame, frame_digest

        return tuple(frame_digest(as_frame(f)) for f in self.images)

    def key(self) -> tuple:
        """A hashable, order-preserving identity of the prompt (for caches); frames enter as
        :attr:`frame_digests`, never by object identity."""
        base = (tuple((m["role"], m["content"]) for m in self.messages), self.prefill)
        if self.chat_template_kwargs:
            kwargs = tuple(sorted((k, repr(v)) for k, v in self.chat_template_kwargs.items()))
            base = (*base, kwargs)
        if self.images:
            base = (*base, ("images", self.frame_digests))
        return base

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatPrompt) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())


@dataclass
class TokenLogprobs:
    """Next-token log-probabilities a backend returned for one prompt.

    Attributes:
        logprobs: candidate token string -> natural-log probability under the verifier's
            full next-token distribution. Candidates the backend did not see (e.g. outside
            an HTTP server's top-20) are absent. Values may be ``-inf``; ``NaN`` values are
            treated by the engine as missing and counted.
        exact: True when every candidate's log-probability is known (local logits);
            False when the backend saw only part of the distribution (top-k) or sampled.
        sampled: True when the values are an empirical distribution from N samples
            (the sampled fallback), not model log-probabilities.
        n_samples: number of samples behind an empirical distribution (0 otherwise).
        restricted: True when the backend restricted the distribution to the candidates
            before normalising (so the mass on the candidates is 1 by construction and
            the pre-restriction mass is unknown).
    """

    logprobs: dict[str, float]
    exact: bool = True
    sampled: bool = False
    n_samples: int = 0
    restricted: bool = False


@dataclass
class BackendUsage:
    """Token and call accounting of one backend instance (no module-level state)."""

    n_calls: int = 0
    n_prompts: int = 0
    n_prompt_tokens: int = 0
    n_completion_tokens: int = 0
    n_retries: int = 0
    n_failovers: int = 0
    """Retries sent to another replica after a read failed on one (HTTP, several servers)."""
    n_failures: int = 0
    seconds: float = 0.0

    def record_batch(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        *,
        started: float,
        completion_tokens: int = 0,
    ) -> None:
        """Account one in-process model call over a batch of tokenised prompts.

        Args:
            prompt_token_ids: ``(B,)`` token-id sequences of the prompts sent.
            started: ``time.perf_counter()`` when the call began.
            completion_tokens: tokens generated by the call.
        """
        self.n_calls += 1
        self.n_prompts += len(prompt_token_ids)
        self.n_prompt_tokens += sum(len(s) for s in prompt_token_ids)
        self.n_completion_tokens += completion_tokens
        self.seconds += time.perf_counter() - started

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@runtime_checkable
class VerifierBackend(Protocol):
    """What the verifier engine needs from a model.

    Implementations: ``transformers`` (:class:`~densereward.backends.hf.TransformersBackend`),
    ``vllm`` (offline engine), ``openai`` (OpenAI-compatible HTTP), ``sampled``
    (fallback for endpoints with no log-probabilities).
    """

    name: str
    model_id: str
    usage: BackendUsage

    # What the backend can do, each with the default of :class:`BackendBase` (a backend that
    # does not inherit it and leaves one out gets that default: :func:`capabilities`).
    supports_images: bool
    """Takes prompts with camera frames (``ChatPrompt.images``); default ``False``."""
    text_reads: bool
    """Reads sampled text, not token log-probabilities (``sampled``): each level is read at
    the boundary as the text ``back + spelling``; default ``False``."""
    thinking_template: bool | None
    """The chat template has Qwen3's thinking switch (``None``: cannot see it, over HTTP);
    default ``False``."""
    dtype: Any
    """The dtype an in-process model runs in (part of the score cache's key); default ``None``."""
    loads_model: bool
    """Loads ``verifier.model`` in this process (a dry run checks it is there); default
    ``False``. Read before any backend loads from the options class's ``loads_model``
    (:func:`densereward.backend_options.loads_model`), so built-ins declare it there too."""
    calibration_hint: str
    """Added to the start-up calibration's refusal; default ``""``."""
    thread_safe: bool
    """Reads may come from several threads at once (``densereward serve`` shares it); default
    ``False``."""
    boundary_logprobs: Callable[..., list[tuple[TokenLogprobs, TokenLogprobs]]] | None
    """``(prompts, boundary_candidates, chain_candidates, *, back) -> [(at, after)]``: both
    positions of a stepped-back read from one forward pass; ``None`` (default): the engine
    sends two requests."""

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` as it would appear right after the prefill.

        Returns ``None`` when the backend cannot tokenize (then the engine skips the
        single-token check and says so in a warning).
        """

    def next_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Log-probabilities of each candidate string as the next token after each prompt.

        Args:
            prompts: ``(B,)`` prompts.
            candidates: the token strings to report (every spelling of every score level);
                each is known to be a single token.

        Returns:
            ``(B,)`` results, in prompt order.

        Raises:
            BackendError: when the model could not answer after the backend's retries.
        """

    async def anext_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Async variant of :meth:`next_token_logprobs`."""

    def generate(
        self,
        prompts: Sequence[ChatPrompt],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[str]:
        """Sample one continuation of each prompt (after its prefill), ``(B,)`` strings."""

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

    def close(self) -> None:
        """Release the model / connections. Idempotent."""


class LocalAsyncMixin(BackendBase):
    """The async half of the protocol for in-process backends: run the sync method in a worker thread.

    For backends whose work is local compute (transformers, the vLLM offline engine): the event
    loop stays free while the model runs. Network backends implement real async I/O instead.
    """

    async def anext_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Async variant of ``next_token_logprobs`` (runs it in a worker thread)."""
        return await asyncio.to_thread(self.next_token_logprobs, prompts, candidates)  # type: ignore[attr-defined]

    async def agenerate(
        self,
        prompts: Sequence[ChatPrompt],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[str]:
        """Async variant of ``generate`` (runs it in a worker thread)."""
        return await asyncio.to_thread(
            self.generate,  # type: ignore[attr-defined]
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            stop=stop,
        )
