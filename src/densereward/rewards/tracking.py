"""Reward-quality tracking during GRPO: how good is the dense reward as the policy strengthens?

On every reward call (one GRPO generation batch) :class:`RewardQualityTracker` compares the
verifier's per-completion score with the Math-Verify ground truth on the *same* completions
and

* logs the metrics through TRL's ``log_metric`` under ``verifier/`` (TRL averages them over
  the logging interval and sends them to W&B with ``rewards/*``, ``kl``, ...);
* adds ``verifier_score`` and ``ground_truth`` columns to the completions table via
  ``log_extra``;
* appends one record per call to ``<run_dir>/reward_quality.jsonl`` (crash-safe, see
  :func:`densereward.io.append_jsonl`);
* :meth:`RewardQualityTracker.plot` draws every metric against the step (PNG): the
  verification-dynamics view of Zhou et al. 2025 (TPR / TNR as the generator's pass rate
  rises).

The metrics themselves (keys, definitions, the pooled ``verifier/pass_rate``) are the pure
functions of :mod:`densereward.rewards.quality`. The accept threshold of the rates is
``verifier/threshold``: fixed, read from an eval-verifier ``metrics.json``, or ``auto``
(Youden's J on every labelled completion of *earlier* batches, so each batch is scored out of
sample; until earlier batches hold both classes it is chosen on the batch itself, flagged by
``verifier/threshold_in_sample`` = 1).

Metric keys (stable): ``verifier/tpr``, ``verifier/tnr``, ``verifier/balanced_accuracy``,
``verifier/precision`` (at the verifier threshold), ``verifier/auroc``,
``verifier/verifier_gain`` (precision - pass rate, Lu et al. 2025 eq. 1),
``verifier/pass_rate`` (the pooled pass rate: the fraction of the batch's completions that
Math-Verify finds correct, the policy's accuracy = generator capability),
``verifier/tie_rate``, ``verifier/mean_mass``, ``verifier/n_abstained``,
``verifier/frac_zero_spread_sparse``, ``verifier/frac_zero_spread_dense``,
``verifier/tpr/level_<k>`` and ``verifier/tnr/level_<k>`` (MATH level k = 1..5), ``verifier/n``,
``verifier/n_read``, ``verifier/n_read_correct``, ``verifier/n_read_incorrect``,
``verifier/n_accepted`` (read completions scored >= the threshold), ``verifier/n_unread``.

A rate rests on at least :data:`~densereward.rewards.quality.MIN_PER_CLASS` (5) read completions
of each class it needs (TPR correct ones, TNR incorrect ones, AUROC and the others both;
precision and the verifier gain accepted ones, ``n_accepted``), in the batch and in the window
alike; with fewer it is ``null`` and the log and the plot say "fewer than 5 correct read
completions in the window (k)" ("fewer than 5 accepted read completions in the window (k)").
The first step a metric is undefined, one warning names it, the batch's (``verifier/tpr``) and
the window's (``verifier/window/tpr``) alike, with its reason
(:func:`~densereward.rewards.quality.undefined_reasons`); ``verifier/tie_rate`` and
``verifier/mean_mass`` are undefined in a batch the verifier read none of.

Counts: a ``verifier/n_*`` key counts this batch's completions; a ``verifier/total/n_*`` key is
a counter of the verifier engine, cumulative since it was built (``extra_metrics``);
``verifier/window/n_read`` counts the window (``verifier/window/n_read_correct``,
``verifier/window/n_read_incorrect`` by class, ``verifier/window/n_accepted`` the accepted
ones; ``verifier/window/read_pass_rate`` is their
correct share, over read completions only, unlike ``verifier/pass_rate``).

The verifier's quality metrics rest on its *reads*: a completion it scored without a model call
(no final answer under the ``answer_match`` prompt, an empty response: reward 0 without a read;
``read`` False) is counted in ``verifier/n_unread`` and left out of TPR, TNR, AUROC and the rest,
of the window and of the auto threshold (a 0 that was never read says nothing about the judge).
``verifier/n_read`` and ``verifier/window/n_read`` say how many reads the metrics rest on; with
none, the metrics are undefined (``null``), and the log and the plot say why.

A batch holds a few completions (often all wrong, or all right), so most per-batch rates are
undefined. The tracker also computes the labelled metrics over a rolling window of the last
``window`` labelled completions: ``verifier/window/<metric>`` for every metric of
:data:`~densereward.rewards.quality.WINDOW_KEYS`; the plot draws those as lines and the
per-batch values as faint dots.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..io import append_jsonl, atomic_write_json, read_jsonl
from ._common import check_lengths, group_slices
from .quality import (
    LENGTH_SETTING,
    MIN_PER_CLASS,
    WINDOW_KEYS,
    format_metrics,
    group_by_reason,
    labelled_metrics,
    reward_quality_metrics,
    undefined_reasons,
)
from .tracking_plot import PLOT_KEYS, plot_reward_quality

STATE_FILE = "reward_quality_state.json"
"""The tracker's state in each ``checkpoint-<step>`` directory (:meth:`RewardQualityTracker.state_dict`)."""

__all__ = [
    "RewardQualityTracker",
    "reward_quality_metrics",
    "labelled_metrics",
    "plot_reward_quality",
    "PLOT_KEYS",
    "WINDOW_KEYS",
    "SHARED_STATE_FILE",
]

_NAN = float("nan")

SHARED_STATE_FILE = "reward_quality_shared_state.json"
"""In the run directory: the newest tracker state of a copy in another process, for the others."""

logger = logging.getLogger(__name__)


class RewardQualityTracker:
    """Track the verifier reward against Math-Verify ground truth during a GRPO run.

    One tracker is shared by the verifier reward function(s) of a run; it is called from the
    reward function with the batch's scores and ground truth (:meth:`update`).

    Args:
        run_dir: Run directory; ``reward_quality.jsonl`` and ``reward_quality.png`` go there.
            ``None`` keeps metrics in memory only (``records``).
        threshold: Accept threshold on the ``[0, 1]`` score (``VerifierConfig.threshold``):
            ``"auto"`` (Youden's J, :func:`densereward.metrics.best_threshold`, on every
            labelled completion of earlier batches; on the batch itself, flagged, until earlier
            ones hold both classes), a number, or an eval-verifier ``metrics.json`` path (see
            :func:`densereward.config.resolve_threshold`).
        window: W, the number of most recent labelled completions of the
            ``verifier/window/*`` metrics (>= 1).
        history: the auto threshold is chosen on the last ``history`` labelled completions
            (``None``: all earlier ones, as a training run does); a bound keeps a long-running
            reward server's memory and per-batch cost flat.
        max_records: keep the last ``max_records`` batch records in :attr:`records`
            (``None``: all; the JSONL file always gets every record).
        tie_eps: Scores within ``tie_eps`` count as tied.
        prefix: Metric-key prefix.
        alarm: Reward-hacking alarm (:class:`~densereward.rewards.hacking.HackingAlarm`, logged
            as ``verifier/hacking_alarm`` and ``verifier/hacking/*``): ``True`` = one with the
            default settings, ``False`` = none, or an instance.
        length_setting: the completion-length setting the format warning names (a reward
            server's completions are bounded by its clients' settings).
        min_per_class: the fewest read completions of a class a metric that needs it is given
            from, per batch and in the window (:data:`~densereward.rewards.quality.MIN_PER_CLASS`;
            recorded as the record's ``min_per_class``).
        unit: what the log calls one update: ``"step"`` (a training step) or ``"batch"`` (a
            reward server's request; its records' ``step`` counts batches).

    The window, the auto threshold and the alarm live in memory; :meth:`state_dict` and
    :meth:`load_state_dict` carry them across a resume (the TRL callback saves them in each
    checkpoint). A copy unpickled in another process (TRL's async GRPO rollout child, which
    scores while the trainer checkpoints) shares its state with the original through
    ``<run_dir>/`` :data:`SHARED_STATE_FILE`: the copy adopts a newer state written there before
    each update and writes its own after it; the original adopts the copy's in :meth:`sync`
    (the callback's ``on_save``) and writes a resumed state with :meth:`publish`.

    Raises:
        ConfigError: for an invalid threshold or ``window < 1``.
    """

    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        threshold: float | str = "auto",
        window: int = 256,
        history: int | None = None,
        max_records: int | None = None,
        tie_eps: float = 1e-3,
        prefix: str = "verifier/",
        alarm: Any = True,
        length_setting: str = LENGTH_SETTING,
        min_per_class: int = MIN_PER_CLASS,
        unit: str = "step",
    ) -> None:
        from ..config import resolve_threshold
        from ..errors import ConfigError
        from .hacking import HackingAlarm

        self.alarm: HackingAlarm | None = HackingAlarm() if alarm is True else (alarm or None)

        if window < 1:
            raise ConfigError(f"reward-quality window must be >= 1, got {window}")
        for name, value in (("history", history), ("max_records", max_records)):
            if value is not None and value < 1:
                raise ConfigError(f"reward-quality {name} must be >= 1 or None, got {value}")
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._fixed_threshold, self.threshold_source = resolve_threshold(threshold)
        self.threshold: float | None = self._fixed_threshold
        """The threshold in force (``None`` while ``auto`` has not seen both classes)."""
        self.window = window
        self.tie_eps = tie_eps
        self.prefix = prefix
        self.history = history
        self.max_records = max_records
        self.records: list[dict[str, Any]] = []
        """One record a batch (``step``, ``time_s``: seconds since the tracker was made,
        continued after ``--resume`` from the checkpoint's state (the time a stopped start spent
        after that checkpoint, and the resumed start's loading, not counted), ``threshold_source``, ``window``,
        ``min_per_class`` and the ``<prefix>`` metrics), as in ``reward_quality.jsonl``, except
        that a metric undefined at that step is NaN in ``tracker.records`` and ``null`` in
        ``reward_quality.jsonl``."""
        self._n_updates = 0
        self._lock = threading.Lock()
        self._explained: set[str] = set()  # undefined metrics already explained in the log
        self._format_warned = False  # the format warning of format_metrics is said once
        self.length_setting = length_setting
        self.min_per_class = min_per_class
        self.unit = unit
        self._t0 = time.monotonic()
        # the labelled (score, label) pairs the auto threshold is chosen on (the last `history`)
        self._seen: tuple[deque[float], deque[float]] = (
            deque(maxlen=history),
            deque(maxlen=history),
        )
        self._recent: deque[tuple[float, float, str, float]] = deque(maxlen=window)
        self._home_pid = os.getpid()  # a copy in another process shares state through run_dir
        self._state_at = 0.0  # time.time() of the newest shared state this instance holds

    def __getstate__(self) -> dict[str, Any]:
        # picklable (TRL's async rollout worker ships the reward functions, and their tracker,
        # to a spawned process): everything but the lock, which the copy creates afresh
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _calibrate(self, s: np.ndarray, y: np.ndarray) -> tuple[float | None, bool]:
        """The threshold for this batch and whether it was chosen on the batch itself."""
        from ..metrics.classification import best_threshold

        if self._fixed_threshold is not None:
            return self._fixed_threshold, False
        past_s, past_y = (np.asarray(v, dtype=np.float64) for v in self._seen)
        t = best_threshold(past_s, past_y)["threshold"] if past_y.size else _NAN
        if math.isfinite(t):
            return t, False
        t = best_threshold(np.r_[past_s, s], np.r_[past_y, y])["threshold"]
        return (t, True) if math.isfinite(t) else (None, False)

    @property
    def jsonl_path(self) -> Path | None:
        """``<run_dir>/reward_quality.jsonl`` (``None`` without a run directory)."""
        return self.run_dir / "reward_quality.jsonl" if self.run_dir else None

    @property
    def plot_path(self) -> Path | None:
        """``<run_dir>/reward_quality.png`` (``None`` without a run directory)."""
        return self.run_dir / "reward_quality.png" if self.run_dir else None

    def update(
        self,
        *,
        prompts: Sequence[Any],
        scores: Sequence[float | None],
        correct: Sequence[float | None],
        levels: Sequence[Any] | None = None,
        masses: Sequence[float | None] | None = None,
        num_generations: int | None = None,
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        score_name: str = "verifier_score",
        extra_metrics: dict[str, float] | None = None,
        answer_reasons: Sequence[str | None] | None = None,
        read: Sequence[bool] | None = None,
    ) -> dict[str, float]:
        """Compute, log and record the metrics of one batch.

        Under several training processes the metrics cover the completions of all of them
        (:func:`gather_across_processes`; every process must call ``update`` once per batch).

        Args:
            prompts: ``(n,)`` prompts (to find the GRPO groups).
            scores: ``(n,)`` verifier scores in ``[0, 1]`` or ``None``.
            correct: ``(n,)`` Math-Verify ground truth in ``{0, 1}`` or ``None``.
            levels: ``(n,)`` difficulty levels or ``None``.
            masses: ``(n,)`` score-token masses or ``None``.
            num_generations: GRPO group size, if known.
            trainer_state: TRL's ``TrainerState``; the record's ``step`` is
                ``global_step + 1`` (the optimizer step these completions train).
            log_metric: TRL's ``log_metric`` (defined metrics only; NaN is skipped), or a
                callable with a true ``logs_undefined`` attribute, which gets the undefined
                ones as NaN too (``densereward serve``'s Prometheus gauges: a gauge shows NaN
                for a batch that left its metric undefined, not an earlier batch's value).
            log_extra: TRL's ``log_extra`` (adds ``score_name`` and ``ground_truth`` columns).
            score_name: Completions-table column for the scores.
            extra_metrics: further metrics to log and record with the same prefix (e.g. the
                verifier's cumulative ``total/n_failures``, ``total/n_truncated``).
            answer_reasons: ``(n,)`` why the sparse check found no final answer
                (``"no_answer"``, ``"unclosed_thinking"``) or ``None``; gives
                ``frac_no_answer_sparse`` and ``frac_unclosed_thinking_sparse`` (gathered like the scores)
                and the once-per-run format warning (:func:`format_metrics`).
            read: ``(n,)`` False where the verifier gave the score without a model read
                (left out of the quality metrics, counted in ``n_unread``); ``None``: all read.

        Returns:
            The metrics, keys with the prefix.

        Raises:
            DataError: if the per-completion sequences differ in length.
        """
        # the metrics cover every process's completions; the completions table stays local
        all_prompts, all_scores, all_correct, all_levels, all_masses, all_reasons, all_read = (
            gather_across_processes(prompts, scores, correct, levels, masses, answer_reasons, read)
        )
        groups = group_slices(all_prompts, num_generations)
        step = int(getattr(trainer_state, "global_step", self._n_updates)) + 1
        copy = self._is_copy()
        if copy:  # a resumed state the original loaded after this copy was made
            self.sync()
        with self._lock:
            windowed = self._update_window(all_prompts, all_scores, all_correct, groups, all_read)
            alarm_why: dict[str, str] = {}
            if self.alarm is not None:
                alarm_out = self.alarm.update(
                    all_scores,
                    all_correct,
                    threshold=self.threshold,
                    step=step if self.unit == "step" else None,
                )
                windowed.update(alarm_out)
                alarm_why = self.alarm.undefined_reasons(alarm_out)
        metrics = reward_quality_metrics(
            all_scores,
            all_correct,
            threshold=self.threshold,
            groups=groups,
            levels=all_levels,
            masses=all_masses,
            tie_eps=self.tie_eps,
            read=all_read,
            min_per_class=self._min_per_class(),
        )
        metrics.update(windowed)
        if all_reasons is not None:
            fmt, warn = format_metrics(
                all_reasons,
                all_scores,
                getattr(self, "length_setting", LENGTH_SETTING),
                read=all_read,
            )
            metrics.update(fmt)
            if warn and not self._format_warned:
                self._format_warned = True
                logger.warning(warn)
        metrics.update(extra_metrics or {})
        metrics = {self.prefix + k: v for k, v in metrics.items()}
        reasons = undefined_reasons(
            {**metrics, "min_per_class": self._min_per_class()}, self.prefix, batch=True
        )
        reasons.update(alarm_why)
        fresh = {k: why for k, why in reasons.items() if k not in self._explained}
        if fresh:  # each metric once per run: one message per step, one line per reason
            self._explained.update(fresh)
            logger.warning(
                "undefined at %s %d, not logged while undefined (each said once):\n%s",
                self.unit,
                step,
                "\n".join(
                    f"  {', '.join(self.prefix + k for k in keys)}: {why}"
                    for keys, why in group_by_reason(fresh.items())
                ),
            )
        if log_metric is not None:
            every = getattr(log_metric, "logs_undefined", False)
            for k, v in metrics.items():
                if every or not math.isnan(v):
                    log_metric(k, v)
        if log_extra is not None:
            log_extra(score_name, [_nan_if_none(x) for x in scores])
            log_extra("ground_truth", [_nan_if_none(x) for x in correct])
        record = {
            "step": step,
            "time_s": round(time.monotonic() - self._t0, 3),
            "threshold_source": self.threshold_source,
            "window": self.window,
            "min_per_class": self._min_per_class(),
            **metrics,
        }
        with self._lock:
            self.records.append(record)
            self._n_updates += 1
            if self.max_records is not None and len(self.records) > self.max_records:
                del self.records[: len(self.records) - self.max_records]
            if self.jsonl_path is not None:
                append_jsonl(self.jsonl_path, record)
        if copy:  # for the original's checkpoints
            self.publish()
        return metrics

    def _update_window(
        self,
        prompts: Sequence[Any],
        scores: Sequence[float | None],
        correct: Sequence[float | None],
        groups: list[slice],
        read: Sequence[bool] | None = None,
    ) -> dict[str, float]:
        """Set this batch's threshold, add its labelled, read completions to the window; window
        metrics (``window/n_read``, ``window/n_read_correct``, ``window/n_read_incorrect``,
        ``window/n_accepted``: the reads they rest on; below :data:`~densereward.rewards.quality.MIN_PER_CLASS` of a class the
        metrics that need it are ``NaN``).

        Each completion keeps the threshold in force when it was scored, so with ``auto`` the
        window's rates are out of sample except for the flagged first batches.
        """
        check_lengths(completions=scores, correct=correct, prompts=prompts)
        keys = [str(prompts[g.start]) for g in groups for _ in range(g.start, g.stop)]
        valid = [
            i
            for i, (x, c) in enumerate(zip(scores, correct, strict=True))
            if x is not None and c is not None and not math.isnan(x) and (read is None or read[i])
        ]
        s = np.array([scores[i] for i in valid], dtype=np.float64)
        y = np.array([correct[i] for i in valid], dtype=np.float64)
        self.threshold, in_sample = self._calibrate(s, y)
        thr = _NAN if self.threshold is None else self.threshold
        self._seen[0].extend(s.tolist())
        self._seen[1].extend(y.tolist())
        self._recent.extend((float(s[j]), float(y[j]), keys[i], thr) for j, i in enumerate(valid))
        ws, wy, wk, wt = (
            (list(v) for v in zip(*self._recent, strict=True)) if self._recent else ([], [], [], [])
        )
        window = labelled_metrics(
            np.asarray(ws, dtype=np.float64),
            np.asarray(wy, dtype=np.float64),
            wk,
            np.asarray(wt, dtype=np.float64),
            self._min_per_class(),
        )
        window["read_pass_rate"] = window["pass_rate"]  # of the read completions only
        out = {f"window/{k}": window[k] for k in WINDOW_KEYS}
        out["window/n_read"] = window["n"]
        out["window/n_read_correct"] = window["n_correct"]
        out["window/n_read_incorrect"] = window["n_incorrect"]
        out["window/n_accepted"] = window["n_accepted"]
        out["threshold"] = thr
        out["threshold_in_sample"] = float(in_sample)
        return out

    def _min_per_class(self) -> int:
        return getattr(self, "min_per_class", MIN_PER_CLASS)  # a copy pickled before it existed

    @property
    def shared_state_path(self) -> Path | None:
        """``<run_dir>/`` :data:`SHARED_STATE_FILE` (``None`` without a run directory)."""
        return self.run_dir / SHARED_STATE_FILE if self.run_dir else None

    def sync(self) -> bool:
        """Adopt the state another instance (a copy in another process) wrote to
        :attr:`shared_state_path` after this one's newest; ``True`` if one was adopted."""
        path = self.shared_state_path
        try:
            shared = json.loads(path.read_text(encoding="utf-8")) if path else None
        except (OSError, ValueError):  # none yet, or a torn file from a killed writer
            return False
        if (
            not isinstance(shared, dict)
            or shared.get("writer") == self._writer()
            or not shared.get("written_at", 0.0) > self._state_at
        ):
            return False
        self.load_state_dict(shared["state"])
        self._state_at = float(shared["written_at"])
        return True

    def publish(self) -> None:
        """Write :meth:`state_dict` to :attr:`shared_state_path` for the other copies."""
        if self.shared_state_path is None:
            return
        now = time.time()
        atomic_write_json(
            self.shared_state_path,
            {"writer": self._writer(), "written_at": now, "state": self.state_dict()},
        )
        self._state_at = now

    def _writer(self) -> str:
        return f"{os.getpid()}:{id(self)}"

    def _is_copy(self) -> bool:
        """Unpickled in a process other than the one that made it."""
        return os.getpid() != getattr(self, "_home_pid", os.getpid())

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue: the window, the labelled scores the auto
        threshold is chosen on, the threshold in force, the alarm and ``time_s`` (JSON-able)."""
        with self._lock:
            return {
                "version": 1,
                "threshold": self.threshold,
                "seen": [list(self._seen[0]), list(self._seen[1])],
                "recent": [list(r) for r in self._recent],
                "alarm": self.alarm.state_dict() if self.alarm is not None else None,
                "explained": sorted(self._explained),
                "format_warned": self._format_warned,
                "time_s": round(time.monotonic() - self._t0, 3),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (of a run with any window: the newest are kept).

        Raises:
            DataError: for a state of another format.
        """
        from ..errors import DataError

        if not isinstance(state, dict) or state.get("version") != 1:
            raise DataError("not a reward-quality tracker state (version 1)")
        with self._lock:
            if self._fixed_threshold is None:
                self.threshold = state["threshold"]
            self._seen = (
                deque((float(x) for x in state["seen"][0]), maxlen=self.history),
                deque((float(x) for x in state["seen"][1]), maxlen=self.history),
            )
            self._recent = deque(
                (
                    (float(s), float(y), str(k), _NAN if t is None else float(t))
                    for s, y, k, t in state["recent"]
                ),
                maxlen=self.window,
            )
            if self.alarm is not None and state.get("alarm") is not None:
                self.alarm.load_state_dict(state["alarm"])
            self._explained = set(state.get("explained", ()))
            self._format_warned = bool(state.get("format_warned", False))
            if isinstance(state.get("time_s"), (int, float)):  # time_s continues from the save
                self._t0 = time.monotonic() - float(state["time_s"])

    def plot(self, path: str | Path | None = None) -> Path | None:
        """Plot the recorded metrics against the step; see :func:`plot_reward_quality`."""
        src = self.jsonl_path if self.jsonl_path is not None and self.jsonl_path.is_file() else None
        out = Path(path) if path is not None else self.plot_path
        if out is None:
            return None
        records = list(read_jsonl(src)) if src is not None else self.records
        return plot_reward_quality(records, out, prefix=self.prefix)


def gather_across_processes(*columns: Sequence[Any] | None) -> tuple[list[Any] | None, ...]:
    """Per-completion columns of every training process, concatenated in rank order.

    Under a multi-process launch (``torchrun``, ``accelerate launch``) TRL calls the reward
    functions on every process with that process's share of the generation batch; the
    reward-quality metrics must cover the whole batch. Rank order restores TRL's global batch
    order, so GRPO groups split over processes are whole again. This is a collective
    (``torch.distributed.all_gather_object``): every process must call it the same number of
    times, which holds because every process calls its reward functions once per batch. Without
    an initialised process group of two or more processes the columns come back unchanged.

    Args:
        *columns: ``(n_local,)`` sequences (``None`` stays ``None``).

    Returns:
        The columns, each ``(n_total,)`` (``None`` where given ``None``).
    """
    import sys

    dist = sys.modules.get("torch.distributed")  # never imports torch for a single process
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return tuple(None if c is None else list(c) for c in columns)
    if dist.get_world_size() < 2:
        return tuple(None if c is None else list(c) for c in columns)
    local = [None if c is None else list(c) for c in columns]
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, local)
    return tuple(
        None if local[i] is None else [x for part in parts for x in part[i]]
        for i in range(len(columns))
    )


def _nan_if_none(x: float | None) -> float:
    return _NAN if x is None else float(x)
