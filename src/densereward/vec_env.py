"""SB3 ``VecEnvWrapper`` for verifier progress rewards: one batched verifier call per vector step.

Needs stable-baselines3 (``pip install densereward[robotics]``); the reward logic is
:class:`densereward.progress_reward.ProgressRewardCore`, shared with the Gymnasium wrapper.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper

from .errors import ConfigError, StateError
from .progress_reward import (
    ProgressFn,
    ProgressRewardConfig,
    ProgressRewardCore,
    TrajectoryDescriber,
    VerifierCallStats,
    check_render_mode,
)

__all__ = ["VecVerifierProgressReward"]


class VecVerifierProgressReward(VecEnvWrapper):
    """SB3 ``VecEnvWrapper``: verifier-progress reward with one batched call per vector step.

    All environments whose scoring is due at a step (every ``score_every`` steps, the
    final state, and the first state of the episodes that auto-reset) are scored together
    in a single ``progress_fn`` call, after the cache. Wrap it in ``VecMonitor`` so SB3's
    ``rollout/ep_rew_mean`` is the training reward.

    Args:
        venv: the vectorised environment (e.g. ``DummyVecEnv``), with the raw env reward.
        progress_fn: as in :class:`VerifierProgressReward`.
        describer: as in :class:`VerifierProgressReward`.
        config: as in :class:`VerifierProgressReward`.
        gamma: as in :class:`VerifierProgressReward`.

    Raises:
        ConfigError: on invalid configuration.
    """

    def __init__(
        self,
        venv: Any,
        progress_fn: ProgressFn,
        describer: TrajectoryDescriber,
        config: ProgressRewardConfig | None = None,
        *,
        gamma: float | None = None,
    ) -> None:
        super().__init__(venv)
        self.core = ProgressRewardCore(
            progress_fn,
            describer,
            config or ProgressRewardConfig(),
            gamma=gamma,
            n_envs=venv.num_envs,
        )
        check_render_mode(self.core.config, getattr(venv, "render_mode", None))
        self._actions: np.ndarray | None = None

    @property
    def verifier_stats(self) -> VerifierCallStats:
        """Call accounting of the progress function."""
        return self.core.stats

    def __getstate__(self) -> dict[str, Any]:
        # SB3's VecEnvWrapper keeps its class's members (mappingproxies) in class_attributes,
        # which do not pickle (VecNormalize drops them too); the progress function pickles
        # with a built verifier as its recipe. The wrapped venv goes along: a DummyVecEnv of
        # picklable environments does, a SubprocVecEnv does not (its workers are processes).
        state = self.__dict__.copy()
        del state["class_attributes"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.class_attributes = dict(inspect.getmembers(self.__class__))

    def _frames(self, indices: Sequence[int]) -> list[Any]:
        if not self.core.config.render_frames:
            return [None] * len(indices)
        return [_frame_or_raise(f) for f in self.venv.env_method("render", indices=list(indices))]

    def reset(self) -> Any:
        obs = self.venv.reset()
        frames = self._frames(range(self.num_envs))
        queries = []
        for i in range(self.num_envs):
            queries += self.core.start(i, _index_obs(obs, i), frames[i])
        self.core.resolve(queries)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)
        self.venv.step_async(actions)

    def step_wait(self) -> Any:
        obs, r_env, dones, infos = self.venv.step_wait()
        if self._actions is None:
            raise StateError("step_wait() called before step_async()")
        frames = (
            self._frames(range(self.num_envs))
            if self.core.config.render_frames
            else [None] * self.num_envs
        )
        queries = []
        for i in range(self.num_envs):
            last = (
                infos[i].get("terminal_observation", _index_obs(obs, i))
                if dones[i]
                else _index_obs(obs, i)
            )
            # after an auto-reset the rendered frame already shows the next episode; drop it
            queries += self.core.advance(
                i,
                self._actions[i],
                last,
                float(r_env[i]),
                bool(dones[i]),
                None if dones[i] else frames[i],
            )
        self.core.resolve(queries)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        for i in range(self.num_envs):
            terminated = bool(dones[i]) and not infos[i].get("TimeLimit.truncated", False)
            rewards[i] = self.core.reward(
                i, terminated=terminated, done=bool(dones[i]), info=infos[i]
            )
        restarts = []
        for i in np.flatnonzero(dones):
            restarts += self.core.start(int(i), _index_obs(obs, int(i)), frames[int(i)])
        self.core.resolve(restarts)  # Phi(s_0) of the new episodes, one more batched call
        return obs, rewards, dones, infos


def _frame_or_raise(frame: Any) -> Any:
    if frame is None:
        raise ConfigError("render_frames needs environments made with render_mode='rgb_array'")
    return frame


def _index_obs(obs: Any, i: int) -> Any:
    """Observation of environment ``i`` from a batched (dict of) array(s)."""
    if isinstance(obs, dict):
        return {k: v[i] for k, v in obs.items()}
    return obs[i]
