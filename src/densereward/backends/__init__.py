"""Verifier backends: transformers, vLLM offline, OpenAI-compatible HTTP, sampled fallback.

Pick one by name with :func:`get_backend_class` or :func:`create_backend`.
"""

from __future__ import annotations

from .base import (
    BackendUsage,
    ChatPrompt,
    TokenLogprobs,
    VerifierBackend,
    available_backends,
    get_backend_class,
    register_backend,
)

__all__ = [
    "BackendUsage",
    "ChatPrompt",
    "TokenLogprobs",
    "VerifierBackend",
    "available_backends",
    "get_backend_class",
    "register_backend",
]


def create_backend(config):  # noqa: ANN001, ANN201
    """Build the backend named by ``config.backend`` from a :class:`~densereward.config.VerifierConfig`."""
    return get_backend_class(config.backend)(config)


__all__.append("create_backend")
