"""Gymnasium wrappers: verifier progress as a dense reward, and a sparse-success baseline.

* :class:`VerifierProgressReward`: one environment; the reward becomes a function of the
  verifier's progress estimate ``Phi`` (potential-based shaping, raw progress or a mixture;
  the modes, the held potential between scorings and every choice are documented in
  :mod:`densereward.progress_reward`, the arithmetic in :mod:`densereward.shaping`).
* :class:`VecVerifierProgressReward` (:mod:`densereward.vec_env`): the SB3 ``VecEnvWrapper``
  that batches the verifier calls of all environments; loaded on first use, so
  ``import densereward.wrappers`` does not need stable-baselines3.
* :class:`SparseSuccessReward`: 1 on success else 0 (``compute_reward`` batched for HER).
* :class:`RewardModelShaping`: potential-based shaping from a distilled reward model
  (:mod:`densereward.reward_model`, ``densereward distill``), no verifier call at step time.

Wrapper order: ``Monitor(VerifierProgressReward(env, progress_fn, describer, gamma=0.99))``
(or ``VecMonitor`` around :class:`VecVerifierProgressReward`) so that SB3's
``rollout/ep_rew_mean`` is the reward the agent trains on; the environment's own reward stays
in ``info["true_reward"]``. ``progress_fn`` is e.g. ``verifier_progress_fn(Verifier())``,
``describer`` e.g. ``FetchDescriber.for_env_id("FetchReach-v4")``
(:mod:`densereward.envs.describers`), and ``gamma`` the agent's discount (README, "Python
API", has a runnable example).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from .errors import ConfigError, DataError
from .progress_reward import (
    ProgressCache,
    ProgressFn,
    ProgressRewardConfig,
    ProgressRewardCore,
    TrajectoryDescriber,
    VerifierCallStats,
    check_render_mode,
    verifier_progress_fn,
)
from .shaping import combine_reward, held_potentials, potential_shaping, shaped_rewards

if TYPE_CHECKING:
    from .vec_env import VecVerifierProgressReward

__all__ = [
    "ProgressFn",
    "TrajectoryDescriber",
    "ProgressRewardConfig",
    "VerifierCallStats",
    "ProgressCache",
    "ProgressRewardCore",
    "VerifierProgressReward",
    "VecVerifierProgressReward",
    "SparseSuccessReward",
    "RewardModelShaping",
    "potential_shaping",
    "held_potentials",
    "shaped_rewards",
    "combine_reward",
    "verifier_progress_fn",
]


def __getattr__(name: str) -> Any:
    # The SB3 wrapper is loaded on first use: `import densereward.wrappers` works without SB3.
    if name == "VecVerifierProgressReward":
        try:
            from .vec_env import VecVerifierProgressReward
        except ImportError as err:
            raise ImportError(
                "VecVerifierProgressReward needs stable-baselines3: "
                "pip install 'densereward[robotics]'"
            ) from err
        return VecVerifierProgressReward
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _frame(env: Any, stats: VerifierCallStats) -> Any:
    t0 = time.perf_counter()
    frame = env.render()
    if frame is None:
        raise ConfigError("render_frames needs an environment made with render_mode='rgb_array'")
    stats.render_seconds += time.perf_counter() - t0
    stats.n_frames += 1
    return frame


class VerifierProgressReward(gym.Wrapper):
    """Gymnasium wrapper: the reward becomes a function of verifier progress (single env).

    Wrap it in ``Monitor`` (outside) so SB3 logs the training reward. For several
    environments prefer :class:`VecVerifierProgressReward`, which batches verifier calls.

    Args:
        env: the environment (its reward is kept in ``info["true_reward"]``).
        progress_fn: see :data:`ProgressFn`.
        describer: a :class:`TrajectoryDescriber` for this environment's observations.
        config: :class:`ProgressRewardConfig` (default: online shaping, ``score_every=10``).
        gamma: the agent's discount, used when ``config.gamma`` is ``None``.

    With ``config.render_frames`` the environment must be made with
    ``render_mode="rgb_array"``; a frame is rendered at reset and at each scored step only.

    Raises:
        ConfigError: on invalid configuration (see :class:`ProgressRewardCore`), frames from
            an environment that does not render ``rgb_array``, or a progress function that
            cannot read frames.
    """

    def __init__(
        self,
        env: gym.Env,
        progress_fn: ProgressFn,
        describer: TrajectoryDescriber,
        config: ProgressRewardConfig | None = None,
        *,
        gamma: float | None = None,
    ) -> None:
        super().__init__(env)
        self.core = ProgressRewardCore(
            progress_fn, describer, config or ProgressRewardConfig(), gamma=gamma
        )
        check_render_mode(self.core.config, env.render_mode)

    @property
    def verifier_stats(self) -> VerifierCallStats:
        """Call accounting of the progress function."""
        return self.core.stats

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        frame = _frame(self.env, self.core.stats) if self.core.config.render_frames else None
        self.core.resolve(self.core.start(0, obs, frame))
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r_env, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        due = self.core.frame_due(0, done)  # frames of the scored states only
        frame = _frame(self.env, self.core.stats) if due else None
        self.core.resolve(self.core.advance(0, action, obs, float(r_env), done, frame))
        info = dict(info)
        r = self.core.reward(0, terminated=bool(terminated), done=done, info=info)
        return obs, r, terminated, truncated, info


class SparseSuccessReward(gym.Wrapper):
    """Reward 1 on a successful step (``info["is_success"]``), else 0: the sparse baseline.

    The environment's own reward is kept in ``info["true_reward"]``.

    Args:
        env: an environment whose ``step`` reports ``info["is_success"]`` (Fetch tasks do).
        terminate_on_success: also end the episode (``terminated=True``) on success.

    Raises:
        DataError: at the first step whose ``info`` lacks ``is_success``.
    """

    def __init__(self, env: gym.Env, *, terminate_on_success: bool = False) -> None:
        super().__init__(env)
        self.terminate_on_success = terminate_on_success

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r_env, terminated, truncated, info = self.env.step(action)
        if "is_success" not in info:
            raise DataError(
                "SparseSuccessReward needs info['is_success'] from "
                f"{self.env.spec.id if self.env.spec else self.env}, whose step info has none: "
                "use its own reward (env.reward=env, or env.base=env under the verifier)"
            )
        info = dict(info)
        info.setdefault("true_reward", float(r_env))
        success = bool(info["is_success"])
        if self.terminate_on_success and success:
            terminated = True
        return obs, float(success), terminated, truncated, info

    def compute_reward(
        self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any = None
    ) -> np.ndarray:
        """This wrapper's reward for any goals: what SB3's ``HerReplayBuffer`` relabels with.

        HER (Andrychowicz et al. 2017) recomputes the rewards of replayed transitions for
        substituted goals through ``env_method("compute_reward", ...)``, which finds this
        method before the wrapped environment's (Fetch: ``-1``/``0``), so relabelled rewards
        are on the same ``1``/``0`` scale as the rewards given during the episode. Success is
        the Gymnasium-Robotics goal test (``MujocoFetchEnv._is_success``):
        ``||achieved_goal - desired_goal||_2 < distance_threshold``.

        Args:
            achieved_goal: ``(B, G)`` goals reached (Fetch: ``G = 3``, metres), or one ``(G,)``.
            desired_goal: the goals, same shape as ``achieved_goal``.
            info: ignored (HER passes one dict per row, or a single dict).

        Returns:
            ``(B,)`` float32 in ``{0, 1}`` (1 = within the threshold); a float32 scalar for
            ``(G,)`` inputs. Row ``i`` equals the call on row ``i`` alone.

        Raises:
            ConfigError: if the environment has no ``distance_threshold`` (not a goal
                environment).
            DataError: if the shapes differ.
        """
        threshold = getattr(self.env.unwrapped, "distance_threshold", None)
        if threshold is None:
            raise ConfigError(
                f"compute_reward needs a goal environment with distance_threshold; "
                f"{self.env.spec.id if self.env.spec else self.env} has none"
            )
        a = np.asarray(achieved_goal, dtype=np.float64)
        d = np.asarray(desired_goal, dtype=np.float64)
        if a.shape != d.shape or a.ndim not in (1, 2):
            raise DataError(
                f"achieved_goal {a.shape} and desired_goal {d.shape} must both be (B, G) or (G,)"
            )
        return (np.linalg.norm(a - d, axis=-1) < float(threshold)).astype(np.float32)


class RewardModelShaping(gym.Wrapper):
    """``r + F`` with ``F = gamma * Phi(s') - Phi(s)``, ``Phi`` a distilled reward model's potential.

    Potential-based shaping (Ng, Harada & Russell 1999, eq. 2; ``Phi(terminal) = 0``) with
    ``Phi`` = :meth:`densereward.reward_model.RewardModel.potential` of the raw observation, in
    ``[0, 1]``, read at every step (one small MLP forward, no verifier call). The base reward
    ``r`` is the wrapped environment's (e.g. :class:`SparseSuccessReward`); the environment's
    own reward stays in ``info["true_reward"]``, the shaping term is ``info["shaping"]``.

    Attributes:
        n_calls: potentials computed; ``seconds``: the time they took (the model's share of a
            step).

    Args:
        env: the environment with its base reward.
        model: a :class:`~densereward.reward_model.RewardModel` (``load_reward_model(dir)``).
        gamma: the agent's discount, in ``[0, 1]``.

    Raises:
        ConfigError: if ``gamma`` is outside ``[0, 1]``.
    """

    def __init__(self, env: gym.Env, model: Any, gamma: float) -> None:
        super().__init__(env)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
        self.model = model
        self.gamma = float(gamma)
        self.n_calls = 0
        self.seconds = 0.0
        self._phi = 0.0

    def _potential(self, obs: Any) -> float:
        t0 = time.perf_counter()
        phi = float(self.model.potential(obs)[0])
        self.seconds += time.perf_counter() - t0
        self.n_calls += 1
        return phi

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._phi = self._potential(obs)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r, terminated, truncated, info = self.env.step(action)
        phi_next = self._potential(obs)
        f = potential_shaping(self._phi, phi_next, self.gamma, terminated=bool(terminated))
        self._phi = phi_next
        info = dict(info)
        info.setdefault("true_reward", float(r))
        info["shaping"] = f
        info["potential"] = phi_next
        return obs, float(r) + f, terminated, truncated, info
