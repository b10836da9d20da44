"""TRL reward functions: sparse Math-Verify correctness, dense and group verifier rewards, tracking.

:func:`build_reward_funcs` turns the YAML ``reward:`` section into the ``reward_funcs`` list
and ``reward_weights`` that ``trl.GRPOTrainer`` / ``trl.GRPOConfig`` take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError
from .math import (
    MathChecker,
    MathCorrectnessReward,
    default_checker,
    extract_boxed,
    reference_answer,
)
from .tracking import RewardQualityTracker, plot_reward_quality, reward_quality_metrics
from .verifier import (
    AsyncGroupVerifierReward,
    AsyncVerifierMonitor,
    AsyncVerifierReward,
    GroupVerifierReward,
    VerifierMonitor,
    VerifierReward,
)

__all__ = [
    "RewardConfig",
    "build_reward_funcs",
    "MathChecker",
    "MathCorrectnessReward",
    "VerifierReward",
    "AsyncVerifierReward",
    "GroupVerifierReward",
    "AsyncGroupVerifierReward",
    "VerifierMonitor",
    "AsyncVerifierMonitor",
    "RewardQualityTracker",
    "RewardQualityCallback",
    "reward_quality_metrics",
    "plot_reward_quality",
    "extract_boxed",
    "reference_answer",
    "default_checker",
]


def __getattr__(name: str) -> Any:
    if name == "RewardQualityCallback":  # imports transformers' trainer (seconds): on first use
        from .trl_callback import RewardQualityCallback

        return RewardQualityCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RewardConfig:
    """Which reward GRPO optimises (YAML section ``reward:``)."""

    type: Literal["sparse", "dense", "group", "mixed"] = "dense"
    """``sparse`` (Math-Verify 0/1), ``dense`` (verifier expected score), ``group`` (within-group
    soft win rate), ``mixed`` (sparse + dense, weighted by ``weights``)."""
    weights: tuple[float, ...] | None = None
    """For ``mixed``: ``[w_sparse, w_dense]`` (default ``[1.0, 1.0]``); becomes ``GRPOConfig.reward_weights``."""
    group_method: Literal["ppt", "round_robin"] = "ppt"
    """For ``group``: comparison schedule."""
    pivots: int = 2
    """For ``group`` with PPT: pivots per candidate."""
    track: bool = True
    """Log reward-quality metrics (``verifier/*``); with ``sparse`` this adds a verifier monitor."""
    track_window: int = 256
    """W: the ``verifier/window/*`` metrics cover the last W labelled completions (a batch of a
    few completions leaves most rates undefined)."""
    use_async: bool = False
    """Use the ``async`` reward functions (for network backends: ``openai``, ``sampled``)."""
    reference_guided: bool = False
    """Show the verifier the reference answer (dense / group); off = reference-free judging."""
    math_timeout_s: float = 10.0
    """Math-Verify timeout per completion (seconds; enforced in a worker process)."""

    def __post_init__(self) -> None:
        if self.track_window < 1:
            raise ConfigError(f"reward.track_window must be >= 1, got {self.track_window}")
        if self.type not in ("sparse", "dense", "group", "mixed"):
            raise ConfigError(f"reward.type={self.type!r}; use sparse | dense | group | mixed")
        if self.group_method not in ("ppt", "round_robin"):
            raise ConfigError(f"reward.group_method={self.group_method!r}; use ppt | round_robin")
        if self.pivots < 1:
            raise ConfigError(f"reward.pivots must be >= 1, got {self.pivots}")
        if self.weights is not None:
            w = tuple(float(x) for x in self.weights)
            object.__setattr__(self, "weights", w)
            if self.type != "mixed":
                raise ConfigError(
                    "reward.weights only applies to reward.type=mixed (set training.reward_weights otherwise)"
                )
            if len(w) != 2:
                raise ConfigError(
                    f"reward.weights for mixed must be [w_sparse, w_dense], got {list(w)}"
                )


def build_reward_funcs(
    config: RewardConfig,
    verifier: Any,
    *,
    tracker: RewardQualityTracker | None = None,
    checker: MathChecker | None = None,
    num_generations: int | None = None,
) -> tuple[list[Any], list[float] | None]:
    """Build TRL's ``reward_funcs`` and ``reward_weights`` for a reward configuration.

    Args:
        config: The reward configuration.
        verifier: A ``Verifier`` or a zero-argument factory (called on first use, so this
            function never loads weights).
        tracker: Reward-quality tracker (used when ``config.track``). Without one, a tracker
            without a run directory is created (its ``verifier/*`` metrics still reach TRL's
            log; a warning says how to get ``reward_quality.jsonl`` and the plot too).
        checker: Math-Verify checker shared by the sparse reward and the tracker.
        num_generations: ``GRPOConfig.num_generations``.

    Returns:
        ``(reward_funcs, reward_weights)``; ``reward_weights`` is ``None`` (TRL: all 1)
        except for ``mixed``.
    """
    checker = checker or MathChecker(timeout_s=config.math_timeout_s)
    if config.track and tracker is None:
        import logging

        tracker = RewardQualityTracker()
        logging.getLogger(__name__).warning(
            "reward.track is on but no tracker was given: created RewardQualityTracker() in "
            "memory, so verifier/* metrics reach TRL's log (and W&B) but no file is written. For "
            "reward_quality.jsonl and the plot, pass tracker=RewardQualityTracker(run_dir) and "
            "add RewardQualityCallback(tracker) to GRPOTrainer(callbacks=[...]) (or "
            "RewardConfig(track=False) to track nothing)"
        )
    tracker = tracker if config.track else None
    common = {
        "tracker": tracker,
        "checker": checker,
        "num_generations": num_generations,
        "reference_guided": config.reference_guided,
    }
    dense_cls = AsyncVerifierReward if config.use_async else VerifierReward
    if config.type == "sparse":
        funcs: list[Any] = [MathCorrectnessReward(checker=checker)]
        if tracker is not None:
            monitor_cls = AsyncVerifierMonitor if config.use_async else VerifierMonitor
            funcs.append(monitor_cls(verifier, **common))
        return funcs, None
    if config.type == "dense":
        return [dense_cls(verifier, **common)], None
    if config.type == "group":
        group_cls = AsyncGroupVerifierReward if config.use_async else GroupVerifierReward
        return [
            group_cls(verifier, method=config.group_method, pivots=config.pivots, **common)
        ], None
    weights = list(config.weights or (1.0, 1.0))
    return [MathCorrectnessReward(checker=checker), dense_cls(verifier, **common)], weights
