"""A TRL / transformers ``TrainerCallback`` that finishes a :class:`RewardQualityTracker`'s work.

Kept apart from :mod:`densereward.rewards.tracking` because importing ``transformers``'
trainer machinery takes seconds; ``from densereward.rewards import RewardQualityCallback``
loads this module on first use.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from .tracking import RewardQualityTracker

__all__ = ["RewardQualityCallback"]

logger = logging.getLogger(__name__)


class RewardQualityCallback(TrainerCallback):
    """Give a reward-quality tracker the run directory and draw its plot when training ends.

    ``GRPOTrainer(..., callbacks=[RewardQualityCallback(tracker)])``: at the start of training
    a tracker made without a run directory gets ``args.output_dir`` (so
    ``reward_quality.jsonl`` goes there); at the end ``reward_quality.png`` is written, with a
    note on any metric that was undefined and why. Only the main process writes.

    Args:
        tracker: The :class:`RewardQualityTracker` the reward functions were built with.

    Raises:
        TypeError: if ``tracker`` is not a :class:`RewardQualityTracker`.
    """

    def __init__(self, tracker: RewardQualityTracker) -> None:
        if not isinstance(tracker, RewardQualityTracker):
            raise TypeError(
                f"RewardQualityCallback needs the RewardQualityTracker given to the reward "
                f"functions, got {type(tracker).__name__}"
            )
        self.tracker = tracker
        self.plot_path: Path | None = None
        """Where the plot was written at the end of training (``None`` before, or without data)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker.run_dir is None and state.is_world_process_zero and args.output_dir:
            self.tracker.run_dir = Path(args.output_dir)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        has_rows = self.tracker.records or (
            self.tracker.jsonl_path is not None and self.tracker.jsonl_path.is_file()
        )
        if not (state.is_world_process_zero and has_rows and self.tracker.run_dir is not None):
            return
        self.plot_path = self.tracker.plot()
        logger.info("reward-quality plot: %s", self.plot_path)
