"""Camera frames for a verifier that sees: bounds, preparation, identity and encodings.

Frames are RGB images, ``uint8`` arrays of shape ``(H, W, 3)`` or ``PIL.Image`` objects. The
engine prepares the frames of each trajectory once (:class:`FramePrep`: stride, the most
recent ``max_frames``, longest side down to ``max_side``), attaches them to the last user turn
of the prompt (:attr:`~densereward.backends.base.ChatPrompt.images`, before its text), and each
backend sends them its own way: image content parts of the processor's chat template (in
process), ``multi_modal_data`` (vLLM offline), ``image_url`` parts with base64 PNG data URLs
(OpenAI-compatible HTTP). :func:`frame_digest` identifies a frame by its bytes and shape, so
the score cache keys on the frames and never on an object's ``id()``.

Pillow (resizing, PNG) is imported on first use.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from ..frames import FrameConfig
from .capability import capabilities

__all__ = [
    "FrameConfig",
    "FramePrep",
    "as_frame",
    "frame_digest",
    "png_data_url",
    "to_pil",
    "chat_messages",
    "frames_of",
    "image_url_part",
]

logger = logging.getLogger(__name__)


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - transformers' image processors need it too
        raise ConfigError(f"camera frames need Pillow: pip install pillow ({e})") from e
    return Image


def as_frame(frame: Any) -> np.ndarray:
    """``frame`` as a C-contiguous ``uint8`` array ``(H, W, 3)`` (RGB).

    Accepts a ``PIL.Image`` (converted to RGB) or an array ``(H, W, 3)`` / ``(H, W, 4)`` (alpha
    dropped) / ``(H, W)`` (grey, repeated) of ``uint8``.

    Raises:
        DataError: for another type, dtype or shape (the message says what is accepted).
    """
    if not isinstance(frame, np.ndarray):
        if hasattr(frame, "convert") and hasattr(frame, "size"):  # a PIL image
            frame = np.asarray(frame.convert("RGB"))
        else:
            raise DataError(
                f"a frame must be a uint8 array (H, W, 3) or a PIL image, got {type(frame).__name__}"
            )
    if frame.dtype != np.uint8:
        raise DataError(
            f"a frame must be uint8 (0-255), got {frame.dtype}; convert with "
            "(np.clip(x, 0, 1) * 255).astype(np.uint8) for floats in [0, 1]"
        )
    if frame.ndim == 2:
        frame = np.repeat(frame[:, :, None], 3, axis=2)
    if frame.ndim != 3 or frame.shape[2] not in (3, 4) or min(frame.shape[:2]) < 1:
        raise DataError(f"a frame must have shape (H, W, 3), got {frame.shape}")
    return np.ascontiguousarray(frame[:, :, :3])


def frame_digest(frame: np.ndarray) -> str:
    """SHA-256 of a prepared frame's shape and bytes (hex): its identity in cache keys."""
    h = hashlib.sha256(repr(tuple(frame.shape)).encode())
    h.update(np.ascontiguousarray(frame).tobytes())
    return h.hexdigest()


def to_pil(frame: np.ndarray) -> Any:
    """A prepared frame as a ``PIL.Image`` (RGB)."""
    return _pil().fromarray(frame, mode="RGB") if frame.ndim == 3 else _pil().fromarray(frame)


def png_data_url(frame: np.ndarray) -> str:
    """``data:image/png;base64,...`` of a prepared frame (lossless), as OpenAI and vLLM accept."""
    buf = io.BytesIO()
    to_pil(frame).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _resize(frame: np.ndarray, max_side: int) -> np.ndarray:
    h, w = frame.shape[:2]
    if max(h, w) <= max_side:
        return frame
    scale = max_side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    image = to_pil(frame).resize(size, resample=_pil().Resampling.BICUBIC)
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8))


class FramePrep:
    """Prepares each trajectory's frames under a :class:`FrameConfig` (one per verifier).

    Args:
        config: the bounds.

    Attributes:
        n_cut: frame lists that were longer than ``max_frames`` and were cut (after stride).
    """

    def __init__(self, config: FrameConfig) -> None:
        self.config = config
        self.n_cut = 0

    def __call__(self, frames: Sequence[Any] | None) -> tuple[np.ndarray, ...]:
        """The frames one read sees, oldest first, the current state last.

        Args:
            frames: ``(T,)`` frames of one trajectory (oldest first), or ``None`` / empty.

        Returns:
            At most ``max_frames`` ``uint8`` arrays ``(h, w, 3)`` with ``max(h, w) <= max_side``.

        Raises:
            DataError: for a frame of another type, dtype or shape, or a non-list argument.
        """
        if frames is None:
            return ()
        if isinstance(frames, np.ndarray) or hasattr(frames, "convert"):
            raise DataError(
                "images must hold one list of frames per trajectory (e.g. [[frame]]), got a "
                "single frame"
            )
        picked = list(frames)[::-1][:: self.config.stride][::-1]
        if len(picked) > self.config.max_frames:
            if self.n_cut == 0:
                logger.warning(
                    "a trajectory has %d frames (stride %d); the verifier sees the last %d "
                    "(verifier.frames.max_frames; said once)",
                    len(picked),
                    self.config.stride,
                    self.config.max_frames,
                )
            self.n_cut += 1
            picked = picked[-self.config.max_frames :]
        return tuple(_resize(as_frame(f), self.config.max_side) for f in picked)

    def batch(self, images: Sequence[Any] | None, n: int, backend: Any) -> list[tuple[Any, ...]]:
        """``(n,)`` prepared frame tuples of ``images`` (one list per item; ``None``: none).

        Raises:
            DataError: when ``images`` is not one list per item, or a frame is malformed.
            ConfigError: when there are frames and ``backend`` lacks ``supports_images``
                (the message names the backend, the model and the fix).
        """
        if images is None:
            return [()] * n
        if isinstance(images, str | np.ndarray) or len(images) != n:
            raise DataError(f"images must hold one list of frames per item ({n} items)")
        frames = [self(f) for f in images]
        if any(frames):
            _check_backend(backend)
        return frames


def frames_of(prompt: Any) -> tuple[np.ndarray, ...]:
    """The frames of a :class:`~densereward.backends.base.ChatPrompt` as ``uint8`` arrays."""
    return tuple(as_frame(f) for f in prompt.images)


def image_url_part(frame: np.ndarray) -> dict[str, Any]:
    """An OpenAI chat ``image_url`` content part holding ``frame`` as a base64 PNG data URL."""
    return {"type": "image_url", "image_url": {"url": png_data_url(frame)}}


def _check_backend(backend: Any) -> None:
    if not capabilities(backend).supports_images:
        raise ConfigError(
            f"the {backend.name!r} verifier backend with model {backend.model_id!r} cannot take "
            "camera frames: use an image-text-to-text model (e.g. Qwen2.5-VL) with the "
            "transformers, vllm or openai backend, or pass no images (reward.render_frames=false)"
        )


def chat_messages(
    messages: Sequence[Mapping[str, str]],
    images: Sequence[np.ndarray],
    image_part: Callable[[np.ndarray], dict[str, Any]],
) -> list[dict[str, Any]]:
    """The turns with ``images`` attached, in order, to the last user turn before its text.

    Without images the turns are plain ``{"role", "content": str}`` mappings. With images the
    last user turn's content becomes ``[image_part(f) for f in images] + [{"type": "text",
    "text": content}]`` (the other turns keep their text).

    Raises:
        DataError: if there are images but no user turn.
    """
    out: list[dict[str, Any]] = [{"role": m["role"], "content": m["content"]} for m in messages]
    if not images:
        return out
    last = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last is None:
        raise DataError("frames need a user turn to attach to")
    text = out[last]["content"]
    out[last]["content"] = [*(image_part(f) for f in images), {"type": "text", "text": text}]
    return out
