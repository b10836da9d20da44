"""TRL reward functions: sparse Math-Verify correctness, dense and group verifier rewards, tracking.

:func:`build_reward_funcs` turns the YAML ``reward:`` section into the ``reward_funcs`` list
and ``reward_weights`` that ``trl.GRPOTrainer`` / ``trl.GRPOConfig`` take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..answers import ANSWER_FORMATS
from ..errors import ConfigError
from ._common import check_group_options, check_verifier_options, check_weights
from .advantage import AdvantageAudit, advantage_audit, grpo_advantages
from .gated import (
    GATED_WEIGHTS,
    AsyncGatedVerifierReward,
    GatedVerifierReward,
    gated_weights,
    stratified_rewards,
)
from .group import AsyncGroupVerifierReward, GroupVerifierReward
from .kinds import (
    CONTINUOUS_KINDS,
    GRPO_REWARDS,
    SEED_RECIPE_WEIGHTS,
    RewardContext,
    RewardKind,
    default_scale_rewards,
    options_of,
    reward_kind,
)
from .math import (
    AnswerFormatReward,
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
    "RewardKind",
    "reward_kind",
    "gated_weights",
    "stratified_rewards",
    "GATED_WEIGHTS",
    "SEED_RECIPE_WEIGHTS",
    "DEFAULT_REFERENCE_PROMPT",
    "CONTINUOUS_KINDS",
    "default_scale_rewards",
    "grpo_advantages",
    "advantage_audit",
    "AdvantageAudit",
    "GatedVerifierReward",
    "AsyncGatedVerifierReward",
    "AnswerFormatReward",
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
    0/1), ``dense`` (verifier expected score), ``group`` (within-group soft win rate), ``mixed``
    (sparse + dense, weighted by ``weights``), ``gated`` (Math-Verify's verdict plus the judge's
    score inside each group's correctness strata, bounded to a band of width ``w_judge``:
    :mod:`densereward.rewards.gated`), ``seed_recipe`` (the seed paper's ``r_correct + r_format
    + beta * r_reasoning`` with the group's PPT win rate as ``r_reasoning``). Default ``gated``:
    correctness stays primary inside and across groups (docs/grpo.md, "The advantage audit")."""
    options: Any = None
    """The kind's own parameters (YAML ``reward.options: {...}``), validated when the config is
    read into the kind's options dataclass (:attr:`~densereward.rewards.kinds.RewardKind.options`;
    an unknown key is a ``ConfigError`` naming the ones it takes); after validation this field
    holds that instance (every default filled in). The built-in kinds take none: their settings
    are the fields of this section."""
    weights: tuple[float, ...] | None = None
    """The weights the kind's spec names (:attr:`~densereward.rewards.kinds.RewardKind.weights`):
    ``mixed``: ``[w_sparse, w_dense]`` (default ``[1.0, 1.0]``); ``gated``: ``[w_sparse,
    w_judge]`` (default :data:`GATED_WEIGHTS` ``[1.0, 0.1]``; needs ``0 <= w_judge <
    w_sparse``); ``seed_recipe``: ``[w_correct, w_format, beta]`` (default
    :data:`SEED_RECIPE_WEIGHTS` ``[1.0, 1.0, 0.1]``). Not for ``sparse`` / ``dense`` /
    ``group``, nor for a kind whose spec names none."""
    spread_floor: float = 0.02
    """For ``gated``: a correctness stratum of a group whose judge scores span less than this
    (on ``[0, 1]``) is a tie, so read noise is not stretched over the band."""
    judge_only_steps: Literal["skip", "keep"] = "skip"
    """For ``gated``: in a generation batch where no group has a correct and an incorrect
    completion, ``skip`` drops the judge term (nothing trains, as with the sparse reward; warned
    once) and ``keep`` lets the judge rank inside those groups (for a judge that scores
    progress)."""
    audit: bool = True
    """Log the advantage audit (``verifier/advantage/*``: :mod:`densereward.rewards.advantage`)
    each generation batch, with TRL's formula for the run's ``scale_rewards``."""
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
    reference_prompt: Literal["anchored", "answer_match", "process"] = "answer_match"
    """With ``reference_guided``, the dense prompt: ``answer_match`` (default) = only the
    extracted final answer against the reference (immune to text in the reasoning, but it judges
    nothing else); ``anchored`` = the reference answer *and* the full solution, judged on the
    correctness criterion. Default chosen by measurement with the judge set-up installs
    (Qwen2.5-Coder-0.5B, 4-bit GGUF): on GSM8K model solutions the tests never read, AUROC
    correct vs wrong answer_match vs anchored in docs/grpo.md ("Which prompt the judge reads").
    ``process`` = the full solution judged on progress along its steps
    (:data:`~densereward.rewards.process.PROCESS_CRITERION`), for tasks whose path is checkable.
    The group reward always shows full solutions."""
    judge: Literal["verifier", "process_oracle", "shuffled"] = "verifier"
    """Who scores for the verifier reward kinds: ``verifier`` (the configured verifier),
    ``process_oracle`` (the programmatic share of correct running totals,
    :class:`~densereward.rewards.process.ProcessOracle`: ``chain_sum`` only, the oracle arm of a
    comparison) or ``shuffled`` (the verifier's scores permuted within each group,
    :class:`~densereward.rewards.process.ShuffledJudge`: the negative control)."""
    judge_seed: int = 0
    """Seed of the ``shuffled`` judge's permutations."""
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
    """Math-Verify timeout per completion (seconds; enforced in a worker process). A check past
    it abstains; the answer is not checked again (the sparse reward and the tracker share the
    verdict), the first timeout is logged with this setting as the fix, later ones counted."""
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
            kind = reward_kind(self.type)
        except ConfigError as e:
            raise ConfigError(f"reward.type: {e}") from None
        object.__setattr__(self, "options", options_of(kind, self.options, name=self.type))
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
        if self.judge not in ("verifier", "process_oracle", "shuffled"):
            raise ConfigError(
                f"reward.judge={self.judge!r}; use verifier | process_oracle | shuffled"
            )
        if not 0.0 <= self.spread_floor < 1.0:
            raise ConfigError(f"reward.spread_floor must be in [0, 1), got {self.spread_floor}")
        if self.judge_only_steps not in ("skip", "keep"):
            raise ConfigError(f"reward.judge_only_steps={self.judge_only_steps!r}; use skip | keep")
        if self.weights is not None:
            w = tuple(float(x) for x in self.weights)
            object.__setattr__(self, "weights", w)
            check_weights(w, "reward.weights")
            if not kind.weights:
                raise ConfigError(
                    f"reward.weights does not apply to reward.type={self.type} (it takes none; set "
                    "training.reward_weights for the weights of its reward functions)"
                )
            if len(w) != len(kind.weights):
                raise ConfigError(
                    f"reward.weights for {self.type} must be [{', '.join(kind.weights)}], got "
                    f"{list(w)}"
                )
        if kind.check_config is not None:
            kind.check_config(self)

    @property
    def kind(self) -> RewardKind:
        """The :class:`~densereward.rewards.kinds.RewardKind` spec of :attr:`type`."""
        return reward_kind(self.type)

    @property
    def reward_weights(self) -> list[float] | None:
        """``GRPOConfig.reward_weights`` for this reward: ``reward.weights`` (or the kind's
        default) for a kind whose spec passes its weights to TRL (``mixed``: ``[w_sparse,
        w_dense]``, default ``[1, 1]``; ``seed_recipe``: ``[w_correct, w_format, beta]``), else
        ``None`` (TRL: all 1; ``gated`` applies its weights inside its one function)."""
        kind = self.kind
        if not kind.weights or not kind.trl_weights:
            return None
        return list(self.weights or kind.default_weights or (1.0,) * len(kind.weights))

    @property
    def judge_weights(self) -> tuple[float, float]:
        """``(w_sparse, w_judge)`` of the ``gated`` reward (default :data:`GATED_WEIGHTS`)."""
        return tuple(self.weights or GATED_WEIGHTS)  # type: ignore[return-value]


DEFAULT_REFERENCE_PROMPT = "answer_match"
"""The verifier prompt every verifier reward reads by default (reference-guided)."""


def build_reward_funcs(
    config: RewardConfig,
    verifier: Any,
    *,
    tracker: RewardQualityTracker | None = None,
    checker: MathChecker | None = None,
    num_generations: int | None = None,
    scale_rewards: str | None = None,
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
        scale_rewards: ``GRPOConfig.scale_rewards`` of the run (for the advantage audit);
            ``None`` = :func:`~densereward.rewards.kinds.default_scale_rewards` of the kind,
            what ``densereward train grpo`` sets. With ``config.audit`` and ``num_generations``
            the reward functions report to one
            :class:`~densereward.rewards.advantage.AdvantageAudit`, which logs
            ``verifier/advantage/*``.

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
    if config.judge == "process_oracle":
        from .process import ProcessOracle

        verifier = ProcessOracle()
    elif config.judge == "shuffled":
        from .process import ShuffledJudge

        verifier = ShuffledJudge(verifier, seed=config.judge_seed)
    ctx = RewardContext(
        config=config,
        verifier=verifier,
        checker=checker,
        tracker=tracker if config.track else None,
        num_generations=num_generations,
        options=config.options,
    )
    funcs, weights = config.kind.build(ctx)
    if config.audit and num_generations and all(hasattr(f, "set_audit") for f in funcs):
        from .math import MathCorrectnessReward as _Sparse

        sparse_at = [i for i, f in enumerate(funcs) if type(f) is _Sparse]
        audit = AdvantageAudit(
            len(funcs),
            weights=weights,
            num_generations=num_generations,
            scale_rewards=scale_rewards or default_scale_rewards(config.type),
            correctness=sparse_at[0] if sparse_at else None,
            checker=checker,
        )
        for i, f in enumerate(funcs):
            f.set_audit(audit, i)
    return funcs, weights
