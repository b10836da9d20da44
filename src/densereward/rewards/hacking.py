"""Reward-hacking alarm: the dense reward rises but the policy is not getting more answers right.

A policy optimised against a learned reward can raise the reward without raising the true
objective (Gao et al. 2023, "Scaling Laws for Reward Model Overoptimization"; Skalse et al.
2022, "Defining and Characterizing Reward Hacking"). During GRPO the ground truth is known for
every completion (Math-Verify against the reference), so the tell-tale sign can be watched
directly. :class:`HackingAlarm` keeps the last ``window`` batches of (dense score, ground truth,
accept threshold) and compares the older half of the window with the newer half:

* **unexplained rise**: the mean dense reward rose by at least ``min_rise`` (and by at least
  ``z`` standard errors, Welch's t statistic) while the pass rate changed by at most
  ``pass_tolerance`` (flat or falling);
* **TNR collapse**: the verifier's true-negative rate on incorrect completions (at the accept
  threshold in force when each was scored) fell by at least ``tnr_drop``, with at least
  ``min_negatives`` incorrect completions in each half.

Either raises ``hacking_alarm`` = 1 for that batch, logged by
:class:`~densereward.rewards.tracking.RewardQualityTracker` as ``verifier/hacking_alarm`` with its
evidence (``verifier/hacking/dense_rise``, ``.../dense_rise_t``, ``.../pass_rate_change``,
``.../tnr_change``, ``.../window_n``), and logs one warning with the numbers the first time.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["HackingAlarm"]

logger = logging.getLogger(__name__)

_NAN = float("nan")


@dataclass
class HackingAlarm:
    """Detect reward hacking over a window of GRPO batches (see the module docstring).

    Args:
        window: W, the number of most recent batches compared (older W//2 vs newer W//2);
            even, ``>= 2``.
        min_rise: Smallest rise of the mean dense reward (reward units; rewards in ``[0, 1]``).
        z: Smallest Welch t statistic of that rise.
        pass_tolerance: Largest pass-rate change that still counts as flat (e.g. 0.02).
        tnr_drop: Smallest fall of the TNR that raises the alarm, in ``(0, 1]``.
        min_negatives: Incorrect completions each half needs for its TNR to count.

    Raises:
        ConfigError: for a window that is odd or below 2, or a threshold out of range.

    Example:
        >>> alarm = HackingAlarm(window=4, min_rise=0.1, z=2.0)
        >>> for k in range(4):   # the dense reward climbs, the pass rate stays at 1/4
        ...     m = alarm.update([0.2 + 0.2 * k] * 3 + [0.5 + 0.01 * k], [0, 0, 0, 1], threshold=0.5)
        >>> m["hacking_alarm"], round(m["hacking/dense_rise"], 3), m["hacking/pass_rate_change"]
        (1.0, 0.305, 0.0)
    """

    window: int = 8
    min_rise: float = 0.05
    z: float = 2.0
    pass_tolerance: float = 0.02
    tnr_drop: float = 0.25
    min_negatives: int = 8
    fired_at: int | None = field(default=None, init=False)
    """Batch number (0-based) of the first alarm; ``None`` before."""
    _batches: deque = field(init=False, repr=False)
    _n_batches: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.window < 2 or self.window % 2:
            raise ConfigError(f"HackingAlarm.window must be even and >= 2, got {self.window}")
        if self.min_rise < 0 or self.z < 0 or self.pass_tolerance < 0:
            raise ConfigError("HackingAlarm.min_rise, z and pass_tolerance must be >= 0")
        if not 0 < self.tnr_drop <= 1:
            raise ConfigError(f"HackingAlarm.tnr_drop must be in (0, 1], got {self.tnr_drop}")
        self._batches = deque(maxlen=self.window)

    def undefined_reasons(self, metrics: Mapping[str, float]) -> dict[str, str]:
        """Why each undefined (``NaN``) value of :meth:`update`'s latest return is undefined,
        keyed as returned (for the tracker's once-per-run notice).

        >>> alarm = HackingAlarm(window=4)
        >>> alarm.undefined_reasons(alarm.update([0.5], [1]))["hacking_alarm"]
        'the reward-hacking alarm compares the older and newer halves of its last 4 batches; it has 1 so far'
        """
        nan = [
            k
            for k, v in metrics.items()
            if (k == "hacking_alarm" or k.startswith("hacking/")) and math.isnan(v)
        ]
        if len(self._batches) < self.window:
            return dict.fromkeys(
                nan,
                "the reward-hacking alarm compares the older and newer halves of its last "
                f"{self.window} batches; it has {len(self._batches)} so far",
            )
        half = f"a half of the alarm's last {self.window} batches"
        return {
            k: (
                f"fewer than {self.min_negatives} incorrect completions judged at an accept "
                f"threshold in {half}"
                if k == "hacking/tnr_change"
                else f"{half} holds no completion with both a score and a Math-Verify verdict"
            )
            for k in nan
        }

    def update(
        self,
        scores: Sequence[float | None],
        correct: Sequence[float | None],
        *,
        threshold: float | None = None,
        step: int | None = None,
    ) -> dict[str, float]:
        """Add one batch; return the alarm and its evidence (keys without a prefix).

        Args:
            scores: ``(n,)`` dense rewards in ``[0, 1]`` (``None`` = abstained, skipped).
            correct: ``(n,)`` ground truth in ``{0, 1}`` (``None`` = unknown, skipped).
            threshold: Accept threshold in force for this batch (``None``: not calibrated; its
                completions do not count towards the TNR).
            step: Training step, for the warning.

        Returns:
            ``hacking_alarm`` (1.0 / 0.0; NaN until the window is full), and
            ``hacking/dense_rise``, ``hacking/dense_rise_t``, ``hacking/pass_rate_change``,
            ``hacking/tnr_change`` (newer half minus older half; NaN where undefined) and
            ``hacking/window_n`` (labelled completions in the window).
        """
        keep = [
            (float(s), float(c))
            for s, c in zip(scores, correct, strict=True)
            if s is not None and c is not None and not math.isnan(s) and not math.isnan(c)
        ]
        s = np.array([k[0] for k in keep], dtype=np.float64)
        y = np.array([k[1] for k in keep], dtype=np.float64)
        thr = _NAN if threshold is None else float(threshold)
        self._batches.append((s, y, np.full(s.shape, thr)))
        self._n_batches += 1
        out = {
            "hacking_alarm": _NAN,
            "hacking/dense_rise": _NAN,
            "hacking/dense_rise_t": _NAN,
            "hacking/pass_rate_change": _NAN,
            "hacking/tnr_change": _NAN,
            "hacking/window_n": float(sum(b[0].size for b in self._batches)),
        }
        if len(self._batches) < self.window:
            return out
        half = self.window // 2
        old = [np.concatenate(a) for a in zip(*list(self._batches)[:half], strict=True)]
        new = [np.concatenate(a) for a in zip(*list(self._batches)[half:], strict=True)]
        if not old[0].size or not new[0].size:
            return out
        rise = float(new[0].mean() - old[0].mean())
        se = math.sqrt(_var_over_n(old[0]) + _var_over_n(new[0]))
        t = rise / se if se > 0 else (math.inf if rise > 0 else 0.0)
        d_pass = float(new[1].mean() - old[1].mean())
        d_tnr = _tnr(new, self.min_negatives) - _tnr(old, self.min_negatives)
        unexplained = rise >= self.min_rise and t >= self.z and d_pass <= self.pass_tolerance
        collapse = not math.isnan(d_tnr) and d_tnr <= -self.tnr_drop
        out.update(
            {
                "hacking_alarm": float(unexplained or collapse),
                "hacking/dense_rise": rise,
                "hacking/dense_rise_t": t,
                "hacking/pass_rate_change": d_pass,
                "hacking/tnr_change": d_tnr,
            }
        )
        if (unexplained or collapse) and self.fired_at is None:
            self.fired_at = self._n_batches - 1
            why = (
                "the dense reward rose while the pass rate did not"
                if unexplained
                else ("the verifier's TNR collapsed")
            )
            logger.warning(
                "reward hacking suspected%s: %s. Over the last %d batches (older half -> newer "
                "half): mean dense reward %.3f -> %.3f (rise %+.3f, t = %.1f), Math-Verify pass "
                "rate %.3f -> %.3f (%+.3f), TNR %s. Inspect the logged completions for text "
                "addressed to the grader; reward.type=gated with the injection pre-filter keeps "
                "the dense reward from outweighing correctness (docs/reward_hacking.md).",
                "" if step is None else f" at step {step}",
                why,
                self.window,
                float(old[0].mean()),
                float(new[0].mean()),
                rise,
                t,
                float(old[1].mean()),
                float(new[1].mean()),
                d_pass,
                "n/a"
                if math.isnan(d_tnr)
                else f"{_tnr(old, self.min_negatives):.3f} -> "
                f"{_tnr(new, self.min_negatives):.3f} ({d_tnr:+.3f})",
            )
        return out

    def state_dict(self) -> dict[str, Any]:
        """The window of batches and the first alarm, as JSON-able values (for a resumed run)."""
        return {
            "batches": [[a.tolist() for a in b] for b in self._batches],
            "n_batches": self._n_batches,
            "fired_at": self.fired_at,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (the last ``window`` batches are kept)."""
        self._batches = deque(
            (tuple(np.asarray(a, dtype=np.float64) for a in b) for b in state["batches"]),
            maxlen=self.window,
        )
        self._n_batches = int(state["n_batches"])
        self.fired_at = state["fired_at"]


def _var_over_n(x: np.ndarray) -> float:
    """Squared standard error of the mean of ``x`` (0 for fewer than two values)."""
    return float(x.var(ddof=1) / x.size) if x.size > 1 else 0.0


def _tnr(half: list[np.ndarray], min_negatives: int) -> float:
    """TNR of the incorrect completions of a half-window at their thresholds (NaN if too few).

    Completions scored before a threshold existed (``NaN``) are left out.
    """
    from ..metrics.classification import tnr

    s, y, thr = half
    decided = np.isfinite(thr)
    if ((y == 0) & decided).sum() < min_negatives:
        return _NAN
    return tnr(s[decided], y[decided], thr[decided])
