"""Held-out pass rate of a GRPO run: before the first step, every ``heldout.every_steps`` steps,
and after the last (``heldout:`` section, :class:`densereward.policy_eval.HeldoutConfig`).

Before and after are compared with a paired bootstrap CI (``heldout.json``). With
``every_steps`` set the evaluations in between make a held-out learning curve
(``heldout_curve.jsonl``: one row per evaluation, steps 0 ... last), which
:func:`densereward.trainers.grpo.run` then returns as the run's curve, so that
``densereward compare`` puts held-out pass rates, not training-batch ones, through its statistics.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from densereward.io import atomic_write_json, atomic_write_text

__all__ = ["HELDOUT_OFF", "HeldoutEvaluator", "curve_value"]

HELDOUT_OFF = (
    "off: the config has no heldout: section (heldout.data), so the policy's pass rate on "
    "held-out problems was not measured; add one to measure it before the first step and after "
    "the last (docs/grpo.md)"
)
"""Why a GRPO run's ``heldout`` is ``null``: its ``result.json`` says so as ``heldout_reason``,
and the console's summary as ``held-out pass rate ...: off (...)``."""

logger = logging.getLogger("densereward.trainers.grpo")


def curve_value(result: dict[str, Any]) -> tuple[str, float]:
    """The held-out curve's point of one evaluation: ``(mode, pass rate in [0, 1])``.

    Greedy when it was evaluated (one completion per problem), else the mean of the sampled
    pass rates; ``result`` is :func:`densereward.policy_eval.evaluate_pass_rate`'s return.
    """
    mode = "greedy" if result.get("greedy") else "sampled"
    values = result[mode]
    return mode, float(sum(values) / len(values))


class HeldoutEvaluator:
    """Evaluates one GRPO run's policy on the held-out problems; a no-op without ``heldout.data``.

    Args:
        cfg: the run's :class:`~densereward.policy_eval.HeldoutConfig`.
        args: TRL's ``GRPOConfig`` (training temperature and completion length).
        train_problems: the training problems' texts (excluded from the held-out set).
        trainer: the ``GRPOTrainer`` whose ``model`` and ``processing_class`` are evaluated.
    """

    def __init__(self, cfg: Any, args: Any, train_problems: Any, trainer: Any) -> None:
        self.cfg = cfg
        self.args = args
        self.trainer = trainer
        self.results: dict[str, dict[str, Any]] = {}
        self.curve: list[dict[str, Any]] = []
        self.tasks = None
        if cfg.data is not None:
            from densereward.policy_eval import heldout_tasks

            self.tasks = heldout_tasks(cfg, train_problems)

    def evaluate(self, when: str, step: int) -> None:
        """Evaluate now and record it as ``when`` (``before``, ``after`` or ``step<N>``)."""
        if self.tasks is None:
            return
        from densereward.policy_eval import evaluate_pass_rate

        t0 = time.monotonic()
        result = evaluate_pass_rate(
            self.trainer.model,
            self.trainer.processing_class,
            self.tasks,
            self.cfg,
            temperature=self.args.temperature,
            max_new_tokens=self.args.max_completion_length,
        )
        self.results[when] = result
        rates = {m: round(sum(v) / len(v), 3) for m in ("greedy", "sampled") if (v := result[m])}
        wall = time.monotonic() - t0
        logger.info(
            "held-out pass rate %s (step %d, %d problems, %.0f s): %s",
            when,
            step,
            len(self.tasks),
            wall,
            rates,
        )
        mode, value = curve_value(result)
        if not self.curve or self.curve[-1]["step"] != step:
            self.curve.append(
                {"step": int(step), "value": value, "mode": mode, **rates, "wall_s": round(wall, 1)}
            )

    def callback(self):
        """A ``transformers`` callback evaluating every ``cfg.every_steps`` optimizer steps
        (before the last step; ``after`` covers that one); ``None`` when not configured."""
        if self.tasks is None or not self.cfg.every_steps:
            return None
        from transformers import TrainerCallback

        outer = self

        class _EveryK(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                step = int(state.global_step)
                if step % outer.cfg.every_steps == 0 and step < int(state.max_steps):
                    outer.evaluate(f"step{step}", step)

        return _EveryK()

    def summary(self, run_dir: Path, *, write: bool = True) -> dict[str, Any] | None:
        """Pass rates before / after with paired bootstrap CIs (``heldout.json``) and, with
        ``every_steps``, the curve (``heldout_curve.jsonl``); ``None`` unless both ran."""
        if not {"before", "after"} <= set(self.results):
            return None
        from densereward.policy_eval import paired_difference

        before, after = self.results["before"], self.results["after"]
        summary: dict[str, Any] = {
            "n_problems": len(self.tasks),
            "n_samples": self.cfg.n_samples,
            "confidence": self.cfg.confidence,
        }
        for mode in ("greedy", "sampled"):
            if before[mode] is not None:
                summary[mode] = paired_difference(
                    before[mode],
                    after[mode],
                    confidence=self.cfg.confidence,
                    n_resamples=self.cfg.n_resamples,
                    seed=self.cfg.seed,
                )
        if write:  # under torchrun every process evaluates; one writes
            atomic_write_json(
                run_dir / "heldout.json", {"summary": summary, "before": before, "after": after}
            )
            if self.cfg.every_steps:
                import json

                rows = "".join(json.dumps(r) + "\n" for r in self.curve)
                atomic_write_text(run_dir / "heldout_curve.jsonl", rows)
        return summary
