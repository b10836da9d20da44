"""The one-item verbs of :class:`~densereward.verifier.Verifier`, each sync and async.

``score`` / ``ascore``, ``compare`` / ``acompare`` and ``progress_curve`` /
``aprogress_curve`` are thin wrappers over the batch verbs of the engine (``score_batch``,
``compare_batch``, ``progress_batch`` and their ``a``-prefixed forms), so a sync verb and its
async form run the same plan and return the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DataError
from ..results import PairwiseResult, ScoreResult

__all__ = ["OneItemVerbs", "progress_trajectories", "checkpoint_frames"]

Criteria = Sequence[str] | Mapping[str, str] | None


def _one(reference: str | None) -> list[str | None] | None:
    return None if reference is None else [reference]


def progress_trajectories(steps: Sequence[str], checkpoints: Sequence[int] | None) -> list[str]:
    """The trajectory text after each checkpoint: ``step 1: ...`` lines up to that step.

    Args:
        steps: ``(T,)`` step descriptions.
        checkpoints: 0-based step indices (default all ``T``).

    Returns:
        One text per checkpoint.

    Raises:
        DataError: if a checkpoint is outside ``[0, T)``.
    """
    idx = list(range(len(steps))) if checkpoints is None else list(checkpoints)
    if any(not 0 <= i < len(steps) for i in idx):
        raise DataError(f"checkpoints must lie in [0, {len(steps)}), got {idx}")
    return ["\n".join(f"step {j + 1}: {s}" for j, s in enumerate(steps[: i + 1])) for i in idx]


def _is_frame(x: Any) -> bool:
    return hasattr(x, "shape") or (hasattr(x, "convert") and hasattr(x, "size"))


def checkpoint_frames(
    images: Sequence[Any] | None, n_steps: int, checkpoints: Sequence[int] | None
) -> list[list[Any]] | None:
    """The frames each checkpoint of :meth:`OneItemVerbs.progress_curve` sees.

    Args:
        images: one frame per step (``(T,)`` frames: checkpoint ``i`` sees frames ``0..i``), or
            one list of frames per checkpoint; ``None``: no frames.
        n_steps: ``T``.
        checkpoints: the checkpoints (default all ``T`` steps).

    Raises:
        DataError: when the count matches neither form.
    """
    if images is None:
        return None
    idx = list(range(n_steps)) if checkpoints is None else list(checkpoints)
    items = list(images)
    if items and all(_is_frame(x) for x in items):
        if len(items) != n_steps:
            raise DataError(f"{len(items)} frames for {n_steps} steps; give one frame per step")
        return [items[: i + 1] for i in idx]
    if len(items) != len(idx):
        raise DataError(
            f"images: {len(items)} entries; give one frame per step ({n_steps}) or one list "
            f"of frames per checkpoint ({len(idx)})"
        )
    return [list(x) for x in items]


class OneItemVerbs:
    """Mixed into :class:`~densereward.verifier.Verifier`: one problem at a time."""

    def score(
        self,
        *,
        problem: str,
        response: Any,
        criteria: Criteria = None,
        reference: str | None = None,
        images: Sequence[Any] | None = None,
    ) -> ScoreResult:
        """Pointwise score of one response (see :meth:`score_batch`); ``images``: the frames
        shown with it (e.g. the final frame of an episode), oldest first."""
        return self.score_batch(  # type: ignore[attr-defined]
            problems=[problem],
            responses=[response],
            criteria=criteria,
            references=_one(reference),
            images=None if images is None else [images],
        )[0]

    async def ascore(
        self,
        *,
        problem: str,
        response: Any,
        criteria: Criteria = None,
        reference: str | None = None,
        images: Sequence[Any] | None = None,
    ) -> ScoreResult:
        """Async :meth:`score`."""
        results = await self.ascore_batch(  # type: ignore[attr-defined]
            problems=[problem],
            responses=[response],
            criteria=criteria,
            references=_one(reference),
            images=None if images is None else [images],
        )
        return results[0]

    def compare(
        self,
        *,
        problem: str,
        a: Any,
        b: Any,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> PairwiseResult:
        """One pairwise comparison (see :meth:`compare_batch`)."""
        return self.compare_batch(  # type: ignore[attr-defined]
            problems=[problem], a=[a], b=[b], criteria=criteria, references=_one(reference)
        )[0]

    async def acompare(
        self,
        *,
        problem: str,
        a: Any,
        b: Any,
        criteria: Criteria = None,
        reference: str | None = None,
    ) -> PairwiseResult:
        """Async :meth:`compare`."""
        results = await self.acompare_batch(  # type: ignore[attr-defined]
            problems=[problem], a=[a], b=[b], criteria=criteria, references=_one(reference)
        )
        return results[0]

    def progress_curve(
        self,
        *,
        problem: str,
        steps: Sequence[str],
        checkpoints: Sequence[int] | None = None,
        images: Sequence[Any] | None = None,
    ) -> list[float | None]:
        """Progress after each step of a trajectory (higher = closer to done).

        Args:
            problem: the task.
            steps: ``(T,)`` step descriptions (``""`` where frames carry the state).
            checkpoints: 0-based step indices to evaluate after (default all ``T``).
            images: ``(T,)`` frames, one per step (checkpoint ``i`` sees frames ``0..i``, cut to
                ``config.frames``), or one list of frames per checkpoint (:func:`checkpoint_frames`).

        Returns:
            One progress value in ``[0, 1]`` (or ``None``: abstained) per checkpoint.

        Raises:
            DataError: if a checkpoint is outside ``[0, T)``, or ``images`` fits neither form.
        """
        trajs = progress_trajectories(steps, checkpoints)
        frames = checkpoint_frames(images, len(steps), checkpoints)
        results = self.progress_batch(  # type: ignore[attr-defined]
            tasks=[problem] * len(trajs), trajectories=trajs, images=frames
        )
        return [r.value for r in results]

    async def aprogress_curve(
        self,
        *,
        problem: str,
        steps: Sequence[str],
        checkpoints: Sequence[int] | None = None,
        images: Sequence[Any] | None = None,
    ) -> list[float | None]:
        """Async :meth:`progress_curve`."""
        trajs = progress_trajectories(steps, checkpoints)
        frames = checkpoint_frames(images, len(steps), checkpoints)
        results = await self.aprogress_batch(  # type: ignore[attr-defined]
            tasks=[problem] * len(trajs), trajectories=trajs, images=frames
        )
        return [r.value for r in results]
