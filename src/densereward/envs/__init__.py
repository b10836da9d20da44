"""Robot environments for the SAC trainer: registration, reward variants and describers.

:func:`make_env` builds one environment with a given reward; :func:`make_vec_env` builds
the vectorised training environment with the wrapper order SB3 needs (``Monitor`` /
``VecMonitor`` outermost, so ``rollout/ep_rew_mean`` is the reward the agent trains on).

Reward variants (``reward=``):

* ``"env"``: the environment's own reward as registered (``FetchReach-v4``: sparse
  ``-1``/``0``; ``FetchReachDense-v4``: negative distance).
* ``"sparse"``: :class:`densereward.wrappers.SparseSuccessReward`, 1 on success else 0.
* ``"verifier"``: verifier progress (:class:`densereward.wrappers.VerifierProgressReward`),
  built on the sparse-success reward when ``base="sparse"`` (the default; shaping then adds
  ``F`` to the success indicator) or on the environment's own reward (``base="env"``).
* ``"distilled"``: the base reward plus shaping from a distilled reward model
  (:class:`densereward.wrappers.RewardModelShaping`, ``reward_model=`` its directory).

The kinds are a registry, :data:`SAC_REWARDS` (:mod:`densereward.envs.kinds`), as are the
describers (:data:`DESCRIBERS`): a plugin adds either through an entry point
(docs/extending.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from ..errors import ConfigError
from ..progress_reward import ProgressFn, ProgressRewardConfig, TrajectoryDescriber
from ..vec_env import VecVerifierProgressReward
from ..wrappers import VerifierProgressReward
from .describers import BoxDescriber, FetchDescriber, RenderHook, rendering_available
from .kinds import (
    DESCRIBERS,
    SAC_REWARDS,
    VERIFIER_REWARD,
    SACRewardContext,
    check_sac_reward,
    make_describer,
)
from .meta_world import MetaWorldDescriber
from .registration import import_env_module, register_robotics, require_registered

__all__ = [
    "register_robotics",
    "import_env_module",
    "require_registered",
    "make_env",
    "make_vec_env",
    "reports_success",
    "SUCCESS_KEY",
    "default_describer",
    "make_describer",
    "DESCRIBERS",
    "SAC_REWARDS",
    "SACRewardContext",
    "FetchDescriber",
    "BoxDescriber",
    "MetaWorldDescriber",
    "RenderHook",
    "rendering_available",
]

RewardKind = str
"""A name in :data:`SAC_REWARDS`: ``"env"``, ``"sparse"``, ``"verifier"`` or a plugin's."""

SUCCESS_KEY = "is_success"
"""The ``info`` key of a successful step (Fetch, Meta-World). An environment without it (e.g.
``Pendulum-v1``) trains as well; its success-rate metrics are left out, never counted as 0."""

logger = logging.getLogger(__name__)
_NO_SUCCESS_SAID: set[str] = set()


def reports_success(env: gym.Env, env_id: str) -> bool:
    """Whether a step of ``env`` reports ``info["is_success"]``: one reset and one random step.

    The step's action is drawn from a copy of the action space (the space's own random state is
    untouched); the next ``reset(seed=...)`` starts the environment afresh. When the key is
    missing, one warning per id says that its success-rate metrics are off.

    Args:
        env: a freshly made environment (the reward kind's wrapper included).
        env_id: its id, for the warning.

    Returns:
        ``True`` when the step's ``info`` holds ``is_success``.
    """
    import copy

    env.reset()
    info = env.step(copy.deepcopy(env.action_space).sample())[4]
    if SUCCESS_KEY in info:
        return True
    if env_id not in _NO_SUCCESS_SAID:
        _NO_SUCCESS_SAID.add(env_id)
        logger.warning(
            "success-rate metrics are off for %s: its step info has no 'is_success', so success "
            "rates (eval/success_rate, verifier/tpr, ...) are left out, not counted as failures "
            "(said once)",
            env_id,
        )
    return False


def default_describer(
    env_id: str, task: str | None = None, *, name: str | None = None
) -> TrajectoryDescriber:
    """:class:`FetchDescriber` for FetchReach/FetchPush ids, :class:`MetaWorldDescriber` for
    ``densereward/MetaWorld-*`` ids, else :class:`BoxDescriber` with ``task``.

    The choice is :func:`~densereward.envs.kinds.make_describer`'s: ``name`` (``env.describer``)
    if given, else the registered describer (:data:`DESCRIBERS`) whose ``env_ids`` match.

    Raises:
        ConfigError: for an unknown ``name``, or an env no describer lists without a ``task``.
    """
    return make_describer(env_id, task, name=name)


def _base_env(
    env_id: str,
    *,
    reward: RewardKind,
    base: str,
    render_mode: str | None,
    reward_model: str | None = None,
    reward_options: Any = None,
    gamma: float | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    check_sac_reward(reward, base)
    register_robotics()
    name = require_registered(env_id)  # "module:Id": import module (it registers Id), make Id
    if render_mode is not None:  # passed only when asked for: an env may take no render_mode
        env_kwargs = {"render_mode": render_mode, **env_kwargs}
    env = gym.make(name, **env_kwargs)
    from .kinds import reward_options as options_of  # a mapping validated; None: the defaults

    options = options_of(reward, base, reward_options)
    ctx = SACRewardContext(
        env_id=name, base=base, reward_model=reward_model, gamma=gamma, options=options
    )
    return SAC_REWARDS.load(reward).build(env, ctx)


def make_env(
    env_id: str,
    *,
    reward: RewardKind = "env",
    base: str = "sparse",
    progress_fn: ProgressFn | None = None,
    describer: TrajectoryDescriber | None = None,
    reward_config: ProgressRewardConfig | None = None,
    gamma: float | None = None,
    monitor: bool = True,
    render_mode: str | None = None,
    reward_model: str | None = None,
    reward_options: Any = None,
    **env_kwargs: Any,
) -> gym.Env:
    """One environment with the requested reward, ``Monitor`` outermost.

    Args:
        env_id: a registered id, e.g. ``"FetchReach-v4"``, or Gymnasium's ``"module:Id"`` form
            (``"myreach:Reach1D-v0"``: ``module`` is imported first, which registers ``Id``;
            docs/extending.md, "Bring your own environment").
        reward: a kind of :data:`SAC_REWARDS`: ``"env"`` | ``"sparse"`` | ``"verifier"`` | a
            plugin's.
        base: for ``"verifier"``: the kind under the verifier term (``"sparse"``, ``"env"``, ...).
        progress_fn: required for ``"verifier"`` (see :data:`densereward.wrappers.ProgressFn`).
        describer: trajectory describer; default from :func:`default_describer`.
        reward_config: :class:`ProgressRewardConfig`.
        gamma: the agent's discount (for shaping when ``reward_config.gamma`` is ``None``).
        monitor: wrap in SB3's ``Monitor``; it records ``is_success`` too when a step reports it
            (:func:`reports_success`: one reset and one step before it is returned).
        render_mode: ``None`` (default; no rendering) or ``"rgb_array"``.
        reward_model: for ``"distilled"``: the reward model directory (``densereward distill``);
            its shaping uses ``gamma`` (0.99 when ``None``).
        reward_options: the reward kind's options (``env.reward_options``): an instance of its
            :class:`~densereward.envs.kinds.SACRewardKind` options class or a mapping (validated
            into one); ``None``: its defaults.
        **env_kwargs: passed to ``gym.make``.

    Raises:
        ConfigError: on an unknown id or reward, a ``module`` of ``"module:Id"`` that cannot be
            imported, ``"verifier"`` without ``progress_fn``, or ``"distilled"`` without a
            readable ``reward_model``.
    """
    env = _base_env(
        env_id,
        reward=reward,
        base=base,
        render_mode=render_mode,
        reward_model=reward_model,
        reward_options=reward_options,
        gamma=gamma,
        **env_kwargs,
    )
    success = monitor and reports_success(env, env_id)
    if reward == VERIFIER_REWARD:
        if progress_fn is None:
            raise ConfigError(
                "reward='verifier' needs a progress_fn (e.g. verifier_progress_fn(Verifier(...)))"
            )
        env = VerifierProgressReward(
            env, progress_fn, describer or default_describer(env_id), reward_config, gamma=gamma
        )
    if monitor:
        from stable_baselines3.common.monitor import Monitor

        env = Monitor(env, info_keywords=(SUCCESS_KEY,) if success else ())
    return env


def make_vec_env(
    env_id: str,
    n_envs: int = 1,
    *,
    seed: int = 0,
    reward: RewardKind = "env",
    base: str = "sparse",
    progress_fn: ProgressFn | None = None,
    describer: TrajectoryDescriber | None = None,
    reward_config: ProgressRewardConfig | None = None,
    gamma: float | None = None,
    monitor_dir: str | os.PathLike[str] | None = None,
    render_mode: str | None = None,
    reward_model: str | None = None,
    reward_options: Any = None,
    **env_kwargs: Any,
) -> Any:
    """``VecMonitor(VecVerifierProgressReward(DummyVecEnv([...])))`` (verifier is skipped for other rewards).

    One batched verifier call per vector step serves all ``n_envs`` environments. ``env_id``,
    ``reward``, ``base``, ``progress_fn``, ``describer``, ``reward_config``, ``gamma``,
    ``render_mode``, ``reward_model``, ``reward_options`` and ``env_kwargs`` are as in :func:`make_env`. ``VecMonitor`` records
    ``is_success`` when a step of the environment reports it (:func:`reports_success` on the
    first environment, before the seeded first reset), so ``"is_success" in
    venv.info_keywords`` says whether success rates exist; an environment without it (e.g.
    ``Pendulum-v1``) is said once and its success rates are left out.

    Args:
        n_envs: number of environments (>= 1), stepped in-process (``DummyVecEnv``).
        seed: environment ``i`` is seeded with ``seed + i``.
        monitor_dir: where ``VecMonitor`` writes ``monitor.csv`` (``None``: not written).

    Raises:
        ConfigError: as :func:`make_env`, or ``n_envs < 1``.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    if n_envs < 1:
        raise ConfigError(f"env.n_envs must be >= 1, got {n_envs}")
    if reward == VERIFIER_REWARD and progress_fn is None:
        raise ConfigError(
            "reward='verifier' needs a progress_fn (e.g. verifier_progress_fn(Verifier(...)))"
        )

    def thunk(i: int) -> Callable[[], gym.Env]:
        return lambda: _base_env(
            env_id,
            reward=reward,
            base=base,
            render_mode=render_mode,
            reward_model=reward_model,
            reward_options=reward_options,
            gamma=gamma,
            **env_kwargs,
        )

    venv = DummyVecEnv([thunk(i) for i in range(n_envs)])
    venv.spec = venv.envs[0].spec  # VecMonitor's monitor.csv header names it ("env_id")
    success = reports_success(venv.envs[0], env_id)  # before the seeded first reset
    venv.seed(seed)
    if reward == VERIFIER_REWARD:
        venv = VecVerifierProgressReward(
            venv, progress_fn, describer or default_describer(env_id), reward_config, gamma=gamma
        )
    filename = None if monitor_dir is None else os.path.join(os.fspath(monitor_dir), "monitor.csv")
    return VecMonitor(venv, filename=filename, info_keywords=(SUCCESS_KEY,) if success else ())
