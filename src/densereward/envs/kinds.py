"""SAC reward kinds and trajectory describers: the registries behind ``env.reward`` and ``env.describer``.

Two :class:`~densereward.registry.Registry` instances, each with plugins from an entry-point
group (docs/extending.md):

* :data:`SAC_REWARDS` (``densereward.sac_rewards``): ``env.reward`` / ``env.base`` -> a
  builder with the signature of :data:`SACRewardBuilder`, ``build(env, ctx) -> env``, which
  wraps one freshly made environment so that its reward is the kind's. Built in: ``env``
  (the registered reward), ``sparse`` (1 on success else 0), ``verifier`` (the base reward
  ``env.base``; the verifier progress term is added around it by :func:`~densereward.envs.make_env`
  / :func:`~densereward.envs.make_vec_env`, batched over the vector environment) and
  ``distilled`` (the base reward plus shaping from the reward model in ``env.reward_model``).
* :data:`DESCRIBERS` (``densereward.describers``): ``env.describer`` -> a describer class
  (``"module:Class"``). A class describes the env ids matching its ``env_ids`` (``fnmatch``
  patterns, case-insensitive, matched against the id with and without its namespace) and is
  built with ``Class.for_env_id(env_id)``; with ``needs_task = True`` it also gets
  ``task=env.task`` (the generic ``box`` describer). :func:`make_describer` picks one.

Adding either is one file plus one line: the builder or class in your module, and its
``"module:attr"`` in the ``builtins`` below (a describer of this package), in
``SAC_REWARDS.register(...)`` / ``DESCRIBERS.register(...)`` at run time, or as an entry point::

    [project.entry-points."densereward.sac_rewards"]
    distance = "my_pkg.rewards:distance"          # def distance(env, ctx) -> gym.Env

    [project.entry-points."densereward.describers"]
    pendulum = "my_pkg.describers:PendulumDescriber"  # env_ids = ("Pendulum-*",)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..registry import Registry, entry_point_group
from .registration import registered_id

__all__ = [
    "DESCRIBERS",
    "SAC_REWARDS",
    "VERIFIER_REWARD",
    "SACRewardBuilder",
    "SACRewardContext",
    "check_sac_reward",
    "make_describer",
]

VERIFIER_REWARD = "verifier"
"""The kind whose reward is the verifier's progress term on top of the base reward ``env.base``."""


@dataclass(frozen=True)
class SACRewardContext:
    """What a SAC reward builder is given besides the environment."""

    env_id: str
    """The Gymnasium id the environment was made from."""
    base: str = "sparse"
    """``env.base``: for the ``verifier`` and ``distilled`` kinds, the kind under the shaping."""
    reward_model: str | None = None
    """``env.reward_model``: the directory of a distilled reward model (``distilled`` kind)."""
    gamma: float | None = None
    """The agent's discount, for the ``distilled`` kind's shaping (``None``: 0.99)."""


SACRewardBuilder = Callable[[Any, SACRewardContext], Any]
"""``build(env: gymnasium.Env, ctx: SACRewardContext) -> gymnasium.Env``: wrap one environment
(``gym.make`` output, time limit included) so that ``step`` returns this kind's reward;
``info["is_success"]`` must survive (the success curve reads it). Called once per
environment, in the process that steps it."""


def env_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``env``: the environment's own reward as registered (``FetchReach-v4``: -1 / 0)."""
    return env


def sparse_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``sparse``: 1 on a successful step else 0 (:class:`~densereward.wrappers.SparseSuccessReward`)."""
    from ..wrappers import SparseSuccessReward

    return SparseSuccessReward(env)


def verifier_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``verifier``: the base reward ``ctx.base``; the verifier term is added around it."""
    return SAC_REWARDS.load(ctx.base)(env, ctx)


DISTILLED_REWARD = "distilled"
"""The kind whose reward is the base reward plus shaping from a distilled reward model."""


def distilled_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``distilled``: the base reward ``ctx.base`` plus potential-based shaping from the reward
    model in ``ctx.reward_model`` (:class:`~densereward.wrappers.RewardModelShaping`)."""
    from ..reward_model import load_reward_model
    from ..wrappers import RewardModelShaping

    if not ctx.reward_model:
        raise ConfigError(
            "env.reward: distilled needs env.reward_model (a directory `densereward distill` wrote)"
        )
    base = SAC_REWARDS.load(ctx.base)(env, ctx)
    gamma = 0.99 if ctx.gamma is None else ctx.gamma
    return RewardModelShaping(base, load_reward_model(ctx.reward_model), gamma)


SAC_REWARDS: Registry[SACRewardBuilder] = Registry(
    "SAC reward kind",
    group=entry_point_group("sac_rewards"),
    builtins={
        "env": f"{__name__}:env_reward",
        "sparse": f"{__name__}:sparse_reward",
        VERIFIER_REWARD: f"{__name__}:verifier_reward",
        DISTILLED_REWARD: f"{__name__}:distilled_reward",
    },
)
"""``env.reward`` -> its :data:`SACRewardBuilder` (plugins: ``densereward.sac_rewards``)."""


def check_sac_reward(reward: str, base: str, *, prefix: str = "env.") -> None:
    """Raise unless ``reward`` is a registered kind and ``base`` one other than ``verifier``.

    Raises:
        ConfigError: naming the field, the registered kinds and a did-you-mean.
    """
    for field, name in (("reward", reward), ("base", base)):
        try:
            SAC_REWARDS.check(name)
        except ConfigError as e:
            raise ConfigError(f"{prefix}{field}: {e}") from None
    if base in (VERIFIER_REWARD, DISTILLED_REWARD):
        raise ConfigError(
            f"{prefix}base is the reward under the shaping term; not {base!r} (use sparse or env)"
        )


DESCRIBERS: Registry[Any] = Registry(
    "trajectory describer",
    group=entry_point_group("describers"),
    builtins={  # a describer of this package: one line here, env_ids on its class
        "fetch": "densereward.envs.describers:FetchDescriber",
        "box": "densereward.envs.describers:BoxDescriber",
        "metaworld": "densereward.envs.meta_world:MetaWorldDescriber",
    },
)
"""``env.describer`` -> a describer class with ``env_ids`` and ``for_env_id`` (plugins:
``densereward.describers``)."""


def _matches(env_id: str, patterns: Any) -> bool:
    ids = {env_id.lower(), env_id.split("/")[-1].lower()}
    return any(fnmatch.fnmatchcase(i, str(p).lower()) for p in patterns or () for i in ids)


def make_describer(env_id: str, task: str | None = None, *, name: str | None = None) -> Any:
    """The describer of ``env_id``: ``name`` if given, else the first registered describer
    (by name) whose ``env_ids`` match, else ``box`` with ``task``.

    Args:
        env_id: a Gymnasium id, e.g. ``"FetchReach-v4"``, or ``"module:Id"`` (matched and
            built as ``Id``).
        task: ``env.task``, the task text of describers with ``needs_task`` (``box``).
        name: ``env.describer``: a name in :data:`DESCRIBERS`; ``None`` = chosen by ``env_id``.

    Returns:
        A :class:`~densereward.progress_reward.TrajectoryDescriber`.

    Raises:
        ConfigError: for an unknown ``name`` (did-you-mean), or an env id no describer lists
            when no ``task`` is given, naming both ways out.
    """
    env_id = registered_id(env_id)  # "module:Id" is described as Id
    if name is None:
        for candidate in DESCRIBERS.names():
            if _matches(env_id, getattr(DESCRIBERS.load(candidate), "env_ids", ())):
                name = candidate
                break
    if name is None:
        if not task:
            raise ConfigError(
                f"{env_id!r} has no describer: none of {DESCRIBERS.names()} lists it in its "
                "env_ids. Set env.describer to one of them, or env.task (a task description) "
                "for the generic 'box' describer, or register one (docs/extending.md)"
            )
        name = "box"
    try:
        cls = DESCRIBERS.load(name)
    except ConfigError as e:
        raise ConfigError(f"env.describer: {e}") from None
    if getattr(cls, "needs_task", False):
        if not task:
            raise ConfigError(f"the {name!r} describer needs env.task (a task description)")
        return cls.for_env_id(env_id, task=task)
    return cls.for_env_id(env_id)
