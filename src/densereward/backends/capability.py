"""The capabilities of :class:`~densereward.backends.base.VerifierBackend`, with their defaults.

Its own module (no import of :mod:`.base`), so :mod:`.images` can read a backend's
``supports_images`` without a cycle; :mod:`.base` re-exports everything here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BackendBase", "Capabilities", "capabilities"]


class BackendBase:
    """The capability defaults of :class:`VerifierBackend`: every built-in backend inherits them,
    a plugin may (:class:`LocalAsyncMixin` does), and overrides what it can do."""

    supports_images: bool = False
    text_reads: bool = False
    thinking_template: bool | None = False
    dtype: Any = None
    loads_model: bool = False
    calibration_hint: str = ""
    thread_safe: bool = False
    boundary_logprobs: Callable[..., list[tuple[Any, Any]]] | None = None


@dataclass(frozen=True)
class Capabilities:
    """What one backend can do (:func:`capabilities`); fields as on :class:`VerifierBackend`."""

    supports_images: bool
    text_reads: bool
    thinking_template: bool | None
    dtype: Any
    loads_model: bool
    calibration_hint: str
    thread_safe: bool
    boundary_logprobs: Callable[..., list[tuple[Any, Any]]] | None


def capabilities(backend: Any) -> Capabilities:
    """What ``backend`` declares it can do, :class:`BackendBase`'s default for each capability it
    leaves out (a backend that does not inherit it). A ``supports_images`` method is called.

    >>> capabilities(object()).text_reads, capabilities(object()).boundary_logprobs
    (False, None)
    """
    values = {
        f.name: getattr(backend, f.name, getattr(BackendBase, f.name))
        for f in dataclasses.fields(Capabilities)
    }
    if callable(values["supports_images"]):
        values["supports_images"] = values["supports_images"]()
    return Capabilities(**values)
