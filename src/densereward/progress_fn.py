"""The progress-function contract, its adapter over the verifier, and the key of a frame sequence.

A *progress function* estimates how far a trajectory has come towards finishing a task,
``progress_fn(tasks, trajectories, **kwargs) -> list[float | None]`` (:data:`ProgressFn`);
:func:`verifier_progress_fn` adapts :meth:`densereward.verifier.Verifier.progress_batch`,
frames included when the rewards are read from rendered frames (``reward.render_frames``).
:func:`frames_digest` is the content hash that keys a read with frames in the progress cache.
This module needs neither Gymnasium nor SB3 (:mod:`densereward.progress_reward` re-exports it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .backends.base import capabilities
from .errors import ConfigError
from .verifier.lazy import VerifierFactory, VerifierHolder

__all__ = [
    "ProgressFn",
    "frames_digest",
    "check_images",
    "check_render_mode",
    "load_triton_before_gl",
    "verifier_progress_fn",
]

ProgressFn = Callable[..., Sequence[float | None]]
"""``progress_fn(tasks: list[str], trajectories: list[str], **kwargs) -> list[float | None]``.

Values in ``[0, 1]`` (1 = task complete), ``None`` = abstained; same length as ``tasks``.
When the wrapper captures frames (``reward.render_frames``) it also passes
``images=list[list[np.ndarray]]``: per trajectory, its frames oldest first, each ``uint8``
``(H, W, 3)``. Why it abstained: an optional ``last_reasons`` list (one ``str | None`` per
value of the last call). An optional ``check_images()`` method raises :class:`ConfigError`
when the function cannot read frames; the wrappers call it at start when frames are on.
"""


def frames_digest(frames: Sequence[Any] | None) -> str:
    """Content hash of a frame sequence, the part of a progress-cache key that holds frames.

    Args:
        frames: frames in order (numpy arrays or anything ``np.asarray`` takes, e.g. PIL
            images), or ``None`` for a read without frames.

    Returns:
        ``""`` for ``None``; else the 32-hex-digit BLAKE2b digest of each frame's shape,
        dtype and pixel bytes, in order: equal pixels give equal digests, one changed pixel,
        another order or another count of frames a different one (~1 ms per 480x480x3 frame).

    >>> a = np.zeros((2, 2, 3), np.uint8)
    >>> frames_digest([a]) == frames_digest([a.copy()]) != frames_digest([a, a]), frames_digest(None)
    (True, '')
    """
    if frames is None:
        return ""
    h = hashlib.blake2b(digest_size=16)
    for frame in frames:
        arr = np.ascontiguousarray(np.asarray(frame))
        h.update(f"{arr.shape}{arr.dtype.str};".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _backend_name(verifier: Any) -> str:
    config = getattr(verifier, "config", None)
    backend = getattr(config, "backend", None) or type(getattr(verifier, "backend", None)).__name__
    model = getattr(config, "model", None)
    return f"{backend!r}" + (f" (model {model!r})" if model else "")


def check_images(verifier: Any) -> None:
    """Raise :class:`ConfigError` unless ``verifier`` reads frames beside the text.

    It does when its ``progress_batch`` takes ``images=`` and, for a verifier with a
    ``backend`` (the engine's), that backend has a true ``supports_images`` (an attribute or
    a method; absent = text only, as the engine treats it).

    Raises:
        ConfigError: naming the backend and model, with the fix.
    """
    batch = getattr(verifier, "progress_batch", None)
    takes = batch is not None and "images" in inspect.signature(batch).parameters
    backend = getattr(verifier, "backend", None)
    flag = True if backend is None else capabilities(backend).supports_images
    if takes and flag:
        return
    why = "its progress_batch takes no images" if not takes else "it reads text only"
    raise ConfigError(
        f"reward.render_frames=true, but the verifier's backend {_backend_name(verifier)} "
        f"cannot read frames ({why}); fix: a vision-language model (e.g. Qwen2.5-VL) as "
        "verifier.model on a backend that takes images, or reward.render_frames=false"
    )


def check_render_mode(config: Any, render_mode: str | None) -> None:
    """Raise :class:`ConfigError` if ``config.render_frames`` asks for frames from an
    environment that cannot render them (``render_mode`` other than ``"rgb_array"``)."""
    if config.render_frames and render_mode != "rgb_array":
        raise ConfigError(
            f"reward.render_frames needs environments made with render_mode='rgb_array', got {render_mode!r}"
        )


def load_triton_before_gl() -> None:
    """Import triton (if installed) before this process renders its first offscreen frame.

    On a machine without a GPU, ``MUJOCO_GL=egl`` (or ``osmesa``) renders with Mesa's
    llvmpipe, and loading triton's bundled LLVM *after* the first frame was rendered kills
    the process (SIGSEGV) -- and torch loads triton lazily: SB3's SAC at its first optimiser,
    transformers' model classes. Measured here: FetchReach rendered, then ``import triton`` or
    ``SAC(...).learn``: segmentation fault; triton first, then rendering: both work.
    :func:`densereward.envs.registration.headless_gl` calls this before any environment is
    made with ``MUJOCO_GL`` egl/osmesa, and the wrappers when ``render_frames`` is on
    (0.3-1.5 s once; a no-op when triton is absent or already loaded).
    """
    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    try:
        importlib.import_module("triton")
    except Exception:  # noqa: BLE001 - a broken triton only matters to whoever imports it
        return


class _VerifierProgress(VerifierHolder):
    """:data:`ProgressFn` over ``Verifier.progress_batch`` (``last_reasons``); picklable."""

    __name__ = "verifier_progress"

    def __init__(self, verifier: Any) -> None:
        super().__init__(verifier)
        self.last_reasons: list[str | None] = []
        self._images_checked = False

    def check_images(self) -> None:
        """:func:`check_images` on a built verifier; a factory not built yet is checked at its
        first call with frames (in the process that builds it)."""
        if isinstance(self._verifier, VerifierFactory):
            return
        check_images(self.verifier)
        self._images_checked = True

    def __call__(
        self, tasks: Sequence[str], trajectories: Sequence[str], **kwargs: Any
    ) -> list[float | None]:
        v = self.verifier
        if "images" in kwargs and not self._images_checked:
            self.check_images()
        results = v.progress_batch(tasks=list(tasks), trajectories=list(trajectories), **kwargs)
        self.last_reasons = [r.reason if r.value is None else None for r in results]
        return [r.value for r in results]

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._images_checked = False  # the copy builds its own verifier: check it again


def verifier_progress_fn(verifier: Any) -> ProgressFn:
    """Adapt :meth:`densereward.verifier.Verifier.progress_batch` to a :data:`ProgressFn`.

    Args:
        verifier: a ``Verifier`` (or anything with ``progress_batch(tasks=...,
            trajectories=...) -> list[ScoreResult]``), or a :class:`VerifierFactory` (built at
            the first call, in the process that makes it: a ``SubprocVecEnv`` worker).

    Returns:
        ``progress_fn(tasks, trajectories, images=None) -> list[float | None]``
        (``ScoreResult.value``; ``None`` where the verifier abstained, its
        ``ScoreResult.reason`` in ``progress_fn.last_reasons``); ``images`` (per trajectory,
        its frames oldest first) goes to ``progress_batch(images=...)``. It pickles (a built
        verifier as its recipe); ``progress_fn.check_images()`` is :func:`check_images`.

    Raises:
        ConfigError: if ``verifier`` has no ``progress_batch`` and is no ``VerifierFactory``;
            at a call with ``images`` (or ``check_images()``), if it cannot read frames.
    """
    if not isinstance(verifier, VerifierFactory) and not hasattr(verifier, "progress_batch"):
        raise ConfigError("verifier must have progress_batch(tasks=..., trajectories=...)")
    return _VerifierProgress(verifier)
