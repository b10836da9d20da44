"""The one small protocol every verifier backend implements, and a name registry.

A backend turns chat prompts into (a) next-token log-probabilities over a given set of
candidate token strings at the position right after an assistant *prefill*, and
(b) sampled text (for the reasoning style and the sampled fallback).

The engine (:mod:`densereward.verifier`) never touches tokenizers or HTTP: it asks a
backend for log-probabilities of the score-token spellings and does the arithmetic.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError

__all__ = [
    "LocalAsyncMixin",
    "ChatPrompt",
    "TokenLogprobs",
    "BackendUsage",
    "VerifierBackend",
    "register_backend",
    "get_backend_class",
    "available_backends",
]


@dataclass(frozen=True)
class ChatPrompt:
    """A chat conversation whose last assistant turn starts with ``prefill``.

    Attributes:
        messages: the turns, each a mapping with ``role`` and ``content`` (system, user,
            and assistant turns for few-shot demonstrations), as a tuple.
        prefill: the text the final assistant turn begins with. The score is read at the
            next token after it (e.g. ``"<score>"``). May be empty.
    """

    messages: tuple[Mapping[str, str], ...]
    prefill: str = ""

    def key(self) -> tuple:
        """A hashable, order-preserving identity of the prompt (for caches)."""
        return (tuple((m["role"], m["content"]) for m in self.messages), self.prefill)


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
    n_failures: int = 0
    seconds: float = 0.0

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


class LocalAsyncMixin:
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


_REGISTRY: dict[str, Callable[..., Any]] = {}


def register_backend(name: str) -> Callable[[type], type]:
    """Class decorator that registers a backend under ``name``."""

    def deco(cls: type) -> type:
        _REGISTRY[name] = cls
        return cls

    return deco


def available_backends() -> list[str]:
    """Names of the registered backends."""
    from . import _load_all  # noqa: F401  (import side effect: registration)

    return sorted(_REGISTRY)


def get_backend_class(name: str) -> Callable[..., Any]:
    """The backend class registered under ``name``.

    Raises:
        ConfigError: for an unknown name, suggesting close matches.
    """
    from . import _load_all  # noqa: F401

    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"unknown verifier backend {name!r}; available: {sorted(_REGISTRY)}.{hint}"
        ) from None
