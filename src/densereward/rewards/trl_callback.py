"""A TRL / transformers ``TrainerCallback`` that finishes a :class:`RewardQualityTracker`'s work.

Kept apart from :mod:`densereward.rewards.tracking` because importing ``transformers``'
trainer machinery takes seconds; ``from densereward.rewards import RewardQualityCallback``
loads this module on first use.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..io import atomic_write_json
from .tracking import STATE_FILE, RewardQualityTracker

__all__ = ["STATE_FILE", "RewardQualityCallback"]

logger = logging.getLogger(__name__)


class RewardQualityCallback(TrainerCallback):
    """Give a reward-quality tracker the run directory and draw its plot when training ends.

    ``GRPOTrainer(..., callbacks=[RewardQualityCallback(tracker)])``: at the start of training
    a tracker made without a run directory gets ``args.output_dir`` (so
    ``reward_quality.jsonl`` goes there); at the end ``reward_quality.png`` is written, with a
    note on any metric that was undefined and why. Only the main process writes.

    Resuming: each checkpoint gets the tracker's state (``checkpoint-<step>/`` :data:`STATE_FILE`:
    the ``verifier/window/*`` window, the auto threshold's labelled scores, the alarm), and a
    run resumed from ``<output_dir>/checkpoint-<step>`` continues from it at its first step.
    Under TRL's async GRPO the tracker that scores is a copy in the rollout child: the state
    saved is that copy's, and a resumed state reaches it (:meth:`RewardQualityTracker.sync`).

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
        self._resume_checked = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracker.run_dir is None and state.is_world_process_zero and args.output_dir:
            self.tracker.run_dir = Path(args.output_dir)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The Trainer loads a checkpoint's state after on_train_begin: the first step is the
        # first moment the resumed step is known, and comes before its rewards are computed.
        if self._resume_checked:
            return
        self._resume_checked = True
        if state.global_step == 0 or not args.output_dir:
            return
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        if path.is_file():
            self.tracker.load_state_dict(json.loads(path.read_text(encoding="utf-8")))
            self.tracker.publish()  # for a copy made before the step was known (async GRPO)
            logger.info("reward-quality tracker resumed from %s", path)
        else:
            logger.warning(
                "resumed at step %d without %s: the reward-quality window, auto "
                "threshold and alarm start afresh",
                state.global_step,
                path,
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and ckpt.is_dir():
            self.tracker.sync()  # async GRPO: the rollout child's copy is the one that scores
            atomic_write_json(ckpt / STATE_FILE, self.tracker.state_dict())

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        has_rows = self.tracker.records or (
            self.tracker.jsonl_path is not None and self.tracker.jsonl_path.is_file()
        )
        if not (state.is_world_process_zero and has_rows and self.tracker.run_dir is not None):
            return
        self.plot_path = self.tracker.plot()
        logger.info("reward-quality plot: %s", self.plot_path)
