"""Verifier backends: transformers, vLLM offline, OpenAI-compatible HTTP, sampled fallback.

Pick one by name with :func:`get_backend_class` or :func:`create_backend`; the names live in
a declarative table of entry points (:mod:`.registry`), imported only when a backend is built.
"""

from __future__ import annotations

from .base import BackendUsage, ChatPrompt, TokenLogprobs, VerifierBackend
from .registry import (
    available_backends,
    backend_options_class,
    check_backend_name,
    create_backend,
    get_backend_class,
    register_backend,
)

__all__ = [
    "BackendUsage",
    "ChatPrompt",
    "TokenLogprobs",
    "VerifierBackend",
    "available_backends",
    "backend_options_class",
    "check_backend_name",
    "create_backend",
    "get_backend_class",
    "register_backend",
]
