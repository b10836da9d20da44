"""The GRPO advantage audit: where does each step's update push, and who decided it?

A reward composition can keep correctness primary *inside* every GRPO group and still let the
judge decide the update *across* groups: TRL's default advantage divides each group's rewards by
that group's spread (``scale_rewards="group"``), so in a group where every completion is wrong
the judge's small differences become unit-size advantages, as large as the one correct answer
of a mixed group gets (issue 36; Dr. GRPO, arXiv 2503.20783; ``shared/notes/dense-rewards.md``).
This module measures that, with TRL's own formula:

* :func:`grpo_advantages`: TRL 1.16's advantage of ``sum_then_normalize`` for
  ``scale_rewards`` ``group`` / ``batch`` / ``none`` (``GRPOTrainer._generate_and_score_completions``).
* :func:`advantage_audit`: the shares of one step's total ``|A|`` that push wrong completions up,
  that sit in groups with no sparse spread, and whether the judge alone decided the step.
* :class:`AdvantageAudit`: the same, online: the reward functions of one GRPO reward report
  their values per generation batch; the audit recombines them with the run's
  ``reward_weights``, ``num_generations`` and ``scale_rewards`` and logs
  ``verifier/advantage/*`` (TRL log, W&B, ``reward_quality.jsonl``, the plot).

Keys (stable, without the ``verifier/advantage/`` prefix): ``wrong_up_share``,
``correct_down_share``, ``constant_group_share``, ``judge_only_step``, ``abs_mean``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = [
    "SCALE_REWARDS",
    "AUDIT_KEYS",
    "grpo_advantages",
    "advantage_audit",
    "AdvantageAudit",
]

SCALE_REWARDS = ("group", "batch", "none")
"""TRL's ``GRPOConfig.scale_rewards`` values."""

AUDIT_KEYS = (
    "wrong_up_share",
    "correct_down_share",
    "constant_group_share",
    "judge_only_step",
    "abs_mean",
)
"""Metric names of :func:`advantage_audit` (logged as ``verifier/advantage/<key>``)."""

_STD_EPS = 1e-4  # TRL 1.16: advantages / (std + 1e-4)


def _nanstd(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """TRL's ``nanstd``: NaN-ignoring standard deviation with Bessel's correction (NaN below 2)."""
    valid = ~np.isnan(x)
    count = valid.sum(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid, x, 0.0).sum(axis=axis, keepdims=True) / count
        sq = np.where(valid, (x - mean) ** 2, 0.0).sum(axis=axis, keepdims=True)
        var = np.where(count > 1, sq / (count - 1), np.nan)
    out = np.sqrt(var)
    return out.reshape(-1) if axis is not None else out.reshape(())


def grpo_advantages(
    rewards: Sequence[float | None], num_generations: int, scale_rewards: str = "group"
) -> np.ndarray:
    """TRL 1.16's GRPO advantages of one generation batch (``sum_then_normalize``).

    ``A_i = (r_i - mean_G(r)) / (std + 1e-4)`` with ``std`` the group's (``"group"``) or the
    batch's (``"batch"``) NaN-ignoring unbiased standard deviation, or ``A_i = r_i - mean_G(r)``
    (``"none"``; Dr. GRPO). A completion whose reward is ``None``/NaN (every reward function
    abstained) is left out of its group's mean and std and gets advantage 0, as in TRL.

    Args:
        rewards: ``(n,)`` total rewards (the weighted sum of the reward functions), groups of
            ``num_generations`` consecutive completions.
        num_generations: GRPO group size ``G``; ``n`` must be a multiple of it.
        scale_rewards: ``"group"`` (TRL's default), ``"batch"`` or ``"none"``.

    Returns:
        ``(n,)`` float64 advantages.

    Raises:
        ConfigError: for an unknown ``scale_rewards`` or ``n`` not a multiple of ``G``.

    >>> grpo_advantages([1, 0, 0, 0], 4, "none").tolist()
    [0.75, -0.25, -0.25, -0.25]
    >>> grpo_advantages([0.19, 0.22, 0.20, 0.18], 4, "group").round(2).tolist()
    [-0.44, 1.31, 0.15, -1.02]
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ConfigError(f"scale_rewards={scale_rewards!r}; use group | batch | none")
    r = np.array([np.nan if x is None else float(x) for x in rewards], dtype=np.float64)
    g = int(num_generations)
    if g < 1 or r.size % g:
        raise ConfigError(f"{r.size} rewards do not split into groups of num_generations={g}")
    if r.size == 0:
        return r
    grouped = r.reshape(-1, g)
    valid = ~np.isnan(grouped)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid, grouped, 0.0).sum(axis=1) / valid.sum(axis=1)
    adv = r - np.repeat(mean, g)
    if scale_rewards == "group":
        std = np.repeat(_nanstd(grouped, axis=1), g) if g > 1 else np.zeros_like(r)
        adv = adv / (std + _STD_EPS)
    elif scale_rewards == "batch":
        std = _nanstd(r) if r.size > 1 else np.float64(0.0)
        adv = adv / (std + _STD_EPS)
    return np.nan_to_num(adv, nan=0.0)


def advantage_audit(
    advantages: Sequence[float], correct: Sequence[float | None], num_generations: int
) -> dict[str, float]:
    """Where one step's advantages push, measured against Math-Verify's verdicts.

    Args:
        advantages: ``(n,)`` advantages of the step (:func:`grpo_advantages`).
        correct: ``(n,)`` Math-Verify verdicts in ``{0, 1}``; ``None`` (abstained) counts as
            not correct.
        num_generations: GRPO group size ``G`` (groups are consecutive).

    Returns:
        ``wrong_up_share``: share of the step's total ``|A|`` on completions that are not
        correct and get ``A > 0``, in ``[0, 1]``; ``correct_down_share``: the same for correct
        completions with ``A < 0``; ``constant_group_share``: share of ``|A|`` in groups with
        no sparse spread (all correct or none correct); ``judge_only_step``: 1.0 when no group
        had sparse spread, else 0.0; ``abs_mean``: mean ``|A|``. A step with no advantage at
        all (every ``A = 0``) pushed nothing: its shares are 0.

    >>> m = advantage_audit([0.75, -0.25, -0.25, -0.25, 0.02, -0.02, 0.01, -0.01], [1, 0, 0, 0] + [0] * 4, 4)
    >>> round(m["wrong_up_share"], 4), m["judge_only_step"]
    (0.0192, 0.0)
    """
    a = np.asarray(advantages, dtype=np.float64)
    ok = np.array([c is not None and float(c) == 1.0 for c in correct], dtype=bool)
    g = int(num_generations)
    if a.shape != ok.shape or g < 1 or a.size % g:
        raise ConfigError(
            f"advantage_audit needs (n,) advantages and verdicts with n a multiple of G={g}, "
            f"got {a.size} and {ok.size}"
        )
    mag = np.abs(a)
    total = float(mag.sum())
    spread = ok.reshape(-1, g).any(axis=1) & ~ok.reshape(-1, g).all(axis=1)
    constant = np.repeat(~spread, g)

    def share(mask: np.ndarray) -> float:
        return float(mag[mask].sum() / total) if total > 0 else 0.0

    return {
        "wrong_up_share": share(~ok & (a > 0)),
        "correct_down_share": share(ok & (a < 0)),
        "constant_group_share": share(constant),
        "judge_only_step": float(not spread.any()) if a.size else 0.0,
        "abs_mean": float(mag.mean()) if a.size else 0.0,
    }


class AdvantageAudit:
    """Online advantage audit of one GRPO reward (shared by its reward functions).

    Each reward function of the reward reports its ``(n,)`` values once per generation batch
    (:meth:`report`); when all have reported, the audit sums them with ``reward_weights``
    (``nansum``; a row on which all abstained is unscorable, as in TRL), computes TRL's
    advantages (:func:`grpo_advantages`) for the run's ``num_generations`` and
    ``scale_rewards``, gathers every process's completions first, and returns
    :func:`advantage_audit`'s metrics (keys ``advantage/<key>``) to the reporter that
    completed the batch, which logs them with its tracker (``verifier/advantage/*``).

    Args:
        n_components: Number of reward functions that report.
        weights: ``reward_weights`` (``None``: all 1).
        num_generations: GRPO group size.
        scale_rewards: the run's ``GRPOConfig.scale_rewards``.
        correctness: index of the component whose values are Math-Verify's verdicts, or
            ``None`` to check the completions with ``checker``.
        checker: :class:`~densereward.rewards.math.MathChecker` for the verdicts.
    """

    def __init__(
        self,
        n_components: int,
        *,
        weights: Sequence[float] | None,
        num_generations: int,
        scale_rewards: str,
        correctness: int | None = None,
        checker: Any = None,
    ) -> None:
        if scale_rewards not in SCALE_REWARDS:
            raise ConfigError(f"scale_rewards={scale_rewards!r}; use group | batch | none")
        self.n_components = int(n_components)
        self.weights = list(weights) if weights is not None else [1.0] * self.n_components
        if len(self.weights) != self.n_components:
            raise ConfigError(
                f"{len(self.weights)} reward_weights for {self.n_components} reward functions"
            )
        self.num_generations = int(num_generations)
        self.scale_rewards = scale_rewards
        self.correctness = correctness
        self.checker = checker
        self._lock = threading.Lock()
        self._pending: dict[int, list[float | None]] = {}
        self._verdicts: list[float | None] | None = None
        self.history: list[dict[str, float]] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def report(
        self,
        index: int,
        values: Sequence[float | None],
        *,
        verdicts: Callable[[], Sequence[float | None]] | None = None,
    ) -> dict[str, float] | None:
        """Record component ``index``'s values of this batch; the metrics once all reported.

        Args:
            index: the component's position in ``reward_funcs``.
            values: its ``(n,)`` rewards (``None`` = abstained / not part of the sum).
            verdicts: a zero-argument function giving Math-Verify's ``(n,)`` verdicts (used
                when no component is the correctness reward).

        Returns:
            ``{"advantage/<key>": value}`` from the reporter that completed the batch, else
            ``None``.
        """
        from .tracking import gather_across_processes

        with self._lock:
            self._pending[int(index)] = list(values)
            if self.correctness is None and self._verdicts is None and verdicts is not None:
                self._verdicts = list(verdicts())
            if len(self._pending) < self.n_components:
                return None
            cols, self._pending = self._pending, {}
            own, self._verdicts = self._verdicts, None
        n = len(cols[0])
        total: list[float | None] = []
        for i in range(n):
            parts = [(self.weights[k], cols[k][i]) for k in range(self.n_components)]
            got = [w * float(v) for w, v in parts if v is not None and not math.isnan(float(v))]
            total.append(sum(got) if got else None)
        correct = cols[self.correctness] if self.correctness is not None else own
        if correct is None:
            return None
        total, correct = gather_across_processes(total, list(correct))
        adv = grpo_advantages(total, self.num_generations, self.scale_rewards)
        metrics = advantage_audit(adv, correct, self.num_generations)
        self.history.append(metrics)
        return {f"advantage/{k}": v for k, v in metrics.items()}
