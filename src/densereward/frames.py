"""How many camera frames a verifier that sees reads, and how large: :class:`FrameConfig`.

A leaf (it imports only :mod:`densereward.errors`), so that :class:`~densereward.config.VerifierConfig`
can hold it; the frames themselves are prepared in :mod:`densereward.backends.images`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["FrameConfig", "FRAME_BOUNDS"]

FRAME_BOUNDS = {"max_frames": (1, 32), "max_side": (28, 2048), "stride": (1, 64)}
"""Inclusive bounds of :class:`FrameConfig`'s fields."""


@dataclass(frozen=True)
class FrameConfig:
    """How many camera frames a verifier sees per read, and how large (YAML ``verifier.frames:``).

    Frames are taken every ``stride``-th one counting back from the last (the current state is
    always among them), the most recent ``max_frames`` of those are kept (a longer list is cut
    with a warning said once per verifier), and a frame whose longest side exceeds
    ``max_side`` is shrunk to it, aspect kept (never enlarged).
    """

    max_frames: int = 8
    """Most frames attached to one read, in [1, 32]."""
    max_side: int = 448
    """Longest side of a frame in pixels after resizing, in [28, 2048]."""
    stride: int = 1
    """Take every ``stride``-th frame counting back from the last, in [1, 64]."""

    @classmethod
    def coerce(cls, value: Any) -> FrameConfig:
        """``value`` (a :class:`FrameConfig`, a YAML mapping, or ``None`` = defaults) as one.

        Raises:
            ConfigError: for unknown keys, values out of bounds, or another type.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"verifier.frames must be a mapping such as {{max_frames: 4}}, got {value!r}"
            )
        unknown = sorted(set(value) - set(FRAME_BOUNDS))
        if unknown:
            raise ConfigError(
                f"unknown key(s) in verifier.frames: {unknown}; it takes {', '.join(FRAME_BOUNDS)}"
            )
        try:
            return cls(**{k: int(v) if isinstance(v, str) else v for k, v in value.items()})
        except ValueError as e:
            raise ConfigError(f"verifier.frames: {e}") from None

    def __post_init__(self) -> None:
        for name, (low, high) in FRAME_BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(
                    f"verifier.frames.{name} must be an integer in [{low}, {high}], got {value!r}"
                )
