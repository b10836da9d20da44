"""SAC reward kinds and trajectory describers: the registries behind ``env.reward`` and ``env.describer``.

Two :class:`~densereward.registry.Registry` instances, each with plugins from an entry-point
group (docs/extending.md):

* :data:`SAC_REWARDS` (``densereward.sac_rewards``): ``env.reward`` / ``env.base`` -> a
  :class:`SACRewardKind`: a builder with the signature of :data:`SACRewardBuilder`,
  ``build(env, ctx) -> env``, which wraps one freshly made environment so that its reward is
  the kind's, and its options dataclass (``env.reward_options``). Built in: ``env``
  (the registered reward), ``sparse`` (1 on success else 0), ``verifier`` (the base reward
  ``env.base``; the verifier progress term is added around it by :func:`~densereward.envs.make_env`
  / :func:`~densereward.envs.make_vec_env`, batched over the vector environment) and
  ``distilled`` (the base reward plus shaping from the reward model in ``env.reward_model``).
* :data:`DESCRIBERS` (``densereward.describers``): ``env.describer`` -> a
  :class:`DescriberSpec`: the describer class, the env ids it describes (``fnmatch`` patterns,
  case-insensitive, matched against the id with and without its namespace) and its
  ``priority`` among the describers that match one id; it is built with
  ``Class.for_env_id(env_id)``, with ``needs_task`` also given ``task=env.task`` (the generic
  ``box`` describer). :func:`make_describer` picks one.

Adding either is one file plus one line: the builder or class in your module, and its
``"module:attr"`` in the ``builtins`` below (a describer of this package), in
``SAC_REWARDS.register(...)`` / ``DESCRIBERS.register(...)`` at run time, or as an entry point::

    [project.entry-points."densereward.sac_rewards"]
    distance = "my_pkg.rewards:DISTANCE"   # SACRewardKind(build=distance, options=...)

    [project.entry-points."densereward.describers"]
    pendulum = "my_pkg.describers:PENDULUM"  # DescriberSpec(PendulumDescriber, ("Pendulum-*",))

Something that is not a :class:`SACRewardKind` / :class:`DescriberSpec` is refused when it is
registered (an object) or first loaded (a ``"module:attr"`` string).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, RegistryError
from ..registry import Registry, entry_point_group, instances_of
from .registration import registered_id

__all__ = [
    "DESCRIBERS",
    "SAC_REWARDS",
    "VERIFIER_REWARD",
    "DescriberSpec",
    "SACRewardBuilder",
    "SACRewardContext",
    "SACRewardKind",
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
    options: Any = None
    """``env.reward_options`` validated into the options dataclass of the kind that builds the
    reward (``env.base``'s under ``verifier`` / ``distilled``), or ``None``."""


SACRewardBuilder = Callable[[Any, SACRewardContext], Any]
"""``build(env: gymnasium.Env, ctx: SACRewardContext) -> gymnasium.Env``: wrap one environment
(``gym.make`` output, time limit included) so that ``step`` returns this kind's reward;
``info["is_success"]`` must survive (the success curve reads it). Called once per
environment, in the process that steps it."""


@dataclass(frozen=True)
class SACRewardKind:
    """A SAC reward kind: its builder, its options and whether it shapes a base reward."""

    build: SACRewardBuilder
    """``build(env, ctx) -> env`` (:data:`SACRewardBuilder`)."""
    options: type | None = None
    """A (frozen) dataclass of its parameters: YAML ``env.reward_options: {...}`` is validated
    into it when the config is read and reaches the builder as ``ctx.options``."""
    shapes_base: bool = False
    """It adds shaping around the base reward ``env.base`` (``verifier``, ``distilled``), so it
    cannot be a base itself; ``env.reward_options`` then belong to the base kind."""
    check_config: Callable[[Any], None] | None = None
    """``check_config(env_config)``: its checks of the ``env:`` section (``ConfigError``)."""

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise RegistryError(f"SACRewardKind.build must be callable, got {self.build!r}")
        if self.options is not None and not dataclasses.is_dataclass(self.options):
            raise RegistryError(f"SACRewardKind.options must be a dataclass, got {self.options!r}")


def env_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``env``: the environment's own reward as registered (``FetchReach-v4``: -1 / 0)."""
    return env


def sparse_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``sparse``: 1 on a successful step else 0 (:class:`~densereward.wrappers.SparseSuccessReward`)."""
    from ..wrappers import SparseSuccessReward

    return SparseSuccessReward(env)


def verifier_reward(env: Any, ctx: SACRewardContext) -> Any:
    """``verifier``: the base reward ``ctx.base``; the verifier term is added around it."""
    return SAC_REWARDS.load(ctx.base).build(env, ctx)


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
    base = SAC_REWARDS.load(ctx.base).build(env, ctx)
    gamma = 0.99 if ctx.gamma is None else ctx.gamma
    return RewardModelShaping(base, load_reward_model(ctx.reward_model), gamma)


def _check_distilled(env_config: Any) -> None:
    if not getattr(env_config, "reward_model", None):
        raise ConfigError(
            "env.reward: distilled needs env.reward_model, the directory `densereward "
            "distill` wrote (e.g. env.reward_model=runs/rm-fetchpush)"
        )


SAC_REWARDS: Registry[SACRewardKind] = Registry(
    "SAC reward kind",
    group=entry_point_group("sac_rewards"),
    builtins={
        "env": SACRewardKind(env_reward),
        "sparse": SACRewardKind(sparse_reward),
        VERIFIER_REWARD: SACRewardKind(verifier_reward, shapes_base=True),
        DISTILLED_REWARD: SACRewardKind(
            distilled_reward, shapes_base=True, check_config=_check_distilled
        ),
    },
    check=instances_of(
        SACRewardKind, "SAC reward kind", "wrap a builder as SACRewardKind(build=your_function)"
    ),
)
"""``env.reward`` -> its :class:`SACRewardKind` (plugins: ``densereward.sac_rewards``)."""


def sac_reward_kind(name: str, *, field: str = "env.reward") -> SACRewardKind:
    """The :class:`SACRewardKind` registered as ``name``.

    Raises:
        ConfigError: naming ``field``: an unknown name (did-you-mean), an entry that cannot be
            imported or is not a :class:`SACRewardKind`.
    """
    try:
        return SAC_REWARDS.load(name)
    except ConfigError as e:
        raise ConfigError(f"{field}: {e}") from None


def check_sac_reward(reward: str, base: str, *, prefix: str = "env.") -> None:
    """Raise unless ``reward`` is a registered kind and ``base`` one that shapes no base.

    Raises:
        ConfigError: naming the field, the registered kinds and a did-you-mean.
    """
    for field, name in (("reward", reward), ("base", base)):
        try:
            SAC_REWARDS.check(name)
        except ConfigError as e:
            raise ConfigError(f"{prefix}{field}: {e}") from None
    if sac_reward_kind(base, field=f"{prefix}base").shapes_base:
        raise ConfigError(
            f"{prefix}base is the reward under the shaping term; not {base!r} (use sparse or env)"
        )


def reward_options(reward: str, base: str, given: Any) -> Any:
    """``env.reward_options`` validated into the options dataclass of the kind that builds the
    reward: ``reward``'s, or ``base``'s under a kind that shapes a base (``verifier``).

    Raises:
        ConfigError: as :func:`densereward.rewards.kinds.options_of`, naming ``env.reward_options``.
    """
    from ..rewards.kinds import options_of

    name = base if sac_reward_kind(reward).shapes_base else reward
    return options_of(
        sac_reward_kind(name),
        given,
        name=name,
        field="env.reward_options",
        owner=f"env.reward={reward}" + (f" on env.base={base}" if name != reward else ""),
    )


@dataclass(frozen=True)
class DescriberSpec:
    """A trajectory describer: its class, the env ids it describes and its priority.

    >>> from densereward.envs.describers import FetchDescriber
    >>> spec = DescriberSpec(FetchDescriber, env_ids=("FetchReach*",), priority=10)
    >>> spec.matches("gymnasium_robotics/FetchReach-v4"), spec.matches("FetchPush-v4")
    (True, False)
    """

    cls: Any
    """The describer class (a :class:`~densereward.progress_reward.TrajectoryDescriber`), built
    with ``cls.for_env_id(env_id)`` (and ``task=env.task`` with ``needs_task``)."""
    env_ids: tuple[str, ...] = ()
    """``fnmatch`` patterns (case-insensitive) of the env ids it is chosen for when
    ``env.describer`` is unset, matched against the id with and without its namespace; empty:
    only by name."""
    priority: int = 0
    """Among the describers that match one id, the highest priority is chosen (and the choice
    said once, with the others); a tie at the top is refused, naming them."""
    needs_task: bool = False
    """``for_env_id`` also takes ``task=env.task`` (required)."""

    def __post_init__(self) -> None:
        if not callable(getattr(self.cls, "for_env_id", None)):
            raise RegistryError(
                f"DescriberSpec.cls must be a describer class with a for_env_id classmethod, got "
                f"{self.cls!r}"
            )
        patterns = (self.env_ids,) if isinstance(self.env_ids, str) else tuple(self.env_ids)
        object.__setattr__(self, "env_ids", patterns)

    def matches(self, env_id: str) -> bool:
        """Whether ``env_id`` (with or without its namespace) matches one of :attr:`env_ids`."""
        ids = {env_id.lower(), env_id.split("/")[-1].lower()}
        return any(fnmatch.fnmatchcase(i, p.lower()) for p in self.env_ids for i in ids)


DESCRIBERS: Registry[DescriberSpec] = Registry(
    "trajectory describer",
    group=entry_point_group("describers"),
    builtins={  # a describer of this package: one line here, its DescriberSpec beside its class
        "fetch": "densereward.envs.describers:FETCH",
        "box": "densereward.envs.describers:BOX",
        "metaworld": "densereward.envs.meta_world:METAWORLD",
    },
    check=instances_of(
        DescriberSpec,
        "trajectory describer",
        "declare DescriberSpec(YourDescriber, env_ids=(...,), priority=0)",
    ),
)
"""``env.describer`` -> a :class:`DescriberSpec` (plugins: ``densereward.describers``)."""

_log = logging.getLogger(__name__)
_SAID: set[tuple[str, str]] = set()


def make_describer(env_id: str, task: str | None = None, *, name: str | None = None) -> Any:
    """The describer of ``env_id``: ``name`` if given, else the matching describer of the
    highest priority, else ``box`` with ``task``.

    When more than one registered describer matches ``env_id``, the one of the highest
    :attr:`DescriberSpec.priority` is chosen and a warning (once per id) names the others and
    ``env.describer``; a tie at the top is refused.

    Args:
        env_id: a Gymnasium id, e.g. ``"FetchReach-v4"``, or ``"module:Id"`` (matched and
            built as ``Id``).
        task: ``env.task``, the task text of describers with ``needs_task`` (``box``).
        name: ``env.describer``: a name in :data:`DESCRIBERS`; ``None`` = chosen by ``env_id``.

    Returns:
        A :class:`~densereward.progress_reward.TrajectoryDescriber`.

    Raises:
        ConfigError: for an unknown ``name`` (did-you-mean), two matching describers of the
            same top priority, or an env id no describer lists when no ``task`` is given,
            naming the ways out.
    """
    env_id = registered_id(env_id)  # "module:Id" is described as Id
    if name is None:
        name = _chosen(env_id)
    if name is None:
        if not task:
            raise ConfigError(
                f"{env_id!r} has no describer: none of {DESCRIBERS.names()} lists it in its "
                "env_ids. Set env.describer to one of them, or env.task (a task description) "
                "for the generic 'box' describer, or register one (docs/extending.md)"
            )
        name = "box"
    try:
        spec = DESCRIBERS.load(name)
    except ConfigError as e:
        raise ConfigError(f"env.describer: {e}") from None
    if spec.needs_task:
        if not task:
            raise ConfigError(f"the {name!r} describer needs env.task (a task description)")
        return spec.cls.for_env_id(env_id, task=task)
    return spec.cls.for_env_id(env_id)


def _chosen(env_id: str) -> str | None:
    """The name of the matching describer of the highest priority (``None``: none matches)."""
    found = [(n, DESCRIBERS.load(n)) for n in DESCRIBERS.names()]
    found = sorted(((n, s) for n, s in found if s.matches(env_id)), key=lambda x: -x[1].priority)
    if len(found) < 2:
        return found[0][0] if found else None
    listed = ", ".join(f"{n} (priority {s.priority})" for n, s in found)
    if found[0][1].priority == found[1][1].priority:
        raise ConfigError(
            f"{env_id!r} matches describers {listed}, two of the same top priority: set "
            "env.describer to the one to use"
        )
    if (env_id, found[0][0]) not in _SAID:
        _SAID.add((env_id, found[0][0]))
        _log.warning(
            "%r matches describers %s: using %r (the highest priority); set env.describer to "
            "use another (said once)",
            env_id,
            listed,
            found[0][0],
        )
    return found[0][0]
