"""GRPO reward kinds: the registry behind ``reward.type`` (YAML, ``--reward``, ``build_reward_funcs``).

A reward kind is a *builder*: one function with the signature of :data:`RewardBuilder`,
``build(ctx: RewardContext) -> (reward_funcs, reward_weights)``, registered under a name in
:data:`GRPO_REWARDS`. :class:`~densereward.rewards.RewardConfig` validates ``reward.type``
against the registry (an unknown kind is a ``ConfigError`` with a did-you-mean), the CLI's
``--reward`` choices are the registry's names, and :func:`~densereward.rewards.build_reward_funcs`
calls the builder.

Built-in kinds: ``sparse``, ``dense``, ``group``, ``mixed``, ``gated``, ``seed_recipe`` (the
functions below).
A kind of your own is one file plus one line, either at run time::

    from densereward.rewards import GRPO_REWARDS
    GRPO_REWARDS.register("length", "my_pkg.length_reward:build")

or, without importing densereward, as an entry point of the group ``densereward.grpo_rewards``
in the plugin's ``pyproject.toml``::

    [project.entry-points."densereward.grpo_rewards"]
    length = "my_pkg.length_reward:build"

after which ``reward.type: length`` works in YAML and on the command line (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..registry import Registry, entry_point_group
from .gated import AsyncGatedVerifierReward, GatedVerifierReward
from .group import AsyncGroupVerifierReward, GroupVerifierReward
from .math import AnswerFormatReward, MathChecker, MathCorrectnessReward
from .tracking import RewardQualityTracker
from .verifier import AsyncVerifierMonitor, AsyncVerifierReward, VerifierMonitor, VerifierReward

__all__ = [
    "GRPO_REWARDS",
    "RewardBuilder",
    "RewardContext",
    "CONTINUOUS_KINDS",
    "default_scale_rewards",
]

CONTINUOUS_KINDS = frozenset({"dense", "group", "mixed", "gated", "seed_recipe"})
"""Built-in kinds whose reward carries a continuous judge term: ``densereward train grpo`` runs
them with ``scale_rewards="none"`` unless the config sets it, and warns on ``"group"``."""


def default_scale_rewards(kind: str) -> str:
    """The ``GRPOConfig.scale_rewards`` the library runs a reward kind with.

    ``"none"`` (Dr. GRPO, arXiv 2503.20783: advantages are centred, not divided by the group's
    spread) for :data:`CONTINUOUS_KINDS`: dividing by the spread would blow a judge's small
    differences in a group where every completion is equally correct up to unit size and cancel
    every weight that bounds the judge. TRL's default ``"group"`` otherwise (``sparse``, plugin
    kinds).

    >>> default_scale_rewards("gated"), default_scale_rewards("sparse")
    ('none', 'group')
    """
    return "none" if kind in CONTINUOUS_KINDS else "group"


@dataclass(frozen=True)
class RewardContext:
    """What a GRPO reward builder is given (built by :func:`~densereward.rewards.build_reward_funcs`)."""

    config: Any
    """The :class:`~densereward.rewards.RewardConfig` (YAML ``reward:``); ``config.type`` is
    the kind being built, ``config.weights`` the user's ``reward.weights`` (or ``None``)."""
    verifier: Any
    """A ``Verifier`` or a zero-argument factory of one (call it only when scoring: a dry run
    builds the reward functions without loading weights)."""
    checker: MathChecker
    """The Math-Verify checker shared by the sparse reward and the tracker."""
    tracker: RewardQualityTracker | None
    """The reward-quality tracker (``None`` when ``reward.track`` is off)."""
    num_generations: int | None
    """``GRPOConfig.num_generations`` (GRPO group size), if known."""

    def verifier_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the verifier reward classes (:class:`VerifierReward`,
        :class:`GroupVerifierReward`, the monitors) from the config: tracker, checker,
        group size, reference guidance, prompt, injection pre-filter, guard, input."""
        c = self.config
        return {
            "tracker": self.tracker,
            "checker": self.checker,
            "num_generations": self.num_generations,
            "reference_guided": c.reference_guided,
            "verifier_input": c.verifier_input,
            "reference_prompt": c.reference_prompt,
            "injection_penalty": c.injection_penalty,
            "guard_prompt": c.guard_prompt,
        }


RewardBuilder = Callable[[RewardContext], tuple[list[Any], "list[float] | None"]]
"""``build(ctx) -> (reward_funcs, reward_weights)``: TRL's ``GRPOTrainer(reward_funcs=...)``
(callables ``f(prompts, completions, **columns) -> list[float | None]``, each with a
``__name__``; a callable class keeps them picklable) and ``GRPOConfig.reward_weights``
(one float per function, or ``None`` for all 1)."""


def sparse(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``sparse``: Math-Verify 0/1 correctness; with ``reward.track`` a verifier monitor beside
    it (returns ``None`` rewards, so TRL ignores it in the sum) logs ``verifier/*``."""
    funcs: list[Any] = [MathCorrectnessReward(checker=ctx.checker)]
    if ctx.tracker is not None:
        monitor = AsyncVerifierMonitor if ctx.config.use_async else VerifierMonitor
        funcs.append(monitor(ctx.verifier, **ctx.verifier_kwargs()))
    return funcs, None


def _dense_reward(ctx: RewardContext) -> Any:
    cls = AsyncVerifierReward if ctx.config.use_async else VerifierReward
    return cls(ctx.verifier, **ctx.verifier_kwargs())


def dense(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``dense``: the verifier's expected score in ``[0, 1]``."""
    return [_dense_reward(ctx)], None


def group(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``group``: the within-group soft win rate (``reward.group_method``, ``reward.pivots``)."""
    cls = AsyncGroupVerifierReward if ctx.config.use_async else GroupVerifierReward
    c = ctx.config
    return [
        cls(ctx.verifier, method=c.group_method, pivots=c.pivots, **ctx.verifier_kwargs())
    ], None


def mixed(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``mixed``: sparse + dense, weighted by ``RewardConfig.reward_weights``."""
    return [
        MathCorrectnessReward(checker=ctx.checker),
        _dense_reward(ctx),
    ], ctx.config.reward_weights


def gated(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``gated``: Math-Verify's verdict plus the judge inside correctness strata, one function
    (:class:`~densereward.rewards.gated.GatedVerifierReward`)."""
    c = ctx.config
    cls = AsyncGatedVerifierReward if c.use_async else GatedVerifierReward
    return [
        cls(ctx.verifier, weights=c.judge_weights, spread_floor=c.spread_floor,
            judge_only_steps=c.judge_only_steps, **ctx.verifier_kwargs())
    ], None  # fmt: skip


def seed_recipe(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``seed_recipe``: ``r_correct + r_format + beta * r_reasoning`` (Kwok et al. 2026's GRPO
    recipe), ``r_reasoning`` the group's Probabilistic Pivot Tournament win rate
    (``reward.group_method``, ``reward.pivots``); weights ``[w_correct, w_format, beta]``."""
    c = ctx.config
    cls = AsyncGroupVerifierReward if c.use_async else GroupVerifierReward
    return [
        MathCorrectnessReward(checker=ctx.checker),
        AnswerFormatReward(checker=ctx.checker),
        cls(ctx.verifier, method=c.group_method, pivots=c.pivots, **ctx.verifier_kwargs()),
    ], ctx.config.reward_weights


GRPO_REWARDS: Registry[RewardBuilder] = Registry(
    "GRPO reward kind",
    group=entry_point_group("grpo_rewards"),
    builtins={
        "sparse": f"{__name__}:sparse",
        "dense": f"{__name__}:dense",
        "group": f"{__name__}:group",
        "mixed": f"{__name__}:mixed",
        "gated": f"{__name__}:gated",
        "seed_recipe": f"{__name__}:seed_recipe",
    },
)
"""``reward.type`` -> its :data:`RewardBuilder` (plugins: entry-point group
``densereward.grpo_rewards``)."""
