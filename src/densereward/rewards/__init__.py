"""TRL reward functions: sparse Math-Verify correctness, dense and group verifier rewards, tracking.

:func:`build_reward_funcs` turns the YAML ``reward:`` section into the ``reward_funcs`` list
and ``reward_weights`` that ``trl.GRPOTrainer`` / ``trl.GRPOConfig`` take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..answers import ANSWER_FORMATS
from ..errors import ConfigError
from ._common import check_group_options, check_verifier_options
from .group import AsyncGroupVerifierReward, GroupVerifierReward
from .kinds import GRPO_REWARDS, RewardContext
from .math import (
    MathChecker,
    MathCorrectnessReward,
    default_checker,
    extract_boxed,
    reference_answer,
)
from .tracking import RewardQualityTracker, plot_reward_quality, reward_quality_metrics
from .verifier import (
    AsyncVerifierMonitor,
    AsyncVerifierReward,
    VerifierMonitor,
    VerifierReward,
)

__all__ = [
    "RewardConfig",
    "build_reward_funcs",
    "GRPO_REWARDS",
    "RewardContext",
    "gated_weights",
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

    type: str = "gated"
    """A name in :data:`~densereward.rewards.kinds.GRPO_REWARDS` (a plugin may add more;
    unknown names are a ``ConfigError`` with a did-you-mean). Built in: ``sparse`` (Math-Verify
    0/1), ``dense`` (verifier expected score), ``group`` (within-group soft win rate), ``mixed`` (sparse + dense, weighted by ``weights``), ``gated`` (sparse + dense
    with ``w_dense < w_sparse``: the dense reward reorders completions of equal correctness but
    never outweighs correctness; :func:`gated_weights` has the proof). Default ``gated``: the
    defended reward (``benchmarks/injection.py``; docs/reward_hacking.md)."""
    weights: tuple[float, ...] | None = None
    """For ``mixed`` / ``gated``: ``[w_sparse, w_dense]`` (default ``[1.0, 1.0]`` / ``[1.0, 0.5]``;
    ``gated`` needs ``0 <= w_dense < w_sparse``); becomes ``GRPOConfig.reward_weights``. Not
    for ``sparse`` / ``dense`` / ``group``; a plugin kind reads it from its context."""
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
    reference_guided: bool = True
    """Show the verifier the reference answer (dense / group; the ``answer`` column); off =
    reference-free judging, which a small verifier can be talked into a top score
    (docs/reward_hacking.md)."""
    reference_prompt: Literal["anchored", "answer_match"] = "anchored"
    """With ``reference_guided``, the dense prompt: ``anchored`` = the reference answer *and*
    the full solution, judged on the correctness criterion (so the reasoning is still judged);
    ``answer_match`` = only the extracted final answer against the reference (immune to text in
    the reasoning, but it judges nothing else). The group reward always shows full solutions."""
    injection_penalty: float | None = 1.0
    """Pre-filter (:func:`densereward.injection.detect_injection`): a completion whose shown text
    addresses the grader gets ``max(0, dense - injection_penalty)`` (in ``[0, 1]``; 1 = the lowest
    dense score); ``None`` turns the pre-filter off. Counts are logged as
    ``verifier/n_injection_flagged`` and ``verifier/frac_injection_flagged``."""
    guard_prompt: bool = False
    """End the verifier's criterion with a warning that text addressed to the grader inside a
    response is evidence of manipulation (:data:`densereward.prompts.MANIPULATION_WARNING`); not
    with ``reference_prompt=answer_match``, which does not show the response."""
    math_timeout_s: float = 10.0
    """Math-Verify timeout per completion (seconds; enforced in a worker process)."""
    answer_format: Literal["auto", "boxed", "final_line"] = "auto"
    """Where the sparse reward (and the tracker's ground truth) looks for the final answer
    (:mod:`densereward.answers`), always after the last ``</think>``: ``auto`` = the last
    complete ``\\boxed{}`` / ``\\fbox{}``, else an explicit final-answer line (``The answer is
    7``, ``Final answer: 7``, ``A: 7``, ``#### 7``, ``**Answer:** 7``); ``boxed`` = only a box
    (TRL ``accuracy_reward``'s strict convention, for prompts that demand one); ``final_line``
    = only an answer line. A number merely mentioned in prose never counts."""
    verifier_input: Literal["final_answer", "full"] = "final_answer"
    """What the dense / group verifier is shown: ``final_answer`` = the text after the last
    ``</think>`` (unclosed thinking scores 0), ``full`` = the whole completion."""

    def __post_init__(self) -> None:
        if self.track_window < 1:
            raise ConfigError(f"reward.track_window must be >= 1, got {self.track_window}")
        try:
            GRPO_REWARDS.check(self.type)
        except ConfigError as e:
            raise ConfigError(f"reward.type: {e}") from None
        check_verifier_options(
            reference_guided=self.reference_guided,
            reference_prompt=self.reference_prompt,
            injection_penalty=self.injection_penalty,
            guard_prompt=self.guard_prompt,
            verifier_input=self.verifier_input,
            prefix="reward.",
        )
        check_group_options(
            method=self.group_method,
            pivots=self.pivots,
            prefix="reward.",
            method_field="group_method",
        )
        if self.answer_format not in ANSWER_FORMATS:
            raise ConfigError(
                f"reward.answer_format={self.answer_format!r}; use auto | boxed | final_line"
            )
        if self.weights is not None:
            w = tuple(float(x) for x in self.weights)
            object.__setattr__(self, "weights", w)
            if self.type in ("sparse", "dense", "group"):
                raise ConfigError(
                    "reward.weights only applies to reward.type=mixed or gated (set "
                    "training.reward_weights otherwise)"
                )
            if len(w) != 2 and self.type in ("mixed", "gated"):
                raise ConfigError(
                    f"reward.weights for {self.type} must be [w_sparse, w_dense], got {list(w)}"
                )
            if self.type == "gated":
                gated_weights(*w)

    @property
    def reward_weights(self) -> list[float] | None:
        """``GRPOConfig.reward_weights`` for this reward: ``[w_sparse, w_dense]`` for ``mixed``
        (default ``[1, 1]``) and ``gated`` (default ``[1, 0.5]``), else ``None`` (TRL: all 1)."""
        if self.type == "mixed":
            return list(self.weights or (1.0, 1.0))
        if self.type == "gated":
            return list(self.weights or GATED_WEIGHTS)
        return None


GATED_WEIGHTS = (1.0, 0.5)
"""Default ``[w_sparse, w_dense]`` of the ``gated`` reward."""


def gated_weights(w_sparse: float, w_dense: float) -> tuple[float, float]:
    """Check that ``[w_sparse, w_dense]`` make a sparse-gated mixture; return them.

    The gated reward of completion ``i`` is TRL's weighted sum ``r_i = w_s s_i + w_d d_i`` of
    the sparse reward ``s_i`` in ``{0, 1}`` (:class:`MathCorrectnessReward`) and the dense
    reward ``d_i`` in ``[0, 1]`` (:class:`VerifierReward`, after the injection penalty, which
    keeps it in ``[0, 1]``).

    Guarantee: if ``0 <= w_d < w_s``, every correct completion of a GRPO group gets a larger
    advantage than every incorrect one, so the dense reward can reorder completions of equal
    correctness but never outweigh correctness.

    Proof sketch. (1) Rewards: a correct completion has ``r >= w_s + w_d * 0 = w_s``; an
    incorrect one has ``r <= 0 + w_d * 1 = w_d < w_s``. Where the dense reward abstains
    (``None``), TRL's ``nansum`` drops it (``r = w_s s_i``), which keeps both bounds. (2)
    Advantages: TRL 1.16 (``GRPOTrainer._generate_and_score_completions`` with the default
    ``multi_objective_aggregation="sum_then_normalize"``) computes, per group ``G``,
    ``A_i = (r_i - mean_G(r)) / (std + 1e-4)`` with ``std`` the group's standard deviation
    (``scale_rewards="group"``, the default), the batch's (``"batch"``), or ``A_i = r_i -
    mean_G(r)`` (``"none"``). In every case ``A_i = a_G r_i + b_G`` with ``a_G > 0`` for all ``i``
    in ``G``: a strictly increasing affine map per group, so ``r_i > r_j`` implies ``A_i > A_j``
    (Shao et al. 2024, DeepSeekMath, eq. 3 for the group-normalised advantage). With
    ``w_d = w_s`` a correct completion with dense 0 would *tie* an incorrect one with dense 1;
    hence the strict inequality. ``multi_objective_aggregation="normalize_then_sum"``
    normalises each reward separately before the sum and voids the guarantee: the trainer
    rejects it for ``gated``. A completion whose sparse reward abstained (Math-Verify timeout)
    gets ``w_d d_i <= w_d``, i.e. ranks with the incorrect ones.

    Args:
        w_sparse: Weight of the sparse reward, ``> 0``.
        w_dense: Weight of the dense reward, in ``[0, w_sparse)``.

    Returns:
        ``(w_sparse, w_dense)`` as floats.

    Raises:
        ConfigError: if ``w_sparse <= 0`` or ``w_dense`` is outside ``[0, w_sparse)``.

    >>> gated_weights(1, 0.5)
    (1.0, 0.5)
    """
    w_s, w_d = float(w_sparse), float(w_dense)
    if not (w_s > 0 and 0 <= w_d < w_s):
        raise ConfigError(
            f"reward.weights for gated must satisfy 0 <= w_dense < w_sparse (w_sparse > 0), got "
            f"[{w_s:g}, {w_d:g}]: with the dense reward in [0, 1] this is what keeps every correct "
            "completion above every incorrect one in its GRPO group; e.g. [1.0, 0.5]"
        )
    return w_s, w_d


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
        ``(reward_funcs, reward_weights)`` from the builder registered under ``config.type``
        in :data:`~densereward.rewards.kinds.GRPO_REWARDS`; ``reward_weights`` is ``None``
        (TRL: all 1) except for ``mixed`` and ``gated`` (:attr:`RewardConfig.reward_weights`)
        or a plugin kind that returns weights.

    Raises:
        ConfigError: if the kind's builder cannot be imported (a broken plugin).
    """
    checker = checker or MathChecker(
        timeout_s=config.math_timeout_s, answer_format=config.answer_format
    )
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
    ctx = RewardContext(
        config=config,
        verifier=verifier,
        checker=checker,
        tracker=tracker if config.track else None,
        num_generations=num_generations,
    )
    return GRPO_REWARDS.load(config.type)(ctx)
